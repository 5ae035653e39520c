//! Kernel definitions and sources ([`gpuworld_hal::kernel`]); [`CubeCount`],
//! how many cubes a launch runs (a dynamic count is read from a binding, which is the runtime's),
//! is public at the crate's root.

pub(crate) use crate::binding::CubeCount;
pub use gpuworld_hal::kernel::*;
