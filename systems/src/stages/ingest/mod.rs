//! Stage 1, ingest: drains the client inbox, in arrival order, into handle entities, tasks and
//! releases. Owns `HandleIndex` (`handle_index.rs`: a handle's facts until a task first uses it,
//! then only its entity) and `DeferredCommands` (`deferred.rs`); fills `NewTasks`; creates stream
//! entities on first use. Releases take effect in arrival order through the lifetime's step 1
//! (`stages/lifetime.rs`), so an allocation after a release can reuse its memory in the same
//! tick. An allocation that finds no memory while released memory is still retiring waits, with
//! every command after it, for a later tick. Its one system declares what it touches
//! ([`IngestAccess`]); the entities it spawns apply before alignment runs.

mod deferred;
mod handle_index;

use super::lifetime::Freed;
use crate::error::{BindingError, Error, GraphError, MemoryError};
pub use deferred::DeferredCommands;
pub use handle_index::{HandleEntry, HandleIndex, HandleState};
use handle_index::{region_in, release, spawn_handle};

use super::alignment::Owner;
pub use super::lifetime::UsedOn;
use super::tick::TickStage;
use crate::backend::{Backend, LaunchCount, Region};
use crate::binding::Binding;
use crate::bytes::HostBytes;
use crate::graph::{PlannedLaunch, Recorded, ReplayLaneEnd};
use crate::ids::{HandleId, StreamId};
use crate::inbox::{Command, CommandTap, Inbox};
use crate::kernel::{CubeCount, ExecutionMode, Kernel};
use crate::memory::{Compaction, MemoryPool, Movable, Moved, SliceKey};
use crate::outbox::Outbox;
use crate::trace::TraceRecorder;
use crate::world::*;
use bevy_ecs::prelude::*;
use bevy_ecs::system::SystemParam;
use rustc_hash::FxHashMap;
use smallvec::SmallVec;
use std::collections::VecDeque;
use std::sync::Arc;
use std::task::{Context, Waker};

/// A drain ends at its first read or sync after this many commands; the rest is carried to the
/// next tick (`DeferredCommands::carried`). Smaller drains are taken whole, so that a tick
/// still amortises its cost over many callers' commands.
pub const CUT_FROM: usize = 64;

/// Registers the ingest stage: its handle index, its deferred commands and its system.
pub fn build<B: Backend>(world: &mut World, schedule: &mut Schedule) {
    world.init_resource::<HandleIndex>();
    world.init_resource::<DeferredCommands>();
    schedule.add_systems(ingest_commands::<B>.in_set(TickStage::Ingest));
}

/// The commands waiting, and the lines of the handles no work used yet.
pub(super) fn snapshot_lines(world: &mut World, capture: &mut crate::snapshot::Capture<'_>) {
    deferred::snapshot_lines(world, capture);
    handle_index::snapshot_lines(world, capture);
}

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
    // The deferred commands are touched only when this system left some (it alone writes them
    // during ticks).
    let mut fresh = std::mem::take(&mut *scratch);
    inbox.inbox.drain_into(&mut fresh);
    // Carried commands come first. A deque of them is taken as it is and a vector of new ones
    // becomes one in place, so neither is copied whatever the backlog.
    let (mut drained, carried_in) = if std::mem::take(&mut *carried_waiting) {
        let mut carried = std::mem::take(&mut deferred.carried);
        let carried_in = carried.len();
        carried.extend(fresh.drain(..));
        *scratch = fresh;
        (carried, carried_in)
    } else {
        (VecDeque::from(fresh), 0)
    };
    if let Some(tap) = &mut tap {
        (drained.range(carried_in..)).for_each(|command| (tap.0)(tick.0, command));
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
        spawned: SmallVec::new(),
        reclaimed: 0,
        waker: &inbox.waker,
    };
    // The deferred commands first, from the front, until one must still wait; the new ones go
    // behind whatever still waits.
    while let Some(command) = waiting.pop_front() {
        if let Some(still_waiting) = ingest.one(command) {
            waiting.push_front(still_waiting);
            break;
        }
        if ingest.pool.parking_full() {
            // As below: the rest waits for the memory this tick parked.
            break;
        }
    }
    if waiting.is_empty() {
        while let Some(command) = drained.pop_front() {
            if let Some(still_waiting) = ingest.one(command) {
                waiting.push_back(still_waiting);
                waiting.extend(drained.drain(..));
                break;
            }
            if ingest.pool.parking_full() && !drained.is_empty() {
                // Memory freed this tick comes back only behind this tick's events: the rest
                // waits for the next tick, whose GC stage may have it back (`parking_full`).
                drained.append(&mut deferred.carried);
                deferred.carried = std::mem::take(&mut drained);
                *carried_waiting = true;
                break;
            }
        }
    } else {
        waiting.extend(drained.drain(..));
    }
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

