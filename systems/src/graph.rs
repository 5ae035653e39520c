//! Captured graphs (issue 28): what a capture records ([`Recorded`], kept by the inbox's
//! [`Recording`], `inbox/capture.rs`), and the launches of a replay that a backend runs as one
//! unit ([`PlannedLaunch`], `Backend::graph_replay`: a CUDA graph).

pub use crate::inbox::capture::{Recorded, Recording};
use crate::kernel::{ExecutionMode, Kernel};
use smallvec::SmallVec;

/// One launch of a replay that a backend runs as one unit ([`crate::Backend::graph_replay`]):
/// its kernel, grid, which of the replay task's bindings it takes, in order, its scalars and
/// mode.
#[derive(Clone, Debug)]
pub struct PlannedLaunch {
    /// The kernel.
    pub kernel: Kernel,
    /// Cubes along x, y, z (none zero).
    pub grid: [u32; 3],
    /// Indices into the replay task's bindings, in the kernel's order.
    pub bindings: SmallVec<[u16; 4]>,
    /// 32-bit scalars.
    pub scalars: SmallVec<[u32; 4]>,
    /// Checked or unchecked.
    pub mode: ExecutionMode,
}
