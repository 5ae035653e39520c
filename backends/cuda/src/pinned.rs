//! The pinned host staging pool: page-locked buffers (cuMemHostAlloc) reused by power-of-two size
//! class. Every upload and readback goes through one, so copies are truly asynchronous; the pool
//! keeps at most a bounded number of free bytes and returns the rest to the driver.

use cudarc::driver::sys;
use std::collections::HashMap;

/// Smallest size class, in bytes.
const MIN_CLASS: usize = 4096;

/// One page-locked host buffer.
pub struct PinnedBuffer {
    ptr: *mut u8,
    capacity: usize,
}

impl PinnedBuffer {
    /// The buffer's first `len` bytes (`len <= capacity`).
    pub fn bytes(&self, len: usize) -> &[u8] {
        // SAFETY: `ptr` is a live allocation of `capacity` bytes owned by this buffer; callers read
        // only after the copy that filled it completed.
        unsafe { std::slice::from_raw_parts(self.ptr, len.min(self.capacity)) }
    }

    /// The buffer's first `len` bytes, to fill.
    pub fn bytes_mut(&mut self, len: usize) -> &mut [u8] {
        // SAFETY: as in `bytes`; no copy uses the buffer while the caller fills it.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, len.min(self.capacity)) }
    }

    /// The address the device copies from or to.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }
}

/// Free pinned buffers by size class.
pub struct PinnedPool {
    free: HashMap<usize, Vec<PinnedBuffer>>,
    free_bytes: usize,
    max_free_bytes: usize,
    allocated_bytes: usize,
}

impl PinnedPool {
    /// A pool that keeps at most `max_free_bytes` of free buffers.
    pub fn new(max_free_bytes: usize) -> PinnedPool {
        PinnedPool {
            free: HashMap::new(),
            free_bytes: 0,
            max_free_bytes,
            allocated_bytes: 0,
        }
    }

    /// The size class that holds `len` bytes.
    fn class(len: usize) -> usize {
        len.max(MIN_CLASS).next_power_of_two()
    }

    /// A buffer of at least `len` bytes; `None` when the driver refuses page-locked memory.
    /// The context must be current.
    pub fn take(&mut self, len: usize) -> Option<PinnedBuffer> {
        let class = Self::class(len);
        if let Some(buffer) = self.free.get_mut(&class).and_then(Vec::pop) {
            self.free_bytes -= class;
            return Some(buffer);
        }
        let mut ptr = std::ptr::null_mut();
        // SAFETY: allocates `class` bytes of page-locked memory in the current context; the
        // pointer is owned by the returned buffer and freed by `give_back` or `Drop`.
        let result = unsafe { sys::cuMemHostAlloc(&mut ptr, class, sys::CU_MEMHOSTALLOC_PORTABLE) };
        if result != sys::CUresult::CUDA_SUCCESS || ptr.is_null() {
            tracing::warn!(target: "gpuworld::memory", bytes = class, ?result, "no pinned host memory");
            return None;
        }
        self.allocated_bytes += class;
        Some(PinnedBuffer {
            ptr: ptr.cast(),
            capacity: class,
        })
    }

    /// Returns a buffer whose copies have completed.
    pub fn give_back(&mut self, buffer: PinnedBuffer) {
        if self.free_bytes + buffer.capacity > self.max_free_bytes {
            self.free_buffer(buffer);
            return;
        }
        self.free_bytes += buffer.capacity;
        self.free.entry(buffer.capacity).or_default().push(buffer);
    }

    /// Gives up a buffer that a copy may still use, when no event can prove the copy finished:
    /// it is never reused nor freed (a small leak on a path that already faulted its stream).
    pub fn abandon(&mut self, buffer: PinnedBuffer) {
        let PinnedBuffer { capacity, .. } = buffer;
        tracing::warn!(target: "gpuworld::memory", bytes = capacity, "pinned staging abandoned");
    }

    /// Page-locked bytes held, free or in use.
    pub fn allocated_bytes(&self) -> usize {
        self.allocated_bytes
    }

    fn free_buffer(&mut self, buffer: PinnedBuffer) {
        self.allocated_bytes -= buffer.capacity;
        // SAFETY: the buffer came from cuMemHostAlloc and no copy uses it any more.
        unsafe {
            sys::cuMemFreeHost(buffer.ptr.cast());
        }
    }

    /// Frees every free buffer (the context must be current and no copy in flight).
    pub fn clear(&mut self) {
        let buffers: Vec<PinnedBuffer> = self.free.drain().flat_map(|(_, v)| v).collect();
        self.free_bytes = 0;
        for buffer in buffers {
            self.free_buffer(buffer);
        }
    }
}
