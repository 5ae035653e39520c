//! The tick: seven stages, each a named `SystemSet`, chained so that their order is a fact of
//! the code. One schedule, run by a single-threaded executor (`executor.rs`), ambiguity detection
//! at error. Each stage is a unit with a `build(world, schedule)` that registers what it owns and
//! adds its systems.

pub mod alignment;
pub mod executor;
pub mod flush_wait;
pub mod gc;
pub mod ingest;
pub mod interleave;
pub mod lifetime;
pub mod replies;
pub mod scheduling;
pub mod tick;
pub mod tune;

pub use tick::{Tick, TickStage};

use crate::backend::Backend;
use crate::snapshot::Capture;
use bevy_ecs::prelude::*;
use bevy_ecs::schedule::{LogLevel, ScheduleBuildSettings};

/// Builds the tick schedule for backend `B`: each stage registers, in `world`, the state it owns
/// and adds its systems to its set, as a Bevy plugin would.
pub fn tick_schedule<B: Backend>(world: &mut World) -> Schedule {
    let mut schedule = Schedule::new(Tick);
    schedule.set_executor(executor::TickExecutor::new());
    schedule.set_build_settings(ScheduleBuildSettings {
        ambiguity_detection: LogLevel::Error,
        ..Default::default()
    });
    // Chained in `TickStage::ALL`'s order, the one list of the stages.
    for pair in TickStage::ALL.windows(2) {
        schedule.configure_sets(pair[0].before(pair[1]));
    }
    ingest::build::<B>(world, &mut schedule);
    alignment::build(world, &mut schedule);
    flush_wait::build(world, &mut schedule);
    scheduling::build(world, &mut schedule);
    interleave::build::<B>(world, &mut schedule);
    gc::build::<B>(world, &mut schedule);
    tune::build(world, &mut schedule);
    crate::trace::build(world);
    debug_assert!(
        !executor::has_run_conditions(&schedule),
        "the tick's executor runs every system: no stage may add a run condition"
    );
    schedule
}

/// Each stage's part of a snapshot, in tick order: the facts only it owns (see
/// [`crate::snapshot::Capture`]).
pub fn snapshot_lines(world: &mut World, capture: &mut Capture<'_>) {
    ingest::snapshot_lines(world, capture);
    alignment::snapshot_lines(world, capture);
    flush_wait::snapshot_lines(world, capture);
    gc::snapshot_lines(world, capture);
}
