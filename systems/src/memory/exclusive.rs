//! Exclusive pool: one backend buffer per allocation, for backends (such as wgpu) that cannot
//! bind one buffer at several offsets. A free buffer is reused for the smallest fitting request
//! that wastes at most a fifth of it; free buffers go back to the device when the pool needs room
//! (`MemoryPool::make_room`), on cleanup, or after `release_after_ticks` where a pool sets it.

use crate::backend::{AllocError, StorageId};
use crate::error::MemoryError;
use crate::memory::idle::{IdleMark, IdlePage, IdlePages};
use crate::memory::pool::{DeviceMemory, Pool};
use crate::memory::report::{PoolReport, human_bytes};
use crate::memory::{Block, PageKey, stale_page};
use slotmap::SlotMap;
use std::collections::BTreeMap;

/// Which free buffers a request may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fit {
    /// Buffers of `L` bytes with `L - request <= L / 5`.
    WithinAFifth,
    /// Buffers of exactly the request's padded size.
    Exact,
}

#[derive(Debug)]
struct Buffer {
    storage: StorageId,
    size: u64,
    in_use: bool,
    /// The buffer under the release rule.
    idle: IdleMark,
    /// When the buffer last became free, in the pool's count of buffers that did: the oldest
    /// free buffers go back first when the pool makes room (`release_idle`).
    freed_at: u64,
}

impl IdlePage for Buffer {
    fn is_free(&self) -> bool {
        !self.in_use
    }

    fn idle_mark(&mut self) -> &mut IdleMark {
        &mut self.idle
    }
}

/// One backend buffer per allocation, reused by size.
#[derive(Debug)]
pub struct ExclusivePool {
    fit: Fit,
    max_reserved: Option<u64>,
    buffers: SlotMap<PageKey, Buffer>,
    free: BTreeMap<u64, Vec<PageKey>>,
    idle: IdlePages,
    /// Buffers that became free so far (see `Buffer::freed_at`).
    buffers_freed: u64,
    report: PoolReport,
}

impl ExclusivePool {
    /// An empty pool whose free buffers are reused under `fit`.
    pub fn new(
        name: String,
        fit: Fit,
        max_reserved: Option<u64>,
        release_after: Option<u64>,
    ) -> ExclusivePool {
        ExclusivePool {
            fit,
            max_reserved,
            buffers: SlotMap::with_key(),
            free: BTreeMap::new(),
            idle: IdlePages::new(release_after),
            buffers_freed: 0,
            report: PoolReport::new(name),
        }
    }

    /// An exclusive pool of the ladder taking requests up to `max_alloc` bytes.
    pub fn for_ladder(
        name: String,
        max_alloc: u64,
        max_reserved: Option<u64>,
        release_after: Option<u64>,
    ) -> ExclusivePool {
        let name = format!("{name} exclusive, allocs <= {}", human_bytes(max_alloc));
        ExclusivePool::new(name, Fit::WithinAFifth, max_reserved, release_after)
    }

    /// The largest free buffer a request of `padded` bytes may take.
    fn largest_fit(&self, padded: u64) -> u64 {
        match self.fit {
            // L - p <= L / 5  <=>  4L <= 5p
            Fit::WithinAFifth => crate::memory::largest_fit(padded),
            Fit::Exact => padded,
        }
    }

    /// The size of the smallest free buffer that fits `padded` bytes.
    fn smallest_fitting(&self, padded: u64) -> Option<u64> {
        let largest = self.largest_fit(padded);
        self.free
            .range(padded..=largest)
            .next()
            .map(|(&size, _)| size)
    }

    fn take(&mut self, key: PageKey, requested: u64) -> Option<Block> {
        let buffer = self.buffers.get_mut(key)?;
        buffer.in_use = true;
        buffer.idle.reused();
        self.report.reserved(requested);
        Some(Block {
            page: key,
            storage: buffer.storage,
            offset: 0,
            len: buffer.size,
            pool: 0,
        })
    }

    /// Takes the free buffer `key` of `size` bytes off the free list.
    fn unlist_free(&mut self, key: PageKey, size: u64) {
        if let Some(keys) = self.free.get_mut(&size) {
            keys.retain(|&k| k != key);
            if keys.is_empty() {
                self.free.remove(&size);
            }
        }
    }

    fn remove(&mut self, backend: &mut dyn DeviceMemory, key: PageKey) -> u64 {
        let Some(buffer) = self.buffers.remove(key) else {
            return 0;
        };
        // SAFETY: the pool allocated the buffer and drops it from its list here; it removes only
        // free buffers, and an allocation returns to the pool only once the GC stage has seen
        // the work that used it finish.
        unsafe { backend.deallocate(buffer.storage) };
        self.report.page_removed(buffer.size);
        buffer.size
    }

