//! `Runtime<B>`: the world and the tick schedule for one device. Clients talk to it through its
//! inbox; whoever holds it calls [`Runtime::tick`].

use crate::backend::{Backend, Capabilities, DeviceEvent, DeviceProperties, DeviceStream, Region};
use crate::binding::Binding;
use crate::error::Error;
use crate::ids::{RuntimeId, StreamId};
use crate::inbox::Inbox;
use crate::kernel::{ExecutionMode, Kernel};
use crate::memory::PoolReport;
use crate::memory::{MemoryPool, MemoryUsage};
use crate::outbox::Outbox;
use crate::published::{InFlight, Published};
use crate::snapshot::{Snapshot, SnapshotOptions};
use crate::stages::flush_wait::LastSynced;
use crate::stages::gc::{ReplyWait, TickLeft};
use crate::stages::ingest::{DeferredCommands, HandleIndex};
use crate::stages::tick_schedule;
use crate::stages::tune::{TuneCache, TuneResults};
use crate::trace::{KernelStat, KernelStats, Trace, TraceRecorder};
use crate::world::*;
use bevy_ecs::prelude::*;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

/// The runtime of one device: a `World` advanced one tick at a time.
///
/// Its internals, `Runtime::world`, `Runtime::backend_mut` and `Runtime::inbox`, exist only
/// with the `internals` feature (an escape hatch for tests and debugging, with no stability promise);
/// the narrow methods beside them ([`Runtime::config`], [`Runtime::memory_report`],
/// [`Runtime::warm_up`]...) are the supported way in.
pub struct Runtime<B: Backend> {
    world: World,
    schedule: Schedule,
    /// The GC stage's reply wait, set by a blocked caller's tick without looking it up.
    reply_wait: ReplyWait,
    inbox: Arc<Inbox>,
    published: Arc<Published>,
    properties: DeviceProperties,
    capabilities: Capabilities,
    /// Whether the trace's systems are in the tick (see [`crate::trace`]).
    recording_systems: bool,
    backend: PhantomData<fn() -> B>,
}

impl<B: Backend> std::fmt::Debug for Runtime<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("id", &self.inbox.runtime())
            .field("device", &self.properties.name)
            .field("left", &self.world.resource::<TickLeft>().in_flight)
            .field("recording_systems", &self.recording_systems)
            .finish_non_exhaustive()
    }
}

impl<B: Backend> Drop for Runtime<B> {
    fn drop(&mut self) {
        // Every command still queued, or waiting for memory, is answered: nothing will run it.
        // Replies of reads and syncs in flight go with the world (their futures see Disconnected).
        let left = self.world.resource_mut::<DeferredCommands>().take_all();
        for command in left.chain(self.inbox.close()) {
            command.fail(crate::error::Error::Disconnected);
        }
        // The world owns the backend: tear it down under the backend's lifecycle lock, if any.
        let _guard = B::lifecycle_lock().map(parking_lot::Mutex::lock);
        drop(std::mem::take(&mut self.world));
    }
}

impl<B: Backend> Runtime<B> {
    /// A runtime over `backend` with `config`.
    pub fn new(backend: B, config: RuntimeConfig) -> Runtime<B> {
        Runtime::with_inbox(backend, config, Arc::new(Inbox::new(RuntimeId::fresh())))
    }

    /// A runtime over `backend` with `config` whose clients push into `inbox`, which the caller
    /// keeps (a client made with the runtime); no other runtime may drain it.
    #[cfg_attr(not(feature = "internals"), doc(hidden))]
    pub fn with_inbox(backend: B, config: RuntimeConfig, inbox: Arc<Inbox>) -> Runtime<B> {
        let properties = backend.properties();
        let capabilities = backend.capabilities();
        let mut world = World::new();
        world.insert_resource(StreamTable {
            slots: vec![None; config.stream_slots.max(1)],
        });
        world.insert_resource(config);
        world.insert_resource(MemoryPool::new(
            &properties,
            &world.resource::<RuntimeConfig>().memory,
        ));
        world.insert_resource(Device(backend));
        world.insert_resource(InboxQueue(inbox.clone()));
        world.init_resource::<NewTasks>();
        world.init_resource::<TickCounter>();
        world.init_resource::<Stats>();
        world.init_resource::<Outbox>();
        let mut schedule = tick_schedule::<B>(&mut world);
        if let Err(error) = schedule.initialize(&mut world) {
            // The schedule is fixed code: a build error is a bug in gpuworld, not in its use.
            panic!("gpuworld's tick schedule is invalid: {error:?}");
        }
        let published = Arc::new(Published::default());
        let reply_wait = world.resource::<ReplyWait>().clone();
        published.finish_tick(
            0,
            world.resource::<MemoryPool>().usage(),
            InFlight::default(),
        );
        Runtime {
            reply_wait,
            world,
            schedule,
            inbox,
            published,
            properties,
            capabilities,
            recording_systems: false,
            backend: PhantomData,
        }
    }

