//! Device buffers for a round's activations and temporaries, recycled on the host instead of going back to the
//! driver: a decode round of the 27B shape allocates about 1,700 buffers, and the driver's stream-ordered
//! allocator costs ~1.2 µs a call plus as much to free (call 33), most of the host's time per round after the
//! launches themselves. Reuse is safe because every op is ordered on the device's one stream: a buffer dropped
//! while kernels that use it are still queued is handed only to ops queued after them.

use crate::device::ok;
use cudarc::driver::{sys, CudaContext, CudaSlice, CudaStream, DeviceRepr};
use std::collections::{BTreeSet, HashMap};
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Most bytes kept idle for reuse; buffers returned beyond it go back to the driver, once no recorded launch is
/// unsent.
const IDLE_BYTES: usize = 4 << 30;

/// Idle device allocations by size class (bytes).
pub struct ScratchPool {
    stream: Arc<CudaStream>,
    free: Mutex<(HashMap<usize, BTreeSet<u64>>, usize)>,
    /// Buffers returned beyond IDLE_BYTES while recorded launches are unsent, waiting for `sent`: a free is not a
    /// recorded launch, so freeing one then would put the free before launches that may still use it (graph.rs).
    excess: Mutex<Vec<(u64, usize)>>,
    /// Whether the device's recorder holds launches not yet sent (`recorded` / `sent`).
    unsent: AtomicBool,
}

/// The size class of a request: at least 256 bytes, rounded up to a sixteenth of its power of two (at most 12.5%
/// more than asked), so a prompt chunk's varying shapes still find buffers to reuse.
fn class(bytes: usize) -> usize {
    let b = bytes.max(256);
    let step = (b.next_power_of_two() / 16).max(256);
    b.div_ceil(step) * step
}

impl ScratchPool {
    pub fn new(stream: Arc<CudaStream>) -> Arc<Self> {
        Arc::new(ScratchPool {
            stream,
            free: Mutex::new((HashMap::new(), 0)),
            excess: Mutex::new(Vec::new()),
            unsent: AtomicBool::new(false),
        })
    }

    /// An idle allocation of `class` bytes, if one is kept: the lowest address, so a round that allocates and
    /// drops in the same order as the one before gets the same buffers (a recorded round's graph nodes then keep
    /// their arguments: graph.rs).
    fn take(&self, class: usize) -> Option<u64> {
        let mut g = self.free.lock().unwrap_or_else(|p| p.into_inner());
        let ptr = g.0.get_mut(&class)?.pop_first()?;
        g.1 -= class;
        Some(ptr)
    }

    fn give_back(&self, class: usize, ptr: u64) {
        let mut g = self.free.lock().unwrap_or_else(|p| p.into_inner());
        if g.1 + class > IDLE_BYTES {
            drop(g);
            // The flag is read and the buffer queued under the excess lock, which `sent` clears the flag under: a
            // buffer queued while launches are unsent is freed by that send, not left for the next one.
            let mut excess = self.excess.lock().unwrap_or_else(|p| p.into_inner());
            if self.unsent.load(Ordering::SeqCst) {
                excess.push((ptr, class));
            } else {
                drop(excess);
                self.free_now(ptr, class);
            }
            return;
        }
        g.0.entry(class).or_default().insert(ptr);
        g.1 += class;
    }
}

impl ScratchPool {
    /// The device recorded a launch it has not sent yet: buffers returned beyond IDLE_BYTES wait for `sent`.
    pub(crate) fn recorded(&self) {
        self.unsent.store(true, Ordering::SeqCst);
    }

    /// The device sent every recorded launch: the buffers that waited are freed (in stream order after them).
    pub(crate) fn sent(&self) {
        let waiting = {
            let mut excess = self.excess.lock().unwrap_or_else(|p| p.into_inner());
            self.unsent.store(false, Ordering::SeqCst);
            std::mem::take(&mut *excess)
        };
        for (ptr, class) in waiting {
            self.free_now(ptr, class);
        }
    }

    /// Hands an allocation back to the driver (as the CudaSlice it came from would on drop).
    fn free_now(&self, ptr: u64, class: usize) {
        // SAFETY: `ptr` is a `class`-byte allocation made on this stream that nothing refers to any more.
        drop(unsafe { self.stream.upgrade_device_ptr::<u8>(ptr, class) });
    }

