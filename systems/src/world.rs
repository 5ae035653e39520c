//! The state every stage shares: streams, handles and tasks, the backend, the config and the
//! counters. What only one stage keeps (a handle's `Owner` and `Uses`, a stream's `LastSynced`,
//! the handle index, the tune cache) lives in that stage's module and is registered by its
//! `build`; what several stages act on has one owner they call: a handle's life after release
//! (`stages/lifetime.rs`: pins, pending GCs) and the reads and syncs in flight
//! (`stages/replies.rs`).

use crate::backend::{Backend, DeviceEvent, DeviceStream, LaunchCount, Region, StagingAllocator};
use crate::bytes::HostBytes;
use crate::error::{Error, Result};
use crate::ids::{HandleId, StreamId};
use crate::inbox::{Inbox, ReadReply, Reply};
use crate::kernel::{ExecutionMode, Kernel};
use crate::memory::{MemoryConfig, SliceKey};
pub use crate::open::SchedulingStrategy;
use crate::open::{OpenBackend, SchedulingDefaults};
use bevy_ecs::prelude::*;
use smallvec::SmallVec;
use std::collections::VecDeque;
use std::sync::Arc;

// ---- streams ----

/// A stream entity: the slot it occupies and the user stream that opened it. Spawned alone: the
/// per-stream state comes as required components, the shared ones declared here and each
/// stage's own (`LastSynced`) registered by that stage's `build`.
#[derive(Component, Debug)]
#[require(StreamCursor, SubmittedCursor, TaskQueue, StreamFault)]
pub struct Stream {
    /// The first user stream mapped to this slot.
    pub id: StreamId,
    /// The slot (user stream number modulo the slot count).
    pub slot: usize,
    /// The backend's stream.
    pub device: DeviceStream,
    /// How many user streams the runtime opened before this one: its name in snapshots, so a
    /// test shows the same names whichever thread or test order made them.
    pub ordinal: u64,
}

impl Stream {
    /// Its name in snapshots, sim logs and traces: `s<ordinal>`.
    pub fn name(&self) -> String {
        format!("s{}", self.ordinal)
    }
}

/// Number of tasks ever assigned to the stream; a task's cursor is the count after it.
#[derive(Component, Debug, Default)]
pub struct StreamCursor(pub u64);

/// Cursor of the last task handed to the backend.
#[derive(Component, Debug, Default)]
pub struct SubmittedCursor(pub u64);

/// Tasks assigned to the stream and not yet handed to the backend, in order.
#[derive(Component, Debug, Default)]
pub struct TaskQueue {
    /// The queued tasks, in cursor order.
    pub tasks: VecDeque<Box<Task>>,
    /// The queue must be submitted at this tick (a flush, sync, read or another stream needs it).
    pub flush_through: Option<u64>,
}

/// A fault raised on the stream, kept until the next read or sync on it reports it.
#[derive(Component, Debug, Default)]
pub struct StreamFault(pub Option<Error>);

impl StreamFault {
    /// Keeps `error` unless the stream already holds a fault: the first one is reported.
    pub fn record(&mut self, error: Error) {
        tracing::warn!(target: "gpuworld::stream", %error, "fault recorded on stream");
        self.0.get_or_insert(error);
    }
}

// ---- handles ----

/// A handle entity: the allocation behind a user [`crate::Handle`].
#[derive(Component, Debug)]
pub struct HandleRecord {
    /// The user-visible id.
    pub id: HandleId,
    /// Requested size in bytes.
    pub size: u64,
}

/// Where a handle's bytes live, or why they don't.
#[derive(Component, Debug)]
pub enum Allocation {
    /// A pool slice.
    Slice {
        /// The pool key.
        slice: SliceKey,
        /// The requested bytes inside the backend buffer (a slice may start past byte 0).
        region: Region,
    },
    /// A released slice parked for its stream's later allocations (`memory/parked.rs`); the
    /// lifetime's step 4 returns it to its pool unless that stream took it first.
    Parked {
        /// The pool key (dead once the stream took the memory).
        slice: SliceKey,
    },
    /// The allocation failed; every use reports this error.
    Failed(Error),
}

/// Every clone of the user handle was dropped; the memory goes back once the device is done.
#[derive(Component, Debug)]
pub struct Released;

// ---- tasks ----

/// One binding of a task, resolved to device memory.
#[derive(Clone, Copy, Debug)]
pub struct TaskBinding {
    /// The handle entity.
    pub handle: Entity,
    /// The bytes it covers.
    pub region: Region,
    /// Whether the task may write it.
    pub writes: bool,
}

/// Where a read's bytes go, and the staging they land in.
#[derive(Debug)]
pub struct ReadRequest {
    /// Answered with the bytes.
    pub reply: Reply<ReadReply>,
    /// Staging lent by the runtime that takes the bytes (see
    /// [`Queue::read_for`](crate::backend::Queue::read_for)); the backend's own when `None`.
    pub staging: Option<Arc<dyn StagingAllocator>>,
}

