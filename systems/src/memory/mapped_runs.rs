//! Mapped pool kept as runs of pages, for devices whose mappings split
//! ([`DeviceProperties::split_mappings`](crate::backend::DeviceProperties::split_mappings): host
//! pages, `mprotect`/`madvise`). It places requests as the mapped pool does (`mapped.rs`: of the
//! smallest free address ranges that hold a request, the end needing the fewest pages mapped), and
//! like it with one page per chunk, a page goes back once no live allocation touches it; but where
//! that pool keeps a record per page, this one keeps mapped pages and idle pages as runs, and maps
//! and unmaps a run of neighbouring pages in one device call, so a request costs about the same
//! whatever its page count.
//!
//! A page is busy while a live allocation touches it, which is while no free address range holds
//! it whole: the free ranges say which pages are busy, and a page two neighbouring allocations
//! share stays busy until both are released. Pages that a release leaves idle stay mapped, as one
//! idle run stamped with the release, and are unmapped oldest first when the pool makes room,
//! cleans up, or they outlive `release_after_ticks`; a request placed over idle pages takes them
//! back first (placement prefers them).
//!
//! The block released last waits beside the free ranges (`latest`): the next request of exactly
//! its size takes it as it is, any other call returns it to them first (`settle`). A program
//! that frees and allocates one size in turn (a buffer per step, a ring of buffers) then costs
//! no search: a release and a request of 1 MiB took 250-280 ns through the interval maps against
//! 25-30 ns in a sliced pool's page of its own, and 26-27 ns with the latest block kept.

use crate::backend::{AllocError, StorageId};
use crate::error::MemoryError;
use crate::memory::free_ranges::{FreeRanges, Placement};
use crate::memory::pool::{DeviceMemory, Pool};
use crate::memory::report::{PoolReport, human_bytes};
use crate::memory::{Block, PageKey, stale_page};
use slotmap::SlotMap;
use std::collections::{BTreeMap, VecDeque};

/// Idle pages one release left, as the pool queues them for return: `(range, start, end, since)`,
/// the pages `[start, end)` that became idle with release number `since`. Parts of it may have
/// been taken again since; what is left of it is the idle runs within it stamped `since`.
type IdleRun = (PageKey, u64, u64, u64);

/// One reserved address range.
#[derive(Debug)]
struct AddressRange {
    storage: StorageId,
    size: u64,
    /// Free address ranges, offset to length; neighbours are always merged.
    free: BTreeMap<u64, u64>,
    /// Mapped pages, start to end; neighbours are always merged.
    mapped: BTreeMap<u64, u64>,
    /// Mapped pages no live allocation touches, start to (end, the release that idled them).
    idle: BTreeMap<u64, (u64, u64)>,
    /// Live allocations in it.
    live: u64,
}

impl AddressRange {
    /// The first idle run overlapping `[start, end)`: `(start, end, since)`.
    fn idle_overlapping(&self, start: u64, end: u64) -> Option<(u64, u64, u64)> {
        if let Some((&run, &(run_end, since))) = self.idle.range(..start).next_back()
            && run_end > start
        {
            return Some((run, run_end, since));
        }
        let (&run, &(run_end, since)) = self.idle.range(start..end).next()?;
        Some((run, run_end, since))
    }

    /// Bytes of the pages `[start, end)` that are not mapped; counting stops at `limit`.
    fn unmapped_in(&self, start: u64, end: u64, limit: u64) -> u64 {
        // Most places lie in one mapped run.
        if let Some((&run, &run_end)) = self.mapped.range(..end).next_back()
            && run <= start
        {
            return end.saturating_sub(run_end.max(start));
        }
        let mut unmapped = 0;
        let mut at = start;
        let before = self.mapped.range(..start).next_back();
        for (&run, &run_end) in before.into_iter().chain(self.mapped.range(start..end)) {
            if run > at {
                unmapped += run - at;
                if unmapped >= limit {
                    return unmapped;
                }
            }
            at = at.max(run_end);
            if at >= end {
                return unmapped;
            }
        }
        unmapped + end.saturating_sub(at)
    }

    /// The unmapped runs of the pages `[start, end)`.
    fn unmapped_runs(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let mut runs = Vec::new();
        let mut at = start;
        let before = self.mapped.range(..start).next_back();
        for (&run, &run_end) in before.into_iter().chain(self.mapped.range(start..end)) {
            if run > at {
                runs.push((at, run.min(end)));
            }
            at = at.max(run_end);
            if at >= end {
                return runs;
            }
        }
        if at < end {
            runs.push((at, end));
        }
        runs
    }

