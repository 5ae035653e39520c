//! CUDA events behind the runtime's `DeviceEvent` numbers: recorded on a stream by `flush` and
//! `mark`, queried without blocking, recycled once complete. Only marks record timestamps (an
//! event with timing costs about a microsecond more to record and query on an H100, which every
//! readback and flush would pay); the last completed marks are kept a while so that
//! `device_elapsed` can still read them.

use cudarc::driver::sys;
use gpuworld_hal::backend::DeviceEvent;
use rustc_hash::FxHashMap as HashMap;
use std::collections::VecDeque;

/// Completed events kept for timing before their CUDA event is reused.
const RECENT_COMPLETED: usize = 1024;

/// What a query of an event found.
pub enum EventState {
    /// The work before it ran.
    Done,
    /// Still in flight.
    Pending,
    /// The driver reported an error instead.
    Failed(sys::CUresult),
}

/// Queries `event` without blocking.
pub fn query(event: sys::CUevent) -> EventState {
    // SAFETY: `event` is a live event of the current context.
    match unsafe { sys::cuEventQuery(event) } {
        sys::CUresult::CUDA_SUCCESS => EventState::Done,
        sys::CUresult::CUDA_ERROR_NOT_READY => EventState::Pending,
        code => EventState::Failed(code),
    }
}

/// The state of all work queued on `stream` so far, as [`query`] tells it of an event.
pub fn query_stream(stream: sys::CUstream) -> EventState {
    // SAFETY: `stream` is a live stream of the current context.
    match unsafe { sys::cuStreamQuery(stream) } {
        sys::CUresult::CUDA_SUCCESS => EventState::Done,
        sys::CUresult::CUDA_ERROR_NOT_READY => EventState::Pending,
        code => EventState::Failed(code),
    }
}

/// Whether an event records a timestamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timing {
    /// A mark: `device_elapsed` can time from or to it.
    Timed,
    /// Ordering and completion only (copies, flushes).
    Untimed,
}

/// A recorded CUDA event and whether it keeps a timestamp.
#[derive(Clone, Copy)]
struct Recorded {
    event: sys::CUevent,
    timing: Timing,
}

/// The runtime's events and pools of CUDA events to record them with.
#[derive(Default)]
pub struct EventTable {
    next: u64,
    live: HashMap<u64, Recorded>,
    /// Live event numbers per stream, in recording order (they complete in that order).
    order: Vec<VecDeque<u64>>,
    /// Completed marks, still readable by `device_elapsed`.
    recent: VecDeque<(u64, sys::CUevent)>,
    free_untimed: Vec<sys::CUevent>,
    free_timed: Vec<sys::CUevent>,
}

impl EventTable {
    /// A CUDA event from the pool of its kind, or a new one; the context must be current.
    pub fn take_cuda_event(&mut self, timing: Timing) -> Result<sys::CUevent, sys::CUresult> {
        let (free, flags) = match timing {
            Timing::Timed => (&mut self.free_timed, sys::CUevent_flags::CU_EVENT_DEFAULT),
            Timing::Untimed => (
                &mut self.free_untimed,
                sys::CUevent_flags::CU_EVENT_DISABLE_TIMING,
            ),
        };
        if let Some(event) = free.pop() {
            return Ok(event);
        }
        let mut event = std::ptr::null_mut();
        // SAFETY: creates an event in the current context, owned by this table from now on.
        let code = unsafe { sys::cuEventCreate(&mut event, flags as u32) };
        match code {
            sys::CUresult::CUDA_SUCCESS => Ok(event),
            code => Err(code),
        }
    }

    /// Returns a CUDA event of `timing` whose last recording completed.
    pub fn recycle(&mut self, event: sys::CUevent, timing: Timing) {
        match timing {
            Timing::Timed => self.free_timed.push(event),
            Timing::Untimed => self.free_untimed.push(event),
        }
    }

    /// Registers `event` of `timing`, just recorded on stream `stream`, and numbers it.
    pub fn insert(&mut self, stream: usize, event: sys::CUevent, timing: Timing) -> DeviceEvent {
        let number = self.next;
        self.next += 1;
        self.live.insert(number, Recorded { event, timing });
        if self.order.len() <= stream {
            self.order.resize_with(stream + 1, VecDeque::new);
        }
        self.order[stream].push_back(number);
        DeviceEvent(number)
    }

