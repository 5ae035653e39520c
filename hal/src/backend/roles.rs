//! The backend interface by role, each a trait a backend implements: its kernels, its memory,
//! its queue of streams, the progress of their work, its timing, and what it does across
//! devices. [`crate::Backend`] is their sum; generic code bounded by it calls every role's
//! methods, code that names a backend type imports the role it calls.
//!
//! Calls never block, except [`Completion::wait_for_progress`]: completion is noticed by
//! [`Completion::poll`] and the `*_done`/`take_*` queries.

use super::types::{
    AllocError, DeviceEvent, DeviceStream, LaunchCount, OpClock, OpTime, ReadTicket, Region,
    StorageId,
};
use crate::bytes::HostBytes;
use crate::cross_device::{DeviceCollectives, Drive, PeerTransfer, ProcessCollectives};
use crate::error::{DeviceError, Error, LaunchError};
use crate::graph::PlannedLaunch;
use crate::ids::StreamId;
use crate::kernel::{ExecutionMode, Kernel, KernelDef, KernelSource};
use crate::native::NativeWork;
use crate::staging::{DEFAULT_MAX_FREE_HEAP_STAGING, HeapStaging, StagingAllocator};
use std::sync::Arc;
use std::time::Duration;

/// The backend's name and the kernels it runs: which source it takes for a kernel, and how it
/// prepares one before its first launch.
pub trait Kernels: Send + Sync + 'static {
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
}

/// The device's memory: buffers, reserved addresses with pages mapped under them, and the host
/// memory clients stage uploads in.
pub trait Memory: Send + Sync + 'static {
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
    /// [`Memory::map_pages`]; a multiple of
    /// [`DeviceProperties::page_mapping`](super::DeviceProperties::page_mapping). Only
    /// a backend that reports `page_mapping` is asked; by default there is none.
    fn reserve_addresses(&mut self, _size: u64) -> Result<StorageId, AllocError> {
        Err(AllocError::DeviceFailed {
            reason: "this backend cannot map device pages (no `page_mapping`)".into(),
        })
    }
    /// Maps device memory under `len` bytes at `offset` of reserved addresses (whole pages of
    /// `page_mapping` bytes, none mapped yet) as one allocation, readable and writable by every
    /// stream and every peer device. `AllocError::OutOfMemory` when the device has no room; a
    /// refused call maps nothing.
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
    /// Unmaps the pages one [`Memory::map_pages`] call mapped, `len` bytes at `offset`, and
    /// returns their memory to the device, at once or at the next [`Memory::trim_pages`]: until
    /// then a later `map_pages` of the same size may map the same memory again (moving it costs
    /// less than returning it and asking for more).
    ///
    /// # Safety
    /// `offset` and `len` are those of one earlier `map_pages` call not unmapped since (where
    /// the device reports [`split_mappings`](super::DeviceProperties::split_mappings): any run
    /// of whole mapped pages), and no work queued or running on any stream uses the pages any
    /// more.
    unsafe fn unmap_pages(&mut self, _storage: StorageId, _offset: u64, _len: u64) {}
    /// Returns the memory of pages unmapped since the last call and not mapped again. The memory
    /// pool calls it once a reservation, a cleanup or a periodic cleanup is done.
    fn trim_pages(&mut self) {}
    /// Returns reserved addresses.
    ///
    /// # Safety
    /// `storage` came from [`Memory::reserve_addresses`], and none of its pages is mapped.
    unsafe fn free_addresses(&mut self, _storage: StorageId) {}
    /// Where clients take host memory for uploads, on their own threads and without the runtime
    /// lock: the memory the device copies fastest (page-locked on CUDA). Called once per client;
    /// by default heap buffers pooled by size ([`HeapStaging`]).
    fn staging(&self) -> Arc<dyn StagingAllocator> {
        HeapStaging::new(DEFAULT_MAX_FREE_HEAP_STAGING)
    }
}

/// The device's streams: each runs the work enqueued on it in order, and events order work
/// between them.
pub trait Queue: Kernels {
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
    /// backend ([`Kernels::source_for`]); one without (a direct call) faults the stream with
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
    /// A captured graph's replay of `launches` (with static grids, on one stream unless the
    /// backend's [`Capabilities`](super::Capabilities) say `graph_replay_across_streams`) as one
    /// native op the backend runs itself, over the replay task's bindings (a CUDA graph, made at
    /// the first replay of `graph` at `version` and launched with one call after).
    /// Asked only where [`Capabilities::graph_replay`](super::Capabilities::graph_replay);
    /// `None` declines this replay, whose launches are then tasks of their own (the default).
    fn graph_replay(
        _graph: u64,
        _version: u64,
        _launches: Arc<[PlannedLaunch]>,
    ) -> Option<NativeWork>
    where
        Self: Sized,
    {
        None
    }
    /// Enqueues a device-to-host copy of `src`.
    fn read(&mut self, stream: DeviceStream, src: Region) -> ReadTicket;
    /// Like [`Queue::read`], for bytes another runtime takes (a transfer's source): where the
    /// backend copies into host memory itself, the bytes land in `staging`, that runtime's
    /// ([`Memory::staging`]: page-locked on CUDA, which then uploads them with no host copy).
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
    /// Like [`Queue::flush`], for an event that [`DeviceTiming::device_elapsed`] may time from or
    /// to; backends that must record something for that (timestamps) do it here, not on every
    /// flush. A plain flush by default.
    fn mark(&mut self, stream: DeviceStream) -> DeviceEvent {
        self.flush(stream)
    }
    /// Makes later work on `stream` wait until `event` completes.
    fn wait_event(&mut self, stream: DeviceStream, event: DeviceEvent);
}

