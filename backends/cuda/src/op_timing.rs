//! Each operation's device time while a trace or kernel statistics record them: a timed CUDA
//! event before and after the operation on its stream; once the end passed, both are read
//! against an origin event recorded when recording started (`cuEventElapsedTime`), so every
//! stream's operations are on one device clock. Off (the default), nothing is recorded.

use crate::events::{EventState, query};
use cudarc::driver::sys;
use gpuworld_hal::backend::DeviceStream;
use gpuworld_hal::backend::{OpKind, OpTime};

/// An operation whose end event has not been read yet.
struct Pending {
    stream: DeviceStream,
    kind: OpKind,
    bytes: u64,
    start: sys::CUevent,
    end: sys::CUevent,
}

/// The events of timed operations and the times read from them.
#[derive(Default)]
pub struct OpTiming {
    recording: bool,
    origin: Option<sys::CUevent>,
    pending: Vec<Pending>,
    done: Vec<OpTime>,
    free: Vec<sys::CUevent>,
}

impl OpTiming {
    /// Whether operations are timed.
    pub fn is_recording(&self) -> bool {
        self.recording
    }

    /// Starts or stops timing operations.
    pub fn set_recording(&mut self, on: bool) {
        self.recording = on;
        if !on {
            self.done.clear();
        }
    }

    /// Records a timed event on `stream` (the context is current); `None` while not recording
    /// or when the driver refuses (the operation then goes untimed).
    pub fn stamp(&mut self, stream: sys::CUstream) -> Option<sys::CUevent> {
        if !self.recording {
            return None;
        }
        if self.origin.is_none() {
            self.origin = Some(self.record(stream)?);
        }
        self.record(stream)
    }

    fn record(&mut self, stream: sys::CUstream) -> Option<sys::CUevent> {
        let event = match self.free.pop() {
            Some(event) => event,
            None => {
                let mut event = std::ptr::null_mut();
                // SAFETY: creates an event in the current context, owned by this table.
                let code = unsafe {
                    sys::cuEventCreate(&mut event, sys::CUevent_flags::CU_EVENT_DEFAULT as u32)
                };
                if code != sys::CUresult::CUDA_SUCCESS {
                    return None;
                }
                event
            }
        };
        // SAFETY: `event` and `stream` belong to the current context.
        if unsafe { sys::cuEventRecord(event, stream) } != sys::CUresult::CUDA_SUCCESS {
            self.free.push(event);
            return None;
        }
        Some(event)
    }

    /// Keeps an operation of `stream` between the events `start` and `end`.
    pub fn finish(
        &mut self,
        stream: DeviceStream,
        kind: OpKind,
        bytes: u64,
        start: sys::CUevent,
        end: sys::CUevent,
    ) {
        self.pending.push(Pending {
            stream,
            kind,
            bytes,
            start,
            end,
        });
    }

    /// Reads the operations whose end passed (the context is current) into `into`.
    pub fn take(&mut self, into: &mut Vec<OpTime>) {
        let Some(origin) = self.origin else {
            return;
        };
        let since_origin = |event: sys::CUevent| {
            let mut ms = 0f32;
            // SAFETY: both events belong to the current context and were recorded.
            let code = unsafe { sys::cuEventElapsedTime_v2(&mut ms, origin, event) };
            // An operation of another stream may run before the origin: it starts at 0.
            (code == sys::CUresult::CUDA_SUCCESS).then(|| (f64::from(ms.max(0.0)) * 1e6) as u64)
        };
        let mut index = 0;
        while index < self.pending.len() {
            let op = &self.pending[index];
            match query(op.end) {
                EventState::Pending => {
                    index += 1;
                    continue;
                }
                EventState::Done => {
                    if self.recording
                        && let (Some(start_ns), Some(end_ns)) =
                            (since_origin(op.start), since_origin(op.end))
                    {
                        self.done.push(OpTime {
                            stream: op.stream,
                            kind: op.kind,
                            bytes: op.bytes,
                            start_ns,
                            end_ns,
                        });
                    }
                }
                EventState::Failed(_) => {}
            }
            let op = self.pending.swap_remove(index);
            self.free.extend([op.start, op.end]);
        }
        into.append(&mut self.done);
    }

    /// Destroys every event (the context is current, nothing in flight).
    pub fn destroy_all(&mut self) {
        let events = self
            .pending
            .drain(..)
            .flat_map(|op| [op.start, op.end])
            .chain(self.free.drain(..))
            .chain(self.origin.take());
        for event in events {
            // SAFETY: every event here was created by this table and is no longer used.
            unsafe {
                sys::cuEventDestroy_v2(event);
            }
        }
    }
}
