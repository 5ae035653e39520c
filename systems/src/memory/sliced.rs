//! Sliced pool: backend buffers ("pages") split into slices at aligned offsets. A request takes
//! the first free range that fits, first page first (creation order), lowest offset first; a
//! released slice merges with its free neighbours; a fully free page can go back to the device.

use crate::backend::{AllocError, StorageId};
use crate::error::MemoryError;
use crate::memory::idle::{IdleMark, IdlePage, IdlePages};
use crate::memory::pool::{DeviceMemory, Pool};
use crate::memory::report::{PoolReport, human_bytes};
use crate::memory::{Block, PageKey, stale_page};
use slotmap::SlotMap;

/// A new shared page holds at least this fraction of the shared pages already held (see
/// `SlicedPool::next_shared_page`). Each page used to be as large as all of them, up to the full
/// page: on the trace family of `benches/alloc_traces.rs` (cpu, scale 32, seeds 1-5), where a
/// 64 MiB page is a large part of what is live, that gave peak reserved / peak in use of
/// 1.32-1.47 on the training shape and up to 1.21 on the mixes; a 16th gave 1.06-1.15, a 32nd
/// 1.01-1.11 on every shape, a 64th no better.
const SHARED_GROWTH_DIVISOR: u64 = 32;

/// By default a page of its own is reused by a later request only if that request wastes at
/// most an eighth of it (`CachePolicy::fit_divisor`), and a growing buffer gets an eighth more
/// room (`SlicedPool::dedicated_page`). Idle memory stays cached up to the recent peak in use
/// (`budget.rs`), so a loose fit carries its waste into the peak: on the trace family of
/// `benches/alloc_traces.rs` a fifth gave peak reserved / peak in use up to 1.021 on the training
/// shape at scale 1 and 1.055 on the log-uniform one, an eighth 1.008 and 1.031, a sixteenth
/// 1.008 and 1.011 with 30% more device allocations on the log-uniform shape.
const DEDICATED_FIT_DIVISOR: u64 = 8;

/// The largest page of its own a request of `padded` bytes may take: one it wastes at most a
/// `divisor`th of (at least 2).
fn largest_dedicated_fit(padded: u64, divisor: u64) -> u64 {
    let divisor = divisor.max(2);
    // len - padded <= len / d  <=>  (d - 1) len <= d padded
    padded.saturating_mul(divisor) / (divisor - 1)
}

/// A request at most this fraction larger than an idle page of its own is taken for a growing
/// buffer (see `SlicedPool::dedicated_page`): a 64th. A seventh also took the batch changes of
/// the training shape for growth and raised its peak reserved / peak in use at scale 1 from 1.008
/// to 1.070.
const GROWTH_DIVISOR: u64 = 64;

#[derive(Debug)]
struct Page {
    storage: StorageId,
    size: u64,
    /// Free ranges `(offset, len)`, sorted by offset; neighbours are always merged.
    free: Vec<(u64, u64)>,
    /// Bytes of live slices.
    used: u64,
    /// Index of the page's summary in `SlicedPool::order`.
    position: usize,
    /// The page under the release rule.
    idle: IdleMark,
    /// Made for one request over `max_slice`.
    dedicated: bool,
    /// When the page last became fully free, in the pool's count of pages that did: the oldest
    /// idle pages go back first when the pool makes room (`release_idle`).
    freed_at: u64,
}

impl IdlePage for Page {
    fn is_free(&self) -> bool {
        self.used == 0
    }

    fn idle_mark(&mut self) -> &mut IdleMark {
        &mut self.idle
    }
}

/// What first-fit needs to skip a page without touching it.
#[derive(Debug, Clone, Copy)]
struct PageSummary {
    key: PageKey,
    largest_free: u64,
    size: u64,
    dedicated: bool,
}

impl PageSummary {
    /// A page accepts a request only if it has room and the request wastes at most an eighth of
    /// it: shared pages split off what a slice does not use, so only a page of its own (made for
    /// one oversized request) can be wasted, by a request much smaller than it.
    fn accepts(&self, padded: u64, fit_divisor: u64) -> bool {
        self.largest_free >= padded
            && (!self.dedicated || self.size <= largest_dedicated_fit(padded, fit_divisor))
    }
}

