//! Ingest's one system and what it holds while it drains: the commands of a tick in arrival
//! order, each handed to its family (`memory.rs`, `work.rs`, `transfers.rs`, `replies.rs`,
//! `graphs.rs`), and what every family shares: stream entities, bindings resolved to device
//! memory, new tasks.

use super::deferred::DeferredCommands;
use super::handle_index::{HandleEntry, HandleIndex, HandleState, region_in, spawn_handle};
use super::replay_plan::ReplayPlans;
use crate::backend::Backend;
use crate::binding::Binding;
use crate::error::{BindingError, Error};
use crate::ids::{HandleId, StreamId};
use crate::inbox::{Command, CommandTap, Inbox, Op};
use crate::memory::MemoryPool;
use crate::outbox::Outbox;
use crate::trace::TraceRecorder;
use crate::world::*;
use bevy_ecs::prelude::*;
use bevy_ecs::system::SystemParam;
use rustc_hash::FxHashMap;
use smallvec::SmallVec;
use std::collections::VecDeque;
use std::sync::Arc;
use std::task::Waker;

/// A drain ends at its first read or sync after this many commands; the rest is carried to the
/// next tick (`DeferredCommands::carried`). Smaller drains are taken whole, so that a tick
/// still amortises its cost over many callers' commands.
pub const CUT_FROM: usize = 64;

/// What ingest reads and writes. Entities it creates (streams, handles a task first uses) are
/// spawned through `Commands`, which reserve their ids at once: the tasks of this drain name
/// them, and they exist from the sync point after ingest, before alignment reads them. What this
/// drain learns about them before then (a fault on a stream it opened, a handle released to the
/// lifetime) it keeps itself.
#[derive(SystemParam)]
pub struct IngestAccess<'w, 's, B: Backend> {
    commands: Commands<'w, 's>,
    tick: Res<'w, TickCounter>,
    tap: Option<ResMut<'w, CommandTap>>,
    deferred: ResMut<'w, DeferredCommands>,
    new: ResMut<'w, NewTasks>,
    index: ResMut<'w, HandleIndex>,
    streams: ResMut<'w, StreamTable>,
    device: ResMut<'w, Device<B>>,
    pool: ResMut<'w, MemoryPool>,
    stats: ResMut<'w, Stats>,
    outbox: ResMut<'w, Outbox>,
    recorder: Option<ResMut<'w, TraceRecorder>>,
    stream_states: StreamStates<'w, 's>,
    released: Query<'w, 's, (), With<Released>>,
    /// The client inbox and the waker that asks it for a tick, cloned once: whatever waits for
    /// another runtime is polled with the waker.
    inbox: Local<'s, InboxHandle>,
    /// Replays planned as units: ingest's alone.
    plans: Local<'s, ReplayPlans>,
}

/// The cursor and fault of each stream.
type StreamStates<'w, 's> = Query<'w, 's, (&'static StreamCursor, &'static mut StreamFault)>;

/// The client inbox, held by ingest from its first tick (`InboxQueue` holds the same one), with
/// the waker that asks it for a tick.
pub struct InboxHandle {
    inbox: Arc<Inbox>,
    waker: Waker,
}

impl std::fmt::Debug for InboxHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InboxHandle").finish_non_exhaustive()
    }
}

impl FromWorld for InboxHandle {
    fn from_world(world: &mut World) -> InboxHandle {
        let inbox = world.resource::<InboxQueue>().0.clone();
        InboxHandle {
            waker: crate::inbox::InboxWaker::waker(inbox.clone()),
            inbox,
        }
    }
}

impl<B: Backend> std::fmt::Debug for IngestAccess<'_, '_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IngestAccess")
            .field("handles", &self.index.0.len())
            .finish_non_exhaustive()
    }
}

