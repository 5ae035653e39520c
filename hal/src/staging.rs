//! Staging memory for transfers, lent on the caller's own thread without the runtime lock: the
//! allocator a backend hands its clients (page-locked on CUDA, pooled heap buffers elsewhere), the
//! size classes its free buffers are kept in, and the copy that fills it on several threads.

use crate::bytes::{HostBytes, HostMemoryHome};
use parking_lot::Mutex;
use rayon::prelude::*;
use std::ptr::NonNull;
use std::sync::{Arc, Weak};

/// Lends host memory for transfers; shared by every thread of a client, so it locks only itself.
pub trait StagingAllocator: Send + Sync + 'static {
    /// `len` bytes of staging memory, initialised but with unspecified contents; `None` when it
    /// has none to lend (callers then use ordinary heap memory).
    fn take(&self, len: usize) -> Option<HostBytes>;
}

impl std::fmt::Debug for dyn StagingAllocator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StagingAllocator").finish_non_exhaustive()
    }
}

/// Smallest size class, in bytes.
const MIN_CLASS: usize = 4096;

/// Free buffers by power-of-two size class (from 4 KiB), at most `max_free_bytes` of them kept,
/// the last given back first: the reuse rule of every staging pool. A loop of same-sized
/// transfers takes back the buffer it gave back, so it allocates only on its first round.
#[derive(Debug)]
pub struct FreeBuffers<T> {
    /// Index `i` holds buffers of `1 << i` bytes.
    free: Vec<Vec<T>>,
    free_bytes: usize,
    max_free_bytes: usize,
}

impl<T> FreeBuffers<T> {
    /// No free buffers; at most `max_free_bytes` will be kept.
    pub fn new(max_free_bytes: usize) -> FreeBuffers<T> {
        FreeBuffers {
            free: (0..usize::BITS).map(|_| Vec::new()).collect(),
            free_bytes: 0,
            max_free_bytes,
        }
    }

    /// The capacity of the class that holds `len` bytes; `None` past the largest class.
    pub fn class(len: usize) -> Option<usize> {
        len.max(MIN_CLASS).checked_next_power_of_two()
    }

    /// A free buffer of class `class`, if one is kept.
    pub fn take(&mut self, class: usize) -> Option<T> {
        let buffer = self.free.get_mut(class.trailing_zeros() as usize)?.pop()?;
        self.free_bytes -= class;
        Some(buffer)
    }

    /// Keeps `buffer` of class `class` for reuse, and returns the buffers for the caller to free:
    /// older free buffers, largest first, when keeping this one would pass the bound (the
    /// transfers of the moment decide what is kept), or `buffer` itself if it alone passes it.
    pub fn put(&mut self, class: usize, buffer: T) -> Vec<T> {
        let index = class.trailing_zeros() as usize;
        if class > self.max_free_bytes || index >= self.free.len() {
            return vec![buffer];
        }
        let mut evicted = Vec::new();
        for older in (0..self.free.len()).rev() {
            while self.free_bytes + class > self.max_free_bytes {
                let Some(old) = self.free[older].pop() else {
                    break;
                };
                self.free_bytes -= 1 << older;
                evicted.push(old);
            }
        }
        self.free[index].push(buffer);
        self.free_bytes += class;
        evicted
    }

    /// Bytes held in free buffers.
    pub fn free_bytes(&self) -> usize {
        self.free_bytes
    }

    /// Every free buffer, leaving none.
    pub fn drain(&mut self) -> Vec<T> {
        self.free_bytes = 0;
        self.free.iter_mut().flat_map(std::mem::take).collect()
    }
}

/// Free heap staging bytes a client keeps by default: enough for a 256 MiB transfer loop to run
/// without faulting fresh pages in every round.
pub const DEFAULT_MAX_FREE_HEAP_STAGING: usize = 256 << 20;

/// Heap buffers lent for transfers and kept for reuse by size class: the staging of backends
/// without faster memory. Not page-locked.
#[derive(Debug)]
pub struct HeapStaging {
    free: Mutex<FreeBuffers<Box<[u8]>>>,
    /// This pool, for the bytes it lends to find their way back.
    me: Weak<HeapStaging>,
}

impl HeapStaging {
    /// A pool that keeps at most `max_free_bytes` of free buffers.
    pub fn new(max_free_bytes: usize) -> Arc<HeapStaging> {
        Arc::new_cyclic(|me| HeapStaging {
            free: Mutex::new(FreeBuffers::new(max_free_bytes)),
            me: me.clone(),
        })
    }

    /// Bytes held in free buffers.
    pub fn free_bytes(&self) -> usize {
        self.free.lock().free_bytes()
    }
}