    /// Blocks until the device may have progressed, `timeout` passed, or the inbox has work (a
    /// command, or a tick asked for: another runtime's part of a transfer is there); for a
    /// device thread between ticks, which submits new commands at once, so that the device
    /// always has the next one queued.
    pub fn wait_for_device(&mut self, timeout: std::time::Duration) {
        let inbox = &self.inbox;
        wait_for_progress::<B>(&mut self.world, timeout, &|| inbox.has_work());
    }

    /// Blocks until the device may have progressed, `timeout` passed, or `interrupt` returns
    /// true; a caller blocked on its reply passes [`Inbox::needs_tick`], so that other callers'
    /// commands that only enqueue wait for the end of the wait rather than each cost it a tick.
    #[cfg_attr(not(feature = "internals"), doc(hidden))]
    pub fn wait_for_device_until(
        &mut self,
        timeout: std::time::Duration,
        interrupt: &dyn Fn() -> bool,
    ) {
        wait_for_progress::<B>(&mut self.world, timeout, interrupt);
    }

    /// A watch over the device's work in flight, to wait on after letting go of this runtime's
    /// lock (see [`crate::backend::ProgressWatch`]); `None` where nothing is in flight or the
    /// backend cannot be waited on without itself (then [`Runtime::wait_for_device_until`]
    /// waits).
    #[cfg_attr(not(feature = "internals"), doc(hidden))]
    pub fn progress_watch(&mut self) -> Option<Box<dyn crate::backend::ProgressWatch>> {
        if !self.capabilities.progress_watch || !self.has_work_in_flight() {
            return None;
        }
        self.world
            .resource_mut::<Device<B>>()
            .into_inner()
            .0
            .progress_watch()
    }

    /// Advances one tick for a caller blocked on a reply: after submitting, the tick may wait on
    /// the device up to `budget` until a read or sync in flight can be answered, so the reply
    /// comes in this tick instead of the next. [`Runtime::tick`] never waits.
    pub fn tick_awaiting_replies(&mut self, budget: std::time::Duration) {
        self.reply_wait.set(budget);
        self.tick();
    }

    /// Advances the world by one tick: runs the seven stages once, then publishes what the
    /// tick left (see [`Runtime::published`]).
    pub fn tick(&mut self) {
        let mut counter = self.world.resource_mut::<TickCounter>();
        counter.0 += 1;
        let tick = counter.0;
        let _span = tracing::trace_span!(target: "gpuworld::stream", "tick", tick).entered();
        self.world.resource_mut::<Device<B>>().0.begin_tick(tick);
        self.schedule.run(&mut self.world);
        self.world.resource_mut::<Device<B>>().0.end_tick();
        // Bevy records every component removal (each despawned handle entity left one message
        // per component, 100–150 bytes a handle) until `clear_trackers` drops the older of its two
        // buffers; a Bevy app calls it after each update, a bare `World` never does. Nothing
        // reads removals or change ticks, so once per tick keeps host memory flat.
        self.world.clear_trackers();
        // Counted by the GC stage as it ended: nothing after it changes either.
        let TickLeft { in_flight, usage } = *self.world.resource::<TickLeft>();
        self.published.finish_tick(tick, usage, in_flight);
        // Last: a caller woken by its reply finds the tick over and its state published.
        let mut outbox = self.world.resource_mut::<Outbox>();
        if !outbox.is_empty() {
            outbox.send_all();
        }
    }

