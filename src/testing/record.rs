//! Recording: the command stream a client sends to a runtime (any backend), each command with the
//! tick that ingested it, as a versioned serde value ([`Recording`], JSON on disk). Kernels are
//! recorded by id; uploaded bytes are kept up to a size cap, so a replay computes the same values.
//! [`RecordedOp`] is the file's form of the runtime's one vocabulary (`gpuworld_systems::inbox`'s
//! `Op`, and the commands that carry replies): handles by the recorded run's ids, kernels by id,
//! bytes as hex; `record_op` writes an op and the replayer's `op` reads one back.

use crate::{Backend, ComputeClient};
use gpuworld_systems::Binding;
use gpuworld_systems::CubeCount;
use gpuworld_systems::inbox::{Command, CommandTap, Op, PinHolder};
use gpuworld_systems::kernel::ExecutionMode;
use gpuworld_systems::memory::AllocationMode;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::Arc;

/// The `format` field of every recording.
pub const FORMAT: &str = "gpuworld-recording";

/// The version of the recording format this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// A recorded run: where it ran, and the commands of each tick.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Recording {
    /// Always [`FORMAT`].
    pub format: String,
    /// The format's version ([`FORMAT_VERSION`]).
    pub version: u32,
    /// The backend it was recorded on (`cpu`, `wgpu`, `cuda`, `sim`).
    pub backend: String,
    /// The device's name.
    pub device: String,
    /// Ticks run while recording.
    pub ticks: u64,
    /// The commands, in arrival order.
    pub commands: Vec<RecordedCommand>,
}

/// One command and the tick (counted from the start of the recording, from 1) that ingested it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecordedCommand {
    /// The tick that ingested it.
    pub tick: u64,
    /// What it was.
    #[serde(flatten)]
    pub op: RecordedOp,
}

/// A client command, as recorded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum RecordedOp {
    /// A new handle of `size` bytes, optionally with contents.
    Create {
        /// The handle's id in the recorded run.
        handle: u64,
        /// Its size in bytes.
        size: u64,
        /// Its initial contents.
        data: Option<Data>,
        /// The stream it was created on.
        stream: u64,
    },
    /// Bytes copied into a binding.
    Write {
        /// Where.
        dst: RecordedBinding,
        /// The bytes.
        data: Data,
        /// The stream.
        stream: u64,
    },
    /// A kernel launch.
    Launch {
        /// The kernel's id (`gpuworld.fill`).
        kernel: String,
        /// Cubes per axis, when known at launch.
        cubes: Option<[u32; 3]>,
        /// The buffer holding the cube count, when read on the device.
        cubes_from: Option<RecordedBinding>,
        /// Buffer bindings, in the kernel's order.
        buffers: Vec<RecordedBinding>,
        /// Scalars, as 32-bit words.
        scalars: Vec<u32>,
        /// Whether it ran without bound checks.
        unchecked: bool,
        /// The stream.
        stream: u64,
    },
    /// A readback.
    Read {
        /// What was read.
        sources: Vec<RecordedBinding>,
        /// The stream.
        stream: u64,
    },
    /// A flush.
    Flush {
        /// The stream.
        stream: u64,
    },
    /// A sync.
    Sync {
        /// The stream.
        stream: u64,
    },
    /// A mark (a flush that returns an event).
    Mark {
        /// The stream.
        stream: u64,
    },
    /// Bytes from another runtime written into `dst` (the destination side of `to_client`):
    /// recorded, not replayable on one runtime.
    Arriving {
        /// The destination range.
        dst: RecordedBinding,
        /// The stream it ran on.
        stream: u64,
    },
    /// Work the backend ran itself over `buffers` (a collective through NCCL): recorded, not
    /// replayable on one runtime.
    Native {
        /// The work's name.
        name: String,
        /// Its bindings.
        buffers: Vec<RecordedBinding>,
        /// The stream it ran on.
        stream: u64,
    },
    /// The last clone of a handle dropped.
    Release {
        /// The handle's id in the recorded run.
        handle: u64,
    },
    /// Free memory returned to the device.
    MemoryCleanup,
    /// An allocation-mode window opened.
    OpenAllocationMode {
        /// The stream.
        stream: u64,
        /// Whether the mode was `Persistent` (else `Auto`).
        persistent: bool,
    },
    /// An allocation-mode window closed.
    CloseAllocationMode {
        /// The stream.
        stream: u64,
    },
    /// A captured graph (or a render lease) took hold of a handle.
    Pin {
        /// The handle's id in the recorded run.
        handle: u64,
        /// Whether a render lease holds it (else a graph); absent in older recordings.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        lease: bool,
    },
    /// A captured graph (or a render lease) let go of a handle.
    Unpin {
        /// The handle's id in the recorded run.
        handle: u64,
        /// Whether a render lease held it (else a graph); absent in older recordings.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        lease: bool,
    },
    /// A captured graph replayed: its launches, writes and flushes, in order.
    Replay {
        /// The graph's number in the recorded run.
        graph: u64,
        /// How many updates the graph had had.
        #[serde(default)]
        version: u64,
        /// Its commands.
        ops: Vec<RecordedOp>,
    },
}

