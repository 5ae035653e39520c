//! The data a backend and the runtime exchange: buffers, regions, streams, events, readbacks,
//! device properties, allocation failures and operation times.

use crate::kernel::Kernel;
use std::sync::Arc;
use std::time::Instant;

/// A backend's buffer, as the backend numbers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StorageId(pub u64);

impl std::fmt::Display for StorageId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Host backends pack a generational key as (version << 32) | index.
        let (index, version) = (self.0 & 0xffff_ffff, self.0 >> 32);
        match version {
            0 | 1 => write!(f, "storage#{index}"),
            _ => write!(f, "storage#{index}v{version}"),
        }
    }
}

/// A byte range of one storage buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Region {
    /// The buffer.
    pub storage: StorageId,
    /// First byte.
    pub offset: u64,
    /// Length in bytes.
    pub size: u64,
}

impl Region {
    /// Whether the two regions share a byte.
    pub fn overlaps(&self, other: &Region) -> bool {
        self.storage == other.storage
            && self.offset < other.offset.saturating_add(other.size)
            && other.offset < self.offset.saturating_add(self.size)
    }

    /// Why a copy of this region into `dst` breaks the contract of
    /// [`Queue::copy`](super::Queue::copy), if it does: the sizes differ, or the ranges
    /// share a byte.
    pub fn copy_refusal(&self, dst: &Region) -> Option<&'static str> {
        if self.size != dst.size {
            Some("copy between regions of different sizes")
        } else if self.overlaps(dst) {
            Some("copy between overlapping regions")
        } else {
            None
        }
    }
}

/// A backend's stream, as the backend numbers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceStream(pub u32);

/// A point in a stream's work: complete once everything submitted before it has run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceEvent(pub u64);

/// Bits of a host backend's event that count operations; the stream index sits above them.
const EVENT_OPS_BITS: u32 = 40;

impl DeviceEvent {
    /// The event "stream `stream` completed `ops` operations", as the host backends number events.
    pub fn on_stream(stream: u32, ops: u64) -> DeviceEvent {
        DeviceEvent((u64::from(stream) << EVENT_OPS_BITS) | ops)
    }

    /// The stream and operation count of an event made by [`DeviceEvent::on_stream`].
    pub fn stream_and_ops(self) -> (u32, u64) {
        (
            (self.0 >> EVENT_OPS_BITS) as u32,
            self.0 & ((1 << EVENT_OPS_BITS) - 1),
        )
    }
}

/// A readback in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReadTicket(pub u64);

/// A launch's cube count as the device sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaunchCount {
    /// Known at submission.
    Static([u32; 3]),
    /// Three `u32` in device memory, read when the launch runs.
    Dynamic(Region),
}

/// How the runtime may place allocations in the backend's buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryLayout {
    /// Many allocations may share one buffer at offsets that are multiples of `alignment`.
    Sliced,
    /// Each allocation gets a buffer of its own.
    Exclusive,
}

/// What a device offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceProperties {
    /// The device's name.
    pub name: String,
    /// Total memory the runtime may use, in bytes.
    pub memory_bytes: u64,
    /// Alignment of every allocation and binding offset, in bytes.
    pub alignment: u64,
    /// How allocations may be placed in buffers.
    pub memory_layout: MemoryLayout,
    /// The device's numeric limits by name (e.g. `max_storage_buffer_binding_size`).
    pub limits: std::collections::BTreeMap<String, u64>,
    /// The optional features the device has enabled, by name, sorted.
    pub features: Vec<String>,
    /// Largest cube count per axis: a launch over it is `LaunchError::CubeCountOverLimit`.
    pub max_cube_count: [u32; 3],
    /// Most units of one cube per axis: a kernel whose cube dim is over it is
    /// `LaunchError::CubeDimOverLimit` at launch.
    pub max_cube_dim: [u32; 3],
    /// Most units of one cube in all (the product of a cube dim's sides), likewise enforced.
    pub max_units_per_cube: u32,
    /// Bytes of the largest single buffer the device can allocate, if it has such a limit: a
    /// larger request is `MemoryError::BufferTooLarge`, refused before any memory is touched.
    pub max_buffer_bytes: Option<u64>,
    /// Bytes of a device page, when the backend can reserve device addresses with no memory
    /// under them and map memory page by page
    /// ([`Memory::reserve_addresses`](super::Memory::reserve_addresses),
    /// [`Memory::map_pages`](super::Memory::map_pages); CUDA's virtual memory
    /// management). The default ladder then
    /// places large requests in mapped ranges (`PoolKind::Mapped`).
    pub page_mapping: Option<u64>,
    /// With [`page_mapping`](Self::page_mapping): pages mapped by any calls may be unmapped in
    /// any run of mapped pages ([`Memory::unmap_pages`](super::Memory::unmap_pages)), as host
    /// pages are (`mprotect`, `madvise`); false where the pages of one call go back together
    /// (CUDA: each call maps one device allocation). Mapped pools then keep their pages as runs.
    pub split_mappings: bool,
    /// Making and freeing a buffer costs the driver time by the buffer's size (NVIDIA's Vulkan
    /// driver: about 33 ms per GiB made and destroyed), far more than copying the bytes. The
    /// default ladder then shares large pages among large requests and moves live ones to make
    /// room (`PoolKind::Compacting`) rather than make buffers of their own. A backend that says
    /// so also keeps a buffer that submitted work uses until that work is done when it is
    /// deallocated (wgpu does): a compaction returns pages it emptied right after the copies
    /// reading them were submitted.
    pub slow_buffers: bool,
}

/// Why an allocation failed. Exhaustive: the runtime's memory pools handle every variant, so a
/// new one is a change to both crates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AllocError {
    /// The device has no room for it.
    OutOfMemory,
    /// It is larger than the device's largest buffer, whatever memory is free.
    BufferTooLarge {
        /// The device's largest buffer, in bytes.
        limit: u64,
    },
    /// The device failed earlier (a sticky fault, a lost device): no memory can be had from it,
    /// however much is free.
    DeviceFailed {
        /// The failure, as the backend reports it.
        reason: Arc<str>,
    },
}

// ---- operation times (traces, kernel statistics) ----

/// What an operation was.
#[derive(Clone, Copy, Debug)]
pub enum OpKind {
    /// A kernel launch.
    Launch(Kernel),
    /// A host-to-device copy.
    Write,
    /// A device-to-host copy.
    Read,
    /// A device-to-device copy.
    Copy,
    /// A wait on another stream's event, which ended when that event passed.
    Wait {
        /// The stream whose event it waited for.
        origin: DeviceStream,
    },
}

impl OpKind {
    /// The slice name in a trace: the kernel's name, or `write`, `read`, `copy`, `wait`.
    pub fn name(&self) -> &'static str {
        match self {
            OpKind::Launch(kernel) => kernel.name,
            OpKind::Write => "write",
            OpKind::Read => "read",
            OpKind::Copy => "copy",
            OpKind::Wait { .. } => "wait",
        }
    }

    /// The slice category in a trace.
    pub fn category(&self) -> &'static str {
        match self {
            OpKind::Launch(_) => "kernel",
            OpKind::Write | OpKind::Read | OpKind::Copy => "copy",
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
