//! The ladder: pools by request size, smallest first. A request goes to the first pool whose
//! largest allocation fits it; one that its pool cannot place takes a free range of another
//! sliced pool before the device is asked; a pool at its cap passes growth on to the next.
//! Blocks carry the position of the pool that placed them, so releases and lookups go straight
//! to it ([`Ladder::pool_mut`]). Each pool is a [`Rung`] of its kind, so what only one kind does
//! (a sliced pool's growth, a compacting pool's moves) is asked of that kind, not of every pool.

use crate::backend::{AllocError, DeviceProperties};
use crate::error::MemoryError;
use crate::memory::exclusive::ExclusivePool;
use crate::memory::pool::{Compacts, DeviceMemory, Movable, Pool};
use crate::memory::{
    Block, CompactingPool, MappedPool, MappedRunsPool, PageSizes, PoolConfig, PoolKind, SlicedPool,
};

/// One pool of the ladder, by kind.
#[derive(Debug)]
pub enum Rung {
    /// Pages shared by slices, with holes it lends to other pools.
    Sliced(SlicedPool),
    /// A buffer per allocation.
    Exclusive(ExclusivePool),
    /// Pages whose live blocks it moves to make room.
    Compacting(CompactingPool),
    /// Reserved addresses with pages mapped under them.
    Mapped(MappedPool),
    /// Reserved addresses with pages mapped under them, kept as runs (mappings that split).
    MappedRuns(MappedRunsPool),
}

impl Rung {
    /// The pool `pool` configures on `device`, named `name` (`fit_divisor`: the cache policy's
    /// loosest reuse of a page of its own).
    pub(crate) fn new(
        name: String,
        pool: &PoolConfig,
        device: &DeviceProperties,
        fit_divisor: u64,
    ) -> Rung {
        match pool.kind {
            PoolKind::Sliced {
                page_size,
                max_slice,
                first_page,
            } => Rung::Sliced(SlicedPool::new(
                name,
                PageSizes {
                    full: page_size,
                    first: first_page,
                    alignment: device.alignment,
                },
                max_slice,
                pool.max_reserved,
                pool.release_after_ticks,
                fit_divisor,
            )),
            PoolKind::Exclusive => Rung::Exclusive(ExclusivePool::for_ladder(
                name,
                pool.max_alloc,
                pool.max_reserved,
                pool.release_after_ticks,
            )),
            PoolKind::Compacting {
                page_size,
                follow_peak,
            } => Rung::Compacting(CompactingPool::new(
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
            } => {
                let (max_reserved, release_after) = (pool.max_reserved, pool.release_after_ticks);
                // A page per chunk where mappings split: the same pool, its pages kept as
                // runs (a request costs about the same whatever its page count).
                if device.split_mappings && chunk_size == page_size {
                    Rung::MappedRuns(MappedRunsPool::new(
                        name,
                        page_size,
                        range_size,
                        max_reserved,
                        release_after,
                    ))
                } else {
                    Rung::Mapped(MappedPool::new(
                        name,
                        page_size,
                        chunk_size,
                        range_size,
                        max_reserved,
                        release_after,
                    ))
                }
            }
        }
    }

    /// The pool.
    pub fn pool(&self) -> &dyn Pool {
        match self {
            Rung::Sliced(pool) => pool,
            Rung::Exclusive(pool) => pool,
            Rung::Compacting(pool) => pool,
            Rung::Mapped(pool) => pool,
            Rung::MappedRuns(pool) => pool,
        }
    }

    /// The pool, to change.
    pub fn pool_mut(&mut self) -> &mut dyn Pool {
        match self {
            Rung::Sliced(pool) => pool,
            Rung::Exclusive(pool) => pool,
            Rung::Compacting(pool) => pool,
            Rung::Mapped(pool) => pool,
            Rung::MappedRuns(pool) => pool,
        }
    }

    /// Whether a request routed to another pool may take a free range of this one before the
    /// device is asked for more: a sliced pool's hole between live slices, or a compacting
    /// pool's (what it places there may be moved like any block of it). A mapped pool's free
    /// addresses may need pages mapped, and an exclusive pool's buffers are reused whole.
    fn lends_free_ranges(&self) -> bool {
        matches!(self, Rung::Sliced(_) | Rung::Compacting(_))
    }

    /// The pool, if it is a compacting one.
    fn compacting(&mut self) -> Option<&mut CompactingPool> {
        match self {
            Rung::Compacting(pool) => Some(pool),
            _ => None,
        }
    }

    /// [`Rung::compacting`], to read.
    fn compacting_ref(&self) -> Option<&CompactingPool> {
        match self {
            Rung::Compacting(pool) => Some(pool),
            _ => None,
        }
    }
}

/// Large placements a request's size is looked up in ([`RecentSizes`]). On the trace family of
/// `benches/alloc_traces.rs` (pool-level replay, scale 1, seeds 1-4, CUDA's 2 MiB pages) windows
/// of 32 and 256 gave the same device calls: a program's sizes come back within a step.
const REPEAT_WINDOW: usize = 32;

/// The padded sizes of the last [`REPEAT_WINDOW`] requests placed in a large pool that a sliced
/// pool's buffers of their own stand before: a size among them is a repeat.
#[derive(Debug, Default)]
struct RecentSizes {
    sizes: std::collections::VecDeque<u64>,
}

impl RecentSizes {
    fn contains(&self, padded: u64) -> bool {
        self.sizes.contains(&padded)
    }

