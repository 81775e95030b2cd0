//! The DeltaNet half of the mixer checks (selftest_mix.rs): DeltaNet rounds against the CPU twin, and the
//! kernel layouts that must give the same bits (split heads, inputs staged ahead one row or a batch at a time).

use super::{act, chain, compare, inputs, refs, same_run, scenario, Mix, Row};
use crate::deltanet::{BATCH_INPUTS, OCT_INPUTS, REGISTER_INPUTS, RING_INPUTS, WHOLE_HEADS};
use crate::selftest::{with, Report, Rng};
use crate::CudaBackend;
use tensorfold_backend::cpu::CpuBackend;
use tensorfold_backend::{Backend, LinearParams, LinearSpec};

/// A DeltaNet layer of one backend as a Mix: its parameters, and how its state reads back.
pub(super) struct Lin<B: Backend> {
    pub(super) be: B,
    pub(super) p: LinearParams<B>,
    pub(super) snap: fn(&B, &B::LinearState) -> Vec<f32>,
}

impl<B: Backend> Mix for Lin<B> {
    type St = B::LinearState;
    fn fresh(&self) -> B::LinearState {
        self.be.new_linear_state(&self.p.spec)
    }
    fn round(&self, rows: &[Row], sts: &mut [&mut B::LinearState]) -> Vec<f32> {
        let s = self.p.spec;
        let (n, c, vt, hv) = (
            rows.len(),
            s.conv_channels(),
            s.value_heads * s.value_dim,
            s.value_heads,
        );
        let be = &self.be;
        let mixed = act(be, n, c, &inputs(rows, c, 4, 1.0));
        let z = act(be, n, vt, &inputs(rows, vt, 5, 1.0));
        let b = act(be, n, hv, &inputs(rows, hv, 6, 2.0));
        let a = act(be, n, hv, &inputs(rows, hv, 7, 2.0));
        be.to_host(&be.gated_deltanet(&self.p, &mixed, &z, &b, &a, &refs(rows), sts))
    }
    fn keep(&self, st: &mut B::LinearState, path: &[usize]) {
        self.be
            .keep_linear(&self.p.spec, st, path)
            .expect("keep_linear");
    }
    fn keep_many(&self, items: &mut [(&mut B::LinearState, &[usize])]) {
        self.be
            .keep_linear_many(&self.p.spec, items)
            .expect("keep_linear_many");
    }
    fn state(&self, st: &B::LinearState) -> Vec<f32> {
        (self.snap)(&self.be, st)
    }
    fn copy(&self, st: &B::LinearState) -> B::LinearState {
        self.be.restore_linear(&self.be.snapshot_linear(st))
    }
    fn out_cols(&self) -> usize {
        self.p.spec.value_heads * self.p.spec.value_dim
    }
}

pub(super) fn lin_params<B: Backend>(be: &B, s: LinearSpec, seed: u64) -> LinearParams<B> {
    let mut g = Rng(seed);
    let v = |g: &mut Rng, n: usize, scale: f32, off: f32| {
        be.vector(&g.vec(n, scale).iter().map(|x| x + off).collect::<Vec<_>>())
            .expect("vector")
    };
    LinearParams {
        spec: s,
        conv: v(&mut g, s.conv_channels() * s.conv_kernel, 0.5, 0.0),
        a_log: v(&mut g, s.value_heads, 0.5, 0.0),
        dt_bias: v(&mut g, s.value_heads, 0.5, 0.0),
        norm: v(&mut g, s.value_dim, 0.3, 1.0),
        eps: 1e-6,
    }
}

pub(super) fn cpu_lin_state(
    be: &CpuBackend,
    st: &tensorfold_backend::cpu::CpuLinearState,
) -> Vec<f32> {
    let s = be.snapshot_linear(st);
    let mut v = s.conv_tail;
    v.extend(s.recurrent);
    v
}

fn gpu_lin_state(be: &CudaBackend, st: &crate::CudaLinear) -> Vec<f32> {
    let (mut v, recurrent) = be.snapshot_linear(st).host();
    v.extend(recurrent);
    v
}

