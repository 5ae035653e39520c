//! The contract between the tick stages and a device: storage, streams, work and events.
//! Backends are thin; everything the runtime decides (ordering, reuse, errors) happens above it.

pub use crate::bytes::{HostBytes, HostMemoryHome};
use crate::cross_device::{DeviceCollectives, Drive, PeerTransfer, ProcessCollectives};
use crate::error::{DeviceError, Error, LaunchError};
use crate::ids::StreamId;
use crate::kernel::{ExecutionMode, Kernel, KernelDef, KernelSource};
pub use crate::native::{NativeOp, NativeWork};
pub use crate::staging::{DEFAULT_MAX_FREE_HEAP_STAGING, HeapStaging, StagingAllocator};
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

    /// Why a copy of this region into `dst` breaks [`Backend::copy`]'s contract, if it does: the
    /// sizes differ, or the ranges share a byte.
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
    /// under them and map memory page by page ([`Backend::reserve_addresses`],
    /// [`Backend::map_pages`]; CUDA's virtual memory management). The default ladder then
    /// places large requests in mapped ranges (`PoolKind::Mapped`).
    pub page_mapping: Option<u64>,
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

/// What a caller waits on for a device's progress once it let go of the runtime: made by
/// [`Backend::progress_watch`] under the runtime's lock, waited on without it. It must stay
/// sound while the backend goes on ticking on another thread: a watch over an event the backend
/// has since recycled may wake early or late, never wrongly, because the caller ticks again
/// after every wait.
pub trait ProgressWatch: Send {
    /// Blocks until some work that was in flight when the watch was made completed (or
    /// failed), `timeout` passed, or `interrupt`, where there is one, returns true.
    fn wait(&mut self, timeout: std::time::Duration, interrupt: Option<&dyn Fn() -> bool>);
}

