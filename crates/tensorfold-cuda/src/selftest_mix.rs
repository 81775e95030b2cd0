//! The mixer checks of the backend-ops test: attention and DeltaNet rounds (chains, trees, several slots) against
//! the CPU twin, and bit-for-bit invariance: tree rows vs the plain chain of their path, chunked vs whole
//! prefill, a slot alone vs among others, and the state `keep` leaves after a replay vs after a plain chain.

use super::{act, rel_err, Report, Rng};
use tensorfold_backend::RowRef;

#[path = "selftest_mix_attention.rs"]
mod attention;
#[path = "selftest_mix_linear.rs"]
mod linear;
pub(super) use attention::check_attention;
pub(super) use linear::check_deltanet;

/// A round row: slot, position, parent (round index) and a token that, with slot and position, fixes its inputs.
#[derive(Clone, Copy)]
struct Row {
    slot: usize,
    pos: usize,
    parent: Option<usize>,
    token: u64,
}

/// One mixer on one backend: its state per slot, a round, keep, and the committed state as host floats.
trait Mix {
    type St;
    fn fresh(&self) -> Self::St;
    fn round(&self, rows: &[Row], sts: &mut [&mut Self::St]) -> Vec<f32>;
    fn keep(&self, st: &mut Self::St, path: &[usize]);
    /// `keep` for several slots at once (one launch on the GPU).
    fn keep_many(&self, items: &mut [(&mut Self::St, &[usize])]);
    fn state(&self, st: &Self::St) -> Vec<f32>;
    fn copy(&self, st: &Self::St) -> Self::St;
    fn out_cols(&self) -> usize;
}

fn refs(rows: &[Row]) -> Vec<RowRef> {
    rows.iter()
        .map(|r| RowRef {
            slot: r.slot,
            pos: r.pos,
            parent: r.parent,
        })
        .collect()
}

/// The inputs of a row: `cols` values fixed by (position, token, which input), whatever its slot.
fn inputs(rows: &[Row], cols: usize, which: u64, scale: f32) -> Vec<f32> {
    rows.iter()
        .flat_map(|r| {
            let seed = 0x1000_0000_01B3 ^ (r.pos as u64) << 20 ^ r.token << 40 ^ which;
            let mut g = Rng(seed | 1);
            g.next();
            g.vec(cols, scale)
        })
        .collect()
}

fn chain(slot: usize, start: usize, first: usize, n: usize, token: u64) -> Vec<Row> {
    (0..n)
        .map(|i| Row {
            slot,
            pos: start + i,
            parent: (i > 0).then(|| first + i - 1),
            token: token + i as u64,
        })
        .collect()
}

fn rows_of(out: &[f32], cols: usize, idx: &[usize]) -> Vec<f32> {
    idx.iter()
        .flat_map(|&i| out[i * cols..(i + 1) * cols].iter().copied())
        .collect()
}

/// What one scenario produced on one backend (for the comparison with the twin).
struct Run {
    prefill: Vec<f32>,
    tree: Vec<f32>,
    kept: Vec<Vec<f32>>,
}

/// The tree round: slot 0 gets A, B(A), C(A), D(B), E(C); slot 1 a chain of 3; slot 2 one row; interleaved.
fn tree_round(h: [usize; 3]) -> (Vec<Row>, [usize; 5]) {
    let r = |slot, pos, parent, token| Row {
        slot,
        pos,
        parent,
        token,
    };
    let rows = vec![
        r(0, h[0], None, 100),        // 0 A
        r(1, h[1], None, 200),        // 1
        r(0, h[0] + 1, Some(0), 101), // 2 B
        r(0, h[0] + 1, Some(0), 102), // 3 C
        r(2, h[2], None, 300),        // 4
        r(0, h[0] + 2, Some(2), 103), // 5 D
        r(1, h[1] + 1, Some(1), 201), // 6
        r(0, h[0] + 2, Some(3), 104), // 7 E
        r(1, h[1] + 2, Some(6), 202), // 8
    ];
    (rows, [0, 2, 3, 5, 7])
}

const HIST: [usize; 3] = [21, 5, 0];

