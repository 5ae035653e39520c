//! Device memory: `MemoryPool`, the resource the tick stages reserve from (ingest) and release
//! to (GC), over a ladder of sliced and exclusive pools plus a persistent pool. Slices and pages
//! are generational keys, so a stale key is an error, never another buffer.
// The pools' API is used by the runtime and, with `internals`, by tests and benches: without
// that feature parts of it are used by neither.
#![cfg_attr(not(feature = "internals"), allow(dead_code))]

mod block;
mod budget;
mod compacting;
mod config;
mod exclusive;
mod free_ranges;
mod idle;
mod ladder;
/// Tensor layouts: [`TensorLayout`] and [`TensorPlacement`] are public here; the placement and
/// copy functions the client uses are documented only with the `internals` feature.
#[cfg_attr(not(feature = "internals"), doc(hidden))]
pub mod layout;
mod mapped;
mod mapped_runs;
mod mode;
mod parked;
mod parking;
mod persistent;
mod pool;
mod report;
mod reserve;
mod sliced;

pub use crate::usage::MemoryUsage;
pub use block::{Block, PageKey, SliceKey};
pub(crate) use block::{largest_fit, stale_page};
pub use config::{CachePolicy, DEFAULT_RELEASE_AFTER_TICKS, MemoryConfig, PoolConfig, PoolKind};
pub use layout::{TensorLayout, TensorPlacement};
pub use mode::AllocationMode;
pub use report::PoolReport;
// The pools themselves: public only with the `internals` feature (no stability promise).
#[cfg(feature = "internals")]
pub use compacting::CompactingPool;
#[cfg(not(feature = "internals"))]
pub(crate) use compacting::CompactingPool;
#[cfg(not(feature = "internals"))]
pub(crate) use exclusive::ExclusivePool;
#[cfg(feature = "internals")]
pub use exclusive::{ExclusivePool, Fit};
#[cfg(feature = "internals")]
pub use ladder::{Ladder, Rung};
#[cfg(not(feature = "internals"))]
pub(crate) use ladder::{Ladder, Rung};
#[cfg(feature = "internals")]
pub use mapped::MappedPool;
#[cfg(not(feature = "internals"))]
pub(crate) use mapped::MappedPool;
#[cfg(feature = "internals")]
pub use mapped_runs::MappedRunsPool;
#[cfg(not(feature = "internals"))]
pub(crate) use mapped_runs::MappedRunsPool;
#[cfg(feature = "internals")]
pub use mode::AllocationModes;
#[cfg(not(feature = "internals"))]
pub(crate) use mode::AllocationModes;
#[cfg(feature = "internals")]
pub use pool::{Compacts, DeviceMemory, Movable, Pool, PoolIndex};
#[cfg(not(feature = "internals"))]
pub(crate) use pool::{Movable, Pool, PoolIndex};
#[cfg(feature = "internals")]
pub use sliced::{PageSizes, SlicedPool};
#[cfg(not(feature = "internals"))]
pub(crate) use sliced::{PageSizes, SlicedPool};

use crate::backend::{AllocError, Backend, DeviceProperties, Region};
use crate::error::MemoryError;
use crate::ids::StreamId;
use bevy_ecs::entity::Entity;
use bevy_ecs::resource::Resource;
use budget::RecentPeak;
use parked::ParkedSlices;
use rustc_hash::FxHashMap;
use slotmap::{SlotMap, new_key_type};
use std::fmt::Write;

new_key_type! {
    /// The slices one stream parked between two GC stages (`MemoryPool::seal_parking`).
    struct GroupKey;
}

/// Slices one stream parked between two GC stages. Their memory joins and splits freely within
/// the stream, so which handle's release frees which byte is lost: the group's memory returns to
/// its pool once every handle parked in it was released by the GC stage.
#[derive(Debug)]
struct ParkGroup {
    stream: Entity,
    /// Handles parked in it whose release the GC stage has not reached yet.
    pending: u32,
    /// Handles parked in it.
    handles: u64,
    /// A cleanup waits for the memory of one of its handles.
    awaited: bool,
}

/// What [`MemoryPool::release_parked`] returned to the pools.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(not(feature = "internals"), doc(hidden))]
pub struct ParkedReturn {
    /// Handles whose memory went back now: every handle of the group, once its last one was
    /// released; none while the group waits, or when its stream took all of its memory.
    pub handles: u64,
    /// Whether a cleanup waited for the memory of one of those handles.
    pub awaited: bool,
}

/// Parked blocks a request tries, shortest first, for one it may take whole or split.
const PARKED_TRIED: usize = 8;

