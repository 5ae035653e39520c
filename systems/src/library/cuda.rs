//! CUDA C sources of the kernel library, for the cuda backend. `None` marks a kernel the cuda
//! backend cannot run yet.

/// Source of `noop`.
pub const NOOP: Option<&str> = None;
/// Source of `fill`.
pub const FILL: Option<&str> = None;
/// Source of `copy`.
pub const COPY: Option<&str> = None;
/// Source of `add`.
pub const ADD: Option<&str> = None;
/// Source of `scale`.
pub const SCALE: Option<&str> = None;
/// Source of `stencil2d`.
pub const STENCIL: Option<&str> = None;
