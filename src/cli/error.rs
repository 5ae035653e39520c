//! The one error type a subcommand can end with, which also decides the process exit code.

use super::backends::BackendKind;
use super::launch;
use std::path::PathBuf;
use std::process::ExitCode;

/// Why a subcommand failed.
#[derive(thiserror::Error, Debug)]
pub enum CliError {
    /// The runtime or its device reported an error.
    #[error(transparent)]
    Runtime(#[from] gpuworld::Error),
    /// `gpuworld.toml` or a `GPUWORLD_*` variable holds a setting it refuses.
    #[error(transparent)]
    Config(#[from] gpuworld::error::ConfigError),
    /// The requested backend was left out of this build.
    #[error(
        "the {backend} backend is not built into this binary (build with --features {feature})",
        backend = .0.name(),
        feature = .0.feature()
    )]
    BackendNotBuilt(BackendKind),
    /// The device returned a field of the wrong size.
    #[error("the device returned {got} cells for the field, expected {expected}")]
    FieldSize {
        /// Cells the field should have.
        expected: usize,
        /// Cells that came back.
        got: usize,
    },
    /// The PNG could not be written.
    #[error("cannot write {path}: {source}", path = .path.display())]
    Image {
        /// Where the PNG was to go.
        path: PathBuf,
        /// What the encoder or the file system said.
        source: png::EncodingError,
    },
    /// A recording could not be read.
    #[error(transparent)]
    Recording(#[from] gpuworld::testing::RecordingError),
    /// A recording could not be replayed.
    #[error(transparent)]
    Replay(#[from] gpuworld::testing::ReplayError),
    /// A replay on a backend returned other results than on the sim.
    #[error("the replay on {} returned other results than on the sim", .0.name())]
    ReplayDiffers(BackendKind),
    /// The trace could not be written.
    #[error("cannot write the trace to {path}: {source}", path = .path.display())]
    Trace {
        /// Where the trace was to go.
        path: PathBuf,
        /// What the file system said.
        source: std::io::Error,
    },
    /// `--devices` above 1 asked of a backend that cannot split the demo.
    #[error("--devices above 1 runs on cpu, sim or cuda, not on {}", .0.name())]
    NoMultiDevice(BackendKind),
    /// More devices than the field has rows.
    #[error("{devices} devices for a field of {rows} rows: each device needs at least one row")]
    TooManyDevices {
        /// Devices asked for.
        devices: usize,
        /// Rows of the field.
        rows: usize,
    },
    /// The field split over devices differs from the one-device run.
    #[error(
        "the field split over {devices} devices differs from the one-device run in {differing} cells"
    )]
    DevicesDiffer {
        /// Devices the field was split over.
        devices: usize,
        /// Cells whose bits differ.
        differing: usize,
    },
    /// `gpuworld launch` refused its arguments or a rank failed.
    #[error(transparent)]
    Launch(#[from] launch::LaunchError),
    /// `--resume` named a checkpoint that is not of this demo's field.
    #[error("cannot resume from {path}: {reason}", path = .path.display())]
    ResumeMismatch {
        /// The checkpoint.
        path: PathBuf,
        /// How it differs from the run asked for.
        reason: String,
    },
    /// Standard output could not be written.
    #[error("cannot write to stdout: {0}")]
    Stdout(#[from] std::io::Error),
}

impl CliError {
    /// The process exit code for this error: 2 for a request this binary cannot serve, as clap
    /// does for bad arguments, 1 for failures while running.
    pub fn exit_code(&self) -> ExitCode {
        match self {
            CliError::BackendNotBuilt(_) | CliError::NoMultiDevice(_) => ExitCode::from(2),
            CliError::Launch(error) if error.is_usage() => ExitCode::from(2),
            _ => ExitCode::FAILURE,
        }
    }
}
