//! Kernel definitions and sources ([`gpuworld_hal::kernel`]), and [`CubeCount`], how many cubes
//! a launch runs (a dynamic count is read from a binding, which is the runtime's).

pub use crate::binding::CubeCount;
pub use gpuworld_hal::kernel::*;
