//! Rounds of few rows on the device: opening and closing the recorded round (graph.rs), the rule that sends what
//! was recorded before any other device write, and small host arrays staged for the launches of one op.

use crate::device::{ok, Dev};
use crate::graph::GraphStats;
use crate::scratch::Buf;
use cudarc::driver::{CudaSlice, DeviceRepr};
use std::sync::{Arc, OnceLock};

/// Rounds of at most this many rows are recorded and sent as graphs (decode rounds, drafted windows, small
/// batches); a larger one (a prompt chunk) is issued as it is queued, so the device starts at once.
pub const GRAPH_ROWS: usize = 64;

/// Whether rounds of few rows go through CUDA graphs: on unless `TENSORFOLD_CUDA_GRAPHS=0` (for before/after
/// measurements in one run). Timing only: the launches and so the bits are the same.
pub fn graphs_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("TENSORFOLD_CUDA_GRAPHS").map_or(true, |v| v != "0"))
}

/// Launches per graph segment (`TENSORFOLD_CUDA_GRAPH_SEGMENT`, default 128): the host sends one while it records
/// the next, so the device does not wait for a whole round to be recorded.
pub fn graph_segment() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| {
        std::env::var("TENSORFOLD_CUDA_GRAPH_SEGMENT")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&n| n > 0)
            .unwrap_or(128)
    })
}

/// A small host array on the device for the launches of the op that staged it (valid until the next
/// synchronisation): in the recorded round's arena, or uploaded.
pub enum Staged<T> {
    /// A recycled buffer (`upload_buf`): it may be dropped before the recorded launches that read it are sent.
    Owned(Buf<T>),
    Shared(Arc<CudaSlice<T>>),
    Arena {
        ptr: u64,
        generation: u64,
    },
}

impl Dev {
    /// A round of `rows` rows begins (an embedding or a keep): few rows open the recorded round, more close it.
    pub fn round_rows(&self, rows: usize) {
        let Some(g) = &self.graphs else { return };
        let mut g = g.lock().unwrap_or_else(|p| p.into_inner());
        if rows <= GRAPH_ROWS && g.broken.is_none() {
            g.open = true;
        } else if g.open {
            self.send_locked(&mut g);
            g.open = false;
        }
    }

    /// Whether launches are being recorded now.
    pub(crate) fn recording(&self) -> bool {
        self.graphs
            .as_ref()
            .is_some_and(|g| g.lock().unwrap_or_else(|p| p.into_inner()).open)
    }

    /// Sends what was recorded (before any device write that is not a recorded kernel: see graph.rs).
    pub(crate) fn send_recorded(&self) {
        if let Some(g) = &self.graphs {
            let mut g = g.lock().unwrap_or_else(|p| p.into_inner());
            if g.has_pending() {
                self.send_locked(&mut g);
            }
        }
    }

    /// Sends the recorded launches (the context made current first: a send may come from any thread's op).
    pub(crate) fn send_locked(&self, g: &mut crate::graph::Recorder) {
        ok(self.ctx.bind_to_thread(), "graph send");
        g.send(&self.stream, &|l| self.issue(l));
        // Buffers the pool let go of while launches were unsent are freed after them.
        if let Some(pool) = &self.pool {
            pool.sent();
        }
    }

    /// After a synchronisation nothing recorded is pending and no staged array is in use: the arena starts over.
    pub(crate) fn after_sync(&self) {
        if let Some(g) = &self.graphs {
            let mut g = g.lock().unwrap_or_else(|p| p.into_inner());
            if !g.has_pending() {
                g.reset_arena();
            }
        }
    }

    /// `v` on the device for the launches of this op: staged in the round's arena while recording, else uploaded.
    pub fn stage<T: DeviceRepr>(&self, v: &[T]) -> Staged<T> {
        self.arena(v)
            .unwrap_or_else(|| Staged::Owned(self.upload_buf(v)))
    }

    /// As `stage`, sharing the content-keyed copies of `i32s` when not recording (a prompt chunk's row tables
    /// are uploaded once for all its layers).
    pub fn stage_i32s(&self, v: &[i32]) -> Staged<i32> {
        self.arena(v)
            .unwrap_or_else(|| Staged::Shared(self.i32s(v)))
    }

    pub fn stage_u64s(&self, v: &[u64]) -> Staged<u64> {
        self.arena(v)
            .unwrap_or_else(|| Staged::Shared(self.u64s(v)))
    }

    /// The device address of a staged array; panics when an arena array is used after the synchronisation that
    /// ended its round (its bytes may then belong to another op).
    pub fn staged_ptr<T>(&self, s: &Staged<T>) -> u64 {
        match s {
            Staged::Owned(b) => self.ptr(b),
            Staged::Shared(b) => self.ptr(b),
            Staged::Arena { ptr, generation } => {
                let now = self
                    .graphs
                    .as_ref()
                    .map(|g| g.lock().unwrap_or_else(|p| p.into_inner()).generation);
                assert_eq!(
                    now,
                    Some(*generation),
                    "a staged array used after the synchronisation that ended its round"
                );
                *ptr
            }
        }
    }

    /// Graph counts so far (None when graphs are off).
    pub fn graph_stats(&self) -> Option<GraphStats> {
        self.graphs
            .as_ref()
            .map(|g| g.lock().unwrap_or_else(|p| p.into_inner()).stats)
    }

    fn arena<T: DeviceRepr>(&self, v: &[T]) -> Option<Staged<T>> {
        let g = self.graphs.as_ref()?;
        let mut g = g.lock().unwrap_or_else(|p| p.into_inner());
        if !g.open || v.is_empty() {
            return None;
        }
        // SAFETY: DeviceRepr types are plain values without padding-dependent meaning; the bytes are copied to the
        // device as they are, as an upload would.
        let bytes = unsafe {
            std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v))
        };
        let ptr = g.stage(&self.stream, bytes)?;
        Some(Staged::Arena {
            ptr,
            generation: g.generation,
        })
    }
}
