//! The world model: the components of streams, handles, tasks, pending reads and pending GCs, and
//! the runtime's resources. Stages own the behaviour; this module only names the state.

use crate::backend::{Backend, DeviceEvent, DeviceStream, LaunchCount, ReadTicket, Region};
use crate::bytes::HostBytes;
use crate::error::{Error, Result};
use crate::ids::{HandleId, StreamId};
use crate::inbox::{Inbox, ReadReply, Reply};
use crate::kernel::{ExecutionMode, Kernel};
use crate::memory::{MemoryConfig, SliceKey};
use bevy_ecs::prelude::*;
use smallvec::SmallVec;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

// ---- streams ----

/// What a stream is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum StreamRole {
    /// User work.
    Compute,
    /// The stream whose events prove that shared bindings may be released.
    Gc,
}

/// A stream entity: the slot it occupies and the user stream that opened it.
#[derive(Component, Debug)]
pub struct Stream {
    /// The first user stream mapped to this slot.
    pub id: StreamId,
    /// The slot (user stream number modulo the slot count).
    pub slot: usize,
    /// What it is for.
    pub role: StreamRole,
    /// The backend's stream.
    pub device: DeviceStream,
}

/// Number of tasks ever assigned to the stream; a task's cursor is the count after it.
#[derive(Component, Debug, Default)]
pub struct StreamCursor(pub u64);

/// Cursor of the last task handed to the backend.
#[derive(Component, Debug, Default)]
pub struct SubmittedCursor(pub u64);

/// For each origin slot, the origin cursor this stream has waited for.
#[derive(Component, Debug, Default)]
pub struct LastSynced(pub SmallVec<[(usize, u64); 4]>);

impl LastSynced {
    /// The cursor synced with `slot`, if ever.
    pub fn get(&self, slot: usize) -> Option<u64> {
        self.0.iter().find(|(s, _)| *s == slot).map(|(_, c)| *c)
    }

    /// Records a sync with `slot` at `cursor` (never moves backwards).
    pub fn record(&mut self, slot: usize, cursor: u64) {
        match self.0.iter_mut().find(|(s, _)| *s == slot) {
            Some((_, c)) => *c = (*c).max(cursor),
            None => {
                self.0.push((slot, cursor));
                self.0.sort_unstable();
            }
        }
    }
}

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
    /// A released slice parked for its stream's later allocations (`memory/parked.rs`); the GC
    /// stage returns it to its pool unless that stream took it first.
    Parked {
        /// The pool key (dead once the stream took the memory).
        slice: SliceKey,
    },
    /// The allocation failed; every use reports this error.
    Failed(Error),
}

/// The stream and cursor of the last task that wrote the handle.
#[derive(Component, Debug, Clone, Copy)]
pub struct Owner {
    /// The stream entity.
    pub stream: Entity,
    /// That stream's cursor at the write.
    pub cursor: u64,
}

/// For each stream that used the handle, the cursor of its last use.
#[derive(Component, Debug, Default)]
pub struct Uses(pub SmallVec<[(Entity, u64); 2]>);

impl Uses {
    /// Records a use on `stream` at `cursor`.
    pub fn record(&mut self, stream: Entity, cursor: u64) {
        match self.0.iter_mut().find(|(s, _)| *s == stream) {
            Some((_, c)) => *c = (*c).max(cursor),
            None => self.0.push((stream, cursor)),
        }
    }
}

/// Every clone of the user handle was dropped; the memory goes back once the device is done.
#[derive(Component, Debug)]
pub struct Released;

/// A released handle whose reclamation waits on a pending-GC entity.
#[derive(Component, Debug)]
pub struct AwaitingGc;

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

/// What a task does.
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
    Read(Reply<ReadReply>),
    /// Submit the stream's work.
    Flush,
    /// Reply once the stream's work has run.
    Sync(Reply<Result<()>>),
    /// Flush the stream and reply with the event that follows the work before it.
    Mark(Reply<Result<DeviceEvent>>),
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

// ---- in flight ----

/// A readback in flight.
#[derive(Component)]
pub struct PendingRead {
    /// The stream it ran on.
    pub stream: Entity,
    /// One ticket per binding; `None` once its bytes arrived.
    pub tickets: SmallVec<[Option<ReadTicket>; 2]>,
    /// Bytes received so far, by binding.
    pub bytes: Vec<HostBytes>,
    /// Where the bytes go.
    pub reply: Option<Reply<ReadReply>>,
}

/// A sync in flight: completes when the event has passed.
#[derive(Component)]
pub struct PendingSync {
    /// The stream synced.
    pub stream: Entity,
    /// Completes after the stream's work.
    pub event: DeviceEvent,
    /// The caller's reply.
    pub reply: Option<Reply<Result<()>>>,
}

