//! Compacting pool: large pages shared best fit by requests of every size it takes, whose live
//! blocks may be moved to close holes (issue 25). Where making and freeing a buffer costs the
//! driver time by its size (NVIDIA's Vulkan driver: about 33 ms per GiB made and destroyed), a
//! request that finds no free range and would take the pools past their budget does not get a
//! new buffer: the pool picks the run of free ranges and movable live blocks of one page that
//! frees the request's bytes for the fewest bytes moved, moves those blocks to free ranges
//! elsewhere, and gives the request the run (`Pool::compact`). The runtime copies each moved
//! block's bytes on the device (a copy costs about 0.4 ms per GiB there) and points its handle at
//! the new place.

use crate::backend::{AllocError, StorageId};
use crate::error::MemoryError;
use crate::memory::idle::{IdleMark, IdlePage, IdlePages};
use crate::memory::pool::{DeviceMemory, Movable, Pool};
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
/// How deep a compaction looks for room for a block it moves that fits no free range: one run
/// cleared for it, whose blocks must fit free ranges.
const NESTED_DEPTH: u32 = 1;
/// Runs tried for such a block, fewest bytes moved first.
const NESTED_RUNS_TRIED: usize = 4;
/// Runs tried for a request, fewest bytes moved first: each failed try restores the pool's
/// pages.
const RUNS_TRIED: usize = 32;
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
    /// submitted (`Pool::release_retiring`), and nothing is placed in it meanwhile.
    retiring: bool,
    /// The evacuation that retired it (`Pool::retiring_generation`).
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

/// One item of a page in address order: a free range or a live block.
#[derive(Clone, Copy, Debug)]
struct Item {
    offset: u64,
    len: u64,
    /// `None` for a free range.
    live: Option<Movable>,
}

/// Whether a run moves an item's bytes: a live block other than memory the stream reuses.
fn is_moved(live: Option<Movable>) -> bool {
    matches!(live, Some(Movable::Unwritten | Movable::Copied))
}

/// Keeps the `count` runs that move the fewest bytes for a block of `len` (bytes idle in the
/// block's place count as moved), cheapest first.
fn cheapest(runs: &mut Vec<Run>, len: u64, count: usize) {
    let cost = |run: &Run| (run.moved + run.waste(len), run.end - run.start);
    if runs.len() > count {
        runs.select_nth_unstable_by_key(count, cost);
        runs.truncate(count);
    }
    runs.sort_unstable_by_key(cost);
}

