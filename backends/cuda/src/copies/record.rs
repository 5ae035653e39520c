//! The copies the backend records on its streams, and the poll that retires them.

use super::{PendingRead, Upload};
use crate::device::CudaBackend;
use crate::events::{self, EventState, Timing};
use crate::{flags, pinned};
use cudarc::driver::sys;
use gpuworld_hal::backend::{HostBytes, ReadTicket, Region};
use gpuworld_hal::staging::stage_in_parallel;

impl CudaBackend {
    /// Enqueues a copy of `data` into `dst` on stream `s`: straight from page-locked bytes, else
    /// through a pinned staging buffer (or, without one, the driver's own pageable staging).
    pub(crate) fn upload(&mut self, s: usize, dst: Region, data: HostBytes) {
        if self.refuse(s) || data.is_empty() {
            return;
        }
        self.bind();
        let Some(pointer) = self.region_pointer(dst) else {
            self.fault(s, "write to freed memory");
            return;
        };
        let len = data.len().min(dst.size as usize);
        let handle = self.work_stream(s);
        // Page-locked bytes are copied from directly; pageable ones are staged first.
        let source = if data.is_page_locked() {
            data
        } else {
            match self.pinned.take(len) {
                Some(mut staging) => {
                    // One thread copies pageable memory well below memory bandwidth.
                    stage_in_parallel(&mut staging, &data[..len]);
                    staging
                }
                None => {
                    // No pinned memory: the driver stages pageable bytes before the call
                    // returns, and the copy keeps its place in the stream.
                    // SAFETY: `data` holds `len` bytes; the destination is inside a live buffer.
                    let code = unsafe {
                        sys::cuMemcpyHtoDAsync_v2(pointer, data.as_ptr().cast(), len, handle)
                    };
                    if code != sys::CUresult::CUDA_SUCCESS {
                        self.failed(s, "cuMemcpyHtoDAsync", code);
                    }
                    return;
                }
            }
        };
        // SAFETY: the page-locked source holds `len` bytes and is kept until the event after the
        // copy passed; the destination range is inside a live buffer.
        let code =
            unsafe { sys::cuMemcpyHtoDAsync_v2(pointer, source.as_ptr().cast(), len, handle) };
        if code != sys::CUresult::CUDA_SUCCESS {
            self.failed(s, "cuMemcpyHtoDAsync", code);
            return;
        }
        match self.record_internal(s) {
            Some(event) => self.uploads.push(Upload {
                stream: s,
                event,
                _source: source,
            }),
            // Without an event nobody can prove the copy finished: keep the memory out of reuse.
            None => pinned::abandon(source),
        }
    }

    /// Enqueues a copy of `src` into `dst` (as long, sharing no byte with it) on stream `s`.
    pub(crate) fn device_copy(&mut self, s: usize, src: Region, dst: Region) {
        if self.refuse(s) {
            return;
        }
        if let Some(refusal) = src.copy_refusal(&dst) {
            self.fault(s, refusal);
            return;
        }
        if src.size == 0 {
            return;
        }
        self.bind();
        let (Some(from), Some(to)) = (self.region_pointer(src), self.region_pointer(dst)) else {
            self.fault(s, "copy of freed memory");
            return;
        };
        let Ok(len) = usize::try_from(src.size) else {
            self.fault(s, "copy larger than the host's address space");
            return;
        };
        let handle = self.work_stream(s);
        // SAFETY: both ranges lie inside live buffers of the current context (checked above)
        // and share no byte; the copy runs in `handle`'s order.
        let code = unsafe { sys::cuMemcpyDtoDAsync_v2(to, from, len, handle) };
        if code != sys::CUresult::CUDA_SUCCESS {
            self.failed(s, "cuMemcpyDtoDAsync", code);
        }
    }

    /// Enqueues a copy of `src` into a pinned buffer on stream `s`; its bytes are
    /// handed over by `take_read` once `collect_copies` saw the copy's event pass.
    pub(crate) fn readback(&mut self, s: usize, src: Region) -> ReadTicket {
        let ticket = ReadTicket(self.next_ticket);
        self.next_ticket += 1;
        if self.refuse(s) || src.size == 0 {
            self.finished_reads.insert(ticket, HostBytes::default());
            return ticket;
        }
        self.bind();
        let Some(pointer) = self.region_pointer(src) else {
            self.fault(s, "read of freed memory");
            self.finished_reads.insert(ticket, HostBytes::default());
            return ticket;
        };
        let len = src.size as usize;
        // Reads hand their buffer to the caller, who may hold many: when the driver refuses more
        // page-locked memory, the copy goes to the heap instead. CUDA then returns only once the
        // copy has completed (pageable memory), which is slower but still in stream order.
        let mut buffer = self
            .pinned
            .take(len)
            .unwrap_or_else(|| HostBytes::from_vec(vec![0; len]));
        let handle = self.work_stream(s);
        // SAFETY: the buffer holds `len` bytes and is kept until the event after the copy passed
        // (a pageable one is written before the call returns); the source range is inside a live
        // buffer.
        let code =
            unsafe { sys::cuMemcpyDtoHAsync_v2(buffer.as_mut_ptr().cast(), pointer, len, handle) };
        if code != sys::CUresult::CUDA_SUCCESS {
            self.failed(s, "cuMemcpyDtoHAsync", code);
            self.finished_reads.insert(ticket, HostBytes::default());
            return ticket;
        }
        self.reads.insert(
            ticket,
            PendingRead {
                stream: s,
                event: None,
                flag: None,
                buffer,
            },
        );
        self.streams[s].read_is_last = true;
        ticket
    }

