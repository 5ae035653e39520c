//! The one vocabulary of work on a runtime: an [`Op`] is what a client asks for, as data —
//! cloned, compared and described. The inbox queues it ([`super::Command::Op`]), ingest turns
//! it into entities and tasks, a capture keeps it for a graph to replay, and the recorder
//! (`gpuworld::testing`) writes it to a file and reads it back. What is not data (a reply
//! channel, bytes still arriving, a backend's own work) stays in [`super::Command`]'s other
//! variants.
//!
//! A launch's parts are read-only ([`Launch`]): safe code makes only checked launches, and an
//! unchecked one that `unsafe` code vouched for can be queued again as it is (a graph's replay,
//! a clone of its op) but never turned into another launch.

use crate::binding::Binding;
use crate::bytes::HostBytes;
use crate::ids::{HandleId, StreamId};
use crate::kernel::{CubeCount, ExecutionMode, Kernel, LaunchMode};
use crate::memory::AllocationMode;
use smallvec::SmallVec;

/// One operation on a runtime's memory or streams, as data.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// Reserve `size` bytes for `handle`, optionally filled with `data`.
    Create {
        /// The new handle.
        handle: HandleId,
        /// Bytes to reserve.
        size: u64,
        /// Initial contents.
        data: Option<HostBytes>,
        /// The stream it is created on.
        stream: StreamId,
    },
    /// Copy `data` into `dst`.
    Write {
        /// Destination range.
        dst: Binding,
        /// Bytes to copy.
        data: HostBytes,
        /// The stream it runs on.
        stream: StreamId,
    },
    /// Run a kernel.
    Launch(Launch),
    /// Submit the stream's queued work.
    Flush {
        /// The stream.
        stream: StreamId,
    },
    /// The last clone of a handle was dropped.
    Release {
        /// The handle.
        handle: HandleId,
    },
    /// Return free memory to the device.
    MemoryCleanup,
    /// Open a window of `mode` for the stream's allocations, until the matching close.
    OpenAllocationMode {
        /// The stream whose allocations it governs.
        stream: StreamId,
        /// The mode.
        mode: AllocationMode,
    },
    /// Close the stream's innermost allocation-mode window.
    CloseAllocationMode {
        /// The stream.
        stream: StreamId,
    },
    /// Keep the handle's memory for a captured graph or a render lease: a release while pinned
    /// waits for the last unpin.
    Pin {
        /// The handle.
        handle: HandleId,
        /// Who holds it (shown in snapshots; the memory rule is the same).
        holder: PinHolder,
    },
    /// The graph or lease that pinned the handle is gone.
    Unpin {
        /// The handle.
        handle: HandleId,
        /// Who held it.
        holder: PinHolder,
    },
}

impl Op {
    /// What the op is, for listings: `create`, `write`, `launch`, `flush`, `release`, ...
    pub fn kind(&self) -> &'static str {
        match self {
            Op::Create { .. } => "create",
            Op::Write { .. } => "write",
            Op::Launch(_) => "launch",
            Op::Flush { .. } => "flush",
            Op::Release { .. } => "release",
            Op::MemoryCleanup => "memory cleanup",
            Op::OpenAllocationMode { .. } => "allocation mode",
            Op::CloseAllocationMode { .. } => "allocation mode's end",
            Op::Pin { .. } => "pin",
            Op::Unpin { .. } => "unpin",
        }
    }

    /// A one-line description: the kernel or the bytes, and the stream.
    pub fn describe(&self) -> String {
        match self {
            Op::Launch(launch) => format!(
                "launch {} ({} buffers, {} scalars) on {}",
                launch.kernel.name,
                launch.buffers.len(),
                launch.scalars.len(),
                launch.stream
            ),
            Op::Write { dst, data, stream } => format!(
                "write {} bytes into handle {} on {stream}",
                data.len(),
                dst.handle()
            ),
            Op::Create {
                handle,
                size,
                stream,
                ..
            } => format!("create handle {handle} of {size} bytes on {stream}"),
            Op::Flush { stream } => format!("flush {stream}"),
            Op::OpenAllocationMode { stream, mode } => {
                format!("open allocation mode {mode:?} on {stream}")
            }
            Op::CloseAllocationMode { stream } => format!("close allocation mode on {stream}"),
            Op::Release { handle } => format!("release handle {handle}"),
            Op::Pin { handle, holder } => format!("pin handle {handle} for a {holder:?}"),
            Op::Unpin { handle, holder } => format!("unpin handle {handle} for a {holder:?}"),
            Op::MemoryCleanup => "memory cleanup".to_string(),
        }
    }
}

