//! Chrome trace event JSON (the format Perfetto and `chrome://tracing` open): process 1 holds a
//! track per host thread (ticks with their stages nested, GC reclamations) and the counters,
//! process 2 a track per stream; waits are flow arrows between stream tracks.

use super::model::Trace;
use serde_json::{Value, json};

impl Trace {
    /// The trace as Chrome trace event JSON (opens in Perfetto and `chrome://tracing`).
    pub fn to_chrome_json(&self) -> String {
        render(self)
    }

    /// Writes [`Trace::to_chrome_json`] to `path`.
    pub fn write(&self, path: &std::path::Path) -> std::io::Result<()> {
        std::fs::write(path, self.to_chrome_json())
    }
}

/// The host process's id in the trace.
const HOST_PID: u32 = 1;
/// The streams' process id in the trace.
const STREAMS_PID: u32 = 2;

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// The track id of a stream: tid 0 is avoided, some viewers treat it as "no thread".
fn stream_tid(stream: u32) -> u64 {
    u64::from(stream) + 1
}

/// `trace` as a Chrome trace event JSON document.
pub fn render(trace: &Trace) -> String {
    let mut events: Vec<Value> = vec![
        json!({"ph": "M", "name": "process_name", "pid": HOST_PID, "tid": 0,
               "args": {"name": "gpuworld host"}}),
        json!({"ph": "M", "name": "process_name", "pid": STREAMS_PID, "tid": 0,
               "args": {"name": format!("{} streams ({})", trace.backend, trace.clock.name())}}),
    ];
    let mut threads: Vec<&str> = Vec::new();
    for tick in &trace.ticks {
        if !threads.contains(&tick.thread.as_str()) {
            threads.push(&tick.thread);
        }
    }
    track_names(trace, &threads, &mut events);
    tick_events(trace, &threads, &mut events);
    host_marks(trace, &threads, &mut events);
    stream_events(trace, &mut events);
    let document = json!({
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {"backend": trace.backend, "stream_clock": trace.clock.name()},
    });
    document.to_string()
}

/// The track of host thread `name` among `threads` (1 for a thread not seen).
fn thread_tid(threads: &[&str], name: &str) -> u64 {
    threads
        .iter()
        .position(|t| *t == name)
        .map_or(1, |i| i as u64 + 1)
}

/// The names of the host threads' and the streams' tracks.
fn track_names(trace: &Trace, threads: &[&str], events: &mut Vec<Value>) {
    for (i, name) in threads.iter().enumerate() {
        events.push(
            json!({"ph": "M", "name": "thread_name", "pid": HOST_PID, "tid": i + 1,
                           "args": {"name": format!("host thread {name}")}}),
        );
    }
    for (stream, name) in &trace.streams {
        events.push(json!({"ph": "M", "name": "thread_name", "pid": STREAMS_PID,
                           "tid": stream_tid(*stream), "args": {"name": name}}));
    }
}

/// Each tick on its thread's track, its stages nested in it.
fn tick_events(trace: &Trace, threads: &[&str], events: &mut Vec<Value>) {
    for tick in &trace.ticks {
        let tid = thread_tid(threads, &tick.thread);
        events.push(
            json!({"ph": "X", "cat": "tick", "name": format!("tick {}", tick.tick),
                           "pid": HOST_PID, "tid": tid, "ts": us(tick.start_ns),
                           "dur": us(tick.end_ns.saturating_sub(tick.start_ns))}),
        );
        for stage in &tick.stages {
            events.push(
                json!({"ph": "X", "cat": "stage", "name": stage.stage.name(),
                               "pid": HOST_PID, "tid": tid, "ts": us(stage.start_ns),
                               "dur": us(stage.end_ns.saturating_sub(stage.start_ns)),
                               "args": {"tick": tick.tick}}),
            );
        }
    }
}

/// The host's instants (GC reclamations, graph replays) and counters.
fn host_marks(trace: &Trace, threads: &[&str], events: &mut Vec<Value>) {
    for reclaim in &trace.reclaims {
        let tid = trace
            .ticks
            .iter()
            .find(|t| t.tick == reclaim.tick)
            .map_or(1, |t| thread_tid(threads, &t.thread));
        events.push(
            json!({"ph": "i", "s": "t", "cat": "gc", "name": "gc reclaimed",
                           "pid": HOST_PID, "tid": tid, "ts": us(reclaim.at_ns),
                           "args": {"handles": reclaim.handles, "tick": reclaim.tick}}),
        );
    }
    for replay in &trace.replays {
        let tid = trace
            .ticks
            .iter()
            .find(|t| t.tick == replay.tick)
            .map_or(1, |t| thread_tid(threads, &t.thread));
        events.push(json!({"ph": "i", "s": "t", "cat": "graph",
                           "name": format!("replay graph {}", replay.graph),
                           "pid": HOST_PID, "tid": tid, "ts": us(replay.at_ns),
                           "args": {"tick": replay.tick, "commands": replay.commands}}));
    }
    for (_, at_ns, counters) in &trace.counters {
        events.push(
            json!({"ph": "C", "name": "memory", "pid": HOST_PID, "ts": us(*at_ns),
                           "args": {"bytes_in_use": counters.bytes_in_use,
                                    "bytes_reserved": counters.bytes_reserved}}),
        );
        events.push(
            json!({"ph": "C", "name": "tasks queued", "pid": HOST_PID, "ts": us(*at_ns),
                           "args": {"tasks": counters.tasks_queued}}),
        );
    }
}

/// The streams' slices, and waits as flow arrows between stream tracks.
fn stream_events(trace: &Trace, events: &mut Vec<Value>) {
    for slice in &trace.slices {
        events.push(json!({"ph": "X", "cat": slice.category, "name": slice.name,
                           "pid": STREAMS_PID, "tid": stream_tid(slice.stream),
                           "ts": us(slice.start_ns),
                           "dur": us(slice.end_ns.saturating_sub(slice.start_ns)),
                           "args": {"bytes": slice.bytes}}));
    }
    for (id, wait) in trace.waits.iter().enumerate() {
        events.push(json!({"ph": "s", "cat": "wait", "name": "wait", "id": id,
                           "pid": STREAMS_PID, "tid": stream_tid(wait.origin),
                           "ts": us(wait.origin_ns)}));
        events.push(
            json!({"ph": "f", "bp": "e", "cat": "wait", "name": "wait", "id": id,
                           "pid": STREAMS_PID, "tid": stream_tid(wait.consumer),
                           "ts": us(wait.consumer_ns)}),
        );
    }
}
