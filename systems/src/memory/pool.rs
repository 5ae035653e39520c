//! What every pool of device memory does, as cubecl's `MemoryPool` trait: place a request in
//! free memory or in a new page, take it back, give free pages back to the device, report.
//! `SlicedPool`, `ExclusivePool` (the persistent pool is one, with exact fit), `CompactingPool`
//! and `MappedPool` implement it; the [`Ladder`](crate::memory::Ladder) of them routes requests
//! by size and reaches each by its kind for what only that kind does (a sliced pool's growth,
//! a compacting pool's moves); `MemoryPool` holds a ladder and the persistent pool, and names a
//! slice's by [`PoolIndex`].

use crate::backend::{AllocError, Memory, StorageId};
use crate::error::MemoryError;
use crate::memory::Block;
use crate::memory::report::PoolReport;

/// The device calls a pool makes: pages in and out. Every backend's [`Memory`] role is one.
pub trait DeviceMemory {
    /// A buffer of `size` bytes ([`Memory::allocate`]).
    fn allocate(&mut self, size: u64) -> Result<StorageId, AllocError>;
    /// Returns a buffer to the device ([`Memory::deallocate`]).
    ///
    /// # Safety
    /// As for [`Memory::deallocate`]: `storage` was allocated here and not yet returned, and no
    /// work queued or running on any stream uses it any more.
    unsafe fn deallocate(&mut self, storage: StorageId);
    /// Reserves device addresses ([`Memory::reserve_addresses`]).
    fn reserve_addresses(&mut self, size: u64) -> Result<StorageId, AllocError>;
    /// Maps pages under reserved addresses ([`Memory::map_pages`]).
    fn map_pages(&mut self, storage: StorageId, offset: u64, len: u64) -> Result<(), AllocError>;
    /// Unmaps pages ([`Memory::unmap_pages`]).
    ///
    /// # Safety
    /// As for [`Memory::unmap_pages`].
    unsafe fn unmap_pages(&mut self, storage: StorageId, offset: u64, len: u64);
    /// Returns unmapped pages' memory ([`Memory::trim_pages`]).
    fn trim_pages(&mut self);
    /// Returns reserved addresses ([`Memory::free_addresses`]).
    ///
    /// # Safety
    /// As for [`Memory::free_addresses`].
    unsafe fn free_addresses(&mut self, storage: StorageId);
}

impl<B: Memory> DeviceMemory for B {
    fn allocate(&mut self, size: u64) -> Result<StorageId, AllocError> {
        Memory::allocate(self, size)
    }

    unsafe fn deallocate(&mut self, storage: StorageId) {
        // SAFETY: the caller keeps `Memory::deallocate`'s contract, which this one repeats.
        unsafe { Memory::deallocate(self, storage) }
    }

    fn reserve_addresses(&mut self, size: u64) -> Result<StorageId, AllocError> {
        Memory::reserve_addresses(self, size)
    }

    fn trim_pages(&mut self) {
        Memory::trim_pages(self);
    }

    fn map_pages(&mut self, storage: StorageId, offset: u64, len: u64) -> Result<(), AllocError> {
        Memory::map_pages(self, storage, offset, len)
    }

    unsafe fn unmap_pages(&mut self, storage: StorageId, offset: u64, len: u64) {
        // SAFETY: the caller keeps `Memory::unmap_pages`'s contract, which this one repeats.
        unsafe { Memory::unmap_pages(self, storage, offset, len) }
    }

    unsafe fn free_addresses(&mut self, storage: StorageId) {
        // SAFETY: the caller keeps `Memory::free_addresses`'s contract, which this one repeats.
        unsafe { Memory::free_addresses(self, storage) }
    }
}

