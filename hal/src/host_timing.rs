//! Device time on the host backends (cpu, sim): each finished operation's start and end on the
//! backend's clock (the cpu's worker clock, the sim's virtual time), kept for a trace while
//! recording, and each stream's busy time, which answers `device_elapsed` between two marks:
//! the time the stream spent running work between them, waits excluded.

use crate::backend::{DeviceEvent, DeviceStream, OpKind, OpTime};
use crate::host_ops::HostOp;
use std::collections::VecDeque;
use std::time::Duration;

/// Marks whose busy time is kept, the newest; as the cuda and wgpu backends keep 1024 events.
const KEPT_MARKS: usize = 1024;

/// A mark: its event and the stream's busy time once the work before it has run.
#[derive(Clone, Copy, Debug)]
struct Mark {
    event: DeviceEvent,
    busy_ns: Option<u64>,
}

/// Operation times and per-stream busy time of a host backend.
#[derive(Debug, Default)]
pub struct HostTiming {
    /// Whether finished operations are kept for [`HostTiming::take_ops`].
    recording: bool,
    /// Whether operations are timed at all: once a mark was asked for, or while recording.
    measuring: bool,
    ops: Vec<OpTime>,
    /// Per queue: nanoseconds spent running operations other than waits.
    busy_ns: Vec<u64>,
    /// Per queue: when its last operation ended (the sim's virtual clock per queue).
    clock_ns: Vec<u64>,
    marks: VecDeque<Mark>,
    unresolved: usize,
}

impl HostTiming {
    /// Registers one more queue.
    pub fn add_stream(&mut self) {
        self.busy_ns.push(0);
        self.clock_ns.push(0);
    }

    /// Whether operations must be timed.
    pub fn measuring(&self) -> bool {
        self.measuring
    }

    /// Starts or stops keeping each finished operation's time.
    pub fn set_recording(&mut self, on: bool) {
        self.recording = on;
        self.measuring |= on;
        if !on {
            self.ops.clear();
        }
    }

    /// When `queue`'s last operation ended.
    pub fn clock_ns(&self, queue: usize) -> u64 {
        self.clock_ns.get(queue).copied().unwrap_or(0)
    }

    /// Counts an operation of `stream` that ran on `queue` from `start_ns` to `end_ns`, after
    /// which `queue` has completed `completed` operations.
    pub fn finish(
        &mut self,
        queue: usize,
        stream: DeviceStream,
        op: (OpKind, u64),
        start_ns: u64,
        end_ns: u64,
        completed: u64,
    ) {
        let (kind, bytes) = op;
        let Some(busy) = self.busy_ns.get_mut(queue) else {
            return;
        };
        if !matches!(kind, OpKind::Wait { .. }) {
            *busy += end_ns.saturating_sub(start_ns);
        }
        let busy = *busy;
        if let Some(clock) = self.clock_ns.get_mut(queue) {
            *clock = (*clock).max(end_ns);
        }
        if self.recording {
            self.ops.push(OpTime {
                stream,
                kind,
                bytes,
                start_ns,
                end_ns,
            });
        }
        if self.unresolved > 0 {
            self.resolve(DeviceEvent::on_stream(queue as u32, completed), busy);
        }
    }

    /// Counts an operation of `queue` that ran untimed (it started before timing was asked
    /// for), after which `queue` has completed `completed` operations.
    pub fn finish_untimed(&mut self, queue: usize, completed: u64) {
        if self.unresolved > 0 {
            let busy = self.busy_ns.get(queue).copied().unwrap_or(0);
            self.resolve(DeviceEvent::on_stream(queue as u32, completed), busy);
        }
    }

    fn resolve(&mut self, reached: DeviceEvent, busy: u64) {
        for mark in self
            .marks
            .iter_mut()
            .filter(|m| m.busy_ns.is_none() && m.event == reached)
        {
            mark.busy_ns = Some(busy);
            self.unresolved -= 1;
        }
    }

    /// Registers `event` as a mark; `completed` is what its queue has completed so far.
    pub fn mark(&mut self, event: DeviceEvent, completed: u64) {
        self.measuring = true;
        let (queue, ops) = event.stream_and_ops();
        let busy_ns =
            (completed >= ops).then(|| self.busy_ns.get(queue as usize).copied().unwrap_or(0));
        if busy_ns.is_none() {
            self.unresolved += 1;
        }
        if self.marks.len() == KEPT_MARKS
            && let Some(old) = self.marks.pop_front()
            && old.busy_ns.is_none()
        {
            self.unresolved -= 1;
        }
        self.marks.push_back(Mark { event, busy_ns });
    }

    /// The busy time of the stream between two marks of it, once both passed.
    pub fn elapsed(&self, start: DeviceEvent, end: DeviceEvent) -> Option<Duration> {
        if start.stream_and_ops().0 != end.stream_and_ops().0 {
            return None;
        }
        let busy = |event| self.marks.iter().rev().find(|m| m.event == event)?.busy_ns;
        let (a, b) = (busy(start)?, busy(end)?);
        Some(Duration::from_nanos(b.checked_sub(a)?))
    }

    /// Moves the operations recorded since the last call into `into`.
    pub fn take_ops(&mut self, into: &mut Vec<OpTime>) {
        into.append(&mut self.ops);
    }
}

/// What `op` is, for its [`OpTime`], and the bytes it binds. A replay counts as its first
/// kernel's launch (backends send a replay's launches one by one while operations are timed);
/// `None` for an empty one.
pub fn describe(op: &HostOp) -> Option<(OpKind, u64)> {
    Some(match op {
        HostOp::Write { dst, .. } => (OpKind::Write, dst.size),
        HostOp::Read { src, .. } => (OpKind::Read, src.size),
        HostOp::Copy { src, .. } => (OpKind::Copy, src.size),
        HostOp::Launch {
            kernel, buffers, ..
        } => (OpKind::Launch(kernel), buffers.iter().map(|r| r.size).sum()),
        HostOp::Wait { event } => (
            OpKind::Wait {
                origin: DeviceStream(event.stream_and_ops().0),
            },
            0,
        ),
        HostOp::Replay { launches, buffers } => (
            OpKind::Launch(launches.first()?.kernel),
            buffers.iter().map(|r| r.size).sum(),
        ),
    })
}