    /// Adds the unmapped pages `[start, end)` to the mapped runs, merged with their neighbours.
    fn add_mapped(&mut self, mut start: u64, mut end: u64) {
        if let Some((&before, &before_end)) = self.mapped.range(..start).next_back()
            && before_end == start
        {
            self.mapped.remove(&before);
            start = before;
        }
        if let Some(after_end) = self.mapped.remove(&end) {
            end = after_end;
        }
        self.mapped.insert(start, end);
    }

    /// Takes the mapped pages `[start, end)` out of their run.
    fn remove_mapped(&mut self, start: u64, end: u64) {
        let Some((&run, &run_end)) = self.mapped.range(..=start).next_back() else {
            return;
        };
        if run_end < end {
            return;
        }
        self.mapped.remove(&run);
        if run < start {
            self.mapped.insert(run, start);
        }
        if end < run_end {
            self.mapped.insert(end, run_end);
        }
    }
}

/// Addresses reserved once per range, host pages mapped in runs under live allocations.
#[derive(Debug)]
pub struct MappedRunsPool {
    name: String,
    /// Bytes of a page (the device's mapping granularity).
    page: u64,
    /// Bytes of each address range reserved (a larger request gets a range of its size).
    range_size: u64,
    max_reserved: Option<u64>,
    release_after: Option<u64>,
    ranges: SlotMap<PageKey, AddressRange>,
    /// Every free range, by length.
    free: FreeRanges,
    /// Idle runs as their releases made them, oldest first (stale ones are skipped, and dropped
    /// once they outnumber the idle runs left).
    queue: VecDeque<IdleRun>,
    /// Releases that idled pages so far: the stamp of the next one is this plus one.
    idled: u64,
    /// Bytes of idle pages, and the idle runs holding them.
    idle_bytes: u64,
    idle_runs: usize,
    /// With `release_after`: the ticks at which the periodic cleanup first saw releases, each
    /// with the last release it saw then, oldest first.
    seen: VecDeque<(u64, u64)>,
    /// The block released last, not yet returned to the free ranges (`settle`): the next
    /// request of exactly its size takes it as it is, every other call returns it first.
    latest: Option<Block>,
    report: PoolReport,
}

impl MappedRunsPool {
    /// A pool that maps pages of `page` bytes in runs under address ranges of `range_size` bytes
    /// (whole pages), holding at most `max_reserved` bytes mapped, and returning pages idle for
    /// `release_after` ticks (`None`: only when making room or cleaning up).
    pub fn new(
        name: String,
        page: u64,
        range_size: u64,
        max_reserved: Option<u64>,
        release_after: Option<u64>,
    ) -> MappedRunsPool {
        let page = page.max(1);
        let range_size = range_size.max(page).next_multiple_of(page);
        let report = PoolReport::new(format!(
            "{name} mapped, pages {} in runs, ranges {}",
            human_bytes(page),
            human_bytes(range_size)
        ));
        MappedRunsPool {
            name,
            page,
            range_size,
            max_reserved,
            release_after,
            ranges: SlotMap::with_key(),
            free: FreeRanges::default(),
            queue: VecDeque::new(),
            idled: 0,
            idle_bytes: 0,
            idle_runs: 0,
            seen: VecDeque::new(),
            latest: None,
            report,
        }
    }

    /// The pages `[start, end)` that `len` bytes at `offset` touch.
    fn pages_of(&self, offset: u64, len: u64) -> (u64, u64) {
        let start = offset / self.page * self.page;
        (start, (offset + len.max(1)).next_multiple_of(self.page))
    }

    /// Where `padded` bytes go ([`FreeRanges::best_place`]).
    fn place(&self, padded: u64) -> Option<Placement> {
        self.free.best_place(padded, |key, offset, limit| {
            let (start, end) = self.pages_of(offset, padded);
            self.ranges
                .get(key)
                .map_or(0, |range| range.unmapped_in(start, end, limit))
        })
    }

