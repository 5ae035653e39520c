//! `TraceRecorder`: the trace being recorded, tick by tick. Stage stamps and the end of each tick
//! come from the trace systems; interleave adds what only it sees where the backend cannot time
//! its operations: each submission, timed on the host, and each wait between streams.

use super::model::*;
use crate::backend::{Backend, DeviceStream, OpClock, OpKind, OpTime};
use crate::stages::tick::TickStage;
use crate::world::Stream;
use bevy_ecs::prelude::*;
use std::time::Instant;

/// Stage stamps of a tick: the start of each of the seven stages, then the tick's end.
const STAMPS: usize = 8;

/// The trace being recorded, if any, and the backend's timing state.
#[derive(Debug, Resource, Default)]
pub struct TraceRecorder {
    recording: Option<Box<Recording>>,
    /// Whether the backend was asked to time its operations.
    backend_times_ops: bool,
    /// The clock of the backend's operation times, when it times them.
    op_clock: Option<OpClock>,
    /// Interleave times submissions on the host (the backend cannot time operations).
    time_submissions: bool,
    /// This tick's submissions, timed on the host since `epoch`.
    submissions: Vec<OpTime>,
    epoch: Option<Instant>,
}

#[derive(Debug)]
struct Recording {
    stamps: [Option<u64>; STAMPS],
    thread: String,
    reclaimed_seen: Option<u64>,
    /// Added to device timestamps to place them on the host tracks' time (`OpClock::Device`).
    device_offset: Option<i128>,
    trace: Trace,
}

impl TraceRecorder {
    /// Whether a trace is being recorded.
    pub fn is_tracing(&self) -> bool {
        self.recording.is_some()
    }

    /// Whether interleave must time submissions on the host.
    pub fn times_submissions(&self) -> bool {
        self.time_submissions
    }

    fn now_ns(&self, at: Instant) -> u64 {
        self.epoch.map_or(0, |epoch| {
            at.saturating_duration_since(epoch).as_nanos() as u64
        })
    }

    /// Notes that tick `tick` ingested a replay of graph `graph` with `commands`.
    pub fn replayed(&mut self, tick: u64, graph: u64, commands: Vec<String>) {
        let at_ns = self.now_ns(Instant::now());
        if let Some(recording) = self.recording.as_mut() {
            recording.trace.replays.push(ReplayMark {
                tick,
                at_ns,
                graph,
                commands,
            });
        }
    }

    /// Notes the start of stage `stage` (7: the tick's end) of the tick running.
    pub fn stamp(&mut self, stage: usize) {
        let now = Instant::now();
        let ns = self.now_ns(now);
        let Some(recording) = self.recording.as_mut() else {
            return;
        };
        if stage == 0 {
            recording.stamps = [None; STAMPS];
            let thread = std::thread::current();
            recording.thread = match thread.name() {
                Some(name) => name.to_string(),
                None => format!("{:?}", thread.id()),
            };
        }
        if let Some(stamp) = recording.stamps.get_mut(stage) {
            *stamp = Some(ns);
        }
    }

    /// Records an operation submitted to `stream` at `start` (until now), for a backend that
    /// cannot time it (a GPU backend times only its launches).
    pub fn submitted(&mut self, stream: DeviceStream, kind: OpKind, bytes: u64, start: Instant) {
        let timed_by_device = match self.op_clock {
            Some(OpClock::Device) => !matches!(kind, OpKind::Wait { .. }),
            Some(OpClock::DeviceLaunches) => matches!(kind, OpKind::Launch(_)),
            _ => false,
        };
        if timed_by_device {
            return;
        }
        let (start_ns, end_ns) = (self.now_ns(start), self.now_ns(Instant::now()));
        self.submissions.push(OpTime {
            stream,
            kind,
            bytes,
            start_ns,
            end_ns,
        });
    }

    /// Records that `consumer` was made to wait on `origin`'s event now, for a backend that
    /// does not report its waits as operations (the host backends do).
    pub fn waited(&mut self, origin: DeviceStream, consumer: DeviceStream) {
        if self.reports_waits() {
            return;
        }
        let ns = self.now_ns(Instant::now());
        if let Some(recording) = self.recording.as_mut() {
            recording.trace.waits.push(WaitArrow {
                origin: origin.0,
                consumer: consumer.0,
                origin_ns: ns,
                consumer_ns: ns,
            });
        }
    }

    /// Whether the backend's timed operations include its waits (the host backends').
    fn reports_waits(&self) -> bool {
        matches!(
            self.op_clock,
            Some(OpClock::HostSince(_) | OpClock::Virtual)
        )
    }

    /// The operations the backend timed since the last tick.
    pub fn take_device_ops<B: Backend>(&mut self, backend: &mut B) -> Vec<OpTime> {
        let mut ops = Vec::new();
        if self.backend_times_ops {
            backend.take_op_times(&mut ops);
        }
        ops
    }

    /// This tick's submissions timed on the host.
    pub fn submitted_launches(&self) -> &[OpTime] {
        &self.submissions
    }

    /// Forgets this tick's submissions.
    pub fn clear_submissions(&mut self) {
        self.submissions.clear();
    }

    /// Names the track of `stream`, once.
    pub fn name_stream(&mut self, stream: &Stream) {
        let Some(recording) = self.recording.as_mut() else {
            return;
        };
        let device = stream.device.0;
        if recording.trace.streams.iter().any(|(s, _)| *s == device) {
            return;
        }
        // The stream's one name, as snapshots and sim logs give it (`s0`, `gc`).
        let name = stream.name();
        recording.trace.streams.push((device, name));
        recording.trace.streams.sort();
    }