impl StagingAllocator for HeapStaging {
    fn take(&self, len: usize) -> Option<HostBytes> {
        let class = FreeBuffers::<Box<[u8]>>::class(len)?;
        let home: Arc<dyn HostMemoryHome> = self.me.upgrade()?;
        let reused = self.free.lock().take(class);
        // Zeroed memory comes from the allocator untouched: its pages fault in once, on first
        // use, and never again while the buffer is reused.
        let buffer = reused.unwrap_or_else(|| vec![0u8; class].into_boxed_slice());
        let ptr = NonNull::from(Box::leak(buffer)).cast::<u8>();
        // SAFETY: `ptr` is a leaked `Box<[u8]>` of `class >= len` initialised bytes, owned by
        // nobody else until `give_back` rebuilds the box.
        Some(unsafe { HostBytes::lent(ptr, len, class, home) })
    }
}

impl HostMemoryHome for HeapStaging {
    fn give_back(&self, ptr: NonNull<u8>, capacity: usize) {
        // SAFETY: `take` leaked a `Box<[u8]>` of exactly `capacity` bytes at `ptr`, and each lent
        // buffer comes back once.
        let buffer =
            unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr.as_ptr(), capacity)) };
        // What the bound leaves out is freed here, outside the lock.
        let evicted = self.free.lock().put(capacity, buffer);
        drop(evicted);
    }

    fn is_page_locked(&self) -> bool {
        false
    }
}

/// Bytes each thread copies at least; a copy under two pieces stays on the calling thread, where
/// handing work to other threads would cost more than it saves.
pub(crate) const COPY_PIECE: usize = 512 << 10;

/// Copies `src` into `dst` (as many bytes as the shorter holds), on several threads (rayon's
/// pool) when it is large: one thread copies pageable memory well below memory bandwidth.
pub fn copy_in_parallel(dst: &mut [u8], src: &[u8]) {
    in_pieces(dst, src, <[u8]>::copy_from_slice);
}

/// Copies `src` into staging memory `dst` that a device's DMA engine reads next (as many bytes as
/// the shorter holds), on several threads when it is large, as [`copy_in_parallel`]; on x86-64
/// the stores bypass the cache (non-temporal), so the host does not first read every line of the
/// destination it overwrites, nor keep bytes in cache that only the device reads.
pub fn stage_in_parallel(dst: &mut [u8], src: &[u8]) {
    in_pieces(dst, src, copy_streaming);
}

/// Copies as many bytes as the shorter of `dst` and `src` holds with `copy` (equal lengths), on
/// rayon's pool in pieces of `COPY_PIECE` when there are two or more, else on this thread.
fn in_pieces(dst: &mut [u8], src: &[u8], copy: fn(&mut [u8], &[u8])) {
    let len = dst.len().min(src.len());
    let (dst, src) = (&mut dst[..len], &src[..len]);
    if len < 2 * COPY_PIECE {
        dst.copy_from_slice(src);
        return;
    }
    dst.par_chunks_mut(COPY_PIECE)
        .zip(src.par_chunks(COPY_PIECE))
        .for_each(|(to, from)| copy(to, from));
}

