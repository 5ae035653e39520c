//! Device-to-host reads. A read records a copy into a `MAP_READ` staging buffer in the stream's
//! encoder and asks wgpu to map it when that encoder is submitted; the map callback (run inside
//! `device.poll`) queues the ticket, and the next poll copies the bytes out into pooled host
//! memory (what the read returns, so a loop of reads reuses one buffer), unmaps the staging and
//! returns it to a small pool. Nothing here waits.

use gpuworld_hal::backend::{
    DEFAULT_MAX_FREE_HEAP_STAGING, HeapStaging, HostBytes, ReadTicket, StagingAllocator,
};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Most bytes of idle staging the pool keeps.
const POOL_BYTES: u64 = 256 << 20;

struct InFlightRead {
    stream: usize,
    staging: wgpu::Buffer,
    copy_len: u64,
    skip: usize,
    len: usize,
}

/// What the map callbacks report: a ticket and whether its mapping succeeded.
type Mapped = Arc<Mutex<Vec<(ReadTicket, bool)>>>;

/// Reads in flight, finished reads, idle staging buffers by size, and the host memory reads land
/// in.
pub(crate) struct Readbacks {
    in_flight: HashMap<ReadTicket, InFlightRead>,
    finished: HashMap<ReadTicket, HostBytes>,
    host: Arc<HeapStaging>,
    mapped: Mapped,
    pool: BTreeMap<u64, Vec<wgpu::Buffer>>,
    pooled_bytes: u64,
    next_ticket: u64,
}

/// A read that failed, with the stream it was on.
pub(crate) struct FailedRead {
    /// Index of the stream.
    pub stream: usize,
    /// What went wrong.
    pub message: &'static str,
}

impl Default for Readbacks {
    fn default() -> Readbacks {
        Readbacks {
            in_flight: HashMap::new(),
            finished: HashMap::new(),
            host: HeapStaging::new(DEFAULT_MAX_FREE_HEAP_STAGING),
            mapped: Mapped::default(),
            pool: BTreeMap::new(),
            pooled_bytes: 0,
            next_ticket: 0,
        }
    }
}

impl Readbacks {
    /// The host memory reads land in, which clients may take upload staging from too.
    pub fn host(&self) -> Arc<HeapStaging> {
        self.host.clone()
    }

    /// A new ticket.
    pub fn ticket(&mut self) -> ReadTicket {
        self.next_ticket += 1;
        ReadTicket(self.next_ticket)
    }

    /// Completes `ticket` at once with no bytes.
    pub fn finish(&mut self, ticket: ReadTicket) {
        self.finished.insert(ticket, HostBytes::default());
    }

    /// Records the copy of `len` bytes at `offset` of `source` into staging in `encoder`, mapped
    /// when the encoder is submitted.
    #[allow(clippy::too_many_arguments)]
    pub fn record(
        &mut self,
        device: &wgpu::Device,
        encoder: &mut wgpu::CommandEncoder,
        ticket: ReadTicket,
        stream: usize,
        source: &wgpu::Buffer,
        offset: u64,
        len: u64,
    ) {
        // Copies move whole 4-byte words; the allocation is a whole number of words.
        let start = offset / 4 * 4;
        let copy_len = (offset + len).next_multiple_of(4) - start;
        let staging = self.staging(device, copy_len);
        encoder.copy_buffer_to_buffer(source, start, &staging, 0, copy_len);
        let mapped = self.mapped.clone();
        encoder.map_buffer_on_submit(&staging, wgpu::MapMode::Read, 0..copy_len, move |result| {
            mapped.lock().push((ticket, result.is_ok()));
        });
        self.in_flight.insert(
            ticket,
            InFlightRead {
                stream,
                staging,
                copy_len,
                skip: (offset - start) as usize,
                len: len as usize,
            },
        );
    }

    fn staging(&mut self, device: &wgpu::Device, copy_len: u64) -> wgpu::Buffer {
        let size = copy_len.next_power_of_two().max(256);
        if let Some(buffer) = self.pool.get_mut(&size).and_then(Vec::pop) {
            self.pooled_bytes -= size;
            return buffer;
        }
        device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("gpuworld readback staging"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

    /// Copies out the reads whose staging was mapped; returns the reads that failed.
    pub fn collect(&mut self) -> Vec<FailedRead> {
        let mapped = std::mem::take(&mut *self.mapped.lock());
        let mut failed = Vec::new();
        for (ticket, ok) in mapped {
            let Some(read) = self.in_flight.remove(&ticket) else {
                continue;
            };
            let bytes = if ok {
                let view = read.staging.slice(0..read.copy_len).get_mapped_range();
                let bytes = view
                    .as_ref()
                    .ok()
                    .and_then(|view| view.get(read.skip..read.skip + read.len))
                    .map(|mapped| match self.host.take(mapped.len()) {
                        Some(mut bytes) => {
                            bytes.copy_from_slice(mapped);
                            bytes
                        }
                        None => HostBytes::from(mapped),
                    });
                drop(view);
                read.staging.unmap();
                bytes
            } else {
                None
            };
            match bytes {
                Some(bytes) => {
                    self.finished.insert(ticket, bytes);
                    self.release(read.staging);
                }
                None => {
                    failed.push(FailedRead {
                        stream: read.stream,
                        message: "mapping the readback staging buffer failed",
                    });
                    self.finished.insert(ticket, HostBytes::default());
                }
            }
        }
        failed
    }

    /// Completes every read in flight with no bytes: the device is gone.
    pub fn abandon(&mut self) {
        for (ticket, _) in self.in_flight.drain() {
            self.finished.insert(ticket, HostBytes::default());
        }
    }

    fn release(&mut self, staging: wgpu::Buffer) {
        let size = staging.size();
        if self.pooled_bytes + size <= POOL_BYTES {
            self.pooled_bytes += size;
            self.pool.entry(size).or_default().push(staging);
        }
    }

    /// The bytes of a finished read, once.
    pub fn take(&mut self, ticket: ReadTicket) -> Option<HostBytes> {
        self.finished.remove(&ticket)
    }
}
