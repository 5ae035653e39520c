//! The wgpu device a backend drives: its state, its constructors and the steps every operation
//! shares (submitting a stream's batch, attributing errors, noticing a lost device). The other
//! modules add the operations (`launch.rs`, `copies.rs`, `writes.rs`, `marks/record.rs`,
//! `replay/record.rs`); `lib.rs` holds the trait impls that call them.

use crate::adapter::{self, WgpuConfig};
use crate::bind_groups::BindGroupCache;
use crate::faults::{DeviceErrors, describe};
use crate::marks::Marks;
use crate::pipelines::PipelineCache;
use crate::readback::Readbacks;
use crate::replay::PlanCache;
use crate::shared_device::{self, SharedDeviceError};
use crate::stream::{AUTO_SUBMIT_COMMANDS, WgpuStream};
use crate::timing::{KernelTiming, Timing};
use crate::uniforms::UniformPool;
use crate::uploads::UploadBelt;
use gpuworld_hal::backend::{DeviceEvent, DeviceStream, StorageId};
use gpuworld_hal::error::Error;
use slotmap::{DefaultKey, KeyData, SlotMap};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Held while a wgpu device is opened and while a runtime over one is torn down: NVIDIA's
/// Vulkan driver (580) deadlocks when devices are created and destroyed on several threads at
/// once (seen as `vkCreateDevice` and `vkDestroyDevice` blocked on each other's locks).
pub(crate) static DEVICE_LIFECYCLE: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

/// Runs `f` holding the lock gpuworld holds while it opens a wgpu device and while a runtime over
/// one is torn down: a renderer that creates or drops wgpu devices of its own on several threads
/// (tests, tools) wraps those calls in it, since NVIDIA's Vulkan driver (580) deadlocks when
/// `vkCreateDevice` and `vkDestroyDevice` run at once on different threads.
pub fn with_device_lifecycle<R>(f: impl FnOnce() -> R) -> R {
    let _guard = DEVICE_LIFECYCLE.lock();
    f()
}

/// A device driven through wgpu.
pub struct WgpuBackend {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) adapter_info: wgpu::AdapterInfo,
    pub(crate) limits: wgpu::Limits,
    pub(crate) config: WgpuConfig,
    pub(crate) errors: DeviceErrors,
    pub(crate) lost_reported: bool,
    pub(crate) buffers: SlotMap<DefaultKey, wgpu::Buffer>,
    pub(crate) allocated: u64,
    pub(crate) streams: Vec<WgpuStream>,
    pub(crate) pipelines: PipelineCache,
    pub(crate) bind_groups: BindGroupCache,
    /// Recorded plans of captured graphs (`replay.rs`).
    pub(crate) plans: PlanCache,
    pub(crate) uniforms: UniformPool,
    pub(crate) uploads: UploadBelt,
    pub(crate) readbacks: Readbacks,
    pub(crate) timing: Option<Timing>,
    pub(crate) marks: Option<Marks>,
    pub(crate) submitted: u64,
    pub(crate) completed: Arc<AtomicU64>,
    /// The adapter's index in [`list_adapters`]' order.
    pub(crate) adapter_index: u32,
    /// Bytes that crossed between host and device so far.
    pub(crate) host_traffic: HostTraffic,
    /// Held by whoever polls the device, so that gpuworld's polls never run at once (see
    /// [`DevicePolls`]).
    pub(crate) polls: DevicePolls,
}

/// One poll of the device at a time among the backend's own: wgpu-core 30.0.x panics on the
/// thread of a `Wait` poll that timed out when another thread's poll retired the queue meanwhile
/// ("If the queue is empty, the current submission index (N) should be at least the wait
/// submission index (M)", `Device::maintain`; fixed upstream by gfx-rs/wgpu#9958, not in a 30.x
/// release). The device thread's wait (with a timeout) and a caller's tick polled at once: the
/// fuzzer's 20-seed wgpu run hit it. A wait and a submit (wgpu-core polls after each) take the
/// lock; a tick's non-blocking poll skips while a wait holds it (the wait's own poll runs the
/// same callbacks). Polls and submits of the same device by a renderer sharing it, or by another
/// runtime on it, are not covered (`docs/render.md`).
#[derive(Clone, Debug, Default)]
pub(crate) struct DevicePolls(pub(crate) Arc<parking_lot::Mutex<()>>);

/// Bytes that crossed between the host and the device through the backend: what a renderer
/// sharing the device saves by drawing from leases instead of reading and uploading.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HostTraffic {
    /// Bytes written from the host: writes and creations, and the scalars of launches.
    pub uploaded: u64,
    /// Bytes read back to the host (timestamp queries of marks and dispatch timing are not
    /// counted: turn them off to see zero).
    pub read_back: u64,
}

