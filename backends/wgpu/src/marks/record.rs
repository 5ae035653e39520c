//! Marks recorded on a stream, and the device time between two read back.

use super::Edge;
use crate::device::WgpuBackend;
use gpuworld_hal::backend::{DeviceEvent, DeviceStream};
use std::time::Duration;

impl WgpuBackend {
    /// Submits stream `stream`'s batch ended by a timestamp, and has its next batch begin with
    /// one; a plain flush where the device has no timestamps or is lost.
    pub(crate) fn record_mark(&mut self, stream: DeviceStream) -> DeviceEvent {
        let Some(s) = self.stream_index(stream) else {
            return DeviceEvent(self.submitted);
        };
        if self.errors.lost().is_some() {
            return self.flush_stream(s);
        }
        let Some(marks) = self.marks.as_mut() else {
            return self.flush_stream(s);
        };
        // The batch gets the next sequence number: `submit` numbers submissions in order.
        let mark = self.submitted + 1;
        marks.begin(mark);
        let end = marks.stamp(&self.device, mark, Edge::End);
        let start = marks.stamp(&self.device, mark, Edge::Start);
        let stream = &mut self.streams[s];
        end.write(stream.encoder(&self.device));
        stream.stamps.push(end);
        // Making the encoder above wrote an earlier mark's start stamp, if one was waiting.
        if let Some(unwritten) = stream.next_start.replace(start) {
            marks.unused(unwritten);
        }
        self.flush_stream(s)
    }

    /// Device time between two completed marks, as [`Marks::elapsed`] measures it; polls the
    /// device once, without waiting, if their readbacks were not collected yet.
    pub(crate) fn marked_elapsed(
        &mut self,
        start: DeviceEvent,
        end: DeviceEvent,
    ) -> Option<Duration> {
        let completed = self.completed();
        let marks = self.marks.as_mut()?;
        if start.0.max(end.0) > completed {
            return None;
        }
        marks.collect();
        if let Some(elapsed) = marks.elapsed(start.0, end.0) {
            return Some(elapsed);
        }
        // Both submissions completed, so their readbacks are mapped or about to be.
        // Not while a wait polls (`DevicePolls`): its poll runs the same callbacks.
        if let Some(_polling) = self.polls.0.try_lock() {
            self.device.poll(wgpu::PollType::Poll).ok()?;
        }
        let marks = self.marks.as_mut()?;
        marks.collect();
        marks.elapsed(start.0, end.0)
    }
}
