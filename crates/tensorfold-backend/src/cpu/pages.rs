//! A shared pool of fixed-size KV pages: a slot takes pages as it grows and gives them back when it shrinks or
//! ends, so memory follows the tokens in use rather than context × streams.

use crate::KvDtype;
use std::sync::{Arc, Mutex};

/// Positions per page.
pub const PAGE_ROWS: usize = 16;

/// One page's elements: f32, or bf16 bits (`--kv-cache-dtype bf16`: half the memory a token).
#[derive(Debug)]
pub enum Page {
    F32(Box<[f32]>),
    Bf16(Box<[u16]>),
}

impl Page {
    fn new(dtype: KvDtype, elems: usize) -> Self {
        match dtype {
            KvDtype::F32 => Page::F32(vec![0.0; elems].into_boxed_slice()),
            KvDtype::Bf16 => Page::Bf16(vec![0; elems].into_boxed_slice()),
        }
    }
    fn fits(&self, dtype: KvDtype, elems: usize) -> bool {
        match self {
            Page::F32(p) => dtype == KvDtype::F32 && p.len() == elems,
            Page::Bf16(p) => dtype == KvDtype::Bf16 && p.len() == elems,
        }
    }
    /// Stores `v` (already rounded to the page's dtype, so exactly) at `at..`.
    pub fn write(&mut self, at: usize, v: &[f32]) {
        match self {
            Page::F32(p) => p[at..at + v.len()].copy_from_slice(v),
            Page::Bf16(p) => {
                for (d, &x) in p[at..at + v.len()].iter_mut().zip(v) {
                    *d = half::bf16::from_f32(x).to_bits();
                }
            }
        }
    }
    /// `n` runs of `len` elements, `stride` apart from `at`, as f32 rows and their stride: an f32 page's own
    /// elements in place, a bf16 page's widened (exactly) into `scratch` as `[n, len]`.
    pub fn rows<'a>(
        &'a self,
        at: usize,
        n: usize,
        len: usize,
        stride: usize,
        scratch: &'a mut Vec<f32>,
    ) -> (&'a [f32], usize) {
        match self {
            Page::F32(p) => (&p[at..], stride),
            Page::Bf16(_) => {
                scratch.clear();
                self.read(at, n, len, stride, scratch);
                (&scratch[..], len)
            }
        }
    }
    /// `n` runs of `len` elements, `stride` apart from `at`, as f32 (bf16 widened exactly) appended to `out`.
    pub fn read(&self, at: usize, n: usize, len: usize, stride: usize, out: &mut Vec<f32>) {
        let start = out.len();
        out.resize(start + n * len, 0.0);
        for (r, dst) in out[start..].chunks_exact_mut(len).enumerate() {
            let s = at + r * stride;
            match self {
                Page::F32(p) => dst.copy_from_slice(&p[s..s + len]),
                // A plain zip over slices, which the compiler turns into wide shifts: an iterator pushed
                // element by element made a 4k-context decode on the 0.8B shape slower than f32 pages.
                Page::Bf16(p) => {
                    for (d, &b) in dst.iter_mut().zip(&p[s..s + len]) {
                        *d = f32::from_bits((b as u32) << 16);
                    }
                }
            }
        }
    }
}

#[derive(Debug)]
struct PoolInner {
    free: Vec<Page>,
    in_use: usize,
}

/// Pages of `PAGE_ROWS × row` keys then as many values each, at most `capacity` taken at once.
#[derive(Debug)]
pub struct PagePool {
    capacity: usize,
    inner: Mutex<PoolInner>,
}

impl PagePool {
    pub fn new(capacity: usize) -> Arc<Self> {
        Arc::new(PagePool {
            capacity,
            inner: Mutex::new(PoolInner {
                free: Vec::new(),
                in_use: 0,
            }),
        })
    }
    pub fn capacity(&self) -> usize {
        self.capacity
    }
    pub fn in_use(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).in_use
    }
    /// A page of `elems` elements of `dtype`, or None when the pool is exhausted.
    pub fn take(&self, dtype: KvDtype, elems: usize) -> Option<Page> {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if g.in_use >= self.capacity {
            return None;
        }
        g.in_use += 1;
        let page = match g.free.iter().position(|p| p.fits(dtype, elems)) {
            Some(i) => g.free.swap_remove(i),
            None => Page::new(dtype, elems),
        };
        Some(page)
    }
    pub fn give_back(&self, page: Page) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.in_use = g.in_use.saturating_sub(1);
        // Keep a bounded free list; the allocator gets the rest back.
        if g.free.len() < 1024 {
            g.free.push(page);
        }
    }
}