    /// A number that completes at once (no work to wait for).
    pub fn completed_number(&mut self) -> DeviceEvent {
        let number = self.next;
        self.next += 1;
        DeviceEvent(number)
    }

    /// The CUDA event of a live event; `None` once it completed (or was never made).
    pub fn live(&self, event: DeviceEvent) -> Option<sys::CUevent> {
        self.live.get(&event.0).map(|recorded| recorded.event)
    }

    /// The oldest live event of each stream: the first of its events to complete.
    pub fn oldest_live(&self) -> impl Iterator<Item = sys::CUevent> + '_ {
        self.order.iter().filter_map(|order| {
            order
                .iter()
                .find_map(|number| self.live.get(number).map(|recorded| recorded.event))
        })
    }

    /// The CUDA event of a live or recently completed mark, for timestamps.
    pub fn timed(&self, event: DeviceEvent) -> Option<sys::CUevent> {
        match self.live.get(&event.0) {
            Some(recorded) => (recorded.timing == Timing::Timed).then_some(recorded.event),
            None => self
                .recent
                .iter()
                .find(|(number, _)| *number == event.0)
                .map(|(_, e)| *e),
        }
    }

    /// Marks `event` complete, and the events recorded before it on its stream.
    pub fn complete(&mut self, event: DeviceEvent) {
        let Some(cuda) = self.live.remove(&event.0) else {
            return;
        };
        let mut passed = Vec::new();
        for order in &mut self.order {
            if let Some(position) = order.iter().position(|n| *n == event.0) {
                passed.extend(order.drain(..=position));
                break;
            }
        }
        for number in passed {
            if let Some(earlier) = self.live.remove(&number) {
                self.remember(number, earlier);
            }
        }
        self.remember(event.0, cuda);
    }

    /// Keeps a completed mark for timing; recycles any other event at once.
    fn remember(&mut self, number: u64, recorded: Recorded) {
        if recorded.timing == Timing::Untimed {
            self.free_untimed.push(recorded.event);
            return;
        }
        self.recent.push_back((number, recorded.event));
        if self.recent.len() > RECENT_COMPLETED
            && let Some((_, old)) = self.recent.pop_front()
        {
            self.free_timed.push(old);
        }
    }

    /// Completes, per stream, the leading events that have passed: whether any did, and the
    /// first failure's code.
    pub fn sweep(&mut self) -> (bool, Option<sys::CUresult>) {
        let mut failure = None;
        let mut done = Vec::new();
        for order in &self.order {
            let mut last = None;
            for number in order {
                let Some(recorded) = self.live.get(number) else {
                    continue;
                };
                match query(recorded.event) {
                    EventState::Done => last = Some(*number),
                    EventState::Pending => break,
                    EventState::Failed(code) => {
                        failure.get_or_insert(code);
                        break;
                    }
                }
            }
            done.extend(last);
        }
        let completed = !done.is_empty() || failure.is_some();
        for number in done {
            self.complete(DeviceEvent(number));
        }
        (completed, failure)
    }

    /// Completes every live event: after a fatal error nothing will ever complete them.
    pub fn complete_all(&mut self) {
        let numbers: Vec<u64> = self.live.keys().copied().collect();
        for number in numbers {
            self.complete(DeviceEvent(number));
        }
    }

    /// Whether any event is in flight.
    pub fn any_live(&self) -> bool {
        !self.live.is_empty()
    }

    /// Destroys every CUDA event (the context must be current, nothing in flight).
    pub fn destroy_all(&mut self) {
        let events = self
            .live
            .drain()
            .map(|(_, recorded)| recorded.event)
            .chain(self.recent.drain(..).map(|(_, e)| e))
            .chain(self.free_untimed.drain(..))
            .chain(self.free_timed.drain(..));
        for event in events {
            // SAFETY: every event here was created by this table and is no longer used.
            unsafe {
                sys::cuEventDestroy_v2(event);
            }
        }
        self.order.clear();
    }
}
