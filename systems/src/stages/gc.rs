//! Stage 6, GC reclamation: lets the device progress, pins released handles behind an event on
//! every stream that used them, returns their memory once those events pass (parked memory too,
//! unless its stream already took it), runs requested cleanups, and completes reads and syncs
//! whose work has run (reporting a stream's fault on them). Owns `PendingReplies` (the reads and
//! syncs in flight), `PendingGc`, `AwaitingGc`, `PinnedHandles`, `ReplyWait` and `TickLeft` (what
//! the tick leaves, for publishing). Never blocks, except in the tick of a caller blocked on a
//! reply, which may wait on the device for one; that wait comes after everything else the stage
//! does, so the work that does not depend on it runs while the device works.

use super::alignment::Uses;
use super::tick::TickStage;
use crate::backend::ReadTicket;
use crate::backend::{Backend, DeviceEvent};
use crate::bytes::HostBytes;
use crate::error::Result;
use crate::inbox::{ReadReply, Reply};
use crate::memory::{MemoryPool, ParkedReturn};
use crate::published::InFlight;
use crate::snapshot::Capture;
use crate::stages::ingest::DeferredCommands;
use crate::usage::MemoryUsage;
use crate::world::*;
use bevy_ecs::prelude::*;
use bevy_ecs::system::SystemParam;
use smallvec::SmallVec;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
/// A released handle whose reclamation waits on a pending-GC entity.
#[derive(Component, Debug)]
pub struct AwaitingGc;

/// A readback in flight.
#[derive(Debug)]
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
#[derive(Debug)]
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

/// The reads and syncs in flight, in submission order. They live in this resource rather than
/// as entities: one is created and answered by nearly every blocking call, and spawning and
/// despawning an entity for each cost a blocked caller ~1,500 instructions per round trip.
#[derive(Debug, Resource, Default)]
pub struct PendingReplies {
    /// Readbacks in flight.
    pub reads: Vec<PendingRead>,
    /// Syncs in flight.
    pub syncs: Vec<PendingSync>,
}

/// How many pending GCs pin each shared handle; a pinned handle is never reclaimed.
#[derive(Resource, Default, Debug)]
pub struct PinnedHandles(pub HashMap<Entity, u32>);

/// Registers the GC stage: the pins and the reply wait it keeps, and its one system.
pub fn build<B: Backend>(world: &mut World, schedule: &mut Schedule) {
    world.init_resource::<PinnedHandles>();
    world.init_resource::<ReplyWait>();
    world.init_resource::<PendingReplies>();
    world.init_resource::<TickLeft>();
    schedule.add_systems(reclaim_and_reply::<B>.in_set(TickStage::GcReclamation));
}

/// How long this tick may wait on the device for a read or sync in flight to finish, in
/// nanoseconds: zero, except in the tick of a caller blocked on a reply
/// (`Runtime::tick_awaiting_replies`, which keeps a clone and sets it without a world lookup
/// before the tick's first submission).
#[derive(Debug, Resource, Default, Clone)]
pub struct ReplyWait(pub Arc<AtomicU64>);

impl ReplyWait {
    /// Lets the next tick wait up to `budget`.
    pub fn set(&self, budget: Duration) {
        let nanos = u64::try_from(budget.as_nanos()).unwrap_or(u64::MAX);
        self.0.store(nanos, Ordering::Relaxed);
    }

    /// The budget, taken: later ticks do not wait unless it is set again.
    fn take(&self) -> Duration {
        Duration::from_nanos(self.0.swap(0, Ordering::Relaxed))
    }
}

/// Released handles not yet pinned behind events.
type ReleasedUnpinned = (With<Released>, Without<AwaitingGc>);

