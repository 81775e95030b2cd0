//! Which DeltaNet rounds take the fused decode mixer (deltanet_fused.cu: conv, recurrence step and gated norm in one
//! launch on a cluster of a head's blocks), and its launch. A child of `deltanet`, whose round pieces it uses.

use super::{KeepParams, DN_THREADS, MAX_KEY_DIM};
use crate::device::{Arg, Dev};
use crate::ops::Prepared;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;
use tensorfold_backend::{LinearSpec, RowRef};

/// Set by the backend-ops test: 0 = as the environment says, 1 = fused wherever the shape allows, 2 = never.
pub(crate) static FUSED_DECODE: AtomicU8 = AtomicU8::new(0);

/// Whether rounds of one row a slot take the fused mixer: on unless `TENSORFOLD_CUDA_DN_FUSED=0` (same-run
/// comparisons with the three launches it replaces; the bits are the same either way).
fn fused_on() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    match FUSED_DECODE.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            *ON.get_or_init(|| std::env::var("TENSORFOLD_CUDA_DN_FUSED").map_or(true, |v| v != "0"))
        }
    }
}

/// The fused kernel for this round, or None: every row alone in its slot (no chain, no restore, no snapshot),
/// a head's rows split over `vm`-row-a-warp blocks as dn_recur_v{vm} (8·vm rows a block) that fill a cluster of 2,
/// 4 or 8 blocks exactly (the kernels built in deltanet_fused.cu), and key dims the kernels hold.
pub(super) fn kernel(s: &LinearSpec, vm: usize, rows: &[RowRef]) -> Option<String> {
    if !fused_on() || s.key_dim > MAX_KEY_DIM || s.key_heads == 0 {
        return None;
    }
    let per_block = DN_THREADS as usize / 32 * vm;
    let parts = s.value_dim / per_block;
    let built = matches!((vm, parts), (1, 2) | (1, 4) | (1, 8) | (2, 8));
    if !built || parts * per_block != s.value_dim {
        return None;
    }
    let mut seen = std::collections::HashSet::new();
    rows.iter()
        .all(|r| seen.insert(r.slot))
        .then(|| format!("dn_decode_fused_v{vm}_c{parts}"))
}

/// The round's pieces the fused launch reads and writes: (mixed, conv weights, conv outputs x), (tails, meta,
/// paths), (b, a, z), (out, its tensor-core form), (states, list) and the active slots.
pub(super) struct FusedRound<'a> {
    pub conv: (u64, u64, u64),
    pub rows: (u64, u64, u64),
    pub gates: (u64, u64, u64),
    pub out: (u64, Option<&'a Prepared>),
    pub states: (u64, u64),
    pub slots: usize,
}

/// Launches `name` over (value heads × blocks a head, slots); each head's blocks are one cluster.
pub(super) fn launch(dev: &Dev, name: &str, s: &LinearSpec, p: &KeepParams, f: &FusedRound) {
    let parts = name
        .rsplit("_c")
        .next()
        .and_then(|c| c.parse::<usize>().ok())
        .expect("a fused kernel's cluster size");
    let mut args = vec![
        Arg::P(f.conv.0),
        Arg::P(f.conv.1),
        Arg::P(f.conv.2),
        Arg::P(f.rows.0),
        Arg::P(f.rows.1),
        Arg::P(f.rows.2),
        Arg::P(f.gates.0),
        Arg::P(f.gates.1),
        Arg::P(f.gates.2),
        Arg::P(f.out.0),
        Arg::P(p.norm),
    ];
    args.extend(crate::ops::prepared_args(dev, f.out.1));
    args.extend([
        Arg::P(p.a_log),
        Arg::P(p.dt_bias),
        Arg::P(f.states.0),
        Arg::P(f.states.1),
        Arg::I(s.key_heads as i32),
        Arg::I(s.value_heads as i32),
        Arg::I(s.key_dim as i32),
        Arg::I(s.value_dim as i32),
        Arg::I(s.conv_kernel as i32),
        Arg::F(p.eps),
        Arg::I(f.out.1.is_some() as i32),
    ]);
    dev.launch(
        name,
        ((s.value_heads * parts) as u32, f.slots as u32, 1),
        DN_THREADS,
        &args,
    );
}
