//! Readbacks as entities, as Bevy's `GpuReadbackPlugin` has them: a [`Readback`] component on
//! an entity, and [`ReadbackComplete`] triggered on that entity with the bytes once a tick saw
//! them arrive (or [`ReadbackFailed`] with the read's error). Delivery checks tickets and never
//! blocks or ticks; despawning the entity drops its ticket, and the bytes, when they come, go
//! back to the backend's pool.

use super::{Gpu, GpuworldSet};
use crate::ReadTicket;
use bevy_app::App;
use bevy_ecs::intern::Interned;
use bevy_ecs::prelude::*;
use bevy_ecs::schedule::ScheduleLabel;
use gpuworld_systems::{Backend, Binding, Error, HostBytes, RuntimeId};

/// Reads bytes back to an entity: once, from a ticket, or every few frames from bindings.
#[derive(Component, Debug)]
pub struct Readback {
    ticket: Option<ReadTicket>,
    repeat: Option<Repeat>,
}

/// The bindings a repeating readback reads, and when.
#[derive(Debug)]
struct Repeat {
    runtime: RuntimeId,
    sources: Vec<Binding>,
    every: u32,
    frames_left: u32,
}

impl Readback {
    /// Delivers `ticket`'s bytes to the entity once; the component is then removed.
    pub fn once(ticket: ReadTicket) -> Readback {
        Readback {
            ticket: Some(ticket),
            repeat: None,
        }
    }

    /// Reads `sources` (all of one runtime) in every frame's submissions, after `Submit`, and
    /// delivers each frame's bytes as they arrive. At most one read is in flight per entity.
    pub fn every_frame(sources: &[Binding]) -> Readback {
        Readback::every(1, sources)
    }

    /// Like [`Readback::every_frame`], every `frames` frames (at least 1), starting this frame.
    pub fn every(frames: u32, sources: &[Binding]) -> Readback {
        Readback {
            ticket: None,
            repeat: Some(Repeat {
                runtime: sources.first().map_or(RuntimeId(u64::MAX), |b| b.runtime),
                sources: sources.to_vec(),
                every: frames.max(1),
                frames_left: 0,
            }),
        }
    }

    /// Whether a read of this entity is in flight.
    pub fn is_waiting(&self) -> bool {
        self.ticket.is_some()
    }
}

/// Triggered on a [`Readback`]'s entity when its bytes arrived: one `HostBytes` per source.
#[derive(EntityEvent, Debug)]
pub struct ReadbackComplete {
    /// The readback's entity.
    pub entity: Entity,
    /// The bytes, one buffer per source, in the order of the sources.
    pub bytes: Vec<HostBytes>,
}

impl ReadbackComplete {
    /// The first source's bytes as elements of `T` (copied: the bytes are only byte-aligned).
    pub fn to_vec<T: bytemuck::Pod>(&self) -> Vec<T> {
        let Some(bytes) = self.bytes.first() else {
            return Vec::new();
        };
        bytes
            .chunks_exact(std::mem::size_of::<T>().max(1))
            .map(bytemuck::pod_read_unaligned)
            .collect()
    }
}

/// Triggered on a [`Readback`]'s entity when its read failed (a released handle, a fault of the
/// stream, the runtime gone).
#[derive(EntityEvent, Debug)]
pub struct ReadbackFailed {
    /// The readback's entity.
    pub entity: Entity,
    /// Why.
    pub error: Error,
}

/// Schedules in which the delivery system was added, so two plugins in one schedule add it once.
#[derive(Resource, Default)]
struct DeliveryInstalled(Vec<Interned<dyn ScheduleLabel>>);

/// Adds [`deliver_readbacks`] to `schedule`'s `Readback` set, once.
pub(super) fn install_delivery(app: &mut App, schedule: Interned<dyn ScheduleLabel>) {
    let mut installed = app
        .world_mut()
        .get_resource_or_insert_with(DeliveryInstalled::default);
    if installed.0.contains(&schedule) {
        return;
    }
    installed.0.push(schedule);
    app.add_systems(schedule, deliver_readbacks.in_set(GpuworldSet::Readback));
}

/// Issues this frame's reads of the repeating readbacks of runtime `(B, M)`.
pub(super) fn issue_readbacks<B: Backend, M: Send + Sync + 'static>(
    gpu: Res<Gpu<B, M>>,
    mut readbacks: Query<(Entity, &mut Readback)>,
    mut commands: Commands,
) {
    let runtime = gpu.runtime_id();
    for (entity, mut readback) in &mut readbacks {
        let readback = &mut *readback;
        let Some(repeat) = readback.repeat.as_mut() else {
            continue;
        };
        if repeat.runtime != runtime || readback.ticket.is_some() {
            continue;
        }
        if repeat.frames_left > 0 {
            repeat.frames_left -= 1;
            continue;
        }
        repeat.frames_left = repeat.every - 1;
        match gpu.read_ticket(&repeat.sources) {
            Ok(ticket) => readback.ticket = Some(ticket),
            Err(error) => failed(&mut commands, entity, error),
        }
    }
}

/// Triggers [`ReadbackComplete`] (or [`ReadbackFailed`]) on every readback whose bytes arrived;
/// removes a one-shot `Readback`. Never blocks, never ticks.
pub fn deliver_readbacks(mut readbacks: Query<(Entity, &mut Readback)>, mut commands: Commands) {
    for (entity, mut readback) in &mut readbacks {
        let Some(ticket) = readback.ticket.as_mut() else {
            continue;
        };
        let Some(result) = ticket.try_take() else {
            continue;
        };
        readback.ticket = None;
        match result {
            Ok(bytes) => commands.trigger(ReadbackComplete { entity, bytes }),
            Err(error) => failed(&mut commands, entity, error),
        }
        if readback.repeat.is_none() {
            commands.entity(entity).remove::<Readback>();
        }
    }
}

/// Reports a failed readback: logged at `warn` (an app that observes no [`ReadbackFailed`] would
/// otherwise never hear of it; issue 27), then triggered on the readback's entity.
fn failed(commands: &mut Commands, entity: Entity, error: gpuworld_systems::Error) {
    tracing::warn!(target: "gpuworld::bevy", ?entity, %error, "a readback failed; observe `ReadbackFailed` on its entity to handle it");
    commands.trigger(ReadbackFailed { entity, error });
}