/// What the GC stage reads and writes.
#[derive(SystemParam)]
pub struct Gc<'w, 's, B: Backend> {
    commands: Commands<'w, 's>,
    tick: Res<'w, TickCounter>,
    device: ResMut<'w, Device<B>>,
    wait: Res<'w, ReplyWait>,
    pinned: ResMut<'w, PinnedHandles>,
    pool: ResMut<'w, MemoryPool>,
    stats: ResMut<'w, Stats>,
    streams: Query<'w, 's, (&'static Stream, &'static mut StreamFault)>,
    submitted: Query<'w, 's, &'static SubmittedCursor>,
    replies: ResMut<'w, PendingReplies>,
    released: Query<'w, 's, (Entity, &'static Uses), ReleasedUnpinned>,
    gcs: Query<'w, 's, (Entity, &'static PendingGc)>,
    handles: Query<'w, 's, &'static Allocation>,
    /// The pending GCs reclaimed in this tick (despawned only once the tick's commands apply).
    reclaimed: Local<'s, Vec<Entity>>,
    /// Released memory pinned in this tick, behind events that had not passed yet: kept here
    /// until the tick's replies are answered (the work they answer may be what these wait for),
    /// then spawned as entities for later ticks.
    fresh: Local<'s, Vec<PendingGc>>,
    /// Released handles whose memory still waited for the device when a cleanup ran: a tick that
    /// returns some of it to the pool cleans up again.
    cleanup_waits_for: Local<'s, bevy_ecs::entity::EntityHashSet>,
    /// Whether memory of `cleanup_waits_for` returned to the pool in this tick or the last.
    freed_for_cleanup: Local<'s, bool>,
    /// Pages compactions emptied through an evacuation, waiting for these events (one per stream,
    /// flushed once every queue was submitted) before they go back to the device.
    retiring: Local<'s, Option<(u64, SmallVec<[DeviceEvent; 4]>)>>,
    queues: Query<'w, 's, &'static TaskQueue>,
    deferred: Res<'w, DeferredCommands>,
    left: ResMut<'w, TickLeft>,
    outbox: ResMut<'w, crate::outbox::Outbox>,
    inbox: Res<'w, InboxQueue>,
}

/// What the tick leaves unfinished and the memory it leaves in use, as the GC stage (the last one
/// that changes either) ends: what `Runtime::tick` publishes, without looking anything up after
/// the tick's replies are sent.
#[derive(Debug, Resource, Default, Clone, Copy)]
pub struct TickLeft {
    /// Work unfinished (the inbox's share and frames are the client's to add).
    pub in_flight: InFlight,
    /// Memory in use and reserved.
    pub usage: MemoryUsage,
}

/// The GC stage, in one system so that the wait of a blocked caller comes last: everything that
/// does not depend on the work it waits for (the poll, pinning and reclaiming released memory,
/// cleanup) runs while the device works, and after the wait only the replies (and reclaiming
/// what the answered work freed) stand between the device finishing and the caller returning.
pub fn reclaim_and_reply<B: Backend>(mut gc: Gc<B>) {
    gc.reclaimed.clear();
    gc.poll_device();
    gc.pin_released_memory();
    // What ingest parks from the next tick on is released apart from what it parked so far.
    gc.pool.seal_parking();
    gc.reclaim_finished_gc();
    gc.cleanup_memory();
    gc.await_replies();
    let answered = gc.complete_reads() | gc.complete_syncs();
    // The answered work may have been the last use of released memory, pinned in an earlier tick
    // or in this one: reclaim it in this tick, so a caller returning from a sync sees it free
    // (memory pinned in the tick that answered the last sync used to wait for a tick that a
    // manual driver may never run: issue 30's leak).
    if answered && !(gc.gcs.is_empty() && gc.fresh.is_empty()) {
        gc.reclaim_finished_gc();
    }
    gc.note_what_is_left();
    gc.spawn_fresh();
}

impl<B: Backend> std::fmt::Debug for Gc<'_, '_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gc")
            .field("tick", &self.tick.0)
            .finish_non_exhaustive()
    }
}

impl<B: Backend> Gc<'_, '_, B> {
    /// Counts what the tick leaves unfinished into [`TickLeft`].
    fn note_what_is_left(&mut self) {
        let pending_gcs = self.gcs.iter().count() + self.fresh.len() - self.reclaimed.len();
        *self.left = TickLeft {
            in_flight: InFlight {
                deferred_commands: self.deferred.waiting.len() + self.deferred.carried.len(),
                queued_tasks: self.queues.iter().map(|q| q.tasks.len()).sum(),
                reads: self.replies.reads.len(),
                syncs: self.replies.syncs.len(),
                pending_gcs,
                ..InFlight::default()
            },
            usage: self.pool.usage(),
        };
    }

