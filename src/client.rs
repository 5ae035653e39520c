//! `ComputeClient`: the user's entry point. Calls validate what can be checked at once and push a
//! command into the inbox without taking the runtime lock; blocking calls then wait until their
//! own reply is ready, ticking while nobody else does (`drivers.rs`).
//!
//! Every public call's documentation says whether it may tick. Only blocking calls (`read*`,
//! `sync`, `mark`, `wait_for_frames`), `tick` itself, and a `ReplyFuture` polled under
//! `Driver::Manual` do; everything else only enqueues or reads what the last tick left
//! (`tests/no_hidden_ticks.rs` counts ticks around each).

mod drivers;
mod frames;
mod graph;
mod lease;
mod lock;
mod open;
mod profile;
mod replies;
mod resource;
mod shared;
mod tensors;
mod to_client;
mod transfers;

pub use drivers::Driver;
pub use graph::{FrameGraph, FrameMode, Graph};
#[cfg(feature = "wgpu")]
pub use lease::RenderLease;
pub use lease::{Leasable, Lease};
#[cfg(feature = "cpu")]
pub use open::cpu_client;
pub use open::sim_client;
#[cfg(feature = "cuda")]
pub use open::{cuda_client, cuda_client_with};
#[cfg(feature = "wgpu")]
pub use open::{wgpu_client, wgpu_client_on_device, wgpu_client_with};
pub use profile::ProfileDuration;
pub use replies::{ReadTicket, ReplyFuture};
pub use resource::ResourceGuard;
pub use tensors::{TensorDesc, TensorHandle};
pub(crate) use to_client::FromRead;
#[cfg(feature = "bevy")]
pub(crate) use transfers::decode;

use futures_channel::oneshot;
use gpuworld_systems::backend::Capabilities;
use gpuworld_systems::error::{BindingError, LaunchError};
use gpuworld_systems::inbox::{Command, Inbox, Launch, Op};
use gpuworld_systems::kernel::limits::{validate_cube_count, validate_cube_dim};
use gpuworld_systems::kernel::{Elem, LaunchMode, validate_buffer_size, validate_launch};
use gpuworld_systems::open::DeviceId;
use gpuworld_systems::tune::{TuneCache, TuneMessage, TuneResult};
use gpuworld_systems::{
    Backend, Binding, CubeCount, DeviceProperties, Error, ExecutionMode, Kernel, MemoryUsage,
    Result, Runtime, RuntimeConfig, RuntimeId, StreamId,
};
use parking_lot::Mutex;
use shared::Shared;
use smallvec::SmallVec;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The buffers and scalars of a launch, in the kernel's order; each scalar keeps its type, which
/// the launch checks against the signature.
#[derive(Clone, Debug, Default)]
pub struct Bindings {
    buffers: SmallVec<[Binding; 4]>,
    scalars: SmallVec<[u32; 4]>,
    scalar_types: SmallVec<[Elem; 4]>,
}

impl Bindings {
    /// No bindings.
    pub fn new() -> Bindings {
        Bindings::default()
    }

    /// Appends a buffer binding.
    pub fn buffer(mut self, binding: impl Into<Binding>) -> Bindings {
        self.buffers.push(binding.into());
        self
    }

    /// Appends a `u32` scalar.
    pub fn scalar_u32(mut self, value: u32) -> Bindings {
        self.scalars.push(value);
        self.scalar_types.push(Elem::U32);
        self
    }

    /// Appends an `i32` scalar.
    pub fn scalar_i32(mut self, value: i32) -> Bindings {
        self.scalars.push(value as u32);
        self.scalar_types.push(Elem::I32);
        self
    }

    /// Appends an `f32` scalar.
    pub fn scalar_f32(mut self, value: f32) -> Bindings {
        self.scalars.push(value.to_bits());
        self.scalar_types.push(Elem::F32);
        self
    }

    /// The buffer bindings.
    pub fn buffers(&self) -> &[Binding] {
        &self.buffers
    }

    /// The scalars, as 32-bit words.
    pub fn scalars(&self) -> &[u32] {
        &self.scalars
    }

    /// The scalars' types, in order.
    pub fn scalar_types(&self) -> &[Elem] {
        &self.scalar_types
    }
}

/// A client of one runtime: cheap to clone, usable from many threads at once.
pub struct ComputeClient<B: Backend> {
    // Declared first so that it drops first: the last client joins the device thread before it
    // drops the runtime, so the backend is torn down on the client's thread, after the device
    // thread has exited (drivers keep per-thread state that outlives a device destroyed on the
    // thread that exits next).
    _lifetime: Arc<drivers::Lifetime>,
    shared: Arc<Shared<B>>,
    stream: Option<StreamId>,
    /// Held by every clone a user has; not by the clones a [`Graph`] keeps, so a graph knows
    /// when no client is left to read what its replays write.
    user: Option<Arc<()>>,
}