/// Whether an attempt for `bytes` already failed with the pool as it is: one for as many bytes
/// or fewer failed, and nothing that could make room happened since.
fn failed_before(failed: Option<(u64, u64)>, changes: u64, bytes: u64) -> bool {
    failed.is_some_and(|(at, smallest)| at == changes && bytes >= smallest)
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

/// A run of items one compaction would clear for a request.
#[derive(Clone, Debug)]
struct Run {
    page: PageKey,
    /// Its items' range in the page.
    start: u64,
    end: u64,
    /// Bytes of live blocks to move.
    moved: u64,
    /// The old places of blocks whose bytes are copied, first to last byte: the copies still
    /// read them, so the request's block must cover them.
    copied: Option<(u64, u64)>,
}

impl Run {
    /// The request's block in the run: `padded` bytes, or the copied blocks' span if longer,
    /// covering that span and placed as late as the run allows (free ranges and unwritten
    /// blocks around it are free again).
    fn placement(&self, padded: u64) -> (u64, u64) {
        match self.copied {
            None => (self.start, self.start + padded),
            Some((first, last)) => {
                let len = padded.max(last - first);
                let at = first.min(self.end - len).max(self.start);
                (at, at + len)
            }
        }
    }

    /// Bytes of the request's block past `padded`: idle until the request is released.
    fn waste(&self, padded: u64) -> u64 {
        let (start, end) = self.placement(padded);
        end - start - padded
    }
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
    /// Bytes the pools may still take within their budget (`Pool::set_room`).
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

    /// The runs of one page that clear `padded` bytes: for each first item, the fewest items
    /// from it on whose bytes reach `padded`, none of them an immovable block.
    fn runs(
        &self,
        key: PageKey,
        padded: u64,
        movable: &mut dyn FnMut(&Block) -> Movable,
        out: &mut Vec<Run>,
    ) {
        let Some(page) = self.pages.get(key) else {
            return;
        };
        if page.size < padded || page.dedicated || page.retiring {
            return;
        }
        let mut items: Vec<Item> = Vec::with_capacity(page.live.len() + page.free.len());
        let mut free = page.free.iter().peekable();
        for (&offset, &len) in &page.live {
            while let Some((&at, &range)) = free.next_if(|(at, _)| **at < offset) {
                items.push(Item {
                    offset: at,
                    len: range,
                    live: None,
                });
            }
            let block = Block {
                page: key,
                storage: page.storage,
                offset,
                len,
                pool: 0,
            };
            items.push(Item {
                offset,
                len,
                live: Some(movable(&block)),
            });
        }
        for (&at, &range) in free {
            items.push(Item {
                offset: at,
                len: range,
                live: None,
            });
        }
        // Two pointers over the items: `first..last` the current run.
        let (mut first, mut bytes, mut moved) = (0, 0u64, 0u64);
        for last in 0..items.len() {
            let item = items[last];
            if item.live == Some(Movable::No) {
                (first, bytes, moved) = (last + 1, 0, 0);
                continue;
            }
            bytes += item.len;
            moved += if is_moved(item.live) { item.len } else { 0 };
            // Drop items from the front while the run still clears the request without them.
            while first < last && bytes - items[first].len >= padded {
                bytes -= items[first].len;
                if is_moved(items[first].live) {
                    moved -= items[first].len;
                }
                first += 1;
            }
            let reused = items[first..=last]
                .iter()
                .any(|item| item.live == Some(Movable::Reusable));
            if bytes >= padded && (moved > 0 || reused) {
                // The request's block covers what copies still read and what it reuses.
                let copied = items[first..=last]
                    .iter()
                    .filter(|item| matches!(item.live, Some(Movable::Copied | Movable::Reusable)))
                    .fold(None, |span: Option<(u64, u64)>, item| {
                        let (start, end) = (item.offset, item.offset + item.len);
                        Some(span.map_or((start, end), |(a, b)| (a.min(start), b.max(end))))
                    });
                out.push(Run {
                    page: key,
                    start: items[first].offset,
                    end: item.offset + item.len,
                    moved,
                    copied,
                });
            }
        }
    }

    /// Clears `run` by moving its live blocks elsewhere (largest first, best fit outside the
    /// run and the regions in `avoid`; with `depth` left, into room another run makes for a block
    /// no free range fits). `false` when one finds no room: the caller restores the pool.
    fn clear(
        &mut self,
        run: &Run,
        movable: &mut dyn FnMut(&Block) -> Movable,
        moves: &mut Vec<(Block, Block)>,
        depth: u32,
        avoid: &mut Vec<(PageKey, u64, u64)>,
    ) -> bool {
        let Some(page) = self.pages.get(run.page) else {
            return false;
        };
        let storage = page.storage;
        let mut blocks: Vec<(u64, u64)> = page
            .live
            .range(run.start..run.end)
            .map(|(&offset, &len)| (offset, len))
            .collect();
        // Memory the stream reuses stays where it is: the request's block covers it.
        blocks.retain(|&(offset, len)| {
            let block = Block {
                page: run.page,
                storage,
                offset,
                len,
                pool: 0,
            };
            movable(&block) != Movable::Reusable
        });
        blocks.sort_unstable_by_key(|&(offset, len)| (std::cmp::Reverse(len), offset));
        avoid.push((run.page, run.start, run.end));
        for (offset, len) in blocks {
            let to = match self.best_fit(len, avoid) {
                Some((to_page, at)) => {
                    // The request owns the run next, so the block's old place is not freed here.
                    self.carve(to_page, at, at, len);
                    self.block(to_page, at, len)
                }
                None if depth > 0 => self.room_for(len, movable, moves, depth - 1, avoid),
                None => None,
            };
            let (Some(from), Some(to)) = (self.block(run.page, offset, len), to) else {
                return false;
            };
            moves.push((from, to));
        }
        true
    }

    /// Makes room for a moved block of `len` bytes by clearing another run (see `clear`); its
    /// block there, longer than `len` where it must cover the old places of blocks copied out.
    fn room_for(
        &mut self,
        len: u64,
        movable: &mut dyn FnMut(&Block) -> Movable,
        moves: &mut Vec<(Block, Block)>,
        depth: u32,
        avoid: &mut Vec<(PageKey, u64, u64)>,
    ) -> Option<Block> {
        // Only the request's own block takes memory its stream reuses: a moved block's new place
        // holds none (the parked slice would outlive it in the pool's records).
        let mut movable = |block: &Block| match movable(block) {
            Movable::Reusable => Movable::No,
            other => other,
        };
        let movable: &mut dyn FnMut(&Block) -> Movable = &mut movable;
        let mut runs = Vec::new();
        let keys: Vec<PageKey> = self.pages.keys().collect();
        for key in keys {
            self.runs(key, len, movable, &mut runs);
        }
        runs.retain(|run| {
            !avoid
                .iter()
                .any(|&(page, start, end)| page == run.page && run.start < end && start < run.end)
        });
        cheapest(&mut runs, len, NESTED_RUNS_TRIED);
        for run in runs {
            self.begin();
            let (mark, avoided) = (moves.len(), avoid.len());
            if self.clear(&run, movable, moves, depth, avoid) {
                let (start, end) = self.settle(&run, len);
                self.commit();
                return self.block(run.page, start, end - start);
            }
            self.rollback();
            moves.truncate(mark);
            avoid.truncate(avoided);
        }
        None
    }

    /// Gives a cleared run to a block of `len` bytes: its moved blocks' old places and free
    /// ranges become the block's place (`Run::placement`), and the rest is free again.
    fn settle(&mut self, run: &Run, len: u64) -> (u64, u64) {
        let (start, end) = run.placement(len);
        self.touch(run.page);
        let Some(page) = self.pages.get_mut(run.page) else {
            return (start, end);
        };
        // Left in the run: the old places of the blocks moved out, and memory the stream
        // reuses; all of it is the block's now.
        let inside: Vec<u64> = page
            .live
            .range(run.start..run.end)
            .map(|(&o, _)| o)
            .collect();
        for offset in inside {
            page.live.remove(&offset);
        }
        let free: Vec<(u64, u64)> = (page.free.range(run.start..run.end))
            .map(|(&at, &len)| (at, len))
            .collect();
        for (at, len) in free {
            page.free.remove(&at);
            self.free.remove(&(len, run.page, at));
        }
        if let Some(page) = self.pages.get_mut(run.page) {
            page.live.insert(start, end - start);
            page.idle.reused();
        }
        if start > run.start {
            self.free_range(run.page, run.start, start - run.start);
        }
        if end < run.end {
            self.free_range(run.page, end, run.end - end);
        }
        (start, end)
    }

    /// Starts an attempt that may be taken back: pages it changes are saved first (`touch`).
    fn begin(&mut self) {
        self.marks.push(self.journal.len());
    }

    /// Saves page `key` as it is, once per attempt, before the attempt changes it.
    fn touch(&mut self, key: PageKey) {
        let Some(&mark) = self.marks.last() else {
            return;
        };
        if self.journal[mark..].iter().any(|(saved, _)| *saved == key) {
            return;
        }
        if let Some(page) = self.pages.get(key) {
            self.journal.push((key, page.clone()));
        }
    }

    /// Keeps what the latest attempt changed (an enclosing attempt may still take it back).
    fn commit(&mut self) {
        self.marks.pop();
        if self.marks.is_empty() {
            self.journal.clear();
        }
    }

    /// Takes back what the latest attempt changed: its saved pages, latest first.
    fn rollback(&mut self) {
        let Some(mark) = self.marks.pop() else {
            return;
        };
        let saved: Vec<(PageKey, HeapPage)> = self.journal.drain(mark..).rev().collect();
        for (key, page) in saved {
            if let Some(now) = self.pages.get(key) {
                for (&offset, &len) in &now.free {
                    self.free.remove(&(len, key, offset));
                }
            }
            if !page.retiring && !page.dedicated {
                for (&offset, &len) in &page.free {
                    self.free.insert((len, key, offset));
                }
            }
            if let Some(now) = self.pages.get_mut(key) {
                *now = page;
            }
        }
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

    /// Its holes serve requests of other pools before the device is asked for more; what they
    /// place here may be moved like any block of the pool.
    fn lends_free_ranges(&self) -> bool {
        true
    }

    fn report(&self) -> PoolReport {
        self.report.clone()
    }

    fn resized(&mut self, _block: &Block, before: u64, requested: u64) {
        self.report.resized(before, requested);
    }

    fn idle_entries(&self) -> usize {
        self.idle.len()
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

    /// Pages with the fewest live bytes first, each only if every block moves to free ranges of
    /// pages that stay; the emptied pages retire.
    fn evacuate(
        &mut self,
        needed: u64,
        movable: &mut dyn FnMut(&Block) -> Movable,
        moves: &mut Vec<(Block, Block)>,
    ) -> u64 {
        if failed_before(self.failed_evacuation, self.changes, needed) {
            return 0;
        }
        self.evacuations += 1;
        let generation = self.evacuations;
        let mut pages: Vec<(u64, PageKey)> = (self.pages.iter())
            .filter(|(_, page)| !page.retiring && !page.dedicated && !page.live.is_empty())
            .map(|(key, page)| (page.live.values().sum::<u64>(), key))
            .collect();
        pages.sort_unstable();
        let mut retired = 0;
        for (_, key) in pages {
            if retired >= needed {
                break;
            }
            let Some(page) = self.pages.get(key) else {
                continue;
            };
            let (storage, size) = (page.storage, page.size);
            let blocks: Vec<(u64, u64)> = page.live.iter().map(|(&o, &l)| (o, l)).collect();
            // A page goes back only if every block moves out of it.
            let all_movable = blocks.iter().all(|&(offset, len)| {
                let block = Block {
                    page: key,
                    storage,
                    offset,
                    len,
                    pool: 0,
                };
                is_moved(Some(movable(&block)))
            });
            if !all_movable {
                continue;
            }
            // The page's free ranges leave the index first: nothing moves into it.
            if let Some(page) = self.pages.get_mut(key) {
                page.retiring = true;
                page.retired_in = generation;
                for (&offset, &len) in &page.free {
                    self.free.remove(&(len, key, offset));
                }
            }
            let run = Run {
                page: key,
                start: 0,
                end: size,
                moved: 0,
                copied: None,
            };
            let mark = moves.len();
            self.begin();
            if !self.clear(&run, movable, moves, NESTED_DEPTH, &mut Vec::new()) {
                self.rollback();
                moves.truncate(mark);
                if let Some(page) = self.pages.get_mut(key) {
                    page.retiring = false;
                    for (&offset, &len) in &page.free {
                        self.free.insert((len, key, offset));
                    }
                }
                continue;
            }
            self.commit();
            if let Some(page) = self.pages.get_mut(key) {
                page.live.clear();
                page.free.clear();
            }
            let moved: u64 = moves[mark..].iter().map(|(from, _)| from.len).sum();
            self.report.bytes_moved += moved;
            self.report.blocks_moved += (moves.len() - mark) as u64;
            retired += size;
            tracing::debug!(target: "gpuworld::memory", pool = %self.report.name, size, moved, "emptied a page to return it");
        }
        if retired == 0 {
            self.failed_evacuation = Some((self.changes, needed));
        }
        retired
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

    /// The run of one page that clears `padded` bytes for the fewest bytes moved (of the
    /// cheapest few whose blocks all find room elsewhere); the request's block spans the run up
    /// to the end of its last copied block, and the rest of the run is free again.
    fn compact(
        &mut self,
        padded: u64,
        requested: u64,
        movable: &mut dyn FnMut(&Block) -> Movable,
        moves: &mut Vec<(Block, Block)>,
    ) -> Option<Block> {
        if failed_before(self.failed_compaction, self.changes, padded) {
            return None;
        }
        let mut runs = Vec::new();
        let keys: Vec<PageKey> = self.pages.keys().collect();
        for key in keys {
            self.runs(key, padded, movable, &mut runs);
        }
        // Bytes moved and bytes idle in the request's block weigh alike.
        cheapest(&mut runs, padded, RUNS_TRIED);
        for run in runs {
            self.begin();
            let mark = moves.len();
            let mut avoid = Vec::new();
            if !self.clear(&run, movable, moves, NESTED_DEPTH, &mut avoid) {
                self.rollback();
                moves.truncate(mark);
                continue;
            }
            let (start, end) = self.settle(&run, padded);
            self.commit();
            let moved: u64 = moves[mark..].iter().map(|(from, _)| from.len).sum();
            self.report.bytes_moved += moved;
            self.report.blocks_moved += (moves.len() - mark) as u64;
            self.report.reserved(requested);
            tracing::debug!(target: "gpuworld::memory", pool = %self.report.name, padded, moved, blocks = moves.len() - mark, "compacted a page for a request");
            return self.block(run.page, start, end - start);
        }
        self.failed_compaction = Some((self.changes, padded));
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{SimBackend, SimConfig};

    const MIB: u64 = 1 << 20;

    fn device() -> SimBackend {
        SimBackend::new(
            SimConfig::default()
                .with_memory_bytes(1 << 30)
                .with_record(false),
        )
    }

    /// A pool of 8 MiB pages holding eight 1 MiB blocks, with the blocks at 1, 3 and 5 MiB
    /// released: three holes of 1 MiB, no room for 2 MiB.
    fn holed(device: &mut SimBackend) -> (CompactingPool, Vec<Block>) {
        let mut pool = CompactingPool::new("test".into(), 8 * MIB, false, None, None);
        let first = pool.grow(device, MIB, MIB).unwrap().unwrap();
        let mut blocks = vec![first];
        for _ in 1..8 {
            blocks.push(pool.try_reserve(MIB, MIB).unwrap());
        }
        assert!(pool.try_reserve(MIB, MIB).is_none(), "the page is full");
        for index in [1, 3, 5] {
            pool.release(&blocks[index], MIB).unwrap();
        }
        (pool, blocks)
    }

    #[test]
    fn released_blocks_merge_and_best_fit_takes_the_smallest_hole() {
        let mut device = device();
        let (mut pool, blocks) = holed(&mut device);
        pool.release(&blocks[2], MIB).unwrap();
        // 1..4 MiB is one range now; a 1 MiB request takes the smallest hole (5 MiB).
        let block = pool.try_reserve(MIB, MIB).unwrap();
        assert_eq!(block.offset, 5 * MIB);
        let block = pool.try_reserve(3 * MIB, 3 * MIB).unwrap();
        assert_eq!((block.offset, block.len), (MIB, 3 * MIB));
        assert_eq!(pool.report().pages_allocated, 1);
    }

    #[test]
    fn a_compaction_moves_the_fewest_bytes_and_places_the_request_where_they_were() {
        let mut device = device();
        let (mut pool, blocks) = holed(&mut device);
        assert!(!pool.can_place(2 * MIB));
        let mut moves = Vec::new();
        let block = pool
            .compact(2 * MIB, 2 * MIB, &mut |_| Movable::Copied, &mut moves)
            .expect("one moved block makes room");
        assert_eq!(moves.len(), 1, "one 1 MiB block moves: {moves:?}");
        let (from, to) = moves[0];
        assert_eq!(from.len, MIB);
        assert!(
            blocks.iter().any(|b| b.offset == from.offset),
            "a live block moved"
        );
        assert!(
            [MIB, 3 * MIB, 5 * MIB].contains(&to.offset),
            "into a hole: {to:?}"
        );
        // The request covers the moved block's old place (its copy still reads it).
        assert_eq!(block.len, 2 * MIB);
        assert!(block.offset <= from.offset && from.offset + MIB <= block.offset + block.len);
        assert_eq!(pool.report().pages_allocated, 1, "no new page");
        assert_eq!(pool.report().bytes_moved, MIB);
    }

    #[test]
    fn blocks_that_may_not_move_stay_and_the_compaction_gives_up() {
        let mut device = device();
        let (mut pool, _) = holed(&mut device);
        let mut moves = Vec::new();
        let placed = pool.compact(2 * MIB, 2 * MIB, &mut |_| Movable::No, &mut moves);
        assert!(placed.is_none());
        assert!(moves.is_empty());
        // Nothing changed: the three holes still serve 1 MiB requests.
        for _ in 0..3 {
            assert!(pool.try_reserve(MIB, MIB).is_some());
        }
    }

    #[test]
    fn a_block_no_hole_fits_moves_into_room_another_run_makes() {
        let mut device = device();
        let mut pool = CompactingPool::new("test".into(), 8 * MIB, false, None, None);
        // Page A: 2 MiB block at 0, 2 MiB block at 2, 1 MiB hole, 1 MiB block, 2 MiB hole.
        let a0 = pool.grow(&mut device, 2 * MIB, 2 * MIB).unwrap().unwrap();
        let a1 = pool.try_reserve(2 * MIB, 2 * MIB).unwrap();
        let hole = pool.try_reserve(MIB, MIB).unwrap();
        let _a3 = pool.try_reserve(MIB, MIB).unwrap();
        let tail = pool.try_reserve(2 * MIB, 2 * MIB).unwrap();
        pool.release(&hole, MIB).unwrap();
        pool.release(&tail, 2 * MIB).unwrap();
        assert_eq!((a0.offset, a1.offset), (0, 2 * MIB));
        // 3 MiB fits nowhere; the cheapest run is the 1 MiB block and the 2 MiB hole.
        let mut moves = Vec::new();
        let block = pool
            .compact(3 * MIB, 3 * MIB, &mut |_| Movable::Unwritten, &mut moves)
            .expect("room");
        assert_eq!(moves.len(), 1);
        assert_eq!((block.offset, block.len), (5 * MIB, 3 * MIB));
        assert_eq!(
            moves[0].1.offset,
            4 * MIB,
            "the block went to the 1 MiB hole"
        );
    }

    #[test]
    fn an_emptied_page_retires_and_goes_back_only_when_told() {
        let mut device = device();
        let mut pool = CompactingPool::new("test".into(), 8 * MIB, false, None, None);
        let a = pool.grow(&mut device, 6 * MIB, 6 * MIB).unwrap().unwrap();
        // A second page holding one 1 MiB block.
        let c = pool.grow(&mut device, MIB, MIB).unwrap().unwrap();
        assert_ne!(c.page, a.page);
        // The page with the 1 MiB block empties into the first page's free 2 MiB.
        let mut moves = Vec::new();
        let retired = pool.evacuate(MIB, &mut |_| Movable::Copied, &mut moves);
        assert_eq!(retired, 8 * MIB);
        assert_eq!(moves.len(), 1);
        assert_eq!(moves[0].1.page, a.page);
        assert_eq!(pool.retiring(), 8 * MIB);
        assert_eq!(
            pool.report().pages,
            2,
            "still held until the copies were submitted"
        );
        assert!(
            !pool.can_place(2 * MIB),
            "nothing is placed in a retiring page"
        );
        assert!(pool.can_place(MIB));
        assert_eq!(pool.retiring_generation(), 1);
        assert_eq!(
            pool.release_retiring(&mut device, 0),
            0,
            "retired by evacuation 1"
        );
        assert_eq!(pool.release_retiring(&mut device, 1), 8 * MIB);
        assert_eq!(pool.report().pages, 1);
        assert_eq!(pool.retiring(), 0);
    }

    #[test]
    fn a_request_over_the_page_gets_a_page_of_its_own_reused_whole() {
        let mut device = device();
        let mut pool = CompactingPool::new("test".into(), 8 * MIB, false, None, None);
        let own = pool.grow(&mut device, 16 * MIB, 16 * MIB).unwrap().unwrap();
        assert_eq!((own.offset, own.len), (0, 16 * MIB));
        pool.release(&own, 16 * MIB).unwrap();
        assert!(
            pool.try_reserve(MIB, MIB).is_none(),
            "small requests share pages"
        );
        // Within an eighth of it, a later request takes it whole.
        let again = pool.try_reserve(15 * MIB, 15 * MIB).unwrap();
        assert_eq!((again.page, again.len), (own.page, 16 * MIB));
        pool.release(&again, 15 * MIB).unwrap();
        assert!(
            pool.try_reserve(12 * MIB, 12 * MIB).is_none(),
            "wasting a quarter"
        );
        assert_eq!(pool.release_idle(&mut device, 1), 16 * MIB);
    }
}
