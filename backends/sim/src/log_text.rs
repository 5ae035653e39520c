//! The sim's log as the backend keeps it: every call with its tick, and as text whose streams and
//! events carry the names snapshots use (`s0`, `s0 op 3`).

use crate::SimBackend;
use crate::log::SimCall;
use gpuworld_hal::backend::{DeviceEvent, DeviceStream};

impl SimBackend {
    /// The name snapshots give the stream of `stream` (`s0` for the first user stream created,
    /// `gc`).
    pub fn stream_name(&self, stream: DeviceStream) -> String {
        self.streams
            .get(stream.0 as usize)
            .map_or_else(|| format!("d{}", stream.0), |s| s.name.clone())
    }

    /// `event` as snapshots name it: its stream and the operations before it (`s0 op 3`).
    pub(super) fn event_text(&self, event: DeviceEvent) -> String {
        let (queue, ops) = event.stream_and_ops();
        format!("{} op {ops}", self.stream_name(DeviceStream(queue)))
    }

    /// One logged call as text, streams and events named as snapshots name them.
    pub fn call_text(&self, call: &SimCall) -> String {
        let name = |s: &DeviceStream| self.stream_name(*s);
        match call {
            SimCall::Allocate { storage, size } => format!("allocate {storage} ({size}B)"),
            SimCall::AllocateRefused { size } => format!("allocate {size}B refused"),
            SimCall::Deallocate { storage } => format!("deallocate {storage}"),
            SimCall::CreateStream { stream, .. } => format!("create {}", name(stream)),
            SimCall::Enqueue { stream, op, what } => format!("{} op {op}: {what}", name(stream)),
            SimCall::Flush { stream, event } => {
                format!("{} flush -> {}", name(stream), self.event_text(*event))
            }
            SimCall::Wait { stream, event } => {
                format!("{} wait {}", name(stream), self.event_text(*event))
            }
            SimCall::Complete { stream, op } => format!("{} op {op} done", name(stream)),
            SimCall::Fault {
                stream,
                op,
                message,
            } => {
                format!("{} op {op} faulted: {message}", name(stream))
            }
        }
    }

    /// Every recorded call with the tick it happened in.
    pub fn log(&self) -> &[(u64, SimCall)] {
        &self.log
    }

    /// Removes and returns the recorded calls.
    pub fn take_log(&mut self) -> Vec<(u64, SimCall)> {
        std::mem::take(&mut self.log)
    }

    /// Puts `log` back as the recorded calls (what [`SimBackend::take_log`] took, or part of it).
    pub fn restore_log(&mut self, log: Vec<(u64, SimCall)>) {
        self.log = log;
    }

    /// The log as text, one call a line: `t<tick> <call>`.
    pub fn log_text(&self) -> String {
        self.log
            .iter()
            .map(|(tick, call)| format!("t{tick} {}\n", self.call_text(call)))
            .collect()
    }

    /// Appends `call` to the log, when recording.
    pub(super) fn record(&mut self, call: SimCall) {
        if self.config.record {
            self.log.push((self.tick, call));
        }
    }
}
