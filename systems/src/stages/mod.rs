//! The tick: seven stages, each a named `SystemSet`, chained so that their order is a fact of
//! the code. One schedule, single-threaded executor, ambiguity detection at error.

pub mod alignment;
pub mod flush_wait;
pub mod gc;
pub mod ingest;
pub mod interleave;
pub mod scheduling;
pub mod tune;

use crate::backend::Backend;
use bevy_ecs::prelude::*;
use bevy_ecs::schedule::{LogLevel, ScheduleBuildSettings, ScheduleLabel, SingleThreadedExecutor};

/// The label of the tick schedule.
#[derive(ScheduleLabel, Debug, Clone, PartialEq, Eq, Hash)]
pub struct Tick;

/// The seven stages of a tick, in order.
#[derive(SystemSet, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TickStage {
    /// Drain the client inbox into entities.
    Ingest,
    /// Find which other streams wrote each new task's inputs.
    AlignmentAnalysis,
    /// Decide waits and flushes.
    FlushWait,
    /// Queue tasks per stream and mark ready queues.
    Scheduling,
    /// Submit ready queues to the backend.
    Interleave,
    /// Poll the device; complete reads and syncs; reclaim memory.
    GcReclamation,
    /// Move autotune results into the tune cache.
    TuneIngestion,
}

/// Builds the tick schedule for backend `B`.
pub fn tick_schedule<B: Backend>() -> Schedule {
    let mut schedule = Schedule::new(Tick);
    schedule.set_executor(SingleThreadedExecutor::new());
    schedule.set_build_settings(ScheduleBuildSettings {
        ambiguity_detection: LogLevel::Error,
        ..Default::default()
    });
    schedule.configure_sets(
        (
            TickStage::Ingest,
            TickStage::AlignmentAnalysis,
            TickStage::FlushWait,
            TickStage::Scheduling,
            TickStage::Interleave,
            TickStage::GcReclamation,
            TickStage::TuneIngestion,
        )
            .chain(),
    );
    schedule.add_systems((
        ingest::ingest_commands::<B>.in_set(TickStage::Ingest),
        alignment::analyze_alignment.in_set(TickStage::AlignmentAnalysis),
        flush_wait::decide_flush_and_waits.in_set(TickStage::FlushWait),
        scheduling::queue_tasks.in_set(TickStage::Scheduling),
        interleave::submit_ready_queues::<B>.in_set(TickStage::Interleave),
        (
            gc::await_replies::<B>,
            gc::poll_device::<B>,
            gc::complete_reads::<B>,
            gc::complete_syncs::<B>,
            gc::pin_released_memory::<B>,
            gc::reclaim_finished_gc::<B>,
            gc::cleanup_memory::<B>,
        )
            .chain()
            .in_set(TickStage::GcReclamation),
        tune::ingest_tune_results.in_set(TickStage::TuneIngestion),
    ));
    schedule
}
