//! Mapped pool: address ranges reserved once, with device memory mapped under live allocations
//! only (CUDA's virtual memory management: `cuMemAddressReserve`, then `cuMemCreate`/`cuMemMap`),
//! as PyTorch's expandable segments. A request takes, of the free address ranges that hold it
//! (smallest first), the end of one that needs the fewest pages mapped, so idle pages are reused
//! before new ones are mapped and live allocations pack next to each other, sharing pages. The
//! pages a request lacks are mapped in chunks of at most `chunk` bytes, one device allocation
//! each; a released allocation's range merges with its free neighbours, and a chunk none of
//! whose pages is used any more stays mapped, idle, until the pool makes room (`release_idle`,
//! oldest first), cleans up, or it outlives `release_after_ticks`.
//!
//! What it reserves is the mapped chunks, never the addresses: a hole between live allocations
//! costs only the chunks at its ends that live neighbours still use, whatever the sizes (buffers
//! that cannot move otherwise pin whole pages of a sliced pool, or waste the difference when a
//! buffer of their own is reused by a smaller request). Larger chunks make fewer device calls
//! (each costs ~85 µs over its life on an H200, whatever its size) and strand more idle pages
//! beside used ones (`docs/benchmarks.md`).

use crate::backend::{AllocError, StorageId};
use crate::error::MemoryError;
use crate::memory::free_ranges::{FreeRanges, Placement};
use crate::memory::pool::{DeviceMemory, Pool};
use crate::memory::report::{PoolReport, human_bytes};
use crate::memory::{Block, PageKey, stale_page};
use slotmap::SlotMap;
use std::collections::{BTreeMap, VecDeque};

/// A device page of an address range.
#[derive(Clone, Copy, Debug, Default)]
struct Page {
    /// Live allocations that touch it.
    users: u32,
    mapped: bool,
    /// The first page of the chunk it is mapped in (when mapped).
    chunk: usize,
    /// At the first page of a chunk, the chunk (`pages` 0 elsewhere): next to the pages a
    /// request touches, so that placing and releasing one touches a record per page.
    head: Chunk,
}

/// Pages mapped by one device call (one allocation of device memory): they go back together,
/// once none of them has users. Kept at its first page (`Page::head`).
#[derive(Clone, Copy, Debug, Default)]
struct Chunk {
    /// Its pages; 0 where no chunk starts.
    pages: usize,
    /// Pages of it with users.
    busy: usize,
    /// When it last became idle, in the pool's count of releases that idled chunks: an idle
    /// queue entry with another number is stale.
    idle_since: u64,
}

impl Chunk {
    /// Whether a chunk starts here and has been idle since release number `since`.
    fn idle_since_release(&self, since: u64) -> bool {
        self.pages > 0 && self.busy == 0 && self.idle_since == since
    }
}

/// Chunks that one release left idle: `(range, first chunk, last chunk, idle_since)`, the first
/// pages of the first and last chunk whose `idle_since` it set.
type IdleRun = (PageKey, usize, usize, u64);

/// One reserved address range.
#[derive(Debug)]
struct AddressRange {
    storage: StorageId,
    size: u64,
    pages: Vec<Page>,
    /// Chunks mapped.
    mapped_chunks: usize,
    /// Free ranges, offset to length; neighbours are always merged.
    free: BTreeMap<u64, u64>,
    /// Live allocations in it.
    live: u64,
}

/// Addresses reserved once per range, device pages mapped under live allocations.
#[derive(Debug)]
pub struct MappedPool {
    name: String,
    /// Bytes of a device page (the device's mapping granularity).
    page: u64,
    /// Bytes of each address range reserved (a larger request gets a range of its size).
    range_size: u64,
    max_reserved: Option<u64>,
    release_after: Option<u64>,
    ranges: SlotMap<PageKey, AddressRange>,
    /// Every free range, by length.
    free: FreeRanges,
    /// Most pages mapped by one device call.
    max_chunk: usize,
    /// Chunks that became idle, oldest first, a run per release (a queue entry per chunk grew
    /// by an entry per page released while idle pages were reused: with 4 KiB pages, 6 KiB per
    /// MiB released; stale runs are dropped once they outnumber idle pages).
    idle: VecDeque<IdleRun>,
    /// Releases that idled chunks so far (see `Chunk::idle_since`).
    idled: u64,
    /// Bytes of mapped chunks without users.
    idle_bytes: u64,
    /// With `release_after`: idle chunks stamped with the tick the periodic cleanup first saw
    /// them, in stamp order, and those not stamped yet.
    stamped: VecDeque<(u64, IdleRun)>,
    unstamped: Vec<IdleRun>,
    report: PoolReport,
}