    /// Takes `padded` bytes at `offset` of the free range at `start` of `key`, whose pages are
    /// mapped: the idle pages among them are busy from now on.
    fn take(&mut self, place: Placement, padded: u64, requested: u64) -> Option<Block> {
        let Placement { key, offset, .. } = place;
        let (first, end_page) = self.pages_of(offset, padded);
        let range = self.ranges.get_mut(key)?;
        self.free.take(&mut range.free, place, padded)?;
        while let Some((run, run_end, since)) = range.idle_overlapping(first, end_page) {
            range.idle.remove(&run);
            self.idle_runs -= 1;
            if run < first {
                range.idle.insert(run, (first, since));
                self.idle_runs += 1;
            }
            if run_end > end_page {
                range.idle.insert(end_page, (run_end, since));
                self.idle_runs += 1;
            }
            self.idle_bytes -= run_end.min(end_page) - run.max(first);
        }
        range.live += 1;
        self.report.reserved(requested);
        Some(Block {
            page: key,
            storage: range.storage,
            offset,
            len: padded,
            pool: 0,
        })
    }

    /// Reserves a new address range for at least `padded` bytes.
    fn add_range(
        &mut self,
        backend: &mut dyn DeviceMemory,
        padded: u64,
    ) -> Result<PageKey, AllocError> {
        let size = self.range_size.max(padded.next_multiple_of(self.page));
        let storage = backend.reserve_addresses(size)?;
        let key = self.ranges.insert_with_key(|key| AddressRange {
            storage,
            size,
            free: self.free.add_range(key, size),
            mapped: BTreeMap::new(),
            idle: BTreeMap::new(),
            live: 0,
        });
        tracing::debug!(target: "gpuworld::memory", pool = %self.name, size, "address range reserved");
        Ok(key)
    }

    /// Maps every unmapped page of `len` bytes at `offset` of `key`, a device call per run of
    /// unmapped neighbours. On a refusal the runs this call mapped are unmapped again: nothing
    /// is held for a request that failed.
    fn map(
        &mut self,
        backend: &mut dyn DeviceMemory,
        key: PageKey,
        offset: u64,
        len: u64,
    ) -> Result<(), AllocError> {
        let (start, end) = self.pages_of(offset, len);
        let Some(range) = self.ranges.get_mut(key) else {
            return Ok(());
        };
        let runs = range.unmapped_runs(start, end);
        for (done, &(run, run_end)) in runs.iter().enumerate() {
            if let Err(error) = backend.map_pages(range.storage, run, run_end - run) {
                for &(run, run_end) in &runs[..done] {
                    // SAFETY: mapped by this call for a request that never got them: no work
                    // can use them.
                    unsafe { backend.unmap_pages(range.storage, run, run_end - run) };
                }
                return Err(error);
            }
        }
        for &(run, run_end) in &runs {
            range.add_mapped(run, run_end);
            self.report
                .pages_added((run_end - run) / self.page, self.page);
        }
        Ok(())
    }

    /// Unmaps what is left of `run` (its idle runs still stamped with its release), first pages
    /// first, until `at_least` bytes went back: their bytes, and the rest of the run where it
    /// stopped early.
    fn unmap_if_idle(
        &mut self,
        backend: &mut dyn DeviceMemory,
        run: IdleRun,
        at_least: u64,
    ) -> (u64, Option<IdleRun>) {
        let (key, start, end, since) = run;
        let Some(range) = self.ranges.get_mut(key) else {
            return (0, None);
        };
        let mut freed = 0;
        let mut at = start;
        while at < end
            && let Some((&idle, &(idle_end, stamp))) = range.idle.range(at..end).next()
        {
            if freed >= at_least {
                return (freed, Some((key, idle, end, since)));
            }
            at = idle_end;
            if stamp != since {
                continue;
            }
            // Whole pages, at least what is still asked for.
            let asked = (at_least - freed)
                .div_ceil(self.page)
                .saturating_mul(self.page);
            let cut = idle.saturating_add(asked).min(idle_end);
            range.idle.remove(&idle);
            if cut < idle_end {
                range.idle.insert(cut, (idle_end, stamp));
            } else {
                self.idle_runs -= 1;
            }
            // SAFETY: no live allocation touches idle pages, and the memory pool releases an
            // allocation only once the device is done with it: no work queued or running uses
            // them. They are mapped (idle pages are), by any calls: the device splits mappings.
            unsafe { backend.unmap_pages(range.storage, idle, cut - idle) };
            range.remove_mapped(idle, cut);
            self.idle_bytes -= cut - idle;
            self.report
                .pages_removed((cut - idle) / self.page, self.page);
            freed += cut - idle;
            if cut < idle_end {
                return (freed, Some((key, cut, end, since)));
            }
        }
        (freed, None)
    }