/// Prefill (all slots in one round), then the tree round, then keep A-C-E / all of slot 1 / slot 2's row.
fn scenario<M: Mix>(m: &M) -> (Run, Vec<M::St>) {
    let mut sts: Vec<M::St> = (0..3).map(|_| m.fresh()).collect();
    let mut pre = chain(0, 0, 0, HIST[0], 0);
    pre.extend(chain(1, 0, HIST[0], HIST[1], 50));
    let prefill = {
        let mut r: Vec<&mut M::St> = sts.iter_mut().collect();
        m.round(&pre, &mut r)
    };
    m.keep(&mut sts[0], &(0..HIST[0]).collect::<Vec<_>>());
    m.keep(
        &mut sts[1],
        &(HIST[0]..HIST[0] + HIST[1]).collect::<Vec<_>>(),
    );
    let before: Vec<M::St> = sts.iter().map(|s| m.copy(s)).collect();
    let (rows, _) = tree_round(HIST);
    let tree = {
        let mut r: Vec<&mut M::St> = sts.iter_mut().collect();
        m.round(&rows, &mut r)
    };
    m.keep(&mut sts[0], &[0, 3, 7]);
    m.keep(&mut sts[1], &[1, 6, 8]);
    m.keep(&mut sts[2], &[4]);
    let kept = sts.iter().map(|s| m.state(s)).collect();
    (
        Run {
            prefill,
            tree,
            kept,
        },
        before,
    )
}

fn invariance<M: Mix>(rep: &mut Report, name: &str, m: &M, full: &Run, before: &[M::St]) {
    let cols = m.out_cols();
    // Chunked prefill of slot 0 alone (7 + 1 + 13 rows) vs the whole prefill among slot 1's rows.
    let mut st = m.fresh();
    let mut outs = Vec::new();
    let mut at = 0;
    for n in [7usize, 1, 13] {
        let rows = chain(0, at, 0, n, at as u64);
        outs.extend(m.round(&rows, &mut [&mut st]));
        m.keep(&mut st, &(0..n).collect::<Vec<_>>());
        at += n;
    }
    let whole: Vec<usize> = (0..HIST[0]).collect();
    rep.same(
        &format!("{name}: chunked 7+1+13 prefill alone == whole prefill among others (outputs)"),
        &outs,
        &rows_of(&full.prefill, cols, &whole),
    );
    rep.same(
        &format!("{name}: chunked prefill == whole prefill (committed state)"),
        &m.state(&st),
        &m.state(&before[0]),
    );
    // The tree's path A-C-E as a plain chain, alone, from a copy of the committed state.
    let (rows, idx) = tree_round(HIST);
    let mut st = m.copy(&before[0]);
    let path = [rows[idx[0]], rows[idx[2]], rows[idx[4]]];
    let plain: Vec<Row> = path
        .iter()
        .enumerate()
        .map(|(i, r)| Row {
            slot: 0,
            parent: (i > 0).then(|| i - 1),
            ..*r
        })
        .collect();
    let got = m.round(&plain, &mut [&mut st]);
    rep.same(
        &format!("{name}: tree rows A,C,E == their plain chain alone"),
        &got,
        &rows_of(&full.tree, cols, &[0, 3, 7]),
    );
    m.keep(&mut st, &[0, 1, 2]);
    rep.same(
        &format!("{name}: state kept from the tree (replay) == state after the plain chain"),
        &m.state(&st),
        &full.kept[0],
    );
    // Every slot kept in one keep (the engine's) == slot by slot: the prefill's two chains, then the tree
    // round's replayed path, chain and single row.
    let mut sts: Vec<M::St> = (0..3).map(|_| m.fresh()).collect();
    let mut pre = chain(0, 0, 0, HIST[0], 0);
    pre.extend(chain(1, 0, HIST[0], HIST[1], 50));
    m.round(&pre, &mut sts.iter_mut().collect::<Vec<_>>());
    let (p0, p1): (Vec<usize>, Vec<usize>) =
        ((0..HIST[0]).collect(), (HIST[0]..pre.len()).collect());
    if let [s0, s1, _] = &mut sts[..] {
        m.keep_many(&mut [(s0, &p0[..]), (s1, &p1[..])]);
    }
    rep.same(
        &format!(
            "{name}: prefill kept in one keep of two slots == slot by slot (committed states)"
        ),
        &[m.state(&sts[0]), m.state(&sts[1])].concat(),
        &[m.state(&before[0]), m.state(&before[1])].concat(),
    );
    let mut sts: Vec<M::St> = before.iter().map(|s| m.copy(s)).collect();
    m.round(&rows, &mut sts.iter_mut().collect::<Vec<_>>());
    if let [s0, s1, s2] = &mut sts[..] {
        m.keep_many(&mut [(s1, &[1, 6, 8][..]), (s0, &[0, 3, 7][..]), (s2, &[4][..])]);
    }
    rep.same(
        &format!(
            "{name}: tree round kept in one keep of three slots == slot by slot (committed states)"
        ),
        &sts.iter().flat_map(|s| m.state(s)).collect::<Vec<_>>(),
        &full.kept.concat(),
    );
    // Slot 0's tree alone vs among the other slots.
    let mut st = m.copy(&before[0]);
    let alone: Vec<Row> = idx
        .iter()
        .map(|&i| rows[i])
        .map(|r| Row {
            parent: r
                .parent
                .map(|p| idx.iter().position(|&x| x == p).unwrap_or(0)),
            ..r
        })
        .collect();
    let got = m.round(&alone, &mut [&mut st]);
    rep.same(
        &format!("{name}: slot 0's tree alone == among two other slots"),
        &got,
        &rows_of(&full.tree, cols, &idx),
    );
    // One decode row of slot 1 alone vs among 1, 7, 63 other single rows.
    let mut base = m.copy(&before[1]);
    let one = Row {
        slot: 0,
        pos: HIST[1],
        parent: None,
        token: 999,
    };
    let alone = m.round(&[one], &mut [&mut base]);
    for others in [1usize, 7, 63] {
        let mut sts: Vec<M::St> = (0..=others).map(|_| m.copy(&before[1])).collect();
        let rows: Vec<Row> = (0..=others)
            .map(|s| Row {
                slot: s,
                pos: HIST[1],
                parent: None,
                token: if s == others / 2 {
                    999
                } else {
                    1000 + s as u64
                },
            })
            .collect();
        let mut r: Vec<&mut M::St> = sts.iter_mut().collect();
        let out = m.round(&rows, &mut r);
        rep.same(
            &format!("{name}: a decode row alone == among {others} others"),
            &alone,
            &rows_of(&out, cols, &[others / 2]),
        );
    }
}

