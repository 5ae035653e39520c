//! What a backend reports about each operation it ran while asked to time them: its stream, what
//! it was, the bytes it bound and when it started and ended on the backend's clock. A leaf: the
//! backend trait, the host backends and the trace recorder all name these types.

use crate::backend::DeviceStream;
use crate::kernel::Kernel;
use std::time::Instant;

/// What an operation was.
#[derive(Clone, Copy, Debug)]
pub enum OpKind {
    /// A kernel launch.
    Launch(Kernel),
    /// A host-to-device copy.
    Write,
    /// A device-to-host copy.
    Read,
    /// A wait on another stream's event, which ended when that event passed.
    Wait {
        /// The stream whose event it waited for.
        origin: DeviceStream,
    },
}

impl OpKind {
    /// The slice name in a trace: the kernel's name, or `write`, `read`, `wait`.
    pub fn name(&self) -> &'static str {
        match self {
            OpKind::Launch(kernel) => kernel.name,
            OpKind::Write => "write",
            OpKind::Read => "read",
            OpKind::Wait { .. } => "wait",
        }
    }

    /// The slice category in a trace.
    pub fn category(&self) -> &'static str {
        match self {
            OpKind::Launch(_) => "kernel",
            OpKind::Write | OpKind::Read => "copy",
            OpKind::Wait { .. } => "wait",
        }
    }
}

/// One operation as the device ran it; times in nanoseconds on the backend's [`OpClock`].
#[derive(Clone, Copy, Debug)]
pub struct OpTime {
    /// The stream that ran it.
    pub stream: DeviceStream,
    /// What it was.
    pub kind: OpKind,
    /// Bytes it bound (a launch: its buffers; a copy: its length).
    pub bytes: u64,
    /// When it started.
    pub start_ns: u64,
    /// When it ended.
    pub end_ns: u64,
}

impl OpTime {
    /// Its duration in nanoseconds.
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
}

/// The clock a backend times operations with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpClock {
    /// Host time since this instant (the cpu backend's workers).
    HostSince(Instant),
    /// The sim's virtual device time, which starts at 0.
    Virtual,
    /// The device's own timestamps of launches and copies, from an arbitrary origin (CUDA
    /// events).
    Device,
    /// The device's own timestamps of launches only, from an arbitrary origin (wgpu timestamp
    /// queries); copies are timed by submission.
    DeviceLaunches,
}
