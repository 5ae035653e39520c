//! Seeing what the runtime did: while a trace runs, the host time of every tick and of each of
//! its seven stages, each stream's operations as the device timed them (or as they were
//! submitted, where the backend cannot time them), the waits between streams, GC reclamations
//! and counters of memory and queued tasks; and, while enabled, per-kernel statistics. Systems
//! between the stage sets stamp the stages; `collect_tick`, last in the tick, gathers the rest.
//! They are in the tick only while a trace or kernel statistics record (`Runtime` adds and
//! removes the [`Recording`] set): otherwise their eight systems would cost every tick about
//! 3,000 instructions, a sixth of a launch-and-read round trip.
//! Owns `TraceRecorder` and `KernelStats`. What a backend reports of each operation (`OpTime`)
//! is part of the backend contract (`backend.rs`), re-exported here.

mod chrome;
// `KernelStats::clear` serves the internals' users (tests) only.
#[cfg_attr(not(feature = "internals"), allow(dead_code))]
mod kernel_stats;
mod model;
mod recorder;

pub use crate::backend::{OpClock, OpKind, OpTime};
pub use kernel_stats::{KernelStat, KernelTimes};
// The recorder's resources: public only with the `internals` feature.
#[cfg(feature = "internals")]
pub use kernel_stats::KernelStats;
#[cfg(not(feature = "internals"))]
pub(crate) use kernel_stats::KernelStats;
pub use model::{
    Counters, Reclaim, ReplayMark, StageSpan, StreamSlice, TickSpan, Trace, TraceClock, WaitArrow,
};
#[cfg(feature = "internals")]
pub use recorder::TraceRecorder;
#[cfg(not(feature = "internals"))]
pub(crate) use recorder::TraceRecorder;

use crate::backend::Backend;
use crate::memory::MemoryPool;
pub use crate::stages::tick::TickStage;
use crate::world::*;
use bevy_ecs::prelude::*;

/// The trace's systems in the tick: the stage stamps and the collection at its end.
#[cfg_attr(not(feature = "internals"), doc(hidden))]
#[derive(SystemSet, Debug, Clone, PartialEq, Eq, Hash)]
pub struct Recording;

/// Registers the recorder and the statistics; their systems join the tick only while they
/// record ([`add_recording`]).
#[cfg_attr(not(feature = "internals"), doc(hidden))]
pub fn build(world: &mut World) {
    world.init_resource::<TraceRecorder>();
    world.init_resource::<KernelStats>();
}

/// Adds the [`Recording`] systems to the tick: the stage stamps between the stage sets and the
/// collection at its end. The schedule is rebuilt at its next run.
#[cfg_attr(not(feature = "internals"), doc(hidden))]
pub fn add_recording<B: Backend>(schedule: &mut Schedule) {
    use TickStage::*;
    schedule.add_systems(
        (
            stamp_stage::<0>.before(Ingest),
            stamp_stage::<1>.after(Ingest).before(AlignmentAnalysis),
            stamp_stage::<2>.after(AlignmentAnalysis).before(FlushWait),
            stamp_stage::<3>.after(FlushWait).before(Scheduling),
            stamp_stage::<4>.after(Scheduling).before(Interleave),
            stamp_stage::<5>.after(Interleave).before(GcReclamation),
            stamp_stage::<6>.after(GcReclamation).before(TuneIngestion),
            collect_tick::<B>.after(TuneIngestion),
        )
            .in_set(Recording),
    );
}

/// Takes the [`Recording`] systems out of the tick again.
#[cfg_attr(not(feature = "internals"), doc(hidden))]
pub fn remove_recording(
    schedule: &mut Schedule,
    world: &mut World,
) -> std::result::Result<usize, bevy_ecs::schedule::ScheduleError> {
    schedule.remove_systems_in_set(
        Recording,
        world,
        bevy_ecs::schedule::ScheduleCleanupPolicy::RemoveSystemsOnly,
    )
}

/// Notes when stage `STAGE` starts (and the one before it ends), while a trace runs.
fn stamp_stage<const STAGE: usize>(recorder: ResMut<TraceRecorder>) {
    if recorder.is_tracing() {
        recorder.into_inner().stamp(STAGE);
    }
}

/// Ends the tick's record: the last stage's end, the backend's operation times, reclamations
/// and counters; feeds kernel statistics.
#[allow(clippy::too_many_arguments, reason = "a system's parameters")]
fn collect_tick<B: Backend>(
    recorder: ResMut<TraceRecorder>,
    kernel_stats: ResMut<KernelStats>,
    mut device: ResMut<Device<B>>,
    pool: Res<MemoryPool>,
    stats: Res<Stats>,
    tick: Res<TickCounter>,
    streams: Query<(&Stream, &TaskQueue)>,
) {
    if !recorder.is_tracing() && !kernel_stats.is_enabled() {
        return;
    }
    let recorder = recorder.into_inner();
    let kernel_stats = kernel_stats.into_inner();
    let ops = recorder.take_device_ops(&mut device.0);
    kernel_stats.add(recorder.submitted_launches(), &ops);
    if recorder.is_tracing() {
        let queued = streams
            .iter()
            .map(|(_, queue)| queue.tasks.len() as u64)
            .sum();
        for (stream, _) in &streams {
            recorder.name_stream(stream);
        }
        let usage = pool.usage();
        recorder.end_tick(
            tick.0,
            ops,
            stats.handles_reclaimed,
            Counters {
                bytes_in_use: usage.bytes_in_use,
                bytes_reserved: usage.bytes_reserved,
                tasks_queued: queued,
            },
        );
    } else {
        recorder.clear_submissions();
    }
}