/// Drains the commands deferred last tick, then the inbox, into entities.
pub fn ingest_commands<B: Backend>(
    access: IngestAccess<B>,
    mut scratch: Local<Vec<Command>>,
    mut deferred_waiting: Local<bool>,
    mut carried_waiting: Local<bool>,
) {
    let _span = tracing::trace_span!(target: "gpuworld::stream", "ingest").entered();
    let IngestAccess {
        mut commands,
        tick,
        mut tap,
        mut deferred,
        mut new,
        mut index,
        mut streams,
        mut device,
        mut pool,
        mut stats,
        mut outbox,
        mut recorder,
        mut stream_states,
        released,
        inbox,
        mut plans,
    } = access;
    let mut drained = this_ticks_commands(
        &inbox.inbox,
        &mut scratch,
        &mut deferred,
        &mut carried_waiting,
        tap.as_deref_mut().map(|tap| (tap, tick.0)),
    );
    // The deferred commands are touched only when this system left some (it alone writes them
    // during ticks).
    let mut waiting = if *deferred_waiting {
        std::mem::take(&mut deferred.waiting)
    } else {
        VecDeque::new()
    };
    if drained.is_empty() && waiting.is_empty() {
        if scratch.capacity() == 0 {
            *scratch = Vec::from(drained);
        }
        return;
    }
    let new = &mut *new;
    let mut ingest = Ingest {
        index: &mut index.0,
        slots: &mut streams.slots,
        next_seq: new.next_seq,
        tasks: &mut new.tasks,
        spare: &mut new.spare,
        commands: &mut commands,
        device: &mut device.0,
        pool: &mut pool,
        outbox: &mut outbox,
        plans: &mut plans,
        recorder: recorder.as_deref_mut(),
        tick: tick.0,
        stream_states: &mut stream_states,
        released: &released,
        released_to_lifetime: false,
        for_graph: false,
        spawned: SmallVec::new(),
        reclaimed: 0,
        waker: &inbox.waker,
    };
    ingest.take_in_order(
        &mut waiting,
        &mut drained,
        &mut deferred,
        &mut carried_waiting,
    );
    let (next_seq, reclaimed) = (ingest.next_seq, ingest.reclaimed);
    new.next_seq = next_seq;
    if reclaimed > 0 {
        stats.handles_reclaimed += reclaimed;
    }
    if scratch.capacity() == 0 {
        *scratch = Vec::from(drained);
    }
    *deferred_waiting = !waiting.is_empty();
    if *deferred_waiting {
        tracing::trace!(target: "gpuworld::memory", commands = waiting.len(), "commands wait for memory or another runtime");
        deferred.waiting = waiting;
    }
}

/// The commands this tick drains: those carried from the last tick, then the inbox's, shown to
/// the tap if any; cut after the first read or sync past [`CUT_FROM`] (or past the carried ones),
/// the rest carried to the next tick.
fn this_ticks_commands(
    inbox: &Inbox,
    scratch: &mut Vec<Command>,
    deferred: &mut DeferredCommands,
    carried_waiting: &mut bool,
    tap: Option<(&mut CommandTap, u64)>,
) -> VecDeque<Command> {
    let mut fresh = std::mem::take(scratch);
    inbox.drain_into(&mut fresh);
    // Carried commands come first. A deque of them is taken as it is and a vector of new ones
    // becomes one in place, so neither is copied whatever the backlog.
    let (mut drained, carried_in) = if std::mem::take(carried_waiting) {
        let mut carried = std::mem::take(&mut deferred.carried);
        let carried_in = carried.len();
        carried.extend(fresh.drain(..));
        *scratch = fresh;
        (carried, carried_in)
    } else {
        (VecDeque::from(fresh), 0)
    };
    if let Some((tap, tick)) = tap {
        (drained.range(carried_in..)).for_each(|command| (tap.0)(tick, command));
    }
    // The commands carried from the last tick are taken whole: a tick takes at least what the
    // one before left, so a backlog never outgrows one drain however many callers queue.
    let from = CUT_FROM.max(carried_in);
    if let Some(cut) = (from < drained.len())
        .then(|| drained.range(from..).position(Command::may_block_a_caller))
        .flatten()
        .map(|at| from + at + 1)
        .filter(|&cut| cut < drained.len())
    {
        deferred.carried = drained.split_off(cut);
        *carried_waiting = true;
    }
    drained
}

