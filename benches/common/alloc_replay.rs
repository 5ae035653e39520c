//! Replays an allocation trace (`alloc_traces.rs`, declared beside this module as
//! `alloc_traces`) through the public client of any backend: an allocation is `empty(bytes)` on
//! a clone of the client bound to the event's stream, a free drops that handle. With exact
//! reports the replay ticks and reads `memory_usage()` after every event (cubecl's blocking
//! report); batched, it sends every event with no report and syncs at the end, as a training
//! loop does. Included by `benches/alloc_traces.rs` and `tests/alloc_traces.rs`.

#![allow(dead_code)] // each includer uses the parts it needs

use super::alloc_traces::{Event, Trace};
use gpuworld::{Backend, ComputeClient, Error, Handle, StreamId};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// When the replay asks how much memory the runtime holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reports {
    /// `tick()` then `memory_usage()` after every event: each report counts every command sent.
    Exact,
    /// No report inside the loop; a `sync()` of every stream at the end.
    Batched,
}

impl Reports {
    /// Both modes, in the order the bench runs them.
    pub const BOTH: [Reports; 2] = [Reports::Exact, Reports::Batched];

    /// The mode's name in tables and CSV.
    pub fn name(self) -> &'static str {
        match self {
            Reports::Exact => "exact",
            Reports::Batched => "batched",
        }
    }
}

/// What one replay measured.
#[derive(Clone, Copy, Debug)]
pub struct Replay {
    /// The trace's live peak (requested bytes): the floor no allocator goes below.
    pub peak_in_use: u64,
    /// The most `memory_usage().bytes_reserved` showed: after every event with exact reports,
    /// only after the final sync when batched.
    pub peak_reserved_reported: u64,
    /// The runtime's own peak of reserved bytes, taken by the pool at every allocation.
    pub pool_peak_reserved: u64,
    /// The runtime's own peak of bytes in use.
    pub pool_peak_in_use: u64,
    /// Bytes reserved after the last event and a sync of every stream (buffers live at the end
    /// of the trace still held).
    pub reserved_after: u64,
    /// Ticks from the first event through the final sync.
    pub ticks: u64,
    /// Buffers the runtime's pools asked the device for during the replay: what the time of a
    /// backend with costly buffer creation (wgpu) follows.
    pub device_allocations: u64,
    /// Bytes of those buffers.
    pub device_bytes_allocated: u64,
    /// Bytes of live allocations the pools moved to make room (compacting pools).
    pub bytes_moved: u64,
    /// Wall time from the first event through the final sync.
    pub time: Duration,
}

impl Replay {
    /// Peak reserved over the trace's live peak: what `memory_usage()` showed with exact reports
    /// (the pool's own peak is the same there), the pool's own peak when batched (nothing was
    /// shown before the end).
    pub fn peak_ratio(&self, reports: Reports) -> f64 {
        let peak = match reports {
            Reports::Exact => self.peak_reserved_reported,
            Reports::Batched => self.pool_peak_reserved,
        };
        peak as f64 / self.peak_in_use.max(1) as f64
    }

    /// Reserved after the trace over the trace's live peak.
    pub fn after_ratio(&self) -> f64 {
        self.reserved_after as f64 / self.peak_in_use.max(1) as f64
    }
}

/// Replays `trace` through `client`, which should be fresh (the runtime's peaks are its
/// lifetime's). Every handle still live at the end is dropped and every stream synced before it
/// returns; the first stream fault is the error.
///
/// With `written`, every allocation gets its first (up to) 4 bytes written as it is made, so work has
/// used it: a pool that moves it copies its bytes on the device (an unwritten one moves free).
pub fn replay<B: Backend>(
    client: &ComputeClient<B>,
    trace: &Trace,
    reports: Reports,
    written: bool,
) -> Result<Replay, Error> {
    let streams: Vec<ComputeClient<B>> = (0..trace.streams)
        .map(|stream| {
            client.with_stream(StreamId {
                value: u64::from(stream),
            })
        })
        .collect();
    let mut live: HashMap<u32, Handle> = HashMap::with_capacity(trace.peak_live_buffers);
    let mut peak_reserved_reported = 0;
    let ticks_before = client.with_runtime(|runtime| runtime.tick_count());
    let start = Instant::now();
    for event in &trace.events {
        match *event {
            Event::Alloc { id, bytes, stream } => {
                let on = &streams[stream as usize];
                let handle = on.empty(bytes);
                if written {
                    let bytes = id.to_le_bytes();
                    on.write(&handle, &bytes[..bytes.len().min(handle.size() as usize)])?;
                }
                live.insert(id, handle);
            }
            Event::Free { id } => {
                live.remove(&id);
            }
        }
        if reports == Reports::Exact {
            client.tick();
            peak_reserved_reported =
                peak_reserved_reported.max(client.memory_usage().bytes_reserved);
        }
    }
    sync_all(&streams)?;
    let time = start.elapsed();
    let ticks = client.with_runtime(|runtime| runtime.tick_count()) - ticks_before;
    // The sync's reply may come before its tick publishes; a tick of our own has published.
    client.tick();
    let reserved_after = client.memory_usage().bytes_reserved;
    let (pool_peak_reserved, pool_peak_in_use) =
        client.with_runtime(|runtime| (runtime.peak_reserved(), runtime.peak_memory()));
    let (device_allocations, device_bytes_allocated, bytes_moved) =
        client.with_runtime(|runtime| {
            runtime
                .memory_report()
                .iter()
                .fold((0, 0, 0), |(pages, bytes, moved), pool| {
                    (
                        pages + pool.pages_allocated,
                        bytes + pool.bytes_allocated,
                        moved + pool.bytes_moved,
                    )
                })
        });
    drop(live);
    sync_all(&streams)?;
    Ok(Replay {
        peak_in_use: trace.peak_live_bytes,
        peak_reserved_reported: peak_reserved_reported.max(reserved_after),
        pool_peak_reserved,
        pool_peak_in_use,
        reserved_after,
        ticks,
        device_allocations,
        device_bytes_allocated,
        bytes_moved,
        time,
    })
}

fn sync_all<B: Backend>(streams: &[ComputeClient<B>]) -> Result<(), Error> {
    streams.iter().try_for_each(ComputeClient::sync)
}