    /// Ends tick `tick`: its stages, the operations timed, the reclamations since the last tick
    /// (from the running total `reclaimed`) and the counters.
    pub fn end_tick(&mut self, tick: u64, ops: Vec<OpTime>, reclaimed: u64, counters: Counters) {
        self.stamp(STAMPS - 1);
        let host_now = self.now_ns(Instant::now());
        let submissions = std::mem::take(&mut self.submissions);
        let clock = self.op_clock;
        // Set by `start`, before any tick of the trace.
        let epoch = self.epoch.unwrap_or_else(Instant::now);
        let Some(recording) = self.recording.as_mut() else {
            return;
        };
        let stamps = recording.stamps;
        let end_ns = stamps[STAMPS - 1].unwrap_or(host_now);
        if let Some(start_ns) = stamps[0] {
            let stages = TickStage::ALL
                .iter()
                .enumerate()
                .filter_map(|(i, &stage)| {
                    Some(StageSpan {
                        stage,
                        start_ns: stamps[i]?,
                        end_ns: stamps[i + 1]?,
                    })
                })
                .collect();
            recording.trace.ticks.push(TickSpan {
                tick,
                thread: recording.thread.clone(),
                start_ns,
                end_ns,
                stages,
            });
        }
        for op in ops {
            let (start_ns, end_ns) = match clock {
                Some(OpClock::HostSince(since)) => {
                    let shift = if since >= epoch {
                        since.duration_since(epoch).as_nanos() as i128
                    } else {
                        -(epoch.duration_since(since).as_nanos() as i128)
                    };
                    (shifted(op.start_ns, shift), shifted(op.end_ns, shift))
                }
                Some(OpClock::Device | OpClock::DeviceLaunches) => {
                    let shift = *recording
                        .device_offset
                        .get_or_insert(i128::from(host_now) - i128::from(op.end_ns));
                    (shifted(op.start_ns, shift), shifted(op.end_ns, shift))
                }
                Some(OpClock::Virtual) | None => (op.start_ns, op.end_ns),
            };
            if let OpKind::Wait { origin } = op.kind {
                recording.trace.waits.push(WaitArrow {
                    origin: origin.0,
                    consumer: op.stream.0,
                    origin_ns: end_ns,
                    consumer_ns: end_ns,
                });
            }
            recording.trace.slices.push(slice(&op, start_ns, end_ns));
        }
        for op in submissions {
            recording
                .trace
                .slices
                .push(slice(&op, op.start_ns, op.end_ns));
        }
        let seen = recording
            .reclaimed_seen
            .replace(reclaimed)
            .unwrap_or(reclaimed);
        if reclaimed > seen {
            recording.trace.reclaims.push(Reclaim {
                tick,
                at_ns: stamps[STAMPS - 2].unwrap_or(end_ns),
                handles: reclaimed - seen,
            });
        }
        recording.trace.counters.push((tick, end_ns, counters));
    }

    /// Starts a trace of `backend`'s runtime, discarding one already running.
    pub fn start<B: Backend>(&mut self, backend: &mut B, kernel_stats: bool) {
        let epoch = Instant::now();
        self.epoch = Some(epoch);
        self.set_backend_timing(backend, true, kernel_stats);
        self.recording = Some(Box::new(Recording {
            stamps: [None; STAMPS],
            thread: String::new(),
            reclaimed_seen: None,
            device_offset: None,
            trace: Trace {
                backend: B::NAME,
                clock: match self.op_clock {
                    Some(OpClock::Virtual) => TraceClock::Virtual,
                    Some(OpClock::HostSince(_) | OpClock::Device | OpClock::DeviceLaunches) => {
                        TraceClock::Device
                    }
                    None => TraceClock::Submission,
                },
                ticks: Vec::new(),
                streams: Vec::new(),
                slices: Vec::new(),
                waits: Vec::new(),
                reclaims: Vec::new(),
                replays: Vec::new(),
                counters: Vec::new(),
            },
        }));
    }

    /// Ends the trace and returns it; `None` when none was started.
    pub fn stop<B: Backend>(&mut self, backend: &mut B, kernel_stats: bool) -> Option<Trace> {
        let recording = self.recording.take()?;
        self.set_backend_timing(backend, false, kernel_stats);
        Some(recording.trace)
    }

    /// Asks the backend to time its operations while a trace or kernel statistics need them.
    pub fn set_backend_timing<B: Backend>(
        &mut self,
        backend: &mut B,
        tracing: bool,
        kernel_stats: bool,
    ) {
        let wanted = tracing || kernel_stats;
        if wanted != self.backend_times_ops {
            self.op_clock = backend.record_op_times(wanted);
            self.backend_times_ops = wanted;
        }
        if self.epoch.is_none() {
            self.epoch = Some(Instant::now());
        }
        self.time_submissions = wanted && !self.reports_waits();
        if !wanted {
            self.submissions.clear();
        }
    }
}

fn shifted(ns: u64, shift: i128) -> u64 {
    (i128::from(ns) + shift).clamp(0, i128::from(u64::MAX)) as u64
}

fn slice(op: &OpTime, start_ns: u64, end_ns: u64) -> StreamSlice {
    StreamSlice {
        stream: op.stream.0,
        name: op.kind.name(),
        category: op.kind.category(),
        bytes: op.bytes,
        start_ns,
        end_ns,
    }
}