    /// The state published at the end of every tick, readable without this runtime's lock.
    #[cfg_attr(not(feature = "internals"), doc(hidden))]
    pub fn published(&self) -> &Arc<Published> {
        &self.published
    }

    /// Number of ticks run so far; never ticks (the no-hidden-ticks tests count with it).
    pub fn tick_count(&self) -> u64 {
        self.world.resource::<TickCounter>().0
    }

    /// The inbox clients push commands into.
    ///
    /// An internal, behind the `internals` feature: no stability promise. A client keeps the
    /// inbox it made the runtime with ([`Runtime::with_inbox`]).
    #[cfg(any(test, feature = "internals"))]
    pub fn inbox(&self) -> &Arc<Inbox> {
        &self.inbox
    }

    /// The id of this runtime.
    pub fn id(&self) -> RuntimeId {
        self.inbox.runtime()
    }

    /// The device's properties.
    pub fn properties(&self) -> &DeviceProperties {
        &self.properties
    }

    /// The optional parts of the backend interface the device has, read once when the runtime
    /// was made.
    pub fn capabilities(&self) -> Capabilities {
        self.capabilities
    }

    /// Memory in use and reserved.
    pub fn memory_usage(&self) -> MemoryUsage {
        self.world.resource::<MemoryPool>().usage()
    }

    /// Highest bytes reserved from the device seen.
    pub fn peak_reserved(&self) -> u64 {
        self.world.resource::<MemoryPool>().peak_reserved()
    }

    /// Highest bytes in use seen.
    pub fn peak_memory(&self) -> u64 {
        self.world.resource::<MemoryPool>().peak_in_use()
    }

    /// Running totals.
    pub fn stats(&self) -> Stats {
        self.world.resource::<Stats>().clone()
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.world.resource::<Device<B>>().0
    }

    /// The backend, mutably (for tests that inspect or configure it).
    ///
    /// An internal, behind the `internals` feature: no stability promise.
    #[cfg(any(test, feature = "internals"))]
    pub fn backend_mut(&mut self) -> &mut B {
        self.device_mut()
    }

    /// The sim (a [`TestDevice`](crate::backend::TestDevice)), mutably: its log and its fault
    /// plan, for tests.
    #[cfg_attr(not(feature = "internals"), doc(hidden))]
    pub fn sim_mut(&mut self) -> &mut B
    where
        B: crate::backend::TestDevice,
    {
        self.device_mut()
    }

    pub(crate) fn device_mut(&mut self) -> &mut B {
        &mut self.world.resource_mut::<Device<B>>().into_inner().0
    }

    /// The world, for inspection.
    ///
    /// An internal, behind the `internals` feature: no stability promise.
    #[cfg(any(test, feature = "internals"))]
    pub fn world(&self) -> &World {
        &self.world
    }

    /// The configuration the runtime was made with.
    pub fn config(&self) -> &RuntimeConfig {
        self.world.resource::<RuntimeConfig>()
    }

    /// Each memory pool's counts: the ladder in routing order, then the persistent pool.
    pub fn memory_report(&self) -> Vec<PoolReport> {
        self.world.resource::<MemoryPool>().reports()
    }

    /// The device bytes `binding` names, checked as ingest checks a task's binding (a released
    /// handle, a failed allocation, a range past its memory are errors); never ticks.
    #[cfg_attr(not(feature = "internals"), doc(hidden))]
    pub fn binding_region(&self, binding: &Binding) -> std::result::Result<Region, Error> {
        self.world.resource::<HandleIndex>().region(binding)
    }

    /// Prepares `kernel` for launches in `mode`
    /// ([`Kernels::warm_up`](crate::backend::Kernels::warm_up)).
    pub fn warm_up(
        &mut self,
        kernel: Kernel,
        mode: ExecutionMode,
    ) -> std::result::Result<(), Error> {
        self.device_mut().warm_up(kernel, mode)
    }

    /// The device time between two events ([`DeviceTiming::device_elapsed`](crate::backend::DeviceTiming::device_elapsed)).
    #[cfg_attr(not(feature = "internals"), doc(hidden))]
    pub fn device_elapsed(&mut self, start: DeviceEvent, end: DeviceEvent) -> Option<Duration> {
        self.device_mut().device_elapsed(start, end)
    }

