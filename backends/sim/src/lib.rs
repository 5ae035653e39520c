#![doc = include_str!("../README.md")]

mod config;
mod cost;
mod faults;
mod log;
mod log_text;

pub use config::{KernelCost, SimConfig, SimModel};
pub use cost::{CostModel, KernelRate, Span};
pub use faults::{CallCounts, Fault, FaultPlan};
pub use log::SimCall;

use cost::Timeline;
use faults::{FaultState, Injected};
use gpuworld_hal::backend::*;
use gpuworld_hal::bytes::HostBytes;
use gpuworld_hal::error::{ConfigError, Error};
use gpuworld_hal::host_launch::resolve_count;
use gpuworld_hal::host_memory::HostMemory;
use gpuworld_hal::host_ops::{Completions, Finished, HostOp};
use gpuworld_hal::host_timing::{HostTiming, describe};
use gpuworld_hal::ids::StreamId;
use gpuworld_hal::kernel::{CpuSource, ExecutionMode, Kernel};
use gpuworld_hal::open::{BackendSettings, DeviceId, DeviceInfo, OpenBackend};
use std::collections::VecDeque;

mod link;

pub use link::SimLink;
use std::time::Duration;

#[derive(Debug)]
struct Op {
    ready_at: u64,
    /// Its number on its queue (the queue's operation count once it has run).
    number: u64,
    injected: Option<Injected>,
    /// The stream that submitted it (its faults go there).
    stream: usize,
    kind: HostOp,
}

/// A stream; with `SimModel::SingleQueue` only stream 0's queue and counters are used.
#[derive(Debug)]
struct SimStream {
    id: StreamId,
    /// Its name: `s<n>` for the n-th user stream created (from 0), as the runtime names it.
    name: String,
    queue: VecDeque<Op>,
    enqueued: u64,
}

/// A deterministic virtual device.
#[derive(Debug)]
pub struct SimBackend {
    config: SimConfig,
    memory: HostMemory,
    streams: Vec<SimStream>,
    /// Completions and faults per stream (per queue for completions), and readbacks.
    done: Completions,
    next_ticket: u64,
    tick: u64,
    log: Vec<(u64, SimCall)>,
    /// Virtual nanoseconds of completed launches, when `kernel_cost` is set.
    clock_ns: u64,
    faults: FaultState,
    timeline: Timeline,
    /// Each operation's virtual start and end per queue, for traces and marks.
    timing: HostTiming,
    /// Which sim device this is (see [`SimBackend::with_devices`]).
    device: u32,
}

impl SimBackend {
    /// A virtual device with `config` (device `config.device`).
    pub fn new(config: SimConfig) -> SimBackend {
        let faults = config.faults.clone();
        SimBackend {
            device: config.device,
            memory: HostMemory::new(Some(config.memory_bytes)),
            config,
            streams: Vec::new(),
            done: Completions::default(),
            next_ticket: 0,
            tick: 0,
            log: Vec::new(),
            clock_ns: 0,
            faults: FaultState::new(faults),
            timeline: Timeline::default(),
            timing: HostTiming::default(),
        }
    }

    /// `n` virtual devices with `config`, numbered 0 to n-1, each with memory of its own.
    pub fn with_devices(config: &SimConfig, n: usize) -> Vec<SimBackend> {
        (0..n)
            .map(|index| SimBackend::device(config.clone(), index as u32))
            .collect()
    }

    /// The virtual device numbered `index`, with `config`.
    pub fn device(config: SimConfig, index: u32) -> SimBackend {
        SimBackend::new(SimConfig {
            device: index,
            ..config
        })
    }

    /// How many calls of each kind the device received so far: the failure points of the
    /// program run on it, for a fault sweep.
    pub fn call_counts(&self) -> CallCounts {
        self.faults.counts
    }

    /// Every launch and copy run so far on the virtual timeline, in completion order (empty
    /// unless [`SimConfig::costs`] is set).
    pub fn timeline(&self) -> &[Span] {
        &self.timeline.spans
    }

