#![doc = include_str!("../../docs/testing.md")]

mod backends;
mod harness;
mod record;
mod replay;
mod sweep;

pub use crate::on_every_backend;
pub use backends::{BackendRuns, BackendTest, Skipped, TestBackend, run_on_every_backend};
pub use gpuworld_sim::{CallCounts, CostModel, Fault, FaultPlan, KernelRate, SimCall, Span};
pub use gpuworld_systems::snapshot::{
    Contents, Element, HandleLine, MemoryLine, Snapshot, SnapshotOptions, StreamLine, TaskLine,
    Values,
};
pub use harness::{MAX_IDLE_TICKS, NotIdle, TestRuntime};
pub use record::{
    Data, FORMAT, FORMAT_VERSION, RecordedBinding, RecordedCommand, RecordedOp, Recorder,
    Recording, RecordingError,
};
pub use replay::{MAX_DRAIN_TICKS, ReadOutcome, ReplayError, ReplayReport, Replayer};
pub use sweep::{FaultOutcome, SweepReport, fault_sweep};