    /// Lets the device make progress and collects faults onto their streams.
    fn poll_device(&mut self) {
        let _span = tracing::trace_span!(target: "gpuworld::memory", "gc.poll_device").entered();
        self.device.0.poll(self.tick.0);
        for (stream, mut fault) in &mut self.streams {
            if let Some(error) = self.device.0.take_fault(stream.device) {
                fault.record(error);
            }
        }
    }

    /// In the tick of a caller blocked on a reply: waits on the device, up to [`ReplyWait`],
    /// until some read or sync in flight can be answered, so that the reply comes in this tick
    /// rather than the next (a tick costs microseconds that a round trip would pay twice). A
    /// command that arrives meanwhile ends the wait: the next tick takes it with the replies,
    /// instead of other callers waiting out this one's wait.
    fn await_replies(&mut self) {
        // The budget is this tick's alone: taken, so no later tick waits, even after a panic.
        let budget = self.wait.take();
        let replies = &mut *self.replies;
        if budget.is_zero() || (replies.reads.is_empty() && replies.syncs.is_empty()) {
            return;
        }
        let _span = tracing::trace_span!(target: "gpuworld::memory", "gc.await_replies").entered();
        let device = &mut self.device.0;
        let inbox = &self.inbox.0;
        let deadline = Instant::now() + budget;
        loop {
            let mut answerable = false;
            for read in &mut replies.reads {
                answerable |= gather_read_bytes(device, read);
            }
            if answerable
                || replies
                    .syncs
                    .iter()
                    .any(|sync| device.event_done(sync.event))
            {
                return;
            }
            let now = Instant::now();
            if now >= deadline
                || inbox.needs_tick()
                || !device.wait_for_progress(deadline - now, Some(&|| inbox.needs_tick()))
            {
                return;
            }
            device.poll(self.tick.0);
        }
    }

    /// Replies to reads whose bytes have all arrived; whether any was answered.
    fn complete_reads(&mut self) -> bool {
        let device = &mut self.device.0;
        let streams = &mut self.streams;
        let outbox = &mut self.outbox;
        let before = self.replies.reads.len();
        self.replies.reads.retain_mut(|read| {
            if !gather_read_bytes(device, read) {
                return true;
            }
            let result = match take_stream_fault(device, streams, read.stream) {
                Some(error) => Err(error),
                None => Ok(std::mem::take(&mut read.bytes)),
            };
            if let Some(reply) = read.reply.take() {
                outbox.read(reply, result);
            }
            false
        });
        self.replies.reads.len() < before
    }

    /// Replies to syncs whose event has passed; whether any was answered.
    fn complete_syncs(&mut self) -> bool {
        let device = &mut self.device.0;
        let streams = &mut self.streams;
        let outbox = &mut self.outbox;
        let before = self.replies.syncs.len();
        self.replies.syncs.retain_mut(|sync| {
            if !device.event_done(sync.event) {
                return true;
            }
            let fault = take_stream_fault(device, streams, sync.stream);
            if let Some(reply) = sync.reply.take() {
                outbox.sync(reply, fault.map_or(Ok(()), Err));
            }
            false
        });
        self.replies.syncs.len() < before
    }

    /// Returns pages a compaction emptied once the device is done with them: when every queue
    /// has been submitted (the copies reading them are then submitted, as is every earlier use),
    /// an event is flushed on every stream; the pages retired by then go back once all passed.
    /// A request waiting for them asks again in a later tick.
    fn release_retiring_pages(&mut self) {
        if let Some((through, events)) = &*self.retiring {
            if events.iter().all(|&event| self.device.0.event_done(event)) {
                self.pool.release_retiring(&mut self.device.0, *through);
                *self.retiring = None;
            }
            return;
        }
        let through = self.pool.retiring_generation();
        if through == 0 || self.queues.iter().any(|queue| !queue.tasks.is_empty()) {
            return;
        }
        let events = (self.streams.iter())
            .map(|(info, _)| self.device.0.flush(info.device))
            .collect();
        *self.retiring = Some((through, events));
    }