    /// Whether some pages of `run` are still idle since its release.
    fn still_idle(ranges: &SlotMap<PageKey, AddressRange>, run: &IdleRun) -> bool {
        let &(key, start, end, since) = run;
        ranges.get(key).is_some_and(|range| {
            range
                .idle
                .range(start..end)
                .any(|(_, &(_, stamp))| stamp == since)
        })
    }

    /// Drops stale queued runs once they outnumber idle runs four times over (idle pages taken
    /// again leave their runs behind).
    fn drop_stale_runs(&mut self) {
        if self.queue.len() <= 4 * self.idle_runs + 1024 {
            return;
        }
        let ranges = &self.ranges;
        self.queue.retain(|run| Self::still_idle(ranges, run));
    }

    /// Returns the latest released block to the free ranges: its address range merges with its
    /// free neighbours, and its pages that the merged range holds whole are idle from now on,
    /// one idle run stamped with this release. The block, if there was one.
    fn settle(&mut self) -> Option<Block> {
        let block = self.latest.take()?;
        self.free_block(&block);
        Some(block)
    }

    /// [`MappedRunsPool::settle`]'s work for `block`, released and validated.
    fn free_block(&mut self, block: &Block) {
        let (first, end_page) = self.pages_of(block.offset, block.len);
        let page = self.page;
        let Some(range) = self.ranges.get_mut(block.page) else {
            return;
        };
        let (offset, len) = (self.free).give(&mut range.free, block.page, block.offset, block.len);
        let idle = first.max(offset.next_multiple_of(page));
        let idle_end = end_page.min((offset + len) / page * page);
        if idle < idle_end {
            self.idled += 1;
            range.idle.insert(idle, (idle_end, self.idled));
            self.idle_runs += 1;
            self.idle_bytes += idle_end - idle;
            self.queue
                .push_back((block.page, idle, idle_end, self.idled));
            self.drop_stale_runs();
        }
    }

    /// Returns the address ranges with no live allocation and no page mapped.
    fn free_empty_ranges(&mut self, backend: &mut dyn DeviceMemory) {
        let empty: Vec<PageKey> = self
            .ranges
            .iter()
            .filter(|(_, range)| range.live == 0 && range.mapped.is_empty())
            .map(|(key, _)| key)
            .collect();
        for key in empty {
            let Some(range) = self.ranges.remove(key) else {
                continue;
            };
            self.free.remove_range(key, &range.free);
            // SAFETY: nothing is mapped in the range and no allocation lives in it.
            unsafe { backend.free_addresses(range.storage) };
            tracing::debug!(target: "gpuworld::memory", pool = %self.name, size = range.size, "address range returned");
        }
    }
}

impl Pool for MappedRunsPool {
    /// The latest released block if it has exactly the request's size; else, the free ranges
    /// with it returned, the best place that needs no page mapped, or the start of that block
    /// where it holds the request and no end of a free range does.
    fn try_reserve(&mut self, padded: u64, requested: u64) -> Option<Block> {
        if let Some(latest) = self.latest.filter(|latest| latest.len == padded)
            && let Some(range) = self.ranges.get_mut(latest.page)
        {
            self.latest = None;
            range.live += 1;
            self.report.reserved(requested);
            return Some(latest);
        }
        let settled = self.settle();
        if let Some(place) = self.place(padded).filter(|place| place.unmapped == 0) {
            return self.take(place, padded, requested);
        }
        let settled = settled.filter(|block| block.len >= padded)?;
        let range = self.ranges.get(settled.page)?;
        let (&start, _) = range.free.range(..=settled.offset).next_back()?;
        let place = Placement {
            key: settled.page,
            start,
            offset: settled.offset,
            unmapped: 0,
        };
        self.take(place, padded, requested)
    }

    fn can_place(&self, padded: u64) -> bool {
        self.latest.is_some_and(|latest| latest.len >= padded)
            || self.place(padded).is_some_and(|place| place.unmapped == 0)
    }

    /// Maps the pages the best place lacks, in a new address range when no free range fits.
    fn grow(
        &mut self,
        backend: &mut dyn DeviceMemory,
        padded: u64,
        requested: u64,
    ) -> Result<Option<Block>, AllocError> {
        self.settle();
        let place = match self.place(padded) {
            Some(place) => place,
            None => {
                let key = self.add_range(backend, padded)?;
                Placement {
                    key,
                    start: 0,
                    offset: 0,
                    unmapped: padded.next_multiple_of(self.page),
                }
            }
        };
        if let Some(cap) = self.max_reserved
            && self.report.bytes_reserved.saturating_add(place.unmapped) > cap
        {
            return Ok(None);
        }
        self.map(backend, place.key, place.offset, padded)?;
        Ok(self.take(place, padded, requested))
    }