/// The page sizes of a sliced pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageSizes {
    /// A full page.
    pub full: u64,
    /// The first shared page; new ones are as large as those held, up to `full`.
    pub first: u64,
    /// Every page size is a multiple of it (the device alignment).
    pub alignment: u64,
}

/// Pages of one size split into slices; oversized requests get pages of their own.
#[derive(Debug)]
pub struct SlicedPool {
    page_size: u64,
    first_page: u64,
    alignment: u64,
    max_slice: u64,
    max_reserved: Option<u64>,
    pages: SlotMap<PageKey, Page>,
    /// Bytes of shared (not dedicated) pages: new shared pages grow with it.
    shared_reserved: u64,
    order: Vec<PageSummary>,
    /// No page before this position in `order` has free bytes: first fit starts here, so a
    /// pool of many full pages is not scanned from its start on every request.
    first_free: usize,
    idle: IdlePages,
    /// Pages that became fully free so far (see `Page::freed_at`).
    pages_freed: u64,
    /// Sizes of the pages of their own returned to the device since the pool last grew: evidence
    /// of growth that `MemoryPool::make_room` may have just returned (`dedicated_page`).
    returned_dedicated: Vec<u64>,
    report: PoolReport,
    /// Pages of their own are reused by requests that waste at most this fraction of them
    /// (`CachePolicy::fit_divisor`).
    fit_divisor: u64,
}

impl SlicedPool {
    /// Tells the pool, before it grows, that the live `block` is parked by a stream and is the
    /// longest parked block shorter than the request: evidence for `dedicated_page`, which
    /// takes it as it takes a page of that size just returned (room only if the page is just
    /// smaller than the request).
    pub fn parked_growth(&mut self, block: &Block) {
        if let Some(page) = self.pages.get(block.page)
            && page.dedicated
        {
            self.returned_dedicated.push(page.size);
        }
    }

    /// An empty pool of `pages` holding slices up to `max_slice` bytes, whose pages of their own
    /// are reused by requests that waste at most a `fit_divisor`th of them.
    pub fn new(
        name: String,
        pages: PageSizes,
        max_slice: u64,
        max_reserved: Option<u64>,
        release_after: Option<u64>,
        fit_divisor: u64,
    ) -> SlicedPool {
        let alignment = pages.alignment.max(1);
        let page_size = pages.full.max(alignment).next_multiple_of(alignment);
        let first_page = pages
            .first
            .clamp(alignment, page_size)
            .next_multiple_of(alignment);
        let sizes = if first_page == page_size {
            format!("{} pages", human_bytes(page_size))
        } else {
            format!(
                "pages {}..{}",
                human_bytes(first_page),
                human_bytes(page_size)
            )
        };
        let name = format!(
            "{name} sliced, {sizes}, slices <= {}",
            human_bytes(max_slice)
        );
        SlicedPool {
            page_size,
            first_page,
            alignment,
            max_slice,
            max_reserved,
            pages: SlotMap::with_key(),
            shared_reserved: 0,
            order: Vec::new(),
            first_free: 0,
            idle: IdlePages::new(release_after),
            pages_freed: 0,
            returned_dedicated: Vec::new(),
            report: PoolReport::new(name),
            fit_divisor: fit_divisor.max(2),
        }
    }

    /// The first page, in first-fit order, that accepts `padded` bytes.
    fn first_accepting(&self, padded: u64) -> Option<usize> {
        let start = self.first_free.min(self.order.len());
        let fit = self.fit_divisor;
        Some(
            start
                + self.order[start..]
                    .iter()
                    .position(|s| s.accepts(padded, fit))?,
        )
    }

