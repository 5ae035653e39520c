//! Compacting pool: large pages shared best fit by requests of every size it takes, whose live
//! blocks may be moved to close holes (issue 25). Where making and freeing a buffer costs the
//! driver time by its size (NVIDIA's Vulkan driver: about 33 ms per GiB made and destroyed), a
//! request that finds no free range and would take the pools past their budget does not get a
//! new buffer: the pool picks the run of free ranges and movable live blocks of one page that
//! frees the request's bytes for the fewest bytes moved, moves those blocks to free ranges
//! elsewhere, and gives the request the run (`Compacts::compact`). The runtime copies each moved
//! block's bytes on the device (a copy costs about 0.4 ms per GiB there) and points its handle at
//! the new place.
//!
//! The pool's pages and its `Pool` face are here; how a compaction picks and clears runs, and
//! empties pages, is `moves.rs`; attempts that can be taken back are `journal.rs`.

mod journal;
mod moves;

use crate::backend::{AllocError, StorageId};
use crate::error::MemoryError;
use crate::memory::idle::{IdleMark, IdlePage, IdlePages};
use crate::memory::pool::{Compacts, DeviceMemory, Movable, Pool};
use crate::memory::report::{PoolReport, human_bytes};
use crate::memory::{Block, PageKey, stale_page};
use slotmap::SlotMap;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

/// A shared page holds a sixteenth of the recent peak in use (up to the pool's `page_size`);
/// where the budget leaves less, at least a quarter of that (smaller pages hold too few blocks
/// for a compaction to find room in); requests over a tenth of the recent peak get pages of
/// their own. Measured on the trace family (scale 1, pool-level replay, 12 seeds, worst peak
/// reserved / peak in use over the five shapes; log-uniform GiB made per seed): 16, 4, 10 gave
/// 1.087 and 20 GiB; pages of an eighth or a tenth up to 1.155 (training: its 32-200 MiB
/// requests pack poorly into pages a few times their size); pages of their own from a sixteenth
/// 1.087 and 38 GiB, from an eighth 1.097 (KV cache), from a quarter 1.204. One fixed page size
/// for every program held up to 2.1 of the KV-cache shape's peak.
const PAGE_PEAK_DIVISOR: u64 = 16;
const PAGE_FLOOR_DIVISOR: u64 = 4;
const DEDICATED_PEAK_DIVISOR: u64 = 10;
/// A page of its own is reused by a request that wastes at most an eighth of it, as the sliced
/// pools' pages of their own are.
const DEDICATED_FIT_DIVISOR: u64 = 8;

#[derive(Clone, Debug)]
struct HeapPage {
    storage: StorageId,
    size: u64,
    /// Live blocks: offset to length.
    live: BTreeMap<u64, u64>,
    /// Free ranges: offset to length, merged with their neighbours.
    free: BTreeMap<u64, u64>,
    idle: IdleMark,
    /// When the page last became empty, in the pool's count of pages that did: the oldest go
    /// back first when the pool makes room.
    emptied_at: u64,
    /// Emptied by moves whose copies still read it: it goes back to the device once they were
    /// submitted (`Compacts::release_retiring`), and nothing is placed in it meanwhile.
    retiring: bool,
    /// The evacuation that retired it (`Compacts::retiring_generation`).
    retired_in: u64,
    /// Made for one request larger than a shared page: never shared, never compacted, reused
    /// whole by a request of about its size.
    dedicated: bool,
}

impl IdlePage for HeapPage {
    fn is_free(&self) -> bool {
        self.live.is_empty()
    }

    fn idle_mark(&mut self) -> &mut IdleMark {
        &mut self.idle
    }
}

/// A free range in the index: its length, page and offset.
type FreeRange = (u64, PageKey, u64);