    /// Validates the release and keeps the block as the latest released one
    /// (`settle` returns the one before to the free ranges).
    fn release(&mut self, block: &Block, requested: u64) -> Result<(), MemoryError> {
        let range = self
            .ranges
            .get_mut(block.page)
            .ok_or_else(|| stale_page(block.page))?;
        let end = block.offset + block.len;
        let overlaps_free = (range.free.range(..end).next_back())
            .is_some_and(|(&free, &len)| free + len > block.offset);
        let overlaps_latest = self.latest.is_some_and(|latest| {
            latest.page == block.page
                && latest.offset < end
                && block.offset < latest.offset + latest.len
        });
        if end > range.size || range.live == 0 || overlaps_free || overlaps_latest {
            return Err(MemoryError::StaleHandle {
                what: format!("block {block:?} of {}", self.name).into(),
            });
        }
        range.live -= 1;
        self.report.released(requested);
        if let Some(before) = self.latest.replace(*block) {
            self.free_block(&before);
        }
        Ok(())
    }

    fn storage(&self, block: &Block) -> Option<StorageId> {
        self.ranges.get(block.page).map(|range| range.storage)
    }

    /// Unmaps every idle page and returns the address ranges left empty.
    fn cleanup(&mut self, backend: &mut dyn DeviceMemory) -> u64 {
        self.settle();
        let freed = self.release_idle(backend, u64::MAX);
        self.free_empty_ranges(backend);
        freed
    }

    /// Unmaps the pages idle since releases that a periodic cleanup at least `release_after`
    /// ticks ago saw.
    fn periodic_cleanup(&mut self, backend: &mut dyn DeviceMemory, tick: u64) -> u64 {
        let Some(after) = self.release_after else {
            return 0;
        };
        self.settle();
        if self.seen.back().map_or(0, |&(_, last)| last) < self.idled {
            self.seen.push_back((tick, self.idled));
        }
        let mut expired = None;
        while let Some(&(seen, last)) = self.seen.front()
            && tick.saturating_sub(seen) >= after
        {
            self.seen.pop_front();
            expired = Some(last);
        }
        let Some(last) = expired else {
            return 0;
        };
        let mut freed = 0;
        while let Some(&run) = self.queue.front()
            && run.3 <= last
        {
            self.queue.pop_front();
            freed += self.unmap_if_idle(backend, run, u64::MAX).0;
        }
        freed
    }

    /// Unmaps idle pages, those idle the longest first.
    fn release_idle(&mut self, backend: &mut dyn DeviceMemory, at_least: u64) -> u64 {
        self.settle();
        let mut freed = 0;
        while freed < at_least
            && self.idle_bytes > 0
            && let Some(run) = self.queue.pop_front()
        {
            let (bytes, rest) = self.unmap_if_idle(backend, run, at_least - freed);
            freed += bytes;
            if let Some(rest) = rest {
                self.queue.push_front(rest);
            }
        }
        if self.idle_bytes == 0 {
            self.queue.clear();
        }
        freed
    }

    fn free_blocks(&self) -> usize {
        self.free.len() + usize::from(self.latest.is_some())
    }

    fn report(&self) -> &PoolReport {
        &self.report
    }

    fn report_mut(&mut self) -> &mut PoolReport {
        &mut self.report
    }

    /// Every page stays busy: the two blocks cover what the one did.
    fn split(&mut self, block: &Block, at: u64) -> Option<Block> {
        if !block.cuts_at(at) {
            return None;
        }
        let range = self.ranges.get_mut(block.page)?;
        if block.offset + block.len > range.size || range.live == 0 {
            return None;
        }
        range.live += 1;
        self.report.reserved(0);
        Some(block.tail(at))
    }

    fn splits(&self, block: &Block) -> bool {
        self.ranges.contains_key(block.page)
    }

    /// Every page stays busy: the joined block covers what the two did.
    fn join(&mut self, first: &Block, second: &Block) -> Option<Block> {
        if !first.meets(second) {
            return None;
        }
        let range = self.ranges.get_mut(first.page)?;
        if second.offset + second.len > range.size || range.live < 2 {
            return None;
        }
        range.live -= 1;
        self.report.released(0);
        Some(first.joined(second))
    }
}

#[cfg(test)]
mod tests;