    fn note(&mut self, padded: u64) {
        if self.sizes.len() == REPEAT_WINDOW {
            self.sizes.pop_front();
        }
        self.sizes.push_back(padded);
    }
}

/// Pools by size limit, in routing order.
#[derive(Debug)]
pub struct Ladder {
    /// Largest padded request of each pool.
    max_allocs: Vec<u64>,
    pools: Vec<Rung>,
    /// With buffers of their own for repeated sizes ([`Ladder::with_repeat_buffers`]): the
    /// sizes recently placed in a large pool.
    repeats: Option<RecentSizes>,
}

impl Ladder {
    /// A ladder of `pools`, each paired with the largest padded request it takes, in routing
    /// order (the last pool also takes anything larger).
    pub fn new(pools: Vec<(u64, Rung)>) -> Ladder {
        let (max_allocs, pools) = pools.into_iter().unzip();
        Ladder {
            max_allocs,
            pools,
            repeats: None,
        }
    }

    /// This ladder, where `on`, giving a request routed to a mapped or compacting pool that a
    /// sliced pool stands before a buffer of its own in that sliced pool when its size was placed
    /// there recently ([`MemoryConfig::repeat_buffers`](crate::memory::MemoryConfig::repeat_buffers)).
    /// A buffer of its own costs one device call and is reused whole by the next request of
    /// its size; mapped pages cost a call per page (2 MiB on CUDA), and compacting pages are
    /// shared by requests that do not pack. Any such request takes an idle buffer of its own of
    /// about its size first. On the trace family (pool-level replay, scale 1, seeds 1-8): with
    /// CUDA's pages the training shape's device calls fell from 34,468 to 13,651 at peak
    /// reserved / peak in use 1.002-1.005 (the other shapes within 0.002, the KV cache's calls
    /// 24% more); on a compacting device the training shape went from 1.049-1.081 to
    /// 1.002-1.006, two mixed-stream seeds rose (1.002 to 1.026, 1.012 to 1.037; the worst seed
    /// stayed 1.043) and one KV-cache seed fell (1.031 to 1.023).
    #[must_use]
    pub fn with_repeat_buffers(mut self, on: bool) -> Ladder {
        self.repeats = on.then(RecentSizes::default);
        self
    }

    /// Where a request routed to pool `routed` takes buffers of their own for repeated sizes:
    /// the sliced pool before a mapped or compacting one.
    fn repeat_rung(&self, routed: usize) -> Option<usize> {
        self.repeats.as_ref()?;
        let own = routed.checked_sub(1)?;
        match (&self.pools[own], &self.pools[routed]) {
            (Rung::Sliced(_), Rung::Mapped(_) | Rung::MappedRuns(_) | Rung::Compacting(_)) => {
                Some(own)
            }
            _ => None,
        }
    }

    /// Notes a request of `padded` bytes routed to pool `routed` as placed.
    fn placed(&mut self, routed: usize, padded: u64) {
        if self.repeat_rung(routed).is_some()
            && let Some(repeats) = &mut self.repeats
        {
            repeats.note(padded);
        }
    }

    /// Whether a request of `padded` bytes routed to pool `routed` gets a buffer of its own: the
    /// sliced pool's position.
    fn repeated(&self, routed: usize, padded: u64) -> Option<usize> {
        let own = self.repeat_rung(routed)?;
        self.repeats
            .as_ref()
            .is_some_and(|repeats| repeats.contains(padded))
            .then_some(own)
    }

    /// The pools, in routing order.
    pub fn pools(&self) -> impl Iterator<Item = &dyn Pool> {
        self.pools.iter().map(Rung::pool)
    }

    /// The pool a request of `padded` bytes goes to first.
    fn routed(&self, padded: u64) -> usize {
        self.max_allocs
            .iter()
            .position(|&max| padded <= max)
            .unwrap_or(self.pools.len().saturating_sub(1))
    }

    /// Pool `index`'s `try_reserve`, the block stamped with `index`.
    fn try_pool(&mut self, index: usize, padded: u64, requested: u64) -> Option<Block> {
        self.pools[index]
            .pool_mut()
            .try_reserve(padded, requested)
            .map(|block| Block {
                pool: index,
                ..block
            })
    }