/// A device: memory, streams that run work in order, events between them, readbacks.
///
/// Calls never block, except [`Backend::wait_for_progress`]: completion is noticed by
/// [`Backend::poll`] and the `*_done`/`take_*` queries.
pub trait Backend: Send + Sync + 'static {
    /// The backend's name (`"cpu"`, `"sim"`).
    const NAME: &'static str;
    /// The type of kernel source the backend runs, found among a kernel's sources.
    type Source: KernelSource;

    /// The backend's own source for `kernel` where the kernel lists none of its type: how a
    /// backend crate supplies the library's kernels (`gpuworld_hal::library`). None by
    /// default.
    fn library_source(_kernel: &KernelDef) -> Option<&'static Self::Source> {
        None
    }
    /// The source the backend runs for `kernel`: the kernel's own, else the backend library's;
    /// `None` when it has neither (the client refuses such a launch with
    /// `LaunchError::MissingKernelSource`).
    fn source_for(kernel: &KernelDef) -> Option<&'static Self::Source> {
        kernel
            .source::<Self::Source>()
            .or_else(|| Self::library_source(kernel))
    }

    /// The text the backend compiles for `kernel`: the declarations it generates from the
    /// signature, then the kernel's source; `None` where it compiles no text (cpu, sim) or has
    /// no source for the kernel.
    fn generated_text(_kernel: &KernelDef) -> Option<String> {
        None
    }

    /// The device's properties.
    fn properties(&self) -> DeviceProperties;
    /// Prepares `kernel` for launches in `mode` before the first one (compiles and caches its
    /// pipeline or module), so that launch does not wait for a compiler; a compile failure is
    /// returned here, and cached like any. By default there is nothing to compile: only checks
    /// that the backend has a source for it.
    fn warm_up(&mut self, kernel: Kernel, _mode: ExecutionMode) -> Result<(), Error>
    where
        Self: Sized,
    {
        match Self::source_for(kernel) {
            Some(_) => Ok(()),
            None => Err(Error::Launch(LaunchError::MissingKernelSource {
                kernel: kernel.name,
                backend: Self::NAME,
            })),
        }
    }

    /// This device's index among its backend's devices (a cpu device of
    /// `CpuBackend::with_devices`, a wgpu adapter, a CUDA ordinal); 0 by default.
    fn device_index(&self) -> u32 {
        0
    }
    /// Called first in every tick with the tick's number.
    fn begin_tick(&mut self, _tick: u64) {}
    /// Called last in every tick, after every stage: a backend that holds back work for its
    /// own threads during a tick (the cpu backend's stream workers) starts it here at the latest.
    fn end_tick(&mut self) {}
    /// Reserves a buffer of `size` bytes: `AllocError::BufferTooLarge` above the device's
    /// largest buffer, `AllocError::OutOfMemory` when the device has no room for it now.
    fn allocate(&mut self, size: u64) -> Result<StorageId, AllocError>;
    /// Returns a buffer to the device.
    ///
    /// # Safety
    /// `storage` is a buffer this backend allocated and has not deallocated, and no work queued
    /// or running on any stream uses it any more (the runtime frees a buffer only after the
    /// events of the work that used it passed).
    unsafe fn deallocate(&mut self, storage: StorageId);
    /// Reserves `size` bytes of device addresses with no memory under them, for
    /// [`Backend::map_pages`]; a multiple of [`DeviceProperties::page_mapping`]. Only a backend
    /// that reports `page_mapping` is asked; by default there is none.
    fn reserve_addresses(&mut self, _size: u64) -> Result<StorageId, AllocError> {
        Err(AllocError::DeviceFailed {
            reason: "this backend cannot map device pages (no `page_mapping`)".into(),
        })
    }
    /// Maps device memory under `len` bytes at `offset` of reserved addresses (whole pages of
    /// [`DeviceProperties::page_mapping`] bytes, none mapped yet) as one allocation, readable and
    /// writable by every stream and every peer device. `AllocError::OutOfMemory` when the device
    /// has no room; a refused call maps nothing.
    fn map_pages(
        &mut self,
        _storage: StorageId,
        _offset: u64,
        _len: u64,
    ) -> Result<(), AllocError> {
        Err(AllocError::DeviceFailed {
            reason: "this backend cannot map device pages (no `page_mapping`)".into(),
        })
    }
    /// Unmaps the pages one [`Backend::map_pages`] call mapped, `len` bytes at `offset`, and
    /// returns their memory to the device, at once or at the next [`Backend::trim_pages`]: until
    /// then a later `map_pages` of the same size may map the same memory again (moving it costs
    /// less than returning it and asking for more).
    ///
    /// # Safety
    /// `offset` and `len` are those of one earlier `map_pages` call not unmapped since, and no
    /// work queued or running on any stream uses the pages any more.
    unsafe fn unmap_pages(&mut self, _storage: StorageId, _offset: u64, _len: u64) {}
    /// Returns the memory of pages unmapped since the last call and not mapped again. The memory
    /// pool calls it once a reservation, a cleanup or a periodic cleanup is done.
    fn trim_pages(&mut self) {}
    /// Returns reserved addresses.
    ///
    /// # Safety
    /// `storage` came from [`Backend::reserve_addresses`], and none of its pages is mapped.
    unsafe fn free_addresses(&mut self, _storage: StorageId) {}
    /// Creates the device stream for the runtime's stream `id`.
    fn create_stream(&mut self, id: StreamId) -> DeviceStream;
    /// Enqueues a host-to-device copy of `data` into `dst` (`data.len() <= dst.size`).
    fn write(&mut self, stream: DeviceStream, dst: Region, data: HostBytes);
    /// Enqueues a device-to-device copy of `src` into `dst` on `stream`, ordered after the
    /// stream's earlier work like any operation: `src.size == dst.size`, and the two ranges do
    /// not overlap (they may lie in the same buffer). A copy that breaks this, or that a backend
    /// cannot make (wgpu: offsets and size multiples of 4), faults the stream.
    fn copy(&mut self, stream: DeviceStream, src: Region, dst: Region);
    /// Enqueues a kernel launch. The client launches only kernels with a source for this
    /// backend ([`Backend::source_for`]); one without (a direct call) faults the stream with
    /// `LaunchError::MissingKernelSource`.
    ///
    /// # Safety
    /// Each of `buffers` lies within a buffer this backend allocated and has not deallocated.
    /// With [`ExecutionMode::Unchecked`], every access the kernel makes for `count` is in
    /// bounds of its binding: nothing checks it (the caller of `ComputeClient::launch_unchecked`
    /// promised it).
    unsafe fn launch(
        &mut self,
        stream: DeviceStream,
        kernel: Kernel,
        count: LaunchCount,
        buffers: &[Region],
        scalars: &[u32],
        mode: ExecutionMode,
    );
    /// Enqueues `work` on `stream` over `buffers` (the task's bindings, in order); the error
    /// becomes the stream's fault. By default the backend runs no native work.
    fn run_native(
        &mut self,
        _stream: DeviceStream,
        _buffers: &[Region],
        work: NativeWork,
    ) -> Result<(), Error> {
        Err(Error::Device(DeviceError::BackendUnavailable {
            backend: Self::NAME,
            reason: format!("it runs no native work (`{}`)", work.name()).into(),
        }))
    }
    /// Enqueues a device-to-host copy of `src`.
    fn read(&mut self, stream: DeviceStream, src: Region) -> ReadTicket;
    /// Like [`Backend::read`], for bytes another runtime takes (a transfer's source): where the
    /// backend copies into host memory itself, the bytes land in `staging`, that runtime's
    /// ([`Backend::staging`]: page-locked on CUDA, which then uploads them with no host copy).
    /// A plain read by default.
    fn read_for(
        &mut self,
        stream: DeviceStream,
        src: Region,
        _staging: &Arc<dyn StagingAllocator>,
    ) -> ReadTicket {
        self.read(stream, src)
    }
    /// Submits the stream's pending work and returns an event that completes after it.
    fn flush(&mut self, stream: DeviceStream) -> DeviceEvent;
    /// Like [`Backend::flush`], for an event that [`Backend::device_elapsed`] may time from or
    /// to; backends that must record something for that (timestamps) do it here, not on every
    /// flush. A plain flush by default.
    fn mark(&mut self, stream: DeviceStream) -> DeviceEvent {
        self.flush(stream)
    }
    /// Makes later work on `stream` wait until `event` completes.
    fn wait_event(&mut self, stream: DeviceStream, event: DeviceEvent);
    /// Lets the device make progress and notices completions; `tick` is the runtime's tick.
    fn poll(&mut self, tick: u64);
    /// Blocks until the device may have made progress, `timeout` passed, or `interrupt`, where
    /// there is one, returns true (the runtime has new work: a backend that waits by polling
    /// checks it as it polls, one that blocks checks it before blocking or between short
    /// blocks). Returns `false` at once when waiting cannot help: nothing is in flight, or the
    /// backend progresses only when polled (the sim). Called by drivers between ticks, and inside
    /// the tick of a caller blocked on a reply (see `Runtime::tick_awaiting_replies`). By
    /// default it waits on a [`Backend::progress_watch`], and returns `false` without one.
    fn wait_for_progress(
        &mut self,
        timeout: std::time::Duration,
        interrupt: Option<&dyn Fn() -> bool>,
    ) -> bool {
        match self.progress_watch() {
            Some(mut watch) => {
                watch.wait(timeout, interrupt);
                true
            }
            None => false,
        }
    }
    /// A watch over the work in flight now, to wait on after the runtime's lock is let go, so
    /// that other callers tick meanwhile (issue 31: a caller waiting on the device under the
    /// lock held every other caller's submission back). `None` by default, and where the
    /// device progresses only when called (the sim): the caller then waits holding the runtime,
    /// through [`Backend::wait_for_progress`].
    fn progress_watch(&mut self) -> Option<Box<dyn ProgressWatch>> {
        None
    }
    /// A short, stable name of `event` for snapshots and logs.
    fn event_label(&self, event: DeviceEvent) -> String {
        format!("event {}", event.0)
    }
    /// The device stream `event` follows and the operations of it before the event, where the
    /// backend numbers events that way (the host backends do), so snapshots can name the event
    /// by its stream; `None` by default.
    fn event_position(&self, _event: DeviceEvent) -> Option<(DeviceStream, u64)> {
        None
    }
    /// The bytes of `region` as the device holds them now, without waiting, where the backend can
    /// read its memory from the host at any time (the sim); `None` by default. For snapshots that
    /// show buffer contents.
    fn peek(&self, _region: Region) -> Option<Vec<u8>> {
        None
    }
    /// Whether `event` has completed.
    fn event_done(&mut self, event: DeviceEvent) -> bool;
    /// The bytes of a finished readback, once; `None` while it is in flight.
    fn take_read(&mut self, ticket: ReadTicket) -> Option<HostBytes>;
    /// The first fault raised on `stream` since the last call, if any.
    fn take_fault(&mut self, stream: DeviceStream) -> Option<Error>;
    /// A process-wide lock held while a device of this backend is opened and while a runtime
    /// over it is torn down, for drivers that deadlock when devices are created and destroyed
    /// concurrently (NVIDIA's Vulkan driver); `None` by default.
    fn lifecycle_lock() -> Option<&'static parking_lot::Mutex<()>>
    where
        Self: Sized,
    {
        None
    }
    /// Where clients take host memory for uploads, on their own threads and without the runtime
    /// lock: the memory the device copies fastest (page-locked on CUDA). Called once per client;
    /// by default heap buffers pooled by size ([`HeapStaging`]).
    fn staging(&self) -> Arc<dyn StagingAllocator> {
        HeapStaging::new(DEFAULT_MAX_FREE_HEAP_STAGING)
    }
    /// Device time spent running completed work since the backend was created, if the backend
    /// keeps such a clock (the sim's virtual clock); `None` by default, and callers that time
    /// work (the autotuner) then fall back to host wall time around a sync.
    fn device_clock(&self) -> Option<std::time::Duration> {
        None
    }
    /// Device time between two completed marks ([`Backend::mark`]) of this backend, measured by
    /// the device; `None` where the device keeps no timestamps, while either mark is in flight,
    /// or once the backend has recycled them (the cuda and wgpu backends keep the last 1024).
    fn device_elapsed(
        &mut self,
        _start: DeviceEvent,
        _end: DeviceEvent,
    ) -> Option<std::time::Duration> {
        None
    }
    /// Starts (`true`) or stops recording the device time of each operation, for traces and
    /// kernel statistics; returns the clock the times are on, or `None` where the backend cannot
    /// time operations (the runtime then times them by submission).
    fn record_op_times(&mut self, _on: bool) -> Option<OpClock> {
        None
    }
    /// Moves the operations timed since the last call into `into`, in completion order.
    fn take_op_times(&mut self, _into: &mut Vec<OpTime>) {}
    /// A transfer between two runtimes of this backend that stays on the devices, each part
    /// ticking the other runtime with its `Drive` while it waits; `None` by default, and the
    /// transfer goes through host memory.
    fn peer_transfer(_source: Drive, _destination: Drive) -> Option<PeerTransfer>
    where
        Self: Sized,
    {
        None
    }
    /// Collectives over the devices `devices` (one per rank, in rank order) run on the devices
    /// themselves, or the error that prevents them; `None` by default, and collectives are
    /// combined on the host.
    fn device_collectives(_devices: &[u32]) -> Option<Result<Arc<dyn DeviceCollectives>, Error>>
    where
        Self: Sized,
    {
        None
    }
    /// Whether [`Backend::graph_replay`] makes replays into one op (asked before planning one).
    fn replays_graphs() -> bool
    where
        Self: Sized,
    {
        false
    }
    /// Whether [`Backend::graph_replay`] also takes replays whose launches span several streams
    /// (lanes with dependencies between them, each launch's [`PlannedLaunch::lane`] and
    /// [`PlannedLaunch::after`]).
    ///
    /// [`PlannedLaunch::lane`]: crate::graph::PlannedLaunch::lane
    /// [`PlannedLaunch::after`]: crate::graph::PlannedLaunch::after
    fn replays_graphs_across_streams() -> bool
    where
        Self: Sized,
    {
        false
    }
    /// A captured graph's replay of `launches` (with static grids, on one stream unless
    /// [`Backend::replays_graphs_across_streams`]) as one native op the backend runs itself, over the replay task's bindings (a CUDA graph, made at
    /// the first replay of `graph` at `version` and launched with one call after); `None` by
    /// default, and the replay's launches are tasks of their own.
    fn graph_replay(
        _graph: u64,
        _version: u64,
        _launches: std::sync::Arc<[crate::graph::PlannedLaunch]>,
    ) -> Option<crate::native::NativeWork>
    where
        Self: Sized,
    {
        None
    }
    /// Collectives across processes run on the devices themselves, or the error that prevents
    /// them here; `None` by default, and a process group exchanges bytes over its connections.
    fn process_collectives() -> Option<Result<&'static dyn ProcessCollectives, Error>>
    where
        Self: Sized,
    {
        None
    }
}

/// A backend whose runtime hands it out mutably to any caller (`Runtime::sim_mut`), not only
/// behind the `internals` feature: the sim, whose log and fault plan are how tests drive it.
pub trait TestDevice: Backend {}

/// A backend that hands out the memory behind a binding in its own terms, for interop
/// (`ComputeClient::get_resource`): host words, a wgpu buffer, a CUDA device pointer.
pub trait NativeResource: Backend {
    /// The backend's own view of a region of its memory, borrowing the backend.
    type Resource<'a>;
    /// `region`'s memory; `None` where the backend cannot give it (freed storage, host words
    /// of a region that does not start on a word).
    fn resource(&self, region: Region) -> Option<Self::Resource<'_>>;
}
