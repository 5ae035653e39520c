//! Host memory for the cpu and sim backends: 64-byte aligned buffers behind generational keys,
//! with an optional capacity so that out-of-memory can be provoked on purpose.

use crate::backend::{AllocError, Region, StorageId};
use crate::kernel::CpuBuffer;
use slotmap::{Key, KeyData, SlotMap, new_key_type};
use std::ptr::NonNull;

new_key_type! { struct BufferKey; }

#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Block([u8; 64]);

struct HostBuffer {
    ptr: NonNull<Block>,
    blocks: usize,
    size: u64,
}

// SAFETY: a HostBuffer owns its allocation exclusively (like a Box); access is mediated by
// HostMemory's methods and the atomics of CpuBuffer.
unsafe impl Send for HostBuffer {}
// SAFETY: as above.
unsafe impl Sync for HostBuffer {}

impl HostBuffer {
    fn new(size: u64) -> Option<HostBuffer> {
        let blocks = usize::try_from(size.div_ceil(64).max(1)).ok()?;
        let mut storage: Vec<Block> = Vec::new();
        storage.try_reserve_exact(blocks).ok()?;
        storage.resize(blocks, Block([0; 64]));
        let raw = Box::into_raw(storage.into_boxed_slice());
        let ptr = NonNull::new(raw.cast::<Block>())?;
        Some(HostBuffer { ptr, blocks, size })
    }

    fn base(&self) -> *mut u8 {
        self.ptr.as_ptr().cast::<u8>()
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        // SAFETY: ptr and blocks come from Box::into_raw of a boxed slice of this length.
        unsafe {
            drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                self.ptr.as_ptr(),
                self.blocks,
            )));
        }
    }
}

/// Host buffers addressed by [`StorageId`].
#[derive(Default)]
pub struct HostMemory {
    buffers: SlotMap<BufferKey, HostBuffer>,
    capacity: Option<u64>,
    allocated: u64,
}

impl HostMemory {
    /// Host memory that refuses allocations beyond `capacity` bytes, when given.
    pub fn new(capacity: Option<u64>) -> HostMemory {
        HostMemory {
            buffers: SlotMap::with_key(),
            capacity,
            allocated: 0,
        }
    }

    /// Bytes currently allocated.
    pub fn allocated(&self) -> u64 {
        self.allocated
    }

    /// The capacity, if capped.
    pub fn capacity(&self) -> Option<u64> {
        self.capacity
    }

    /// Allocates a zeroed buffer of `size` bytes.
    pub fn allocate(&mut self, size: u64) -> Result<StorageId, AllocError> {
        if let Some(cap) = self.capacity
            && self.allocated.saturating_add(size) > cap
        {
            return Err(AllocError::OutOfMemory);
        }
        let buffer = HostBuffer::new(size).ok_or(AllocError::OutOfMemory)?;
        self.allocated += size;
        let key = self.buffers.insert(buffer);
        Ok(StorageId(key.data().as_ffi()))
    }

    /// Frees a buffer; an unknown id is ignored.
    pub fn deallocate(&mut self, storage: StorageId) {
        if let Some(buffer) = self.buffers.remove(key(storage)) {
            self.allocated -= buffer.size;
        }
    }

    fn checked_range(&self, region: Region) -> Option<(&HostBuffer, usize, usize)> {
        let buffer = self.buffers.get(key(region.storage))?;
        let end = region.offset.checked_add(region.size)?;
        if end > buffer.size {
            return None;
        }
        Some((
            buffer,
            usize::try_from(region.offset).ok()?,
            usize::try_from(region.size).ok()?,
        ))
    }

    /// Copies `data` to the start of `region`; false if the region is not live memory.
    pub fn write(&self, region: Region, data: &[u8]) -> bool {
        let Some((buffer, offset, size)) = self.checked_range(region) else {
            return false;
        };
        let len = data.len().min(size);
        // SAFETY: the range is inside the live buffer (checked_range). The runtime orders every
        // access that conflicts with this write behind events (alignment analysis), so no other
        // work touches these bytes meanwhile.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), buffer.base().add(offset), len) };
        true
    }

    /// Copies `region` out; `None` if the region is not live memory.
    pub fn read(&self, region: Region) -> Option<Vec<u8>> {
        let mut out = vec![0u8; usize::try_from(region.size).ok()?];
        self.read_into(region, &mut out).then_some(out)
    }

    /// Copies the start of `region` into `out` (as many bytes as the shorter holds); false if
    /// the region is not live memory.
    pub fn read_into(&self, region: Region, out: &mut [u8]) -> bool {
        let Some((buffer, offset, size)) = self.checked_range(region) else {
            return false;
        };
        let len = out.len().min(size);
        // SAFETY: the range is inside the live buffer; the runtime orders conflicting writes
        // behind events, so the bytes are not written meanwhile.
        unsafe { std::ptr::copy_nonoverlapping(buffer.base().add(offset), out.as_mut_ptr(), len) };
        true
    }

    /// A kernel's view of `region`; `None` if the region is not live memory or not 4-byte aligned.
    pub fn view(&self, region: Region) -> Option<CpuBuffer> {
        let (buffer, offset, size) = self.checked_range(region)?;
        if offset % 4 != 0 {
            return None;
        }
        // SAFETY: base is 64-byte aligned and offset a multiple of 4, the range is in bounds,
        // and the buffer stays allocated while the owning backend runs the launch.
        Some(unsafe { CpuBuffer::new(buffer.base().add(offset), size) })
    }
}

fn key(storage: StorageId) -> BufferKey {
    BufferKey::from(KeyData::from_ffi(storage.0))
}
