//! A finished trace: plain data, times in nanoseconds since the trace started (host tracks) or
//! on the stream tracks' clock (see [`TraceClock`]); `chrome.rs` writes it for Perfetto
//! and `chrome://tracing` ([`Trace::to_chrome_json`]).

use crate::stages::tick::TickStage;

/// How the stream tracks of a trace are timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceClock {
    /// The sim's virtual device time.
    Virtual,
    /// The device's own clock (the cpu's workers, GPU timestamps), aligned to the host tracks.
    Device,
    /// Host time around each submission: the backend cannot time its operations.
    Submission,
}

impl TraceClock {
    /// Its name in the trace.
    pub fn name(self) -> &'static str {
        match self {
            TraceClock::Virtual => "virtual time",
            TraceClock::Device => "device time",
            TraceClock::Submission => "submission time",
        }
    }
}

/// One stage of a tick on the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StageSpan {
    /// The stage.
    pub stage: TickStage,
    /// When it started.
    pub start_ns: u64,
    /// When it ended.
    pub end_ns: u64,
}

/// One tick on the host thread that ran it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TickSpan {
    /// The tick's number.
    pub tick: u64,
    /// The thread that ran it.
    pub thread: String,
    /// When it started.
    pub start_ns: u64,
    /// When it ended.
    pub end_ns: u64,
    /// Its seven stages, in order.
    pub stages: Vec<StageSpan>,
}

/// One operation on a stream's track.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamSlice {
    /// The backend's stream number.
    pub stream: u32,
    /// The kernel's name, or `write`, `read`, `wait`.
    pub name: &'static str,
    /// `kernel`, `copy` or `wait`.
    pub category: &'static str,
    /// Bytes it bound.
    pub bytes: u64,
    /// When it started.
    pub start_ns: u64,
    /// When it ended.
    pub end_ns: u64,
}

/// A wait of one stream on another's event: an arrow from the origin's track to the consumer's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaitArrow {
    /// The stream whose event was waited for.
    pub origin: u32,
    /// The stream that waited.
    pub consumer: u32,
    /// When the origin reached the event.
    pub origin_ns: u64,
    /// When the consumer went on.
    pub consumer_ns: u64,
}

/// Handles whose memory a tick's GC stage returned to the pools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reclaim {
    /// The tick.
    pub tick: u64,
    /// When its GC stage ended.
    pub at_ns: u64,
    /// Handles reclaimed.
    pub handles: u64,
}

/// A captured graph's replay, ingested as one unit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplayMark {
    /// The tick that ingested it.
    pub tick: u64,
    /// When.
    pub at_ns: u64,
    /// The graph's number.
    pub graph: u64,
    /// Its commands, one line each, in order.
    pub commands: Vec<String>,
}

/// The counters sampled at the end of a tick.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Bytes of live allocations.
    pub bytes_in_use: u64,
    /// Bytes reserved from the device.
    pub bytes_reserved: u64,
    /// Tasks queued on streams, not yet submitted.
    pub tasks_queued: u64,
}

/// A timeline of what the runtime did between `start_trace` and `stop_trace`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    /// The backend's name.
    pub backend: &'static str,
    /// How the stream tracks are timed.
    pub clock: TraceClock,
    /// Every tick, with its stages.
    pub ticks: Vec<TickSpan>,
    /// The stream tracks' names, by backend stream number.
    pub streams: Vec<(u32, String)>,
    /// Every operation, in completion (or submission) order.
    pub slices: Vec<StreamSlice>,
    /// Every wait between streams.
    pub waits: Vec<WaitArrow>,
    /// Every tick that reclaimed memory.
    pub reclaims: Vec<Reclaim>,
    /// Every replay of a captured graph, with its commands.
    pub replays: Vec<ReplayMark>,
    /// The counters at the end of every tick: (tick, time, counters).
    pub counters: Vec<(u64, u64, Counters)>,
}
