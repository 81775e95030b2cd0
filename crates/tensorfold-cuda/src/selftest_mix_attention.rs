//! The attention half of the mixer checks (selftest_mix.rs): attention rounds against the CPU twin with f32 and
//! bf16 KV pages, long contexts over several chunk blocks, and the kernel choices that must give the same bits
//! (grouped heads, shared-key blocks).

use super::{chain, compare, inputs, refs, same_run, scenario, Mix, Row};
use crate::selftest::{act, rel_err, Report, Rng};
use crate::CudaBackend;
use tensorfold_backend::cpu::CpuBackend;
use tensorfold_backend::{AttnParams, AttnSpec, Backend, KvDtype};

pub(super) struct Attn<B: Backend> {
    pub(super) be: B,
    pub(super) p: AttnParams<B>,
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

pub(super) fn attn_params<B: Backend>(be: &B, s: AttnSpec, rng: &mut Rng) -> AttnParams<B> {
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
pub(in crate::selftest) fn check_attention(
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
    // A snapshot keeps its dtype: restored into a state of the other one it is refused, not read as the wrong bits.
    let s = AttnSpec {
        heads: 4,
        kv_heads: 2,
        head_dim: 32,
        rotary_dim: 16,
        rope_theta: 1e7,
    };
    let (g32, g16) = (
        gpu.clone().with_kv_dtype(KvDtype::F32),
        gpu.clone().with_kv_dtype(KvDtype::Bf16),
    );
    let a = Attn {
        be: g32.clone(),
        p: attn_params(&g32, s, &mut Rng(3)),
    };
    let mut st = a.fresh();
    a.round(&chain(0, 0, 0, 5, 1), &mut [&mut st]);
    a.keep(&mut st, &[0, 1, 2, 3, 4]);
    let snap = g32.snapshot_kv(&st);
    let refused = [
        g16.restore_kv(&s, &snap).is_err(),
        g32.restore_kv(&s, &snap).is_ok(),
    ];
    rep.none_differ(
        "attention: an f32 KV snapshot is refused by a bf16 state, taken by an f32 one",
        refused.iter().filter(|&&ok| !ok).count(),
        2,
    );
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
        // Six heads a block (attn_chunk_g6, dynamic shared memory) where six divide a kv head's: the 27B's.
        let (six, six_long) = run(3);
        // Rows of one chain through the shared-key kernel (attn_block) == through attn_chunk, bit for bit.
        let run_block = |mode: u8| {
            crate::attention::BLOCK_MODE.store(mode, std::sync::atomic::Ordering::Relaxed);
            let r = (scenario(&g).0, long_run(&g));
            crate::attention::BLOCK_MODE.store(0, std::sync::atomic::Ordering::Relaxed);
            r
        };
        let (chunked, chunked_long) = run_block(1);
        let chunked_long = chunked_long.all();
        // Mode 2: two keys a thread; 3: four keys a thread, two tiles at a time; 4: a chain a lane (the default).
        for (mode, what) in [
            (2, "shared-key blocks"),
            (3, "shared-key blocks of four keys a thread"),
            (4, "shared-key blocks of a chain a lane"),
        ] {
            let (blocked, blocked_long) = run_block(mode);
            same_run(
                rep,
                &format!("{name}: {what} == a block per row"),
                &blocked,
                &chunked,
            );
            rep.same(
                &format!("{name}: {what} == a block per row, 600 keys"),
                &blocked_long.all(),
                &chunked_long,
            );
        }
        same_run(
            rep,
            &format!("{name}: grouped heads == one head"),
            &grouped,
            &one,
        );
        let one_long = [one_long.prefill, one_long.chain].concat();
        rep.same(
            &format!("{name}: grouped heads == one head, 600 keys"),
            &[grouped_long.prefill, grouped_long.chain].concat(),
            &one_long,
        );
        same_run(
            rep,
            &format!("{name}: six heads a block == one head"),
            &six,
            &one,
        );
        rep.same(
            &format!("{name}: six heads a block == one head, 600 keys"),
            &[six_long.prefill, six_long.chain].concat(),
            &one_long,
        );
    }
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

impl LongRun {
    /// Everything the scenario produced, in one vector.
    fn all(self) -> Vec<f32> {
        [self.prefill, self.chain, self.whole, self.alone].concat()
    }
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

pub(super) fn check_long_attention<C: Mix, G: Mix>(
    rep: &mut Report,
    name: &str,
    cpu: &C,
    gpu: &G,
    tol: f64,
) {
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
