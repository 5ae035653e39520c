//! [`Binding`]: a byte range of a handle, named by id. A leaf of the crate (it imports only ids
//! and errors), so the inbox, kernels and handles can all name it without importing each other.

use crate::error::Error;
use crate::ids::{HandleId, RuntimeId};

/// A byte range of a handle; it does not keep the memory alive, so a binding used after its
/// handle was released is reported as [`Error::ReleasedHandle`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding {
    /// The handle.
    pub handle: HandleId,
    /// The runtime that made the handle.
    pub runtime: RuntimeId,
    /// Bytes skipped at the start.
    pub offset_start: u64,
    /// Bytes skipped at the end.
    pub offset_end: u64,
    /// Size of the whole allocation.
    pub capacity: u64,
}

impl Binding {
    /// The byte range `start..end` inside the allocation, or why there is none.
    pub fn range(&self) -> Result<(u64, u64), Error> {
        let end = self.capacity.checked_sub(self.offset_end);
        match end {
            Some(end) if self.offset_start <= end => Ok((self.offset_start, end)),
            _ => Err(Error::OutOfRange {
                handle: self.handle,
                start: self.offset_start,
                end: self.capacity.saturating_sub(self.offset_end),
                size: self.capacity,
            }),
        }
    }

    /// Size of the range in bytes (0 if invalid).
    pub fn size(&self) -> u64 {
        self.range().map_or(0, |(s, e)| e - s)
    }

    /// Checks the binding belongs to `runtime` and has a valid range.
    pub fn validate(&self, runtime: RuntimeId) -> Result<(u64, u64), Error> {
        if self.runtime != runtime {
            return Err(Error::ForeignHandle {
                handle: self.handle,
                owner: self.runtime,
                this: runtime,
            });
        }
        self.range()
    }
}