/// A byte range of a recorded handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedBinding {
    /// The handle's id in the recorded run.
    pub handle: u64,
    /// Bytes skipped at the start.
    pub offset_start: u64,
    /// Bytes skipped at the end.
    pub offset_end: u64,
    /// The handle's size.
    pub capacity: u64,
}

impl RecordedBinding {
    fn of(binding: &Binding) -> RecordedBinding {
        RecordedBinding {
            handle: binding.handle().0,
            offset_start: binding.offset_start(),
            offset_end: binding.offset_end(),
            capacity: binding.capacity(),
        }
    }
}

/// Uploaded bytes: kept as hex, or only their length when over the recorder's cap (a replay
/// then uploads zeros, and computes other values than the recorded run).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Data {
    /// The bytes, two hex digits each.
    Hex(String),
    /// Left out: the bytes' length.
    Omitted(u64),
}

impl Data {
    fn of(bytes: &[u8], cap: u64) -> Data {
        if bytes.len() as u64 > cap {
            return Data::Omitted(bytes.len() as u64);
        }
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let hex = bytes
            .iter()
            .flat_map(|byte| {
                [
                    DIGITS[usize::from(byte >> 4)],
                    DIGITS[usize::from(byte & 15)],
                ]
            })
            .map(char::from)
            .collect();
        Data::Hex(hex)
    }

    /// The bytes (zeros where they were left out), or `None` for malformed hex.
    pub fn bytes(&self) -> Option<Vec<u8>> {
        match self {
            Data::Omitted(len) => Some(vec![0; usize::try_from(*len).ok()?]),
            Data::Hex(hex) => (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
                .collect(),
        }
    }
}

/// Why a recording could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordingError {
    /// The file could not be read or written.
    #[error("cannot access {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// What the file system said.
        source: std::io::Error,
    },
    /// The file is not a recording this build understands.
    #[error("{path} is not a gpuworld recording: {reason}")]
    Format {
        /// The file.
        path: String,
        /// What was wrong.
        reason: String,
    },
}

impl Recording {
    /// Writes the recording to `path` as JSON.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), RecordingError> {
        let path = path.as_ref();
        let json = serde_json::to_string_pretty(self).map_err(|e| RecordingError::Format {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        std::fs::write(path, json).map_err(|source| RecordingError::Io {
            path: path.display().to_string(),
            source,
        })
    }

    /// Reads a recording written by [`Recording::save`]; refuses other formats and versions.
    pub fn load(path: impl AsRef<Path>) -> Result<Recording, RecordingError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| RecordingError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Recording::from_json(&text).map_err(|reason| RecordingError::Format {
            path: path.display().to_string(),
            reason,
        })
    }

    /// Parses a recording from JSON; refuses other formats and versions.
    pub fn from_json(text: &str) -> Result<Recording, String> {
        let recording: Recording = serde_json::from_str(text).map_err(|e| e.to_string())?;
        if recording.format != FORMAT {
            return Err(format!("format is `{}`", recording.format));
        }
        if recording.version != FORMAT_VERSION {
            return Err(format!(
                "format version {} (this build reads version {FORMAT_VERSION})",
                recording.version
            ));
        }
        Ok(recording)
    }
}

/// Records the commands a runtime ingests from the moment it is attached until
/// [`Recorder::finish`]: [`Recorder::attach`] to a client of any backend, run the program, then
/// finish to get the [`Recording`].
pub struct Recorder<B: Backend> {
    client: ComputeClient<B>,
    commands: Arc<Mutex<Vec<RecordedCommand>>>,
    start_tick: u64,
}

impl<B: Backend> std::fmt::Debug for Recorder<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("client", &self.client)
            .field("start_tick", &self.start_tick)
            .finish_non_exhaustive()
    }
}

