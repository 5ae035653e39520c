//! Device memory: `MemoryPool`, the resource the tick stages reserve from (ingest) and release
//! to (GC), over a ladder of sliced and exclusive pools plus a persistent pool. Slices and pages
//! are generational keys, so a stale key is an error, never another buffer.

mod budget;
mod compacting;
mod config;
mod exclusive;
mod idle;
mod ladder;
pub mod layout;
mod mapped;
mod mode;
mod parked;
mod persistent;
mod pool;
mod report;
mod sliced;

pub use crate::usage::MemoryUsage;
pub use compacting::CompactingPool;
pub use config::{CachePolicy, DEFAULT_RELEASE_AFTER_TICKS, MemoryConfig, PoolConfig, PoolKind};
pub use exclusive::{ExclusivePool, Fit};
pub use ladder::Ladder;
pub use layout::{TensorLayout, TensorPlacement};
pub use mapped::MappedPool;
pub use mode::{AllocationMode, AllocationModes};
pub use pool::{DeviceMemory, Movable, Pool, PoolIndex};
pub use report::PoolReport;
pub use sliced::{PageSizes, SlicedPool};

use crate::backend::{AllocError, Backend, DeviceProperties, Region, StorageId};
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
    /// A live allocation; generational, so a released or stale key is detected, never misread.
    pub struct SliceKey;
    /// A page (backend buffer) of one pool; never renumbered, not even by cleanup.
    pub struct PageKey;
}

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

/// Where a pool placed a request: a byte range of one of its pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    /// The page.
    pub page: PageKey,
    /// The page's backend buffer.
    pub storage: StorageId,
    /// First byte in the page (a multiple of the device alignment).
    pub offset: u64,
    /// Bytes set aside, padding included.
    pub len: u64,
    /// Which pool of a [`Ladder`] placed it (its position in routing order); 0 from a pool on its
    /// own.
    pub pool: usize,
}

impl Block {
    /// The part of the block from `at` bytes on (what `Pool::split` hands out).
    pub(crate) fn tail(&self, at: u64) -> Block {
        Block {
            offset: self.offset + at,
            len: self.len - at,
            ..*self
        }
    }

    /// Whether `at` bytes cut the block in two non-empty parts (what `Pool::split` takes).
    pub(crate) fn cuts_at(&self, at: u64) -> bool {
        at > 0 && at < self.len
    }

    /// Whether `next` starts right where this block ends, in the same page.
    pub(crate) fn meets(&self, next: &Block) -> bool {
        self.page == next.page && self.offset + self.len == next.offset
    }

    /// This block and `next`, right after it in its page, as one (what `Pool::join` hands out).
    pub(crate) fn joined(&self, next: &Block) -> Block {
        Block {
            len: self.len + next.len,
            ..*self
        }
    }
}

/// A reserved allocation: its key and the device bytes it may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
pub struct Compaction<'a> {
    /// What each live slice allows.
    pub movable: &'a mut dyn FnMut(SliceKey) -> Movable,
    /// The slices moved, appended to.
    pub moves: &'a mut Vec<Moved>,
    /// The allocating stream's entity, if any: memory parked for it is free to the request
    /// (`Movable::Reusable`).
    pub stream: Option<Entity>,
}