/// Memory held until every event has passed: released handles to reclaim, shared handles to
/// unpin.
#[derive(Component, Debug)]
pub struct PendingGc {
    /// Events that prove the device is done.
    pub events: SmallVec<[DeviceEvent; 2]>,
    /// Released handle entities whose memory returns afterwards.
    pub handles: Vec<Entity>,
    /// Shared handle entities pinned until then.
    pub pins: Vec<Entity>,
}

// ---- resources ----

/// The backend, as a resource.
#[derive(Resource)]
pub struct Device<B: Backend>(pub B);

/// The client inbox.
#[derive(Resource, Clone)]
pub struct InboxQueue(pub Arc<Inbox>);

/// What the ingest stage knows about each live handle, by id.
#[derive(Clone, Debug)]
pub struct HandleEntry {
    /// The handle entity, spawned when a task first uses the handle: a handle no work uses
    /// costs no entity (allocate-and-drop loops are common).
    pub entity: Option<Entity>,
    /// Requested size in bytes.
    pub size: u64,
    /// Its pool slice and the bytes it covers in a backend buffer (bindings are offset from
    /// `region.offset`), or why the allocation failed.
    pub memory: Result<(SliceKey, Region)>,
    /// The stream it was created on, at that stream's cursor then: its first owner.
    pub created: Owner,
    /// The streams whose tasks used its memory, counted as ingest creates the tasks (alignment
    /// records the same uses with cursors, a stage later): how its release may go.
    pub used_on: UsedOn,
}

/// The streams that used a handle's memory, as far as its release needs to know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UsedOn {
    /// No work: the memory goes back to its pool when the handle is released.
    Nothing,
    /// Work of one stream only: that stream's later allocations may reuse it at once.
    One(Entity),
    /// Several streams: reuse waits for an event on each.
    Several,
}

impl UsedOn {
    /// Adds a use on `stream`.
    #[inline]
    pub fn record(&mut self, stream: Entity) {
        *self = match *self {
            UsedOn::Nothing => UsedOn::One(stream),
            UsedOn::One(s) if s == stream => UsedOn::One(s),
            _ => UsedOn::Several,
        };
    }
}

/// Live handles by id (ids are dense integers: a multiply-hash is enough); an entry goes when
/// the user releases the handle.
#[derive(Resource, Default)]
pub struct HandleIndex(pub rustc_hash::FxHashMap<HandleId, HandleEntry>);

/// The stream entities by slot, and the GC stream.
#[derive(Resource)]
pub struct StreamTable {
    /// Compute stream entity per slot, created on first use.
    pub slots: Vec<Option<Entity>>,
    /// The GC stream's entity and device stream, created on first use.
    pub gc: Option<(Entity, DeviceStream)>,
}

/// The slot number given to the GC stream.
pub const GC_SLOT: usize = usize::MAX;

/// How many pending GCs pin each shared handle; a pinned handle is never reclaimed.
#[derive(Resource, Default, Debug)]
pub struct PinnedHandles(pub HashMap<Entity, u32>);

/// Emptied task boxes kept for reuse: a task is boxed so that stages move a pointer, and the
/// boxes are recycled so that a tick of many launches does not go through the allocator.
#[derive(Resource, Default)]
pub struct SpareTasks(pub Vec<Box<Task>>);

impl SpareTasks {
    /// Most boxes kept.
    pub const MAX: usize = 4096;
}

/// Tasks ingested this tick and not yet queued, in arrival order.
#[derive(Resource, Default)]
pub struct NewTasks {
    /// The tasks, in arrival order.
    pub tasks: Vec<Box<Task>>,
    /// The sequence number of the next task.
    pub next_seq: u64,
}

/// How streams are batched and submitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchedulingStrategy {
    /// Round-robin over ready streams, one task each.
    Interleave,
    /// Each ready stream's queue whole, one stream after another.
    Sequential,
}

/// The runtime's settings.
#[derive(Resource, Clone, Debug)]
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

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            stream_slots: 4,
            max_tasks: 1,
            strategy: SchedulingStrategy::Interleave,
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

/// Commands ingest could not take yet, in arrival order: an allocation found no memory while
/// released memory was still on its way back. Ingest retries them first at the next tick;
/// meanwhile every queue is submitted so that the released memory can retire.
#[derive(Resource, Default)]
pub struct DeferredCommands(pub Vec<crate::inbox::Command>);

/// A request from the client to return free memory to the device this tick.
#[derive(Resource, Default)]
pub struct CleanupRequested(pub bool);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_synced_never_moves_backwards_and_stays_sorted() {
        let mut synced = LastSynced::default();
        synced.record(2, 5);
        synced.record(0, 1);
        synced.record(2, 3);
        assert_eq!(synced.get(2), Some(5));
        assert_eq!(synced.get(1), None);
        assert_eq!(synced.0.as_slice(), &[(0, 1), (2, 5)]);
    }
}
