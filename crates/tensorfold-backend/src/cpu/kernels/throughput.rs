//! Ignored throughput report for `project` (decode GB/s against this machine's read bandwidth, prefill rows/s);
//! run with `cargo test --release -p tensorfold-backend --lib throughput -- --ignored --nocapture`.

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

/// Seconds per call of `f(i)` over enough calls to fill `budget` seconds.
fn time(budget: f64, mut f: impl FnMut(usize)) -> f64 {
    f(0);
    let start = Instant::now();
    let mut n = 0;
    while start.elapsed().as_secs_f64() < budget || n < 3 {
        f(n + 1);
        n += 1;
    }
    start.elapsed().as_secs_f64() / n as f64
}

#[test]
#[ignore = "benchmark: run in an optimised build with --ignored --nocapture"]
fn decode_and_prefill_throughput_report() {
    let mut rng = Rng::new(1);
    let pool = pool(&mut rng);
    let threads = rayon::current_num_threads();
    // The bound: a plain parallel read of the whole pool.
    let read = time(1.0, |_| {
        let s: u64 = pool
            .par_chunks(1 << 20)
            .map(|c| {
                c.chunks_exact(8)
                    .fold(0u64, |a, w| a ^ u64::from_le_bytes(w.try_into().unwrap()))
            })
            .reduce(|| 0, |a, b| a ^ b);
        std::hint::black_box(s);
    });
    let bound = POOL_BYTES as f64 / read / 1e9;
    println!(
        "simd {}, {threads} threads, read bound {bound:.1} GB/s",
        simd_level()
    );
    let (rows, cols) = (1024, 3584);
    let bf = DenseDType::BF16;
    let kinds = [
        ("bf16", Kind::Dense(bf)),
        ("f16", Kind::Dense(DenseDType::F16)),
        ("f32", Kind::Dense(DenseDType::F32)),
        (
            "mlx 8-bit g64",
            Kind::Affine {
                bits: 8,
                gs: 64,
                sdt: bf,
            },
        ),
        (
            "mlx 6-bit g64",
            Kind::Affine {
                bits: 6,
                gs: 64,
                sdt: bf,
            },
        ),
        (
            "mlx 5-bit g64",
            Kind::Affine {
                bits: 5,
                gs: 64,
                sdt: bf,
            },
        ),
        (
            "mlx 4-bit g64",
            Kind::Affine {
                bits: 4,
                gs: 64,
                sdt: bf,
            },
        ),
        (
            "mlx 4-bit g32",
            Kind::Affine {
                bits: 4,
                gs: 32,
                sdt: bf,
            },
        ),
        (
            "mlx 3-bit g64",
            Kind::Affine {
                bits: 3,
                gs: 64,
                sdt: bf,
            },
        ),
        (
            "mlx 2-bit g64",
            Kind::Affine {
                bits: 2,
                gs: 64,
                sdt: bf,
            },
        ),
    ];
    let x = rng.vec(128 * cols);
    let mut y = vec![0f32; 128 * rows];
    for (name, kind) in kinds {
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
        let warm = time(0.5, |_| project(&x[..cols], 1, &hot, &mut y[..rows]));
        let mut line = format!(
            "{name:>14} {rows}x{cols}: decode {:6.1} GB/s from DRAM ({:3.0}% of bound, {:5.0} us), {:6.1} GB/s cached",
            bytes / cold / 1e9,
            100.0 * bytes / cold / 1e9 / bound,
            cold * 1e6,
            bytes / warm / 1e9,
        );
        for n in [16, 64, 128] {
            let t = time(0.5, |_| {
                project(&x[..n * cols], n, &hot, &mut y[..n * rows])
            });
            let gflops = 2.0 * (n * rows * cols) as f64 / t / 1e9;
            line += &format!(" | n={n}: {:5.0} rows/s {gflops:5.1} GFLOP/s", n as f64 / t);
        }
        println!("{line}");
    }
}
