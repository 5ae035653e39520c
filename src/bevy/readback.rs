//! Readbacks as entities, as Bevy's `GpuReadbackPlugin` has them: a [`Readback`] component on
//! an entity, and [`ReadbackComplete`] triggered on that entity with the bytes once a tick saw
//! them arrive (or [`ReadbackFailed`] with the read's error). A repeating readback holds its
//! handles (the memory lives as long as the readback) and keeps up to
//! [`DEFAULT_READS_IN_FLIGHT`] reads in flight, delivered in frame order; a frame whose read
//! finds that bound reached is skipped, logged at `warn` and listed in the next delivery.
//! Delivery checks tickets and never blocks or ticks; despawning the entity drops its tickets,
//! and the bytes, when they come, go back to the backend's pool.

use super::{Gpu, GpuworldSet};
use crate::ReadTicket;
use crate::client::decode;
use bevy_app::App;
use bevy_ecs::intern::Interned;
use bevy_ecs::prelude::*;
use bevy_ecs::schedule::ScheduleLabel;
use gpuworld_systems::{Backend, Binding, Error, Handle, HostBytes, Result, RuntimeId};
use std::collections::VecDeque;

/// Reads a repeating [`Readback`] keeps in flight by default, as frames in flight do
/// ([`super::DEFAULT_FRAMES_IN_FLIGHT`]).
pub const DEFAULT_READS_IN_FLIGHT: usize = 3;

/// Reads bytes back to an entity: once, from a ticket, or every few frames from handles.
#[derive(Component, Debug)]
pub struct Readback {
    reads: Reads,
}

/// What a readback reads.
#[derive(Debug)]
enum Reads {
    /// One ticket, delivered once.
    Once(ReadTicket),
    /// Reads issued every few frames.
    Repeat(Repeat),
}

/// The handles a repeating readback reads, when, and its reads in flight.
#[derive(Debug)]
struct Repeat {
    runtime: RuntimeId,
    /// Strong handles: the readback keeps what it reads alive.
    sources: Vec<Handle>,
    every: u32,
    max_in_flight: usize,
    /// Frames this readback has seen (the next frame's number).
    frames: u64,
    /// Reads issued and not yet delivered, oldest first.
    in_flight: VecDeque<InFlightRead>,
    /// Skipped frames not yet handed to a read (skipped after the last read issued).
    skipped: Vec<u64>,
    /// Skipped frames of reads that failed, reported with the next delivery.
    carried: Vec<u64>,
    /// Frames whose read was skipped since the readback began.
    skipped_total: u64,
}

/// A read of a repeating readback in flight.
#[derive(Debug)]
struct InFlightRead {
    /// The frame that issued it.
    frame: u64,
    ticket: ReadTicket,
    /// Frames skipped between the previous read issued and this one.
    skipped_before: Vec<u64>,
}

impl Readback {
    /// Delivers `ticket`'s bytes to the entity once; the component is then removed.
    pub fn once(ticket: ReadTicket) -> Readback {
        Readback {
            reads: Reads::Once(ticket),
        }
    }

    /// Reads `sources` (handles of one runtime, each with its offsets) in every frame's
    /// submissions, after `Submit`, and delivers each frame's bytes, in frame order. Holds
    /// clones of the handles, so the memory lives as long as the readback does. At most
    /// [`DEFAULT_READS_IN_FLIGHT`] reads are in flight ([`Readback::reads_in_flight`]).
    pub fn every_frame<'a>(sources: impl IntoIterator<Item = &'a Handle>) -> Readback {
        Readback::every(1, sources)
    }

    /// Like [`Readback::every_frame`], every `frames` frames (at least 1), starting this frame.
    pub fn every<'a>(frames: u32, sources: impl IntoIterator<Item = &'a Handle>) -> Readback {
        let sources: Vec<Handle> = sources.into_iter().cloned().collect();
        Readback {
            reads: Reads::Repeat(Repeat {
                runtime: sources.first().map_or(RuntimeId(u64::MAX), Handle::runtime),
                sources,
                every: frames.max(1),
                max_in_flight: DEFAULT_READS_IN_FLIGHT,
                frames: 0,
                in_flight: VecDeque::new(),
                skipped: Vec::new(),
                carried: Vec::new(),
                skipped_total: 0,
            }),
        }
    }

    /// At most `limit` reads of a repeating readback in flight (at least 1): a frame whose read
    /// finds `limit` reads not yet arrived is skipped, logged at `warn` and listed in the next
    /// [`ReadbackComplete::skipped`]. No effect on [`Readback::once`].
    pub fn reads_in_flight(mut self, limit: usize) -> Readback {
        if let Reads::Repeat(repeat) = &mut self.reads {
            repeat.max_in_flight = limit.max(1);
        }
        self
    }

    /// Whether a read of this entity is in flight.
    pub fn is_waiting(&self) -> bool {
        match &self.reads {
            Reads::Once(_) => true,
            Reads::Repeat(repeat) => !repeat.in_flight.is_empty(),
        }
    }

    /// Frames whose read a repeating readback skipped so far (its bound of reads in flight
    /// reached); 0 for [`Readback::once`].
    pub fn skipped(&self) -> u64 {
        match &self.reads {
            Reads::Once(_) => 0,
            Reads::Repeat(repeat) => repeat.skipped_total,
        }
    }
}

