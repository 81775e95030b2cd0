//! The mixer checks of the backend-ops test: attention and DeltaNet rounds (chains, trees, several slots) against
//! the CPU twin, and bit-for-bit invariance: tree rows vs the plain chain of their path, chunked vs whole
//! prefill, a slot alone vs among others, and the state `keep` leaves after a replay vs after a plain chain.

use super::{act, rel_err, Report, Rng};
use crate::CudaBackend;
use tensorfold_backend::cpu::CpuBackend;
use tensorfold_backend::{AttnParams, AttnSpec, Backend, KvDtype, RowRef};

#[path = "selftest_mix_linear.rs"]
mod linear;
pub(super) use linear::check_deltanet;
#[cfg(test)]
use linear::{cpu_lin_state, lin_params, Lin};
#[cfg(test)]
use tensorfold_backend::LinearSpec;

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

struct Attn<B: Backend> {
    be: B,
    p: AttnParams<B>,
}

/// A backend whose KV snapshots can be read on the host (`[len, row]` keys, then values), to compare states.
trait KvHost: Backend {
    fn kv_host(&self, snap: &Self::KvSnapshot) -> (Vec<f32>, Vec<f32>);
}

impl KvHost for CpuBackend {
    fn kv_host(&self, snap: &(Vec<f32>, Vec<f32>)) -> (Vec<f32>, Vec<f32>) {
        snap.clone()
    }
}

impl KvHost for CudaBackend {
    fn kv_host(&self, snap: &crate::CudaKvSnapshot) -> (Vec<f32>, Vec<f32>) {
        snap.host()
    }
}