    /// The virtual time at which the last work run so far ended (0 without a cost model).
    pub fn virtual_time(&self) -> Duration {
        Duration::from_nanos(self.timeline.makespan())
    }

    /// The bytes of `region` as the virtual device holds them now.
    pub fn read_memory(&self, region: Region) -> Option<Vec<u8>> {
        let mut bytes = vec![0; usize::try_from(region.size).ok()?];
        self.memory.read_into(region, &mut bytes).then_some(bytes)
    }

    /// Whether every operation submitted so far has run (or faulted).
    pub fn is_idle(&self) -> bool {
        self.streams.iter().all(|s| s.queue.is_empty())
    }

    /// Bytes currently allocated on the virtual device.
    pub fn allocated(&self) -> u64 {
        self.memory.allocated()
    }

    /// Counts the event after operation `ops` of `queue` and applies the plan to it (see
    /// [`FaultState::after`]). Only an event with work still queued before it counts.
    fn inject_event_faults(&mut self, queue: usize, ops: u64) {
        let tick = self.tick;
        let Some(last) = self
            .streams
            .get_mut(queue)
            .and_then(|s| s.queue.back_mut())
            .filter(|op| op.number == ops)
        else {
            return;
        };
        self.faults.after(queue, ops, tick, &mut last.injected);
    }

    /// The front operation of `queue`, taken off it, if it may run at `tick`: ready, its event
    /// passed (for a wait), and not hanging (or its watchdog fired). A lost device runs
    /// everything, as faults.
    fn next_runnable(&mut self, queue: usize, tick: u64) -> Option<Op> {
        let op = self.streams.get(queue)?.queue.front()?;
        if op.ready_at > tick {
            return None;
        }
        let runnable = match self.faults.hang_over(queue, op.number, tick) {
            Some(watchdog_fired) => watchdog_fired,
            None => match op.kind {
                HostOp::Wait { event } => self.faults.device_lost || self.done.passed(event),
                _ => true,
            },
        };
        if runnable {
            self.streams[queue].queue.pop_front()
        } else {
            None
        }
    }

    /// The queue that runs `stream`'s work.
    fn queue_of(&self, stream: usize) -> usize {
        match self.config.model {
            SimModel::Events => stream,
            SimModel::SingleQueue => 0,
        }
    }

    fn enqueue(&mut self, stream: DeviceStream, kind: HostOp, what: impl FnOnce() -> String) {
        let injected = self.faults.for_new(&kind);
        let ready_at = self.tick + self.config.latency_ticks;
        let queue = self.queue_of(stream.0 as usize);
        let Some(s) = self.streams.get_mut(queue) else {
            return;
        };
        s.enqueued += 1;
        let op = s.enqueued;
        s.queue.push_back(Op {
            ready_at,
            number: op,
            injected,
            stream: stream.0 as usize,
            kind,
        });
        if self.config.record {
            self.record(SimCall::Enqueue {
                stream,
                op,
                what: what(),
            });
        }
    }