/// The free ranges of at least `len` bytes, in the index ordered by length (the null key,
/// `PageKey::default()`, orders after every key in use).
fn at_least(len: u64) -> (Bound<FreeRange>, Bound<FreeRange>) {
    (
        Bound::Excluded((len.saturating_sub(1), PageKey::default(), u64::MAX)),
        Bound::Unbounded,
    )
}

/// Pages of at least `page_size` bytes shared best fit, with compaction.
#[derive(Debug)]
pub struct CompactingPool {
    page_size: u64,
    follow_peak: bool,
    max_reserved: Option<u64>,
    pages: SlotMap<PageKey, HeapPage>,
    /// Every free range of every shared page: (length, page, offset), for best fit.
    free: BTreeSet<FreeRange>,
    /// Empty pages of their own, by size.
    dedicated_free: BTreeSet<(u64, PageKey)>,
    idle: IdlePages,
    pages_emptied: u64,
    /// Bytes the pools may still take within their budget (`Compacts::set_room`).
    room: u64,
    /// Evacuations that retired pages so far.
    evacuations: u64,
    /// Counts the changes that may make room (a range freed, a page added or returned): a
    /// compaction that failed is not tried again for as large a request until one happened.
    changes: u64,
    /// The smallest request a compaction, and an evacuation, failed for, at `changes`.
    failed_compaction: Option<(u64, u64)>,
    failed_evacuation: Option<(u64, u64)>,
    /// Pages as they were before the attempts under way changed them, each attempt's from its
    /// mark on: what `rollback` puts back.
    journal: Vec<(PageKey, HeapPage)>,
    marks: Vec<usize>,
    peak: u64,
    report: PoolReport,
}

impl CompactingPool {
    /// An empty pool whose new pages hold `page_size` bytes (requests over it get pages of their
    /// own); with `follow_peak`, pages follow the recent peak in use, up to `page_size`.
    pub fn new(
        name: String,
        page_size: u64,
        follow_peak: bool,
        max_reserved: Option<u64>,
        release_after: Option<u64>,
    ) -> CompactingPool {
        let name = match follow_peak {
            true => format!("{name} compacting, pages up to {}", human_bytes(page_size)),
            false => format!("{name} compacting, pages {}", human_bytes(page_size)),
        };
        CompactingPool {
            page_size: page_size.max(1),
            follow_peak,
            max_reserved,
            pages: SlotMap::with_key(),
            free: BTreeSet::new(),
            dedicated_free: BTreeSet::new(),
            idle: IdlePages::new(release_after),
            pages_emptied: 0,
            room: u64::MAX,
            evacuations: 0,
            changes: 0,
            failed_compaction: None,
            failed_evacuation: None,
            journal: Vec::new(),
            marks: Vec::new(),
            peak: 0,
            report: PoolReport::new(name),
        }
    }

    /// Takes `len` bytes at `offset` out of the free range starting at `at` of `page`.
    fn carve(&mut self, key: PageKey, at: u64, offset: u64, len: u64) {
        self.touch(key);
        let Some(page) = self.pages.get_mut(key) else {
            return;
        };
        let Some(range) = page.free.remove(&at) else {
            return;
        };
        self.free.remove(&(range, key, at));
        if offset > at {
            page.free.insert(at, offset - at);
            self.free.insert((offset - at, key, at));
        }
        let end = offset + len;
        if at + range > end {
            page.free.insert(end, at + range - end);
            self.free.insert((at + range - end, key, end));
        }
        page.live.insert(offset, len);
        page.idle.reused();
    }