impl<B: Backend> Recorder<B> {
    /// Starts recording every command `client`'s runtime ingests, keeping uploads up to
    /// `max_data_bytes` bytes each (`u64::MAX` keeps them all).
    pub fn attach(client: &ComputeClient<B>, max_data_bytes: u64) -> Recorder<B> {
        let commands = Arc::new(Mutex::new(Vec::new()));
        let sink = commands.clone();
        let start_tick = client.with_runtime(|rt| {
            let start = rt.tick_count();
            rt.set_command_tap(Some(CommandTap(Box::new(move |tick, command| {
                sink.lock().push(RecordedCommand {
                    tick: tick - start,
                    op: record(command, max_data_bytes),
                });
            }))));
            start
        });
        Recorder {
            client: client.clone(),
            commands,
            start_tick,
        }
    }

    /// Stops recording; what was recorded.
    pub fn finish(self) -> Recording {
        let (ticks, device) = self.client.with_runtime(|rt| {
            rt.set_command_tap(None);
            (
                rt.tick_count() - self.start_tick,
                rt.properties().name.clone(),
            )
        });
        Recording {
            format: FORMAT.to_string(),
            version: FORMAT_VERSION,
            backend: B::NAME.to_string(),
            device,
            ticks,
            commands: std::mem::take(&mut *self.commands.lock()),
        }
    }
}

/// `command` as recorded.
fn record(command: &Command, cap: u64) -> RecordedOp {
    match command {
        Command::Op(op) => record_op(op, cap),
        Command::Read {
            sources, stream, ..
        } => RecordedOp::Read {
            sources: sources.iter().map(RecordedBinding::of).collect(),
            stream: stream.value,
        },
        Command::Sync { stream, .. } => RecordedOp::Sync {
            stream: stream.value,
        },
        Command::Mark { stream, .. } => RecordedOp::Mark {
            stream: stream.value,
        },
        Command::WriteArriving { dst, stream, .. } => RecordedOp::Arriving {
            dst: RecordedBinding::of(dst),
            stream: stream.value,
        },
        Command::Native {
            work,
            buffers,
            stream,
        } => RecordedOp::Native {
            name: work.name().to_string(),
            buffers: buffers.iter().map(RecordedBinding::of).collect(),
            stream: stream.value,
        },
        // A graph's transfer part, recorded as the command it wraps.
        Command::ForGraph(command) => record(command, cap),
        Command::Replay {
            graph,
            version,
            ops,
        } => RecordedOp::Replay {
            graph: *graph,
            version: *version,
            ops: ops.iter().map(|op| record_op(op, cap)).collect(),
        },
    }
}

/// `op` as recorded, queued eagerly or by a graph's replay.
fn record_op(op: &Op, cap: u64) -> RecordedOp {
    match op {
        Op::Create {
            handle,
            size,
            data,
            stream,
        } => RecordedOp::Create {
            handle: handle.0,
            size: *size,
            data: data.as_ref().map(|d| Data::of(d, cap)),
            stream: stream.value,
        },
        Op::Write { dst, data, stream } => RecordedOp::Write {
            dst: RecordedBinding::of(dst),
            data: Data::of(data, cap),
            stream: stream.value,
        },
        Op::Launch(launch) => {
            let (cubes, cubes_from) = match launch.count() {
                CubeCount::Static(x, y, z) => (Some([*x, *y, *z]), None),
                CubeCount::Dynamic(binding) => (None, Some(RecordedBinding::of(binding))),
            };
            RecordedOp::Launch {
                kernel: launch.kernel().id.to_string(),
                cubes,
                cubes_from,
                buffers: launch.buffers().iter().map(RecordedBinding::of).collect(),
                scalars: launch.scalars().to_vec(),
                unchecked: launch.mode() == ExecutionMode::Unchecked,
                stream: launch.stream().value,
            }
        }
        Op::Flush { stream } => RecordedOp::Flush {
            stream: stream.value,
        },
        Op::Release { handle } => RecordedOp::Release { handle: handle.0 },
        Op::MemoryCleanup => RecordedOp::MemoryCleanup,
        Op::OpenAllocationMode { stream, mode } => RecordedOp::OpenAllocationMode {
            stream: stream.value,
            persistent: *mode == AllocationMode::Persistent,
        },
        Op::CloseAllocationMode { stream } => RecordedOp::CloseAllocationMode {
            stream: stream.value,
        },
        Op::Pin { handle, holder } => RecordedOp::Pin {
            handle: handle.0,
            lease: *holder == PinHolder::Lease,
        },
        Op::Unpin { handle, holder } => RecordedOp::Unpin {
            handle: handle.0,
            lease: *holder == PinHolder::Lease,
        },
    }
}