impl MappedPool {
    /// A pool that maps pages of `page` bytes, at most `chunk` bytes (whole pages) per device
    /// call, under address ranges of `range_size` bytes (whole pages), holding at most
    /// `max_reserved` bytes mapped, and returning chunks idle for `release_after` ticks (`None`:
    /// only when making room or cleaning up).
    pub fn new(
        name: String,
        page: u64,
        chunk: u64,
        range_size: u64,
        max_reserved: Option<u64>,
        release_after: Option<u64>,
    ) -> MappedPool {
        let page = page.max(1);
        let range_size = range_size.max(page).next_multiple_of(page);
        let chunk = chunk.max(page).next_multiple_of(page);
        let report = PoolReport::new(format!(
            "{name} mapped, pages {}, chunks {}, ranges {}",
            human_bytes(page),
            human_bytes(chunk),
            human_bytes(range_size)
        ));
        MappedPool {
            name,
            page,
            range_size,
            max_reserved,
            release_after,
            ranges: SlotMap::with_key(),
            free: FreeRanges::default(),
            max_chunk: (chunk / page).max(1) as usize,
            idle: VecDeque::new(),
            idled: 0,
            idle_bytes: 0,
            stamped: VecDeque::new(),
            unstamped: Vec::new(),
            report,
        }
    }

    /// The pages `[first, last]` that `len` bytes at `offset` touch.
    fn pages_of(&self, offset: u64, len: u64) -> std::ops::RangeInclusive<usize> {
        let first = offset / self.page;
        let last = (offset + len.max(1) - 1) / self.page;
        first as usize..=last as usize
    }

    /// Where `padded` bytes go ([`FreeRanges::best_place`]).
    fn place(&self, padded: u64) -> Option<Placement> {
        self.free.best_place(padded, |key, offset, limit| {
            self.unmapped_bytes(key, offset, padded, limit)
        })
    }

    /// Bytes that would have to be mapped to place `padded` bytes at `offset` of `key`;
    /// counting stops at `limit`.
    fn unmapped_bytes(&self, key: PageKey, offset: u64, padded: u64, limit: u64) -> u64 {
        let Some(range) = self.ranges.get(key) else {
            return 0;
        };
        let mut unmapped = 0;
        for page in &range.pages[self.pages_of(offset, padded)] {
            if !page.mapped {
                unmapped += self.page;
                if unmapped >= limit {
                    break;
                }
            }
        }
        unmapped
    }