/// Ticks in a row a request may wait for parked memory rather than take the pools past their
/// budget (`MemoryPool::waits_for_parked`).
const PARKED_WAITS: u32 = 256;
/// How long, at most, a request waits for parked memory (`MemoryPool::waits_for_parked`).
const PARKED_WAIT: std::time::Duration = std::time::Duration::from_millis(2);

/// A reserved allocation: its key and the device bytes it may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "internals"), doc(hidden))]
pub struct Reservation {
    /// The key to release it with.
    pub slice: SliceKey,
    /// The requested bytes inside the backend buffer.
    pub region: Region,
    /// The memory was parked by the allocating stream: work of that stream submitted earlier may
    /// still use it, so the new allocation inherits that stream's use.
    pub parked_by_stream: bool,
}

/// A live slice a compaction moved to make room for a request: its whole block (padding
/// included) goes from `from` to `to`, and where `copied` its bytes must be copied there on the
/// device, after every earlier use and before any later one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "internals"), doc(hidden))]
pub struct Moved {
    /// The slice, whose key stays.
    pub slice: SliceKey,
    /// Its old block.
    pub from: Region,
    /// Its new block.
    pub to: Region,
    /// Whether work wrote its bytes (`Movable::Copied`).
    pub copied: bool,
}

/// Where a ladder block lies: its pool's position, its page, its offset.
type Place = (usize, PageKey, u64);

/// A block a compaction moved (old, new) and, if a slice holds it, that slice and what it let
/// happen.
type MovedBlock = (Block, Block, Option<(SliceKey, Movable)>);

/// How a request may make room by moving live slices ([`MemoryPool::reserve_moving`]).
#[allow(missing_debug_implementations, reason = "it holds a closure")]
#[cfg_attr(not(feature = "internals"), doc(hidden))]
pub struct Compaction<'a> {
    /// What each live slice allows.
    pub movable: &'a mut dyn FnMut(SliceKey) -> Movable,
    /// The slices moved, appended to.
    pub moves: &'a mut Vec<Moved>,
    /// The allocating stream's entity, if any: memory parked for it is free to the request
    /// (`Movable::Reusable`).
    pub stream: Option<Entity>,
}

#[derive(Debug)]
struct SliceRecord {
    pool: PoolIndex,
    block: Block,
    requested: u64,
    /// The stream whose later allocations may take the slice (see `parked.rs`).
    parked_on: Option<Entity>,
    /// The parking group of a parked slice.
    group: Option<GroupKey>,
}

/// The memory of a runtime: the pool ladder, the persistent pool, every live slice, usage, and
/// each stream's allocation mode.
#[derive(Debug, Resource)]
#[cfg_attr(not(feature = "internals"), doc(hidden))]
pub struct MemoryPool {
    alignment: u64,
    /// Largest request the device can hold in one buffer (`DeviceProperties::max_buffer_bytes`).
    max_buffer: Option<u64>,
    /// The memory the runtime may use on the device, for out-of-memory errors.
    capacity: Option<u64>,
    ladder: Ladder,
    persistent: ExclusivePool,
    slices: SlotMap<SliceKey, SliceRecord>,
    usage: MemoryUsage,
    peak_in_use: u64,
    peak_reserved: u64,
    modes: AllocationModes,
    parked: ParkedSlices,
    /// Parking groups, and each stream's open one (of this tick).
    groups: SlotMap<GroupKey, ParkGroup>,
    open_groups: Vec<(Entity, GroupKey)>,
    /// Bytes parked since the groups were last sealed.
    parked_open: u64,
    /// Calls in a row `waits_for_parked` said wait, and when the first was.
    parked_waits: u32,
    parked_wait_since: Option<std::time::Instant>,
    /// The group of each parked handle's key, until the GC stage releases the handle.
    owed: FxHashMap<SliceKey, GroupKey>,
    /// The most in use over recent allocations: what idle memory is kept for (`budget.rs`).
    recent_peak: RecentPeak,
    /// A client asked for a cleanup, which the GC stage of this tick runs.
    cleanup_requested: bool,
    /// Compactions may empty whole pages and return them once the copies reading them were
    /// submitted: the device keeps a buffer that submitted work uses
    /// (`DeviceProperties::slow_buffers`, wgpu).
    evacuates: bool,
}