    /// Returns `offset..offset + len` of `page` to its free ranges, merged with its neighbours.
    fn free_range(&mut self, key: PageKey, offset: u64, len: u64) {
        self.changes += 1;
        self.touch(key);
        let Some(page) = self.pages.get_mut(key) else {
            return;
        };
        if page.dedicated {
            page.live.remove(&offset);
            self.dedicated_free.insert((page.size, key));
            self.pages_emptied += 1;
            page.emptied_at = self.pages_emptied;
            self.idle.became_free(key, &mut page.idle);
            return;
        }
        let (mut start, mut end) = (offset, offset + len);
        if let Some((&before, &before_len)) = page.free.range(..start).next_back()
            && before + before_len == start
        {
            page.free.remove(&before);
            self.free.remove(&(before_len, key, before));
            start = before;
        }
        if let Some(&after_len) = page.free.get(&end) {
            page.free.remove(&end);
            self.free.remove(&(after_len, key, end));
            end += after_len;
        }
        page.free.insert(start, end - start);
        self.free.insert((end - start, key, start));
        if page.live.is_empty() {
            self.pages_emptied += 1;
            page.emptied_at = self.pages_emptied;
            self.idle.became_free(key, &mut page.idle);
        }
    }

    /// The smallest free range of at least `padded` bytes, avoiding `page`'s `start..end`; one
    /// in a page that holds live blocks before one in an empty page, which stays whole for a
    /// request as large as it, or to go back to the device.
    fn best_fit(&self, padded: u64, avoid: &[(PageKey, u64, u64)]) -> Option<(PageKey, u64)> {
        let mut empty = None;
        for &(_, key, offset) in self.free.range(at_least(padded)) {
            if avoid
                .iter()
                .any(|&(page, start, end)| key == page && offset + padded > start && offset < end)
            {
                continue;
            }
            match self.pages.get(key) {
                Some(page) if page.live.is_empty() => {
                    empty = empty.or(Some((key, offset)));
                }
                Some(_) => return Some((key, offset)),
                None => {}
            }
        }
        empty
    }

    /// Bytes of a shared page now: a sixteenth of the recent peak, within `page_size`.
    fn target(&self) -> u64 {
        if !self.follow_peak {
            return self.page_size;
        }
        (self.peak / PAGE_PEAK_DIVISOR)
            .next_multiple_of(1 << 20)
            .clamp(1 << 20, self.page_size)
    }

    /// Requests over this many bytes get pages of their own.
    fn dedicated_from(&self) -> u64 {
        if !self.follow_peak {
            return self.page_size;
        }
        (self.peak / DEDICATED_PEAK_DIVISOR)
            .next_multiple_of(1 << 20)
            .clamp(1 << 20, self.page_size)
    }

    /// The smallest empty page of its own that `padded` bytes fill to within an eighth.
    fn dedicated_fit(&self, padded: u64) -> Option<PageKey> {
        let largest = padded.saturating_add(padded / (DEDICATED_FIT_DIVISOR - 1));
        self.dedicated_free
            .range((
                Bound::Excluded((padded.saturating_sub(1), PageKey::default())),
                Bound::Unbounded,
            ))
            .next()
            .filter(|&&(size, _)| size <= largest)
            .map(|&(_, key)| key)
    }

    /// Takes the empty page of its own `key` for `padded` bytes.
    fn take_dedicated(&mut self, key: PageKey, padded: u64) -> Option<Block> {
        let page = self.pages.get_mut(key)?;
        let size = page.size;
        self.dedicated_free.remove(&(size, key));
        page.live.insert(0, size);
        page.idle.reused();
        debug_assert!(size >= padded);
        self.block(key, 0, size)
    }

    fn block(&self, key: PageKey, offset: u64, len: u64) -> Option<Block> {
        Some(Block {
            page: key,
            storage: self.pages.get(key)?.storage,
            offset,
            len,
            pool: 0,
        })
    }

    fn remove_page(&mut self, backend: &mut dyn DeviceMemory, key: PageKey) -> u64 {
        let Some(page) = self.pages.remove(key) else {
            return 0;
        };
        self.changes += 1;
        for (&offset, &len) in &page.free {
            self.free.remove(&(len, key, offset));
        }
        self.dedicated_free.remove(&(page.size, key));
        // SAFETY: the pool allocated the buffer and drops it here; it removes only pages with
        // no live block, and a block returns to the pool only once the GC stage has seen the work
        // that used it finish.
        unsafe { backend.deallocate(page.storage) };
        self.report.page_removed(page.size);
        page.size
    }
}