/// What ingest holds while it drains: its access, borrowed field by field, and what the drain
/// learned that the world shows only once the drain's commands apply.
pub(super) struct Ingest<'a, 'w, 's, B: Backend> {
    pub(super) index: &'a mut FxHashMap<HandleId, HandleEntry>,
    pub(super) slots: &'a mut Vec<Option<Entity>>,
    pub(super) next_seq: u64,
    #[allow(
        clippy::vec_box,
        reason = "stages move a task's box, not the task (measured)"
    )]
    pub(super) tasks: &'a mut Vec<Box<Task>>,
    pub(super) spare: &'a mut SpareTasks,
    pub(super) commands: &'a mut Commands<'w, 's>,
    pub(super) device: &'a mut B,
    pub(super) pool: &'a mut MemoryPool,
    pub(super) outbox: &'a mut Outbox,
    pub(super) plans: &'a mut ReplayPlans,
    pub(super) recorder: Option<&'a mut TraceRecorder>,
    pub(super) tick: u64,
    pub(super) stream_states: &'a mut StreamStates<'w, 's>,
    pub(super) released: &'a Query<'w, 's, (), With<Released>>,
    /// Whether this drain handed released memory to the lifetime's later steps (its `Released`
    /// marker applies only after the drain).
    pub(super) released_to_lifetime: bool,
    /// Whether the command being taken is a graph's (a replay, or a part of a transfer it
    /// issues): only then may a binding name a handle released while pinned.
    pub(super) for_graph: bool,
    /// Tasks created this drain per stream: alignment gives them cursors after `StreamCursor`.
    pub(super) spawned: SmallVec<[(Entity, u64); 4]>,
    /// Handles whose memory went back to the pool at release.
    pub(super) reclaimed: u64,
    /// What arriving bytes and native ops waiting for another runtime are polled with: it asks
    /// this runtime for a tick, so a device thread may sleep while they are on their way.
    pub(super) waker: &'a Waker,
}