    /// Takes `padded` bytes at `offset` of the free range at `start` of `key`, whose pages are
    /// mapped.
    fn take(&mut self, place: Placement, padded: u64, requested: u64) -> Option<Block> {
        let Placement { key, offset, .. } = place;
        let pages = self.pages_of(offset, padded);
        let range = self.ranges.get_mut(key)?;
        self.free.take(&mut range.free, place, padded)?;
        for index in pages {
            let page = &mut range.pages[index];
            page.users += 1;
            if page.users == 1 {
                let head = page.chunk;
                if let Some(chunk) = range.pages.get_mut(head).map(|page| &mut page.head)
                    && chunk.pages > 0
                {
                    if chunk.busy == 0 {
                        self.idle_bytes -= chunk.pages as u64 * self.page;
                    }
                    chunk.busy += 1;
                }
            }
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
        let pages = vec![Page::default(); (size / self.page) as usize];
        let key = self.ranges.insert_with_key(|key| AddressRange {
            storage,
            size,
            pages,
            mapped_chunks: 0,
            free: self.free.add_range(key, size),
            live: 0,
        });
        tracing::debug!(target: "gpuworld::memory", pool = %self.name, size, "address range reserved");
        Ok(key)
    }

    /// Maps every unmapped page of `len` bytes at `offset` of `key`: each run of unmapped
    /// neighbours in chunks of at most `max_chunk` pages, a device call each. On a refusal the
    /// chunks this call mapped are unmapped again: nothing is held for a request that failed.
    fn map(
        &mut self,
        backend: &mut dyn DeviceMemory,
        key: PageKey,
        offset: u64,
        len: u64,
    ) -> Result<(), AllocError> {
        let pages = self.pages_of(offset, len);
        let (page_size, max_chunk) = (self.page, self.max_chunk);
        let Some(range) = self.ranges.get_mut(key) else {
            return Ok(());
        };
        let mut chunks: Vec<(usize, usize)> = Vec::new();
        let mut index = *pages.start();
        while index <= *pages.end() {
            if range.pages[index].mapped {
                index += 1;
                continue;
            }
            let mut end = index;
            while end < *pages.end() && end + 1 - index < max_chunk && !range.pages[end + 1].mapped
            {
                end += 1;
            }
            let count = end - index + 1;
            if let Err(error) = backend.map_pages(
                range.storage,
                index as u64 * page_size,
                count as u64 * page_size,
            ) {
                for &(first, count) in &chunks {
                    // SAFETY: mapped by this call for a request that never got them: no work
                    // can use them.
                    unsafe {
                        backend.unmap_pages(
                            range.storage,
                            first as u64 * page_size,
                            count as u64 * page_size,
                        );
                    }
                    for page in &mut range.pages[first..first + count] {
                        page.mapped = false;
                    }
                    range.pages[first].head = Chunk::default();
                    range.mapped_chunks -= 1;
                }
                return Err(error);
            }
            chunks.push((index, count));
            range.pages[index].head = Chunk {
                pages: count,
                busy: 0,
                idle_since: 0,
            };
            range.mapped_chunks += 1;
            for page in &mut range.pages[index..=end] {
                page.mapped = true;
                page.chunk = index;
            }
            index = end + 1;
        }
        let mapped: usize = chunks.iter().map(|&(_, count)| count).sum();
        self.report.pages_added(mapped as u64, page_size);
        // Idle until `take` counts their users.
        self.idle_bytes += mapped as u64 * page_size;
        Ok(())
    }

    /// Unmaps the chunks of `run` still idle since its release, first pages first, until
    /// `at_least` bytes went back: their bytes, and the rest of the run where it stopped early.
    fn unmap_if_idle(
        &mut self,
        backend: &mut dyn DeviceMemory,
        run: IdleRun,
        at_least: u64,
    ) -> (u64, Option<IdleRun>) {
        let (key, first, last, since) = run;
        let Some(range) = self.ranges.get_mut(key) else {
            return (0, None);
        };
        let mut freed = 0;
        for head in first..=last.min(range.pages.len().saturating_sub(1)) {
            if freed >= at_least {
                return (freed, Some((key, head, last, since)));
            }
            let chunk = range.pages[head].head;
            if !chunk.idle_since_release(since) {
                continue;
            }
            range.pages[head].head = Chunk::default();
            range.mapped_chunks -= 1;
            for page in &mut range.pages[head..head + chunk.pages] {
                page.mapped = false;
            }
            let bytes = chunk.pages as u64 * self.page;
            // SAFETY: no page of the chunk has a live allocation, and the memory pool releases
            // an allocation only once the device is done with it: no work queued or running
            // uses it.
            unsafe { backend.unmap_pages(range.storage, head as u64 * self.page, bytes) };
            self.idle_bytes -= bytes;
            self.report.pages_removed(chunk.pages as u64, self.page);
            freed += bytes;
        }
        (freed, None)
    }

    /// Whether some chunk of `run` is still idle since its release.
    fn still_idle(ranges: &SlotMap<PageKey, AddressRange>, run: &IdleRun) -> bool {
        let &(key, first, last, since) = run;
        ranges.get(key).is_some_and(|range| {
            range.pages[first..=last.min(range.pages.len().saturating_sub(1))]
                .iter()
                .any(|page| page.head.idle_since_release(since))
        })
    }

    /// Drops stale idle runs once they outnumber idle pages four times over (idle pages reused
    /// leave their runs behind).
    fn drop_stale_runs(&mut self) {
        let idle_pages = (self.idle_bytes / self.page) as usize;
        if self.idle.len() <= 4 * idle_pages + 1024 {
            return;
        }
        let ranges = &self.ranges;
        self.idle.retain(|run| Self::still_idle(ranges, run));
    }

    /// Returns the address ranges with no live allocation (their pages are unmapped first).
    fn free_empty_ranges(&mut self, backend: &mut dyn DeviceMemory) {
        let empty: Vec<PageKey> = self
            .ranges
            .iter()
            .filter(|(_, range)| range.live == 0 && range.mapped_chunks == 0)
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

impl Pool for MappedPool {
    fn try_reserve(&mut self, padded: u64, requested: u64) -> Option<Block> {
        let place = self.place(padded).filter(|place| place.unmapped == 0)?;
        self.take(place, padded, requested)
    }

    fn can_place(&self, padded: u64) -> bool {
        self.place(padded).is_some_and(|place| place.unmapped == 0)
    }

    /// Maps the pages the best place lacks, in a new address range when no free range fits.
    fn grow(
        &mut self,
        backend: &mut dyn DeviceMemory,
        padded: u64,
        requested: u64,
    ) -> Result<Option<Block>, AllocError> {
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

    fn release(&mut self, block: &Block, requested: u64) -> Result<(), MemoryError> {
        let pages = self.pages_of(block.offset, block.len);
        let range = self
            .ranges
            .get_mut(block.page)
            .ok_or_else(|| stale_page(block.page))?;
        if block.offset + block.len > range.size || range.live == 0 {
            return Err(MemoryError::StaleHandle {
                what: format!("block {block:?} of {}", self.name).into(),
            });
        }
        // Merged with the free neighbours.
        self.free
            .give(&mut range.free, block.page, block.offset, block.len);
        range.live -= 1;
        let since = self.idled + 1;
        let mut idled: Option<(usize, usize)> = None;
        for index in pages {
            let page = &mut range.pages[index];
            page.users = page.users.saturating_sub(1);
            if page.users > 0 {
                continue;
            }
            let head = page.chunk;
            let Some(chunk) = (range.pages.get_mut(head).map(|page| &mut page.head))
                .filter(|chunk| chunk.pages > 0)
            else {
                continue;
            };
            chunk.busy = chunk.busy.saturating_sub(1);
            if chunk.busy == 0 {
                chunk.idle_since = since;
                self.idle_bytes += chunk.pages as u64 * self.page;
                idled = Some(idled.map_or((head, head), |(first, _)| (first, head)));
            }
        }
        if let Some((first, last)) = idled {
            self.idled = since;
            let run = (block.page, first, last, since);
            self.idle.push_back(run);
            if self.release_after.is_some() {
                self.unstamped.push(run);
            }
            self.drop_stale_runs();
        }
        self.report.released(requested);
        Ok(())
    }

    fn storage(&self, block: &Block) -> Option<StorageId> {
        self.ranges.get(block.page).map(|range| range.storage)
    }

    /// Unmaps every idle page and returns the address ranges left empty.
    fn cleanup(&mut self, backend: &mut dyn DeviceMemory) -> u64 {
        let freed = self.release_idle(backend, u64::MAX);
        self.free_empty_ranges(backend);
        freed
    }

    fn periodic_cleanup(&mut self, backend: &mut dyn DeviceMemory, tick: u64) -> u64 {
        let Some(after) = self.release_after else {
            return 0;
        };
        for run in std::mem::take(&mut self.unstamped) {
            self.stamped.push_back((tick, run));
        }
        let mut freed = 0;
        while let Some(&(stamp, run)) = self.stamped.front()
            && tick.saturating_sub(stamp) >= after
        {
            self.stamped.pop_front();
            freed += self.unmap_if_idle(backend, run, u64::MAX).0;
        }
        freed
    }

    /// Unmaps idle chunks, those idle the longest first.
    fn release_idle(&mut self, backend: &mut dyn DeviceMemory, at_least: u64) -> u64 {
        let mut freed = 0;
        while freed < at_least
            && self.idle_bytes > 0
            && let Some(run) = self.idle.pop_front()
        {
            let (bytes, rest) = self.unmap_if_idle(backend, run, at_least - freed);
            freed += bytes;
            if let Some(rest) = rest {
                self.idle.push_front(rest);
            }
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

    /// The page where head and tail meet, if they share one, gains a user; every page stays
    /// mapped.
    fn split(&mut self, block: &Block, at: u64) -> Option<Block> {
        if !block.cuts_at(at) {
            return None;
        }
        let (head, tail) = (
            self.pages_of(block.offset, at),
            self.pages_of(block.offset + at, block.len - at),
        );
        let range = self.ranges.get_mut(block.page)?;
        if block.offset + block.len > range.size || range.live == 0 {
            return None;
        }
        if head.end() == tail.start()
            && let Some(page) = range.pages.get_mut(*tail.start())
        {
            page.users += 1;
        }
        range.live += 1;
        self.report.reserved(0);
        Some(block.tail(at))
    }

    fn splits(&self, block: &Block) -> bool {
        self.ranges.contains_key(block.page)
    }

    /// The page where the two met, if they shared one, loses a user (the joined block still
    /// uses it).
    fn join(&mut self, first: &Block, second: &Block) -> Option<Block> {
        if !first.meets(second) {
            return None;
        }
        let (head, tail) = (
            self.pages_of(first.offset, first.len),
            self.pages_of(second.offset, second.len),
        );
        let range = self.ranges.get_mut(first.page)?;
        if second.offset + second.len > range.size || range.live < 2 {
            return None;
        }
        if head.end() == tail.start()
            && let Some(page) = range.pages.get_mut(*tail.start())
        {
            page.users = page.users.saturating_sub(1);
        }
        range.live -= 1;
        self.report.released(0);
        Some(first.joined(second))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device that maps pages under ranges it numbers, counting the pages mapped.
    #[derive(Default)]
    struct Pages {
        ranges: u64,
        mapped: u64,
        map_calls: u64,
    }

    impl DeviceMemory for Pages {
        fn allocate(&mut self, _size: u64) -> Result<StorageId, AllocError> {
            Err(AllocError::OutOfMemory)
        }
        unsafe fn deallocate(&mut self, _storage: StorageId) {}
        fn reserve_addresses(&mut self, _size: u64) -> Result<StorageId, AllocError> {
            self.ranges += 1;
            Ok(StorageId(self.ranges))
        }
        fn map_pages(
            &mut self,
            _storage: StorageId,
            _offset: u64,
            len: u64,
        ) -> Result<(), AllocError> {
            self.mapped += len;
            self.map_calls += 1;
            Ok(())
        }
        unsafe fn unmap_pages(&mut self, _storage: StorageId, _offset: u64, len: u64) {
            self.mapped -= len;
        }
        fn trim_pages(&mut self) {}
        unsafe fn free_addresses(&mut self, _storage: StorageId) {}
    }

    const PAGE: u64 = 4096;

    /// A pool of 4 KiB pages mapped one per call, in ranges of 1024 pages.
    fn pool() -> MappedPool {
        MappedPool::new("test".into(), PAGE, PAGE, 1024 * PAGE, None, None)
    }

    fn place(pool: &mut MappedPool, device: &mut Pages, len: u64) -> Block {
        match pool.try_reserve(len, len) {
            Some(block) => block,
            None => pool.grow(device, len, len).unwrap().expect("no cap"),
        }
    }

    #[test]
    fn a_hole_of_exactly_the_requests_size_is_reused_without_mapping() {
        let (mut pool, mut device) = (pool(), Pages::default());
        let blocks: Vec<Block> = (0..3)
            .map(|_| place(&mut pool, &mut device, 3 * PAGE))
            .collect();
        assert_eq!(device.mapped, 9 * PAGE);
        pool.release(&blocks[1], 3 * PAGE).unwrap();
        let calls = device.map_calls;
        let again = pool
            .try_reserve(3 * PAGE, 3 * PAGE)
            .expect("the hole fits it exactly");
        assert_eq!(again.offset, blocks[1].offset);
        assert_eq!((device.mapped, device.map_calls), (9 * PAGE, calls));
    }

    #[test]
    fn making_room_unmaps_what_is_asked_oldest_first_and_idle_runs_stay_few() {
        let (mut pool, mut device) = (pool(), Pages::default());
        let old = place(&mut pool, &mut device, 8 * PAGE);
        let _live = place(&mut pool, &mut device, PAGE);
        let new = place(&mut pool, &mut device, 8 * PAGE);
        pool.release(&old, 8 * PAGE).unwrap();
        pool.release(&new, 8 * PAGE).unwrap();
        assert_eq!(pool.release_idle(&mut device, 3 * PAGE), 3 * PAGE);
        assert_eq!(device.mapped, 14 * PAGE, "three pages of the oldest run");
        assert_eq!(pool.release_idle(&mut device, 6 * PAGE), 6 * PAGE);
        assert_eq!(
            device.mapped,
            8 * PAGE,
            "its five others, then one of the next"
        );
        // Released and reused a thousand times over: the runs left behind are dropped.
        for _ in 0..1000 {
            let block = place(&mut pool, &mut device, 4 * PAGE);
            pool.release(&block, 4 * PAGE).unwrap();
        }
        assert!(
            pool.idle.len() <= 4 * 16 + 1024 + 1,
            "{} runs",
            pool.idle.len()
        );
        assert_eq!(pool.cleanup(&mut device), 9 * PAGE - PAGE);
        assert_eq!(device.mapped, PAGE, "only the live page");
    }
}