impl<B: Backend> std::fmt::Debug for ComputeClient<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ComputeClient")
            .field("runtime", &self.shared.id)
            .field("device", &self.shared.properties.name)
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}

impl<B: Backend> Clone for ComputeClient<B> {
    fn clone(&self) -> Self {
        ComputeClient {
            shared: self.shared.clone(),
            stream: self.stream,
            _lifetime: self._lifetime.clone(),
            user: self.user.clone(),
        }
    }
}

impl<B: Backend> ComputeClient<B> {
    /// A client of a new runtime over `backend`, advanced by `driver`.
    pub fn new(backend: B, config: RuntimeConfig, driver: Driver) -> ComputeClient<B> {
        let inbox = Arc::new(Inbox::new(RuntimeId::fresh()));
        let runtime = Runtime::with_inbox(backend, config, inbox.clone());
        let user = Arc::new(());
        let shared = Arc::new(Shared::new(
            runtime,
            inbox.clone(),
            driver == Driver::Manual,
            &user,
        ));
        let thread = match driver {
            Driver::Manual => None,
            Driver::DeviceThread => {
                let thread_shared = shared.clone();
                let spawned = std::thread::Builder::new()
                    .name("gpuworld-device".into())
                    .spawn(move || drivers::device_thread(&thread_shared));
                match spawned {
                    Ok(thread) => Some(thread),
                    Err(error) => {
                        // Without a device thread nothing would tick: blocking calls tick instead.
                        tracing::warn!(target: "gpuworld::stream", %error, "no device thread; ticking on the calling threads");
                        shared.manual.store(true, Ordering::Release);
                        None
                    }
                }
            }
        };
        ComputeClient {
            shared,
            stream: None,
            user: Some(user),
            _lifetime: Arc::new(drivers::Lifetime {
                inbox,
                thread: Mutex::new(thread),
            }),
        }
    }

    /// A clone for the runtime's own holders (a graph, a captured transfer): it keeps the
    /// runtime alive but is not a user's client. Never ticks.
    pub(crate) fn held_by_graph(&self) -> ComputeClient<B> {
        ComputeClient {
            user: None,
            ..self.clone()
        }
    }

    /// Whether a user still holds a client of this runtime (a graph's clones do not count).
    pub(crate) fn has_user_client(&self) -> bool {
        self.shared.user_clients.strong_count() > 0
    }

    /// The stream this client works on: its override, else the calling thread's. Never ticks.
    pub fn stream_id(&self) -> StreamId {
        self.stream.unwrap_or_else(StreamId::current)
    }

    /// A clone of this client that works on `stream` whatever the calling thread. Never ticks.
    pub fn with_stream(&self, stream: StreamId) -> ComputeClient<B> {
        ComputeClient {
            stream: Some(stream),
            ..self.clone()
        }
    }

    /// Who advances the runtime. Never ticks.
    pub fn driver(&self) -> Driver {
        if self.shared.manual.load(Ordering::Acquire) {
            Driver::Manual
        } else {
            Driver::DeviceThread
        }
    }

    /// The device's properties. Never ticks.
    pub fn properties(&self) -> &DeviceProperties {
        &self.shared.properties
    }

    /// The optional parts of the backend interface the device has: graph replays as one op,
    /// transfers and collectives on the devices, a device clock. Never ticks.
    pub fn capabilities(&self) -> Capabilities {
        self.shared.capabilities
    }

    /// The id of the runtime behind this client. Never ticks.
    pub fn runtime_id(&self) -> RuntimeId {
        self.shared.id
    }

    /// The device this client's runtime runs on. Never ticks.
    pub fn device_id(&self) -> DeviceId {
        DeviceId {
            backend: B::NAME,
            index: self.shared.device_index,
        }
    }

    /// Launches `kernel` over `count` cubes with every buffer access bound-checked. Only
    /// enqueues: never ticks.
    pub fn launch(&self, kernel: Kernel, count: CubeCount, bindings: Bindings) -> Result<()> {
        self.launch_with(kernel, count, bindings, LaunchMode::CHECKED)
    }