/// The GPU's scenario against the CPU twin's within `tol` (relative to the largest value), then its invariances.
fn compare<C: Mix, G: Mix>(rep: &mut Report, name: &str, cpu: &C, gpu: &G, tol: f64) {
    let (want, _) = scenario(cpu);
    let (got, before) = scenario(gpu);
    rep.close(
        &format!("{name}: prefill outputs vs cpu"),
        rel_err(&got.prefill, &want.prefill),
        tol,
    );
    rep.close(
        &format!("{name}: tree round outputs vs cpu"),
        rel_err(&got.tree, &want.tree),
        tol,
    );
    for s in 0..3 {
        rep.close(
            &format!("{name}: slot {s} state after keep vs cpu"),
            rel_err(&got.kept[s], &want.kept[s]),
            tol,
        );
    }
    invariance(rep, name, gpu, &got, &before);
}

/// Two layouts of one backend gave the same bits for a whole scenario: outputs and kept states.
fn same_run(rep: &mut Report, what: &str, a: &Run, b: &Run) {
    rep.same(&format!("{what}, prefill"), &a.prefill, &b.prefill);
    rep.same(&format!("{what}, tree"), &a.tree, &b.tree);
    rep.same(
        &format!("{what}, kept states"),
        &a.kept.concat(),
        &b.kept.concat(),
    );
}

#[cfg(test)]
mod tests {
    use super::attention::{attn_params, check_long_attention, Attn};
    use super::linear::{cpu_lin_state, lin_params, Lin};
    use super::*;
    use tensorfold_backend::cpu::CpuBackend;
    use tensorfold_backend::{AttnSpec, KvDtype, LinearSpec};

    #[test]
    fn the_mixer_checks_hold_for_the_cpu_twin_against_itself() {
        let cpu = CpuBackend::default();
        let mut rep = Report::default();
        let s = AttnSpec {
            heads: 4,
            kv_heads: 2,
            head_dim: 32,
            rotary_dim: 16,
            rope_theta: 1e7,
        };
        let a = Attn {
            be: cpu.clone(),
            p: attn_params(&cpu, s, &mut Rng(7)),
        };
        compare(&mut rep, "attention", &a, &a, 2e-4);
        check_long_attention(&mut rep, "attention", &a, &a, 2e-4);
        // The CPU's bf16 pages (keys and values widened from half the bytes) keep every invariance too.
        let cpu16 = cpu.clone().with_kv_dtype(KvDtype::Bf16);
        let a16 = Attn {
            be: cpu16.clone(),
            p: attn_params(&cpu16, s, &mut Rng(7)),
        };
        compare(&mut rep, "attention, bf16 KV", &a16, &a16, 0.0);
        check_long_attention(&mut rep, "attention, bf16 KV", &a16, &a16, 0.0);
        // And it is not the f32 cache under another name: its outputs differ.
        assert_ne!(scenario(&a16).0.prefill, scenario(&a).0.prefill);
        let s = LinearSpec {
            key_heads: 1,
            value_heads: 3,
            key_dim: 32,
            value_dim: 16,
            conv_kernel: 4,
        };
        let l = Lin {
            be: cpu.clone(),
            p: lin_params(&cpu, s, 9),
            snap: cpu_lin_state,
        };
        compare(&mut rep, "deltanet", &l, &l, 2e-4);
        assert!(rep.failures.is_empty(), "{:#?}", rep.lines);
        assert!(rep.lines.len() >= 20);
        eprintln!("{}", rep.lines.join("\n"));
    }
}