impl MemoryPool {
    /// The pools `config` asks for on `device`.
    pub fn new(device: &DeviceProperties, config: &MemoryConfig) -> MemoryPool {
        let pools = config.resolve(device);
        let cache = config.cache.checked();
        let ladder = pools
            .iter()
            .enumerate()
            .map(|(index, pool)| {
                let made = Rung::new(format!("pool {index}"), pool, device, cache.fit_divisor);
                (pool.max_alloc, made)
            })
            .collect();
        MemoryPool {
            alignment: device.alignment.max(1),
            // Padded to the alignment, a request up to the aligned limit still fits.
            max_buffer: device
                .max_buffer_bytes
                .map(|limit| limit / device.alignment.max(1) * device.alignment.max(1)),
            capacity: match device.memory_bytes {
                0 | u64::MAX => None,
                bytes => Some(bytes),
            },
            ladder: Ladder::new(ladder).with_repeat_buffers(config.repeats_on(device)),
            persistent: persistent::persistent_pool(),
            slices: SlotMap::with_key(),
            usage: MemoryUsage::default(),
            peak_in_use: 0,
            peak_reserved: 0,
            modes: AllocationModes::default(),
            parked: ParkedSlices::default(),
            groups: SlotMap::with_key(),
            open_groups: Vec::new(),
            parked_open: 0,
            parked_waits: 0,
            parked_wait_since: None,
            owed: FxHashMap::default(),
            recent_peak: RecentPeak::new(cache.slack_divisor),
            cleanup_requested: false,
            evacuates: device.slow_buffers,
        }
    }

    /// Current usage.
    pub fn usage(&self) -> MemoryUsage {
        self.usage
    }