/// What ingest holds while it drains: its access, borrowed field by field, and what the drain
/// learned that the world shows only once the drain's commands apply.
struct Ingest<'a, 'w, 's, B: Backend> {
    index: &'a mut FxHashMap<HandleId, HandleEntry>,
    slots: &'a mut Vec<Option<Entity>>,
    next_seq: u64,
    #[allow(
        clippy::vec_box,
        reason = "stages move a task's box, not the task (measured)"
    )]
    tasks: &'a mut Vec<Box<Task>>,
    spare: &'a mut SpareTasks,
    commands: &'a mut Commands<'w, 's>,
    device: &'a mut B,
    pool: &'a mut MemoryPool,
    outbox: &'a mut Outbox,
    plans: &'a mut ReplayPlans,
    recorder: Option<&'a mut TraceRecorder>,
    tick: u64,
    stream_states: &'a mut StreamStates<'w, 's>,
    released: &'a Query<'w, 's, (), With<Released>>,
    /// Whether this drain handed released memory to the lifetime's later steps (its `Released`
    /// marker applies only after the drain).
    released_to_lifetime: bool,
    /// Tasks created this drain per stream: alignment gives them cursors after `StreamCursor`.
    spawned: SmallVec<[(Entity, u64); 4]>,
    /// Handles whose memory went back to the pool at release.
    reclaimed: u64,
    /// What arriving bytes and native ops waiting for another runtime are polled with: it asks
    /// this runtime for a tick, so a device thread may sleep while they are on their way.
    waker: &'a Waker,
}