/// What a task does.
#[derive(Debug)]
pub enum TaskWork {
    /// Copy host bytes into the first binding.
    Write(HostBytes),
    /// Run a kernel over the bindings.
    Launch {
        /// The kernel.
        kernel: Kernel,
        /// Its cube count (dynamic counts name device memory).
        count: LaunchCount,
        /// Its scalars.
        scalars: SmallVec<[u32; 4]>,
        /// Checked or unchecked.
        mode: ExecutionMode,
    },
    /// Copy the bindings back to the host.
    Read(ReadRequest),
    /// Submit the stream's work.
    Flush,
    /// Reply once the stream's work has run.
    Sync(Reply<Result<()>>),
    /// Flush the stream and reply with the event that follows the work before it.
    Mark(Reply<Result<DeviceEvent>>),
    /// Work the backend runs itself over the bindings (a collective through NCCL).
    Native(crate::backend::NativeWork),
    /// Copy the first binding's bytes to the second on the device: a live allocation the pools
    /// moved to make room (`MemoryPool::reserve_moving`).
    Move,
}

impl TaskWork {
    /// Short name for logs and snapshots.
    pub fn label(&self) -> String {
        match self {
            TaskWork::Write(data) => format!("write {}B", data.len()),
            TaskWork::Launch { kernel, .. } => format!("launch {}", kernel.name),
            TaskWork::Read(_) => "read".to_string(),
            TaskWork::Flush => "flush".to_string(),
            TaskWork::Sync(_) => "sync".to_string(),
            TaskWork::Mark(_) => "mark".to_string(),
            TaskWork::Native(work) => format!("native {}", work.name()),
            TaskWork::Move => "move".to_string(),
        }
    }
}

/// A task: work on a stream. A plain value, not an entity: it lives in `NewTasks` for the
/// stages that analyse it, then in its stream's `TaskQueue` until submitted. Spawning and
/// despawning an entity per launch cost more than everything else the tick does for it.
pub struct Task {
    /// Arrival order across all streams.
    pub seq: u64,
    /// The stream entity.
    pub stream: Entity,
    /// The stream's cursor for this task (assigned by alignment analysis).
    pub cursor: u64,
    /// What it does; taken when submitted.
    pub work: Option<TaskWork>,
    /// Its bindings.
    pub bindings: SmallVec<[TaskBinding; 4]>,
    /// Other streams that used its bindings since this stream last synced with them.
    pub sync_needs: Vec<SyncNeed>,
    /// Waits decided by the flush/wait stage, issued just before the task: (origin, through).
    pub waits: Vec<(Entity, u64)>,
    /// Handles also used on other streams; pinned behind a GC event after the task.
    /// (These three are `Vec`s, empty and unallocated on the common single-stream path, to keep
    /// the task small: it is moved from stage to stage.)
    pub shared: Vec<Entity>,
}

impl std::fmt::Debug for Task {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Task")
            .field("seq", &self.seq)
            .field("stream", &self.stream)
            .field("cursor", &self.cursor)
            .field("work", &self.work.as_ref().map(TaskWork::label))
            .field("bindings", &self.bindings)
            .field("waits", &self.waits)
            .finish_non_exhaustive()
    }
}

impl Task {
    /// Records that `handle` was used on `origin` at `used_at`, whose cursor is now `through`.
    pub fn record_need(&mut self, origin: Entity, used_at: u64, through: u64, handle: Entity) {
        match self.sync_needs.iter_mut().find(|n| n.origin == origin) {
            Some(need) => {
                need.used_at = need.used_at.max(used_at);
                need.through = need.through.max(through);
            }
            None => self.sync_needs.push(SyncNeed {
                origin,
                used_at,
                through,
            }),
        }
        if !self.shared.contains(&handle) {
            self.shared.push(handle);
        }
    }
}

/// A dependency of a task on another stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyncNeed {
    /// The other stream.
    pub origin: Entity,
    /// Its cursor at the latest use of a shared binding.
    pub used_at: u64,
    /// Its cursor when the task arrived: the wait covers everything up to here.
    pub through: u64,
}

// ---- resources ----

/// The backend, as a resource.
#[derive(Debug, Resource)]
pub struct Device<B: Backend>(pub B);

/// The client inbox.
#[derive(Debug, Resource, Clone)]
pub struct InboxQueue(pub Arc<Inbox>);

/// The stream entities by slot.
#[derive(Debug, Resource)]
pub struct StreamTable {
    /// Compute stream entity per slot, created on first use.
    pub slots: Vec<Option<Entity>>,
}