    /// The queue autotune results are sent to; the tune stage ingests it.
    #[cfg_attr(not(feature = "internals"), doc(hidden))]
    pub fn tune_results(&self) -> TuneResults {
        self.world.resource::<TuneResults>().clone()
    }

    /// The tune cache.
    #[cfg_attr(not(feature = "internals"), doc(hidden))]
    pub fn tune_cache(&self) -> &TuneCache {
        self.world.resource::<TuneCache>()
    }

    /// Whether submitted work awaits the device (reads, syncs, memory pinned behind events, commands
    /// waiting for that memory) as the last tick left it: ticking again makes progress. Tasks
    /// still queued wait for a flush, not for the device.
    pub fn has_work_in_flight(&self) -> bool {
        let left = &self.world.resource::<TickLeft>().in_flight;
        left.reads + left.syncs + left.pending_gcs + left.deferred_commands > 0
    }

    /// Whether reads or syncs await the device as the last tick left them: replies someone may
    /// be blocked on, unlike memory pinned behind events, which only needs a tick eventually.
    #[cfg_attr(not(feature = "internals"), doc(hidden))]
    pub fn has_replies_in_flight(&self) -> bool {
        let left = &self.world.resource::<TickLeft>().in_flight;
        left.reads + left.syncs > 0
    }

    /// The bookkeeping of the stream that runs `id`, if it was opened.
    pub fn stream_state(&mut self, id: StreamId) -> Option<StreamState> {
        let table = self.world.resource::<StreamTable>();
        let entity = table.slots[(id.value % table.slots.len() as u64) as usize]?;
        let mut query = self.world.query::<(
            &Stream,
            &StreamCursor,
            &SubmittedCursor,
            &LastSynced,
            &TaskQueue,
        )>();
        let (stream, cursor, submitted, synced, queue) = query.get(&self.world, entity).ok()?;
        Some(StreamState {
            slot: stream.slot,
            cursor: cursor.0,
            submitted: submitted.0,
            last_synced: synced.0.to_vec(),
            queued: queue.tasks.len(),
        })
    }

    /// Starts recording a trace (see [`crate::trace`]), replacing one already running.
    #[cfg_attr(not(feature = "internals"), doc(hidden))]
    pub fn start_trace(&mut self) {
        let stats = self.world.resource::<KernelStats>().is_enabled();
        self.world
            .resource_scope(|world, mut recorder: Mut<TraceRecorder>| {
                recorder.start(&mut world.resource_mut::<Device<B>>().0, stats);
            });
        self.place_recording_systems();
    }

    /// Puts the trace's systems in the tick while a trace or kernel statistics record, and takes
    /// them out otherwise (see [`crate::trace`]).
    fn place_recording_systems(&mut self) {
        let wanted = self.world.resource::<TraceRecorder>().is_tracing()
            || self.world.resource::<KernelStats>().is_enabled();
        if wanted == self.recording_systems {
            return;
        }
        if wanted {
            crate::trace::add_recording::<B>(&mut self.schedule);
            self.recording_systems = true;
        } else {
            match crate::trace::remove_recording(&mut self.schedule, &mut self.world) {
                Ok(_) => self.recording_systems = false,
                // They stay, idle: they only cost time.
                Err(error) => {
                    tracing::error!(target: "gpuworld::stream", %error, "the trace's systems could not leave the tick");
                }
            }
        }
    }

    /// Ends the trace and returns it; `None` when no trace was started. Work still in flight is
    /// not in it: sync first to include it.
    #[cfg_attr(not(feature = "internals"), doc(hidden))]
    pub fn stop_trace(&mut self) -> Option<Trace> {
        let stats = self.world.resource::<KernelStats>().is_enabled();
        let trace = self
            .world
            .resource_scope(|world, mut recorder: Mut<TraceRecorder>| {
                recorder.stop(&mut world.resource_mut::<Device<B>>().0, stats)
            });
        self.place_recording_systems();
        trace
    }

