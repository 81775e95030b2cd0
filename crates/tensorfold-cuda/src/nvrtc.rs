//! Kernel delivery: the CUDA C sources embedded in the binary, compiled by NVRTC straight to a cubin for the
//! device's architecture (no PTX JIT), cached on disk under a hash of source, options, NVRTC and driver versions.

use sha2::{Digest, Sha256};
use std::ffi::{CStr, CString};
use std::path::PathBuf;

/// The kernel files, in the order they are concatenated into one program (the prelude first).
pub const SOURCES: &[(&str, &str)] = &[
    ("common.cu", include_str!("../kernels/common.cu")),
    ("project.cu", include_str!("../kernels/project.cu")),
    ("project_mma.cu", include_str!("../kernels/project_mma.cu")),
    (
        "project_stream.cu",
        include_str!("../kernels/project_stream.cu"),
    ),
    (
        "project_gemm.cu",
        include_str!("../kernels/project_gemm.cu"),
    ),
    (
        "project_wgmma.cu",
        include_str!("../kernels/project_wgmma.cu"),
    ),
    (
        "project_wgmma_bf16.cu",
        include_str!("../kernels/project_wgmma_bf16.cu"),
    ),
    ("rowwise.cu", include_str!("../kernels/rowwise.cu")),
    ("attention.cu", include_str!("../kernels/attention.cu")),
    (
        "attention_tiles.cu",
        include_str!("../kernels/attention_tiles.cu"),
    ),
    (
        "attention_lanes.cu",
        include_str!("../kernels/attention_lanes.cu"),
    ),
    (
        "attention_block.cu",
        include_str!("../kernels/attention_block.cu"),
    ),
    (
        "project_wgmma_gemm.cu",
        include_str!("../kernels/project_wgmma_gemm.cu"),
    ),
    (
        "project_wgmma_gemm_pipe.cu",
        include_str!("../kernels/project_wgmma_gemm_pipe.cu"),
    ),
    ("deltanet.cu", include_str!("../kernels/deltanet.cu")),
    (
        "deltanet_batch.cu",
        include_str!("../kernels/deltanet_batch.cu"),
    ),
    (
        "deltanet_octets.cu",
        include_str!("../kernels/deltanet_octets.cu"),
    ),
    ("sample.cu", include_str!("../kernels/sample.cu")),
];

/// The whole program as NVRTC sees it.
pub fn program_source() -> String {
    let mut s = String::new();
    for (name, text) in SOURCES {
        s.push_str(&format!("// ---- {name}\n"));
        s.push_str(text);
        s.push('\n');
    }
    s
}

/// Compiler options for a real architecture such as `sm_90` (IEEE division and sqrt, no fast math).
/// `TENSORFOLD_CUDA_DEFINES` adds `-D` macros (space-separated, e.g. a kernel ablation switch for a timing run); it
/// is part of the cache key like every option.
pub fn options(arch: &str) -> Vec<String> {
    let mut opts = vec![
        format!("--gpu-architecture={arch}"),
        "--std=c++17".into(),
        "--fmad=true".into(),
        "-default-device".into(),
    ];
    if crate::project::rows_apart() {
        opts.push("-DTF_ROWS_APART".into());
    }
    if crate::project::gemm_tiles_first() {
        opts.push("-DTF_GEMM_TILES_FIRST".into());
    }
    let stages = crate::project::bf16_stages();
    if stages != crate::project::BF16_STAGES {
        opts.push(format!("-DWG_BF16_STAGES={stages}"));
    }
    if let Ok(defines) = std::env::var("TENSORFOLD_CUDA_DEFINES") {
        opts.extend(
            defines
                .split_whitespace()
                .filter(|d| d.starts_with("-D") && d.len() > 2)
                .map(String::from),
        );
    }
    opts
}

/// NVRTC's version (major, minor); NVRTC must already be loadable (`libs::ensure_nvrtc`).
pub fn nvrtc_version() -> Result<(i32, i32), String> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: plain out-parameters; the library was checked to be present.
    unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| format!("nvrtcVersion: {e:?}"))?;
    Ok((major, minor))
}

