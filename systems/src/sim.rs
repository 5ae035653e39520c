//! The sim backend: a deterministic virtual device for tick-stepped tests. Work submitted during
//! tick `t` completes in the GC stage of tick `t + latency_ticks`, in stream order, and runs the CPU sources of
//! kernels, so reads return real data. Every backend call and completion is recorded in a log.

use crate::backend::*;
use crate::bytes::HostBytes;
use crate::error::Error;
use crate::host_launch::resolve_count;
use crate::host_memory::HostMemory;
use crate::host_ops::{Completions, HostOp, event_label};
use crate::ids::StreamId;
use crate::kernel::{CpuSource, ExecutionMode, Kernel, KernelDef};
use std::collections::VecDeque;

mod link;

pub use link::SimLink;
use std::fmt;
use std::time::Duration;

/// The virtual device time, in nanoseconds, of one launch of a kernel over a cube count.
pub type KernelCost = fn(&KernelDef, [u32; 3]) -> u64;

/// How the virtual device orders work across streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimModel {
    /// Each stream is a queue of its own; waits on other streams' events order them (CUDA-like).
    Events,
    /// Every stream feeds one device queue in submission order; waits are implied (wgpu-like).
    SingleQueue,
}

/// How the virtual device behaves.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// How work of different streams is ordered.
    pub model: SimModel,
    /// Ticks between a submission and its completion.
    pub latency_ticks: u64,
    /// Device memory in bytes; allocations beyond it fail.
    pub memory_bytes: u64,
    /// Whether calls are recorded in the log.
    pub record: bool,
    /// Virtual cost of each launch; when set, a virtual device clock advances by it as launches
    /// complete and [`Backend::device_clock`] reports it (deterministic timings for autotune).
    pub kernel_cost: Option<KernelCost>,
    /// Virtual cost of copies between host and device (writes, reads: what transfers between
    /// sim devices and host collectives are made of); when set, the virtual device clock
    /// advances by it as copies complete.
    pub link: Option<SimLink>,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            model: SimModel::Events,
            latency_ticks: 1,
            memory_bytes: 1 << 30,
            record: true,
            kernel_cost: None,
            link: None,
        }
    }
}

/// One entry of the sim's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SimCall {
    /// A buffer was allocated.
    Allocate { storage: StorageId, size: u64 },
    /// An allocation was refused.
    AllocateRefused { size: u64 },
    /// A buffer was freed.
    Deallocate { storage: StorageId },
    /// A stream was created.
    CreateStream { stream: DeviceStream, id: StreamId },
    /// Work was enqueued on a stream.
    Enqueue {
        stream: DeviceStream,
        op: u64,
        what: String,
    },
    /// A stream was flushed to an event.
    Flush {
        stream: DeviceStream,
        event: DeviceEvent,
    },
    /// A stream was made to wait on an event.
    Wait {
        stream: DeviceStream,
        event: DeviceEvent,
    },
    /// Queued work ran.
    Complete { stream: DeviceStream, op: u64 },
}

impl fmt::Display for SimCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SimCall::Allocate { storage, size } => {
                write!(f, "allocate {storage} ({size}B)")
            }
            SimCall::AllocateRefused { size } => write!(f, "allocate {size}B refused"),
            SimCall::Deallocate { storage } => write!(f, "deallocate {storage}"),
            SimCall::CreateStream { stream, id } => write!(f, "create d{} for {id}", stream.0),
            SimCall::Enqueue { stream, op, what } => write!(f, "d{} op {op}: {what}", stream.0),
            SimCall::Flush { stream, event } => {
                write!(f, "d{} flush -> {}", stream.0, event_label(*event))
            }
            SimCall::Wait { stream, event } => {
                write!(f, "d{} wait {}", stream.0, event_label(*event))
            }
            SimCall::Complete { stream, op } => write!(f, "d{} op {op} done", stream.0),
        }
    }
}

struct Op {
    ready_at: u64,
    /// The stream that submitted it (its faults go there).
    stream: usize,
    kind: HostOp,
}

/// A stream; with `SimModel::SingleQueue` only stream 0's queue and counters are used.
struct SimStream {
    id: StreamId,
    queue: VecDeque<Op>,
    enqueued: u64,
}

/// A deterministic virtual device.
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
    /// Which sim device this is (see [`SimBackend::with_devices`]).
    device: u32,
}

