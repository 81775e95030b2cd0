//! The device: one context and one stream on which every op is ordered, the loaded kernel module, raw launches,
//! and a content-keyed cache of small metadata arrays so a round's row tables are uploaded once, not per layer.

use crate::scratch::{Buf, ScratchPool};
use crate::{libs, nvrtc};
use cudarc::driver::{
    result, sys, CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, DeviceRepr,
    PinnedHostSlice,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

#[path = "device_kernels.rs"]
mod kernels;
pub use kernels::kernel_names;
use kernels::DYNAMIC_SMEM_KERNELS;

/// One kernel argument, passed by value.
#[derive(Clone, Copy, Debug)]
pub enum Arg {
    /// A device pointer (or any 64-bit integer).
    P(u64),
    I(i32),
    F(f32),
    D(f64),
}

impl Arg {
    /// The value's bits, for comparing launches (graph.rs).
    pub fn bits(&self) -> (u8, u64) {
        match *self {
            Arg::P(v) => (0, v),
            Arg::I(v) => (1, v as u32 as u64),
            Arg::F(v) => (2, v.to_bits() as u64),
            Arg::D(v) => (3, v.to_bits()),
        }
    }
}

/// Small arrays already on the device, keyed by their contents (at most `CACHE_ENTRIES`, then cleared).
#[derive(Default)]
struct ArrayCache {
    i32s: HashMap<Vec<i32>, Arc<CudaSlice<i32>>>,
    u64s: HashMap<Vec<u64>, Arc<CudaSlice<u64>>>,
}

const CACHE_ENTRIES: usize = 4096;

pub struct Dev {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    funcs: HashMap<String, CudaFunction>,
    cache: Mutex<ArrayCache>,
    /// Opt-in event timing of every launch (TENSORFOLD_CUDA_PROFILE=1).
    pub profile: crate::profile::Profiler,
    /// Page-locked staging for device-to-host copies (grown on demand).
    pinned: Mutex<Option<PinnedHostSlice<f32>>>,
    /// Device name, compute capability, driver and where the kernels came from.
    pub info: String,
    /// Recycled buffers for activations and temporaries (`scratch`); None with TENSORFOLD_CUDA_POOL=0.
    pub(crate) pool: Option<Arc<ScratchPool>>,
    /// Kernels launched so far (the backend-ops test checks which ops share launches).
    pub launches: std::sync::atomic::AtomicUsize,
    /// The most dynamic shared memory a block may take (the device's opt-in limit).
    max_dynamic_smem: usize,
    /// Launches of rounds of few rows recorded and sent as CUDA graphs (graph.rs); None when off.
    pub(crate) graphs: Option<Mutex<crate::graph::Recorder>>,
    /// Zeroed counters the split wgmma launches take tickets from (each launch's last block resets its own).
    pub(crate) tickets: CudaSlice<u32>,
    /// Whether rounds of 5 to 64 rows take the wgmma kernels (project_wgmma.rs): on Hopper (compute capability
    /// 9.0, the module then built for sm_90a) unless `TENSORFOLD_CUDA_WGMMA=0`.
    pub(crate) wgmma: bool,
    /// Whether a matrix the wgmma prompt kernel takes has been uploaded: prompt chunks then write x's B tiles
    /// (project_gemm.rs note_wgmma_prompt_matrix).
    pub(crate) prompt_b_tiles: std::sync::atomic::AtomicBool,
    /// Which decode projection followed which (ahead.rs), for the L2 look-ahead.
    pub(crate) ahead: Mutex<crate::ahead::Ahead>,
}

/// Panics with a clear message on a device error inside an op (the Backend ops have no error channel; a failed
/// launch or copy means the device is unusable).
pub fn ok<T, E: std::fmt::Debug>(r: Result<T, E>, what: &str) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("CUDA error in {what}: {e:?}"),
    }
}