    /// The size of a new shared page for a request of `padded` bytes: a 32nd of the bytes the
    /// pool's shared pages already hold, at least the request (twice it when it would not fill the
    /// page exactly), in multiples of the first page, up to the full page size. A page added for
    /// one request is thus never a large part of what the pool holds (a busy pool reaches full
    /// pages once it holds 32 of them).
    /// Under a cap, the page shrinks to the room left (what cubecl does with a cap smaller than
    /// its page), so a pool capped below its page size still serves requests up to the cap.
    fn next_shared_page(&self, padded: u64) -> u64 {
        let room = self.max_reserved.map_or(u64::MAX, |cap| {
            cap.saturating_sub(self.report.bytes_reserved) / self.alignment * self.alignment
        });
        let pages = |bytes: u64| {
            bytes
                .checked_next_multiple_of(self.first_page)
                .unwrap_or(u64::MAX)
        };
        let grown = pages((self.shared_reserved / SHARED_GROWTH_DIVISOR).max(padded));
        // A page the request does not fill gets room for a second one of its size: the tail
        // behind a lone request is otherwise left to smaller requests, which may never come.
        let size = if grown % padded.max(1) != 0 && grown < padded.saturating_mul(2) {
            pages(padded.saturating_mul(2))
        } else {
            grown
        };
        size.min(self.page_size).min(room).max(padded)
    }

    /// The size of a new page of its own for `padded` bytes: the request, or an eighth more when a
    /// page of its own at most a [`GROWTH_DIVISOR`]th smaller than it is idle or was just
    /// returned to the device, the mark of a buffer that grows a little each step (attention scores over a growing context: on the KV
    /// shape of `benches/alloc_traces.rs` at scale 1 every step asked the device for a new page,
    /// 3,486 in five replays; with the room 318). Up to the full page size, so never past the
    /// device's largest buffer. Linear in the pages held, as the other paths that grow.
    fn dedicated_page(&self, padded: u64) -> u64 {
        let just_smaller =
            |size: u64| size < padded && size.saturating_add(size / GROWTH_DIVISOR) >= padded;
        let growing = self
            .pages
            .values()
            .any(|page| page.dedicated && page.used == 0 && just_smaller(page.size))
            || self
                .returned_dedicated
                .iter()
                .any(|&size| just_smaller(size));
        let roomy =
            largest_dedicated_fit(padded, DEDICATED_FIT_DIVISOR) / self.alignment * self.alignment;
        if growing && roomy <= self.page_size {
            roomy.max(padded)
        } else {
            padded
        }
    }

    /// Returns the free pages smaller than a full page to the device: once the pool needs full
    /// pages, the small ones it grew through only fragment it (measured on the training trace of
    /// `benches/memory.rs`: peak reserved over peak in use 1.096 while they were kept and
    /// filled first, 1.041 returned and filled after the full pages held, 1.039 with full pages
    /// only; 1.093 when even a new full page came before them).
    fn return_outgrown_pages(&mut self, backend: &mut dyn DeviceMemory) {
        let outgrown: Vec<PageKey> = self
            .pages
            .iter()
            .filter(|(_, page)| !page.dedicated && page.used == 0 && page.size < self.page_size)
            .map(|(key, _)| key)
            .collect();
        self.remove_pages(backend, outgrown);
    }

    /// Puts the full pages held before the small ones in first-fit order (a new full page still
    /// comes last), so that the small ones drain.
    fn prefer_full_pages(&mut self) {
        let page_size = self.page_size;
        self.order
            .sort_by_key(|summary| !summary.dedicated && summary.size < page_size);
        for (position, summary) in self.order.iter().enumerate() {
            if let Some(page) = self.pages.get_mut(summary.key) {
                page.position = position;
            }
        }
        self.first_free = 0;
    }

    fn take(&mut self, position: usize, padded: u64, requested: u64) -> Option<Block> {
        let summary = self.order.get_mut(position)?;
        let page = self.pages.get_mut(summary.key)?;
        let index = page.free.iter().position(|&(_, len)| len >= padded)?;
        let (offset, len) = page.free[index];
        if len == padded {
            page.free.remove(index);
        } else {
            page.free[index] = (offset + padded, len - padded);
        }
        if len == summary.largest_free {
            summary.largest_free = page.free.iter().map(|&(_, len)| len).max().unwrap_or(0);
        }
        page.used += padded;
        page.idle.reused();
        let block = Block {
            page: summary.key,
            storage: page.storage,
            offset,
            len: padded,
            pool: 0,
        };
        if position == self.first_free && self.order[position].largest_free == 0 {
            self.first_free = position + 1;
        }
        self.report.reserved(requested);
        Some(block)
    }

