//! Stage 6, GC reclamation: lets the device progress, completes reads and syncs whose work has
//! run (reporting a stream's fault on them), pins released handles behind an event on every
//! stream that used them, returns their memory once those events pass (parked memory too,
//! unless its stream already took it), and runs requested cleanups. Owns `PendingRead`,
//! `PendingSync` and `PendingGc`. Never blocks.

use crate::backend::{Backend, DeviceEvent};
use crate::memory::MemoryPool;
use crate::world::*;
use bevy_ecs::prelude::*;
use smallvec::SmallVec;

/// Lets the device make progress and collects faults onto their streams.
pub fn poll_device<B: Backend>(
    tick: Res<TickCounter>,
    mut device: ResMut<Device<B>>,
    mut streams: Query<(&Stream, &mut StreamFault)>,
) {
    device.0.poll(tick.0);
    for (stream, mut fault) in &mut streams {
        if let Some(error) = device.0.take_fault(stream.device) {
            tracing::warn!(target: "gpuworld::stream", slot = stream.slot, %error, "device fault");
            fault.0.get_or_insert(error);
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
        fault.0.get_or_insert(error);
    }
    fault.0.take()
}

/// Replies to reads whose bytes have all arrived.
pub fn complete_reads<B: Backend>(
    mut commands: Commands,
    mut device: ResMut<Device<B>>,
    mut reads: Query<(Entity, &mut PendingRead)>,
    mut streams: Query<(&Stream, &mut StreamFault)>,
) {
    for (entity, mut read) in &mut reads {
        let read = read.as_mut();
        for (slot, ticket) in read.tickets.iter_mut().enumerate() {
            if let Some(t) = *ticket
                && let Some(bytes) = device.0.take_read(t)
            {
                read.bytes[slot] = bytes;
                *ticket = None;
            }
        }
        if read.tickets.iter().any(Option::is_some) {
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
    pool.periodic_cleanup(&mut device.0, tick.0);
    if std::mem::take(&mut requested.0) {
        pool.cleanup(&mut device.0);
        tracing::debug!(target: "gpuworld::memory", reserved = pool.usage().bytes_reserved, "memory cleanup");
    }
}