/// DeltaNet rounds against the CPU twin (three head shapes), split heads == whole heads, and inputs staged ahead ==
/// inputs in registers.
pub(in crate::selftest) fn check_deltanet(
    rep: &mut Report,
    cpu: &CpuBackend,
    gpu: &CudaBackend,
    rng: &mut Rng,
) {
    let lin_specs = [
        (
            "deltanet 1/3 heads 32x16",
            LinearSpec {
                key_heads: 1,
                value_heads: 3,
                key_dim: 32,
                value_dim: 16,
                conv_kernel: 4,
            },
        ),
        (
            "deltanet 2/4 heads 16x32",
            LinearSpec {
                key_heads: 2,
                value_heads: 4,
                key_dim: 16,
                value_dim: 32,
                conv_kernel: 4,
            },
        ),
        (
            "deltanet 2/6 heads 128x128",
            LinearSpec {
                key_heads: 2,
                value_heads: 6,
                key_dim: 128,
                value_dim: 128,
                conv_kernel: 4,
            },
        ),
    ];
    for (name, s) in lin_specs {
        let seed = rng.next();
        let c = Lin {
            be: cpu.clone(),
            p: lin_params(cpu, s, seed),
            snap: cpu_lin_state,
        };
        let g = Lin {
            be: gpu.clone(),
            p: lin_params(gpu, s, seed),
            snap: gpu_lin_state,
        };
        compare(rep, name, &c, &g, 2e-4);
        // The heads split over blocks (the default) == one block per head, bit for bit.
        let (split, _) = scenario(&g);
        let (whole, _) = with(&WHOLE_HEADS, || scenario(&g));
        same_run(
            rep,
            &format!("{name}: split heads == whole heads"),
            &split,
            &whole,
        );
        // Each row's inputs staged in shared memory one row ahead (the ring) == loaded one row ahead in registers.
        let (in_registers, _) = with(&REGISTER_INPUTS, || scenario(&g));
        let (staged, _) = with(&RING_INPUTS, || scenario(&g));
        same_run(
            rep,
            &format!("{name}: inputs staged ahead == inputs in registers"),
            &staged,
            &in_registers,
        );
        // The batched kernel (deltanet_batch.cu) == inputs in registers.
        let (batched, _) = with(&BATCH_INPUTS, || scenario(&g));
        same_run(
            rep,
            &format!("{name}: inputs staged a batch at a time == inputs in registers"),
            &batched,
            &in_registers,
        );
        // A state row on eight lanes (deltanet_octets.cu) == inputs in registers.
        let (octets, _) = with(&OCT_INPUTS, || scenario(&g));
        same_run(
            rep,
            &format!("{name}: a state row on eight lanes == inputs in registers"),
            &octets,
            &in_registers,
        );
        // Chains long enough for the batched kernel to go through several batches and reuse its slots.
        let registers = with(&REGISTER_INPUTS, || long_chains(&g));
        let ring = with(&RING_INPUTS, || long_chains(&g));
        let batched = with(&BATCH_INPUTS, || long_chains(&g));
        let octets = with(&OCT_INPUTS, || long_chains(&g));
        let batched_whole = with(&BATCH_INPUTS, || with(&WHOLE_HEADS, || long_chains(&g)));
        rep.same(
            &format!("{name}: chains of 45 and 19 rows, staged one row ahead == in registers (outputs, kept states)"),
            &ring,
            &registers,
        );
        rep.same(
            &format!("{name}: chains of 45 and 19 rows, staged a batch at a time == in registers (outputs, kept states)"),
            &batched,
            &registers,
        );
        rep.same(
            &format!("{name}: chains of 45 and 19 rows, a state row on eight lanes == in registers (outputs, kept states)"),
            &octets,
            &registers,
        );
        rep.same(
            &format!("{name}: the same, one block a head"),
            &batched_whole,
            &registers,
        );
        // Decode rounds (one row a slot, the recurrence's plain kernel) after a prefill, a slot sitting one out.
        rep.close(
            &format!("{name}: decode rounds of one row a slot vs cpu (outputs, kept states)"),
            crate::selftest::rel_err(&decode_rounds(&g), &decode_rounds(&c)),
            2e-4,
        );
    }
}

/// Three slots prefilled with 5, 3 and 1 rows, then three decode rounds of one row a slot (the second without slot
/// 1), each row kept: every round's outputs, then the three states.
fn decode_rounds<M: Mix>(m: &M) -> Vec<f32> {
    let mut sts: Vec<M::St> = (0..3).map(|_| m.fresh()).collect();
    let lens = [5usize, 3, 1];
    let mut pre = Vec::new();
    for (slot, &n) in lens.iter().enumerate() {
        let first = pre.len();
        pre.extend(chain(slot, 0, first, n, 10 * slot as u64));
    }
    let mut out = {
        let mut r: Vec<&mut M::St> = sts.iter_mut().collect();
        m.round(&pre, &mut r)
    };
    let mut at = 0;
    for (slot, &n) in lens.iter().enumerate() {
        m.keep(&mut sts[slot], &(at..at + n).collect::<Vec<_>>());
        at += n;
    }
    let mut pos = lens;
    for round in 0..3u64 {
        let slots: &[usize] = if round == 1 { &[0, 2] } else { &[0, 1, 2] };
        let rows: Vec<Row> = slots
            .iter()
            .map(|&s| Row {
                slot: s,
                pos: pos[s],
                parent: None,
                token: 100 + 7 * round + s as u64,
            })
            .collect();
        out.extend({
            let mut r: Vec<&mut M::St> = sts.iter_mut().collect();
            m.round(&rows, &mut r)
        });
        for (k, &s) in slots.iter().enumerate() {
            m.keep(&mut sts[s], &[k]);
            pos[s] += 1;
        }
    }
    for st in &sts {
        out.extend(m.state(st));
    }
    out
}

/// A round of two chains, 45 rows in slot 0 and 19 in slot 1, each kept whole: the outputs, then both states.
fn long_chains<M: Mix>(m: &M) -> Vec<f32> {
    let mut sts: Vec<M::St> = (0..2).map(|_| m.fresh()).collect();
    let mut rows = chain(0, 0, 0, 45, 7);
    rows.extend(chain(1, 0, 45, 19, 90));
    let mut out = {
        let mut r: Vec<&mut M::St> = sts.iter_mut().collect();
        m.round(&rows, &mut r)
    };
    m.keep(&mut sts[0], &(0..45).collect::<Vec<_>>());
    m.keep(&mut sts[1], &(45..64).collect::<Vec<_>>());
    for st in &sts {
        out.extend(m.state(st));
    }
    out
}
