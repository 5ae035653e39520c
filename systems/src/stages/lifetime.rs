//! A handle's life after release: the one place that decides when its memory may be reused, as
//! wgpu-core's `LifetimeTracker` does for resources. Ingest, interleave and the GC stage call it;
//! the pool only keeps the books (`MemoryPool::park`, `release_parked`), never the proof. Owns
//! `PendingGc`, `AwaitingGc` and `PinnedHandles`.
//!
//! A handle's memory goes back in these steps:
//! 1. **Release** (ingest, in arrival order, [`release`]): memory no work used returns to its
//!    pool at once; memory whose every use was on one stream is *parked* for that stream, whose
//!    later allocations may take it at once (it runs its work in order); memory several streams
//!    used is marked `Released`.
//! 2. **Pin shared bindings** (interleave, [`PinnedHandles::pin_behind`]): a handle another
//!    stream waited for is pinned behind its consumer's event, so its release waits for that
//!    consumer too.
//! 3. **Pin released memory** (GC, [`Lifetime::pin_released_memory`]): once the task of every
//!    use was submitted (queued work would run after an event flushed now), an event is flushed
//!    on each stream that used it, and a `PendingGc` holds the handle behind them.
//! 4. **Reclaim** (GC, [`Lifetime::reclaim_finished_gc`]): once a `PendingGc`'s events passed
//!    and no pin of step 2 holds its handles, their memory returns to the pool; parked memory
//!    returns with the last handle parked in its tick's group (`MemoryPool::release_parked`),
//!    unless its stream took it first. Its pins of step 2 are released.
//! 5. **Return to the device** (GC, [`Lifetime::cleanup_memory`]): pages a compaction emptied
//!    go back once an event on every stream passed; a requested cleanup frees the pools' idle
//!    memory, and again as memory released before the request comes back.

use super::alignment::Uses;
use super::replies::StreamFaults;
use crate::backend::{Backend, DeviceEvent};
use crate::memory::{MemoryPool, ParkedReturn, SliceKey};
use crate::snapshot::Capture;
use crate::world::*;
use bevy_ecs::prelude::*;
use bevy_ecs::system::SystemParam;
use smallvec::SmallVec;
use std::collections::HashMap;

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

/// A released handle whose reclamation waits on a pending-GC entity.
#[derive(Component, Debug)]
pub struct AwaitingGc;

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
pub struct PinnedHandles(HashMap<Entity, u32>);

impl PinnedHandles {
    /// Step 2: pins `shared` behind `consumer_event`, the event of the stream that used them
    /// after waiting for another; the pending GC to spawn, which unpins them once it passed.
    pub fn pin_behind(&mut self, consumer_event: DeviceEvent, shared: Vec<Entity>) -> PendingGc {
        for &handle in &shared {
            *self.0.entry(handle).or_default() += 1;
        }
        PendingGc {
            events: SmallVec::from_elem(consumer_event, 1),
            handles: Vec::new(),
            pins: shared,
        }
    }

    /// How many handles are pinned.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no handle is pinned.
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn holds(&self, handle: Entity) -> bool {
        self.0.contains_key(&handle)
    }

    fn unpin(&mut self, handle: Entity) {
        if let Some(count) = self.0.get_mut(&handle) {
            *count -= 1;
            if *count == 0 {
                self.0.remove(&handle);
            }
        }
    }
}

/// Registers what the lifetime owns that a stage's `build` would otherwise have to name.
pub fn build(world: &mut World) {
    world.init_resource::<PinnedHandles>();
}

/// What a release did with a handle's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freed {
    /// It went back to its pool at once.
    Now,
    /// It is parked or marked `Released`: the later steps return it.
    Later,
    /// The handle held none (its allocation failed).
    NothingHeld,
}

/// Step 1: releases a handle the user dropped, whose memory is `slice`, in arrival order: memory
/// no work used returns to `pool` now (its entity, if any, despawned); memory only one stream
/// used is parked for that stream's later allocations; the rest is marked `Released` for steps
/// 3–4. A handle that must wait gets an entity (`spawn` makes one if it has none yet).
pub fn release(
    commands: &mut Commands,
    pool: &mut MemoryPool,
    slice: SliceKey,
    entity: Option<Entity>,
    used_on: UsedOn,
    spawn: impl FnOnce(&mut Commands) -> Entity,
) -> Freed {
    if used_on == UsedOn::Nothing {
        if let Err(error) = pool.release(slice) {
            tracing::error!(target: "gpuworld::memory", %error, "releasing unused memory failed");
        }
        if let Some(entity) = entity {
            commands.entity(entity).despawn();
        }
        return Freed::Now;
    }
    let entity = entity.unwrap_or_else(|| spawn(commands));
    match used_on {
        UsedOn::One(stream) => match pool.park(slice, stream) {
            Ok(()) => {
                commands
                    .entity(entity)
                    .insert((Allocation::Parked { slice }, Released));
            }
            Err(error) => {
                tracing::error!(target: "gpuworld::memory", %error, "parking released memory failed");
                commands.entity(entity).insert(Released);
            }
        },
        UsedOn::Nothing | UsedOn::Several => {
            commands.entity(entity).insert(Released);
        }
    }
    Freed::Later
}

/// Released handles not yet pinned behind events.
type ReleasedUnpinned = (With<Released>, Without<AwaitingGc>);

/// What steps 3–5 read and write, inside the GC stage's system.
#[derive(SystemParam)]
pub struct Lifetime<'w, 's> {
    commands: Commands<'w, 's>,
    pinned: ResMut<'w, PinnedHandles>,
    stats: ResMut<'w, Stats>,
    submitted: Query<'w, 's, &'static SubmittedCursor>,
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
}