/// A kernel launch. Its parts are read-only once made: an unchecked launch (made only through
/// the `unsafe` [`LaunchMode::unchecked`]) can be queued again as it is, never with other
/// bindings, count or scalars:
///
/// ```compile_fail,E0616
/// use gpuworld_systems::inbox::{Command, Op};
/// fn reuse(seen: &Command) {
///     if let Command::Op(Op::Launch(launch)) = seen {
///         let mut other = launch.clone();
///         other.buffers.clear();
///     }
/// }
/// ```
#[derive(Clone, Debug)]
pub struct Launch {
    pub(crate) kernel: Kernel,
    pub(crate) count: CubeCount,
    pub(crate) buffers: SmallVec<[Binding; 4]>,
    pub(crate) scalars: SmallVec<[u32; 4]>,
    pub(crate) mode: ExecutionMode,
    pub(crate) stream: StreamId,
}

impl Launch {
    /// A launch of `kernel` over `count` cubes with `buffers` (in the kernel's order) and 32-bit
    /// `scalars`, on `stream`, checked or unchecked as `mode` says.
    pub fn new(
        kernel: Kernel,
        count: CubeCount,
        buffers: SmallVec<[Binding; 4]>,
        scalars: SmallVec<[u32; 4]>,
        mode: LaunchMode,
        stream: StreamId,
    ) -> Launch {
        Launch {
            kernel,
            count,
            buffers,
            scalars,
            mode: mode.execution_mode(),
            stream,
        }
    }

    /// The kernel.
    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// How many cubes.
    pub fn count(&self) -> &CubeCount {
        &self.count
    }

    /// Buffer bindings, in the kernel's order.
    pub fn buffers(&self) -> &[Binding] {
        &self.buffers
    }

    /// 32-bit scalars.
    pub fn scalars(&self) -> &[u32] {
        &self.scalars
    }

    /// The scalars, to change between a graph's replays; `None` for an unchecked launch, whose
    /// safety was vouched for the scalars it was made with.
    pub fn scalars_mut(&mut self) -> Option<&mut [u32]> {
        (self.mode == ExecutionMode::Checked).then_some(&mut self.scalars[..])
    }

    /// Checked, or unchecked where `unsafe` code vouched for its accesses.
    pub fn mode(&self) -> ExecutionMode {
        self.mode
    }

    /// The stream it runs on.
    pub fn stream(&self) -> StreamId {
        self.stream
    }

    /// The handles it uses: its buffers', then a dynamic count's.
    pub fn handles(&self) -> SmallVec<[HandleId; 4]> {
        let mut handles: SmallVec<[HandleId; 4]> =
            self.buffers.iter().map(Binding::handle).collect();
        if let CubeCount::Dynamic(binding) = &self.count {
            handles.push(binding.handle());
        }
        handles
    }
}

impl PartialEq for Launch {
    /// The same launch: the same kernel (by definition), count, bindings, scalars, mode and
    /// stream.
    fn eq(&self, other: &Launch) -> bool {
        std::ptr::eq(self.kernel, other.kernel)
            && self.count == other.count
            && self.buffers == other.buffers
            && self.scalars == other.scalars
            && self.mode == other.mode
            && self.stream == other.stream
    }
}

impl From<Launch> for Op {
    fn from(launch: Launch) -> Op {
        Op::Launch(launch)
    }
}

/// Who holds a pin on a handle's memory ([`Op::Pin`]): a captured graph (or a transfer it
/// captured) or a render lease. The memory rule is the same for both; snapshots name the holder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum PinHolder {
    /// A captured graph.
    #[default]
    Graph,
    /// A render lease.
    Lease,
}