    /// Gives each read that is still its stream's last work, and has no flag yet, a flag write
    /// behind it: called as a caller starts waiting on the device, so that only reads somebody
    /// waits for pay the extra driver call (a tick of many callers' work waits for nothing, and
    /// later work would seal its reads with events anyway).
    pub(crate) fn flag_waited_reads(&mut self) {
        for read in self.reads.values_mut() {
            let s = read.stream;
            if read.event.is_some() || read.flag.is_some() || !self.streams[s].read_is_last {
                continue;
            }
            let value = self.streams[s].flag_value.wrapping_add(1);
            if self.read_flags.signal(s, self.streams[s].handle, value) {
                self.streams[s].flag_value = value;
                read.flag = Some(value);
            }
        }
    }

    /// The handle of stream `s` for work about to be queued on it. Every submission takes its
    /// stream through here: the reads that were the stream's last work first get their events
    /// (after more work, the stream's completion would no longer be theirs).
    pub(crate) fn work_stream(&mut self, s: usize) -> sys::CUstream {
        self.seal_reads(s);
        self.streams[s].handle
    }

    /// Gives the reads that are the last work on stream `s` an event each.
    fn seal_reads(&mut self, s: usize) {
        if !std::mem::replace(&mut self.streams[s].read_is_last, false) {
            return;
        }
        let unsealed: Vec<ReadTicket> = self
            .reads
            .iter()
            .filter(|(_, read)| read.stream == s && read.event.is_none())
            .map(|(ticket, _)| *ticket)
            .collect();
        for ticket in unsealed {
            // A failed record faults the stream; the read then stays unsealed and the stream's
            // query reports the fault.
            let event = self.record_internal(s);
            if let Some(read) = self.reads.get_mut(&ticket) {
                read.event = event;
            }
        }
    }

    /// Moves finished uploads' staging back to the pool and finished reads' bytes out; whether
    /// any copy finished (or failed).
    pub(crate) fn collect_copies(&mut self) -> bool {
        let mut completed = false;
        let mut failure = None;
        let mut i = 0;
        while i < self.uploads.len() {
            match events::query(self.uploads[i].event) {
                EventState::Pending => i += 1,
                state => {
                    if let EventState::Failed(code) = state {
                        failure.get_or_insert((self.uploads[i].stream, code));
                    }
                    // Dropping the source gives pinned staging back to its pool.
                    completed = true;
                    let upload = self.uploads.swap_remove(i);
                    self.events.recycle(upload.event, Timing::Untimed);
                }
            }
        }
        // A flagged read is asked of the driver only every few turns: its flag tells first.
        self.flag_turns = self.flag_turns.wrapping_add(1);
        let ask_driver = self.flag_turns.is_multiple_of(flags::QUERY_EVERY);
        let done: Vec<(ReadTicket, Option<sys::CUresult>)> = self
            .reads
            .iter()
            .filter_map(|(ticket, read)| {
                let flagged =
                    (read.flag).and_then(|value| self.read_flags.reached(read.stream, value));
                let state = match (read.event, flagged) {
                    (Some(event), _) => events::query(event),
                    (None, Some(true)) => EventState::Done,
                    (None, Some(false)) if !ask_driver => EventState::Pending,
                    (None, _) => events::query_stream(self.streams[read.stream].handle),
                };
                match state {
                    EventState::Pending => None,
                    EventState::Done => Some((*ticket, None)),
                    EventState::Failed(code) => Some((*ticket, Some(code))),
                }
            })
            .collect();
        completed |= !done.is_empty();
        for (ticket, code) in done {
            let Some(read) = self.reads.remove(&ticket) else {
                continue;
            };
            let bytes = match code {
                None => read.buffer,
                Some(code) => {
                    failure.get_or_insert((read.stream, code));
                    HostBytes::default()
                }
            };
            self.finished_reads.insert(ticket, bytes);
            if let Some(event) = read.event {
                self.events.recycle(event, Timing::Untimed);
            }
        }
        if let Some((s, code)) = failure {
            self.failed(s, "a copy failed", code);
        }
        completed
    }

    /// Retires every copy once the context is idle (the backend is being dropped): their events
    /// are recycled and their staging goes back to the pool.
    pub(crate) fn retire_all_copies(&mut self) {
        for upload in std::mem::take(&mut self.uploads) {
            self.events.recycle(upload.event, Timing::Untimed);
        }
        for event in std::mem::take(&mut self.reads)
            .into_values()
            .filter_map(|read| read.event)
        {
            self.events.recycle(event, Timing::Untimed);
        }
        self.finished_reads.clear();
    }
}
