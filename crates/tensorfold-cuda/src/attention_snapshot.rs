//! Prompt-cache snapshots of a slot's KV pages on the device: one `copy_pages` launch a layer through the slot's
//! page table, to a buffer in page layout and back.

use super::{page_words, CudaKv, KEY_GROUP, PAGE_ROWS};
use crate::device::{Arg, Dev};
use cudarc::driver::CudaSlice;
use std::sync::Arc;
use tensorfold_backend::KvDtype;

/// One attention layer's committed keys and values for one slot, copied on the device in page layout.
pub struct CudaKvSnapshot {
    dev: Arc<Dev>,
    /// Whole pages as 32-bit words (f32 elements, or two bf16 a word).
    data: CudaSlice<f32>,
    len: usize,
    row: usize,
    dtype: KvDtype,
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
        let words = self.dev.download(
            &self.data,
            self.len.div_ceil(PAGE_ROWS) * page_words(self.row, self.dtype),
        );
        // Page elements as f32: bf16 pages hold element 2i in the low half of word i.
        let all: Vec<f32> = match self.dtype {
            KvDtype::F32 => words,
            KvDtype::Bf16 => words
                .iter()
                .flat_map(|w| {
                    let b = w.to_bits();
                    [f32::from_bits(b << 16), f32::from_bits(b & 0xffff_0000)]
                })
                .collect(),
        };
        let pf = 2 * PAGE_ROWS * self.row;
        let (mut k, mut v) = (
            Vec::with_capacity(self.len * self.row),
            Vec::with_capacity(self.len * self.row),
        );
        for (pi, host) in all.chunks(pf).enumerate() {
            let n = (self.len - pi * PAGE_ROWS).min(PAGE_ROWS);
            // Keys by dimension in groups of KEY_GROUP (attention.cu key_index).
            for j in 0..n {
                k.extend(
                    (0..self.row).map(|c| {
                        host[((c / KEY_GROUP) * PAGE_ROWS + j) * KEY_GROUP + c % KEY_GROUP]
                    }),
                );
            }
            v.extend_from_slice(&host[PAGE_ROWS * self.row..(PAGE_ROWS + n) * self.row]);
        }
        (k, v)
    }

    /// Bytes held on the device (whole pages).
    pub fn bytes(&self) -> usize {
        4 * self.data.len()
    }
}

impl CudaKv {
    /// A device copy of the committed rows' pages (the prompt cache keeps its snapshots on the device): one launch
    /// through the page table and no wait. A host copy waited on the stream once a page (call 133), and a driver
    /// copy a page still cost the engine thread about 9 ms a 1,024-token snapshot of the 27B shape (call 134).
    pub(crate) fn snapshot(&self) -> CudaKvSnapshot {
        let pages = self.len.div_ceil(PAGE_ROWS);
        let data = self.dev.alloc::<f32>(pages * self.page_words());
        self.copy_pages(&data, pages, false);
        CudaKvSnapshot {
            dev: self.dev.clone(),
            data,
            len: self.len,
            row: self.row,
            dtype: self.dtype,
        }
    }

    /// A state holding exactly the snapshot's rows.
    pub(crate) fn restore(&mut self, snap: &CudaKvSnapshot) -> Result<(), String> {
        if (snap.dtype, snap.row) != (self.dtype, self.row) {
            return Err(format!(
                "a KV snapshot of {} rows of {} elements restored into a state of {} rows of {}",
                snap.dtype.name(),
                snap.row,
                self.dtype.name(),
                self.row
            ));
        }
        self.reserve(snap.len)?;
        self.copy_pages(&snap.data, snap.len.div_ceil(PAGE_ROWS), true);
        self.len = snap.len;
        Ok(())
    }

    /// The first `pages` pages to `flat` (page p at p·page_words), or from it when `restore`.
    fn copy_pages(&self, flat: &CudaSlice<f32>, pages: usize, restore: bool) {
        if pages == 0 {
            return;
        }
        let words = self.page_words();
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