/// Compiles `src` to a cubin; on failure the error carries NVRTC's log.
pub fn compile_cubin(src: &str, opts: &[String]) -> Result<Vec<u8>, String> {
    use cudarc::nvrtc::{result, sys};
    let csrc = CString::new(src).map_err(|e| format!("kernel source: {e}"))?;
    let name = CString::new("tensorfold.cu").map_err(|e| e.to_string())?;
    let prog = result::create_program(&csrc, Some(&name)).map_err(|e| format!("nvrtc: {e:?}"))?;
    // SAFETY: `prog` was just created and is destroyed exactly once below; buffers are sized by NVRTC.
    unsafe {
        let compiled = result::compile_program(prog, opts);
        let log = result::get_program_log(prog)
            .map(|l| CStr::from_ptr(l.as_ptr()).to_string_lossy().into_owned())
            .unwrap_or_default();
        if let Err(e) = compiled {
            let _ = result::destroy_program(prog);
            return Err(format!("NVRTC failed ({e:?}) with {opts:?}:\n{log}"));
        }
        // ptxas's notes on a successful build (a wgmma chain it serialised, spills), for kernel work.
        if std::env::var_os("TENSORFOLD_NVRTC_LOG").is_some() && !log.trim().is_empty() {
            eprintln!("NVRTC log:\n{log}");
        }
        let mut n = 0usize;
        let size = sys::nvrtcGetCUBINSize(prog, &mut n).result();
        let mut buf = vec![0u8; n];
        let got = size.and_then(|_| sys::nvrtcGetCUBIN(prog, buf.as_mut_ptr().cast()).result());
        let _ = result::destroy_program(prog);
        got.map_err(|e| format!("nvrtcGetCUBIN: {e:?}"))?;
        if buf.is_empty() {
            return Err(format!("NVRTC produced an empty cubin for {opts:?}"));
        }
        Ok(buf)
    }
}

fn cache_dir() -> PathBuf {
    if let Ok(d) = std::env::var("TENSORFOLD_CACHE_DIR") {
        return PathBuf::from(d).join("cuda");
    }
    if let Ok(d) = std::env::var("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("tensorfold/cuda");
    }
    if let Ok(d) = std::env::var("HOME") {
        return PathBuf::from(d).join(".cache/tensorfold/cuda");
    }
    std::env::temp_dir().join("tensorfold-cuda")
}

/// The program's cubin for `arch`, from the disk cache when its key matches, else compiled and stored.
/// Returns the image and whether it came from the cache.
pub fn program_cubin(arch: &str, driver_version: i32) -> Result<(Vec<u8>, bool), String> {
    let src = program_source();
    let opts = options(arch);
    let (maj, min) = nvrtc_version()?;
    let mut h = Sha256::new();
    h.update(src.as_bytes());
    h.update(opts.join(" ").as_bytes());
    h.update(format!("nvrtc {maj}.{min} driver {driver_version} {arch}").as_bytes());
    let key: String = h
        .finalize()
        .iter()
        .take(12)
        .map(|b| format!("{b:02x}"))
        .collect();
    let path = cache_dir().join(format!("{arch}-{key}.cubin"));
    if let Ok(bytes) = std::fs::read(&path) {
        if !bytes.is_empty() {
            return Ok((bytes, true));
        }
    }
    let cubin = compile_cubin(&src, &opts)?;
    // A cache that cannot be written only costs a recompile next time.
    if std::fs::create_dir_all(cache_dir()).is_ok() {
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, &cubin).is_ok() {
            let _ = std::fs::rename(&tmp, &path);
        }
    }
    Ok((cubin, false))
}

#[cfg(test)]
mod tests {
    use super::SOURCES;

    /// Kernels are launched allowed to overlap their predecessor (device.rs dependent_launch); that is safe only
    /// because each one waits for it before touching memory, so a kernel without kernel_entry would race.
    #[test]
    fn every_kernel_waits_for_its_predecessor_before_anything_else() {
        let mut kernels = 0;
        for (file, text) in SOURCES {
            // Each kernel's name and the text from its first statement on.
            let found: Vec<(String, &str)> = text
                .match_indices("extern \"C\" __global__")
                .map(|(at, _)| {
                    let body = at + text[at..].find('{').expect("a kernel body");
                    let name: String = text[at..body].chars().filter(|c| *c != '\\').collect();
                    let first = text[body + 1..]
                        .trim_start_matches(|c: char| c.is_whitespace() || c == '\\');
                    (name.split_whitespace().collect::<Vec<_>>().join(" "), first)
                })
                .collect();
            // A kernel that copies weights first (entry_after_weights) calls kernel_entry in the function its
            // body calls: the file then has a kernel_entry that starts no kernel.
            let starting = found
                .iter()
                .filter(|(_, first)| first.starts_with("kernel_entry();"))
                .count();
            let deferred_entry = text.matches("kernel_entry();").count() > starting;
            for (name, first) in &found {
                assert!(
                    first.starts_with("kernel_entry();")
                        || (first.starts_with("entry_after_weights();") && deferred_entry),
                    "{file}: the kernel at `{name}` does not start with kernel_entry()"
                );
                kernels += 1;
            }
        }
        assert!(kernels >= 20, "only {kernels} kernels found");
    }
}