    /// The pool that placed `block`: where it is released, split, joined and looked up.
    pub fn pool(&self, block: &Block) -> Option<&dyn Pool> {
        self.pools.get(block.pool).map(Rung::pool)
    }

    /// [`Ladder::pool`], to change.
    pub fn pool_mut(&mut self, block: &Block) -> Result<&mut dyn Pool, MemoryError> {
        let pools = self.pools.len();
        match self.pools.get_mut(block.pool) {
            Some(rung) => Ok(rung.pool_mut()),
            None => Err(MemoryError::StaleHandle {
                what: format!("block of ladder pool {} (of {pools})", block.pool).into(),
            }),
        }
    }

    /// Tells the sliced pool that placed the live `block`, before the ladder grows, that the
    /// block is parked by a stream and is the longest parked block shorter than the request
    /// ([`SlicedPool::parked_growth`]); other pools do not weigh it.
    pub fn parked_growth(&mut self, block: &Block) {
        if let Some(Rung::Sliced(pool)) = self.pools.get_mut(block.pool) {
            pool.parked_growth(block);
        }
    }
}

/// Where requests go: the pools as one ([`Pool`]'s placing and cleanup, over the rungs).
impl Ladder {
    /// Places `padded` bytes in free memory: the request's own pool; failing that, free memory of another sliced
    /// pool, smaller pools first. Holes between live slices are what fragments sliced pages when
    /// sizes shift; a request its own pool cannot place fills one before the device is asked for
    /// more. On the trace family of `benches/alloc_traces.rs` (cpu, scale 32, 16 seeds) the mixes
    /// reached peak reserved / peak in use of 1.107 without it and 1.090 with it, with 14% fewer
    /// device allocations on the log-uniform shape and a third fewer on the training one.
    pub fn try_reserve(&mut self, padded: u64, requested: u64) -> Option<Block> {
        let routed = self.routed(padded);
        let block = self.try_places(routed, padded, requested);
        if block.is_some() {
            self.placed(routed, padded);
        }
        block
    }

    /// [`Ladder::try_reserve`]'s search: an idle buffer of its own first where repeated sizes
    /// get them, then the request's pool, then another pool's free range.
    fn try_places(&mut self, routed: usize, padded: u64, requested: u64) -> Option<Block> {
        if let Some(own) = self.repeat_rung(routed)
            && let Some(block) = self.try_pool(own, padded, requested)
        {
            return Some(block);
        }
        if let Some(block) = self.try_pool(routed, padded, requested) {
            return Some(block);
        }
        for index in 0..self.pools.len() {
            if index != routed
                && self.pools[index].lends_free_ranges()
                && let Some(block) = self.try_pool(index, padded, requested)
            {
                return Some(block);
            }
        }
        None
    }

    /// Whether [`Ladder::try_reserve`] would place `padded` bytes.
    pub fn can_place(&self, padded: u64) -> bool {
        let routed = self.routed(padded);
        self.pools.iter().enumerate().any(|(index, rung)| {
            (index >= routed || rung.lends_free_ranges()) && rung.pool().can_place(padded)
        })
    }

    /// Asks the device for a new page and places `padded` bytes in it; `Ok(None)` when every
    /// pool from the request's own on is at its cap. The request's own pool grows by a new
    /// page; a pool at its cap passes the request on to
    /// the next, which first tries its free memory. A device refusal ends the climb: the caller
    /// cleans up and asks again.
    pub fn grow(
        &mut self,
        backend: &mut dyn DeviceMemory,
        padded: u64,
        requested: u64,
    ) -> Result<Option<Block>, AllocError> {
        let routed = self.routed(padded);
        let grown = self.grow_from(backend, routed, padded, requested)?;
        if grown.is_some() {
            self.placed(routed, padded);
        }
        Ok(grown)
    }

    /// [`Ladder::grow`] for a request routed to pool `routed`: a buffer of its own for a
    /// repeated size, else the climb from its pool.
    fn grow_from(
        &mut self,
        backend: &mut dyn DeviceMemory,
        routed: usize,
        padded: u64,
        requested: u64,
    ) -> Result<Option<Block>, AllocError> {
        if let Some(own) = self.repeated(routed, padded) {
            match self.pools[own].pool_mut().grow(backend, padded, requested) {
                Ok(Some(block)) => return Ok(Some(Block { pool: own, ..block })),
                // No room for one buffer of its size (a cap, or the device): pages of the
                // request's own pool may still fit.
                Ok(None) | Err(AllocError::OutOfMemory) => {}
                Err(error) => return Err(error),
            }
        }
        for index in routed..self.pools.len() {
            if index > routed
                && let Some(block) = self.try_pool(index, padded, requested)
            {
                return Ok(Some(block));
            }
            let grown = self.pools[index]
                .pool_mut()
                .grow(backend, padded, requested)?;
            if let Some(block) = grown {
                return Ok(Some(Block {
                    pool: index,
                    ..block
                }));
            }
            tracing::debug!(target: "gpuworld::memory", pool = index, requested, "pool at its cap: spilling to the next pool");
        }
        Ok(None)
    }