    /// Pins released handles whose last uses were submitted behind one event per using stream.
    fn pin_released_memory(&mut self) {
        let mut events: SmallVec<[(Entity, DeviceEvent); 4]> = SmallVec::new();
        let mut handles = Vec::new();
        for (entity, uses) in &self.released {
            // Work still queued would run after an event flushed now: wait for its submission.
            let all_submitted = uses.0.iter().all(|&(stream, cursor)| {
                self.submitted
                    .get(stream)
                    .is_ok_and(|submitted| submitted.0 >= cursor)
            });
            if !all_submitted {
                continue;
            }
            for &(stream, _) in &uses.0 {
                if events.iter().any(|(s, _)| *s == stream) {
                    continue;
                }
                if let Ok((info, _)) = self.streams.get(stream) {
                    events.push((stream, self.device.0.flush(info.device)));
                }
            }
            self.commands.entity(entity).insert(AwaitingGc);
            handles.push(entity);
        }
        if handles.is_empty() {
            return;
        }
        tracing::trace!(target: "gpuworld::memory", handles = handles.len(), "released memory pinned behind events");
        let gc = PendingGc {
            events: events.into_iter().map(|(_, e)| e).collect(),
            handles,
            pins: Vec::new(),
        };
        // Events on idle streams may have passed already: the reclaim that follows returns the
        // memory in this tick.
        self.fresh.push(gc);
    }

    /// Spawns what this tick pinned and could not reclaim yet, for later ticks to reclaim.
    fn spawn_fresh(&mut self) {
        for gc in self.fresh.drain(..) {
            self.commands.spawn(gc);
        }
    }

    /// Reclaims every pending GC whose events passed, those pinned in this tick included.
    fn reclaim_finished_gc(&mut self) {
        let _span =
            tracing::trace_span!(target: "gpuworld::memory", "gc.reclaim_finished_gc").entered();
        let gcs = self.gcs;
        let mut fresh = std::mem::take(&mut *self.fresh);
        // Until a pass reclaims nothing: unpinning a shared handle (a pin's GC) frees its
        // release's GC for the next pass, whichever order the query lists them in.
        loop {
            let (reclaimed, waiting) = (self.reclaimed.len(), fresh.len());
            for (entity, gc) in gcs.iter() {
                // Skips what an earlier pass of this tick reclaimed (despawned only when the
                // tick's commands apply).
                if !self.reclaimed.contains(&entity) && self.reclaim(gc) {
                    self.commands.entity(entity).despawn();
                    self.reclaimed.push(entity);
                }
            }
            fresh.retain(|gc| !self.reclaim(gc));
            if self.reclaimed.len() == reclaimed && fresh.len() == waiting {
                break;
            }
        }
        *self.fresh = fresh;
    }

    /// Unpins the shared handles of `gc` and returns the memory of its released ones, if its
    /// events passed and no shared-binding pin (its consumer's event) holds them; whether it did.
    fn reclaim(&mut self, gc: &PendingGc) -> bool {
        if !gc.events.iter().all(|&e| self.device.0.event_done(e))
            || gc.handles.iter().any(|h| self.pinned.0.contains_key(h))
        {
            return false;
        }
        for handle in &gc.pins {
            if let Some(count) = self.pinned.0.get_mut(handle) {
                *count -= 1;
                if *count == 0 {
                    self.pinned.0.remove(handle);
                }
            }
        }
        for &handle in &gc.handles {
            let awaited = self.cleanup_waits_for.remove(&handle);
            let released = match self.handles.get(handle) {
                Ok(Allocation::Slice { slice, .. }) => {
                    (self.pool.release(*slice)).map(|()| ParkedReturn {
                        handles: 1,
                        awaited,
                    })
                }
                // Once the GC stage released every handle parked with it, unless its stream took
                // all of their memory for later allocations.
                Ok(Allocation::Parked { slice }) => self.pool.release_parked(*slice, awaited),
                _ => Ok(ParkedReturn::default()),
            };
            match released {
                Ok(returned) => {
                    self.stats.handles_reclaimed += returned.handles;
                    *self.freed_for_cleanup |= returned.awaited;
                }
                Err(error) => {
                    tracing::error!(target: "gpuworld::memory", %error, "reclaiming a slice failed");
                }
            }
            self.commands.entity(handle).despawn();
        }
        true
    }