    /// Launches `kernel` without bound checks. Only enqueues: never ticks.
    ///
    /// ```
    /// # use gpuworld::{Bindings, CubeCount, Driver, library};
    /// let client = gpuworld::cpu_client(Driver::Manual)?;
    /// let out = client.empty(16);
    /// let bindings = Bindings::new().buffer(&out).scalar_f32(1.0);
    /// // SAFETY: FILL stores only below the binding's 4 elements.
    /// unsafe { client.launch_unchecked(&library::FILL, CubeCount::new_1d(1), bindings)? };
    /// # Ok::<(), gpuworld::Error>(())
    /// ```
    ///
    /// Safe code cannot launch unchecked, neither through this method nor by queuing the command
    /// itself (only the `unsafe` [`LaunchMode::unchecked`](crate::kernel::LaunchMode::unchecked)
    /// makes its mode):
    ///
    /// ```compile_fail,E0133
    /// # use gpuworld::{Bindings, CubeCount, Driver, library};
    /// let client = gpuworld::cpu_client(Driver::Manual)?;
    /// let out = client.empty(16);
    /// let bindings = Bindings::new().buffer(&out).scalar_f32(1.0);
    /// client.launch_unchecked(&library::FILL, CubeCount::new_1d(1), bindings)?;
    /// # Ok::<(), gpuworld::Error>(())
    /// ```
    ///
    /// ```compile_fail,E0133
    /// # use gpuworld::{CubeCount, Driver, StreamId, library};
    /// # use gpuworld_systems::{inbox::{Command, Launch, Op}, kernel::LaunchMode};
    /// let client = gpuworld::cpu_client(Driver::Manual)?;
    /// let out = client.empty(16);
    /// client.with_runtime(|runtime| {
    ///     runtime.inbox().push(Command::Op(Op::Launch(Launch::new(
    ///         &library::FILL,
    ///         CubeCount::new_1d(1),
    ///         [out.binding()].into_iter().collect(),
    ///         [1.0f32.to_bits()].into_iter().collect(),
    ///         LaunchMode::unchecked(),
    ///         StreamId::current(),
    ///     ))))
    /// });
    /// # Ok::<(), gpuworld::Error>(())
    /// ```
    ///
    /// # Safety
    /// Every buffer access of the kernel must be in bounds for the given bindings and count.
    pub unsafe fn launch_unchecked(
        &self,
        kernel: Kernel,
        count: CubeCount,
        bindings: Bindings,
    ) -> Result<()> {
        // SAFETY: the caller keeps every access in bounds, as this method's contract and
        // `LaunchMode::unchecked`'s both ask.
        let mode = unsafe { LaunchMode::unchecked() };
        self.launch_with(kernel, count, bindings, mode)
    }

    fn launch_with(
        &self,
        kernel: Kernel,
        count: CubeCount,
        bindings: Bindings,
        mode: LaunchMode,
    ) -> Result<()> {
        validate_launch(kernel, bindings.buffers.len(), &bindings.scalar_types)?;
        if !self.shared.has_source(kernel) {
            return Err(Error::Launch(LaunchError::MissingKernelSource {
                kernel: kernel.name,
                backend: B::NAME,
            }));
        }
        for (index, binding) in bindings.buffers.iter().enumerate() {
            let (start, end) = binding.validate(self.shared.id)?;
            if start % 4 != 0 {
                return Err(Error::Launch(LaunchError::MisalignedBinding {
                    kernel: kernel.name,
                    index,
                    offset: start,
                }));
            }
            validate_buffer_size(kernel, index, end - start)?;
        }
        if let CubeCount::Dynamic(binding) = &count {
            let (start, end) = binding.validate(self.shared.id)?;
            if end - start < 12 {
                return Err(Error::Binding(BindingError::OutOfRange {
                    handle: binding.handle(),
                    start,
                    end: start + 12,
                    size: binding.capacity(),
                }));
            }
        }
        // The device's limits, checked here rather than left to fail when the stream runs: a
        // dynamic count is only known on the device (see `kernel::limits`).
        validate_cube_dim(kernel, &self.shared.properties)?;
        if let CubeCount::Static(x, y, z) = count {
            validate_cube_count(kernel, [x, y, z], &self.shared.properties)?;
        }
        if count.is_empty() {
            return Ok(());
        }
        self.make_room();
        self.shared.inbox.push(Command::Op(Op::Launch(Launch::new(
            kernel,
            count,
            bindings.buffers,
            bindings.scalars,
            mode,
            self.stream_id(),
        ))));
        Ok(())
    }

    /// Submits this stream's queued work to the device at the next tick. Only enqueues: never
    /// ticks (under `Driver::Manual` the next [`ComputeClient::tick`] submits it).
    pub fn flush(&self) {
        self.shared.inbox.push(Command::Op(Op::Flush {
            stream: self.stream_id(),
        }));
    }

    /// Compiles `kernel`'s pipeline (wgpu) or module (cuda) now, so that its first launch does
    /// not wait for the compiler; returns the compile error, if any, which later launches report
    /// too. Never ticks; takes the runtime lock for the compile (call it at start-up).
    pub fn warm_up(&self, kernel: Kernel) -> Result<()> {
        self.warm_up_mode(kernel, ExecutionMode::Checked)
    }