impl HostTraffic {
    /// Both directions together.
    pub fn total(&self) -> u64 {
        self.uploaded + self.read_back
    }
}

impl std::fmt::Debug for WgpuBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WgpuBackend")
            .field("adapter", &self.adapter_info.name)
            .field("backend", &self.adapter_info.backend)
            .field("adapter_index", &self.adapter_index)
            .field("buffers", &self.buffers.len())
            .field("allocated", &self.allocated)
            .field("streams", &self.streams.len())
            .field("submitted", &self.submitted)
            .finish_non_exhaustive()
    }
}

impl WgpuBackend {
    /// Opens the adapter `config` selects; `DeviceError::BackendUnavailable` when there is none.
    pub fn new(config: WgpuConfig) -> Result<WgpuBackend, Error> {
        let _guard = DEVICE_LIFECYCLE.lock();
        let instance = adapter::instance(config.backends);
        let adapter = adapter::select_adapter(&instance, &config)?;
        let (device, queue) = adapter::open_device(&adapter, &config)?;
        let adapter_index = adapter::index_of(&instance, config.backends, &adapter.get_info());
        Ok(WgpuBackend::over(
            &adapter,
            device,
            queue,
            config,
            adapter_index,
        ))
    }

    /// A backend on a device the caller opened (a renderer's): gpuworld's work is submitted on
    /// `queue`, so it runs before the caller's submissions made after it and after those made
    /// before it (one queue runs submissions in order). `SharedDeviceError` names what the
    /// device lacks. Only dispatch timing and marks use a feature (`TIMESTAMP_QUERY`), where
    /// the device has it. `config.adapter`, `backends` are not read.
    pub fn on_device(
        adapter: &wgpu::Adapter,
        device: wgpu::Device,
        queue: wgpu::Queue,
        config: WgpuConfig,
    ) -> Result<WgpuBackend, SharedDeviceError> {
        shared_device::check(adapter, &device)?;
        let _guard = DEVICE_LIFECYCLE.lock();
        let instance = adapter::instance(config.backends);
        let adapter_index = adapter::index_of(&instance, config.backends, &adapter.get_info());
        Ok(WgpuBackend::over(
            adapter,
            device,
            queue,
            config,
            adapter_index,
        ))
    }

    fn over(
        adapter: &wgpu::Adapter,
        device: wgpu::Device,
        queue: wgpu::Queue,
        config: WgpuConfig,
        adapter_index: u32,
    ) -> WgpuBackend {
        let errors = DeviceErrors::install(&device);
        let limits = device.limits();
        let timing = if config.timestamps {
            Timing::new(&device, &queue)
        } else {
            None
        };
        let marks = if config.mark_timestamps {
            Marks::new(&device, &queue)
        } else {
            None
        };
        let adapter_info = adapter.get_info();
        tracing::info!(
            target: "gpuworld::stream",
            adapter = %adapter_info.name,
            backend = ?adapter_info.backend,
            device_type = ?adapter_info.device_type,
            "wgpu device opened"
        );
        WgpuBackend {
            uniforms: UniformPool::new(u64::from(limits.min_uniform_buffer_offset_alignment)),
            uploads: UploadBelt::new(config.upload_chunk, config.upload_budget),
            device,
            queue,
            adapter_info,
            limits,
            config,
            errors,
            lost_reported: false,
            buffers: SlotMap::new(),
            allocated: 0,
            streams: Vec::new(),
            pipelines: PipelineCache::default(),
            bind_groups: BindGroupCache::default(),
            plans: PlanCache::default(),
            readbacks: Readbacks::default(),
            timing,
            marks,
            submitted: 0,
            completed: Arc::new(AtomicU64::new(0)),
            adapter_index,
            host_traffic: HostTraffic::default(),
            polls: DevicePolls::default(),
        }
    }

    /// The adapter's name, API, type and driver.
    pub fn adapter_info(&self) -> &wgpu::AdapterInfo {
        &self.adapter_info
    }

    /// The device's limits (the adapter's best, requested in full).
    pub fn limits(&self) -> &wgpu::Limits {
        &self.limits
    }

    /// The features enabled on the device.
    pub fn features(&self) -> wgpu::Features {
        self.device.features()
    }

    /// The wgpu device, for interoperation and tests.
    pub fn device(&self) -> &wgpu::Device {
        &self.device
    }

    /// The wgpu queue, for interoperation.
    pub fn queue(&self) -> &wgpu::Queue {
        &self.queue
    }

    /// Compute pipelines compiled so far; a cached kernel compiles once.
    pub fn pipelines_compiled(&self) -> u64 {
        self.pipelines.compiled()
    }