    /// Runs `op`, submitted by `stream`, on `queue`: the kernels in order, on the polling thread,
    /// so runs are deterministic, unless `injected` says it faults instead of or after running;
    /// the queue's completed count.
    fn execute(
        &mut self,
        queue: usize,
        stream: usize,
        op: HostOp,
        injected: Option<Injected>,
    ) -> u64 {
        let timed = self.timing.measuring().then(|| describe(&op)).flatten();
        let clock_before = self.clock_ns;
        if let HostOp::Launch { kernel, count, .. } = &op {
            self.advance_clock(kernel, *count);
        }
        if let Some(link) = self.config.link {
            self.clock_ns = self.clock_ns.saturating_add(link.cost_of(&op));
        }
        let clock_cost = self.clock_ns - clock_before;
        let model_cost = self.advance_timeline(queue, stream, &op);
        // The op's device time, from the source `device_clock` reports: `kernel_cost` (with the
        // link) first, else the cost model, else the link alone.
        let cost = match (&self.config.kernel_cost, &self.config.costs) {
            (None, Some(_)) => model_cost,
            _ => clock_cost,
        };
        let id = self.streams[stream].id;
        let finished = match injected {
            Some(Injected::Instead(message)) => Finished {
                read: match op {
                    HostOp::Read { ticket, .. } => Some((ticket, HostBytes::default())),
                    _ => None,
                },
                fault: Some(Error::device_fault(id, message)),
            },
            _ => op.run(
                &self.memory,
                Self::NAME,
                id,
                |size| {
                    usize::try_from(size)
                        .map(|len| HostBytes::from_vec(vec![0; len]))
                        .unwrap_or_default()
                },
                |launch| launch.run_in_order(),
            ),
        };
        let finished = match injected {
            Some(Injected::After(message)) => Finished {
                fault: finished
                    .fault
                    .or_else(|| Some(Error::device_fault(id, message))),
                ..finished
            },
            _ => finished,
        };
        let completed = self.done.finish(queue, stream, finished);
        if let Some(what) = timed {
            // A queue's clock runs on from its last operation; a wait ends at its origin's clock.
            let mut start = self.timing.clock_ns(queue);
            if let OpKind::Wait { origin } = what.0 {
                start = start.max(self.timing.clock_ns(origin.0 as usize));
            }
            let at = DeviceStream(stream as u32);
            self.timing
                .finish(queue, at, what, start, start + cost, completed);
        }
        completed
    }

    /// Places `op` on the virtual timeline, when a cost model is set; what the model charged it.
    fn advance_timeline(&mut self, queue: usize, stream: usize, op: &HostOp) -> u64 {
        let Some(costs) = &self.config.costs else {
            return 0;
        };
        let name = || self.streams[stream].name.clone();
        let (ready, cost, span) = match op {
            HostOp::Wait { event } => {
                let (origin, ops) = event.stream_and_ops();
                (self.timeline.event_time(origin as usize, ops), 0, None)
            }
            HostOp::Launch {
                kernel,
                count,
                buffers,
                ..
            } => {
                let [x, y, z] = resolve_count(&self.memory, *count).unwrap_or([0; 3]);
                let cubes = u64::from(x) * u64::from(y) * u64::from(z);
                let bytes = buffers.iter().map(|r| r.size).sum();
                let cost = costs.rate(kernel.id).cost(cubes, bytes);
                (0, cost, Some((name(), format!("launch {}", kernel.name))))
            }
            HostOp::Write { data, .. } => {
                let len = data.len() as u64;
                let cost = costs.copy_ns_per_byte.saturating_mul(len);
                (0, cost, Some((name(), format!("write {len}B"))))
            }
            HostOp::Read { src, .. } => {
                let cost = costs.copy_ns_per_byte.saturating_mul(src.size);
                (0, cost, Some((name(), format!("read {}B", src.size))))
            }
            HostOp::Copy { src, .. } => {
                let cost = costs.copy_ns_per_byte.saturating_mul(src.size);
                (0, cost, Some((name(), format!("copy {}B", src.size))))
            }
            // The sim replays launch by launch (it makes no replay op); were it given one, it
            // would cost what its launches cost.
            HostOp::Replay { launches, buffers } => {
                let cost = (launches.iter())
                    .map(|launch| {
                        let [x, y, z] = launch.grid;
                        let cubes = u64::from(x) * u64::from(y) * u64::from(z);
                        let bytes = (launch.bindings.iter())
                            .filter_map(|&i| buffers.get(usize::from(i)))
                            .map(|r| r.size)
                            .sum();
                        costs.rate(launch.kernel.id).cost(cubes, bytes)
                    })
                    .fold(0u64, u64::saturating_add);
                (
                    0,
                    cost,
                    Some((name(), format!("replay of {} launches", launches.len()))),
                )
            }
        };
        self.timeline.run(queue, ready, cost, span);
        cost
    }

    /// Advances the virtual clock by the launch's configured cost.
    fn advance_clock(&mut self, kernel: Kernel, count: LaunchCount) {
        if let Some(cost) = self.config.kernel_cost {
            let cubes = resolve_count(&self.memory, count).unwrap_or([0; 3]);
            self.clock_ns = self.clock_ns.saturating_add(cost(kernel, cubes));
        }
    }
}