/// The largest block a request of `padded` bytes may take whole (a buffer of an exclusive pool, a
/// parked slice): one it wastes at most a fifth of. Pages of their own in sliced pools are reused
/// more tightly (`sliced.rs`, `DEDICATED_FIT_DIVISOR`).
pub(crate) fn largest_fit(padded: u64) -> u64 {
    // len - padded <= len / 5  <=>  4 len <= 5 padded
    padded.saturating_mul(5) / 4
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
                let name = format!("pool {index}");
                let made: Box<dyn Pool> = match pool.kind {
                    PoolKind::Sliced {
                        page_size,
                        max_slice,
                        first_page,
                    } => Box::new(SlicedPool::new(
                        name,
                        PageSizes {
                            full: page_size,
                            first: first_page,
                            alignment: device.alignment,
                        },
                        max_slice,
                        pool.max_reserved,
                        pool.release_after_ticks,
                        cache.fit_divisor,
                    )),
                    PoolKind::Exclusive => Box::new(ExclusivePool::for_ladder(
                        name,
                        pool.max_alloc,
                        pool.max_reserved,
                        pool.release_after_ticks,
                    )),
                    PoolKind::Compacting {
                        page_size,
                        follow_peak,
                    } => Box::new(CompactingPool::new(
                        name,
                        page_size,
                        follow_peak,
                        pool.max_reserved,
                        pool.release_after_ticks,
                    )),
                    PoolKind::Mapped {
                        page_size,
                        chunk_size,
                        range_size,
                    } => Box::new(MappedPool::new(
                        name,
                        page_size,
                        chunk_size,
                        range_size,
                        pool.max_reserved,
                        pool.release_after_ticks,
                    )),
                };
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
            ladder: Ladder::new(ladder),
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

    /// The pool `index` names.
    fn pool(&self, index: PoolIndex) -> &dyn Pool {
        match index {
            PoolIndex::Ladder => &self.ladder,
            PoolIndex::Persistent => &self.persistent,
        }
    }

    /// The pool `index` names, to change.
    fn pool_mut(&mut self, index: PoolIndex) -> &mut dyn Pool {
        match index {
            PoolIndex::Ladder => &mut self.ladder,
            PoolIndex::Persistent => &mut self.persistent,
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

    /// The parked block `stream` would take for `padded` bytes: the shortest that holds them
    /// and that its pool splits, or one at most a fifth longer (taken whole).
    fn parked_fit(&self, stream: Entity, padded: u64) -> Option<SliceKey> {
        let fit = largest_fit(padded);
        let splits = |key: SliceKey| {
            self.slices
                .get(key)
                .is_some_and(|record| self.pool(record.pool).splits(&record.block))
        };
        (self.parked.fitting(stream, padded).take(PARKED_TRIED))
            .find(|&(len, key)| len <= fit || splits(key))
            .map(|(_, key)| key)
    }

    /// Memory `stream` parked for `size` bytes ([`MemoryPool::parked_fit`]), under a new key (a
    /// released key stays dead). Of a block its pool splits, the request takes only its padded
    /// size and the rest stays parked. The stream orders its own work, so any part of its
    /// memory is free to it.
    fn take_parked(&mut self, stream: Entity, size: u64) -> Option<Reservation> {
        let padded = self.padded(size)?;
        let old = self.parked_fit(stream, padded)?;
        let mut record = self.slices.remove(old)?;
        self.parked.remove(stream, record.pool, &record.block, old);
        if record.block.len > padded
            && let Some(rest) = self.pool_mut(record.pool).split(&record.block, padded)
        {
            record.block.len = padded;
            let key = self.slices.insert(SliceRecord {
                pool: record.pool,
                block: rest,
                requested: 0,
                parked_on: Some(stream),
                group: record.group,
            });
            self.parked.park(stream, record.pool, &rest, key);
        }
        self.pool_mut(record.pool)
            .resized(&record.block, record.requested, size);
        let block = record.block;
        let slice = self.slices.insert(SliceRecord {
            pool: record.pool,
            block,
            requested: size,
            parked_on: None,
            group: None,
        });
        self.count_reserved(size, block.len);
        Some(Reservation {
            slice,
            region: Region {
                storage: block.storage,
                offset: block.offset,
                size,
            },
            parked_by_stream: true,
        })
    }

    /// Parks a released slice whose every use was on `stream`: that stream's later allocations
    /// may take it at once; it returns to its pool by [`MemoryPool::release_parked`] once the
    /// device is proven done with it. It no longer counts as in use.
    ///
    /// Slices the stream parked since the last [`MemoryPool::seal_parking`] form one group: a
    /// slice joins its parked neighbours of the group in its page, and the group's memory
    /// returns to its pool once [`MemoryPool::release_parked`] was called for each of them.
    pub fn park(&mut self, key: SliceKey, stream: Entity) -> Result<(), MemoryError> {
        if self
            .slices
            .get(key)
            .is_none_or(|record| record.parked_on.is_some())
        {
            return Err(stale_slice(key));
        }
        let group = self.open_group(stream);
        let Some(record) = self.slices.get_mut(key) else {
            return Err(stale_slice(key));
        };
        record.parked_on = Some(stream);
        record.group = Some(group);
        let (requested, len) = (record.requested, record.block.len);
        if let Some(entry) = self.groups.get_mut(group) {
            entry.pending += 1;
            entry.handles += 1;
        }
        self.owed.insert(key, group);
        self.parked_open += len;
        self.count_released(requested, len);
        let joined = self.join_parked(key, stream, group);
        if let Some(record) = self.slices.get(joined) {
            let (pool, block) = (record.pool, record.block);
            self.parked.park(stream, pool, &block, joined);
        }
        Ok(())
    }

    /// The group `stream` parks in now.
    fn open_group(&mut self, stream: Entity) -> GroupKey {
        if let Some(&(_, group)) = self.open_groups.iter().find(|(s, _)| *s == stream) {
            return group;
        }
        let group = self.groups.insert(ParkGroup {
            stream,
            pending: 0,
            handles: 0,
            awaited: false,
        });
        self.open_groups.push((stream, group));
        group
    }

    /// Joins `key`, being parked, with the blocks of its group parked right before and after it
    /// in its page, where its pool joins blocks; the key of the block it ends in.
    fn join_parked(&mut self, key: SliceKey, stream: Entity, group: GroupKey) -> SliceKey {
        let Some(record) = self.slices.get(key) else {
            return key;
        };
        let pool = record.pool;
        // Joining the block before leaves the end where it was: both neighbours are found once.
        let (before, after) = self.parked.neighbours(stream, pool, &record.block);
        let mut key = key;
        for (neighbour, neighbour_first) in [(before, true), (after, false)] {
            let (Some(other), Some(block)) = (neighbour, self.slices.get(key).map(|r| r.block))
            else {
                continue;
            };
            let Some(other_record) = (self.slices.get(other))
                .filter(|other| other.group == Some(group) && other.pool == pool)
            else {
                continue;
            };
            let (other_block, other_requested) = (other_record.block, other_record.requested);
            let (first, second) = match neighbour_first {
                true => (other_block, block),
                false => (block, other_block),
            };
            let Some(joined) = self.pool_mut(pool).join(&first, &second) else {
                continue;
            };
            self.parked.remove(stream, pool, &other_block, other);
            self.slices.remove(other);
            let Some(record) = self.slices.remove(key) else {
                return key;
            };
            key = self.slices.insert(SliceRecord {
                pool,
                block: joined,
                requested: record.requested + other_requested,
                parked_on: Some(stream),
                group: Some(group),
            });
        }
        key
    }

    /// Closes every stream's parking group: slices parked from now on join only each other. The
    /// GC stage calls it once a tick, after pinning released memory behind events, so that a
    /// group's handles are released together.
    pub fn seal_parking(&mut self) {
        self.open_groups.clear();
        self.parked_open = 0;
    }

    /// Whether the streams parked as much since [`MemoryPool::seal_parking`] as a tick should: a
    /// 32nd of the recent peak in use, at least 1 MiB. Parked memory goes back to its pool only
    /// behind the events of the tick that parked it, so a tick that ingests thousands of
    /// commands would hold everything they freed at once: ingest leaves the rest of its commands
    /// to the next tick instead, and reserved memory then follows what is live, not how many
    /// commands a tick takes.
    pub fn parking_full(&self) -> bool {
        self.parked_open > (self.recent_peak.peak() / 32).max(1 << 20)
    }

    /// Whether a request of `size` bytes by `stream` (whose entity is `entity`) should wait for
    /// parked memory to come back rather than take the pools past their budget: no free memory
    /// and no memory the stream parked holds it, while at least as much is parked, behind events
    /// the GC stage will see pass. Ingest then leaves the request (and what follows it) to a
    /// later tick, `PARKED_WAITS` ticks at most, so that the device, not the rate of ticks,
    /// decides what is reserved: the memory returns as soon as the device is done with it.
    pub fn waits_for_parked(&mut self, size: u64, stream: StreamId, entity: Entity) -> bool {
        // Ingest asks for every allocation: what rules most of them out comes first.
        let waits = self.padded(size).is_some_and(|padded| {
            self.parked.bytes() >= padded
                && padded >= self.worth_waiting_for()
                && self.parked_waits < PARKED_WAITS
                && self
                    .parked_wait_since
                    .is_none_or(|since| since.elapsed() < PARKED_WAIT)
                && self.modes.current(stream) == AllocationMode::Auto
                && self.over_budget(padded) > 0
                && !self.can_place(padded)
                && self.parked_fit(entity, padded).is_none()
        });
        if waits {
            self.parked_waits += 1;
            self.parked_wait_since
                .get_or_insert_with(std::time::Instant::now);
        } else {
            self.parked_waits = 0;
            self.parked_wait_since = None;
        }
        waits
    }

    /// The smallest request that waits for parked memory: a 64th of the recent peak in use, at
    /// least 1 MiB. A smaller one grows the pools by little, and waiting would hold up the
    /// commands behind it for nothing.
    fn worth_waiting_for(&self) -> u64 {
        (self.recent_peak.peak() / 64).max(1 << 20)
    }

    /// Counts a parked handle (`key`) released by the GC stage, whose memory a cleanup waits for
    /// if `awaited`: once every handle of its group was, the group's memory returns to its pool.
    pub fn release_parked(
        &mut self,
        key: SliceKey,
        awaited: bool,
    ) -> Result<ParkedReturn, MemoryError> {
        let Some(group) = self.owed.remove(&key) else {
            return match self.slices.get(key) {
                Some(record) if record.parked_on.is_none() => Err(MemoryError::StaleHandle {
                    what: format!("memory slice {key:?} (live, not parked)").into(),
                }),
                _ => Err(stale_slice(key)),
            };
        };
        let Some(entry) = self.groups.get_mut(group) else {
            return Err(stale_slice(key));
        };
        entry.pending = entry.pending.saturating_sub(1);
        entry.awaited |= awaited;
        if entry.pending > 0 {
            return Ok(ParkedReturn::default());
        }
        let Some(ParkGroup {
            stream,
            handles,
            awaited,
            ..
        }) = self.groups.remove(group)
        else {
            return Err(stale_slice(key));
        };
        self.open_groups.retain(|&(_, open)| open != group);
        let members: Vec<SliceKey> = (self.parked.of_stream(stream))
            .filter(|&member| {
                self.slices
                    .get(member)
                    .is_some_and(|record| record.group == Some(group))
            })
            .collect();
        if members.is_empty() {
            return Ok(ParkedReturn::default());
        }
        for member in members {
            self.release(member)?;
        }
        Ok(ParkedReturn { handles, awaited })
    }

    /// Slices parked by their streams, and their bytes (padding included).
    pub fn parked(&self) -> (usize, u64) {
        (self.parked.len(), self.parked.bytes())
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

    /// Reserves `size` bytes in `mode`: from free memory when some fits, else from a new page;
    /// when the device refuses, cleans up and retries once before reporting out of memory. A
    /// request over the device's largest buffer is refused first, with nothing cleaned up.
    pub fn reserve<B: Backend>(
        &mut self,
        backend: &mut B,
        size: u64,
        mode: AllocationMode,
    ) -> Result<Reservation, MemoryError> {
        self.reserve_with(backend, size, mode, None)
    }

    /// [`MemoryPool::reserve`], where a request that would take the pools past their budget may
    /// first make room by moving live slices `compaction` lets go ([`MemoryPool::reserve_moving`]).
    pub fn reserve_with<B: Backend>(
        &mut self,
        backend: &mut B,
        size: u64,
        mode: AllocationMode,
        compaction: Option<Compaction<'_>>,
    ) -> Result<Reservation, MemoryError> {
        if let Some(limit) = self.max_buffer
            && size > limit
        {
            return Err(MemoryError::BufferTooLarge {
                requested: size,
                limit,
            });
        }
        let padded = self.padded(size).ok_or_else(|| self.out_of_memory(size))?;
        let mut copies = false;
        let (pool, block) = match mode {
            AllocationMode::Persistent => (
                PoolIndex::Persistent,
                self.reserve_persistent(backend, padded, size)?,
            ),
            AllocationMode::Auto => match self.persistent.try_reserve(padded, size) {
                Some(block) => (PoolIndex::Persistent, block),
                None => (
                    PoolIndex::Ladder,
                    self.reserve_from_ladder(backend, padded, size, compaction, &mut copies)?,
                ),
            },
        };
        debug_assert!(
            block.offset.is_multiple_of(self.alignment) && block.len >= padded,
            "{block:?} for {padded} bytes breaks the alignment of {}",
            self.alignment
        );
        let slice = self.slices.insert(SliceRecord {
            pool,
            block,
            requested: size,
            parked_on: None,
            group: None,
        });
        self.count_reserved(size, block.len);
        Ok(Reservation {
            slice,
            region: Region {
                storage: block.storage,
                offset: block.offset,
                size,
            },
            parked_by_stream: copies,
        })
    }

    fn reserve_persistent<B: Backend>(
        &mut self,
        backend: &mut B,
        padded: u64,
        size: u64,
    ) -> Result<Block, MemoryError> {
        if let Some(block) = self.persistent.try_reserve(padded, size) {
            return Ok(block);
        }
        let grown = match self.persistent.grow(backend, padded, size) {
            Err(AllocError::OutOfMemory) => {
                self.cleanup(backend);
                self.persistent.grow(backend, padded, size)
            }
            grown => grown,
        };
        self.account_growth(grown, size)?
            .ok_or_else(|| self.out_of_memory(size))
    }

    /// The ladder places the request in free memory (its own pool's, else another sliced
    /// pool's); failing that, it grows (after idle memory past the budget went back), and when
    /// the device refuses, everything free goes back and it asks once more.
    fn reserve_from_ladder<B: Backend>(
        &mut self,
        backend: &mut B,
        padded: u64,
        size: u64,
        compaction: Option<Compaction<'_>>,
        copies: &mut bool,
    ) -> Result<Block, MemoryError> {
        if let Some(block) = self.ladder.try_reserve(padded, size) {
            return Ok(block);
        }
        if let Some(compaction) = compaction
            && self.over_budget(padded) > 0
        {
            match self.compact(padded, size, compaction, copies) {
                (Some(block), _) => return Ok(block),
                // Pages emptied for the request retire once the copies reading them were
                // submitted: the caller waits for them (`MemoryPool::retiring`) and asks again.
                (None, retiring) if retiring > 0 => return Err(self.out_of_memory(size)),
                (None, _) => {}
            }
        }
        // A buffer that grows is released parked (its stream wrote it) before its next size is
        // asked for: the pool decides, as for an idle page, whether its page was the last size.
        if let Some((_, key)) = self.parked.longest_below(padded)
            && let Some(record) = self.slices.get(key)
            && record.pool == PoolIndex::Ladder
        {
            let block = record.block;
            self.ladder.parked_growth(&block);
        }
        self.make_room(backend, padded);
        let room = self
            .recent_peak
            .budget(self.usage.bytes_in_use.saturating_add(padded))
            .saturating_sub(self.usage.bytes_reserved);
        self.ladder.set_room(room, self.recent_peak.peak());
        let grown = match self.ladder.grow(backend, padded, size) {
            Err(AllocError::OutOfMemory) => {
                tracing::debug!(target: "gpuworld::memory", size, "device refused a page: cleaning up and retrying once");
                self.cleanup(backend);
                self.ladder.grow(backend, padded, size)
            }
            grown => grown,
        };
        // Pages the room made and the growth did not map again go back now.
        backend.trim_pages();
        self.account_growth(grown, size)?
            .ok_or_else(|| self.out_of_memory(size))
    }

    /// Places a request by moving live slices (`Pool::compact`), their records following; where
    /// no page can make room for it, empties pages that can go back to the device
    /// (`Pool::evacuate`) instead: the request's block, or the bytes of pages retiring.
    fn compact(
        &mut self,
        padded: u64,
        size: u64,
        compaction: Compaction<'_>,
        copies: &mut bool,
    ) -> (Option<Block>, u64) {
        // The ladder's live slices by place, with what each allows (parked ones stay), gathered
        // only if the pools look at a block.
        let needed = self.over_budget(padded);
        let stream = compaction.stream;
        let (slices, ladder) = (&self.slices, &mut self.ladder);
        let mut by_place: Option<FxHashMap<Place, (SliceKey, Movable)>> = None;
        let mut place = |from: &Block| {
            let places = by_place.get_or_insert_with(|| {
                (slices.iter())
                    .filter(|(_, record)| {
                        record.pool == PoolIndex::Ladder
                            && (record.parked_on.is_none() || record.parked_on == stream)
                    })
                    .map(|(key, record)| {
                        let block = record.block;
                        let movable = match record.parked_on {
                            Some(_) => Movable::Reusable,
                            None => (compaction.movable)(key),
                        };
                        ((block.pool, block.page, block.offset), (key, movable))
                    })
                    .collect()
            });
            places.get(&(from.pool, from.page, from.offset)).copied()
        };
        let mut blocks = Vec::new();
        let block = {
            let mut movable =
                |block: &Block| place(block).map_or(Movable::No, |(_, movable)| movable);
            let block = ladder.compact(padded, size, &mut movable, &mut blocks);
            match block {
                // Pages emptied before still go back: the request waits for them rather than
                // empty more.
                None if self.evacuates && ladder.retiring() > 0 => (None, ladder.retiring()),
                None if self.evacuates => {
                    let retiring = ladder.evacuate(needed, &mut movable, &mut blocks);
                    (None, retiring)
                }
                block => (block, 0),
            }
        };
        let (block, retiring) = block;
        let moved: Vec<MovedBlock> = blocks
            .into_iter()
            .map(|(from, to)| (from, to, place(&from)))
            .collect();
        // Memory parked for the stream that the request's block took: its slices end here (the
        // GC stage finds their keys dead, as when the stream takes parked memory).
        let reused: Vec<SliceKey> = match (block, &by_place) {
            (Some(block), Some(places)) => (places.values())
                .filter(|(_, movable)| *movable == Movable::Reusable)
                .filter_map(|&(key, _)| {
                    let record = self.slices.get(key)?;
                    let inside = record.block.pool == block.pool
                        && record.block.page == block.page
                        && record.block.offset >= block.offset
                        && record.block.offset < block.offset + block.len;
                    inside.then_some(key)
                })
                .collect(),
            _ => Vec::new(),
        };
        for key in reused {
            if let (Some(record), Some(stream)) = (self.slices.remove(key), stream) {
                self.parked.remove(stream, record.pool, &record.block, key);
                debug_assert_eq!(record.parked_on, Some(stream));
            }
            *copies = true;
        }
        for (from, to, place) in moved {
            let Some((slice, movable)) = place else {
                tracing::error!(target: "gpuworld::memory", ?from, "a compaction moved a block no slice holds");
                continue;
            };
            if let Some(record) = self.slices.get_mut(slice) {
                record.block = to;
            }
            // A block moved into room cleared for it may be longer (it covers old places copies
            // still read): the difference is padding until the slice goes.
            self.usage.bytes_padding = self.usage.bytes_padding + to.len - from.len;
            let copied = movable == Movable::Copied;
            *copies |= copied;
            compaction.moves.push(Moved {
                slice,
                from: Region {
                    storage: from.storage,
                    offset: from.offset,
                    size: from.len,
                },
                to: Region {
                    storage: to.storage,
                    offset: to.offset,
                    size: to.len,
                },
                copied,
            });
        }
        (block, retiring)
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
        self.pool_mut(record.pool)
            .release(&record.block, record.requested)
    }

    /// The device bytes of a live slice.
    pub fn locate(&self, key: SliceKey) -> Result<Region, MemoryError> {
        let record = self.slices.get(key).ok_or_else(|| stale_slice(key))?;
        let storage = self
            .pool(record.pool)
            .storage(&record.block)
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
        self.pools().map(|pool| pool.report()).collect()
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

/// The error for a page key that no longer names a page.
pub(crate) fn stale_page(key: PageKey) -> MemoryError {
    MemoryError::StaleHandle {
        what: format!("memory page {key:?}").into(),
    }
}

#[cfg(test)]
mod tests;