impl Pool for CompactingPool {
    /// The smallest free range that fits `padded` bytes, its start taken.
    fn try_reserve(&mut self, padded: u64, requested: u64) -> Option<Block> {
        if padded > self.dedicated_from()
            && let Some(key) = self.dedicated_fit(padded)
        {
            self.report.reserved(requested);
            return self.take_dedicated(key, padded);
        }
        let (key, at) = self.best_fit(padded, &[])?;
        self.carve(key, at, at, padded);
        self.report.reserved(requested);
        self.block(key, at, padded)
    }

    fn can_place(&self, padded: u64) -> bool {
        (padded > self.dedicated_from() && self.dedicated_fit(padded).is_some())
            || self.best_fit(padded, &[]).is_some()
    }

    /// A new page of `page_size` bytes, or of what the budget leaves if less, or of the request's
    /// if larger; `Ok(None)` when the cap leaves no room.
    fn grow(
        &mut self,
        backend: &mut dyn DeviceMemory,
        padded: u64,
        requested: u64,
    ) -> Result<Option<Block>, AllocError> {
        let target = self.target();
        let dedicated = padded > self.dedicated_from();
        let size = match dedicated {
            true => padded,
            false if !self.follow_peak => target,
            // Whole MiB: the room is any number of bytes, and an offset placed from a page's end
            // must keep the device alignment.
            false => (target.min(self.room.max(target / PAGE_FLOOR_DIVISOR)))
                .next_multiple_of(1 << 20)
                .max(padded),
        };
        if let Some(cap) = self.max_reserved
            && self.report.bytes_reserved.saturating_add(size) > cap
        {
            return Ok(None);
        }
        let storage = backend.allocate(size)?;
        self.changes += 1;
        let key = self.pages.insert(HeapPage {
            storage,
            size,
            live: BTreeMap::new(),
            free: BTreeMap::from([(0, size)]),
            idle: IdleMark::default(),
            emptied_at: 0,
            retiring: false,
            retired_in: 0,
            dedicated,
        });
        self.report.page_added(size);
        tracing::debug!(target: "gpuworld::memory", pool = %self.report.name, size, %storage, dedicated, "page allocated");
        self.report.reserved(requested);
        if dedicated {
            return Ok(self.take_dedicated(key, padded));
        }
        self.free.insert((size, key, 0));
        self.carve(key, 0, 0, padded);
        Ok(self.block(key, 0, padded))
    }

    fn release(&mut self, block: &Block, requested: u64) -> Result<(), MemoryError> {
        let page = self
            .pages
            .get_mut(block.page)
            .ok_or_else(|| stale_page(block.page))?;
        match page.live.remove(&block.offset) {
            Some(len) if len == block.len => {}
            Some(len) => {
                page.live.insert(block.offset, len);
                return Err(MemoryError::StaleHandle {
                    what: format!(
                        "block at {} of {} bytes (the page holds {len} there)",
                        block.offset, block.len
                    )
                    .into(),
                });
            }
            None => return Err(stale_page(block.page)),
        }
        self.free_range(block.page, block.offset, block.len);
        self.report.released(requested);
        Ok(())
    }

    fn storage(&self, block: &Block) -> Option<StorageId> {
        self.pages.get(block.page).map(|page| page.storage)
    }

    fn cleanup(&mut self, backend: &mut dyn DeviceMemory) -> u64 {
        let empty: Vec<PageKey> = (self.pages.iter())
            .filter(|(_, page)| page.live.is_empty() && !page.retiring)
            .map(|(key, _)| key)
            .collect();
        empty
            .into_iter()
            .map(|key| self.remove_page(backend, key))
            .sum()
    }

