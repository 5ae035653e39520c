//! The pinned host staging pool: page-locked buffers (cuMemHostAlloc) reused by power-of-two size
//! class. Uploads from pageable memory and every readback go through one, so copies are truly
//! asynchronous. Buffers are lent out as [`HostBytes`] (to the backend's own copies, to clients'
//! chunked uploads and `reserve_staging`, and as the bytes a read returns) and come back to the
//! pool when dropped, from any thread. The pool keeps at most a bounded number of free bytes and
//! frees the rest, so a loop of same-sized transfers allocates page-locked memory only once.

use cudarc::driver::sys;
use gpuworld_hal::backend::{HostBytes, HostMemoryHome, StagingAllocator};
use gpuworld_hal::staging::FreeBuffers;
use parking_lot::Mutex;
use std::ptr::NonNull;
use std::sync::{Arc, Weak};

/// One page-locked host buffer.
struct PinnedBuffer {
    ptr: NonNull<u8>,
    capacity: usize,
}

// SAFETY: the buffer is plain page-locked memory owned by whoever holds the value.
unsafe impl Send for PinnedBuffer {}

/// Free pinned buffers by size class, and every byte allocated.
struct Pool {
    free: FreeBuffers<PinnedBuffer>,
    allocated_bytes: usize,
}

/// The pinned pool, shared by the backend and every buffer it lent. It holds its own retain of
/// the device's primary context, so lent memory stays valid after the backend is gone.
pub struct PinnedHome {
    device: sys::CUdevice,
    context: sys::CUcontext,
    pool: Mutex<Pool>,
}

// SAFETY: the context handle is only used to make the context current around driver calls, which
// the CUDA driver allows from any thread; the pool is behind a mutex.
unsafe impl Send for PinnedHome {}
// SAFETY: as above.
unsafe impl Sync for PinnedHome {}

impl PinnedHome {
    /// A pool for `device`'s primary context that keeps at most `max_free_bytes` of free buffers;
    /// `None` when the context cannot be retained.
    pub fn new(device: sys::CUdevice, max_free_bytes: usize) -> Option<Arc<PinnedHome>> {
        let mut context = std::ptr::null_mut();
        // SAFETY: retains the primary context of a valid device, released in `Drop`.
        let code = unsafe { sys::cuDevicePrimaryCtxRetain(&mut context, device) };
        (code == sys::CUresult::CUDA_SUCCESS).then(|| {
            Arc::new(PinnedHome {
                device,
                context,
                pool: Mutex::new(Pool {
                    free: FreeBuffers::new(max_free_bytes),
                    allocated_bytes: 0,
                }),
            })
        })
    }

    /// `len` bytes of page-locked memory (contents undefined, zero where fresh from the
    /// driver); `None` when the driver refuses page-locked memory.
    pub fn take(self: &Arc<Self>, len: usize) -> Option<HostBytes> {
        let class = FreeBuffers::<PinnedBuffer>::class(len)?;
        let reused = self.pool.lock().free.take(class);
        let buffer = match reused {
            Some(buffer) => buffer,
            None => self.allocate(class)?,
        };
        let home: Arc<dyn HostMemoryHome> = self.clone();
        // SAFETY: the buffer is `class >= len` bytes of page-locked memory owned by nobody else
        // until it comes back through `give_back`; cuMemHostAlloc memory is readable as bytes.
        Some(unsafe { HostBytes::lent(buffer.ptr, len, buffer.capacity, home) })
    }

    fn allocate(&self, class: usize) -> Option<PinnedBuffer> {
        let mut ptr = std::ptr::null_mut();
        let code = self.in_context(|| {
            // SAFETY: allocates `class` bytes of page-locked memory in the current context,
            // freed by `free_buffer`.
            unsafe { sys::cuMemHostAlloc(&mut ptr, class, sys::CU_MEMHOSTALLOC_PORTABLE) }
        });
        let Some(ptr) =
            NonNull::new(ptr.cast::<u8>()).filter(|_| code == sys::CUresult::CUDA_SUCCESS)
        else {
            tracing::warn!(target: "gpuworld::memory", bytes = class, ?code, "no pinned host memory");
            return None;
        };
        self.pool.lock().allocated_bytes += class;
        Some(PinnedBuffer {
            ptr,
            capacity: class,
        })
    }

    /// Runs `f` with this pool's context current on the calling thread, then restores the
    /// thread's previous context.
    fn in_context<R>(&self, f: impl FnOnce() -> R) -> R {
        // SAFETY: the context is retained by this value; push and pop are balanced.
        let pushed =
            unsafe { sys::cuCtxPushCurrent_v2(self.context) } == sys::CUresult::CUDA_SUCCESS;
        let result = f();
        if pushed {
            let mut previous = std::ptr::null_mut();
            // SAFETY: pops the context pushed above.
            unsafe { sys::cuCtxPopCurrent_v2(&mut previous) };
        }
        result
    }

    fn free_buffer(&self, buffer: PinnedBuffer) {
        self.in_context(|| {
            // SAFETY: the buffer came from cuMemHostAlloc and no copy uses it any more.
            unsafe { sys::cuMemFreeHost(buffer.ptr.as_ptr().cast()) };
        });
    }

    /// Page-locked bytes held, free or lent.
    pub fn allocated_bytes(&self) -> usize {
        self.pool.lock().allocated_bytes
    }

    /// Frees every free buffer.
    pub fn clear(&self) {
        let buffers: Vec<PinnedBuffer> = {
            let mut pool = self.pool.lock();
            let buffers = pool.free.drain();
            pool.allocated_bytes -= buffers.iter().map(|b| b.capacity).sum::<usize>();
            buffers
        };
        for buffer in buffers {
            self.free_buffer(buffer);
        }
    }
}

impl HostMemoryHome for PinnedHome {
    fn give_back(&self, ptr: NonNull<u8>, capacity: usize) {
        let evicted = {
            let mut pool = self.pool.lock();
            let evicted = pool.free.put(capacity, PinnedBuffer { ptr, capacity });
            pool.allocated_bytes -= evicted.iter().map(|b| b.capacity).sum::<usize>();
            evicted
        };
        // Freed outside the lock: cuMemFreeHost can take a while.
        for buffer in evicted {
            self.free_buffer(buffer);
        }
    }

    fn is_page_locked(&self) -> bool {
        true
    }
}

/// The pool as the staging allocator clients take upload memory from. It holds the pool weakly:
/// a client's reference must not count as memory lent out when the backend is dropped.
pub struct PinnedStaging(pub Weak<PinnedHome>);

impl StagingAllocator for PinnedStaging {
    fn take(&self, len: usize) -> Option<HostBytes> {
        self.0.upgrade()?.take(len)
    }
}

impl Drop for PinnedHome {
    fn drop(&mut self) {
        self.clear();
        // SAFETY: releases the retain made in `new`; every lent buffer has come back.
        unsafe { sys::cuDevicePrimaryCtxRelease_v2(self.device) };
    }
}

/// Gives up bytes a copy may still use, when no event can prove the copy finished: they are
/// never reused nor freed (a small leak on a path that already faulted its stream).
pub fn abandon(bytes: HostBytes) {
    tracing::warn!(target: "gpuworld::memory", bytes = bytes.len(), "pinned staging abandoned");
    std::mem::forget(bytes);
}