    /// Every live slice, with the stream it is parked for if it is parked: what a leak check
    /// compares with the slices the handles hold. A parked slice is listed under the key of a
    /// handle its group still waits for (parked slices join and split): that handle's release
    /// returns it.
    ///
    /// An internal, behind the `internals` feature: no stability promise.
    #[cfg(any(test, feature = "internals"))]
    pub fn slices(&self) -> impl Iterator<Item = (SliceKey, Option<Entity>)> + '_ {
        let mut owed: FxHashMap<GroupKey, SliceKey> = FxHashMap::default();
        for (&key, &group) in &self.owed {
            owed.entry(group).or_insert(key);
        }
        self.slices.iter().map(move |(key, record)| {
            let held = record.group.and_then(|group| owed.get(&group).copied());
            (held.unwrap_or(key), record.parked_on)
        })
    }

    /// Highest `bytes_in_use` seen.
    pub fn peak_in_use(&self) -> u64 {
        self.peak_in_use
    }

    /// Highest `bytes_reserved` seen.
    pub fn peak_reserved(&self) -> u64 {
        self.peak_reserved
    }

    /// Alignment of every slice offset and size.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// The allocation mode windows of every stream.
    pub fn modes(&self) -> &AllocationModes {
        &self.modes
    }

    /// The allocation mode windows, to open or close one.
    pub fn modes_mut(&mut self) -> &mut AllocationModes {
        &mut self.modes
    }

    /// Every pool: the ladder in routing order, then the persistent pool.
    fn pools(&self) -> impl Iterator<Item = &dyn Pool> {
        let persistent: &dyn Pool = &self.persistent;
        self.ladder.pools().chain(std::iter::once(persistent))
    }

    /// The pool that placed `block`, of the pools `index` names.
    fn pool(&self, index: PoolIndex, block: &Block) -> Option<&dyn Pool> {
        match index {
            PoolIndex::Ladder => self.ladder.pool(block),
            PoolIndex::Persistent => Some(&self.persistent),
        }
    }

    /// [`MemoryPool::pool`], to change.
    fn pool_mut(&mut self, index: PoolIndex, block: &Block) -> Result<&mut dyn Pool, MemoryError> {
        match index {
            PoolIndex::Ladder => self.ladder.pool_mut(block),
            PoolIndex::Persistent => Ok(&mut self.persistent),
        }
    }

    /// Reserves `size` bytes for a new allocation of `stream` (whose entity is `entity`), in
    /// its current mode: first from memory the stream itself parked, then from its pools.
    pub fn reserve_for<B: Backend>(
        &mut self,
        backend: &mut B,
        size: u64,
        stream: StreamId,
        entity: Entity,
    ) -> Result<Reservation, MemoryError> {
        self.reserve_moving(backend, size, stream, entity, None)
    }

    /// [`MemoryPool::reserve_for`], where a request that would take the pools past their budget
    /// may first make room by moving live slices `compaction` lets go (a compacting pool's). The
    /// reservation then inherits the allocating stream's use (`parked_by_stream`) when a moved
    /// slice's bytes are copied: the copies, on that stream, still read the room it takes.
    pub fn reserve_moving<B: Backend>(
        &mut self,
        backend: &mut B,
        size: u64,
        stream: StreamId,
        entity: Entity,
        compaction: Option<Compaction<'_>>,
    ) -> Result<Reservation, MemoryError> {
        let mode = self.modes.current(stream);
        if mode == AllocationMode::Auto
            && let Some(reservation) = self.take_parked(entity, size)
        {
            return Ok(reservation);
        }
        self.reserve_with(backend, size, mode, compaction)
    }

    fn count_reserved(&mut self, requested: u64, len: u64) {
        self.usage.number_allocs += 1;
        self.usage.bytes_in_use += requested;
        self.usage.bytes_padding += len - requested;
        self.peak_in_use = self.peak_in_use.max(self.usage.bytes_in_use);
        self.recent_peak
            .allocated(requested, self.usage.bytes_in_use);
    }

    fn count_released(&mut self, requested: u64, len: u64) {
        self.usage.number_allocs -= 1;
        self.usage.bytes_in_use -= requested;
        self.usage.bytes_padding -= len - requested;
    }

    /// Bytes of pages emptied by moves, waiting to go back to the device
    /// ([`MemoryPool::release_retiring`]): a request that waits for them will find room.
    pub fn retiring(&self) -> u64 {
        self.ladder.retiring()
    }

    /// The latest evacuation whose emptied pages still wait to go back; 0 when none does.
    pub fn retiring_generation(&self) -> u64 {
        self.ladder.retiring_generation()
    }

    /// Returns the pages evacuations up to `through` emptied to the device: the caller has seen
    /// the device finish every operation submitted before them (the copies reading them among
    /// it).
    pub fn release_retiring<B: Backend>(&mut self, backend: &mut B, through: u64) {
        let freed = self.ladder.release_retiring(backend, through);
        if freed > 0 {
            self.recount_reserved();
            tracing::debug!(target: "gpuworld::memory", freed, reserved = self.usage.bytes_reserved, "emptied pages returned");
        }
    }

    /// The error for a request of `size` bytes that no pool can take, with the usage now.
    fn out_of_memory(&self, size: u64) -> MemoryError {
        MemoryError::OutOfMemory {
            requested: size,
            usage: self.usage,
            capacity: self.capacity,
        }
    }

    /// Before the device is asked for `padded` more bytes: returns idle pages and buffers, those
    /// idle the longest first, until what stays reserved with the request is within the budget
    /// (`budget.rs`: a 512th over the larger of what is in use with the request and the recent
    /// peak in use), or nothing idle is left.
    fn make_room<B: Backend>(&mut self, backend: &mut B, padded: u64) {
        let over = self.over_budget(padded);
        if over == 0 {
            return;
        }
        let freed = self.ladder.release_idle(backend, over);
        if freed > 0 {
            self.recount_reserved();
            tracing::debug!(target: "gpuworld::memory", freed, padded, reserved = self.usage.bytes_reserved, "idle memory returned before growing");
        }
    }

    /// `size` rounded up to the device alignment (at least one unit); `None` past `u64::MAX`.
    fn padded(&self, size: u64) -> Option<u64> {
        size.max(1).checked_next_multiple_of(self.alignment)
    }

    /// Whether free memory of the pools (the persistent pool, the ladder from the request's pool
    /// on, any sliced pool) holds `padded` bytes without asking the device for more.
    fn can_place(&self, padded: u64) -> bool {
        self.persistent.can_place(padded) || self.ladder.can_place(padded)
    }

    /// By how many bytes what is reserved would exceed the budget, were `padded` more reserved.
    fn over_budget(&self, padded: u64) -> u64 {
        let budget = self
            .recent_peak
            .budget(self.usage.bytes_in_use.saturating_add(padded));
        self.usage
            .bytes_reserved
            .saturating_add(padded)
            .saturating_sub(budget)
    }

    /// Adds a grown page to `bytes_reserved`, or turns the device's refusal into an error.
    fn account_growth(
        &mut self,
        grown: Result<Option<Block>, AllocError>,
        size: u64,
    ) -> Result<Option<Block>, MemoryError> {
        match grown {
            Ok(Some(block)) => {
                self.recount_reserved();
                Ok(Some(block))
            }
            Ok(None) => Ok(None),
            Err(AllocError::OutOfMemory) => {
                tracing::warn!(target: "gpuworld::memory", size, usage = ?self.usage, "out of memory");
                Err(self.out_of_memory(size))
            }
            // Only from a backend whose properties do not report the limit: `reserve` refuses
            // larger requests first, and `MemoryConfig::resolve` keeps pages within it.
            Err(AllocError::BufferTooLarge { limit }) => Err(MemoryError::BufferTooLarge {
                requested: size,
                limit,
            }),
            Err(AllocError::DeviceFailed { reason }) => Err(MemoryError::DeviceFailed {
                requested: size,
                reason,
            }),
        }
    }

    fn recount_reserved(&mut self) {
        self.usage.bytes_reserved = self.pools().map(|pool| pool.report().bytes_reserved).sum();
        self.peak_reserved = self.peak_reserved.max(self.usage.bytes_reserved);
    }

    /// Makes a slice's memory available again: at once for memory no work used, else once every
    /// stream that used the slice has passed an event proving the device is done with it.
    pub fn release(&mut self, key: SliceKey) -> Result<(), MemoryError> {
        let record = self.slices.remove(key).ok_or_else(|| stale_slice(key))?;
        match record.parked_on {
            Some(stream) => {
                self.parked.remove(stream, record.pool, &record.block, key);
            }
            None => self.count_released(record.requested, record.block.len),
        }
        self.pool_mut(record.pool, &record.block)?
            .release(&record.block, record.requested)
    }

    /// The device bytes of a live slice.
    pub fn locate(&self, key: SliceKey) -> Result<Region, MemoryError> {
        let record = self.slices.get(key).ok_or_else(|| stale_slice(key))?;
        let storage = self
            .pool(record.pool, &record.block)
            .and_then(|pool| pool.storage(&record.block))
            .ok_or_else(|| stale_page(record.block.page))?;
        Ok(Region {
            storage,
            offset: record.block.offset,
            size: record.requested,
        })
    }

    /// Returns every fully free page and free buffer, persistent ones included, to the device.
    pub fn cleanup<B: Backend>(&mut self, backend: &mut B) {
        let freed = self.ladder.cleanup(backend) + self.persistent.cleanup(backend);
        backend.trim_pages();
        self.recount_reserved();
        tracing::debug!(target: "gpuworld::memory", freed, reserved = self.usage.bytes_reserved, "memory cleanup");
    }

    /// Asks for a [`MemoryPool::cleanup`] at the end of this tick (a client's `memory_cleanup`):
    /// ingest records the request in arrival order, the GC stage runs it once memory this tick
    /// frees has returned.
    pub fn request_cleanup(&mut self) {
        self.cleanup_requested = true;
    }

    /// Whether a cleanup was asked for since the last call; the GC stage runs it if so.
    pub fn take_cleanup_request(&mut self) -> bool {
        std::mem::take(&mut self.cleanup_requested)
    }

    /// Returns free pages unused for their pool's `release_after_ticks`; the GC stage calls it
    /// every tick. Its cost is the pages that became free or expired, not the pages held.
    pub fn periodic_cleanup<B: Backend>(&mut self, backend: &mut B, tick: u64) {
        let freed = self.ladder.periodic_cleanup(backend, tick);
        if freed > 0 {
            backend.trim_pages();
            self.recount_reserved();
            tracing::debug!(target: "gpuworld::memory", freed, tick, "long-unused pages returned");
        }
    }

    /// Each pool's counts: the ladder in routing order, then the persistent pool.
    pub fn reports(&self) -> Vec<PoolReport> {
        self.pools().map(|pool| pool.report().clone()).collect()
    }

    /// Free slices and buffers waiting for reuse.
    pub fn free_slices(&self) -> usize {
        self.pools().map(|pool| pool.free_blocks()).sum()
    }

    /// The memory state as stable text lines for `Runtime::snapshot()`: usage, then one line per
    /// pool in routing order, then open allocation-mode windows.
    pub fn describe(&self) -> String {
        let usage = self.usage;
        let mut out = format!(
            "memory: allocs {} in use {}B padding {}B reserved {}B free slices {}",
            usage.number_allocs,
            usage.bytes_in_use,
            usage.bytes_padding,
            usage.bytes_reserved,
            self.free_slices()
        );
        if !self.parked.is_empty() {
            let _ = write!(
                out,
                " parked {} ({}B)",
                self.parked.len(),
                self.parked.bytes()
            );
        }
        out.push('\n');
        for report in self.reports() {
            let _ = writeln!(out, "  {report}");
        }
        for window in self.modes.describe() {
            let _ = writeln!(out, "  allocation mode {window}");
        }
        out
    }
}

fn stale_slice(key: SliceKey) -> MemoryError {
    MemoryError::StaleHandle {
        what: format!("memory slice {key:?}").into(),
    }
}

#[cfg(test)]
mod tests;