/// What a caller waits on for a device's progress once it let go of the runtime: made by
/// [`Completion::progress_watch`] under the runtime's lock, waited on without it. It must stay
/// sound while the backend goes on ticking on another thread: a watch over an event the backend
/// has since recycled may wake early or late, never wrongly, because the caller ticks again
/// after every wait.
pub trait ProgressWatch: Send {
    /// Blocks until some work that was in flight when the watch was made completed (or
    /// failed), `timeout` passed, or `interrupt`, where there is one, returns true.
    fn wait(&mut self, timeout: Duration, interrupt: Option<&dyn Fn() -> bool>);
}

/// The progress of enqueued work: completions noticed, events passed, readbacks and faults
/// taken, waits for more, and names of events for snapshots and logs.
pub trait Completion: Send + Sync + 'static {
    /// Lets the device make progress and notices completions; `tick` is the runtime's tick.
    fn poll(&mut self, tick: u64);
    /// Blocks until the device may have made progress, `timeout` passed, or `interrupt`, where
    /// there is one, returns true (the runtime has new work: a backend that waits by polling
    /// checks it as it polls, one that blocks checks it before blocking or between short
    /// blocks). Returns `false` at once when waiting cannot help: nothing is in flight, or the
    /// backend progresses only when polled (the sim). Called by drivers between ticks, and inside
    /// the tick of a caller blocked on a reply (see `Runtime::tick_awaiting_replies`). By
    /// default it waits on a [`Completion::progress_watch`], and returns `false` without one.
    fn wait_for_progress(
        &mut self,
        timeout: Duration,
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
    /// lock held every other caller's submission back); `None` where nothing is in flight to
    /// wait for. Asked only where
    /// [`Capabilities::progress_watch`](super::Capabilities::progress_watch); `None` by
    /// default.
    fn progress_watch(&mut self) -> Option<Box<dyn ProgressWatch>> {
        None
    }
    /// Whether `event` has completed.
    fn event_done(&mut self, event: DeviceEvent) -> bool;
    /// The bytes of a finished readback, once; `None` while it is in flight.
    fn take_read(&mut self, ticket: ReadTicket) -> Option<HostBytes>;
    /// The first fault raised on `stream` since the last call, if any.
    fn take_fault(&mut self, stream: DeviceStream) -> Option<Error>;
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
}

/// The device's own measure of time: a clock of completed work, the time between two marks,
/// and the times of each operation for traces and kernel statistics.
pub trait DeviceTiming: Send + Sync + 'static {
    /// Device time spent running completed work since the backend was created. Asked only where
    /// [`Capabilities::device_clock`](super::Capabilities::device_clock); `None` by
    /// default.
    fn device_clock(&self) -> Option<Duration> {
        None
    }
    /// Device time between two completed marks ([`Queue::mark`]) of this backend, measured by
    /// the device; `None` where the device keeps no timestamps, while either mark is in flight,
    /// or once the backend has recycled them (the cuda and wgpu backends keep the last 1024).
    fn device_elapsed(&mut self, _start: DeviceEvent, _end: DeviceEvent) -> Option<Duration> {
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
}

/// Work across devices that stays on them: transfers between two runtimes of the backend, and
/// collectives over several devices or processes. Each is asked only where the backend's
/// [`Capabilities`](super::Capabilities) say it has it; otherwise the runtime goes
/// through host memory.
pub trait CrossDevice: Kernels {
    /// A transfer between two runtimes of this backend that stays on the devices, each part
    /// ticking the other runtime with its `Drive` while it waits. Asked only where
    /// [`Capabilities::peer_transfer`](super::Capabilities::peer_transfer); `None`
    /// declines this pair, and the transfer goes through host memory (the default).
    fn peer_transfer(_source: Drive, _destination: Drive) -> Option<PeerTransfer>
    where
        Self: Sized,
    {
        None
    }
    /// Collectives over the devices `devices` (one per rank, in rank order) run on the devices
    /// themselves, or the error that prevents them. Asked only where
    /// [`Capabilities::device_collectives`](super::Capabilities::device_collectives);
    /// `DeviceError::BackendUnavailable` by default.
    fn device_collectives(_devices: &[u32]) -> Result<Arc<dyn DeviceCollectives>, Error>
    where
        Self: Sized,
    {
        Err(no_collectives(Self::NAME))
    }
    /// Collectives across processes run on the devices themselves, or the error that prevents
    /// them here. Asked only where
    /// [`Capabilities::process_collectives`](super::Capabilities::process_collectives);
    /// `DeviceError::BackendUnavailable` by default.
    fn process_collectives() -> Result<&'static dyn ProcessCollectives, Error>
    where
        Self: Sized,
    {
        Err(no_collectives(Self::NAME))
    }
}

/// The default answer of a backend asked for device collectives it has none of.
fn no_collectives(backend: &'static str) -> Error {
    Error::Device(DeviceError::BackendUnavailable {
        backend,
        reason: "it has no collectives on its devices".into(),
    })
}