impl OpenBackend for SimBackend {
    type Config = SimConfig;
    // A sim run depends on its program alone, never on the machine's configuration.
    const READS_SETTINGS: bool = false;

    fn device_config(index: u32) -> SimConfig {
        SimConfig {
            device: index,
            ..SimConfig::default()
        }
    }

    fn open(config: SimConfig, _settings: &BackendSettings) -> Result<SimBackend, Error> {
        if config.memory_bytes == 0 {
            return Err(Error::Config(ConfigError::InvalidSetting {
                origin: "SimConfig".into(),
                problem: "memory_bytes is 0: a sim device needs at least 1 byte of memory".into(),
            }));
        }
        Ok(SimBackend::new(config))
    }

    /// One virtual device: more are a matter of [`SimBackend::with_devices`].
    fn enumerate() -> Vec<DeviceInfo> {
        vec![DeviceInfo {
            id: DeviceId {
                backend: Self::NAME,
                index: 0,
            },
            properties: Ok(SimBackend::new(SimConfig::default()).properties()),
            detail: String::new(),
        }]
    }
}

/// Tests read its log and change its fault plan through the runtime (`Runtime::sim_mut`).
impl TestDevice for SimBackend {}

impl Kernels for SimBackend {
    const NAME: &'static str = "sim";
    type Source = CpuSource;
}

impl Memory for SimBackend {
    fn allocate(&mut self, size: u64) -> Result<StorageId, AllocError> {
        let result = if self.faults.allocation(self.tick) {
            Err(AllocError::OutOfMemory)
        } else {
            self.memory.allocate(size)
        };
        match result {
            Ok(storage) => self.record(SimCall::Allocate { storage, size }),
            Err(_) => self.record(SimCall::AllocateRefused { size }),
        }
        result
    }

    unsafe fn deallocate(&mut self, storage: StorageId) {
        self.memory.deallocate(storage);
        self.record(SimCall::Deallocate { storage });
    }
}

impl Queue for SimBackend {
    fn create_stream(&mut self, id: StreamId) -> DeviceStream {
        let stream = DeviceStream(self.streams.len() as u32);
        let name = format!("s{}", self.streams.len());
        self.streams.push(SimStream {
            id,
            name,
            queue: VecDeque::new(),
            enqueued: 0,
        });
        self.done.add_stream();
        self.timing.add_stream();
        self.record(SimCall::CreateStream { stream, id });
        stream
    }

    fn write(&mut self, stream: DeviceStream, dst: Region, data: HostBytes) {
        let len = data.len();
        self.enqueue(stream, HostOp::Write { dst, data }, || {
            format!("write {len}B to {}+{}", dst.storage, dst.offset)
        });
    }

    fn copy(&mut self, stream: DeviceStream, src: Region, dst: Region) {
        self.enqueue(stream, HostOp::Copy { src, dst }, || {
            format!(
                "copy {}B from {}+{} to {}+{}",
                src.size, src.storage, src.offset, dst.storage, dst.offset
            )
        });
    }

    unsafe fn launch(
        &mut self,
        stream: DeviceStream,
        kernel: Kernel,
        count: LaunchCount,
        buffers: &[Region],
        scalars: &[u32],
        mode: ExecutionMode,
    ) {
        let op = HostOp::launch(kernel, count, buffers, scalars, mode);
        self.enqueue(stream, op, || {
            let regions: Vec<String> = buffers
                .iter()
                .map(|r| format!("{}+{}..{}", r.storage, r.offset, r.offset + r.size))
                .collect();
            let cubes = match count {
                LaunchCount::Static([x, y, z]) => format!("{x}x{y}x{z}"),
                LaunchCount::Dynamic(r) => format!("dynamic from {}+{}", r.storage, r.offset),
            };
            format!("launch {} {cubes} [{}]", kernel.name, regions.join(", "))
        });
    }