    fn remove_pages(&mut self, backend: &mut dyn DeviceMemory, keys: Vec<PageKey>) -> u64 {
        if keys.is_empty() {
            return 0;
        }
        let mut freed = 0;
        for key in keys {
            if let Some(page) = self.pages.remove(key) {
                if page.dedicated {
                    self.returned_dedicated.push(page.size);
                } else {
                    self.shared_reserved -= page.size;
                }
                // SAFETY: the pool allocated the page and drops it from its list here; it removes
                // only pages without a live or parked slice (`used == 0`), and a slice returns to
                // the pool only once the GC stage has seen the work that used it finish.
                unsafe { backend.deallocate(page.storage) };
                self.report.page_removed(page.size);
                freed += page.size;
            }
        }
        let pages = &mut self.pages;
        self.order.retain(|summary| pages.contains_key(summary.key));
        for (position, summary) in self.order.iter().enumerate() {
            if let Some(page) = pages.get_mut(summary.key) {
                page.position = position;
            }
        }
        self.first_free = 0;
        freed
    }
}

impl Pool for SlicedPool {
    /// Places `padded` bytes in a free range of an existing page, if one accepts them.
    fn try_reserve(&mut self, padded: u64, requested: u64) -> Option<Block> {
        let position = self.first_accepting(padded)?;
        self.take(position, padded, requested)
    }

    /// Whether [`Pool::try_reserve`] would place `padded` bytes without a new page.
    fn can_place(&self, padded: u64) -> bool {
        self.first_accepting(padded).is_some()
    }

    /// Allocates a new page and places `padded` bytes at its start; `Ok(None)` when the pool's
    /// cap leaves no room for another page.
    fn grow(
        &mut self,
        backend: &mut dyn DeviceMemory,
        padded: u64,
        requested: u64,
    ) -> Result<Option<Block>, AllocError> {
        let dedicated = padded > self.max_slice;
        let mut size = if dedicated {
            self.dedicated_page(padded)
        } else {
            self.next_shared_page(padded)
        };
        if !dedicated && size == self.page_size {
            self.return_outgrown_pages(backend);
            self.prefer_full_pages();
        }
        let fits_cap = |size: u64| {
            self.max_reserved
                .is_none_or(|cap| self.report.bytes_reserved.saturating_add(size) <= cap)
        };
        if dedicated && !fits_cap(size) {
            // Room to grow is a bonus: never the reason a capped pool refuses a request.
            size = padded;
        }
        if !fits_cap(size) {
            return Ok(None);
        }
        let storage = match backend.allocate(size) {
            // Likewise when the device refuses the roomier page.
            Err(AllocError::OutOfMemory) if size > padded && dedicated => {
                size = padded;
                backend.allocate(size)?
            }
            allocated => allocated?,
        };
        self.returned_dedicated.clear();
        let position = self.order.len();
        let key = self.pages.insert(Page {
            storage,
            size,
            free: vec![(0, size)],
            used: 0,
            position,
            idle: IdleMark::default(),
            dedicated,
            freed_at: 0,
        });
        if !dedicated {
            self.shared_reserved += size;
        }
        self.order.push(PageSummary {
            key,
            largest_free: size,
            size,
            dedicated,
        });
        self.report.page_added(size);
        tracing::debug!(target: "gpuworld::memory", pool = %self.report.name, size, %storage, "page allocated");
        let position = self.pages.get(key).map_or(position, |page| page.position);
        Ok(self.take(position, padded, requested))
    }