/// `dst.copy_from_slice(src)` (equal lengths) with non-temporal stores where the target has them.
fn copy_streaming(dst: &mut [u8], src: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
        const LINE: usize = 64;
        let len = dst.len().min(src.len());
        // Up to the first 16-byte boundary of `dst`, then whole lines streamed, then the rest.
        let head = dst.as_ptr().align_offset(16).min(len);
        let body = (len - head) / LINE * LINE;
        dst[..head].copy_from_slice(&src[..head]);
        let (to, from) = (&mut dst[head..head + body], &src[head..head + body]);
        for (line_to, line_from) in to.chunks_exact_mut(LINE).zip(from.chunks_exact(LINE)) {
            let (out, input) = (
                line_to.as_mut_ptr().cast::<__m128i>(),
                line_from.as_ptr().cast::<__m128i>(),
            );
            // SAFETY: SSE2 is part of x86-64. Each line is 64 bytes of both slices (so four
            // 16-byte loads and stores stay inside them), loads are unaligned, and `out` is
            // 16-byte aligned: `head` aligned `dst`, and every line is a multiple of 16 from it.
            unsafe {
                let parts = [
                    _mm_loadu_si128(input),
                    _mm_loadu_si128(input.add(1)),
                    _mm_loadu_si128(input.add(2)),
                    _mm_loadu_si128(input.add(3)),
                ];
                for (index, part) in parts.into_iter().enumerate() {
                    _mm_stream_si128(out.add(index), part);
                }
            }
        }
        // SAFETY: SSE2 is part of x86-64. The fence orders the streamed stores before anything
        // this thread does next (the join that hands the buffer to the device).
        unsafe { _mm_sfence() };
        dst[head + body..len].copy_from_slice(&src[head + body..len]);
    }
    #[cfg(not(target_arch = "x86_64"))]
    dst.copy_from_slice(src);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_back_buffer_serves_the_next_take_of_its_class() {
        let pool = HeapStaging::new(1 << 20);
        let first = pool.take(5000).expect("heap staging");
        let address = first.as_ptr();
        assert_eq!(first.len(), 5000);
        assert!(!first.is_page_locked());
        drop(first);
        assert_eq!(pool.free_bytes(), 8192);
        let again = pool.take(8000).expect("heap staging");
        assert_eq!(again.as_ptr(), address, "same class, same buffer");
        assert_eq!(pool.free_bytes(), 0);
        let other = pool.take(9000).expect("heap staging");
        assert_ne!(other.as_ptr(), address, "another class, another buffer");
    }

    #[test]
    fn free_buffers_past_the_bound_are_freed_largest_first() {
        let mut free = FreeBuffers::new(16384);
        assert!(free.put(4096, 'a').is_empty());
        assert!(free.put(8192, 'b').is_empty());
        assert!(free.put(4096, 'c').is_empty());
        assert_eq!(
            free.put(8192, 'd'),
            vec!['b'],
            "the larger older buffer makes room"
        );
        assert_eq!(
            free.put(32768, 'e'),
            vec!['e'],
            "a buffer past the bound is not kept"
        );
        assert_eq!(free.put(16384, 'f'), vec!['d', 'c', 'a'], "largest first");
        assert_eq!(free.free_bytes(), 16384);
        assert_eq!(free.take(16384), Some('f'));
        assert_eq!(free.take(4096), None);
    }

    #[test]
    fn the_buffer_of_the_last_transfer_is_kept_over_older_ones() {
        let pool = HeapStaging::new(8192);
        let (a, b) = (pool.take(4096), pool.take(4096));
        drop((a, b));
        let large = pool.take(8192).expect("heap staging");
        let address = large.as_ptr();
        drop(large);
        assert_eq!(pool.free_bytes(), 8192);
        assert_eq!(pool.take(8000).map(|b| b.as_ptr()), Some(address));
    }

    #[test]
    fn lent_bytes_outlive_their_pool() {
        let pool = HeapStaging::new(1 << 20);
        let mut bytes = pool.take(10).expect("heap staging");
        drop(pool);
        bytes.copy_from_slice(&[3; 10]);
        assert_eq!(bytes, [3u8; 10]);
    }

    #[test]
    fn size_classes_are_powers_of_two_from_4_kib() {
        assert_eq!(FreeBuffers::<()>::class(0), Some(4096));
        assert_eq!(FreeBuffers::<()>::class(4097), Some(8192));
        assert_eq!(FreeBuffers::<()>::class(256 << 20), Some(256 << 20));
        assert_eq!(FreeBuffers::<()>::class(usize::MAX), None);
    }

    #[test]
    fn parallel_copies_move_every_byte_of_odd_lengths() {
        for len in [0, 3, COPY_PIECE * 2 - 1, COPY_PIECE * 5 + 7] {
            let src: Vec<u8> = (0..len).map(|i| (i * 31 + 7) as u8).collect();
            let mut dst = vec![0u8; len];
            copy_in_parallel(&mut dst, &src);
            assert_eq!(dst, src, "{len} bytes");
            let mut staged = vec![0u8; len];
            stage_in_parallel(&mut staged, &src);
            assert_eq!(staged, src, "{len} bytes staged");
        }
    }

    #[test]
    fn streamed_copies_keep_every_byte_at_any_alignment() {
        let src: Vec<u8> = (0..4099usize).map(|i| (i * 13 + 1) as u8).collect();
        for (to_offset, from_offset) in [(0, 0), (1, 0), (0, 3), (7, 5), (15, 16), (16, 1)] {
            for len in [0, 1, 15, 16, 63, 64, 65, 200, 4000] {
                let mut dst = vec![0u8; len + 32];
                copy_streaming(
                    &mut dst[to_offset..to_offset + len],
                    &src[from_offset..from_offset + len],
                );
                assert_eq!(
                    &dst[to_offset..to_offset + len],
                    &src[from_offset..from_offset + len],
                    "{len} bytes, to +{to_offset}, from +{from_offset}"
                );
                assert!(dst[..to_offset].iter().all(|&b| b == 0), "nothing before");
                assert!(
                    dst[to_offset + len..].iter().all(|&b| b == 0),
                    "nothing after"
                );
            }
        }
    }
}