impl SimBackend {
    /// A virtual device with `config`.
    pub fn new(config: SimConfig) -> SimBackend {
        SimBackend {
            memory: HostMemory::new(Some(config.memory_bytes)),
            config,
            streams: Vec::new(),
            done: Completions::default(),
            next_ticket: 0,
            tick: 0,
            log: Vec::new(),
            clock_ns: 0,
            device: 0,
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
        SimBackend {
            device: index,
            ..SimBackend::new(config)
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

    /// The log as text, one call a line: `t<tick> <call>`.
    pub fn log_text(&self) -> String {
        self.log
            .iter()
            .map(|(tick, call)| format!("t{tick} {call}\n"))
            .collect()
    }

    /// Bytes currently allocated on the virtual device.
    pub fn allocated(&self) -> u64 {
        self.memory.allocated()
    }

    fn record(&mut self, call: SimCall) {
        if self.config.record {
            self.log.push((self.tick, call));
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
        let ready_at = self.tick + self.config.latency_ticks;
        let queue = self.queue_of(stream.0 as usize);
        let Some(s) = self.streams.get_mut(queue) else {
            return;
        };
        s.enqueued += 1;
        let op = s.enqueued;
        s.queue.push_back(Op {
            ready_at,
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
    /// so runs are deterministic; the queue's completed count.
    fn execute(&mut self, queue: usize, stream: usize, op: HostOp) -> u64 {
        if let HostOp::Launch { kernel, count, .. } = &op {
            self.advance_clock(kernel, *count);
        }
        if let Some(link) = self.config.link {
            self.clock_ns = self.clock_ns.saturating_add(link.cost_of(&op));
        }
        let id = self.streams[stream].id;
        let finished = op.run(
            &self.memory,
            Self::NAME,
            id,
            |size| {
                usize::try_from(size)
                    .map(|len| HostBytes::from_vec(vec![0; len]))
                    .unwrap_or_default()
            },
            |launch| launch.run_in_order(),
        );
        self.done.finish(queue, stream, finished)
    }

    /// Advances the virtual clock by the launch's configured cost.
    fn advance_clock(&mut self, kernel: Kernel, count: LaunchCount) {
        if let Some(cost) = self.config.kernel_cost {
            let cubes = resolve_count(&self.memory, count).unwrap_or([0; 3]);
            self.clock_ns = self.clock_ns.saturating_add(cost(kernel, cubes));
        }
    }
}

impl Backend for SimBackend {
    const NAME: &'static str = "sim";
    type Source = CpuSource;

    fn properties(&self) -> DeviceProperties {
        DeviceProperties {
            name: format!(
                "sim device, work completes {} tick(s) after submission",
                self.config.latency_ticks
            ),
            memory_bytes: self.config.memory_bytes,
            alignment: 256,
            max_cube_count: [u32::MAX; 3],
            memory_layout: MemoryLayout::Sliced,
            limits: Default::default(),
            features: Vec::new(),
        }
    }

    fn device_index(&self) -> u32 {
        self.device
    }

    fn allocate(&mut self, size: u64) -> Result<StorageId, AllocError> {
        let result = self.memory.allocate(size);
        match result {
            Ok(storage) => self.record(SimCall::Allocate { storage, size }),
            Err(_) => self.record(SimCall::AllocateRefused { size }),
        }
        result
    }

    fn deallocate(&mut self, storage: StorageId) {
        self.memory.deallocate(storage);
        self.record(SimCall::Deallocate { storage });
    }

    fn create_stream(&mut self, id: StreamId) -> DeviceStream {
        let stream = DeviceStream(self.streams.len() as u32);
        self.streams.push(SimStream {
            id,
            queue: VecDeque::new(),
            enqueued: 0,
        });
        self.done.add_stream();
        self.record(SimCall::CreateStream { stream, id });
        stream
    }

    fn write(&mut self, stream: DeviceStream, dst: Region, data: HostBytes) {
        let len = data.len();
        self.enqueue(stream, HostOp::Write { dst, data }, || {
            format!("write {len}B to {}+{}", dst.storage, dst.offset)
        });
    }

    fn launch(
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
        self.enqueue(stream, HostOp::Read { ticket, src }, || {
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
        event
    }

    fn wait_event(&mut self, stream: DeviceStream, event: DeviceEvent) {
        self.record(SimCall::Wait { stream, event });
        self.enqueue(stream, HostOp::Wait { event }, || {
            format!("wait {}", event_label(event))
        });
    }

    fn begin_tick(&mut self, tick: u64) {
        self.tick = tick;
    }

    fn poll(&mut self, tick: u64) {
        self.tick = tick;
        loop {
            let mut progressed = false;
            for index in 0..self.streams.len() {
                loop {
                    let runnable = match self.streams[index].queue.front() {
                        Some(op) if op.ready_at <= tick => match op.kind {
                            HostOp::Wait { event } => self.done.passed(event),
                            _ => true,
                        },
                        _ => false,
                    };
                    if !runnable {
                        break;
                    }
                    let Some(op) = self.streams[index].queue.pop_front() else {
                        break;
                    };
                    let completed = self.execute(index, op.stream, op.kind);
                    let done = SimCall::Complete {
                        stream: DeviceStream(index as u32),
                        op: completed,
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
        event_label(event)
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

    fn device_clock(&self) -> Option<Duration> {
        (self.config.kernel_cost.is_some() || self.config.link.is_some())
            .then(|| Duration::from_nanos(self.clock_ns))
    }
}