    fn periodic_cleanup(&mut self, backend: &mut dyn DeviceMemory, tick: u64) -> u64 {
        let mut expired = self.idle.take_expired(tick, &mut self.pages);
        expired.retain(|&key| self.pages.get(key).is_some_and(|page| !page.retiring));
        expired
            .into_iter()
            .map(|key| self.remove_page(backend, key))
            .sum()
    }

    /// Empty pages, those empty the longest first.
    fn release_idle(&mut self, backend: &mut dyn DeviceMemory, at_least: u64) -> u64 {
        let mut empty: Vec<(u64, PageKey)> = (self.pages.iter())
            .filter(|(_, page)| page.live.is_empty() && !page.retiring)
            .map(|(key, page)| (page.emptied_at, key))
            .collect();
        empty.sort_unstable();
        let mut freed = 0;
        for (_, key) in empty {
            if freed >= at_least {
                break;
            }
            freed += self.remove_page(backend, key);
        }
        freed
    }

    fn free_blocks(&self) -> usize {
        self.free.len()
    }

    fn report(&self) -> &PoolReport {
        &self.report
    }

    fn report_mut(&mut self) -> &mut PoolReport {
        &mut self.report
    }

    fn split(&mut self, block: &Block, at: u64) -> Option<Block> {
        if !block.cuts_at(at) || !self.splits(block) {
            return None;
        }
        let page = self.pages.get_mut(block.page)?;
        page.live.insert(block.offset, at);
        page.live.insert(block.offset + at, block.len - at);
        self.report.reserved(0);
        Some(block.tail(at))
    }

    /// Shared pages only: a page of its own is reused whole.
    fn splits(&self, block: &Block) -> bool {
        self.pages
            .get(block.page)
            .is_some_and(|page| !page.dedicated && page.live.get(&block.offset) == Some(&block.len))
    }

    fn join(&mut self, first: &Block, second: &Block) -> Option<Block> {
        let page = self.pages.get_mut(first.page)?;
        if !first.meets(second)
            || page.live.get(&first.offset) != Some(&first.len)
            || page.live.get(&second.offset) != Some(&second.len)
        {
            return None;
        }
        page.live.remove(&second.offset);
        page.live.insert(first.offset, first.len + second.len);
        self.report.released(0);
        Some(first.joined(second))
    }
}

impl Compacts for CompactingPool {
    /// Pages with the fewest live bytes first, each only if every block moves to free ranges of
    /// pages that stay; the emptied pages retire (`moves.rs`).
    fn evacuate(
        &mut self,
        needed: u64,
        movable: &mut dyn FnMut(&Block) -> Movable,
        moves: &mut Vec<(Block, Block)>,
    ) -> u64 {
        self.evacuate_pages(needed, movable, moves)
    }

    fn release_retiring(&mut self, backend: &mut dyn DeviceMemory, through: u64) -> u64 {
        let retiring: Vec<PageKey> = (self.pages.iter())
            .filter(|(_, page)| page.retiring && page.retired_in <= through)
            .map(|(key, _)| key)
            .collect();
        retiring
            .into_iter()
            .map(|key| self.remove_page(backend, key))
            .sum()
    }

    fn retiring_generation(&self) -> u64 {
        (self.pages.values())
            .filter(|page| page.retiring)
            .map(|page| page.retired_in)
            .max()
            .unwrap_or(0)
    }

    fn retiring(&self) -> u64 {
        self.pages
            .values()
            .filter(|page| page.retiring)
            .map(|page| page.size)
            .sum()
    }

    fn set_room(&mut self, room: u64, peak: u64) {
        self.room = room;
        self.peak = peak;
    }

    /// The run of one page that clears `padded` bytes for the fewest bytes moved (`moves.rs`).
    fn compact(
        &mut self,
        padded: u64,
        requested: u64,
        movable: &mut dyn FnMut(&Block) -> Movable,
        moves: &mut Vec<(Block, Block)>,
    ) -> Option<Block> {
        self.compact_for(padded, requested, movable, moves)
    }
}

#[cfg(test)]
mod tests;