impl<B: Backend> Ingest<'_, '_, '_, B> {
    /// Takes the commands still `waiting` from earlier ticks, from the front, until one must
    /// still wait; then, if none does, the `drained` ones. What must wait stays in `waiting`
    /// with every command after it; what a full parking leaves goes to `deferred`'s carried.
    fn take_in_order(
        &mut self,
        waiting: &mut VecDeque<Command>,
        drained: &mut VecDeque<Command>,
        deferred: &mut DeferredCommands,
        carried_waiting: &mut bool,
    ) {
        while let Some(command) = waiting.pop_front() {
            if let Some(still_waiting) = self.one(command) {
                waiting.push_front(still_waiting);
                break;
            }
            if self.pool.parking_full() {
                // As below: the rest waits for the memory this tick parked.
                break;
            }
        }
        if !waiting.is_empty() {
            waiting.extend(drained.drain(..));
            return;
        }
        while let Some(command) = drained.pop_front() {
            if let Some(still_waiting) = self.one(command) {
                waiting.push_back(still_waiting);
                waiting.extend(drained.drain(..));
                break;
            }
            if self.pool.parking_full() && !drained.is_empty() {
                // Memory freed this tick comes back only behind this tick's events: the rest
                // waits for the next tick, whose GC stage may have it back (`parking_full`).
                drained.append(&mut deferred.carried);
                deferred.carried = std::mem::take(drained);
                *carried_waiting = true;
                break;
            }
        }
    }

    /// Takes one command, handing it to its family; gives it back when it must wait (for
    /// released memory to retire, or for another runtime).
    fn one(&mut self, command: Command) -> Option<Command> {
        match command {
            Command::Op(op) => return self.op(op).map(Command::Op),
            Command::Native {
                work,
                buffers,
                stream,
            } => return self.native(work, buffers, stream),
            Command::WriteArriving { dst, bytes, stream } => {
                return self.write_arriving(dst, bytes, stream);
            }
            Command::Read {
                sources,
                stream,
                reply,
                staging,
            } => self.read(&sources, stream, reply, staging),
            Command::Sync { stream, reply } => self.sync(stream, reply),
            Command::Mark { stream, reply } => self.mark(stream, reply),
            Command::Replay {
                graph,
                version,
                ops,
            } => {
                self.for_graph = true;
                self.replay(graph, version, &ops);
                self.for_graph = false;
            }
            Command::ForGraph(command) => {
                self.for_graph = true;
                let waiting = self.one(*command);
                self.for_graph = false;
                return waiting.map(|command| Command::ForGraph(Box::new(command)));
            }
        }
        None
    }

    /// Takes one op, handing it to its family; gives it back when it must wait for released
    /// memory to retire.
    pub(super) fn op(&mut self, op: Op) -> Option<Op> {
        match op {
            Op::Create {
                handle,
                size,
                data,
                stream,
            } => return self.create(handle, size, data, stream),
            Op::Release { handle } => self.release_handle(handle),
            Op::MemoryCleanup => self.pool.request_cleanup(),
            Op::OpenAllocationMode { stream, mode } => self.open_mode(stream, mode),
            Op::CloseAllocationMode { stream } => self.close_mode(stream),
            Op::Launch(launch) => {
                let stream = self.stream_entity(launch.stream);
                self.launch(stream, launch);
            }
            Op::Flush { stream } => self.flush(stream),
            Op::Write { dst, data, stream } => {
                let stream = self.stream_entity(stream);
                self.write(stream, &dst, data);
            }
            Op::Pin { handle, holder } => self.pin(handle, holder),
            Op::Unpin { handle, holder } => self.unpin(handle, holder),
        }
        None
    }

    /// Keeps the first fault of a stream until a read or sync reports it; a stream this drain
    /// opened gets it once it exists.
    pub(super) fn record_fault(&mut self, stream: Entity, error: Error) {
        match self.stream_states.get_mut(stream) {
            Ok((_, mut fault)) => fault.record(error),
            Err(_) => {
                self.commands
                    .entity(stream)
                    .queue(move |mut entity: EntityWorldMut| {
                        if let Some(mut fault) = entity.get_mut::<StreamFault>() {
                            fault.record(error);
                        }
                    });
            }
        }
    }

    /// The cursor `stream`'s last task will have once alignment has numbered this drain's tasks.
    pub(super) fn cursor_now(&self, stream: Entity) -> u64 {
        let assigned = self.stream_states.get(stream).map_or(0, |(c, _)| c.0);
        let pending = self
            .spawned
            .iter()
            .find(|(s, _)| *s == stream)
            .map_or(0, |(_, n)| *n);
        assigned + pending
    }

    /// The stream entity of `id`'s slot, created with its device stream on first use.
    pub(super) fn stream_entity(&mut self, id: StreamId) -> Entity {
        let slot = (id.value % self.slots.len() as u64) as usize;
        if let Some(entity) = self.slots[slot] {
            return entity;
        }
        let device = self.device.create_stream(id);
        let ordinal = self.slots.iter().filter(|s| s.is_some()).count() as u64;
        let entity = (self.commands)
            .spawn(Stream {
                id,
                slot,
                device,
                ordinal,
            })
            .id();
        self.slots[slot] = Some(entity);
        tracing::debug!(target: "gpuworld::stream", %id, slot, "stream opened");
        entity
    }

    /// Resolves a binding used by a task of `stream` to device memory, or says why it cannot be
    /// used; the handle's entity is spawned at its first use. A handle the user released is
    /// refused even while a graph or lease pins its memory, except to the graph's own commands
    /// (`for_graph`): the pin keeps the memory for its holders, not for the user's bindings.
    #[inline]
    pub(super) fn resolve(
        &mut self,
        binding: &Binding,
        writes: bool,
        stream: Entity,
    ) -> Result<TaskBinding, Error> {
        let (start, end) = binding.range()?;
        let entry = (self.index.get_mut(&binding.handle()))
            .filter(|entry| !entry.released_while_pinned || self.for_graph)
            .ok_or(Error::Binding(BindingError::ReleasedHandle {
                handle: binding.handle(),
            }))?;
        let (entity, memory) = match &entry.state {
            // The common case, a handle used before.
            HandleState::Spawned { entity, region, .. } => (*entity, *region),
            HandleState::Unspawned { memory, .. } => {
                let (slice, region) = *memory.as_ref().map_err(Clone::clone)?;
                // The facts move to the entity; the entry keeps the entity and the region.
                let state = std::mem::replace(
                    &mut entry.state,
                    HandleState::Spawned {
                        entity: Entity::PLACEHOLDER,
                        slice,
                        region,
                    },
                );
                let entity = spawn_handle(self.commands, binding.handle(), state, entry.used_on);
                entry.state = HandleState::Spawned {
                    entity,
                    slice,
                    region,
                };
                (entity, region)
            }
        };
        let region = region_in(binding.handle(), memory, start, end)?;
        entry.used_on.record(stream);
        Ok(TaskBinding {
            handle: entity,
            region,
            writes,
        })
    }

    /// Appends a task to this tick's new tasks.
    pub(super) fn spawn_task(
        &mut self,
        stream: Entity,
        work: TaskWork,
        bindings: SmallVec<[TaskBinding; 4]>,
    ) {
        let task = self.spare.task(self.next_seq, stream, work, bindings);
        self.tasks.push(task);
        self.next_seq += 1;
        match self.spawned.iter_mut().find(|(s, _)| *s == stream) {
            Some((_, n)) => *n += 1,
            None => self.spawned.push((stream, 1)),
        }
    }
}
