//! Prompt-cache snapshots of a slot's KV pages on the device: one `copy_pages` launch a layer through the slot's
//! page table, to a buffer in page layout and back.

use super::{page_floats, CudaKv, PAGE_ROWS};
use crate::device::{Arg, Dev};
use cudarc::driver::CudaSlice;
use std::sync::Arc;

/// One attention layer's committed keys and values for one slot, copied on the device in page layout.
pub struct CudaKvSnapshot {
    dev: Arc<Dev>,
    data: CudaSlice<f32>,
    len: usize,
    row: usize,
}

impl Drop for CudaKvSnapshot {
    fn drop(&mut self) {
        // The driver frees at once, ahead of recorded launches still unsent that read the copy: send them first.
        self.dev.send_recorded();
    }
}

impl CudaKvSnapshot {
    /// The rows' keys and values on the host, `[len, row]` each (the CPU backend's layout), for the checks.
    pub fn host(&self) -> (Vec<f32>, Vec<f32>) {
        let pf = page_floats(self.row);
        let all = self
            .dev
            .download(&self.data, self.len.div_ceil(PAGE_ROWS) * pf);
        let (mut k, mut v) = (
            Vec::with_capacity(self.len * self.row),
            Vec::with_capacity(self.len * self.row),
        );
        for (pi, host) in all.chunks(pf).enumerate() {
            let n = (self.len - pi * PAGE_ROWS).min(PAGE_ROWS);
            for j in 0..n {
                k.extend((0..self.row).map(|c| host[c * PAGE_ROWS + j]));
            }
            v.extend_from_slice(&host[PAGE_ROWS * self.row..(PAGE_ROWS + n) * self.row]);
        }
        (k, v)
    }

    /// f32 values held (whole pages).
    pub fn floats(&self) -> usize {
        self.data.len()
    }
}

impl CudaKv {
    /// A device copy of the committed rows' pages (the prompt cache keeps its snapshots on the device): one launch
    /// through the page table and no wait. A host copy waited on the stream once a page (call 133), and a driver
    /// copy a page still cost the engine thread about 9 ms a 1,024-token snapshot of the 27B shape (call 134).
    pub(crate) fn snapshot(&self) -> CudaKvSnapshot {
        let pages = self.len.div_ceil(PAGE_ROWS);
        let data = self.dev.alloc::<f32>(pages * self.page_floats());
        self.copy_pages(&data, pages, false);
        CudaKvSnapshot {
            dev: self.dev.clone(),
            data,
            len: self.len,
            row: self.row,
        }
    }

    /// A state holding exactly the snapshot's rows.
    pub(crate) fn restore(&mut self, snap: &CudaKvSnapshot) -> Result<(), String> {
        self.reserve(snap.len)?;
        self.copy_pages(&snap.data, snap.len.div_ceil(PAGE_ROWS), true);
        self.len = snap.len;
        Ok(())
    }

    /// The first `pages` pages to `flat` (page p at p·page_floats), or from it when `restore`.
    fn copy_pages(&self, flat: &CudaSlice<f32>, pages: usize, restore: bool) {
        if pages == 0 {
            return;
        }
        let words = self.page_floats();
        assert!(pages <= self.pages.len() && flat.len() >= pages * words);
        self.dev.launch(
            "copy_pages",
            (
                (words.div_ceil(256) as u32).min(32),
                (pages as u32).min(65_535),
                1,
            ),
            256,
            &[
                Arg::P(self.table_ptr()),
                Arg::P(self.dev.ptr(flat)),
                Arg::P(words as u64),
                Arg::I(pages as i32),
                Arg::I(restore as i32),
            ],
        );
    }
}