impl<B: Backend> Ingest<'_, '_, '_, B> {
    /// Takes one command; gives it back when it must wait for released memory to retire.
    fn one(&mut self, command: Command) -> Option<Command> {
        match command {
            Command::Create {
                handle,
                size,
                data,
                stream: stream_id,
            } => {
                let stream = self.stream_entity(stream_id);
                if self.pool.waits_for_parked(size, stream_id, stream) {
                    return Some(Command::Create {
                        handle,
                        size,
                        data,
                        stream: stream_id,
                    });
                }
                // Live handles a compaction may move, looked up only if one runs.
                let mut movable: Option<FxHashMap<SliceKey, (HandleId, Movable)>> = None;
                let mut moves = Vec::new();
                let reserved = {
                    let index = &*self.index;
                    let mut allows = |slice: SliceKey| {
                        let handles = movable.get_or_insert_with(|| movable_handles(index));
                        handles
                            .get(&slice)
                            .map_or(Movable::No, |&(_, movable)| movable)
                    };
                    self.pool.reserve_moving(
                        self.device,
                        size,
                        stream_id,
                        stream,
                        Some(Compaction {
                            movable: &mut allows,
                            moves: &mut moves,
                            stream: Some(stream),
                        }),
                    )
                };
                let retiring = reserved.is_err() && self.pool.retiring() > 0;
                if let Some(handles) = &movable {
                    self.apply_moves(stream, &moves, handles);
                }
                let parked_by_stream = reserved.as_ref().is_ok_and(|r| r.parked_by_stream);
                if matches!(reserved, Err(MemoryError::OutOfMemory { .. }))
                    && (retiring || self.memory_retiring())
                {
                    return Some(Command::Create {
                        handle,
                        size,
                        data,
                        stream: stream_id,
                    });
                }
                // The cursor of the stream's last task so far, this drain's included: a later
                // user of the handle on another stream waits for everything before its creation.
                let cursor = self.cursor_now(stream);
                let memory = reserved.map(|r| (r.slice, r.region)).map_err(Error::from);
                let mut used_on = UsedOn::Nothing;
                match &memory {
                    // The stream's earlier work may still use memory it parked.
                    Ok(_) if parked_by_stream => used_on.record(stream),
                    Ok(_) => {}
                    // The failure belongs to the handle: every use of it reports the error,
                    // nothing else on the stream does.
                    Err(error) => {
                        tracing::warn!(target: "gpuworld::memory", %handle, size, %error, "allocation failed");
                    }
                }
                let region = memory.as_ref().ok().map(|(_, region)| *region);
                let mut state = HandleState::Unspawned {
                    size,
                    memory,
                    created: Owner { stream, cursor },
                };
                let entity = match (&data, &state) {
                    (
                        Some(_),
                        HandleState::Unspawned {
                            memory: Ok((slice, region)),
                            ..
                        },
                    ) => {
                        let (slice, region) = (*slice, *region);
                        let entity = spawn_handle(self.commands, handle, state, used_on);
                        state = HandleState::Spawned {
                            entity,
                            slice,
                            region,
                        };
                        used_on.record(stream);
                        Some(entity)
                    }
                    _ => None,
                };
                self.index.insert(
                    handle,
                    HandleEntry {
                        state,
                        used_on,
                        graph_pins: 0,
                        released_while_pinned: false,
                    },
                );
                if let (Some(data), Some(region), Some(entity)) = (data, region, entity) {
                    let binding = TaskBinding {
                        handle: entity,
                        region,
                        writes: true,
                    };
                    self.spawn_task(
                        stream,
                        TaskWork::Write(data),
                        SmallVec::from_elem(binding, 1),
                    );
                }
            }
            Command::Write { dst, data, stream } => {
                let stream = self.stream_entity(stream);
                self.write(stream, &dst, data);
            }
            Command::WriteArriving {
                dst,
                mut bytes,
                stream,
            } => match bytes.poll_bytes(&mut Context::from_waker(self.waker)) {
                std::task::Poll::Ready(Ok(data)) => {
                    return self.one(Command::Write { dst, data, stream });
                }
                std::task::Poll::Ready(Err(error)) => {
                    let stream = self.stream_entity(stream);
                    self.record_fault(stream, error);
                }
                std::task::Poll::Pending => {
                    return Some(Command::WriteArriving { dst, bytes, stream });
                }
            },
            Command::Native {
                work,
                buffers,
                stream,
            } => {
                let ready = work.poll_ready(&mut Context::from_waker(self.waker));
                if ready.is_pending() {
                    return Some(Command::Native {
                        work,
                        buffers,
                        stream,
                    });
                }
                let stream = self.stream_entity(stream);
                if let std::task::Poll::Ready(Err(error)) = ready {
                    if !work.pass_on(&error) {
                        self.record_fault(stream, error);
                    }
                    return None;
                }
                let resolved: Result<SmallVec<[TaskBinding; 4]>, Error> = buffers
                    .iter()
                    .map(|b| self.resolve(b, true, stream))
                    .collect();
                match resolved {
                    Ok(bindings) => self.spawn_task(stream, TaskWork::Native(work), bindings),
                    Err(error) => {
                        if !work.pass_on(&error) {
                            self.record_fault(stream, error);
                        }
                    }
                }
            }
            Command::Launch {
                kernel,
                count,
                buffers,
                scalars,
                mode,
                stream,
            } => {
                let stream = self.stream_entity(stream);
                let mode = mode.execution_mode();
                self.launch(stream, kernel, count, &buffers, scalars, mode);
            }
            Command::Read {
                sources,
                stream,
                reply,
                staging,
            } => {
                let stream = self.stream_entity(stream);
                // A loop, not `collect`: collecting into a `SmallVec` costs hundreds of
                // instructions for the one or two sources a read has.
                let mut bindings = SmallVec::<[TaskBinding; 4]>::new();
                let resolved = sources.iter().try_for_each(|b| {
                    bindings.push(self.resolve(b, false, stream)?);
                    Ok(())
                });
                match resolved.map(|()| bindings) {
                    Ok(bindings) => {
                        let read = TaskWork::Read(ReadRequest { reply, staging });
                        self.spawn_task(stream, read, bindings);
                    }
                    Err(error) => {
                        self.outbox.read(reply, Err(error));
                    }
                }
            }
            Command::Flush { stream } => {
                let stream = self.stream_entity(stream);
                self.spawn_task(stream, TaskWork::Flush, SmallVec::new());
            }
            Command::Sync { stream, reply } => {
                let stream = self.stream_entity(stream);
                self.spawn_task(stream, TaskWork::Sync(reply), SmallVec::new());
            }
            Command::Mark { stream, reply } => {
                let stream = self.stream_entity(stream);
                self.spawn_task(stream, TaskWork::Mark(reply), SmallVec::new());
            }
            Command::Release { handle } => {
                // One lookup on the common path (drop loops); a graph's pin puts it back.
                if let Some(entry) = self.index.remove(&handle) {
                    if entry.graph_pins > 0 {
                        let entry = HandleEntry {
                            released_while_pinned: true,
                            ..entry
                        };
                        self.index.insert(handle, entry);
                        return None;
                    }
                    self.release_entry(handle, entry);
                }
            }
            Command::Pin { handle } => {
                if let Some(entry) = self.index.get_mut(&handle) {
                    entry.graph_pins += 1;
                }
            }
            Command::Unpin { handle } => {
                if let Some(entry) = self.index.get_mut(&handle) {
                    entry.graph_pins = entry.graph_pins.saturating_sub(1);
                    if entry.graph_pins == 0 && entry.released_while_pinned {
                        self.release(handle);
                    }
                }
            }
            Command::Replay {
                graph,
                version,
                commands,
            } => {
                tracing::trace!(target: "gpuworld::graph", graph, commands = commands.len(), "replay");
                if let Some(recorder) = self.recorder.as_deref_mut()
                    && recorder.is_tracing()
                {
                    let lines = commands.iter().map(Recorded::describe).collect();
                    recorder.replayed(self.tick, graph, lines);
                }
                self.replay_in_runs(graph, version, &commands);
            }
            Command::MemoryCleanup => self.pool.request_cleanup(),
            Command::OpenAllocationMode { stream, mode } => {
                self.pool.modes_mut().push(stream, mode);
            }
            Command::CloseAllocationMode { stream } => {
                if !self.pool.modes_mut().pop(stream) {
                    tracing::warn!(target: "gpuworld::memory", %stream, "closing an allocation mode window that is not open");
                }
            }
        }
        None
    }

    /// Releases `handle`'s memory: back to the pool, parked for its stream, or to the GC stage.
    fn release(&mut self, handle: HandleId) {
        if let Some(entry) = self.index.remove(&handle) {
            self.release_entry(handle, entry);
        }
    }

    /// Hands a released handle's memory to the lifetime's step 1, counting what went back now.
    fn release_entry(&mut self, handle: HandleId, entry: HandleEntry) {
        match release(self.commands, self.pool, handle, entry) {
            Freed::Now => self.reclaimed += 1,
            Freed::Later => self.released_to_lifetime = true,
            Freed::NothingHeld => {}
        }
    }

    /// Whether released memory is still on its way back to the pools: an allocation that found
    /// none may succeed once it has retired.
    fn memory_retiring(&self) -> bool {
        self.released_to_lifetime || !self.released.is_empty()
    }

    /// Keeps the first fault of a stream until a read or sync reports it; a stream this drain
    /// opened gets it once it exists.
    fn record_fault(&mut self, stream: Entity, error: Error) {
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

    /// A replay of launches only, with static grids, as one native task the backend runs itself
    /// (`Backend::graph_replay`: a CUDA graph, a wgpu plan, one operation of a cpu worker); on
    /// one stream, or on several where the backend replays across streams: then the task goes
    /// on the first launch's stream with each launch's lane and the launches of other lanes it
    /// follows, and each other stream gets a [`ReplayLaneEnd`] after it. The plan of a graph at
    /// a version is made at its first replay and kept ([`ReplayPlans`]): a replay resolves the
    /// frame's distinct bindings and shares the launches. Whether it was.
    fn replay_as_one(&mut self, graph: u64, version: u64, commands: &[Recorded]) -> bool {
        if !B::replays_graphs() || commands.len() < 2 {
            return false;
        }
        let plan = match self.plans.get(graph, version) {
            Some(plan) => plan,
            None => {
                let Some(plan) = ReplayPlan::make(commands, B::replays_graphs_across_streams())
                else {
                    return false;
                };
                let plan = Arc::new(plan);
                self.plans.insert(graph, version, plan.clone());
                plan
            }
        };
        let stream = self.stream_entity(plan.lanes[0]);
        let mut bindings = SmallVec::<[TaskBinding; 4]>::new();
        for (binding, writes) in &plan.bindings {
            // A binding that does not resolve: the launches one by one report it.
            let Ok(resolved) = self.resolve(binding, *writes, stream) else {
                return false;
            };
            bindings.push(resolved);
        }
        let Some(work) = B::graph_replay(graph, version, plan.launches.clone()) else {
            return false;
        };
        self.spawn_task(stream, TaskWork::Native(work), bindings);
        // Each other lane's stream follows the replay where its launches wrote: a lane end
        // binding those buffers, after the replay task that wrote them.
        for (lane_stream, written) in plan.lanes.iter().skip(1).zip(&plan.lane_writes) {
            let entity = self.stream_entity(*lane_stream);
            // The same handles resolved for the replay task just above: none fails here.
            let ends = (written.iter())
                .filter_map(|&i| {
                    let (binding, _) = &plan.bindings[usize::from(i)];
                    self.resolve(binding, true, entity).ok()
                })
                .collect();
            self.spawn_task(entity, TaskWork::Native(Box::new(ReplayLaneEnd)), ends);
        }
        true
    }

    /// A replay: each run of two or more launches with static grids is one unit as in
    /// [`Self::replay_as_one`] (a replay of launches only is one run), and every other command is
    /// issued as it was captured. Run `r` is planned under the graph's number with `r` in its top
    /// bits (the first run under the graph's own); a run past [`MAX_RUNS`] runs launch by launch.
    fn replay_in_runs(&mut self, graph: u64, version: u64, commands: &[Recorded]) {
        let unit = |command: &Recorded| {
            matches!(
                command,
                Recorded::Launch {
                    count: CubeCount::Static(..),
                    ..
                }
            )
        };
        let (mut start, mut run) = (0, 0u64);
        while start < commands.len() {
            let end = start + commands[start..].iter().take_while(|c| unit(c)).count();
            if end - start >= 2 {
                let key = graph ^ (run << RUN_KEY_SHIFT);
                run += 1;
                if run <= MAX_RUNS && self.replay_as_one(key, version, &commands[start..end]) {
                    start = end;
                    continue;
                }
            }
            // The launches one by one (none, or a run that cannot be one unit), then the
            // command that ended the run.
            let stop = (end + 1).min(commands.len());
            for recorded in &commands[start..stop] {
                self.replay_one(recorded);
            }
            start = stop;
        }
    }

    /// One command of a replayed graph, as the command it was captured from.
    fn replay_one(&mut self, recorded: &Recorded) {
        match recorded {
            Recorded::Launch {
                kernel,
                count,
                buffers,
                scalars,
                mode,
                stream,
            } => {
                let stream = self.stream_entity(*stream);
                self.launch(stream, kernel, *count, buffers, scalars.clone(), *mode);
            }
            Recorded::Write { dst, data, stream } => {
                let stream = self.stream_entity(*stream);
                self.write(stream, dst, data.clone());
            }
            Recorded::Flush { stream } => {
                let stream = self.stream_entity(*stream);
                self.spawn_task(stream, TaskWork::Flush, SmallVec::new());
            }
            // A graph issues its transfers itself, between the replays of the commands around
            // them (`Graph::replay`); one inside a replay command came from elsewhere, and is the
            // stream's fault rather than a silent skip.
            Recorded::Transfer { stream, .. } => {
                let stream = self.stream_entity(*stream);
                let call = "a transfer inside a replay command (a graph issues it itself)";
                tracing::warn!(target: "gpuworld::graph", call, "not replayed");
                self.record_fault(stream, Error::Graph(GraphError::NotCapturable { call }));
            }
        }
    }

    /// A write's task on `stream`, or its binding's error as the stream's fault.
    fn write(&mut self, stream: Entity, dst: &Binding, data: HostBytes) {
        match self.resolve(dst, true, stream) {
            Ok(binding) => self.spawn_task(
                stream,
                TaskWork::Write(data),
                SmallVec::from_elem(binding, 1),
            ),
            Err(error) => self.record_fault(stream, error),
        }
    }

    /// A launch's task on `stream`, or its binding's error as the stream's fault.
    #[allow(clippy::too_many_arguments, reason = "a launch's parts")]
    fn launch(
        &mut self,
        stream: Entity,
        kernel: Kernel,
        count: CubeCount,
        buffers: &[Binding],
        scalars: SmallVec<[u32; 4]>,
        mode: ExecutionMode,
    ) {
        let mut bindings = SmallVec::<[TaskBinding; 4]>::new();
        let mut launch_count = LaunchCount::Static([0; 3]);
        // A binding the signature declares read-only is ordered as a read: readers of one
        // buffer on different streams do not wait for each other.
        let params = kernel.signature.buffers;
        let resolved = buffers
            .iter()
            .enumerate()
            .try_for_each(|(i, b)| {
                let writes = params.get(i).is_none_or(|p| p.access.writes());
                self.resolve(b, writes, stream).map(|tb| bindings.push(tb))
            })
            .and_then(|()| match count {
                CubeCount::Static(x, y, z) => {
                    launch_count = LaunchCount::Static([x, y, z]);
                    Ok(())
                }
                CubeCount::Dynamic(b) => self.resolve(&b, false, stream).map(|tb| {
                    launch_count = LaunchCount::Dynamic(tb.region);
                    bindings.push(tb);
                }),
            });
        match resolved {
            Ok(()) => self.spawn_task(
                stream,
                TaskWork::Launch {
                    kernel,
                    count: launch_count,
                    scalars,
                    mode,
                },
                bindings,
            ),
            Err(error) => self.record_fault(stream, error),
        }
    }

    /// The cursor `stream`'s last task will have once alignment has numbered this drain's tasks.
    fn cursor_now(&self, stream: Entity) -> u64 {
        let assigned = self.stream_states.get(stream).map_or(0, |(c, _)| c.0);
        let pending = self
            .spawned
            .iter()
            .find(|(s, _)| *s == stream)
            .map_or(0, |(_, n)| *n);
        assigned + pending
    }

    /// The stream entity of `id`'s slot, created with its device stream on first use.
    fn stream_entity(&mut self, id: StreamId) -> Entity {
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
    /// used; the handle's entity is spawned at its first use.
    #[inline]
    fn resolve(
        &mut self,
        binding: &Binding,
        writes: bool,
        stream: Entity,
    ) -> Result<TaskBinding, Error> {
        let (start, end) = binding.range()?;
        let entry = self.index.get_mut(&binding.handle()).ok_or(Error::Binding(
            BindingError::ReleasedHandle {
                handle: binding.handle(),
            },
        ))?;
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

    /// Points every handle a compaction moved at its new place and, where work wrote its bytes,
    /// queues their copy on `stream` (the allocating stream): after every earlier use of the
    /// handle (alignment makes the copy wait for other streams' uses, as for any write) and
    /// before every later one.
    fn apply_moves(
        &mut self,
        stream: Entity,
        moves: &[Moved],
        handles: &FxHashMap<SliceKey, (HandleId, Movable)>,
    ) {
        for moved in moves {
            let Some(&(handle, _)) = handles.get(&moved.slice) else {
                tracing::error!(target: "gpuworld::memory", slice = ?moved.slice, "a compaction moved a slice no live handle holds");
                continue;
            };
            let Some(entry) = self.index.get_mut(&handle) else {
                tracing::error!(target: "gpuworld::memory", %handle, "a compaction moved a handle the index no longer holds");
                continue;
            };
            let to = |region: Region| Region {
                storage: moved.to.storage,
                offset: moved.to.offset,
                size: region.size,
            };
            match &mut entry.state {
                HandleState::Unspawned { memory, .. } => {
                    if let Ok((_, region)) = memory {
                        *region = to(*region);
                    }
                }
                HandleState::Spawned {
                    entity,
                    slice,
                    region,
                } => {
                    let entity = *entity;
                    *region = to(*region);
                    // The entity's allocation covers the entry's bytes (it may be spawned in
                    // this drain: the insert applies after its spawn).
                    (self.commands.entity(entity)).insert(Allocation::Slice {
                        slice: *slice,
                        region: *region,
                    });
                    if moved.copied {
                        entry.used_on.record(stream);
                        let bindings = SmallVec::from_slice(&[
                            TaskBinding {
                                handle: entity,
                                region: moved.from,
                                writes: false,
                            },
                            TaskBinding {
                                handle: entity,
                                region: Region {
                                    size: moved.from.size,
                                    ..moved.to
                                },
                                writes: true,
                            },
                        ]);
                        self.spawn_task(stream, TaskWork::Move, bindings);
                    }
                }
            }
            tracing::debug!(target: "gpuworld::memory", %handle, from = ?moved.from, to = ?moved.to, copied = moved.copied, "moved to make room");
        }
    }

    /// Appends a task to this tick's new tasks.
    fn spawn_task(&mut self, stream: Entity, work: TaskWork, bindings: SmallVec<[TaskBinding; 4]>) {
        let task = self.spare.task(self.next_seq, stream, work, bindings);
        self.tasks.push(task);
        self.next_seq += 1;
        match self.spawned.iter_mut().find(|(s, _)| *s == stream) {
            Some((_, n)) => *n += 1,
            None => self.spawned.push((stream, 1)),
        }
    }
}

/// Where a run of launches inside a replay puts its index in the key it is planned under: graph
/// numbers stay far below 2^48.
const RUN_KEY_SHIFT: u32 = 48;

/// Runs of launches a replay plans as units: their indices fit above [`RUN_KEY_SHIFT`], so no
/// two runs share a key.
const MAX_RUNS: u64 = 1 << (64 - RUN_KEY_SHIFT);

/// Replays run as one unit, planned at their first replay, by graph and version (the most
/// recently made last; a graph keeps its latest version only).
#[derive(Default)]
pub(crate) struct ReplayPlans {
    plans: Vec<(u64, u64, Arc<ReplayPlan>)>,
}

/// Plans kept; the oldest goes first.
const REPLAY_PLANS: usize = 64;

impl ReplayPlans {
    fn get(&self, graph: u64, version: u64) -> Option<Arc<ReplayPlan>> {
        (self.plans.iter())
            .find(|(g, v, _)| *g == graph && *v == version)
            .map(|(_, _, plan)| plan.clone())
    }

    fn insert(&mut self, graph: u64, version: u64, plan: Arc<ReplayPlan>) {
        self.plans.retain(|(g, _, _)| *g != graph);
        if self.plans.len() >= REPLAY_PLANS {
            self.plans.remove(0);
        }
        self.plans.push((graph, version, plan));
    }
}

/// What a replay run as one unit needs besides resolving its bindings.
struct ReplayPlan {
    /// The launches, their bindings indexing `bindings`.
    launches: Arc<[PlannedLaunch]>,
    /// The frame's distinct bindings in order of first use, and whether a launch writes each.
    bindings: Vec<(Binding, bool)>,
    /// The streams, the first launch's first.
    lanes: SmallVec<[StreamId; 4]>,
    /// For each lane past the first, the bindings its launches write.
    lane_writes: Vec<SmallVec<[u16; 4]>>,
}

impl ReplayPlan {
    /// The plan of `commands`, or `None` when they are not all launches with static grids, or
    /// span several streams where the backend does not replay `across_streams` (or more than
    /// [`MAX_LANES`]).
    fn make(commands: &[Recorded], across_streams: bool) -> Option<ReplayPlan> {
        let mut lanes = SmallVec::<[StreamId; 4]>::new();
        for command in commands {
            let Recorded::Launch {
                count: CubeCount::Static(..),
                stream,
                ..
            } = command
            else {
                return None;
            };
            if !lanes.contains(stream) {
                lanes.push(*stream);
            }
        }
        if lanes.len() > 1 && (!across_streams || lanes.len() > MAX_LANES) {
            return None;
        }
        // A frame binds the same few ranges again and again: each distinct one is resolved and
        // bound once (written if any launch writes it), which keeps the later stages' work per
        // replay to the frame's buffers, not its launches.
        let mut bindings = Vec::<(Binding, bool)>::new();
        let mut seen = rustc_hash::FxHashMap::<(HandleId, u64, u64), u16>::default();
        let mut planned = Vec::with_capacity(commands.len());
        let mut touches: Vec<SmallVec<[(HandleId, bool); 4]>> = Vec::new();
        let mut lane_writes = vec![SmallVec::<[u16; 4]>::new(); lanes.len() - 1];
        for command in commands {
            let Recorded::Launch {
                kernel,
                count: CubeCount::Static(x, y, z),
                buffers,
                scalars,
                mode,
                stream,
            } = command
            else {
                return None;
            };
            let lane = lanes.iter().position(|s| s == stream).unwrap_or(0);
            let params = kernel.signature.buffers;
            let mut indices = SmallVec::new();
            let mut touched = SmallVec::new();
            for (i, binding) in buffers.iter().enumerate() {
                let writes = params.get(i).is_none_or(|p| p.access.writes());
                let key = (
                    binding.handle(),
                    binding.offset_start(),
                    binding.offset_end(),
                );
                let index = match seen.get(&key) {
                    Some(&index) => {
                        bindings[usize::from(index)].1 |= writes;
                        index
                    }
                    None => {
                        let index = u16::try_from(bindings.len()).ok()?;
                        seen.insert(key, index);
                        bindings.push((*binding, writes));
                        index
                    }
                };
                indices.push(index);
                if lanes.len() > 1 {
                    touched.push((binding.handle(), writes));
                    if writes && lane > 0 && !lane_writes[lane - 1].contains(&index) {
                        lane_writes[lane - 1].push(index);
                    }
                }
            }
            let after = if lanes.len() > 1 {
                lane_dependencies(&planned, &touches, lane as u8, &touched)
            } else {
                SmallVec::new()
            };
            planned.push(PlannedLaunch {
                kernel,
                grid: [*x, *y, *z],
                bindings: indices,
                scalars: scalars.clone(),
                mode: *mode,
                lane: lane as u8,
                after,
            });
            if lanes.len() > 1 {
                touches.push(touched);
            }
        }
        Some(ReplayPlan {
            launches: planned.into(),
            bindings,
            lanes,
            lane_writes,
        })
    }
}

/// Streams a replay may span and still run as one unit.
const MAX_LANES: usize = 8;

/// The launches of other lanes that a launch on `lane` binding `touched` must follow, given the
/// launches `planned` before it (and what each touched): per other lane, the last that writes a
/// handle it binds, or binds a handle it writes (views of one handle count as one, as a
/// conservative stand-in for overlap).
fn lane_dependencies(
    planned: &[PlannedLaunch],
    touches: &[SmallVec<[(HandleId, bool); 4]>],
    lane: u8,
    touched: &[(HandleId, bool)],
) -> SmallVec<[u16; 2]> {
    let mut after = SmallVec::<[u16; 2]>::new();
    let mut lanes_done = SmallVec::<[u8; 4]>::new();
    for (index, (earlier, earlier_touched)) in planned.iter().zip(touches).enumerate().rev() {
        if earlier.lane == lane || lanes_done.contains(&earlier.lane) {
            continue;
        }
        let conflicts = touched.iter().any(|&(handle, writes)| {
            earlier_touched
                .iter()
                .any(|&(other, other_writes)| other == handle && (writes || other_writes))
        });
        if conflicts && let Ok(index) = u16::try_from(index) {
            after.push(index);
            lanes_done.push(earlier.lane);
        }
    }
    after
}

/// What each live handle's slice lets a compaction do: a handle no work used yet moves without
/// a copy; one work used moves with a copy, unless a captured graph holds it (its replays keep
/// the old place); a failed allocation, or one that inherited another stream's use of parked
/// memory without using it, stays.
fn movable_handles(
    index: &FxHashMap<HandleId, HandleEntry>,
) -> FxHashMap<SliceKey, (HandleId, Movable)> {
    let mut handles = FxHashMap::default();
    for (&handle, entry) in index {
        if entry.graph_pins > 0 {
            continue;
        }
        match &entry.state {
            HandleState::Unspawned {
                memory: Ok((slice, _)),
                ..
            } if entry.used_on == UsedOn::Nothing => {
                handles.insert(*slice, (handle, Movable::Unwritten));
            }
            HandleState::Spawned { slice, .. } => {
                handles.insert(*slice, (handle, Movable::Copied));
            }
            _ => {}
        }
    }
    handles
}

#[cfg(test)]
mod tests {
    use crate::binding::Binding;
    use crate::error::{BindingError, Error};
    use crate::handle::Handle;
    use crate::ids::StreamId;
    use crate::inbox::Command;
    use crate::runtime::Runtime;
    use crate::sim::{SimBackend, SimConfig};
    use crate::world::RuntimeConfig;
    use futures_channel::oneshot;

    /// A binding can no longer be forged outside the crate, but `resolve` still checks one
    /// against the memory its handle really has, not the capacity it claims (issue 27).
    #[test]
    fn resolve_refuses_a_binding_claiming_more_than_its_handles_memory() {
        let mut runtime = Runtime::new(
            SimBackend::new(SimConfig::default()),
            RuntimeConfig::default(),
        );
        let stream = StreamId { value: 0 };
        let handle = Handle::create(runtime.inbox(), 64, None, stream);
        let real = handle.binding();
        let forged = Binding::of_handle(real.handle(), real.runtime(), 0, 0, 1 << 20);
        let (reply, mut receiver) = oneshot::channel();
        runtime.inbox().push(Command::Read {
            sources: [forged].into_iter().collect(),
            stream,
            reply,
            staging: None,
        });
        for _ in 0..4 {
            runtime.tick();
        }
        match receiver.try_recv() {
            Ok(Some(Err(Error::Binding(BindingError::OutOfRange { size, end, .. })))) => {
                assert_eq!((size, end), (64, 1 << 20));
            }
            other => panic!("expected OutOfRange, got {other:?}"),
        }
    }
}

#[cfg(test)]
mod lane_tests {
    use super::lane_dependencies;
    use crate::graph::PlannedLaunch;
    use crate::ids::HandleId;
    use crate::kernel::ExecutionMode;
    use smallvec::SmallVec;

    fn launch(lane: u8) -> PlannedLaunch {
        PlannedLaunch {
            kernel: &crate::library::ADD,
            grid: [1, 1, 1],
            bindings: SmallVec::new(),
            scalars: SmallVec::new(),
            mode: ExecutionMode::Checked,
            lane,
            after: SmallVec::new(),
        }
    }

    #[test]
    fn a_launch_follows_the_last_conflicting_launch_of_each_other_lane() {
        let (a, b, c) = (HandleId(1), HandleId(2), HandleId(3));
        // (lane, what it binds: handle, writes)
        let frame: [(u8, &[(HandleId, bool)]); 6] = [
            (0, &[(a, true)]),              // 0: writes a
            (1, &[(a, false), (b, true)]),  // 1: reads a: follows 0
            (1, &[(c, true)]),              // 2: nothing shared with lane 0
            (0, &[(c, false)]),             // 3: reads c: follows 2
            (0, &[(b, false)]),             // 4: reads b, which lane 1 wrote before 2: follows 1
            (2, &[(a, false), (c, false)]), // 5: readers of what lanes 0 and 1 wrote
        ];
        let mut planned = Vec::new();
        let mut touches: Vec<SmallVec<[(HandleId, bool); 4]>> = Vec::new();
        let mut afters = Vec::new();
        for (lane, touched) in frame {
            let after = lane_dependencies(&planned, &touches, lane, touched);
            afters.push(after.to_vec());
            planned.push(launch(lane));
            touches.push(touched.iter().copied().collect());
        }
        assert_eq!(
            afters,
            vec![vec![], vec![0], vec![], vec![2], vec![1], vec![2, 0]],
            "two readers of one handle on two lanes do not wait for each other"
        );
    }
}
