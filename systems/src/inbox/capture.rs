//! Capturing (issue 28): the commands a client issued during a capture, kept to be replayed
//! as one unit. A capture runs its work once (the warm-up: every allocation in it is made then,
//! and the graph keeps it), and the inbox records, from the capturing thread, the launches,
//! writes and flushes it queues. A replay is one [`crate::inbox::Command::Replay`] that ingest
//! turns into the same tasks, in order, on the same handles: eager work before and after it is
//! ordered against it exactly as against any command of its streams.
//!
//! Every handle a recorded command uses is pinned ([`crate::inbox::Command::Pin`]) as soon as it is
//! recorded: a release by the user while the graph lives takes effect only when the graph goes,
//! so its memory is never reused under a replay. A host read, a sync, a mark, a collective or a
//! transfer from another runtime cannot be replayed and is refused with
//! [`GraphError::NotCapturable`] naming the call.

use super::Command;
use crate::binding::Binding;
use crate::bytes::HostBytes;
use crate::error::{Error, GraphError};
use crate::ids::{HandleId, RuntimeId, StreamId};
use crate::kernel::{CubeCount, ExecutionMode, Kernel};
use smallvec::SmallVec;
use std::thread::ThreadId;

/// One command of a captured graph, as a replay issues it again.
#[derive(Clone, Debug)]
pub enum Recorded {
    /// A kernel launch.
    Launch {
        /// The kernel.
        kernel: Kernel,
        /// How many cubes.
        count: CubeCount,
        /// Buffer bindings, in the kernel's order.
        buffers: SmallVec<[Binding; 4]>,
        /// 32-bit scalars (updatable between replays).
        scalars: SmallVec<[u32; 4]>,
        /// Checked, or unchecked where `unsafe` code vouched for the captured launch.
        mode: ExecutionMode,
        /// The stream it runs on.
        stream: StreamId,
    },
    /// A copy of host bytes into a buffer (a `write`, or a creation's initial contents).
    Write {
        /// Destination range.
        dst: Binding,
        /// The bytes (updatable between replays, same length).
        data: HostBytes,
        /// The stream it runs on.
        stream: StreamId,
    },
    /// A submission of the stream's queued work.
    Flush {
        /// The stream.
        stream: StreamId,
    },
}

impl PartialEq for Recorded {
    /// The same command: the same kernel (by definition), count, bindings, scalars, mode and
    /// stream; the same bytes to the same range.
    fn eq(&self, other: &Recorded) -> bool {
        match (self, other) {
            (
                Recorded::Launch {
                    kernel,
                    count,
                    buffers,
                    scalars,
                    mode,
                    stream,
                },
                Recorded::Launch {
                    kernel: k,
                    count: c,
                    buffers: b,
                    scalars: s,
                    mode: m,
                    stream: st,
                },
            ) => {
                std::ptr::eq(*kernel, *k)
                    && count == c
                    && buffers == b
                    && scalars == s
                    && mode == m
                    && stream == st
            }
            (
                Recorded::Write { dst, data, stream },
                Recorded::Write {
                    dst: d,
                    data: bytes,
                    stream: st,
                },
            ) => dst == d && stream == st && data == bytes,
            (Recorded::Flush { stream }, Recorded::Flush { stream: st }) => stream == st,
            _ => false,
        }
    }
}

impl Recorded {
    /// The command it was recorded from, to issue eagerly.
    ///
    /// # Safety
    /// An unchecked launch is issued unchecked again: the caller vouches for it as for the
    /// launch it was recorded from (the same bindings, count and scalars).
    pub unsafe fn into_command(self) -> Command {
        match self {
            Recorded::Launch {
                kernel,
                count,
                buffers,
                scalars,
                mode,
                stream,
            } => Command::Launch {
                kernel,
                count,
                buffers,
                scalars,
                mode: match mode {
                    ExecutionMode::Checked => crate::kernel::LaunchMode::CHECKED,
                    // SAFETY: as the caller promises.
                    ExecutionMode::Unchecked => unsafe { crate::kernel::LaunchMode::unchecked() },
                },
                stream,
            },
            Recorded::Write { dst, data, stream } => Command::Write { dst, data, stream },
            Recorded::Flush { stream } => Command::Flush { stream },
        }
    }

    /// What the command is, for listings: `launch`, `write` or `flush`.
    pub fn kind(&self) -> &'static str {
        match self {
            Recorded::Launch { .. } => "launch",
            Recorded::Write { .. } => "write",
            Recorded::Flush { .. } => "flush",
        }
    }

    /// A one-line description: the kernel or the bytes, and the stream.
    pub fn describe(&self) -> String {
        match self {
            Recorded::Launch {
                kernel,
                buffers,
                scalars,
                stream,
                ..
            } => format!(
                "launch {} ({} buffers, {} scalars) on {stream}",
                kernel.name,
                buffers.len(),
                scalars.len()
            ),
            Recorded::Write { dst, data, stream } => format!(
                "write {} bytes into handle {} on {stream}",
                data.len(),
                dst.handle()
            ),
            Recorded::Flush { stream } => format!("flush {stream}"),
        }
    }
}

