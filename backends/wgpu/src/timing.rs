//! Device time per kernel, from timestamp queries. When enabled and offered by the adapter,
//! every dispatch runs in its own compute pass whose beginning and end write timestamps into
//! the batch's query set; at submission the set is resolved and copied to a mapped-on-submit
//! buffer, and a later poll adds the durations to per-kernel totals and, while a trace or
//! kernel statistics record them, keeps each dispatch's start and end as an `OpTime`.

use gpuworld_hal::backend::DeviceStream;
use gpuworld_hal::backend::{OpKind, OpTime};
use gpuworld_hal::kernel::Kernel;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Dispatches timed per batch; later dispatches of the batch run untimed.
const DISPATCHES_PER_SET: u32 = 256;

/// Device time spent in one kernel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelTiming {
    /// Timed dispatches.
    pub dispatches: u64,
    /// Their total device time.
    pub device_time: Duration,
}

/// One batch's query set and the buffers its results travel through.
pub(crate) struct TimingSet {
    id: u64,
    queries: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    readback: wgpu::Buffer,
    /// Each timed dispatch: its kernel, stream and bytes bound.
    kernels: Vec<(Kernel, DeviceStream, u64)>,
}

impl TimingSet {
    /// The timestamp writes of the next dispatch, if the set has room.
    pub fn next(
        &mut self,
        kernel: Kernel,
        stream: DeviceStream,
        bytes: u64,
    ) -> Option<wgpu::ComputePassTimestampWrites<'_>> {
        let index = self.kernels.len() as u32;
        if index >= DISPATCHES_PER_SET {
            return None;
        }
        self.kernels.push((kernel, stream, bytes));
        Some(wgpu::ComputePassTimestampWrites {
            query_set: &self.queries,
            beginning_of_pass_write_index: Some(2 * index),
            end_of_pass_write_index: Some(2 * index + 1),
        })
    }
}

/// Timestamp sets in use, and the totals so far.
pub(crate) struct Timing {
    period_ns: f64,
    free: Vec<TimingSet>,
    in_flight: Vec<TimingSet>,
    mapped: Arc<Mutex<Vec<(u64, bool)>>>,
    totals: BTreeMap<&'static str, KernelTiming>,
    next_id: u64,
    /// Whether dispatches get timestamps (`WgpuConfig::timestamps`, or while recording).
    pub active: bool,
    /// Whether each dispatch's times are kept for `take_ops`.
    recording: bool,
    ops: Vec<OpTime>,
}

impl Timing {
    /// Timing on `device`, or `None` when it has no timestamp queries.
    pub fn new(device: &wgpu::Device, queue: &wgpu::Queue) -> Option<Timing> {
        device
            .features()
            .contains(wgpu::Features::TIMESTAMP_QUERY)
            .then(|| Timing {
                period_ns: f64::from(queue.get_timestamp_period()),
                free: Vec::new(),
                in_flight: Vec::new(),
                mapped: Arc::default(),
                totals: BTreeMap::new(),
                next_id: 0,
                active: true,
                recording: false,
                ops: Vec::new(),
            })
    }

    /// Per-kernel totals of the batches read back so far.
    pub fn totals(&self) -> &BTreeMap<&'static str, KernelTiming> {
        &self.totals
    }

    /// Starts or stops keeping each dispatch's times.
    pub fn set_recording(&mut self, on: bool) {
        self.recording = on;
        if !on {
            self.ops.clear();
        }
    }

    /// Moves the dispatch times read back since the last call into `into`.
    pub fn take_ops(&mut self, into: &mut Vec<OpTime>) {
        into.append(&mut self.ops);
    }

    /// A set for a new batch.
    pub fn set(&mut self, device: &wgpu::Device) -> TimingSet {
        if let Some(set) = self.free.pop() {
            return set;
        }
        self.next_id += 1;
        let bytes = u64::from(DISPATCHES_PER_SET) * 2 * 8;
        TimingSet {
            id: self.next_id,
            queries: device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("gpuworld timestamps"),
                ty: wgpu::QueryType::Timestamp,
                count: DISPATCHES_PER_SET * 2,
            }),
            resolve: device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("gpuworld timestamps resolve"),
                size: bytes,
                usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            }),
            readback: device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("gpuworld timestamps readback"),
                size: bytes,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }),
            kernels: Vec::new(),
        }
    }

    /// Records the resolve of `set` in `encoder`, before it is finished and submitted.
    pub fn resolve(&mut self, encoder: &mut wgpu::CommandEncoder, set: TimingSet) {
        if set.kernels.is_empty() {
            self.free.push(set);
            return;
        }
        let queries = set.kernels.len() as u32 * 2;
        let bytes = u64::from(queries) * 8;
        encoder.resolve_query_set(&set.queries, 0..queries, &set.resolve, 0);
        encoder.copy_buffer_to_buffer(&set.resolve, 0, &set.readback, 0, bytes);
        let (mapped, id) = (self.mapped.clone(), set.id);
        encoder.map_buffer_on_submit(&set.readback, wgpu::MapMode::Read, 0..bytes, move |r| {
            mapped.lock().push((id, r.is_ok()));
        });
        self.in_flight.push(set);
    }

    /// Adds the durations of the sets read back since the last call.
    pub fn collect(&mut self) {
        let mapped = std::mem::take(&mut *self.mapped.lock());
        for (id, ok) in mapped {
            let Some(index) = self.in_flight.iter().position(|s| s.id == id) else {
                continue;
            };
            let mut set = self.in_flight.swap_remove(index);
            let bytes = set.kernels.len() as u64 * 16;
            if ok {
                if let Ok(view) = set.readback.slice(0..bytes).get_mapped_range() {
                    for (pair, &(kernel, stream, bytes)) in view.chunks_exact(16).zip(&set.kernels)
                    {
                        let stamp = |at: usize| {
                            let mut word = [0u8; 8];
                            word.copy_from_slice(&pair[at..at + 8]);
                            u64::from_le_bytes(word)
                        };
                        let ticks = stamp(8).saturating_sub(stamp(0));
                        let total = self.totals.entry(kernel.id).or_default();
                        total.dispatches += 1;
                        total.device_time +=
                            Duration::from_nanos((ticks as f64 * self.period_ns) as u64);
                        if self.recording {
                            let ns = |ticks: u64| (ticks as f64 * self.period_ns) as u64;
                            self.ops.push(OpTime {
                                stream,
                                kind: OpKind::Launch(kernel),
                                bytes,
                                start_ns: ns(stamp(0)),
                                end_ns: ns(stamp(8)),
                            });
                        }
                    }
                }
                set.readback.unmap();
            }
            set.kernels.clear();
            self.free.push(set);
        }
    }
}