    /// Like [`ComputeClient::warm_up`], for launches in `mode` (CUDA compiles a module per mode).
    pub fn warm_up_mode(&self, kernel: Kernel, mode: ExecutionMode) -> Result<()> {
        if !self.shared.has_source(kernel) {
            return Err(Error::Launch(LaunchError::MissingKernelSource {
                kernel: kernel.name,
                backend: B::NAME,
            }));
        }
        self.with_runtime(|runtime| runtime.warm_up(kernel, mode))
    }

    /// Waits until this stream's work has run; reports the stream's fault, if any. May tick:
    /// a blocking call (under `Driver::Manual` it ticks until its reply is there).
    pub fn sync(&self) -> Result<()> {
        let receiver = self.enqueue_sync();
        self.wait(receiver)
    }

    /// Like [`ComputeClient::sync`], as a future completed by the tick. Enqueues without
    /// ticking; polling the future may tick under `Driver::Manual` (see [`ReplyFuture`]).
    pub fn sync_async(&self) -> ReplyFuture<()> {
        ReplyFuture::waiting(self.enqueue_sync(), &self.shared)
    }

    fn enqueue_sync(&self) -> oneshot::Receiver<Result<()>> {
        let (reply, receiver) = oneshot::channel();
        self.shared.inbox.push(Command::Sync {
            stream: self.stream_id(),
            reply,
        });
        receiver
    }

    /// Submits this stream's work so far and returns the event that follows it; with
    /// [`ComputeClient::device_elapsed`] two marks time the work between them on the device.
    /// May tick: a blocking call.
    pub fn mark(&self) -> Result<gpuworld_systems::backend::DeviceEvent> {
        let (reply, receiver) = oneshot::channel();
        self.shared.inbox.push(Command::Mark {
            stream: self.stream_id(),
            reply,
        });
        self.wait(receiver)
    }

    /// Device time between two completed marks, where the backend measures it (CUDA events,
    /// wgpu timestamp queries); `None` on backends or adapters without device timestamps.
    /// Never ticks (it takes the runtime lock; wgpu polls the device once, without waiting, for
    /// a mark's timestamps not collected yet).
    pub fn device_elapsed(
        &self,
        start: gpuworld_systems::backend::DeviceEvent,
        end: gpuworld_systems::backend::DeviceEvent,
    ) -> Option<Duration> {
        self.with_runtime(|runtime| runtime.device_elapsed(start, end))
    }

    /// Memory in use and reserved as the last tick left it: a lookup of what every tick
    /// publishes, with no runtime lock and no tick, under either driver. Commands still in the
    /// inbox are not counted yet; to count every command sent so far, [`ComputeClient::sync`]
    /// first. Never ticks.
    pub fn memory_usage(&self) -> MemoryUsage {
        self.shared.published.memory_usage()
    }

    /// Returns free memory to the device at the next tick; only enqueues, never ticks (under
    /// `Driver::Manual` the next [`ComputeClient::tick`] or blocking call runs it). Memory of
    /// handles dropped before the call that the device is still using returns too, in the tick
    /// that finds the device done with it.
    pub fn memory_cleanup(&self) {
        self.shared.inbox.push(Command::Op(Op::MemoryCleanup));
    }

    /// Sends an autotune result; the tune stage caches it at the next tick. Never ticks.
    pub fn submit_tune_result(&self, result: TuneResult) {
        self.send_tune_message(TuneMessage::Done(result));
    }

    /// Sends a message to the tune stage (pending, done, failed); ingested at the next tick.
    /// Never ticks.
    pub fn send_tune_message(&self, message: TuneMessage) {
        self.shared.tune_results.send(message);
    }

    /// Reads the tune cache (without taking the runtime lock). Never ticks.
    pub fn with_tune_cache<R>(&self, f: impl FnOnce(&TuneCache) -> R) -> R {
        f(&self.shared.tune_cache)
    }

    /// The runtime's tune cache, shared: it changes as ticks ingest tune messages. Never ticks.
    pub fn tune_cache(&self) -> TuneCache {
        self.shared.tune_cache.clone()
    }

    /// Advances the runtime by one tick (the one call that always ticks); never waits on the
    /// device.
    pub fn tick(&self) {
        self.tick_on_this_thread();
    }

    /// The runtime's state as stable text, as the last tick left it. Never ticks.
    pub fn snapshot(&self) -> String {
        self.shared.runtime.lock().snapshot()
    }

    /// The inbox this client's runtime drains; never ticks.
    pub(crate) fn inbox(&self) -> &Arc<Inbox> {
        &self.shared.inbox
    }

    /// Runs `f` with the runtime locked. Ticks only if `f` does.
    pub fn with_runtime<R>(&self, f: impl FnOnce(&mut Runtime<B>) -> R) -> R {
        f(&mut self.shared.runtime.lock())
    }
}
