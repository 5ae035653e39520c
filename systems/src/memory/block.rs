//! The words every pool and the memory's books share: the keys of slices and pages, where a
//! pool placed a request ([`Block`]), how loosely a request may take a block whole, and the error
//! for a stale page.

use crate::backend::StorageId;
use crate::error::MemoryError;
use slotmap::new_key_type;

new_key_type! {
    /// A live allocation; generational, so a released or stale key is detected, never misread.
    #[cfg_attr(not(feature = "internals"), doc(hidden))]
    pub struct SliceKey;
    /// A page (backend buffer) of one pool; never renumbered, not even by cleanup.
    #[cfg_attr(not(feature = "internals"), doc(hidden))]
    pub struct PageKey;
}

/// Where a pool placed a request: a byte range of one of its pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "internals"), doc(hidden))]
pub struct Block {
    /// The page.
    pub page: PageKey,
    /// The page's backend buffer.
    pub storage: StorageId,
    /// First byte in the page (a multiple of the device alignment).
    pub offset: u64,
    /// Bytes set aside, padding included.
    pub len: u64,
    /// Which pool of a [`Ladder`](super::Ladder) placed it (its position in routing order); 0 from a pool on its
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

/// The largest block a request of `padded` bytes may take whole (a buffer of an exclusive pool, a
/// parked slice): one it wastes at most a fifth of. Pages of their own in sliced pools are reused
/// more tightly (`sliced.rs`, `DEDICATED_FIT_DIVISOR`).
pub(crate) fn largest_fit(padded: u64) -> u64 {
    // len - padded <= len / 5  <=>  4 len <= 5 padded
    padded.saturating_mul(5) / 4
}

/// The error for a page key that no longer names a page.
pub(crate) fn stale_page(key: PageKey) -> MemoryError {
    MemoryError::StaleHandle {
        what: format!("memory page {key:?}").into(),
    }
}