    /// Starts or stops gathering per-kernel statistics; stopping keeps what was gathered.
    #[cfg_attr(not(feature = "internals"), doc(hidden))]
    pub fn set_kernel_stats(&mut self, on: bool) {
        self.world.resource_mut::<KernelStats>().set_enabled(on);
        self.world
            .resource_scope(|world, mut recorder: Mut<TraceRecorder>| {
                let tracing = recorder.is_tracing();
                recorder.set_backend_timing(&mut world.resource_mut::<Device<B>>().0, tracing, on);
            });
        self.place_recording_systems();
    }

    /// Per-kernel statistics gathered so far, by kernel id.
    #[cfg_attr(not(feature = "internals"), doc(hidden))]
    pub fn kernel_stats(&self) -> Vec<KernelStat> {
        self.world.resource::<KernelStats>().report()
    }

    /// The whole runtime state as stable text, sorted by ids, for snapshots: the default lines
    /// of [`Runtime::capture`].
    pub fn snapshot(&mut self) -> String {
        self.capture(&SnapshotOptions::default()).to_string()
    }

    /// The whole runtime state as a value: text through `Display`, any serde format through
    /// `Serialize`; `options` adds the pools' lines and handle contents.
    pub fn capture(&mut self, options: &SnapshotOptions) -> Snapshot {
        self.world.resource_scope(|world, device: Mut<Device<B>>| {
            let backend = &device.0;
            let mut snapshot = crate::snapshot::capture(
                world,
                &|event| backend.event_position(event),
                &|event| backend.event_label(event),
                options,
                crate::stages::snapshot_lines,
            );
            crate::snapshot::fill_contents(&mut snapshot, options, |region| backend.peek(region));
            snapshot
        })
    }

    /// Shows every command the next ticks ingest to `tap`, or stops showing them (`None`).
    #[cfg_attr(not(feature = "internals"), doc(hidden))]
    pub fn set_command_tap(&mut self, tap: Option<crate::inbox::CommandTap>) {
        match tap {
            Some(tap) => self.world.insert_resource(tap),
            None => {
                self.world.remove_resource::<crate::inbox::CommandTap>();
            }
        }
    }

    /// What the world keeps on the host for handles and removals: once every handle is dropped,
    /// its memory reclaimed and two more ticks ran, all of it is zero (leak checks).
    pub fn host_records(&self) -> HostRecords {
        let handle_entities = self
            .world
            .try_query::<&HandleRecord>()
            .map_or(0, |mut query| query.iter(&self.world).count());
        HostRecords {
            indexed_handles: self.world.resource::<HandleIndex>().0.len(),
            handle_entities,
            removals: self
                .world
                .removed_components()
                .iter()
                .map(|(_, messages)| messages.len())
                .sum(),
        }
    }

    /// The names snapshots give the backend's streams (`s0`, `gc`), for labelling its calls.
    pub fn device_stream_names(&mut self) -> std::collections::HashMap<DeviceStream, String> {
        crate::snapshot::device_stream_names(&mut self.world)
    }
}

/// The host-side records of handles, as [`Runtime::host_records`] counts them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HostRecords {
    /// Entries of the handle index: live handles, and released ones not yet ingested.
    pub indexed_handles: usize,
    /// Handle entities: handles a task used, until the GC stage reclaims their memory.
    pub handle_entities: usize,
    /// Component removals Bevy still records (it keeps those of the last two ticks).
    pub removals: usize,
}

/// A stream's bookkeeping, as [`Runtime::stream_state`] reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamState {
    /// The slot the stream occupies.
    pub slot: usize,
    /// Tasks assigned to the stream so far.
    pub cursor: u64,
    /// Cursor of the last task handed to the backend.
    pub submitted: u64,
    /// For each origin slot, the origin cursor this stream has waited for.
    pub last_synced: Vec<(usize, u64)>,
    /// Tasks queued and not yet submitted.
    pub queued: usize,
}

/// Blocks on the world's device until it may have progressed, `timeout` passed, or `interrupt`.
fn wait_for_progress<B: Backend>(
    world: &mut World,
    timeout: std::time::Duration,
    interrupt: &dyn Fn() -> bool,
) {
    world
        .resource_mut::<Device<B>>()
        .into_inner()
        .0
        .wait_for_progress(timeout, Some(interrupt));
}
