//! Stage 6, GC reclamation: lets the device progress, completes reads and syncs whose work has
//! run (reporting a stream's fault on them), pins released handles behind an event on every
//! stream that used them, returns their memory once those events pass (parked memory too,
//! unless its stream already took it), and runs requested cleanups. Owns `PendingRead`,
//! `PendingSync`, `PendingGc`, `AwaitingGc`, `PinnedHandles`, `CleanupRequested` and
//! `ReplyWait`. Never blocks, except in the tick of a caller
//! blocked on a reply, which may wait on the device for one (`await_replies`).

use super::alignment::Uses;
use super::tick::TickStage;
use crate::backend::ReadTicket;
use crate::backend::{Backend, DeviceEvent};
use crate::bytes::HostBytes;
use crate::error::Result;
use crate::inbox::{ReadReply, Reply};
use crate::memory::MemoryPool;
use crate::world::*;
use bevy_ecs::prelude::*;
use smallvec::SmallVec;
use std::collections::HashMap;
use std::time::{Duration, Instant};
/// A released handle whose reclamation waits on a pending-GC entity.
#[derive(Component, Debug)]
pub struct AwaitingGc;

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

/// How many pending GCs pin each shared handle; a pinned handle is never reclaimed.
#[derive(Resource, Default, Debug)]
pub struct PinnedHandles(pub HashMap<Entity, u32>);

/// A request from the client to return free memory to the device this tick.
#[derive(Resource, Default)]
pub struct CleanupRequested(pub bool);

/// Registers the GC stage: the pins, the cleanup request and the reply wait it keeps, and its
/// systems, in order.
pub fn build<B: Backend>(world: &mut World, schedule: &mut Schedule) {
    world.init_resource::<PinnedHandles>();
    world.init_resource::<CleanupRequested>();
    world.init_resource::<ReplyWait>();
    schedule.add_systems(
        (
            await_replies::<B>,
            poll_device::<B>,
            complete_reads::<B>,
            complete_syncs::<B>,
            pin_released_memory::<B>,
            reclaim_finished_gc::<B>,
            cleanup_memory::<B>,
        )
            .chain()
            .in_set(TickStage::GcReclamation),
    );
}

