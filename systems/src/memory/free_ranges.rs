//! The free address ranges of the mapped pools (`mapped.rs`, `mapped_runs.rs`): each reserved
//! range keeps its own, offset to length (`BTreeMap<u64, u64>`, neighbours always merged), and
//! one index orders all of them by length, so a request finds the best fit first. Taking a place
//! splits a free range; a release merges with its free neighbours. Both pools place by the same
//! rule ([`FreeRanges::best_place`]).

use crate::memory::PageKey;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

/// Free ranges a placement looks at, smallest first ([`FreeRanges::best_place`]).
const PLACEMENT_SCAN: usize = 64;

/// Where a request goes: `offset` in the free range at `start` of range `key`, with
/// `unmapped` bytes of pages to map.
#[derive(Clone, Copy, Debug)]
pub(super) struct Placement {
    pub(super) key: PageKey,
    pub(super) start: u64,
    pub(super) offset: u64,
    pub(super) unmapped: u64,
}

/// Every free range of a pool's reserved ranges, by length, then range, then offset: best fit is
/// the first at or after the request. The ranges' own maps (offset to length) are kept by the
/// pool beside their other records and passed in.
#[derive(Debug, Default)]
pub(super) struct FreeRanges {
    by_len: BTreeSet<(u64, PageKey, u64)>,
}

impl FreeRanges {
    /// Free ranges indexed.
    pub(super) fn len(&self) -> usize {
        self.by_len.len()
    }

    /// A new reserved range `key` of `size` bytes, free whole: its map.
    pub(super) fn add_range(&mut self, key: PageKey, size: u64) -> BTreeMap<u64, u64> {
        self.by_len.insert((size, key, 0));
        BTreeMap::from([(0, size)])
    }

    /// Forgets the free ranges `free` of range `key`, which goes back.
    pub(super) fn remove_range(&mut self, key: PageKey, free: &BTreeMap<u64, u64>) {
        for (&offset, &len) in free {
            self.by_len.remove(&(len, key, offset));
        }
    }

    /// Where `padded` bytes go: of the free ranges that hold them (up to `PLACEMENT_SCAN`,
    /// smallest first), at either end, the place that needs the fewest pages mapped
    /// (`unmapped(range, offset, limit)`, which may stop counting at `limit`); the smallest range
    /// wins a tie, and the search stops at a place that needs none. Idle pages are so reused
    /// before new ones are mapped.
    pub(super) fn best_place(
        &self,
        padded: u64,
        unmapped: impl Fn(PageKey, u64, u64) -> u64,
    ) -> Option<Placement> {
        let mut best: Option<Placement> = None;
        // From the last entry shorter than `padded`, excluded: the null key
        // (`PageKey::default()`) orders after every key in use, so starting at
        // `(padded, PageKey::default(), 0)` skipped every free range of exactly `padded` bytes.
        let at_least = (
            Bound::Excluded((padded.saturating_sub(1), PageKey::default(), u64::MAX)),
            Bound::Unbounded,
        );
        for &(len, key, start) in self.by_len.range(at_least).take(PLACEMENT_SCAN) {
            // An exact fit has one end; nothing beats a place that needs no page mapped.
            let ends = if len == padded { 1 } else { 2 };
            for offset in [start, start + len - padded].into_iter().take(ends) {
                let limit = best.map_or(u64::MAX, |b| b.unmapped);
                if limit == 0 {
                    break;
                }
                let unmapped = unmapped(key, offset, limit);
                if unmapped < limit {
                    best = Some(Placement {
                        key,
                        start,
                        offset,
                        unmapped,
                    });
                }
            }
            if best.is_some_and(|b| b.unmapped == 0) {
                break;
            }
        }
        best
    }

    /// Takes `padded` bytes at `place` out of range `place.key`'s free map `free`: what is left
    /// before and after stays free. `None` when no free range starts at `place.start`.
    pub(super) fn take(
        &mut self,
        free: &mut BTreeMap<u64, u64>,
        place: Placement,
        padded: u64,
    ) -> Option<()> {
        let Placement {
            key, start, offset, ..
        } = place;
        let len = free.remove(&start)?;
        self.by_len.remove(&(len, key, start));
        if offset > start {
            free.insert(start, offset - start);
            self.by_len.insert((offset - start, key, start));
        }
        let (end, taken_end) = (start + len, offset + padded);
        if end > taken_end {
            free.insert(taken_end, end - taken_end);
            self.by_len.insert((end - taken_end, key, taken_end));
        }
        Some(())
    }

    /// Gives `len` bytes at `offset` of range `key` back to its free map `free`, merged with
    /// the free neighbours: the free range that now holds them, `(offset, len)`.
    pub(super) fn give(
        &mut self,
        free: &mut BTreeMap<u64, u64>,
        key: PageKey,
        offset: u64,
        len: u64,
    ) -> (u64, u64) {
        let end = offset + len;
        let (mut offset, mut len) = (offset, len);
        if let Some((&before, &before_len)) = free.range(..offset).next_back()
            && before + before_len == offset
        {
            free.remove(&before);
            self.by_len.remove(&(before_len, key, before));
            offset = before;
            len += before_len;
        }
        if let Some(after_len) = free.remove(&end) {
            self.by_len.remove(&(after_len, key, end));
            len += after_len;
        }
        free.insert(offset, len);
        self.by_len.insert((len, key, offset));
        (offset, len)
    }
}
