//! L2 look-ahead for the decode projections: each launch of the weight-streaming kernels (project_stream.cu,
//! project_mma_bf16) asks L2, at its end, for the first bytes of the projection that followed it last time, so
//! those bytes load while the small kernels between the two run and memory would otherwise sit idle
//! (common.cu `l2_ahead`). Which projection follows which is learned from the launches themselves (a round's
//! sequence repeats), so no caller has to name it. A hint only: no kernel's inputs or arithmetic change.

use crate::device::{Arg, Dev};
use crate::ops::CudaMatrix;
use std::collections::HashMap;
use std::sync::OnceLock;

/// Up to three byte ranges (address, length) of one matrix to ask L2 for; a length of 0 asks for nothing.
pub(crate) type Ranges = [(u64, u64); 3];
const NONE: Ranges = [(0, 0); 3];

/// The successor each weight-streaming matrix had at its last launch, keyed by the matrix's first address.
#[derive(Default)]
pub(crate) struct Ahead {
    last: Option<u64>,
    next: HashMap<u64, Ranges>,
}

impl Ahead {
    /// Notes a launch of the matrix at `key`, whose first bytes are `own`, as the successor of the launch before
    /// it, and returns what this launch should ask L2 for: its own successor's ranges from last time.
    pub(crate) fn step(&mut self, key: u64, own: Ranges) -> Ranges {
        if let Some(prev) = self.last.replace(key) {
            self.next.insert(prev, own);
        }
        self.next.get(&key).copied().unwrap_or(NONE)
    }

    /// Forgets every address (a weight is being freed: no launch may ask for memory that is gone).
    pub(crate) fn forget(&mut self) {
        self.last = None;
        self.next.clear();
    }
}

/// Bytes of a matrix's codes (or bf16 weights) asked for ahead: `TENSORFOLD_CUDA_L2_AHEAD_KB`, 8 MiB by default
/// (0 turns the look-ahead off). Larger sizes were slower, their bytes likely evicting each other or the next
/// launch's before they are read (BENCHMARKS.md §7, calls 179-180).
pub(crate) fn ahead_bytes() -> u64 {
    static B: OnceLock<u64> = OnceLock::new();
    *B.get_or_init(|| {
        std::env::var("TENSORFOLD_CUDA_L2_AHEAD_KB")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(8192)
            .saturating_mul(1024)
    })
}

/// The last blocks of a launch that share the asking (`TENSORFOLD_CUDA_L2_AHEAD_BLOCKS`, default 132: one an SM
/// of an H100, the ones that finish last).
fn ahead_blocks() -> i32 {
    static B: OnceLock<i32> = OnceLock::new();
    *B.get_or_init(|| {
        std::env::var("TENSORFOLD_CUDA_L2_AHEAD_BLOCKS")
            .ok()
            .and_then(|v| v.parse::<i32>().ok())
            .filter(|&b| b > 0)
            .unwrap_or(132)
    })
}

/// The first `bytes` of w's codes and, in proportion, of its scales and biases (bf16 weights: of its data).
fn first_bytes(dev: &Dev, w: &CudaMatrix, bytes: u64) -> Ranges {
    match w {
        CudaMatrix::Dense { data, .. } => [
            (dev.ptr(data), bytes.min(data.len() as u64)),
            (0, 0),
            (0, 0),
        ],
        CudaMatrix::Affine {
            codes,
            scales,
            biases,
            ..
        } => {
            let c = bytes.min(codes.len() as u64);
            let part = |n: usize| (c as u128 * n as u128 / codes.len().max(1) as u128) as u64;
            [
                (dev.ptr(codes), c),
                (dev.ptr(scales), part(scales.len())),
                (dev.ptr(biases), part(biases.len())),
            ]
        }
    }
}

/// The look-ahead arguments of a decode projection launch of `w` (the first matrix of the launch): three
/// (address, length) pairs and the blocks that ask. All zero when the look-ahead is off.
pub(crate) fn ahead_args(dev: &Dev, w: &CudaMatrix) -> Vec<Arg> {
    let bytes = ahead_bytes();
    let ranges = if bytes == 0 {
        NONE
    } else {
        let own = first_bytes(dev, w, bytes);
        dev.ahead.lock().map_or(NONE, |mut a| a.step(own[0].0, own))
    };
    let mut args: Vec<Arg> = ranges
        .iter()
        .flat_map(|&(p, n)| [Arg::P(p), Arg::P(n)])
        .collect();
    args.push(Arg::I(ahead_blocks()));
    args
}

#[cfg(test)]
mod tests {
    use super::{Ahead, NONE};

    #[test]
    fn a_launch_asks_for_the_matrix_that_followed_it_last_time() {
        let mut a = Ahead::default();
        let r = |k: u64| [(k, 8), (k + 1, 1), (k + 2, 1)];
        // The first round learns the order and asks for nothing.
        assert_eq!(a.step(10, r(10)), NONE);
        assert_eq!(a.step(20, r(20)), NONE);
        assert_eq!(a.step(30, r(30)), NONE);
        // The next round: each asks for its successor, the last for the first.
        assert_eq!(a.step(10, r(10)), r(20));
        assert_eq!(a.step(20, r(20)), r(30));
        assert_eq!(a.step(30, r(30)), r(10));
        a.forget();
        assert_eq!(a.step(10, r(10)), NONE);
    }
}