/// A capture in progress on one inbox: what the capturing thread queued so far.
#[derive(Debug)]
pub struct Recording {
    thread: ThreadId,
    /// The commands recorded, in order.
    pub commands: Vec<Recorded>,
    /// The handles pinned for the graph, each once, in the order they were pinned.
    pub pinned: Vec<HandleId>,
    pinned_set: rustc_hash::FxHashSet<HandleId>,
    /// The first call refused, which fails the capture.
    pub refused: Option<Error>,
    /// A dry recording keeps the launches, writes and flushes it records instead of queueing
    /// them (allocations, pins and releases are queued as always).
    dry: bool,
}

impl Recording {
    /// A recording of what the calling thread queues.
    pub fn on_this_thread() -> Recording {
        Recording {
            thread: std::thread::current().id(),
            commands: Vec::new(),
            pinned: Vec::new(),
            pinned_set: Default::default(),
            refused: None,
            dry: false,
        }
    }

    /// A recording of what the calling thread queues that does not queue the launches, writes
    /// and flushes it records.
    pub fn dry_on_this_thread() -> Recording {
        Recording {
            dry: true,
            ..Recording::on_this_thread()
        }
    }

    /// Whether the calling thread is the capturing one.
    pub fn is_this_thread(&self) -> bool {
        std::thread::current().id() == self.thread
    }

    /// Takes `command` from the capturing thread of runtime `runtime`: records it and returns
    /// what to queue (the command, then pins for the handles it is the first to use), or refuses
    /// it.
    pub fn take(&mut self, runtime: RuntimeId, command: Command) -> SmallVec<[Command; 4]> {
        let mut queue = SmallVec::new();
        let refuse = |this: &mut Recording, call: &'static str| {
            let error = Error::Graph(GraphError::NotCapturable { call });
            tracing::warn!(target: "gpuworld::graph", call, "refused inside a capture");
            if this.refused.is_none() {
                this.refused = Some(error.clone());
            }
            error
        };
        match command {
            Command::Launch {
                kernel,
                count,
                buffers,
                scalars,
                mode,
                stream,
            } => {
                let mut handles: SmallVec<[HandleId; 4]> =
                    buffers.iter().map(Binding::handle).collect();
                if let CubeCount::Dynamic(binding) = &count {
                    handles.push(binding.handle());
                }
                self.commands.push(Recorded::Launch {
                    kernel,
                    count,
                    buffers: buffers.clone(),
                    scalars: scalars.clone(),
                    mode: mode.execution_mode(),
                    stream,
                });
                if !self.dry {
                    queue.push(Command::Launch {
                        kernel,
                        count,
                        buffers,
                        scalars,
                        mode,
                        stream,
                    });
                }
                self.pin(&handles, &mut queue);
            }
            Command::Write { dst, data, stream } => {
                self.commands.push(Recorded::Write {
                    dst,
                    data: data.clone(),
                    stream,
                });
                if !self.dry {
                    queue.push(Command::Write { dst, data, stream });
                }
                self.pin(&[dst.handle()], &mut queue);
            }
            Command::Create {
                handle,
                size,
                data,
                stream,
            } => {
                // Made once, in this warm-up; a replay writes its initial contents again.
                if let Some(data) = &data {
                    self.commands.push(Recorded::Write {
                        dst: Binding::of_handle(handle, runtime, 0, 0, size),
                        data: data.clone(),
                        stream,
                    });
                }
                queue.push(Command::Create {
                    handle,
                    size,
                    data,
                    stream,
                });
                self.pin(&[handle], &mut queue);
            }
            Command::Flush { stream } => {
                self.commands.push(Recorded::Flush { stream });
                if !self.dry {
                    queue.push(Command::Flush { stream });
                }
            }
            Command::Read { reply, .. } => {
                let error = refuse(self, "read");
                let _ = reply.send(Err(error));
            }
            Command::Sync { reply, .. } => {
                let error = refuse(self, "sync");
                let _ = reply.send(Err(error));
            }
            Command::Mark { reply, .. } => {
                let error = refuse(self, "mark");
                let _ = reply.send(Err(error));
            }
            Command::Native { work, .. } => {
                refuse(self, work.name());
            }
            Command::WriteArriving { .. } => {
                refuse(self, "a transfer from another runtime");
            }
            Command::Replay { .. } => {
                refuse(self, "replay");
            }
            // Releases, pins, cleanups and allocation modes act now and are not replayed.
            other => queue.push(other),
        }
        queue
    }

    /// Pins each of `handles` not pinned yet, behind the command that uses it.
    fn pin(&mut self, handles: &[HandleId], queue: &mut SmallVec<[Command; 4]>) {
        for &handle in handles {
            if self.pinned_set.insert(handle) {
                self.pinned.push(handle);
                queue.push(Command::Pin { handle });
            }
        }
    }
}