/// One pool of device memory. `padded` is a request rounded up to the device alignment,
/// `requested` the bytes asked for (what the pool's report counts as in use).
pub trait Pool: std::fmt::Debug + Send + Sync {
    /// Places `padded` bytes in free memory, without asking the device.
    fn try_reserve(&mut self, padded: u64, requested: u64) -> Option<Block>;
    /// Whether [`Pool::try_reserve`] would place `padded` bytes.
    fn can_place(&self, padded: u64) -> bool;
    /// Asks the device for a new page and places `padded` bytes in it; `Ok(None)` when the
    /// pool's cap leaves no room.
    fn grow(
        &mut self,
        backend: &mut dyn DeviceMemory,
        padded: u64,
        requested: u64,
    ) -> Result<Option<Block>, AllocError>;
    /// Makes `block`, which held `requested` bytes, free for reuse.
    fn release(&mut self, block: &Block, requested: u64) -> Result<(), MemoryError>;
    /// The backend buffer of `block`'s page.
    fn storage(&self, block: &Block) -> Option<StorageId>;
    /// Returns every free page to the device; the bytes returned.
    fn cleanup(&mut self, backend: &mut dyn DeviceMemory) -> u64;
    /// Returns pages free for the pool's `release_after_ticks`; the bytes returned.
    fn periodic_cleanup(&mut self, backend: &mut dyn DeviceMemory, tick: u64) -> u64;
    /// Returns free pages, those free the longest first, until at least `at_least` bytes went
    /// back or none is left; the bytes returned.
    fn release_idle(&mut self, backend: &mut dyn DeviceMemory, at_least: u64) -> u64;
    /// Free blocks waiting for reuse (free ranges of pages, free buffers).
    fn free_blocks(&self) -> usize;
    /// The pool's counts now, which it keeps as it places, releases, splits and joins blocks
    /// and as pages come and go.
    fn report(&self) -> &PoolReport;
    /// [`Pool::report`], to count what happens to a block outside the pool (a parked slice
    /// taken by its stream's next allocation: `PoolReport::resized`).
    fn report_mut(&mut self) -> &mut PoolReport;
    /// Splits the live `block` after its first `at` bytes (a multiple of the alignment, shorter
    /// than the block) into two live blocks: `block` keeps the head, and the tail is returned,
    /// counted as an allocation of no bytes. `None`, with nothing changed, where the pool keeps
    /// one block per buffer.
    fn split(&mut self, _block: &Block, _at: u64) -> Option<Block> {
        None
    }
    /// Whether [`Pool::split`] splits the live `block`, and the pool wants it split: a page made
    /// for one large request is not shared, so a small part of it is not taken.
    fn splits(&self, _block: &Block) -> bool {
        false
    }
    /// Joins the live `first` and the live `second` right after it in the same page into one
    /// live block, counted as one allocation of both blocks' bytes; `None`, with nothing
    /// changed, where the pool keeps one block per buffer.
    fn join(&mut self, _first: &Block, _second: &Block) -> Option<Block> {
        None
    }
}

/// What a pool that moves live blocks adds to [`Pool`]: it keeps its pages within the budget,
/// compacts a page for a request, and empties pages that retire once the copies reading them
/// were submitted.
pub trait Compacts {
    /// Tells the pool how many bytes the pools may still take from the device within their
    /// budget, before a [`Pool::grow`]: a pool whose pages are larger than its requests keeps
    /// its next page within it where it can.
    fn set_room(&mut self, room: u64, peak: u64);
    /// Empties pages by moving their live blocks (those `movable` lets go) to free ranges of
    /// other pages, until at least `needed` bytes of pages retire; the bytes that do. A retiring
    /// page goes back to the device at [`Compacts::release_retiring`], once the copies reading it
    /// were submitted.
    fn evacuate(
        &mut self,
        needed: u64,
        movable: &mut dyn FnMut(&Block) -> Movable,
        moves: &mut Vec<(Block, Block)>,
    ) -> u64;
    /// Returns the pages retired by evacuations up to `through` ([`Compacts::retiring_generation`])
    /// to the device; the bytes returned.
    fn release_retiring(&mut self, backend: &mut dyn DeviceMemory, through: u64) -> u64;
    /// The latest evacuation whose pages still retire; 0 when none does.
    fn retiring_generation(&self) -> u64;
    /// Bytes of pages retiring.
    fn retiring(&self) -> u64;
    /// Makes room for `padded` bytes by moving live blocks that `movable` lets go to free
    /// ranges elsewhere in the pool (each move pushed on `moves` as old block, new block), and
    /// places the request in the room they left; `None`, with nothing moved, where it cannot.
    fn compact(
        &mut self,
        padded: u64,
        requested: u64,
        movable: &mut dyn FnMut(&Block) -> Movable,
        moves: &mut Vec<(Block, Block)>,
    ) -> Option<Block>;
}

/// What a live block allows a compaction to do with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Movable {
    /// It stays where it is (its handle is pinned, released, parked, or used where a move
    /// cannot follow).
    No,
    /// It may move; no work wrote its bytes yet, so none need copying.
    Unwritten,
    /// It may move, and its bytes are copied on the device.
    Copied,
    /// Memory the requesting stream released and may reuse at once (parked for it): a
    /// compaction may take it into the request's place as if free, without moving it, and the
    /// request inherits the stream's use of it.
    Reusable,
}

/// Which pool of a `MemoryPool` holds a slice (within the ladder, the block says which).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PoolIndex {
    /// The ladder.
    Ladder,
    /// The persistent pool.
    Persistent,
}