    /// A fresh allocation of `class` bytes from the driver.
    fn alloc_new(&self, class: usize) -> u64 {
        // SAFETY: uninitialised bytes; every op writes what it later reads.
        ok(unsafe { self.stream.alloc::<u8>(class) }, "alloc").leak()
    }
}

impl Drop for ScratchPool {
    fn drop(&mut self) {
        self.sent();
        let idle: Vec<(usize, u64)> = {
            let g = self.free.get_mut().unwrap_or_else(|p| p.into_inner());
            g.0.drain()
                .flat_map(|(c, v)| v.into_iter().map(move |p| (c, p)))
                .collect()
        };
        for (c, ptr) in idle {
            self.free_now(ptr, c);
        }
    }
}

/// A device buffer that returns to its pool when dropped (or, made with `Buf::owned`, is freed as usual).
pub struct Buf<T> {
    slice: ManuallyDrop<CudaSlice<T>>,
    /// The pool and size class it returns to.
    home: Option<(Arc<ScratchPool>, usize)>,
}

impl<T: DeviceRepr> Buf<T> {
    /// `n` uninitialised elements (at least one), from the pool when it holds an allocation of their class.
    pub fn scratch(pool: &Arc<ScratchPool>, n: usize) -> Buf<T> {
        let n = n.max(1);
        let c = class(n * std::mem::size_of::<T>());
        let ptr = pool.take(c).unwrap_or_else(|| pool.alloc_new(c));
        // SAFETY: `ptr` holds at least `c` ≥ n · size_of::<T>() bytes and belongs to this Buf alone.
        let slice = unsafe { pool.stream.upgrade_device_ptr::<T>(ptr, n) };
        Buf {
            slice: ManuallyDrop::new(slice),
            home: Some((pool.clone(), c)),
        }
    }
}

impl<T> Buf<T> {
    /// A buffer freed to the driver when dropped, as a plain `CudaSlice`.
    pub fn owned(slice: CudaSlice<T>) -> Buf<T> {
        Buf {
            slice: ManuallyDrop::new(slice),
            home: None,
        }
    }
}

impl<T> Deref for Buf<T> {
    type Target = CudaSlice<T>;
    fn deref(&self) -> &CudaSlice<T> {
        &self.slice
    }
}

impl<T> DerefMut for Buf<T> {
    fn deref_mut(&mut self) -> &mut CudaSlice<T> {
        &mut self.slice
    }
}

impl<T> Drop for Buf<T> {
    fn drop(&mut self) {
        // SAFETY: the slice is taken once, here, and never used again.
        let slice = unsafe { ManuallyDrop::take(&mut self.slice) };
        match self.home.take() {
            Some((pool, c)) => pool.give_back(c, slice.leak()),
            None => drop(slice),
        }
    }
}

/// Keeps freed memory in the device's default pool instead of returning it to the OS at every synchronisation
/// (the default threshold of 0 makes every round's allocations go back to the driver).
pub(crate) fn keep_pool_memory(ctx: &CudaContext) -> Result<(), String> {
    let mut pool = std::ptr::null_mut();
    let mut threshold = u64::MAX;
    // SAFETY: out-parameter and attribute value are valid for the calls; the device handle is the context's.
    unsafe {
        sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device())
            .result()
            .map_err(|e| format!("default memory pool: {e:?}"))?;
        sys::cuMemPoolSetAttribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&mut threshold as *mut u64).cast(),
        )
        .result()
        .map_err(|e| format!("memory pool release threshold: {e:?}"))?;
    }
    Ok(())
}

/// Whether activations and temporaries are recycled (this pool): on unless `TENSORFOLD_CUDA_POOL=0` (for
/// before/after measurements in one run). Host time only: the bits are the same.
pub(crate) fn pool_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("TENSORFOLD_CUDA_POOL").map_or(true, |v| v != "0"))
}

#[cfg(test)]
mod tests {
    use super::class;

    #[test]
    fn size_classes_cover_the_request_and_waste_at_most_an_eighth() {
        for bytes in [
            1usize,
            255,
            256,
            257,
            4096,
            5000,
            1 << 20,
            (1 << 20) + 1,
            3 << 27,
        ] {
            let c = class(bytes);
            assert!(c >= bytes && c >= 256, "{bytes} → {c}");
            assert!(bytes < 256 || c - bytes <= bytes / 8 + 255, "{bytes} → {c}");
            assert_eq!(class(c), c, "a class is its own class");
        }
    }
}
