//! The tick's label and its seven stage sets, which every stage's `build` names; a leaf, so
//! that the stages need not import the module that assembles them.

use bevy_ecs::prelude::*;
use bevy_ecs::schedule::ScheduleLabel;

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

impl TickStage {
    /// The seven stages, in the order a tick runs them.
    pub const ALL: [TickStage; 7] = [
        TickStage::Ingest,
        TickStage::AlignmentAnalysis,
        TickStage::FlushWait,
        TickStage::Scheduling,
        TickStage::Interleave,
        TickStage::GcReclamation,
        TickStage::TuneIngestion,
    ];

    /// The stage's name in traces and logs.
    pub fn name(self) -> &'static str {
        match self {
            TickStage::Ingest => "ingest",
            TickStage::AlignmentAnalysis => "alignment analysis",
            TickStage::FlushWait => "flush/wait",
            TickStage::Scheduling => "scheduling",
            TickStage::Interleave => "interleave",
            TickStage::GcReclamation => "gc reclamation",
            TickStage::TuneIngestion => "tune ingestion",
        }
    }
}