    /// Recorded plans made for captured graphs so far; a replay that finds its plan makes none.
    pub fn replay_plans_made(&self) -> u64 {
        self.plans.made()
    }

    /// Submissions made so far.
    pub fn submissions(&self) -> u64 {
        self.submitted
    }

    /// Bytes that crossed between host and device so far ([`HostTraffic`]).
    pub fn host_traffic(&self) -> HostTraffic {
        self.host_traffic
    }

    /// Bytes of upload staging held, at most the configured budget.
    pub fn upload_staging_bytes(&self) -> u64 {
        self.uploads.held()
    }

    /// Device time per kernel id, when timestamps were asked for and the adapter has them.
    pub fn kernel_timings(&self) -> Option<&BTreeMap<&'static str, KernelTiming>> {
        self.timing.as_ref().map(Timing::totals)
    }

    pub(crate) fn storage_key(storage: StorageId) -> DefaultKey {
        KeyData::from_ffi(storage.0).into()
    }

    pub(crate) fn buffer(&self, storage: StorageId) -> Option<&wgpu::Buffer> {
        self.buffers.get(Self::storage_key(storage))
    }

    pub(crate) fn completed(&self) -> u64 {
        self.completed.load(Ordering::Acquire)
    }

    /// Submits the batches that are due: those holding a read (someone waits for it), every
    /// batch when the device is idle, and batches grown past `AUTO_SUBMIT_COMMANDS`.
    pub(crate) fn submit_due_batches(&mut self) {
        let idle = self.completed() >= self.submitted;
        for s in 0..self.streams.len() {
            let stream = &self.streams[s];
            let due = stream.reads > 0 || idle || stream.commands >= AUTO_SUBMIT_COMMANDS;
            if stream.has_batch() && due {
                self.submit(s);
            }
        }
    }

    /// The stream's index, or `None` for a stream this backend never made.
    pub(crate) fn stream_index(&self, stream: DeviceStream) -> Option<usize> {
        let index = stream.0 as usize;
        (index < self.streams.len()).then_some(index)
    }

    /// Moves the device errors raised by the call just made onto stream `s`.
    pub(crate) fn attribute_errors(&mut self, s: usize) {
        for error in self.errors.take() {
            let message = describe(&error);
            tracing::warn!(target: "gpuworld::stream", stream = s, %message, "wgpu error");
            self.streams[s].fault(message);
        }
    }

    /// Faults `s` and returns true when the device is lost.
    pub(crate) fn lost_on(&mut self, s: usize) -> bool {
        match self.errors.lost() {
            Some(reason) => {
                self.streams[s].fault(format!("wgpu device lost: {reason}"));
                true
            }
            None => false,
        }
    }

    /// Submits stream `s`'s batch; returns the submission's sequence number.
    pub(crate) fn submit(&mut self, s: usize) -> Option<u64> {
        let stream = &mut self.streams[s];
        let mut encoder = stream.take_encoder()?;
        if let Some(set) = stream.timing.take()
            && let Some(timing) = self.timing.as_mut()
        {
            timing.resolve(&mut encoder, set);
        }
        if let Some(marks) = self.marks.as_mut() {
            // The batch becomes the next submission.
            for stamp in stream.stamps.drain(..) {
                marks.resolve(&mut encoder, stamp, self.submitted + 1);
            }
        }
        let commands = encoder.finish();
        self.host_traffic.uploaded += UniformPool::upload(&self.queue, &stream.uniforms);
        UploadBelt::unmap(&stream.uploads);
        {
            // A submit polls too (wgpu-core maintains the queue after it): `DevicePolls`.
            let _polling = self.polls.0.lock();
            self.queue.submit([commands]);
        }
        self.submitted += 1;
        let seq = self.submitted;
        let completed = self.completed.clone();
        self.queue.on_submitted_work_done(move || {
            completed.fetch_max(seq, Ordering::AcqRel);
        });
        self.uniforms.retire(&mut stream.uniforms, seq);
        self.uploads.retire(&mut stream.uploads, seq);
        self.attribute_errors(s);
        Some(seq)
    }

    /// Submits stream `s`'s batch, if any, and returns the event after it. With nothing
    /// pending, everything the stream submitted is at or before the last submission: the queue
    /// runs submissions in order.
    pub(crate) fn flush_stream(&mut self, s: usize) -> DeviceEvent {
        DeviceEvent(self.submit(s).unwrap_or(self.submitted))
    }

    pub(crate) fn on_lost(&mut self, reason: &str) {
        if !self.lost_reported {
            self.lost_reported = true;
            tracing::error!(target: "gpuworld::stream", %reason, "wgpu device lost");
            for stream in &mut self.streams {
                stream.fault(format!("wgpu device lost: {reason}"));
            }
        }
        self.readbacks.abandon();
    }
}