impl Dev {
    /// Opens GPU `ordinal`, loads (or compiles) the kernels. Every failure is an error, never a panic.
    pub fn open(ordinal: usize) -> Result<Dev, String> {
        if !libs::driver_present() {
            return Err("no CUDA driver (libcuda.so) found on this machine".into());
        }
        let nvrtc_from = libs::ensure_nvrtc()?;
        let count = CudaContext::device_count().map_err(|e| format!("CUDA init: {e:?}"))?;
        if (ordinal as i32) >= count {
            return Err(format!(
                "CUDA device {ordinal} requested but {count} present"
            ));
        }
        let ctx = CudaContext::new(ordinal).map_err(|e| format!("CUDA context: {e:?}"))?;
        // SAFETY: called before this backend allocates anything; every op is ordered on one stream.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx
            .new_stream()
            .map_err(|e| format!("CUDA stream: {e:?}"))?;
        if ctx.has_async_alloc() {
            crate::scratch::keep_pool_memory(&ctx)?;
        }
        let (major, minor) = ctx
            .compute_capability()
            .map_err(|e| format!("compute capability: {e:?}"))?;
        let mut driver = 0i32;
        // SAFETY: plain out-parameter; the driver library is loaded.
        unsafe { sys::cuDriverGetVersion(&mut driver) }
            .result()
            .map_err(|e| format!("driver version: {e:?}"))?;
        // The wgmma kernels need Hopper's arch-specific target (sm_90a); they run on Hopper only.
        let wgmma = crate::project::wgmma_switch() && (major, minor) == (9, 0);
        let suffix = if wgmma { "a" } else { "" };
        let arch = format!("sm_{major}{minor}{suffix}");
        let t = std::time::Instant::now();
        let (cubin, cached) = nvrtc::program_cubin(&arch, driver)?;
        let module = ctx
            .load_module(cudarc::nvrtc::Ptx::from_binary(cubin))
            .map_err(|e| format!("loading the {arch} cubin: {e:?}"))?;
        let mut funcs = HashMap::new();
        for name in kernel_names() {
            let f = module
                .load_function(&name)
                .map_err(|e| format!("kernel {name}: {e:?}"))?;
            funcs.insert(name, f);
        }
        // Kernels past the 48 KB of shared memory a block gets by default must ask for it: up to the device's
        // opt-in limit less their static shared memory (the driver refuses more).
        let optin = ctx
            .attribute(
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            )
            .map_err(|e| format!("shared memory per block: {e:?}"))?
            .max(0) as usize;
        let mut max_dynamic_smem = optin;
        for (name, f) in &funcs {
            if DYNAMIC_SMEM_KERNELS.iter().any(|p| name.starts_with(p)) {
                let fixed = f
                    .get_attribute(sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)
                    .map_err(|e| format!("kernel {name}: static shared memory: {e:?}"))?
                    .max(0) as usize;
                let dynamic = optin.saturating_sub(fixed);
                f.set_attribute(
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    dynamic as i32,
                )
                .map_err(|e| format!("kernel {name}: dynamic shared memory: {e:?}"))?;
                max_dynamic_smem = max_dynamic_smem.min(dynamic);
            }
        }
        let name = ctx.name().unwrap_or_else(|_| "CUDA device".into());
        let info = format!(
            "{name} ({arch}, driver {}.{}), kernels {} in {:.1}s, NVRTC {nvrtc_from}",
            driver / 1000,
            (driver % 1000) / 10,
            if cached { "from cache" } else { "compiled" },
            t.elapsed().as_secs_f64()
        );
        let pool = crate::scratch::pool_enabled().then(|| ScratchPool::new(stream.clone()));
        let tickets = stream
            .alloc_zeros::<u32>(crate::project::WGMMA_TICKETS)
            .map_err(|e| format!("allocating the wgmma tickets: {e:?}"))?;
        let profile = crate::profile::Profiler::from_env();
        // Graphs need the recycled buffers (steady addresses) and cannot hold the profiler's events.
        let graphs = (crate::stage::graphs_enabled() && pool.is_some() && !profile.enabled)
            .then(|| Mutex::new(crate::graph::Recorder::new(crate::stage::graph_segment())));
        Ok(Dev {
            tickets,
            wgmma,
            prompt_b_tiles: Default::default(),
            ahead: Default::default(),
            max_dynamic_smem,
            graphs,
            pool,
            ctx,
            stream,
            funcs,
            cache: Mutex::new(ArrayCache::default()),
            pinned: Mutex::new(None),
            profile,
            info,
            launches: Default::default(),
        })
    }

    /// Launches kernel `name`; `block` threads per block.
    pub fn launch(&self, name: &str, grid: (u32, u32, u32), block: u32, args: &[Arg]) {
        self.launch_as(name, None, grid, block, args)
    }

    /// `launch_as` with `smem` bytes of dynamic shared memory (kernels in DYNAMIC_SMEM_KERNELS may take up to
    /// `max_dynamic_smem`).
    pub fn launch_smem(
        &self,
        name: &str,
        label: Option<&str>,
        grid: (u32, u32, u32),
        block: u32,
        smem: u32,
        args: &[Arg],
    ) {
        for _ in 0..launch_copies(name) {
            self.launch_once(name, label, grid, block, smem, args);
        }
    }

