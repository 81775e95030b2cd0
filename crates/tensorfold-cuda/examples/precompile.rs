//! Fills the kernel cache for a GPU machine ahead of time: `precompile DRIVER_VERSION [ARCH]` (e.g. 13000 sm_90)
//! compiles the program with this machine's NVRTC and stores it where `Dev::open` looks (TENSORFOLD_CACHE_DIR), so
//! a timed run on the GPU machine skips NVRTC's ~30 s. The key holds NVRTC's major.minor and the driver version
//! given, so the GPU machine finds the image only when both match its own.

fn main() {
    let mut args = std::env::args().skip(1);
    let driver: i32 = args
        .next()
        .and_then(|v| v.parse().ok())
        .expect("usage: precompile DRIVER_VERSION [ARCH]");
    let arch = args.next().unwrap_or_else(|| "sm_90".into());
    let from = tensorfold_cuda::libs::ensure_nvrtc().unwrap_or_else(|e| panic!("NVRTC: {e}"));
    let t = std::time::Instant::now();
    match tensorfold_cuda::nvrtc::program_cubin(&arch, driver) {
        Ok((cubin, cached)) => println!(
            "{arch} driver {driver}: {} bytes, {} in {:.1}s (NVRTC from {from})",
            cubin.len(),
            if cached { "from the cache" } else { "compiled" },
            t.elapsed().as_secs_f64()
        ),
        Err(e) => panic!("{e}"),
    }
}