    fn read(&mut self, stream: DeviceStream, src: Region) -> ReadTicket {
        let ticket = ReadTicket(self.next_ticket);
        self.next_ticket += 1;
        let op = HostOp::Read {
            ticket,
            src,
            into: None,
        };
        self.enqueue(stream, op, || {
            format!(
                "read {}+{}..{}",
                src.storage,
                src.offset,
                src.offset + src.size
            )
        });
        ticket
    }

    fn flush(&mut self, stream: DeviceStream) -> DeviceEvent {
        let queue = self.queue_of(stream.0 as usize);
        let ops = self.streams.get(queue).map_or(0, |s| s.enqueued);
        let event = DeviceEvent::on_stream(queue as u32, ops);
        self.record(SimCall::Flush { stream, event });
        self.inject_event_faults(queue, ops);
        event
    }

    fn wait_event(&mut self, stream: DeviceStream, event: DeviceEvent) {
        self.record(SimCall::Wait { stream, event });
        let label = self.event_text(event);
        self.enqueue(stream, HostOp::Wait { event }, || format!("wait {label}"));
    }

    fn mark(&mut self, stream: DeviceStream) -> DeviceEvent {
        let event = self.flush(stream);
        let queue = self.queue_of(stream.0 as usize);
        self.timing.mark(event, self.done.completed(queue));
        event
    }
}

impl Completion for SimBackend {
    fn poll(&mut self, tick: u64) {
        self.tick = tick;
        loop {
            let mut progressed = false;
            for index in 0..self.streams.len() {
                loop {
                    let Some(op) = self.next_runnable(index, tick) else {
                        break;
                    };
                    let injected = self.faults.fault_of(
                        index,
                        op.number,
                        matches!(op.kind, HostOp::Wait { .. }),
                        op.injected,
                    );
                    let completed = self.execute(index, op.stream, op.kind, injected);
                    let stream = DeviceStream(index as u32);
                    let done = match injected {
                        Some(Injected::Instead(message) | Injected::After(message)) => {
                            SimCall::Fault {
                                stream,
                                op: completed,
                                message,
                            }
                        }
                        None => SimCall::Complete {
                            stream,
                            op: completed,
                        },
                    };
                    self.record(done);
                    progressed = true;
                }
            }
            if !progressed {
                break;
            }
        }
    }

    fn event_label(&self, event: DeviceEvent) -> String {
        self.event_text(event)
    }

    fn event_position(&self, event: DeviceEvent) -> Option<(DeviceStream, u64)> {
        let (queue, ops) = event.stream_and_ops();
        Some((DeviceStream(queue), ops))
    }

    fn peek(&self, region: Region) -> Option<Vec<u8>> {
        self.read_memory(region)
    }

    fn event_done(&mut self, event: DeviceEvent) -> bool {
        self.done.passed(event)
    }

    fn take_read(&mut self, ticket: ReadTicket) -> Option<HostBytes> {
        self.done.take_read(ticket)
    }

    fn take_fault(&mut self, stream: DeviceStream) -> Option<Error> {
        self.done.take_fault(stream.0 as usize)
    }
}

impl DeviceTiming for SimBackend {
    fn device_clock(&self) -> Option<Duration> {
        match (&self.config.kernel_cost, &self.config.costs) {
            (Some(_), _) => Some(Duration::from_nanos(self.clock_ns)),
            (None, Some(_)) => Some(self.virtual_time()),
            (None, None) => self
                .config
                .link
                .is_some()
                .then(|| Duration::from_nanos(self.clock_ns)),
        }
    }

    /// The virtual time the stream spent running work between the marks; `None` without
    /// `kernel_cost` or `costs`, where the sim keeps no device time.
    fn device_elapsed(&mut self, start: DeviceEvent, end: DeviceEvent) -> Option<Duration> {
        if self.config.kernel_cost.is_none() && self.config.costs.is_none() {
            return None;
        }
        self.timing.elapsed(start, end)
    }

    fn record_op_times(&mut self, on: bool) -> Option<OpClock> {
        self.timing.set_recording(on);
        Some(OpClock::Virtual)
    }