impl std::fmt::Debug for Lifetime<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lifetime")
            .field("pinned", &self.pinned.len())
            .finish_non_exhaustive()
    }
}

impl Lifetime<'_, '_> {
    /// Starts a tick's steps 3–5: nothing reclaimed yet.
    pub fn begin_tick(&mut self) {
        self.reclaimed.clear();
    }

    /// Pending GCs left for later ticks once this tick ends.
    pub fn pending_gcs(&self) -> usize {
        self.gcs.iter().count() + self.fresh.len() - self.reclaimed.len()
    }

    /// Whether any pending GC, of earlier ticks or this one, is left to reclaim.
    pub fn has_pending_gcs(&self) -> bool {
        !(self.gcs.is_empty() && self.fresh.is_empty())
    }

    /// Step 3: pins released handles whose last uses were submitted behind one event per using
    /// stream. What ingest parks from then on is released apart from what it parked so far.
    pub fn pin_released_memory<B: Backend>(
        &mut self,
        device: &mut B,
        pool: &mut MemoryPool,
        streams: &StreamFaults,
    ) {
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
                if let Ok((info, _)) = streams.get(stream) {
                    events.push((stream, device.flush(info.device)));
                }
            }
            self.commands.entity(entity).insert(AwaitingGc);
            handles.push(entity);
        }
        pool.seal_parking();
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
    pub fn spawn_fresh(&mut self) {
        for gc in self.fresh.drain(..) {
            self.commands.spawn(gc);
        }
    }

    /// Step 4: reclaims every pending GC whose events passed, those pinned in this tick included.
    pub fn reclaim_finished_gc<B: Backend>(&mut self, device: &mut B, pool: &mut MemoryPool) {
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
                if !self.reclaimed.contains(&entity) && self.reclaim(device, pool, gc) {
                    self.commands.entity(entity).despawn();
                    self.reclaimed.push(entity);
                }
            }
            fresh.retain(|gc| !self.reclaim(device, pool, gc));
            if self.reclaimed.len() == reclaimed && fresh.len() == waiting {
                break;
            }
        }
        *self.fresh = fresh;
    }

    /// Unpins the shared handles of `gc` and returns the memory of its released ones, if its
    /// events passed and no shared-binding pin (its consumer's event) holds them; whether it did.
    fn reclaim<B: Backend>(
        &mut self,
        device: &mut B,
        pool: &mut MemoryPool,
        gc: &PendingGc,
    ) -> bool {
        if !gc.events.iter().all(|&e| device.event_done(e))
            || gc.handles.iter().any(|&h| self.pinned.holds(h))
        {
            return false;
        }
        for &handle in &gc.pins {
            self.pinned.unpin(handle);
        }
        for &handle in &gc.handles {
            let awaited = self.cleanup_waits_for.remove(&handle);
            let released = match self.handles.get(handle) {
                Ok(Allocation::Slice { slice, .. }) => {
                    (pool.release(*slice)).map(|()| ParkedReturn {
                        handles: 1,
                        awaited,
                    })
                }
                // Once the GC stage released every handle parked with it, unless its stream took
                // all of their memory for later allocations.
                Ok(Allocation::Parked { slice }) => pool.release_parked(*slice, awaited),
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

    /// Step 5: returns free memory to the device when a cleanup was requested, and long-unused
    /// free memory by the pool's own policy. Memory released before the request that still waits
    /// for the device returns too: the handles are noted, and each later tick that returns some
    /// of their memory to the pool cleans up again. A caller who drops its handles, then asks for
    /// a cleanup, gets the memory back however late the device finishes; memory released later
    /// is left to the pool's policy (the fuzzer found memory left reserved when the device
    /// finished after the cleanup ran: issue 30).
    pub fn cleanup_memory<B: Backend>(
        &mut self,
        device: &mut B,
        pool: &mut MemoryPool,
        tick: u64,
        streams: (&StreamFaults, &Query<&TaskQueue>),
    ) {
        self.release_retiring_pages(device, pool, streams);
        pool.periodic_cleanup(device, tick);
        let requested = pool.take_cleanup_request();
        if requested || std::mem::take(&mut *self.freed_for_cleanup) {
            pool.cleanup(device);
            tracing::debug!(target: "gpuworld::memory", reserved = pool.usage().bytes_reserved, "memory cleanup");
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

    /// Returns pages a compaction emptied once the device is done with them: when every queue
    /// has been submitted (the copies reading them are then submitted, as is every earlier use),
    /// an event is flushed on every stream; the pages retired by then go back once all passed.
    /// A request waiting for them asks again in a later tick.
    fn release_retiring_pages<B: Backend>(
        &mut self,
        device: &mut B,
        pool: &mut MemoryPool,
        (streams, queues): (&StreamFaults, &Query<&TaskQueue>),
    ) {
        if let Some((through, events)) = &*self.retiring {
            if events.iter().all(|&event| device.event_done(event)) {
                pool.release_retiring(device, *through);
                *self.retiring = None;
            }
            return;
        }
        let through = pool.retiring_generation();
        if through == 0 || queues.iter().any(|queue| !queue.tasks.is_empty()) {
            return;
        }
        let events = (streams.iter())
            .map(|(info, _)| device.flush(info.device))
            .collect();
        *self.retiring = Some((through, events));
    }
}

/// The pending GCs in flight, and which released handles wait for one or are pinned by one.
pub(super) fn snapshot_lines(world: &mut World, capture: &mut Capture<'_>) {
    let lines: Vec<String> = (world.query::<&PendingGc>().iter(world))
        .map(|g| {
            let mut handles: Vec<String> =
                g.handles.iter().map(|h| capture.handle_name(*h)).collect();
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
        })
        .collect();
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