    /// Frees the slice at `offset..offset + len` of `page`, merging it with free neighbours.
    fn release(&mut self, block: &Block, requested: u64) -> Result<(), MemoryError> {
        let (key, offset, len) = (block.page, block.offset, block.len);
        let page = self.pages.get_mut(key).ok_or_else(|| stale_page(key))?;
        let index = page.free.partition_point(|&(o, _)| o < offset);
        let joins_next = page
            .free
            .get(index)
            .is_some_and(|&(next, _)| next == offset + len);
        let joins_previous = index
            .checked_sub(1)
            .and_then(|i| page.free.get(i))
            .is_some_and(|&(o, l)| o + l == offset);
        let merged = match (joins_previous, joins_next) {
            (true, true) => {
                let (_, next_len) = page.free.remove(index);
                page.free[index - 1].1 += len + next_len;
                page.free[index - 1].1
            }
            (true, false) => {
                page.free[index - 1].1 += len;
                page.free[index - 1].1
            }
            (false, true) => {
                let next_len = page.free[index].1;
                page.free[index] = (offset, len + next_len);
                len + next_len
            }
            (false, false) => {
                page.free.insert(index, (offset, len));
                len
            }
        };
        page.used -= len;
        if let Some(summary) = self.order.get_mut(page.position) {
            summary.largest_free = summary.largest_free.max(merged);
        }
        self.first_free = self.first_free.min(page.position);
        self.report.released(requested);
        if page.used == 0 {
            self.pages_freed += 1;
            page.freed_at = self.pages_freed;
            self.idle.became_free(key, &mut page.idle);
        }
        Ok(())
    }

    /// Returns fully free pages to the device, those free the longest first, until at least
    /// `at_least` bytes went back or none is left; the bytes returned.
    fn release_idle(&mut self, backend: &mut dyn DeviceMemory, at_least: u64) -> u64 {
        let mut idle: Vec<(u64, u64, PageKey)> = self
            .pages
            .iter()
            .filter(|(_, page)| page.used == 0)
            .map(|(key, page)| (page.freed_at, page.size, key))
            .collect();
        idle.sort_unstable();
        let mut chosen = Vec::new();
        let mut bytes = 0;
        for (_, size, key) in idle {
            if bytes >= at_least {
                break;
            }
            bytes += size;
            chosen.push(key);
        }
        self.remove_pages(backend, chosen)
    }

    /// The backend buffer of `page`.
    fn storage(&self, block: &Block) -> Option<StorageId> {
        self.pages.get(block.page).map(|page| page.storage)
    }

    /// Returns every fully free page to the device; the bytes returned.
    fn cleanup(&mut self, backend: &mut dyn DeviceMemory) -> u64 {
        let free: Vec<PageKey> = self
            .pages
            .iter()
            .filter(|(_, page)| page.used == 0)
            .map(|(key, _)| key)
            .collect();
        self.remove_pages(backend, free)
    }

    /// Stamps pages that became free since the last call and returns those free for
    /// `release_after_ticks`; the bytes returned.
    fn periodic_cleanup(&mut self, backend: &mut dyn DeviceMemory, tick: u64) -> u64 {
        let expired = self.idle.take_expired(tick, &mut self.pages);
        self.remove_pages(backend, expired)
    }

    /// Free ranges across all pages.
    fn free_blocks(&self) -> usize {
        self.pages.values().map(|page| page.free.len()).sum()
    }

    fn report(&self) -> &PoolReport {
        &self.report
    }

    fn report_mut(&mut self) -> &mut PoolReport {
        &mut self.report
    }

    /// A page keeps no record of its live slices, only of its free ranges: the tail is live
    /// bytes of the same page.
    fn split(&mut self, block: &Block, at: u64) -> Option<Block> {
        if !block.cuts_at(at) || !self.splits(block) {
            return None;
        }
        self.report.reserved(0);
        Some(block.tail(at))
    }

    /// Shared pages only: a page of its own is reused whole.
    fn splits(&self, block: &Block) -> bool {
        self.pages
            .get(block.page)
            .is_some_and(|page| !page.dedicated)
    }

    fn join(&mut self, first: &Block, second: &Block) -> Option<Block> {
        if !first.meets(second) || !self.pages.contains_key(first.page) {
            return None;
        }
        self.report.released(0);
        Some(first.joined(second))
    }
}