/// Triggered on a [`Readback`]'s entity when its bytes arrived: one `HostBytes` per source.
#[derive(EntityEvent, Debug)]
#[non_exhaustive]
pub struct ReadbackComplete {
    /// The readback's entity.
    pub entity: Entity,
    /// The bytes, one buffer per source, in the order of the sources.
    pub bytes: Vec<HostBytes>,
    /// For a repeating readback, the frame whose read this is, counted from 0 at the first
    /// frame the readback saw; `None` for [`Readback::once`].
    pub frame: Option<u64>,
    /// Frames of a repeating readback before `frame` (and after the previous delivery's) whose
    /// read was skipped, because its reads in flight were at their bound
    /// ([`Readback::reads_in_flight`]); in frame order.
    pub skipped: Vec<u64>,
}

impl ReadbackComplete {
    /// The elements of `T` of every source, one after the other in the order of the sources
    /// (copied: the bytes are only byte-aligned); `LayoutError::ElementSize` when a source is not a
    /// whole number of elements.
    pub fn to_vec<T: bytemuck::Pod>(&self) -> Result<Vec<T>> {
        let mut all = Vec::new();
        for bytes in &self.bytes {
            all.extend(decode::<T>(bytes)?);
        }
        Ok(all)
    }

    /// Each source's elements of `T`, in the order of the sources; `LayoutError::ElementSize` when
    /// a source is not a whole number of elements.
    pub fn to_vecs<T: bytemuck::Pod>(&self) -> Result<Vec<Vec<T>>> {
        self.bytes.iter().map(|bytes| decode(bytes)).collect()
    }
}

/// Triggered on a [`Readback`]'s entity when its read failed (a released handle, a fault of the
/// stream, the runtime gone).
#[derive(EntityEvent, Debug)]
#[non_exhaustive]
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

/// Issues this frame's reads of the repeating readbacks of runtime `(B, M)`; a read due while
/// the readback's reads in flight are at their bound is skipped, logged and remembered.
pub(super) fn issue_readbacks<B: Backend, M: Send + Sync + 'static>(
    gpu: Res<Gpu<B, M>>,
    mut readbacks: Query<(Entity, &mut Readback)>,
    mut commands: Commands,
) {
    let runtime = gpu.runtime_id();
    for (entity, mut readback) in &mut readbacks {
        let Reads::Repeat(repeat) = &mut readback.reads else {
            continue;
        };
        if repeat.runtime != runtime {
            continue;
        }
        let frame = repeat.frames;
        repeat.frames += 1;
        if !frame.is_multiple_of(u64::from(repeat.every)) {
            continue;
        }
        if repeat.in_flight.len() >= repeat.max_in_flight {
            tracing::warn!(
                target: "gpuworld::bevy",
                ?entity,
                frame,
                limit = repeat.max_in_flight,
                "a readback skipped a frame: its reads in flight are at their bound; see `ReadbackComplete::skipped`, or raise `Readback::reads_in_flight`"
            );
            repeat.skipped.push(frame);
            repeat.skipped_total += 1;
            continue;
        }
        let sources: Vec<Binding> = repeat.sources.iter().map(Handle::binding).collect();
        match gpu.read_ticket(&sources) {
            Ok(ticket) => repeat.in_flight.push_back(InFlightRead {
                frame,
                ticket,
                skipped_before: std::mem::take(&mut repeat.skipped),
            }),
            Err(error) => failed(&mut commands, entity, error),
        }
    }
}

/// Triggers [`ReadbackComplete`] (or [`ReadbackFailed`]) for every read whose bytes arrived, a
/// repeating readback's in frame order; removes a one-shot `Readback`. Never blocks, never ticks.
pub fn deliver_readbacks(mut readbacks: Query<(Entity, &mut Readback)>, mut commands: Commands) {
    for (entity, mut readback) in &mut readbacks {
        match &mut readback.reads {
            Reads::Once(ticket) => {
                let Some(result) = ticket.try_take() else {
                    continue;
                };
                match result {
                    Ok(bytes) => commands.trigger(ReadbackComplete {
                        entity,
                        bytes,
                        frame: None,
                        skipped: Vec::new(),
                    }),
                    Err(error) => failed(&mut commands, entity, error),
                }
                commands.entity(entity).remove::<Readback>();
            }
            Reads::Repeat(repeat) => {
                // Reads of one stream arrive in order: stop at the first not yet arrived.
                while let Some(read) = repeat.in_flight.front_mut() {
                    let Some(result) = read.ticket.try_take() else {
                        break;
                    };
                    let Some(read) = repeat.in_flight.pop_front() else {
                        break;
                    };
                    repeat.carried.extend(read.skipped_before);
                    match result {
                        Ok(bytes) => commands.trigger(ReadbackComplete {
                            entity,
                            bytes,
                            frame: Some(read.frame),
                            skipped: std::mem::take(&mut repeat.carried),
                        }),
                        // Its skipped frames go with the next delivery.
                        Err(error) => failed(&mut commands, entity, error),
                    }
                }
            }
        }
    }
}

/// Reports a failed readback: logged at `warn` (an app that observes no [`ReadbackFailed`] would
/// otherwise never hear of it; issue 27), then triggered on the readback's entity.
fn failed(commands: &mut Commands, entity: Entity, error: Error) {
    tracing::warn!(target: "gpuworld::bevy", ?entity, %error, "a readback failed; observe `ReadbackFailed` on its entity to handle it");
    commands.trigger(ReadbackFailed { entity, error });
}