    /// Whether a free buffer of exactly `padded` bytes waits.
    pub fn has_free_of_size(&self, padded: u64) -> bool {
        self.free.contains_key(&padded)
    }
}

impl Pool for ExclusivePool {
    /// Takes a free buffer that fits `padded` bytes, the smallest first.
    fn try_reserve(&mut self, padded: u64, requested: u64) -> Option<Block> {
        let size = self.smallest_fitting(padded)?;
        let keys = self.free.get_mut(&size)?;
        let key = keys.pop()?;
        if keys.is_empty() {
            self.free.remove(&size);
        }
        self.take(key, requested)
    }

    /// Whether [`Pool::try_reserve`] would find a free buffer for `padded` bytes.
    fn can_place(&self, padded: u64) -> bool {
        self.smallest_fitting(padded).is_some()
    }

    /// Allocates a buffer of exactly `padded` bytes; `Ok(None)` when the cap leaves no room.
    fn grow(
        &mut self,
        backend: &mut dyn DeviceMemory,
        padded: u64,
        requested: u64,
    ) -> Result<Option<Block>, AllocError> {
        if let Some(cap) = self.max_reserved
            && self.report.bytes_reserved.saturating_add(padded) > cap
        {
            return Ok(None);
        }
        let storage = backend.allocate(padded)?;
        let key = self.buffers.insert(Buffer {
            storage,
            size: padded,
            in_use: false,
            idle: IdleMark::default(),
            freed_at: 0,
        });
        self.report.page_added(padded);
        tracing::debug!(target: "gpuworld::memory", pool = %self.report.name, size = padded, %storage, "buffer allocated");
        Ok(self.take(key, requested))
    }

    /// Makes the buffer `key` free for reuse.
    fn release(&mut self, block: &Block, requested: u64) -> Result<(), MemoryError> {
        let key = block.page;
        let buffer = self
            .buffers
            .get_mut(key)
            .filter(|buffer| buffer.in_use)
            .ok_or_else(|| stale_page(key))?;
        buffer.in_use = false;
        self.buffers_freed += 1;
        buffer.freed_at = self.buffers_freed;
        self.free.entry(buffer.size).or_default().push(key);
        self.report.released(requested);
        self.idle.became_free(key, &mut buffer.idle);
        Ok(())
    }

    /// Returns free buffers to the device, those free the longest first, until at least
    /// `at_least` bytes went back or none is left; the bytes returned.
    fn release_idle(&mut self, backend: &mut dyn DeviceMemory, at_least: u64) -> u64 {
        let mut idle: Vec<(u64, PageKey)> = self
            .free
            .values()
            .flatten()
            .filter_map(|&key| Some((self.buffers.get(key)?.freed_at, key)))
            .collect();
        idle.sort_unstable();
        let mut freed = 0;
        for (_, key) in idle {
            if freed >= at_least {
                break;
            }
            let Some(size) = self.buffers.get(key).map(|buffer| buffer.size) else {
                continue;
            };
            self.unlist_free(key, size);
            freed += self.remove(backend, key);
        }
        freed
    }

    /// The backend buffer of `key`.
    fn storage(&self, block: &Block) -> Option<StorageId> {
        self.buffers.get(block.page).map(|buffer| buffer.storage)
    }

    /// Returns every free buffer to the device; the bytes returned.
    fn cleanup(&mut self, backend: &mut dyn DeviceMemory) -> u64 {
        let free: Vec<PageKey> = std::mem::take(&mut self.free)
            .into_values()
            .flatten()
            .collect();
        let mut freed = 0;
        for key in free {
            freed += self.remove(backend, key);
        }
        freed
    }

    /// Stamps buffers that became free since the last call and returns those free for
    /// `release_after_ticks`; the bytes returned.
    fn periodic_cleanup(&mut self, backend: &mut dyn DeviceMemory, tick: u64) -> u64 {
        let mut freed = 0;
        for key in self.idle.take_expired(tick, &mut self.buffers) {
            let Some(buffer) = self.buffers.get(key) else {
                continue;
            };
            let size = buffer.size;
            self.unlist_free(key, size);
            freed += self.remove(backend, key);
        }
        freed
    }

    /// Free buffers waiting for reuse.
    fn free_blocks(&self) -> usize {
        self.free.values().map(Vec::len).sum()
    }

    fn report(&self) -> &PoolReport {
        &self.report
    }

    fn report_mut(&mut self) -> &mut PoolReport {
        &mut self.report
    }
}