/// Emptied task boxes kept for reuse: a task is boxed so that stages move a pointer, and the
/// boxes are recycled so that a tick of many launches does not go through the allocator. Kept in
/// [`NewTasks`], beside the tasks ingest fills them with: one lookup for both.
#[derive(Debug, Default)]
pub struct SpareTasks(pub Vec<Box<Task>>);

impl SpareTasks {
    /// Most boxes kept.
    pub const MAX: usize = 4096;

    /// A boxed task numbered `seq` on `stream`, in a spare box when one is left.
    pub fn task(
        &mut self,
        seq: u64,
        stream: Entity,
        work: TaskWork,
        bindings: SmallVec<[TaskBinding; 4]>,
    ) -> Box<Task> {
        match self.0.pop() {
            // A recycled box is empty (see `recycle`): only its live fields are written.
            Some(mut spare) => {
                spare.seq = seq;
                spare.stream = stream;
                spare.cursor = 0;
                spare.work = Some(work);
                spare.bindings = bindings;
                spare
            }
            None => Box::new(Task {
                seq,
                stream,
                cursor: 0,
                work: Some(work),
                bindings,
                sync_needs: Vec::new(),
                waits: Vec::new(),
                shared: Vec::new(),
            }),
        }
    }

    /// Keeps a submitted task's box for a later task, emptied, up to [`SpareTasks::MAX`].
    /// Submission took its work, waits and shared handles; the rest is cleared here.
    pub fn recycle(&mut self, mut task: Box<Task>) {
        debug_assert!(task.work.is_none() && task.waits.is_empty() && task.shared.is_empty());
        if self.0.len() < Self::MAX {
            task.bindings.clear();
            task.sync_needs.clear();
            self.0.push(task);
        }
    }
}

/// Tasks ingested this tick and not yet queued, in arrival order, and the emptied boxes of
/// submitted ones.
#[derive(Debug, Resource, Default)]
pub struct NewTasks {
    /// The tasks, in arrival order.
    pub tasks: Vec<Box<Task>>,
    /// The sequence number of the next task.
    pub next_seq: u64,
    /// Boxes of submitted tasks, for the next ones (interleave empties them, ingest fills them).
    pub spare: SpareTasks,
}

/// The runtime's settings.
#[derive(Resource, Clone, Debug)]
#[non_exhaustive]
pub struct RuntimeConfig {
    /// Number of compute stream slots.
    pub stream_slots: usize,
    /// A stream's queue is submitted once it holds this many tasks.
    pub max_tasks: usize,
    /// Submission order across ready streams.
    pub strategy: SchedulingStrategy,
    /// Memory pools and tensor layout.
    pub memory: MemoryConfig,
}

// Builders: the struct is `#[non_exhaustive]`, so other crates start from a constructor or
// `Default` and set fields one by one.
impl RuntimeConfig {
    /// This configuration with [`stream_slots`](Self::stream_slots) set to `stream_slots`.
    #[must_use]
    pub fn with_stream_slots(mut self, stream_slots: usize) -> Self {
        self.stream_slots = stream_slots;
        self
    }

    /// This configuration with [`max_tasks`](Self::max_tasks) set to `max_tasks`.
    #[must_use]
    pub fn with_max_tasks(mut self, max_tasks: usize) -> Self {
        self.max_tasks = max_tasks;
        self
    }

    /// This configuration with [`strategy`](Self::strategy) set to `strategy`.
    #[must_use]
    pub fn with_strategy(mut self, strategy: SchedulingStrategy) -> Self {
        self.strategy = strategy;
        self
    }

    /// The default configuration for backend `B`: its scheduler settings
    /// ([`OpenBackend::scheduling`]), the rest default.
    pub fn for_backend<B: OpenBackend>() -> Self {
        let scheduling = B::scheduling();
        RuntimeConfig::default()
            .with_max_tasks(scheduling.max_tasks)
            .with_strategy(scheduling.strategy)
    }

    /// This configuration with [`memory`](Self::memory) set to `memory`.
    #[must_use]
    pub fn with_memory(mut self, memory: MemoryConfig) -> Self {
        self.memory = memory;
        self
    }
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        let scheduling = SchedulingDefaults::default();
        RuntimeConfig {
            stream_slots: 4,
            max_tasks: scheduling.max_tasks,
            strategy: scheduling.strategy,
            memory: MemoryConfig::default(),
        }
    }
}

/// The tick counter: number of completed ticks before the current one.
#[derive(Resource, Default, Debug)]
pub struct TickCounter(pub u64);

/// Running totals for summaries.
#[derive(Resource, Default, Debug, Clone)]
pub struct Stats {
    /// Kernel launches submitted.
    pub launches: u64,
    /// Bytes written host-to-device.
    pub bytes_written: u64,
    /// Bytes read device-to-host.
    pub bytes_read: u64,
    /// Tasks submitted to the backend.
    pub tasks_submitted: u64,
    /// Handles whose memory went back to the pool.
    pub handles_reclaimed: u64,
}