    /// The most dynamic shared memory a block of this device may take.
    pub fn max_dynamic_smem(&self) -> usize {
        self.max_dynamic_smem
    }

    /// `launch`, profiled under `label` instead of the kernel's name when one is given (e.g. with the shape).
    pub fn launch_as(
        &self,
        name: &str,
        label: Option<&str>,
        grid: (u32, u32, u32),
        block: u32,
        args: &[Arg],
    ) {
        self.launch_smem(name, label, grid, block, 0, args)
    }

    fn launch_once(
        &self,
        name: &str,
        label: Option<&str>,
        grid: (u32, u32, u32),
        block: u32,
        smem: u32,
        args: &[Arg],
    ) {
        if grid.0 == 0 || grid.1 == 0 || grid.2 == 0 {
            return;
        }
        self.launches
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let f = self
            .funcs
            .get(name)
            .unwrap_or_else(|| panic!("kernel {name} is not in the module"));
        let l = crate::graph::Launch {
            func: f.cu_function(),
            grid,
            block,
            smem,
            args: args.to_vec(),
        };
        if let Some(g) = &self.graphs {
            let mut g = g.lock().unwrap_or_else(|p| p.into_inner());
            if g.open {
                // The first launch of a segment tells the pool that frees must wait for the send.
                if let (Some(pool), false) = (&self.pool, g.has_pending()) {
                    pool.recorded();
                }
                if g.record(l) {
                    self.send_locked(&mut g);
                }
                return;
            }
        }
        let t = std::time::Instant::now();
        let start = self.profile.mark(&self.ctx, &self.stream);
        ok(self.ctx.bind_to_thread(), name);
        let call = std::time::Instant::now();
        let r = self.issue(&l);
        self.profile.launch_call(call.elapsed());
        ok(r, name);
        if let (Some(start), Some(end)) = (start, self.profile.mark(&self.ctx, &self.stream)) {
            self.profile
                .launched(label.unwrap_or(name), start, end, t.elapsed());
        }
    }

    /// One launch on the stream (captured instead when the stream is capturing a graph).
    pub(crate) fn issue(&self, l: &crate::graph::Launch) -> Result<(), String> {
        let mut vals = l.args.clone();
        let mut ptrs = crate::graph::Launch::param_ptrs(&mut vals);
        let grid = l.grid;
        // SAFETY: `ptrs` point into `vals`, which outlives the call; the callers pass arguments matching the
        // kernel's signature and buffers sized for the launch (each op checks its shapes first).
        let r = if dependent_launch() {
            // Every kernel starts with kernel_entry (common.cu), which waits for its predecessor: launching it
            // early only overlaps the launch with the predecessor's tail.
            // SAFETY: a plain C struct (an id, padding and a union of integers), valid when zeroed.
            let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
            attr.id =
                sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
            attr.value.programmaticStreamSerializationAllowed = 1;
            let config = sys::CUlaunchConfig {
                gridDimX: grid.0,
                gridDimY: grid.1,
                gridDimZ: grid.2,
                blockDimX: l.block,
                blockDimY: 1,
                blockDimZ: 1,
                sharedMemBytes: l.smem,
                hStream: self.stream.cu_stream(),
                attrs: &mut attr,
                numAttrs: 1,
            };
            // SAFETY: as for launch_kernel below; `config` and `attr` outlive the call.
            unsafe {
                sys::cuLaunchKernelEx(&config, l.func, ptrs.as_mut_ptr(), std::ptr::null_mut())
                    .result()
            }
        } else {
            unsafe {
                result::launch_kernel(
                    l.func,
                    grid,
                    (l.block, 1, 1),
                    l.smem,
                    self.stream.cu_stream(),
                    &mut ptrs,
                )
            }
        };
        r.map_err(|e| format!("{e:?}"))
    }

    /// Uninitialised device memory for `n` elements (at least one, so every buffer has an address).
    pub fn alloc<T: DeviceRepr>(&self, n: usize) -> CudaSlice<T> {
        let t = std::time::Instant::now();
        // SAFETY: every op writes the elements it later reads; nothing reads uninitialised memory.
        let s = ok(unsafe { self.stream.alloc::<T>(n.max(1)) }, "alloc");
        self.profile.allocated(t.elapsed());
        s
    }