impl<B: KvHost> Mix for Attn<B> {
    type St = B::KvState;
    fn fresh(&self) -> B::KvState {
        self.be.new_kv_state(&self.p.spec)
    }
    fn round(&self, rows: &[Row], sts: &mut [&mut B::KvState]) -> Vec<f32> {
        let s = self.p.spec;
        let (n, qc, kc) = (
            rows.len(),
            s.heads * 2 * s.head_dim,
            s.kv_heads * s.head_dim,
        );
        let qg = act(&self.be, n, qc, &inputs(rows, qc, 1, 1.0));
        let k = act(&self.be, n, kc, &inputs(rows, kc, 2, 1.0));
        let v = act(&self.be, n, kc, &inputs(rows, kc, 3, 1.0));
        self.be.to_host(
            &self
                .be
                .gated_attention(&self.p, &qg, &k, &v, &refs(rows), sts),
        )
    }
    fn keep(&self, st: &mut B::KvState, path: &[usize]) {
        self.be.keep_kv(st, path).expect("keep_kv");
    }
    fn keep_many(&self, items: &mut [(&mut B::KvState, &[usize])]) {
        self.be.keep_kv_many(items).expect("keep_kv_many");
    }
    fn state(&self, st: &B::KvState) -> Vec<f32> {
        let (mut k, v) = self.be.kv_host(&self.be.snapshot_kv(st));
        k.extend(v);
        k
    }
    fn copy(&self, st: &B::KvState) -> B::KvState {
        self.be
            .restore_kv(&self.p.spec, &self.be.snapshot_kv(st))
            .expect("restore_kv")
    }
    fn out_cols(&self) -> usize {
        self.p.spec.heads * self.p.spec.head_dim
    }
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

fn attn_params<B: Backend>(be: &B, s: AttnSpec, rng: &mut Rng) -> AttnParams<B> {
    let w = |rng: &mut Rng| {
        be.vector(
            &rng.vec(s.head_dim, 0.3)
                .iter()
                .map(|x| 1.0 + x)
                .collect::<Vec<_>>(),
        )
        .expect("vector")
    };
    let mut r2 = Rng(rng.0);
    AttnParams {
        spec: s,
        q_norm: w(&mut r2),
        k_norm: w(&mut r2),
        eps: 1e-6,
    }
}

/// Attention rounds against the CPU twin (two head shapes), long contexts, and grouped heads == one head; with
/// f32 KV pages, then with bf16 ones (`--kv-cache-dtype bf16`: the `_kvbf16` kernels).
pub(super) fn check_attention(
    rep: &mut Report,
    cpu: &CpuBackend,
    gpu: &CudaBackend,
    rng: &mut Rng,
) {
    for kv in [KvDtype::F32, KvDtype::Bf16] {
        check_attention_kv(
            rep,
            &cpu.clone().with_kv_dtype(kv),
            &gpu.clone().with_kv_dtype(kv),
            rng,
        );
    }
}

fn check_attention_kv(rep: &mut Report, cpu: &CpuBackend, gpu: &CudaBackend, rng: &mut Rng) {
    let kv = gpu.kv_dtype();
    // bf16 pages: a key or value the two backends make a hair apart may round to neighbouring bf16 numbers, one
    // bf16 step (2^-8 of it) apart; the bit-for-bit checks below are as strict as with f32.
    let tol = match kv {
        KvDtype::F32 => 2e-4,
        KvDtype::Bf16 => 1e-2,
    };
    let attn_specs = [
        (
            "attention hd32 4/2 heads rope 16",
            AttnSpec {
                heads: 4,
                kv_heads: 2,
                head_dim: 32,
                rotary_dim: 16,
                rope_theta: 1e7,
            },
        ),
        (
            "attention hd256 24/4 heads rope 64 (27B)",
            AttnSpec {
                heads: 24,
                kv_heads: 4,
                head_dim: 256,
                rotary_dim: 64,
                rope_theta: 1e7,
            },
        ),
    ];
    for (name, s) in attn_specs {
        let name = &format!("{name}, {} KV", kv.name());
        let seed = rng.next();
        let c = Attn {
            be: cpu.clone(),
            p: attn_params(cpu, s, &mut Rng(seed)),
        };
        let g = Attn {
            be: gpu.clone(),
            p: attn_params(gpu, s, &mut Rng(seed)),
        };
        compare(rep, name, &c, &g, tol);
        check_long_attention(rep, name, &c, &g, tol);
        // Query heads grouped per block == one head per block, bit for bit (short and long contexts).
        let run = |mode: u8| {
            crate::attention::GROUPING.store(mode, std::sync::atomic::Ordering::Relaxed);
            let r = (scenario(&g).0, long_run(&g));
            crate::attention::GROUPING.store(0, std::sync::atomic::Ordering::Relaxed);
            r
        };
        let ((one, one_long), (grouped, grouped_long)) = (run(1), run(2));
        // Rows of one chain through the shared-key kernel (attn_block) == through attn_chunk, bit for bit.
        let run_block = |mode: u8| {
            crate::attention::BLOCK_MODE.store(mode, std::sync::atomic::Ordering::Relaxed);
            let r = (scenario(&g).0, long_run(&g));
            crate::attention::BLOCK_MODE.store(0, std::sync::atomic::Ordering::Relaxed);
            r
        };
        let ((chunked, chunked_long), (blocked, blocked_long)) = (run_block(1), run_block(2));
        same_run(
            rep,
            &format!("{name}: shared-key blocks == a block per row"),
            &blocked,
            &chunked,
        );
        rep.same(
            &format!("{name}: shared-key blocks == a block per row, 600 keys"),
            &[
                blocked_long.prefill,
                blocked_long.chain,
                blocked_long.whole,
                blocked_long.alone,
            ]
            .concat(),
            &[
                chunked_long.prefill,
                chunked_long.chain,
                chunked_long.whole,
                chunked_long.alone,
            ]
            .concat(),
        );
        same_run(
            rep,
            &format!("{name}: grouped heads == one head"),
            &grouped,
            &one,
        );
        rep.same(
            &format!("{name}: grouped heads == one head, 600 keys"),
            &[grouped_long.prefill, grouped_long.chain].concat(),
            &[one_long.prefill, one_long.chain].concat(),
        );
    }
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

/// What the long-context scenario produced on one backend.
struct LongRun {
    /// Slot 0's 600 prefill rows, run as 300 + 300 beside slot 1's 40.
    prefill: Vec<f32>,
    /// The chain round after it: slot 0's 3 rows then slot 1's 2.
    chain: Vec<f32>,
    /// Slot 0's 600 rows as one round alone, and its 3-row chain alone.
    whole: Vec<f32>,
    alone: Vec<f32>,
}

/// Attention rows whose keys span several chunk blocks (merged by attn_merge on the device).
fn long_run<M: Mix>(m: &M) -> LongRun {
    const HALF: usize = 300;
    let (mut s0, mut s1) = (m.fresh(), m.fresh());
    let mut prefill = Vec::new();
    for half in 0..2 {
        let mut rows = chain(0, half * HALF, 0, HALF, (half * HALF) as u64);
        if half == 0 {
            rows.extend(chain(1, 0, HALF, 40, 900));
        }
        let out = m.round(&rows, &mut [&mut s0, &mut s1]);
        prefill.extend_from_slice(&out[..HALF * m.out_cols()]);
        m.keep(&mut s0, &(0..HALF).collect::<Vec<_>>());
        if half == 0 {
            m.keep(&mut s1, &(HALF..HALF + 40).collect::<Vec<_>>());
        }
    }
    let copy = m.copy(&s0);
    let mut rows = chain(0, 2 * HALF, 0, 3, 5000);
    rows.extend(chain(1, 40, 3, 2, 6000));
    let chain_out = m.round(&rows, &mut [&mut s0, &mut s1]);
    let mut alone_st = copy;
    let alone = m.round(&chain(0, 2 * HALF, 0, 3, 5000), &mut [&mut alone_st]);
    let mut fresh = m.fresh();
    let whole = m.round(&chain(0, 0, 0, 2 * HALF, 0), &mut [&mut fresh]);
    LongRun {
        prefill,
        chain: chain_out,
        whole,
        alone,
    }
}

fn check_long_attention<C: Mix, G: Mix>(rep: &mut Report, name: &str, cpu: &C, gpu: &G, tol: f64) {
    let (want, got) = (long_run(cpu), long_run(gpu));
    let cols = gpu.out_cols();
    rep.close(
        &format!("{name}: 600-row prefill outputs vs cpu"),
        rel_err(&got.prefill, &want.prefill),
        tol,
    );
    rep.close(
        &format!("{name}: chain round at 600 keys vs cpu"),
        rel_err(&got.chain, &want.chain),
        tol,
    );
    rep.same(
        &format!("{name}: 600-row prefill as 300+300 among others == whole, alone"),
        &got.prefill,
        &got.whole,
    );
    rep.same(
        &format!("{name}: chain at 600 keys among others == alone"),
        &got.chain[..3 * cols],
        &got.alone,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

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
