//! Captured graphs (issue 28), as a backend sees them: the launches of a replay that it runs as
//! one unit ([`PlannedLaunch`], `Backend::graph_replay`: a CUDA graph), with the lanes of a
//! replay over several streams ([`ReplayLaneEnd`]). What a capture records is the runtime's
//! (`gpuworld_systems::graph`).

use crate::kernel::{ExecutionMode, Kernel};
use smallvec::SmallVec;

/// One launch of a replay that a backend runs as one unit ([`Backend::graph_replay`](crate::backend::Backend::graph_replay)):
/// its kernel, grid, which of the replay task's bindings it takes, in order, its scalars and
/// mode, and, in a replay over several streams, its lane and the launches of other lanes it
/// follows.
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
    /// The stream it was captured on, as a lane of the replay: 0 for the replay task's own
    /// stream, then the others in order of first use. One lane runs its launches in order.
    pub lane: u8,
    /// Earlier launches (indices in the replay) on other lanes that it must follow: for each
    /// other lane, the last one that writes a buffer it binds or binds a buffer it writes, as
    /// the runtime would order the eager launches with events.
    pub after: SmallVec<[u16; 2]>,
}

/// The end of one lane (a stream other than the replay task's own) of a replay over several
/// streams, queued on that stream right after the replay, binding the buffers the lane's
/// launches wrote: later work on that stream (a `sync` included) follows the replay as it would
/// the lane's launches. The interleave stage submits nothing for it: the waits it issues before
/// it are the point.
#[derive(Debug)]
pub struct ReplayLaneEnd;

impl crate::native::NativeOp for ReplayLaneEnd {
    fn name(&self) -> &'static str {
        "graph replay lane end"
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
