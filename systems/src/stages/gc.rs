//! Stage 6, GC reclamation: lets the device progress, then runs the lifetime's steps 3–5
//! (`lifetime.rs`: pin released handles behind events, reclaim their memory once the events
//! pass, clean up) and answers the reads and syncs whose work has run (`replies.rs`). Owns
//! `ReplyWait` and `TickLeft` (what the tick leaves, for publishing). Never blocks, except in the
//! tick of a caller blocked on a reply, which may wait on the device for one; that wait comes
//! after everything else the stage does, so the work that does not depend on it runs while the
//! device works.

use super::lifetime::Lifetime;
use super::replies::{PendingReplies, StreamFaults};
use super::tick::TickStage;
use crate::backend::Backend;
use crate::memory::MemoryPool;
use crate::published::InFlight;
use crate::snapshot::Capture;
use crate::stages::ingest::DeferredCommands;
use crate::usage::MemoryUsage;
use crate::world::*;
use bevy_ecs::prelude::*;
use bevy_ecs::system::SystemParam;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Registers the GC stage: the pins, the replies and the reply wait it keeps, and its one system.
pub fn build<B: Backend>(world: &mut World, schedule: &mut Schedule) {
    super::lifetime::build(world);
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

/// What the GC stage reads and writes.
#[derive(SystemParam)]
pub struct Gc<'w, 's, B: Backend> {
    tick: Res<'w, TickCounter>,
    device: ResMut<'w, Device<B>>,
    pool: ResMut<'w, MemoryPool>,
    wait: Res<'w, ReplyWait>,
    lifetime: Lifetime<'w, 's>,
    streams: StreamFaults<'w, 's>,
    replies: ResMut<'w, PendingReplies>,
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
    gc.lifetime.begin_tick();
    gc.poll_device();
    let (device, pool, tick) = (&mut gc.device.0, &mut *gc.pool, gc.tick.0);
    gc.lifetime.pin_released_memory(device, pool, &gc.streams);
    gc.lifetime.reclaim_finished_gc(device, pool);
    let streams = (&gc.streams, &gc.queues);
    gc.lifetime.cleanup_memory(device, pool, tick, streams);
    gc.await_replies();
    let answered = gc.answer_replies();
    // The answered work may have been the last use of released memory, pinned in an earlier tick
    // or in this one: reclaim it in this tick, so a caller returning from a sync sees it free
    // (memory pinned in the tick that answered the last sync used to wait for a tick that a
    // manual driver may never run: issue 30's leak).
    if answered && gc.lifetime.has_pending_gcs() {
        gc.lifetime
            .reclaim_finished_gc(&mut gc.device.0, &mut gc.pool);
    }
    gc.note_what_is_left();
    gc.lifetime.spawn_fresh();
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
        *self.left = TickLeft {
            in_flight: InFlight {
                deferred_commands: self.deferred.len(),
                queued_tasks: self.queues.iter().map(|q| q.tasks.len()).sum(),
                reads: self.replies.reads(),
                syncs: self.replies.syncs(),
                pending_gcs: self.lifetime.pending_gcs(),
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
        if budget.is_zero() || self.replies.is_empty() {
            return;
        }
        let _span = tracing::trace_span!(target: "gpuworld::memory", "gc.await_replies").entered();
        let inbox = &self.inbox.0;
        (self.replies).wait_until_answerable(
            &mut self.device.0,
            budget,
            &|| inbox.needs_tick(),
            self.tick.0,
        );
    }

    /// Answers the reads and syncs whose work has run; whether any was answered.
    fn answer_replies(&mut self) -> bool {
        let (device, streams, outbox) = (&mut self.device.0, &mut self.streams, &mut *self.outbox);
        self.replies.answer_reads(device, streams, outbox)
            | self.replies.answer_syncs(device, streams, outbox)
    }
}

/// The reads, syncs and pending GCs in flight, and which released handles wait for a GC or are
/// pinned by one.
pub(super) fn snapshot_lines(world: &mut World, capture: &mut Capture<'_>) {
    super::replies::snapshot_lines(world, capture);
    super::lifetime::snapshot_lines(world, capture);
}
