//! Host bytes on their way to or from a device: an ordinary heap allocation, or memory a backend
//! lent (page-locked staging on CUDA) that goes back to the backend's pool when dropped.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::Arc;

/// Where lent host memory goes back to when its [`HostBytes`] is dropped.
pub trait HostMemoryHome: Send + Sync + 'static {
    /// Takes back `capacity` bytes at `ptr`, lent earlier by [`HostBytes::lent`].
    fn give_back(&self, ptr: NonNull<u8>, capacity: usize);
    /// Whether the memory this home lends is page-locked, so a device may copy it directly.
    fn is_page_locked(&self) -> bool;
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

/// Bytes in host memory that a transfer reads from or writes to, and what reads return.
///
/// [`HostBytes::is_page_locked`] tells whether the device can copy them directly (CUDA DMA);
/// otherwise a backend stages them first. Dereferences to `[u8]` either way, compares equal to
/// byte slices, arrays and `Vec`s holding the same bytes, and prints like a byte slice;
/// [`HostBytes::into_vec`] (or `Vec::from`) turns it into a `Vec`.
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

    /// Whether the bytes are page-locked memory a backend lent (CUDA), which its device copies
    /// directly.
    pub fn is_page_locked(&self) -> bool {
        match &self.inner {
            Inner::Heap(_) => false,
            Inner::Lent(lent) => lent.home.is_page_locked(),
        }
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

impl Clone for HostBytes {
    /// A copy on the heap, whatever memory the original is in.
    fn clone(&self) -> HostBytes {
        HostBytes::from_vec(self.to_vec())
    }
}

impl From<HostBytes> for Vec<u8> {
    fn from(bytes: HostBytes) -> Vec<u8> {
        bytes.into_vec()
    }
}

impl AsRef<[u8]> for HostBytes {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl AsMut<[u8]> for HostBytes {
    fn as_mut(&mut self) -> &mut [u8] {
        self
    }
}

impl<'a> IntoIterator for &'a HostBytes {
    type Item = &'a u8;
    type IntoIter = std::slice::Iter<'a, u8>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<'a> IntoIterator for &'a mut HostBytes {
    type Item = &'a mut u8;
    type IntoIter = std::slice::IterMut<'a, u8>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter_mut()
    }
}

// `Eq` and `Hash` are those of the bytes, so borrowing as `[u8]` keeps map lookups consistent.
impl Borrow<[u8]> for HostBytes {
    fn borrow(&self) -> &[u8] {
        self
    }
}

impl Hash for HostBytes {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (**self).hash(state);
    }
}

// The bytes, as a byte slice prints them: where they live is no part of the value.
impl fmt::Debug for HostBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl PartialEq for HostBytes {
    fn eq(&self, other: &HostBytes) -> bool {
        **self == **other
    }
}

impl Eq for HostBytes {}

/// `HostBytes == other` and `other == HostBytes` for a type that dereferences to bytes.
macro_rules! bytes_eq {
    ($([$($params:tt)*] $other:ty),* $(,)?) => {$(
        impl<$($params)*> PartialEq<$other> for HostBytes {
            fn eq(&self, other: &$other) -> bool {
                **self == other[..]
            }
        }

        impl<$($params)*> PartialEq<HostBytes> for $other {
            fn eq(&self, other: &HostBytes) -> bool {
                self[..] == **other
            }
        }
    )*};
}

bytes_eq! {
    [] [u8],
    ['a] &'a [u8],
    [] Vec<u8>,
    [const N: usize] [u8; N],
    ['a, const N: usize] &'a [u8; N],
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

        fn is_page_locked(&self) -> bool {
            true
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

    #[test]
    fn bytes_compare_equal_to_slices_arrays_and_vecs_both_ways() {
        let home = Arc::new(CountingHome::default());
        let lent = lend(&home, 3, 16);
        let heap = HostBytes::from_vec(vec![7, 7, 7]);
        let slice: &[u8] = &[7, 7, 7];
        assert_eq!(lent, heap);
        assert_eq!(lent, *slice);
        assert_eq!(lent, slice);
        assert_eq!(lent, [7, 7, 7]);
        assert_eq!(lent, &[7, 7, 7]);
        assert_eq!(lent, vec![7, 7, 7]);
        assert_eq!(*slice, lent);
        assert_eq!(slice, lent);
        assert_eq!([7, 7, 7], lent);
        assert_eq!(&[7, 7, 7], lent);
        assert_eq!(vec![7, 7, 7], lent);
        assert_ne!(lent, [7, 7]);
        assert_ne!(vec![7, 7, 8], lent);
    }

    #[test]
    fn bytes_hash_and_borrow_as_their_slice() {
        let mut seen = std::collections::HashSet::new();
        seen.insert(HostBytes::from_vec(vec![1, 2]));
        let home = Arc::new(CountingHome::default());
        let mut lent = lend(&home, 2, 16);
        lent.copy_from_slice(&[1, 2]);
        assert!(seen.contains(&[1u8, 2][..]), "found by slice");
        assert!(seen.contains(&lent), "found by equal lent bytes");
        let as_ref: &[u8] = lent.as_ref();
        assert_eq!(as_ref, &[1, 2]);
        for byte in &mut lent {
            *byte += 1;
        }
        assert_eq!((&lent).into_iter().sum::<u8>(), 5, "iterates like a slice");
    }

    #[test]
    fn a_clone_is_a_heap_copy_and_a_vec_takes_the_bytes() {
        let home = Arc::new(CountingHome::default());
        let lent = lend(&home, 4, 16);
        let copy = lent.clone();
        assert!(!copy.is_page_locked());
        assert_ne!(copy.as_ptr(), lent.as_ptr());
        assert_eq!(copy, lent);
        drop(lent);
        assert_eq!(*home.returned.lock(), vec![16], "the original went home");
        assert_eq!(Vec::from(copy), vec![7, 7, 7, 7]);
    }

    #[test]
    fn debug_prints_the_bytes_like_a_slice() {
        let home = Arc::new(CountingHome::default());
        assert_eq!(format!("{:?}", lend(&home, 3, 16)), "[7, 7, 7]");
        assert_eq!(format!("{:?}", HostBytes::from_vec(vec![1, 2])), "[1, 2]");
        assert_eq!(format!("{:?}", HostBytes::default()), "[]");
    }
}
