//! [`Binding`]: a byte range of a handle, named by id. A leaf of the crate (it imports only ids
//! and errors), so the inbox, kernels and handles can all name it without importing each other.
//! A binding comes only from a [`crate::handle::Handle`] (`handle.binding()`, `Binding::from(&handle)`)
//! and narrows only inside its range ([`Binding::slice`]), so it cannot claim memory its handle
//! does not have; the ingest stage checks it against the handle's memory all the same.
//! [`CubeCount`], how many cubes a launch runs, lives here too: a dynamic count is a binding.

use crate::error::BindingError;
use crate::ids::{HandleId, RuntimeId};
use std::ops::Range;

/// A byte range of a handle; it does not keep the memory alive, so a binding used after its
/// handle was released is reported as [`BindingError::ReleasedHandle`].
///
/// Its fields are private: a binding is made from a handle, never by hand.
///
/// ```compile_fail
/// use gpuworld_systems::{Binding, HandleId, RuntimeId};
///
/// let forged = Binding {
///     handle: HandleId(1),
///     runtime: RuntimeId(0),
///     offset_start: 0,
///     offset_end: 0,
///     capacity: 1 << 30,
/// };
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding {
    handle: HandleId,
    runtime: RuntimeId,
    offset_start: u64,
    offset_end: u64,
    capacity: u64,
}

impl Binding {
    /// The binding of a handle's range; `crate::Handle::binding` calls this.
    pub(crate) fn of_handle(
        handle: HandleId,
        runtime: RuntimeId,
        offset_start: u64,
        offset_end: u64,
        capacity: u64,
    ) -> Binding {
        Binding {
            handle,
            runtime,
            offset_start,
            offset_end,
            capacity,
        }
    }

    /// The handle.
    pub fn handle(&self) -> HandleId {
        self.handle
    }

    /// The runtime that made the handle.
    pub fn runtime(&self) -> RuntimeId {
        self.runtime
    }

    /// Bytes skipped at the start of the allocation.
    pub fn offset_start(&self) -> u64 {
        self.offset_start
    }

    /// Bytes skipped at the end of the allocation.
    pub fn offset_end(&self) -> u64 {
        self.offset_end
    }

    /// Size of the whole allocation.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The byte range `start..end` inside the allocation, or why there is none.
    pub fn range(&self) -> Result<(u64, u64), BindingError> {
        let end = self.capacity.checked_sub(self.offset_end);
        match end {
            Some(end) if self.offset_start <= end => Ok((self.offset_start, end)),
            _ => Err(BindingError::OutOfRange {
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

    /// The bytes `bytes` of this binding's range, counted from its start;
    /// [`BindingError::OutOfRange`] when they are not inside it (or this binding's own range is not
    /// valid).
    pub fn slice(self, bytes: Range<u64>) -> Result<Binding, BindingError> {
        let (start, end) = self.range()?;
        let inside = bytes.start <= bytes.end && bytes.end <= end - start;
        if !inside {
            return Err(BindingError::OutOfRange {
                handle: self.handle,
                start: start.saturating_add(bytes.start),
                end: start.saturating_add(bytes.end),
                size: self.capacity,
            });
        }
        Ok(Binding {
            offset_start: start + bytes.start,
            offset_end: self.capacity - (start + bytes.end),
            ..self
        })
    }

    /// This binding's range cut into consecutive bindings of `bytes` bytes (the last one
    /// shorter); [`BindingError::OutOfRange`] when its range is not valid.
    pub fn chunks(self, bytes: u64) -> Result<impl Iterator<Item = Binding>, BindingError> {
        let (start, end) = self.range()?;
        let step = bytes.max(1);
        Ok((start..end)
            .step_by(step as usize)
            .map(move |from| Binding {
                offset_start: from,
                offset_end: self.capacity - end.min(from.saturating_add(step)),
                ..self
            }))
    }

    /// Checks the binding belongs to `runtime` and has a valid range.
    pub fn validate(&self, runtime: RuntimeId) -> Result<(u64, u64), BindingError> {
        if self.runtime != runtime {
            return Err(BindingError::ForeignHandle {
                handle: self.handle,
                owner: self.runtime,
                this: runtime,
            });
        }
        self.range()
    }
}

/// How many cubes a launch runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CubeCount {
    /// A count known when launching.
    Static(u32, u32, u32),
    /// A count read on the device from a buffer holding three `u32`: x, y, z.
    Dynamic(Binding),
}

impl CubeCount {
    /// `x` cubes along one axis.
    pub fn new_1d(x: u32) -> CubeCount {
        CubeCount::Static(x, 1, 1)
    }

    /// `x * y` cubes on a grid.
    pub fn new_2d(x: u32, y: u32) -> CubeCount {
        CubeCount::Static(x, y, 1)
    }

    /// Enough cubes of `units_per_cube` to cover `elements` along one axis.
    pub fn covering(elements: u64, units_per_cube: u32) -> CubeCount {
        let cubes = elements.div_ceil(units_per_cube.max(1) as u64);
        CubeCount::Static(u32::try_from(cubes).unwrap_or(u32::MAX), 1, 1)
    }

    /// Enough `tile x tile` cubes to cover a `width x height` grid.
    pub fn covering_2d(width: u32, height: u32, tile: u32) -> CubeCount {
        let tile = tile.max(1);
        CubeCount::Static(width.div_ceil(tile), height.div_ceil(tile), 1)
    }

    /// Whether this count is statically known to run no cube at all.
    pub fn is_empty(&self) -> bool {
        matches!(self, CubeCount::Static(x, y, z) if *x == 0 || *y == 0 || *z == 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of_64_bytes() -> Binding {
        Binding::of_handle(HandleId(3), RuntimeId(1), 0, 0, 64)
    }

    #[test]
    fn a_slice_inside_the_range_narrows_it() {
        let part = of_64_bytes().slice(8..40).unwrap();
        assert_eq!(part.range().unwrap(), (8, 40));
        assert_eq!(part.slice(4..8).unwrap().range().unwrap(), (12, 16));
        assert_eq!(part.capacity(), 64);
    }

    #[test]
    fn a_slice_past_the_range_or_reversed_is_out_of_range() {
        let part = of_64_bytes().slice(8..40).unwrap();
        assert!(matches!(
            part.slice(0..33),
            Err(BindingError::OutOfRange {
                start: 8,
                end: 41,
                size: 64,
                ..
            })
        ));
        #[allow(clippy::reversed_empty_ranges)]
        let reversed = 5..4;
        assert!(matches!(
            part.slice(reversed),
            Err(BindingError::OutOfRange { .. })
        ));
    }

    #[test]
    fn chunks_cover_the_range_in_order() {
        let part = of_64_bytes().slice(4..30).unwrap();
        let ranges: Vec<_> = part
            .chunks(10)
            .unwrap()
            .map(|b| b.range().unwrap())
            .collect();
        assert_eq!(ranges, [(4, 14), (14, 24), (24, 30)]);
    }
}
