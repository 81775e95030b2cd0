//! Ignored throughput report for `project`: decode GB/s against this machine's read bandwidth, prefill GFLOP/s;
//! run with `cargo test --release -p tensorfold-backend --lib decode_and_prefill_throughput_report -- --ignored --nocapture`.

use super::tests::{Kind, Rng};
use super::{project, simd_level};
use rayon::prelude::*;
use std::time::Instant;
use tensorfold_core::{DenseDType, MatrixRef};

/// Bytes streamed per cold pass: well past the last-level cache, so weights come from DRAM.
const POOL_BYTES: usize = 1 << 30;

/// A pool of bytes whose every little-endian u16 at an even offset is a normal bf16/f16 of modest size.
fn pool(rng: &mut Rng) -> Vec<u8> {
    let mut v = vec![0u8; POOL_BYTES];
    v.par_chunks_mut(1 << 20).enumerate().for_each(|(i, c)| {
        let mut r = Rng::new(i as u64 ^ 0x5EED);
        for p in c.chunks_exact_mut(2) {
            let x = r.next();
            p[0] = x as u8;
            p[1] = 0x2C | ((x >> 8) as u8 & 0x80) | ((x >> 16) as u8 & 0x03);
        }
    });
    let _ = rng.next();
    v
}

/// Matrix number `i` of shape rows x cols in the format `kind`, viewed over the pool.
fn view(pool: &[u8], kind: Kind, rows: usize, cols: usize, i: usize) -> (MatrixRef<'_>, usize) {
    let size = match kind {
        Kind::Dense(d) => rows * cols * d.size(),
        Kind::Affine { bits, gs, sdt } => {
            rows * cols * bits as usize / 8 + 2 * rows * (cols / gs) * sdt.size()
        }
    };
    let count = POOL_BYTES / size;
    let at = (i % count) * size;
    let m = match kind {
        Kind::Dense(dtype) => MatrixRef::Dense {
            dtype,
            data: &pool[at..at + size],
            rows,
            cols,
        },
        Kind::Affine { bits, gs, sdt } => {
            let cb = rows * cols * bits as usize / 8;
            let sb = rows * (cols / gs) * sdt.size();
            MatrixRef::Affine {
                bits,
                group_size: gs,
                codes: &pool[at..at + cb],
                scales: &pool[at + cb..at + cb + sb],
                biases: &pool[at + cb + sb..at + cb + 2 * sb],
                scale_dtype: sdt,
                rows,
                cols,
            }
        }
    };
    (m, count)
}

/// Fastest seconds per call of `f(i)` over the calls that fit in `budget` seconds (the minimum is the
/// figure least disturbed by other work on a shared machine).
fn time(budget: f64, mut f: impl FnMut(usize)) -> f64 {
    f(0);
    let start = Instant::now();
    let mut best = f64::INFINITY;
    let mut n = 0;
    while start.elapsed().as_secs_f64() < budget || n < 3 {
        let t = Instant::now();
        f(n + 1);
        best = best.min(t.elapsed().as_secs_f64());
        n += 1;
    }
    best
}

