//! Compiles every kernel with NVRTC for sm_90 and sm_90a where NVRTC is available (CI's pip wheel, the GPU
//! machine); skips with a note where it is not (unless TENSORFOLD_REQUIRE_NVRTC is set, as in CI), since no GPU or
//! driver is needed to compile.

use tensorfold_cuda::{libs, nvrtc};

#[test]
fn every_kernel_compiles_to_an_sm90_cubin_with_nvrtc() {
    match libs::ensure_nvrtc() {
        Err(e) => {
            // CI installs NVRTC from the pip wheel and sets TENSORFOLD_REQUIRE_NVRTC: there a skip is a failure.
            assert!(
                std::env::var_os("TENSORFOLD_REQUIRE_NVRTC").is_none(),
                "NVRTC is required here: {e}"
            );
            eprintln!("skipped: {e}");
        }
        Ok(from) => {
            eprintln!("NVRTC from {from}, version {:?}", nvrtc::nvrtc_version());
            for arch in ["sm_90", "sm_90a"] {
                let t = std::time::Instant::now();
                let cubin = nvrtc::compile_cubin(&nvrtc::program_source(), &nvrtc::options(arch))
                    .unwrap_or_else(|e| panic!("{e}"));
                eprintln!("{arch}: {} bytes in {:?}", cubin.len(), t.elapsed());
                assert!(cubin.len() > 1000);
                // For reading the SASS (cuobjdump -sass) without a GPU.
                if let Some(dir) = std::env::var_os("TENSORFOLD_CUBIN_OUT") {
                    let path = std::path::Path::new(&dir).join(format!("{arch}.cubin"));
                    std::fs::write(&path, &cubin).expect("writing the cubin");
                }
            }
        }
    }
}