    /// Returns free memory to the device when a cleanup was requested, and long-unused free
    /// memory by the pool's own policy. Memory released before the request that still waits for
    /// the device returns too: the handles are noted, and each later tick that returns some of
    /// their memory to the pool cleans up again. A caller who drops its handles, then asks for a
    /// cleanup, gets the memory back however late the device finishes; memory released later
    /// is left to the pool's policy (the fuzzer found memory left reserved when the device
    /// finished after the cleanup ran: issue 30).
    fn cleanup_memory(&mut self) {
        self.release_retiring_pages();
        self.pool.periodic_cleanup(&mut self.device.0, self.tick.0);
        let requested = self.pool.take_cleanup_request();
        if requested || std::mem::take(&mut *self.freed_for_cleanup) {
            self.pool.cleanup(&mut self.device.0);
            tracing::debug!(target: "gpuworld::memory", reserved = self.pool.usage().bytes_reserved, "memory cleanup");
        }
        if requested {
            // Released and not yet behind events (those pinned in this tick too: their marker
            // applies with the tick's commands), or behind events not passed yet.
            let waiting = self.released.iter().map(|(entity, _)| entity);
            self.cleanup_waits_for.extend(waiting);
            for (entity, gc) in self.gcs.iter() {
                if !self.reclaimed.contains(&entity) {
                    self.cleanup_waits_for.extend(gc.handles.iter().copied());
                }
            }
        }
    }
}

/// The stream's fault, including one the device raised after the last poll: a backend publishes
/// a fault before completing any later work, so it is visible once that work is.
fn take_stream_fault<B: Backend>(
    device: &mut B,
    streams: &mut Query<(&Stream, &mut StreamFault)>,
    stream: Entity,
) -> Option<crate::error::Error> {
    let (info, mut fault) = streams.get_mut(stream).ok()?;
    if let Some(error) = device.take_fault(info.device) {
        fault.record(error);
    }
    fault.0.take()
}

/// Moves the bytes of `read` that arrived into it; whether all of them have.
fn gather_read_bytes<B: Backend>(device: &mut B, read: &mut PendingRead) -> bool {
    for (slot, ticket) in read.tickets.iter_mut().enumerate() {
        if let Some(t) = *ticket
            && let Some(bytes) = device.take_read(t)
        {
            read.bytes[slot] = bytes;
            *ticket = None;
        }
    }
    read.tickets.iter().all(Option::is_none)
}

/// The reads, syncs and pending GCs in flight, and which released handles wait for a GC or are
/// pinned by one.
pub(super) fn snapshot_lines(world: &mut World, capture: &mut Capture<'_>) {
    let replies = world.resource::<PendingReplies>();
    let mut lines: Vec<String> = replies
        .reads
        .iter()
        .map(|r| {
            let waiting = r.tickets.iter().filter(|t| t.is_some()).count();
            format!(
                "read on {} waiting for {waiting}/{} bindings",
                capture.stream_name(r.stream),
                r.tickets.len()
            )
        })
        .collect();
    lines.extend(replies.syncs.iter().map(|s| {
        format!(
            "sync on {} until {}",
            capture.stream_name(s.stream),
            capture.event(s.event)
        )
    }));
    lines.extend(world.query::<&PendingGc>().iter(world).map(|g| {
        let mut handles: Vec<String> = g.handles.iter().map(|h| capture.handle_name(*h)).collect();
        handles.sort();
        let mut pins: Vec<String> = g.pins.iter().map(|h| capture.handle_name(*h)).collect();
        pins.sort();
        let events: Vec<String> = g.events.iter().map(|e| capture.event(*e)).collect();
        format!(
            "gc reclaims [{}] unpins [{}] after [{}]",
            handles.join(", "),
            pins.join(", "),
            events.join(", ")
        )
    }));
    lines
        .into_iter()
        .for_each(|line| capture.add_in_flight(line));
    let awaiting: Vec<Entity> = world
        .query_filtered::<Entity, With<AwaitingGc>>()
        .iter(world)
        .collect();
    for entity in awaiting {
        if let Some(line) = capture.handle_line(entity)
            && line.state == "released"
        {
            line.state = "released, awaiting gc".to_string();
        }
    }
    for (entity, pins) in &world.resource::<PinnedHandles>().0 {
        if let Some(line) = capture.handle_line(*entity) {
            line.state.push_str(&format!(", pinned x{pins}"));
        }
    }
}
