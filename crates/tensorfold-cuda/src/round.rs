//! A round's row tables as the kernels read them: per row (slot, position, committed length, path, path length),
//! where a chain row's path is encoded as a run of consecutive rows and only tree rows list their ancestors.

use crate::device::Dev;
use std::sync::Arc;
use tensorfold_backend::RowRef;

pub struct RoundRows {
    /// `[rows, 5]` (see `path_at` in kernels/common.cu).
    pub meta: Vec<i32>,
    /// Ancestor lists of the rows whose path is not a consecutive run (at least one element).
    pub paths: Vec<i32>,
}

/// The row's ancestors in the round, root first, ending with the row itself.
pub fn ancestry(rows: &[RowRef], i: usize) -> Vec<usize> {
    let mut path = vec![i];
    let mut cur = i;
    while let Some(p) = rows[cur].parent {
        path.push(p);
        cur = p;
    }
    path.reverse();
    path
}

/// Tables for `rows`; `committed[slot]` is the slot's committed length.
pub fn round_rows(rows: &[RowRef], committed: &[usize]) -> RoundRows {
    let mut meta = Vec::with_capacity(rows.len() * 5);
    let mut paths = Vec::new();
    // run_start[i]: the first row of i's path when that path is the consecutive run first..=i.
    let mut run_start: Vec<Option<usize>> = vec![None; rows.len()];
    for (i, r) in rows.iter().enumerate() {
        run_start[i] = match r.parent {
            None => Some(i),
            Some(p) if p + 1 == i => run_start[p],
            Some(_) => None,
        };
        let (path, plen) = match run_start[i] {
            Some(first) => (-(first as i32) - 1, i - first + 1),
            None => {
                let a = ancestry(rows, i);
                let off = paths.len() as i32;
                paths.extend(a.iter().map(|&x| x as i32));
                (off, a.len())
            }
        };
        meta.extend([
            r.slot as i32,
            r.pos as i32,
            committed.get(r.slot).copied().unwrap_or(0) as i32,
            path,
            plen as i32,
        ]);
    }
    if paths.is_empty() {
        paths.push(0);
    }
    RoundRows { meta, paths }
}

/// Opens (or closes) the recorded round for a keep of states, given each state's pending round and the rows it
/// keeps: as many rows as one layer keeps, as a round's embedding does, whether the states are of one layer or of
/// all of them. That is the rows kept from the first kept state's round (every layer keeps the same paths).
/// Nothing kept: nothing changes.
pub(crate) fn keep_round<'a, T: 'a>(
    dev: &Dev,
    kept: impl Iterator<Item = (Option<&'a Arc<T>>, usize)>,
) {
    let (mut first, mut rows) = (None, 0);
    for (round, n) in kept {
        let Some(round) = round.filter(|_| n > 0) else {
            continue;
        };
        let first = *first.get_or_insert(Arc::as_ptr(round));
        if std::ptr::eq(first, Arc::as_ptr(round)) {
            rows += n;
        }
    }
    if rows > 0 {
        dev.round_rows(rows);
    }
}

/// Ok when every row of `path` is among the slot's pending `rows` (both round row indices).
pub fn check_pending(rows: &[usize], path: &[usize]) -> Result<(), String> {
    let top = rows.iter().chain(path).copied().max().unwrap_or(0);
    let mut pending = vec![false; top + 1];
    for &r in rows {
        pending[r] = true;
    }
    match path.iter().find(|&&r| !pending[r]) {
        Some(r) => Err(format!("row {r} is not pending")),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(t: &RoundRows, i: usize) -> Vec<usize> {
        let m = &t.meta[5 * i..5 * i + 5];
        (0..m[4] as usize)
            .map(|j| {
                if m[3] >= 0 {
                    t.paths[m[3] as usize + j] as usize
                } else {
                    (-m[3] - 1) as usize + j
                }
            })
            .collect()
    }

    #[test]
    fn every_encoded_path_is_the_rows_ancestry() {
        // Slot 0: a chain 0-1-2 then a branch 3 off row 1 and 4 off 3; slot 1: a chain 5-6; slot 0 root 7.
        let rows = [
            RowRef {
                slot: 0,
                pos: 4,
                parent: None,
            },
            RowRef {
                slot: 0,
                pos: 5,
                parent: Some(0),
            },
            RowRef {
                slot: 0,
                pos: 6,
                parent: Some(1),
            },
            RowRef {
                slot: 0,
                pos: 6,
                parent: Some(1),
            },
            RowRef {
                slot: 0,
                pos: 7,
                parent: Some(3),
            },
            RowRef {
                slot: 1,
                pos: 0,
                parent: None,
            },
            RowRef {
                slot: 1,
                pos: 1,
                parent: Some(5),
            },
            RowRef {
                slot: 0,
                pos: 4,
                parent: None,
            },
        ];
        let t = round_rows(&rows, &[4, 0]);
        for i in 0..rows.len() {
            assert_eq!(decode(&t, i), ancestry(&rows, i), "row {i}");
        }
        assert_eq!(t.meta[2], 4);
        assert_eq!(t.meta[5 * 5 + 2], 0);
    }
}
