//! Checkpoints and rollbacks (issue 51): save the device state a run names to a versioned,
//! checksummed file and restore it on any backend ([`Checkpoint`], `ComputeClient::checkpoint`,
//! `ComputeClient::restore`, [`inspect`]), and keep recent frames in device memory for a game's
//! rollback ([`RollbackRing`]). `docs/checkpoints.md` describes the file and the guarantees.

mod format;
mod read;
mod rollback;
mod write;

pub use format::{MAGIC, VERSION};
pub use read::{BufferInfo, CheckpointInfo, Restored, RestoredBuffer, inspect};
pub use rollback::RollbackRing;
pub use write::{Checkpoint, CheckpointSummary};

use gpuworld_systems::StreamId;

/// What the user attaches to a checkpoint beside its buffers, restored as given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CheckpointMeta {
    /// The run's tick (or step, or frame) number when it was taken.
    pub tick: u64,
    /// The state of the run's random number generator, as bytes.
    pub rng_state: Vec<u8>,
    /// Anything else the application needs to continue, as bytes.
    pub app_data: Vec<u8>,
}

impl CheckpointMeta {
    /// Metadata of tick `tick`, with no RNG state or application data.
    pub fn at_tick(tick: u64) -> CheckpointMeta {
        CheckpointMeta {
            tick,
            ..CheckpointMeta::default()
        }
    }

    /// The same metadata with `rng_state`.
    pub fn with_rng_state(mut self, rng_state: impl Into<Vec<u8>>) -> CheckpointMeta {
        self.rng_state = rng_state.into();
        self
    }

    /// The same metadata with `app_data`.
    pub fn with_app_data(mut self, app_data: impl Into<Vec<u8>>) -> CheckpointMeta {
        self.app_data = app_data.into();
        self
    }
}

/// How far a checkpoint or restore has come, as its progress callback sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Progress {
    /// Buffer bytes moved so far.
    pub bytes_done: u64,
    /// Buffer bytes in all.
    pub bytes_total: u64,
    /// The buffer being moved (its position in the checkpoint).
    pub buffer: usize,
    /// Buffers in all.
    pub buffers: usize,
}

/// A buffer's stream as the file stores it.
fn stream_of(value: u64) -> StreamId {
    StreamId { value }
}
