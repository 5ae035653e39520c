//! Device time between marks, from timestamp queries. A mark ends its stream's batch with an
//! empty compute pass whose end writes a timestamp once everything before it on the queue has
//! run, and has the stream begin its next batch with an empty pass whose beginning writes one
//! as the next work starts, so host time spent recording between two submissions is not counted.
//! Each timestamp is resolved in the batch that writes it and read back through a buffer mapped
//! on submit. Without marks nothing here runs.

mod record;

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

/// Marks whose timestamps are kept, the newest; as the cuda backend keeps its last 1024 events.
const MARKS_KEPT: usize = 1024;
/// Idle timestamps kept for later marks; more are dropped.
const FREE_STAMPS_KEPT: usize = 64;
/// Bytes of one resolved timestamp.
const STAMP_BYTES: u64 = 8;

/// Which side of a mark a timestamp records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Edge {
    /// When everything submitted before the mark had run.
    End,
    /// When the stream's first work after the mark started.
    Start,
}

/// One timestamp of one mark: a query set of one query and the buffer its value is read from.
pub(crate) struct Stamp {
    id: u64,
    mark: u64,
    edge: Edge,
    queries: wgpu::QuerySet,
    readback: wgpu::Buffer,
}

impl Stamp {
    /// Records an empty compute pass that writes the timestamp: at its end for [`Edge::End`]
    /// (after all earlier work), at its beginning for [`Edge::Start`].
    pub fn write(&self, encoder: &mut wgpu::CommandEncoder) {
        let (beginning, end) = match self.edge {
            Edge::End => (None, Some(0)),
            Edge::Start => (Some(0), None),
        };
        // The pass is dropped at once: it ends empty, and the timestamp is all it does.
        encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("gpuworld mark"),
            timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                query_set: &self.queries,
                beginning_of_pass_write_index: beginning,
                end_of_pass_write_index: end,
            }),
        });
    }
}

/// What a timestamp reads, once its batch ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reading {
    /// Not read back yet.
    Pending,
    /// The device's timestamp, in ticks of the queue's timestamp period.
    Ticks(u64),
    /// The readback failed (a lost device).
    Failed,
}

impl Reading {
    fn ticks(self) -> Option<u64> {
        match self {
            Reading::Ticks(ticks) => Some(ticks),
            Reading::Pending | Reading::Failed => None,
        }
    }
}

/// The timestamps of one mark.
struct MarkTimes {
    /// When the work before the mark had finished.
    end: Reading,
    /// When the stream's next work started, with the submission that recorded it; `None` until
    /// that submission.
    start: Option<(u64, Reading)>,
}

/// The marks' timestamps: the pool of stamps, those in flight, and the readings of recent marks.
pub(crate) struct Marks {
    period_ns: f64,
    resolve: wgpu::Buffer,
    free: Vec<Stamp>,
    in_flight: HashMap<u64, Stamp>,
    mapped: Arc<Mutex<Vec<(u64, bool)>>>,
    marks: BTreeMap<u64, MarkTimes>,
    next_id: u64,
}