    /// A buffer for a round's activation or temporary: recycled from earlier ones when the pool holds one of
    /// its size class (scratch.rs), else a fresh allocation. Uninitialised.
    pub fn scratch<T: DeviceRepr>(&self, n: usize) -> Buf<T> {
        let Some(pool) = &self.pool else {
            return Buf::owned(self.alloc(n));
        };
        let t = std::time::Instant::now();
        let b = Buf::scratch(pool, n);
        self.profile.allocated(t.elapsed());
        b
    }

    /// `v` in a recycled buffer (`upload` when the pool is off): a state or input that may be dropped while
    /// recorded launches that read it are still unsent, so it must go back to the pool, never to the driver (a
    /// free is not a recorded launch: the driver would run it before them).
    pub fn upload_buf<T: DeviceRepr>(&self, v: &[T]) -> Buf<T> {
        if self.pool.is_none() {
            return Buf::owned(self.upload(v));
        }
        let mut b = self.scratch::<T>(v.len());
        if !v.is_empty() {
            self.send_recorded();
            let mut view = b.slice_mut(0..v.len());
            ok(self.stream.memcpy_htod(v, &mut view), "upload");
        }
        b
    }

    /// `n` zeros in a recycled buffer (`zeros` when the pool is off), as `upload_buf`.
    pub fn zeros_buf<T: DeviceRepr + cudarc::driver::ValidAsZeroBits>(&self, n: usize) -> Buf<T> {
        if self.pool.is_none() {
            return Buf::owned(self.zeros(n));
        }
        let mut b = self.scratch::<T>(n);
        self.send_recorded();
        ok(self.stream.memset_zeros(&mut *b), "zeros");
        b
    }

    pub fn zeros<T: DeviceRepr + cudarc::driver::ValidAsZeroBits>(&self, n: usize) -> CudaSlice<T> {
        self.send_recorded();
        let t = std::time::Instant::now();
        let s = ok(self.stream.alloc_zeros::<T>(n.max(1)), "alloc_zeros");
        self.profile.allocated(t.elapsed());
        s
    }

    pub fn upload<T: DeviceRepr>(&self, v: &[T]) -> CudaSlice<T> {
        if v.is_empty() {
            return self.alloc(1);
        }
        self.send_recorded();
        let t = std::time::Instant::now();
        let s = ok(self.stream.clone_htod(v), "upload");
        self.profile.uploaded(std::mem::size_of_val(v), t.elapsed());
        s
    }

    /// The first `n` values of `s`, through a page-locked staging buffer (waits for the stream).
    pub fn download(&self, s: &CudaSlice<f32>, n: usize) -> Vec<f32> {
        self.download_at(s, 0, n)
    }

    /// Small integer results (e.g. drawn tokens): the first `n` values of `s` (waits for the stream).
    pub fn download_i32(&self, s: &CudaSlice<i32>, n: usize) -> Vec<i32> {
        self.download_small(s, n)
    }

    /// The first `n` values of `s` without the staging buffer, for small results (waits for the stream).
    pub fn download_small<T: DeviceRepr>(&self, s: &CudaSlice<T>, n: usize) -> Vec<T> {
        self.send_recorded();
        let v = ok(self.stream.clone_dtoh(&s.slice(0..n)), "download");
        self.sync();
        v
    }

    /// Values `first..first + n` of `s`, as `download`.
    pub fn download_at(&self, s: &CudaSlice<f32>, first: usize, n: usize) -> Vec<f32> {
        if n == 0 {
            return Vec::new();
        }
        self.send_recorded();
        let mut guard = self.pinned.lock().unwrap_or_else(|p| p.into_inner());
        if guard.as_ref().is_none_or(|p| p.len() < n) {
            guard.take();
            // SAFETY: the staging buffer is only read after a copy into it has completed.
            let fresh = unsafe { self.ctx.alloc_pinned_with_flags::<f32>(n.max(1 << 20), 0) };
            *guard = Some(ok(fresh, "pinned staging buffer"));
        }
        let Some(pinned) = guard.as_mut() else {
            unreachable!("staging buffer allocated above")
        };
        let host = &mut ok(pinned.as_mut_slice(), "staging buffer")[..n];
        let src = self.ptr(s) + 4 * first as u64;
        assert!(
            s.len() >= first + n,
            "download: values {first}..{} from a buffer of {}",
            first + n,
            s.len()
        );
        // SAFETY: `host` holds exactly n values and `s` at least n; the copy completes before the read below.
        ok(
            unsafe { result::memcpy_dtoh_async(host, src, self.stream.cu_stream()) },
            "download",
        );
        ok(self.stream.synchronize(), "synchronize");
        self.after_sync();
        host.to_vec()
    }