    fn take_op_times(&mut self, into: &mut Vec<OpTime>) {
        self.timing.take_ops(into);
    }
}

impl CrossDevice for SimBackend {}

impl Backend for SimBackend {
    fn capabilities(&self) -> Capabilities {
        // The sim keeps device time only where it models it (`device_clock`).
        let config = &self.config;
        Capabilities {
            device_clock: config.kernel_cost.is_some()
                || config.costs.is_some()
                || config.link.is_some(),
            ..Capabilities::default()
        }
    }

    fn properties(&self) -> DeviceProperties {
        HostMemory::device_properties(
            format!(
                "sim device, work completes {} tick(s) after submission",
                self.config.latency_ticks
            ),
            self.config.memory_bytes,
            256,
        )
    }

    fn device_index(&self) -> u32 {
        self.device
    }

    fn begin_tick(&mut self, tick: u64) {
        self.tick = tick;
        self.faults.tick(tick);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_runs_in_stream_order_once_its_latency_passed_and_is_logged() {
        let mut sim = SimBackend::new(SimConfig::default());
        let stream = sim.create_stream(StreamId { value: 0 });
        let (a, b) = (sim.allocate(1024), sim.allocate(1024));
        let (Ok(a), Ok(b)) = (a, b) else {
            panic!("the sim refused a test buffer");
        };
        let part = |storage, offset| Region {
            storage,
            offset,
            size: 300,
        };
        let (src, within, between) = (part(a, 260), part(a, 580), part(b, 36));
        let first: Vec<u8> = (0..300).map(|i| (i * 7 + 1) as u8).collect();
        let second: Vec<u8> = (0..300).map(|i| (i * 13 + 5) as u8).collect();
        sim.write(stream, src, HostBytes::from_vec(first.clone()));
        sim.copy(stream, src, within);
        sim.copy(stream, within, between);
        sim.write(stream, src, HostBytes::from_vec(second.clone()));
        let event = sim.flush(stream);

        sim.poll(0);
        assert!(!sim.event_done(event));
        assert_eq!(sim.read_memory(between), Some(vec![0; 300]));
        sim.poll(1);
        assert!(sim.event_done(event));
        assert!(sim.take_fault(stream).is_none());
        assert_eq!(sim.read_memory(src), Some(second));
        assert_eq!(sim.read_memory(within), Some(first.clone()));
        assert_eq!(sim.read_memory(between), Some(first));
        assert_eq!(sim.call_counts().copies, 4, "two writes and two copies");
        insta::assert_snapshot!(sim.log_text(), @"
        t0 create s0
        t0 allocate storage#1 (1024B)
        t0 allocate storage#2 (1024B)
        t0 s0 op 1: write 300B to storage#1+260
        t0 s0 op 2: copy 300B from storage#1+260 to storage#1+580
        t0 s0 op 3: copy 300B from storage#1+580 to storage#2+36
        t0 s0 op 4: write 300B to storage#1+260
        t0 s0 flush -> s0 op 4
        t1 s0 op 1 done
        t1 s0 op 2 done
        t1 s0 op 3 done
        t1 s0 op 4 done
        ");
    }

    #[test]
    fn a_copy_between_overlapping_ranges_faults_its_stream_and_copies_nothing() {
        let mut sim = SimBackend::new(SimConfig::default().with_latency_ticks(0));
        let stream = sim.create_stream(StreamId { value: 0 });
        let Ok(storage) = sim.allocate(64) else {
            panic!("the sim refused a test buffer");
        };
        let region = |offset| Region {
            storage,
            offset,
            size: 32,
        };
        sim.write(stream, region(0), HostBytes::from_vec((1..=32).collect()));
        sim.copy(stream, region(0), region(16));
        sim.poll(0);
        let fault = sim.take_fault(stream).map(|error| error.to_string());
        assert!(
            fault.as_deref().is_some_and(|f| f.contains("overlapping")),
            "{fault:?}"
        );
        assert_eq!(
            sim.read_memory(region(16)).map(|b| b[16..].to_vec()),
            Some(vec![0; 16])
        );
    }
}