/// Lets the device make progress and collects faults onto their streams.
pub fn poll_device<B: Backend>(
    tick: Res<TickCounter>,
    mut device: ResMut<Device<B>>,
    mut streams: Query<(&Stream, &mut StreamFault)>,
) {
    let _span = tracing::trace_span!(target: "gpuworld::memory", "gc.poll_device").entered();
    device.0.poll(tick.0);
    for (stream, mut fault) in &mut streams {
        if let Some(error) = device.0.take_fault(stream.device) {
            fault.record(error);
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

/// How long this tick may wait on the device for a read or sync in flight to finish: zero,
/// except in the tick of a caller blocked on a reply (`Runtime::tick_awaiting_replies`), whose
/// `await_replies` takes it.
#[derive(Resource, Default)]
pub struct ReplyWait(pub Duration);

/// In the tick of a caller blocked on a reply: waits on the device, up to [`ReplyWait`], until
/// some read or sync in flight can be answered, so that the reply comes in this tick rather
/// than the next (a tick costs microseconds that a round trip would pay twice). It runs before
/// `poll_device`, which then finds what the wait noticed instead of asking the device again.
pub fn await_replies<B: Backend>(
    mut wait: ResMut<ReplyWait>,
    tick: Res<TickCounter>,
    mut device: ResMut<Device<B>>,
    mut reads: Query<&mut PendingRead>,
    syncs: Query<&PendingSync>,
) {
    let _span = tracing::trace_span!(target: "gpuworld::memory", "gc.await_replies").entered();
    // The budget is this tick's alone: taken, so no later tick waits, even after a panic.
    let budget = std::mem::take(&mut wait.0);
    if budget.is_zero() || (reads.is_empty() && syncs.is_empty()) {
        return;
    }
    let device = &mut device.0;
    let deadline = Instant::now() + budget;
    loop {
        let mut answerable = false;
        for mut read in &mut reads {
            answerable |= gather_read_bytes(device, &mut read);
        }
        if answerable || syncs.iter().any(|sync| device.event_done(sync.event)) {
            return;
        }
        let now = Instant::now();
        if now >= deadline || !device.wait_for_progress(deadline - now) {
            return;
        }
        device.poll(tick.0);
    }
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

/// Replies to reads whose bytes have all arrived.
pub fn complete_reads<B: Backend>(
    mut commands: Commands,
    mut device: ResMut<Device<B>>,
    mut reads: Query<(Entity, &mut PendingRead)>,
    mut streams: Query<(&Stream, &mut StreamFault)>,
) {
    let _span = tracing::trace_span!(target: "gpuworld::memory", "gc.complete_reads").entered();
    for (entity, mut read) in &mut reads {
        let read = read.as_mut();
        if !gather_read_bytes(&mut device.0, read) {
            continue;
        }
        let fault = take_stream_fault(&mut device.0, &mut streams, read.stream);
        let result = match fault {
            Some(error) => Err(error),
            None => Ok(std::mem::take(&mut read.bytes)),
        };
        if let Some(reply) = read.reply.take() {
            let _ = reply.send(result);
        }
        commands.entity(entity).despawn();
    }
}

/// Replies to syncs whose event has passed.
pub fn complete_syncs<B: Backend>(
    mut commands: Commands,
    mut device: ResMut<Device<B>>,
    mut syncs: Query<(Entity, &mut PendingSync)>,
    mut streams: Query<(&Stream, &mut StreamFault)>,
) {
    let _span = tracing::trace_span!(target: "gpuworld::memory", "gc.complete_syncs").entered();
    for (entity, mut sync) in &mut syncs {
        if !device.0.event_done(sync.event) {
            continue;
        }
        let fault = take_stream_fault(&mut device.0, &mut streams, sync.stream);
        if let Some(reply) = sync.reply.take() {
            let _ = reply.send(fault.map_or(Ok(()), Err));
        }
        commands.entity(entity).despawn();
    }
}

/// Released handles not yet pinned behind events.
type ReleasedUnpinned = (With<Released>, Without<AwaitingGc>);

/// Pins released handles whose last uses were submitted behind one event per using stream.
pub fn pin_released_memory<B: Backend>(
    mut commands: Commands,
    mut device: ResMut<Device<B>>,
    released: Query<(Entity, &Uses), ReleasedUnpinned>,
    streams: Query<(&Stream, &SubmittedCursor)>,
) {
    let _span =
        tracing::trace_span!(target: "gpuworld::memory", "gc.pin_released_memory").entered();
    let mut events: SmallVec<[(Entity, DeviceEvent); 4]> = SmallVec::new();
    let mut handles = Vec::new();
    for (entity, uses) in &released {
        // Work still queued would run after an event flushed now: wait for its submission.
        let all_submitted = uses.0.iter().all(|&(stream, cursor)| {
            streams
                .get(stream)
                .is_ok_and(|(_, submitted)| submitted.0 >= cursor)
        });
        if !all_submitted {
            continue;
        }
        for &(stream, _) in &uses.0 {
            if events.iter().any(|(s, _)| *s == stream) {
                continue;
            }
            if let Ok((info, _)) = streams.get(stream) {
                events.push((stream, device.0.flush(info.device)));
            }
        }
        commands.entity(entity).insert(AwaitingGc);
        handles.push(entity);
    }
    if !handles.is_empty() {
        tracing::trace!(target: "gpuworld::memory", handles = handles.len(), "released memory pinned behind events");
        commands.spawn(PendingGc {
            events: events.into_iter().map(|(_, e)| e).collect(),
            handles,
            pins: Vec::new(),
        });
    }
}

/// Unpins shared handles and returns the memory of released ones once their events passed.
pub fn reclaim_finished_gc<B: Backend>(
    mut commands: Commands,
    mut device: ResMut<Device<B>>,
    mut pinned: ResMut<PinnedHandles>,
    mut pool: ResMut<MemoryPool>,
    mut stats: ResMut<Stats>,
    gcs: Query<(Entity, &PendingGc)>,
    handles: Query<&Allocation>,
) {
    let _span =
        tracing::trace_span!(target: "gpuworld::memory", "gc.reclaim_finished_gc").entered();
    for (entity, gc) in &gcs {
        // Released memory also waits for every shared-binding pin on it (the GC stream's event).
        if !gc.events.iter().all(|&e| device.0.event_done(e))
            || gc.handles.iter().any(|h| pinned.0.contains_key(h))
        {
            continue;
        }
        for handle in &gc.pins {
            if let Some(count) = pinned.0.get_mut(handle) {
                *count -= 1;
                if *count == 0 {
                    pinned.0.remove(handle);
                }
            }
        }
        for &handle in &gc.handles {
            let released = match handles.get(handle) {
                Ok(Allocation::Slice { slice, .. }) => pool.release(*slice).map(|()| true),
                // Unless its stream already took it for a later allocation.
                Ok(Allocation::Parked { slice }) => pool.release_parked(*slice),
                _ => Ok(false),
            };
            match released {
                Ok(true) => stats.handles_reclaimed += 1,
                Ok(false) => {}
                Err(error) => {
                    tracing::error!(target: "gpuworld::memory", %error, "reclaiming a slice failed");
                }
            }
            commands.entity(handle).despawn();
        }
        commands.entity(entity).despawn();
    }
}

/// Returns free memory to the device when a cleanup was requested, and long-unused free
/// memory by the pool's own policy.
pub fn cleanup_memory<B: Backend>(
    tick: Res<TickCounter>,
    mut requested: ResMut<CleanupRequested>,
    mut pool: ResMut<MemoryPool>,
    mut device: ResMut<Device<B>>,
) {
    let _span = tracing::trace_span!(target: "gpuworld::memory", "gc.cleanup_memory").entered();
    pool.periodic_cleanup(&mut device.0, tick.0);
    if std::mem::take(&mut requested.0) {
        pool.cleanup(&mut device.0);
        tracing::debug!(target: "gpuworld::memory", reserved = pool.usage().bytes_reserved, "memory cleanup");
    }
}