    /// The device address of a buffer.
    pub fn ptr<T>(&self, s: &CudaSlice<T>) -> u64 {
        let (p, _sync) = s.device_ptr(&self.stream);
        p
    }

    /// A device copy of `v`, shared with earlier calls that uploaded the same contents.
    pub fn i32s(&self, v: &[i32]) -> Arc<CudaSlice<i32>> {
        let mut c = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = c.i32s.get(v) {
            return s.clone();
        }
        if c.i32s.len() >= CACHE_ENTRIES {
            // Dropped copies go back to the driver: recorded launches still reading them are sent first.
            self.send_recorded();
            c.i32s.clear();
        }
        let s = Arc::new(self.upload(v));
        c.i32s.insert(v.to_vec(), s.clone());
        s
    }

    pub fn u64s(&self, v: &[u64]) -> Arc<CudaSlice<u64>> {
        let mut c = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = c.u64s.get(v) {
            return s.clone();
        }
        if c.u64s.len() >= CACHE_ENTRIES {
            // Dropped copies go back to the driver: recorded launches still reading them are sent first.
            self.send_recorded();
            c.u64s.clear();
        }
        let s = Arc::new(self.upload(v));
        c.u64s.insert(v.to_vec(), s.clone());
        s
    }

    /// Copies `n` elements device to device.
    pub fn copy<T: DeviceRepr>(&self, src: &CudaSlice<T>, dst: &mut CudaSlice<T>, n: usize) {
        self.copy_at(src, 0, dst, 0, n)
    }

    /// Copies `n` elements device to device, from `src[from..]` to `dst[to..]`: inside a recorded round a kernel
    /// (so it takes its place among the recorded launches), else the driver's copy.
    pub fn copy_at<T: DeviceRepr>(
        &self,
        src: &CudaSlice<T>,
        from: usize,
        dst: &mut CudaSlice<T>,
        to: usize,
        n: usize,
    ) {
        if n == 0 {
            return;
        }
        assert!(
            from + n <= src.len() && to + n <= dst.len(),
            "copy of {n} elements from {from} of {} to {to} of {}",
            src.len(),
            dst.len()
        );
        let words = std::mem::size_of::<T>() / 4;
        if self.recording() && std::mem::size_of::<T>().is_multiple_of(4) && words > 0 {
            let size = std::mem::size_of::<T>() as u64;
            self.copy_words(
                self.ptr(src) + from as u64 * size,
                self.ptr(dst) + to as u64 * size,
                n * words,
            );
            return;
        }
        self.send_recorded();
        ok(
            self.stream
                .memcpy_dtod(&src.slice(from..from + n), &mut dst.slice_mut(to..to + n)),
            "copy",
        );
    }

    /// Copies `words` 32-bit words from device address `src` to `dst` with a kernel (ordered among the launches,
    /// recorded or not).
    pub fn copy_words(&self, src: u64, dst: u64, words: usize) {
        if words == 0 {
            return;
        }
        self.launch(
            "copy_words",
            ((words.div_ceil(256) as u32).clamp(1, 1024), 1, 1),
            256,
            &[Arg::P(src), Arg::P(dst), Arg::P(words as u64)],
        );
    }

    pub fn sync(&self) {
        self.send_recorded();
        ok(self.stream.synchronize(), "synchronize");
        self.after_sync();
    }
}

/// How many times kernel `name` is launched: twice when its name starts with one of the comma-separated prefixes
/// of `TENSORFOLD_CUDA_TWICE`, a timing ablation (a round's time grows by the kernels' cost in the chain of
/// dependent launches; in-place kernels then compute wrong values, so never for results), else once.
fn launch_copies(name: &str) -> usize {
    static PREFIXES: OnceLock<Vec<String>> = OnceLock::new();
    let prefixes = PREFIXES.get_or_init(|| {
        std::env::var("TENSORFOLD_CUDA_TWICE")
            .map(|v| {
                v.split(',')
                    .filter(|p| !p.is_empty())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default()
    });
    1 + prefixes.iter().any(|p| name.starts_with(p.as_str())) as usize
}

/// The unsigned integer an environment variable holds (the tuning switches read once each), if it holds one.
pub(crate) fn env_usize(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Whether kernels are launched with programmatic dependent launch (see kernel_entry in common.cu): on unless
/// `TENSORFOLD_CUDA_PDL=0` (for before/after measurements in one run). Timing only: the bits are the same.
fn dependent_launch() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("TENSORFOLD_CUDA_PDL").map_or(true, |v| v != "0"))
}
