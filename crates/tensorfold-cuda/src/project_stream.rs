//! Which build of the 4-bit weight stream (project_stream.cu) a launch takes: its warps, and for the one-row-tile
//! `_w8` kernels the occupancy ptxas built them for. Every build runs the same code, so the bits never depend on it.

use crate::device::env_usize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Most warps a streamed block of `wpl` words per lane, `stages` stages and `tiles` output tiles holds:
/// project_stream.cu's stream_warps (16 when the stages fit 47 KB of shared memory, else 8).
pub(super) fn stream_max_warps(wpl: usize, stages: usize, tiles: usize) -> usize {
    let stage_bytes = tiles * (256 * wpl + 128);
    if 16 * stages * stage_bytes <= 47 * 1024 {
        16
    } else {
        8
    }
}

/// The name suffix of the weight-stream kernel built for exactly `warps` warps (project_stream.cu's `_w8`: groups of
/// 64, 4 stages, one output tile a block, 8 warps: every large matrix of the published shapes in calls of up to 8
/// rows), or "" for the kernel that reads its warps at run time. The same arithmetic either way (the self-test
/// compares them bit for bit); `TENSORFOLD_CUDA_FIXED_WARPS=0` keeps the run-time kernel, for same-run comparisons.
pub(super) fn stream_fixed_warps(
    group_size: usize,
    stages: usize,
    tiles: usize,
    warps: usize,
) -> &'static str {
    static ON: OnceLock<bool> = OnceLock::new();
    let on =
        *ON.get_or_init(|| std::env::var("TENSORFOLD_CUDA_FIXED_WARPS").map_or(true, |v| v != "0"));
    if on && group_size == 64 && stages == 4 && tiles == 1 && warps == 8 {
        "_w8"
    } else {
        ""
    }
}

/// Set by the backend-ops test to make every one-row-tile `_w8` launch take the build for this many blocks an SM (4, 5
/// or 6; 0: the build w8_build chooses).
pub(crate) static W8_BUILD: AtomicUsize = AtomicUsize::new(0);

/// Launches of fewer blocks than the first take the 4-block build, of the second or more the 6-block one:
/// `TENSORFOLD_CUDA_W8_B4_BELOW` and `TENSORFOLD_CUDA_W8_B6_FROM` (default: every launch the 5-block build).
fn w8_thresholds() -> (u32, u32) {
    static T: OnceLock<(u32, u32)> = OnceLock::new();
    *T.get_or_init(|| {
        let get = |k: &str, d: u32| env_usize(k).map_or(d, |v| v.min(u32::MAX as usize) as u32);
        (
            get("TENSORFOLD_CUDA_W8_B4_BELOW", 0),
            get("TENSORFOLD_CUDA_W8_B6_FROM", u32::MAX),
        )
    })
}

/// The kernel a launch of `blocks` blocks of weight-stream kernel `name` takes: for the one-row-tile `_w8` kernels
/// (built for 5 blocks an SM), their build for 4 or 6 blocks where w8_thresholds says. Call 86 timed each build on
/// every launch: 6 blocks an SM (40 registers) hid more of the wait on launches of many blocks (27B gate/up, 2,176
/// blocks: 43.6 µs against 44.2 with 5), 4 (64 registers) did better on launches that fill less than a wave
/// (27B down, 320 blocks: 27.3 µs against 28.2).
pub(super) fn w8_build(name: &str, blocks: u32) -> String {
    if !name.ends_with("_nt1_s4_m1_w8") {
        return name.to_string();
    }
    let forced = W8_BUILD.load(Ordering::Relaxed);
    let (b4_below, b6_from) = w8_thresholds();
    let build = match forced {
        0 if blocks < b4_below => 4,
        0 if blocks >= b6_from => 6,
        0 => 5,
        b => b,
    };
    match build {
        4 => format!("{name}b4"),
        6 => format!("{name}b6"),
        _ => name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::w8_build;

    #[test]
    fn only_one_row_tile_w8_launches_change_build_and_by_default_none_does() {
        let w8 = "project_stream_a4_g2_bf16_nt1_s4_m1_w8";
        for blocks in [1, 320, 2176, 15_520] {
            assert_eq!(w8_build(w8, blocks), w8);
        }
        let two_tiles = "project_stream_a4_g2_bf16_nt2_s4_m1_w8";
        assert_eq!(w8_build(two_tiles, 5), two_tiles);
    }
}