    /// Returns every free page of its pools to the device; the bytes returned.
    pub fn cleanup(&mut self, backend: &mut dyn DeviceMemory) -> u64 {
        self.pools
            .iter_mut()
            .map(|rung| rung.pool_mut().cleanup(backend))
            .sum()
    }

    /// Returns its pools' pages free for their `release_after_ticks`; the bytes returned.
    pub fn periodic_cleanup(&mut self, backend: &mut dyn DeviceMemory, tick: u64) -> u64 {
        self.pools
            .iter_mut()
            .map(|rung| rung.pool_mut().periodic_cleanup(backend, tick))
            .sum()
    }

    /// Returns free pages until at least `at_least` bytes went back or none is left, the largest
    /// pools first (their idle pages are the ones worth a device call); the bytes returned.
    pub fn release_idle(&mut self, backend: &mut dyn DeviceMemory, at_least: u64) -> u64 {
        let mut freed = 0;
        for rung in self.pools.iter_mut().rev() {
            if freed >= at_least {
                break;
            }
            freed += rung.pool_mut().release_idle(backend, at_least - freed);
        }
        freed
    }
}

/// What the ladder's compacting pools do ([`Compacts`](crate::memory::pool::Compacts)), over all of them.
impl Ladder {
    /// Empties pages of its compacting pools, the largest pools first, until `needed` bytes
    /// retire ([`Compacts::evacuate`](crate::memory::pool::Compacts::evacuate)).
    pub fn evacuate(
        &mut self,
        needed: u64,
        movable: &mut dyn FnMut(&Block) -> Movable,
        moves: &mut Vec<(Block, Block)>,
    ) -> u64 {
        let mut retired = 0;
        for index in (0..self.pools.len()).rev() {
            if retired >= needed {
                break;
            }
            let mark = moves.len();
            let mut stamped = |block: &Block| {
                movable(&Block {
                    pool: index,
                    ..*block
                })
            };
            let Some(pool) = self.pools[index].compacting() else {
                continue;
            };
            retired += pool.evacuate(needed - retired, &mut stamped, moves);
            for (from, to) in &mut moves[mark..] {
                from.pool = index;
                to.pool = index;
            }
        }
        retired
    }

    /// Returns the pages its pools retired through evacuation `through` to the device.
    pub fn release_retiring(&mut self, backend: &mut dyn DeviceMemory, through: u64) -> u64 {
        (self.pools.iter_mut())
            .filter_map(Rung::compacting)
            .map(|pool| pool.release_retiring(backend, through))
            .sum()
    }

    /// The latest evacuation whose pages still retire in any pool; 0 when none does.
    pub fn retiring_generation(&self) -> u64 {
        (self.pools.iter())
            .filter_map(Rung::compacting_ref)
            .map(|pool| pool.retiring_generation())
            .max()
            .unwrap_or(0)
    }

    /// Bytes of pages retiring in its pools.
    pub fn retiring(&self) -> u64 {
        (self.pools.iter())
            .filter_map(Rung::compacting_ref)
            .map(|pool| pool.retiring())
            .sum()
    }

    /// Tells its compacting pools the room left within the budget and the recent peak.
    pub fn set_room(&mut self, room: u64, peak: u64) {
        for pool in self.pools.iter_mut().filter_map(Rung::compacting) {
            pool.set_room(room, peak);
        }
    }

    /// Compacts for `padded` bytes ([`Compacts::compact`](crate::memory::pool::Compacts::compact)): the request's own pool, else the
    /// next larger pool that can (a compacting pool takes every request routed past the pools
    /// before it).
    pub fn compact(
        &mut self,
        padded: u64,
        requested: u64,
        movable: &mut dyn FnMut(&Block) -> Movable,
        moves: &mut Vec<(Block, Block)>,
    ) -> Option<Block> {
        let routed = self.routed(padded);
        for index in routed..self.pools.len() {
            let mark = moves.len();
            // Blocks are asked about and reported with their pool's position.
            let mut stamped = |block: &Block| {
                movable(&Block {
                    pool: index,
                    ..*block
                })
            };
            let Some(pool) = self.pools[index].compacting() else {
                continue;
            };
            if let Some(block) = pool.compact(padded, requested, &mut stamped, moves) {
                for (from, to) in &mut moves[mark..] {
                    from.pool = index;
                    to.pool = index;
                }
                self.placed(routed, padded);
                return Some(Block {
                    pool: index,
                    ..block
                });
            }
        }
        None
    }
}