impl Marks {
    /// Mark timing on `device`, or `None` when it has no timestamp queries.
    pub fn new(device: &wgpu::Device, queue: &wgpu::Queue) -> Option<Marks> {
        if !device.features().contains(wgpu::Features::TIMESTAMP_QUERY) {
            return None;
        }
        Some(Marks {
            period_ns: f64::from(queue.get_timestamp_period()),
            resolve: device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("gpuworld mark resolve"),
                size: STAMP_BYTES,
                usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            }),
            free: Vec::new(),
            in_flight: HashMap::new(),
            mapped: Arc::default(),
            marks: BTreeMap::new(),
            next_id: 0,
        })
    }

    /// Starts the record of the mark that submission `mark` ends, forgetting the oldest beyond
    /// [`MARKS_KEPT`].
    fn begin(&mut self, mark: u64) {
        self.marks.insert(
            mark,
            MarkTimes {
                end: Reading::Pending,
                start: None,
            },
        );
        while self.marks.len() > MARKS_KEPT {
            self.marks.pop_first();
        }
    }

    /// A stamp for the `edge` of mark `mark`.
    fn stamp(&mut self, device: &wgpu::Device, mark: u64, edge: Edge) -> Stamp {
        if let Some(mut stamp) = self.free.pop() {
            (stamp.mark, stamp.edge) = (mark, edge);
            return stamp;
        }
        self.next_id += 1;
        Stamp {
            id: self.next_id,
            mark,
            edge,
            queries: device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("gpuworld mark"),
                ty: wgpu::QueryType::Timestamp,
                count: 1,
            }),
            readback: device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("gpuworld mark readback"),
                size: STAMP_BYTES,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }),
        }
    }

    /// Returns a stamp that was never written to the pool.
    pub fn unused(&mut self, stamp: Stamp) {
        if self.free.len() < FREE_STAMPS_KEPT {
            self.free.push(stamp);
        }
    }

    /// Records the resolve and readback of `stamp`, written earlier in `encoder`, which is
    /// about to be submitted as submission `batch`.
    pub fn resolve(&mut self, encoder: &mut wgpu::CommandEncoder, stamp: Stamp, batch: u64) {
        encoder.resolve_query_set(&stamp.queries, 0..1, &self.resolve, 0);
        encoder.copy_buffer_to_buffer(&self.resolve, 0, &stamp.readback, 0, STAMP_BYTES);
        let (mapped, id) = (self.mapped.clone(), stamp.id);
        encoder.map_buffer_on_submit(
            &stamp.readback,
            wgpu::MapMode::Read,
            0..STAMP_BYTES,
            move |result| mapped.lock().push((id, result.is_ok())),
        );
        if stamp.edge == Edge::Start
            && let Some(times) = self.marks.get_mut(&stamp.mark)
        {
            times.start = Some((batch, Reading::Pending));
        }
        self.in_flight.insert(stamp.id, stamp);
    }

    /// Reads the timestamps mapped since the last call.
    pub fn collect(&mut self) {
        if self.in_flight.is_empty() {
            return;
        }
        let mapped = std::mem::take(&mut *self.mapped.lock());
        for (id, ok) in mapped {
            let Some(stamp) = self.in_flight.remove(&id) else {
                continue;
            };
            let reading = if ok {
                let ticks = stamp.readback.get_mapped_range(..).ok().and_then(|view| {
                    let bytes: [u8; 8] = view.get(..8)?.try_into().ok()?;
                    Some(u64::from_le_bytes(bytes))
                });
                stamp.readback.unmap();
                ticks.map_or(Reading::Failed, Reading::Ticks)
            } else {
                Reading::Failed
            };
            if let Some(times) = self.marks.get_mut(&stamp.mark) {
                match (stamp.edge, &mut times.start) {
                    (Edge::End, _) => times.end = reading,
                    (Edge::Start, Some((_, start))) => *start = reading,
                    (Edge::Start, None) => {}
                }
            }
            // A failed map leaves the buffer in no known state: it is not reused.
            if ok {
                self.unused(stamp);
            }
        }
    }

    /// Device time from mark `start` to mark `end`: from when the first work after `start`
    /// began (or, where none was submitted up to `end`, from when the work before `start` had
    /// finished) to when the work before `end` had finished. `None` for a mark not kept or a
    /// timestamp not read back.
    pub fn elapsed(&self, start: u64, end: u64) -> Option<Duration> {
        let to = self.marks.get(&end)?.end.ticks()?;
        let marked = self.marks.get(&start)?;
        let from = match marked.start {
            Some((batch, reading)) if batch <= end => reading.ticks()?,
            _ => marked.end.ticks()?,
        };
        let ticks = to.checked_sub(from)?;
        Some(Duration::from_nanos((ticks as f64 * self.period_ns) as u64))
    }
}
