//! Finds the CUDA driver and NVRTC at run time without ever panicking: cudarc panics on a missing library, so
//! every use is guarded here first, and NVRTC is preloaded from the usual toolkit and pip-wheel folders.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Whether `libcuda` can be opened (a GPU driver is installed).
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the driver library by its usual names; no symbol is called.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// Folders that may hold `libnvrtc.so.13`, most specific first.
fn nvrtc_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for var in ["TENSORFOLD_NVRTC_DIR", "CUDA_HOME", "CUDA_PATH"] {
        if let Ok(v) = std::env::var(var) {
            let p = PathBuf::from(v);
            dirs.push(p.join("lib64"));
            dirs.push(p.join("lib"));
            dirs.push(p);
        }
    }
    dirs.push("/usr/local/cuda/lib64".into());
    dirs.push("/usr/local/cuda/targets/x86_64-linux/lib".into());
    // pip wheels (nvidia-cuda-nvrtc) inside Python environments.
    for base in ["/opt/torch/.venv/lib", "/usr/local/lib", "/usr/lib"] {
        if let Ok(rd) = std::fs::read_dir(base) {
            for e in rd.flatten() {
                let py = e.path();
                for site in ["site-packages", "dist-packages"] {
                    dirs.push(py.join(site).join("nvidia/cu13/lib"));
                    dirs.push(py.join(site).join("nvidia/cuda_nvrtc/lib"));
                }
            }
        }
    }
    dirs
}

fn find_in(dir: &Path, prefix: &str) -> Option<PathBuf> {
    let rd = std::fs::read_dir(dir).ok()?;
    let mut hits: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix) && !n.contains(".alt."))
        })
        .collect();
    hits.sort();
    hits.into_iter().next()
}

/// Makes NVRTC loadable by cudarc: already on the loader path, or preloaded (builtins first) from a known folder.
/// Returns where it came from.
pub fn ensure_nvrtc() -> Result<String, String> {
    static FOUND: OnceLock<Result<String, String>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            // SAFETY: only tries to dlopen NVRTC by its usual names; no symbol is called.
            if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
                return Ok("libnvrtc from the loader path".into());
            }
            let mut tried = Vec::new();
            for dir in nvrtc_dirs() {
                let (Some(builtins), Some(main)) = (
                    find_in(&dir, "libnvrtc-builtins.so.13"),
                    find_in(&dir, "libnvrtc.so.13"),
                ) else {
                    continue;
                };
                tried.push(dir.display().to_string());
                let flags = libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_GLOBAL;
                // SAFETY: loading NVRTC's own shared libraries; their initialisers are the vendor's.
                let loaded = unsafe {
                    libloading::os::unix::Library::open(Some(&builtins), flags).and_then(|b| {
                        libloading::os::unix::Library::open(Some(&main), flags).map(|m| (b, m))
                    })
                };
                if let Ok((b, m)) = loaded {
                    // Kept loaded for the life of the process so cudarc's dlopen finds them by soname.
                    std::mem::forget(b);
                    std::mem::forget(m);
                    // SAFETY: as above.
                    if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
                        return Ok(main.display().to_string());
                    }
                }
            }
            Err(format!(
                "NVRTC (libnvrtc.so.13) not found: set TENSORFOLD_NVRTC_DIR or LD_LIBRARY_PATH to its folder \
                 (tried the loader path{}{})",
                if tried.is_empty() { "" } else { ", " },
                tried.join(", ")
            ))
        })
        .clone()
}
