//! CUDA events behind the runtime's `DeviceEvent` numbers: recorded on a stream by `flush`,
//! queried without blocking, recycled once complete. The last completed events are kept a while
//! so that `device_elapsed` can still read their timestamps.

use cudarc::driver::sys;
use gpuworld_systems::backend::DeviceEvent;
use std::collections::{HashMap, VecDeque};

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

/// The runtime's events and a pool of CUDA events to record them with.
#[derive(Default)]
pub struct EventTable {
    next: u64,
    live: HashMap<u64, sys::CUevent>,
    /// Live event numbers per stream, in recording order (they complete in that order).
    order: Vec<VecDeque<u64>>,
    recent: VecDeque<(u64, sys::CUevent)>,
    free: Vec<sys::CUevent>,
}

impl EventTable {
    /// A CUDA event from the pool, or a new one (timing enabled); the context must be current.
    pub fn take_cuda_event(&mut self) -> Result<sys::CUevent, sys::CUresult> {
        if let Some(event) = self.free.pop() {
            return Ok(event);
        }
        let mut event = std::ptr::null_mut();
        // SAFETY: creates an event in the current context, owned by this table from now on.
        let code =
            unsafe { sys::cuEventCreate(&mut event, sys::CUevent_flags::CU_EVENT_DEFAULT as u32) };
        match code {
            sys::CUresult::CUDA_SUCCESS => Ok(event),
            code => Err(code),
        }
    }

    /// Returns a CUDA event whose last recording completed.
    pub fn recycle(&mut self, event: sys::CUevent) {
        self.free.push(event);
    }

    /// Registers `event`, just recorded on stream `stream`, and numbers it.
    pub fn insert(&mut self, stream: usize, event: sys::CUevent) -> DeviceEvent {
        let number = self.next;
        self.next += 1;
        self.live.insert(number, event);
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
        self.live.get(&event.0).copied()
    }

    /// The CUDA event of a live or recently completed event, for timestamps.
    pub fn timed(&self, event: DeviceEvent) -> Option<sys::CUevent> {
        self.live(event).or_else(|| {
            self.recent
                .iter()
                .find(|(number, _)| *number == event.0)
                .map(|(_, e)| *e)
        })
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

    fn remember(&mut self, number: u64, event: sys::CUevent) {
        self.recent.push_back((number, event));
        if self.recent.len() > RECENT_COMPLETED
            && let Some((_, old)) = self.recent.pop_front()
        {
            self.free.push(old);
        }
    }

    /// Completes, per stream, the leading events that have passed; the first failure's code.
    pub fn sweep(&mut self) -> Option<sys::CUresult> {
        let mut failure = None;
        let mut done = Vec::new();
        for order in &self.order {
            let mut last = None;
            for number in order {
                let Some(event) = self.live.get(number) else {
                    continue;
                };
                match query(*event) {
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
        for number in done {
            self.complete(DeviceEvent(number));
        }
        failure
    }

    /// Completes every live event: after a fatal error nothing will ever complete them.
    pub fn complete_all(&mut self) {
        let numbers: Vec<u64> = self.live.keys().copied().collect();
        for number in numbers {
            self.complete(DeviceEvent(number));
        }
    }

    /// Whether the oldest live event of some stream has passed (or failed) without being swept.
    pub fn front_passed(&self) -> bool {
        self.order
            .iter()
            .filter_map(|order| order.front())
            .filter_map(|number| self.live.get(number))
            .any(|event| !matches!(query(*event), EventState::Pending))
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
            .map(|(_, e)| e)
            .chain(self.recent.drain(..).map(|(_, e)| e))
            .chain(self.free.drain(..));
        for event in events {
            // SAFETY: every event here was created by this table and is no longer used.
            unsafe {
                sys::cuEventDestroy_v2(event);
            }
        }
        self.order.clear();
    }
}