#[test]
#[ignore = "benchmark: run in an optimised build with --ignored --nocapture"]
fn decode_and_prefill_throughput_report() {
    let mut rng = Rng::new(1);
    let pool = pool(&mut rng);
    let threads = rayon::current_num_threads();
    // The bound: plain parallel reads of successive 8 MiB slices of the pool (a decode call's size).
    const SLICE: usize = 8 << 20;
    let read = time(1.0, |i| {
        let at = (i % (POOL_BYTES / SLICE)) * SLICE;
        let s: u64 = pool[at..at + SLICE]
            .par_chunks(1 << 16)
            .map(|c| {
                c.chunks_exact(8)
                    .fold(0u64, |a, w| a ^ u64::from_le_bytes(w.try_into().unwrap()))
            })
            .reduce(|| 0, |a, b| a ^ b);
        std::hint::black_box(s);
    });
    let bound = SLICE as f64 / read / 1e9;
    println!(
        "simd {}, {threads} threads, read bound {bound:.1} GB/s",
        simd_level()
    );
    // TF_BENCH_SHAPE=ROWSxCOLS picks another matrix shape.
    let (rows, cols) = std::env::var("TF_BENCH_SHAPE")
        .ok()
        .and_then(|s| {
            s.split_once('x')
                .and_then(|(r, c)| Some((r.parse().ok()?, c.parse().ok()?)))
        })
        .unwrap_or((1024, 3584));
    let aff = |bits, gs| Kind::Affine {
        bits,
        gs,
        sdt: DenseDType::BF16,
    };
    let kinds = [
        ("bf16", Kind::Dense(DenseDType::BF16)),
        ("f16", Kind::Dense(DenseDType::F16)),
        ("f32", Kind::Dense(DenseDType::F32)),
        ("mlx 8-bit g64", aff(8, 64)),
        ("mlx 6-bit g64", aff(6, 64)),
        ("mlx 5-bit g64", aff(5, 64)),
        ("mlx 4-bit g64", aff(4, 64)),
        ("mlx 4-bit g32", aff(4, 32)),
        ("mlx 3-bit g64", aff(3, 64)),
        ("mlx 2-bit g64", aff(2, 64)),
    ];
    let x = rng.vec(128 * cols);
    let mut y = vec![0f32; 128 * rows];
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("pool");
    println!("decode: {threads} threads, {rows}x{cols}, a new matrix from DRAM each call | one core, ~512 KiB of rows, cached");
    println!("prefill: {threads} threads, {rows}x{cols}, cached, n rows per call | one core, ~512 KiB of rows, n = 16");
    // TF_BENCH_ONLY=text keeps only the formats whose name contains it.
    let only = std::env::var("TF_BENCH_ONLY").unwrap_or_default();
    for (name, kind) in kinds.into_iter().filter(|(n, _)| n.contains(only.as_str())) {
        let (hot, count) = view(&pool, kind, rows, cols, 0);
        let bytes = hot.stored_bytes() as f64;
        let cold = time(1.0, |i| {
            project(
                &x[..cols],
                1,
                &view(&pool, kind, rows, cols, i % count).0,
                &mut y[..rows],
            )
        });
        // About 512 KiB: stays in L2 and amortises the per-call preparation of x.
        let small_rows = (rows * (512 << 10) / hot.stored_bytes()).clamp(16, rows);
        let (small, _) = view(&pool, kind, small_rows, cols, 0);
        let core = one.install(|| {
            time(0.3, |_| {
                project(&x[..cols], 1, &small, &mut y[..small_rows])
            })
        });
        let core_pre = one.install(|| {
            time(0.3, |_| {
                project(&x[..16 * cols], 16, &small, &mut y[..16 * small_rows])
            })
        });
        let mut line = format!(
            "{name:>14}: decode {:5.1} GB/s ({:3.0}% of bound, {:4.0} us) | core {:5.1} GB/s; prefill",
            bytes / cold / 1e9,
            100.0 * bytes / cold / 1e9 / bound,
            cold * 1e6,
            small.stored_bytes() as f64 / core / 1e9,
        );
        for n in [16, 64, 128] {
            let t = time(0.5, |_| {
                project(&x[..n * cols], n, &hot, &mut y[..n * rows])
            });
            line += &format!(" n={n} {:5.1}", 2.0 * (n * rows * cols) as f64 / t / 1e9);
        }
        line += &format!(
            " GFLOP/s | core {:5.1} GFLOP/s",
            2.0 * (16 * small_rows * cols) as f64 / core_pre / 1e9
        );
        println!("{line}");
    }
}

#[test]
#[ignore = "profiling target: one core, 4-bit g64 calls in a loop (TF_PROF_N x rows; TF_PROF_COLD=1 streams from DRAM)"]
fn one_core_affine_loop() {
    let mut rng = Rng::new(2);
    let n: usize = std::env::var("TF_PROF_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(16);
    let cold = std::env::var("TF_PROF_COLD").is_ok();
    let (rows, cols) = (if cold { 1024 } else { 256 }, 3584);
    let kind = Kind::Affine {
        bits: 4,
        gs: 64,
        sdt: DenseDType::BF16,
    };
    let pool = if cold { pool(&mut rng) } else { Vec::new() };
    let m = super::tests::TestMatrix::new(kind, rows, cols, &mut rng);
    let x = rng.vec(n * cols);
    let mut y = vec![0f32; n * rows];
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("pool");
    let t = one.install(|| {
        time(3.0, |i| {
            if cold {
                let (w, _) = view(&pool, kind, rows, cols, i);
                project(&x, n, &w, &mut y)
            } else {
                project(&x, n, &m.view(), &mut y)
            }
        })
    });
    let bytes = m.view().stored_bytes() as f64;
    println!(
        "{:.1} GFLOP/s, {:.1} GB/s",
        2.0 * (n * rows * cols) as f64 / t / 1e9,
        bytes / t / 1e9
    );
}
