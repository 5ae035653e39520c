//! Host bytes on their way to or from a device: an ordinary heap allocation, or memory a backend
//! lent (page-locked staging on CUDA) that goes back to the backend's pool when dropped.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::Arc;

/// Where lent host memory goes back to when its [`HostBytes`] is dropped.
pub trait HostMemoryHome: Send + Sync + 'static {
    /// Takes back `capacity` bytes at `ptr`, lent earlier by [`HostBytes::lent`].
    fn give_back(&self, ptr: NonNull<u8>, capacity: usize);
}

/// Memory a backend lent, with the home it returns to.
struct Lent {
    ptr: NonNull<u8>,
    len: usize,
    capacity: usize,
    home: Arc<dyn HostMemoryHome>,
}

enum Inner {
    Heap(Vec<u8>),
    Lent(Lent),
}

/// Bytes in host memory that a transfer reads from or writes to.
///
/// [`HostBytes::is_page_locked`] tells whether the device can copy them directly (CUDA DMA);
/// otherwise a backend stages them first. Dereferences to `[u8]` either way.
pub struct HostBytes {
    inner: Inner,
}

// SAFETY: lent memory is owned exclusively by this value (like a `Box<[u8]>`) until it is given
// back in `Drop`; the home is `Send + Sync`.
unsafe impl Send for HostBytes {}
// SAFETY: `&HostBytes` only reads the bytes.
unsafe impl Sync for HostBytes {}

impl HostBytes {
    /// Bytes in ordinary heap memory.
    pub fn from_vec(bytes: Vec<u8>) -> HostBytes {
        HostBytes {
            inner: Inner::Heap(bytes),
        }
    }

    /// `len` bytes of lent memory at `ptr`, given back to `home` (with `capacity`) when dropped.
    ///
    /// # Safety
    /// `ptr` must point to `capacity >= len` bytes, initialised, valid and owned by nobody else
    /// until `home.give_back(ptr, capacity)` is called.
    pub unsafe fn lent(
        ptr: NonNull<u8>,
        len: usize,
        capacity: usize,
        home: Arc<dyn HostMemoryHome>,
    ) -> HostBytes {
        HostBytes {
            inner: Inner::Lent(Lent {
                ptr,
                len: len.min(capacity),
                capacity,
                home,
            }),
        }
    }

    /// Whether the bytes are in memory a backend lent (page-locked on CUDA).
    pub fn is_page_locked(&self) -> bool {
        matches!(self.inner, Inner::Lent(_))
    }

    /// Shortens the bytes to `len` (no effect if they are already shorter).
    pub fn truncate(&mut self, len: usize) {
        match &mut self.inner {
            Inner::Heap(bytes) => bytes.truncate(len),
            Inner::Lent(lent) => lent.len = lent.len.min(len),
        }
    }

    /// The bytes as a `Vec`: free for heap bytes, a copy for lent ones (which then go back).
    pub fn into_vec(mut self) -> Vec<u8> {
        match &mut self.inner {
            Inner::Heap(bytes) => std::mem::take(bytes),
            Inner::Lent(_) => self.to_vec(),
        }
    }
}

impl Deref for HostBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.inner {
            Inner::Heap(bytes) => bytes,
            // SAFETY: `ptr` holds `len` initialised bytes owned by this value (`lent`'s contract).
            Inner::Lent(lent) => unsafe { std::slice::from_raw_parts(lent.ptr.as_ptr(), lent.len) },
        }
    }
}

impl DerefMut for HostBytes {
    fn deref_mut(&mut self) -> &mut [u8] {
        match &mut self.inner {
            Inner::Heap(bytes) => bytes,
            // SAFETY: as in `deref`, and `&mut self` makes the access exclusive.
            Inner::Lent(lent) => unsafe {
                std::slice::from_raw_parts_mut(lent.ptr.as_ptr(), lent.len)
            },
        }
    }
}

impl Drop for HostBytes {
    fn drop(&mut self) {
        if let Inner::Lent(lent) = &self.inner {
            lent.home.give_back(lent.ptr, lent.capacity);
        }
    }
}

impl From<Vec<u8>> for HostBytes {
    fn from(bytes: Vec<u8>) -> HostBytes {
        HostBytes::from_vec(bytes)
    }
}

impl From<&[u8]> for HostBytes {
    fn from(bytes: &[u8]) -> HostBytes {
        HostBytes::from_vec(bytes.to_vec())
    }
}

impl Default for HostBytes {
    fn default() -> HostBytes {
        HostBytes::from_vec(Vec::new())
    }
}

impl fmt::Debug for HostBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostBytes")
            .field("len", &self.len())
            .field("page_locked", &self.is_page_locked())
            .finish()
    }
}

impl PartialEq for HostBytes {
    fn eq(&self, other: &HostBytes) -> bool {
        **self == **other
    }
}

impl PartialEq<[u8]> for HostBytes {
    fn eq(&self, other: &[u8]) -> bool {
        **self == *other
    }
}

impl PartialEq<Vec<u8>> for HostBytes {
    fn eq(&self, other: &Vec<u8>) -> bool {
        **self == **other
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;

    /// A home that hands out boxed slices and counts what came back.
    #[derive(Default)]
    struct CountingHome {
        returned: Mutex<Vec<usize>>,
    }

    impl HostMemoryHome for CountingHome {
        fn give_back(&self, ptr: NonNull<u8>, capacity: usize) {
            // SAFETY: `lend` leaked a `Box<[u8]>` of exactly `capacity` bytes at `ptr`.
            drop(unsafe {
                Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr.as_ptr(), capacity))
            });
            self.returned.lock().push(capacity);
        }
    }

    fn lend(home: &Arc<CountingHome>, len: usize, capacity: usize) -> HostBytes {
        let memory = Box::leak(vec![7u8; capacity].into_boxed_slice());
        let ptr = NonNull::from(memory).cast::<u8>();
        // SAFETY: the leaked box is `capacity` initialised bytes owned by nobody else.
        unsafe { HostBytes::lent(ptr, len, capacity, home.clone()) }
    }

    #[test]
    fn lent_bytes_read_write_and_go_home_once() {
        let home = Arc::new(CountingHome::default());
        let mut bytes = lend(&home, 3, 16);
        assert!(bytes.is_page_locked());
        assert_eq!(&*bytes, &[7, 7, 7]);
        bytes.copy_from_slice(&[1, 2, 3]);
        bytes.truncate(2);
        assert_eq!(bytes.into_vec(), vec![1, 2]);
        assert_eq!(*home.returned.lock(), vec![16]);
    }

    #[test]
    fn heap_bytes_move_into_a_vec_without_copying() {
        let vec = vec![1u8, 2, 3];
        let address = vec.as_ptr();
        let bytes = HostBytes::from(vec);
        assert!(!bytes.is_page_locked());
        let back = bytes.into_vec();
        assert_eq!(back.as_ptr(), address);
        assert_eq!(back, vec![1, 2, 3]);
    }
}
