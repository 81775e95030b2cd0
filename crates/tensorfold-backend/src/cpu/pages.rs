//! A shared pool of fixed-size KV pages: a slot takes pages as it grows and gives them back when it shrinks or
//! ends, so memory follows the tokens in use rather than context × streams.

use std::sync::{Arc, Mutex};

/// Positions per page.
pub const PAGE_ROWS: usize = 16;

#[derive(Debug)]
struct PoolInner {
    free: Vec<Box<[f32]>>,
    in_use: usize,
}

/// Pages of `PAGE_ROWS × row_floats` f32 each, at most `capacity` taken at once.
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
    /// A page of `floats` f32, or None when the pool is exhausted.
    pub fn take(&self, floats: usize) -> Option<Box<[f32]>> {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if g.in_use >= self.capacity {
            return None;
        }
        g.in_use += 1;
        let page = match g.free.iter().position(|p| p.len() == floats) {
            Some(i) => g.free.swap_remove(i),
            None => vec![0.0; floats].into_boxed_slice(),
        };
        Some(page)
    }
    pub fn give_back(&self, page: Box<[f32]>) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.in_use = g.in_use.saturating_sub(1);
        // Keep a bounded free list; the allocator gets the rest back.
        if g.free.len() < 1024 {
            g.free.push(page);
        }
    }
}
