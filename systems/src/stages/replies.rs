//! The reads and syncs in flight: interleave starts them when it submits their task
//! ([`PendingReplies::await_read`], [`PendingReplies::await_sync`]); the GC stage answers them once
//! their bytes arrived or their event passed, with the stream's fault if it has one. Owns
//! `PendingReplies`.

use crate::backend::{Backend, DeviceEvent, ReadTicket};
use crate::bytes::HostBytes;
use crate::error::Result;
use crate::inbox::{ReadReply, Reply};
use crate::outbox::Outbox;
use crate::snapshot::Capture;
use crate::world::*;
use bevy_ecs::prelude::*;
use smallvec::SmallVec;
use std::time::{Duration, Instant};

/// A readback in flight.
#[derive(Debug)]
struct PendingRead {
    /// The stream it ran on.
    stream: Entity,
    /// One ticket per binding; `None` once its bytes arrived.
    tickets: SmallVec<[Option<ReadTicket>; 2]>,
    /// Bytes received so far, by binding.
    bytes: Vec<HostBytes>,
    /// Where the bytes go.
    reply: Option<Reply<ReadReply>>,
}

/// A sync in flight: completes when the event has passed.
#[derive(Debug)]
struct PendingSync {
    /// The stream synced.
    stream: Entity,
    /// Completes after the stream's work.
    event: DeviceEvent,
    /// The caller's reply.
    reply: Option<Reply<Result<()>>>,
}

/// The reads and syncs in flight, in submission order. They live in this resource rather than
/// as entities: one is created and answered by nearly every blocking call, and spawning and
/// despawning an entity for each cost a blocked caller ~1,500 instructions per round trip.
#[derive(Debug, Resource, Default)]
pub struct PendingReplies {
    reads: Vec<PendingRead>,
    syncs: Vec<PendingSync>,
}

/// The streams' faults, which a reply reports.
pub type StreamFaults<'w, 's> = Query<'w, 's, (&'static Stream, &'static mut StreamFault)>;

impl PendingReplies {
    /// A read of `stream` in flight, one ticket per binding, answered on `reply`.
    pub fn await_read(
        &mut self,
        stream: Entity,
        tickets: SmallVec<[Option<ReadTicket>; 2]>,
        reply: Reply<ReadReply>,
    ) {
        let bytes = std::iter::repeat_with(HostBytes::default)
            .take(tickets.len())
            .collect();
        self.reads.push(PendingRead {
            stream,
            tickets,
            bytes,
            reply: Some(reply),
        });
    }

    /// A sync of `stream` in flight, answered on `reply` once `event` passed.
    pub fn await_sync(&mut self, stream: Entity, event: DeviceEvent, reply: Reply<Result<()>>) {
        self.syncs.push(PendingSync {
            stream,
            event,
            reply: Some(reply),
        });
    }

    /// Reads in flight.
    pub fn reads(&self) -> usize {
        self.reads.len()
    }

    /// Syncs in flight.
    pub fn syncs(&self) -> usize {
        self.syncs.len()
    }

    /// Reads and syncs in flight.
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub fn len(&self) -> usize {
        self.reads.len() + self.syncs.len()
    }

    /// Whether no read or sync is in flight.
    pub fn is_empty(&self) -> bool {
        self.reads.is_empty() && self.syncs.is_empty()
    }

    /// Waits on the device, up to `budget`, until some read or sync in flight can be answered,
    /// or `interrupted` says a tick is needed; `poll` lets the device progress between waits.
    pub fn wait_until_answerable<B: Backend>(
        &mut self,
        device: &mut B,
        budget: Duration,
        interrupted: &dyn Fn() -> bool,
        tick: u64,
    ) {
        let deadline = Instant::now() + budget;
        loop {
            let mut answerable = false;
            for read in &mut self.reads {
                answerable |= gather_read_bytes(device, read);
            }
            if answerable || self.syncs.iter().any(|sync| device.event_done(sync.event)) {
                return;
            }
            let now = Instant::now();
            if now >= deadline
                || interrupted()
                || !device.wait_for_progress(deadline - now, Some(interrupted))
            {
                return;
            }
            device.poll(tick);
        }
    }

    /// Replies to reads whose bytes have all arrived; whether any was answered.
    pub fn answer_reads<B: Backend>(
        &mut self,
        device: &mut B,
        streams: &mut StreamFaults,
        outbox: &mut Outbox,
    ) -> bool {
        let before = self.reads.len();
        self.reads.retain_mut(|read| {
            if !gather_read_bytes(device, read) {
                return true;
            }
            let result = match take_stream_fault(device, streams, read.stream) {
                Some(error) => Err(error),
                None => Ok(std::mem::take(&mut read.bytes)),
            };
            if let Some(reply) = read.reply.take() {
                outbox.read(reply, result);
            }
            false
        });
        self.reads.len() < before
    }

    /// Replies to syncs whose event has passed; whether any was answered.
    pub fn answer_syncs<B: Backend>(
        &mut self,
        device: &mut B,
        streams: &mut StreamFaults,
        outbox: &mut Outbox,
    ) -> bool {
        let before = self.syncs.len();
        self.syncs.retain_mut(|sync| {
            if !device.event_done(sync.event) {
                return true;
            }
            let fault = take_stream_fault(device, streams, sync.stream);
            if let Some(reply) = sync.reply.take() {
                outbox.sync(reply, fault.map_or(Ok(()), Err));
            }
            false
        });
        self.syncs.len() < before
    }
}

/// The stream's fault, including one the device raised after the last poll: a backend publishes
/// a fault before completing any later work, so it is visible once that work is.
fn take_stream_fault<B: Backend>(
    device: &mut B,
    streams: &mut StreamFaults,
    stream: Entity,
) -> Option<crate::error::Error> {
    let (info, mut fault) = streams.get_mut(stream).ok()?;
    if let Some(error) = device.take_fault(info.device) {
        fault.record(error);
    }
    fault.0.take()
}

/// Moves the bytes of `read` that arrived into it; whether all of them have.
fn gather_read_bytes<B: Backend>(device: &mut B, read: &mut PendingRead) -> bool {
    for (slot, ticket) in read.tickets.iter_mut().enumerate() {
        if let Some(t) = *ticket
            && let Some(bytes) = device.take_read(t)
        {
            read.bytes[slot] = bytes;
            *ticket = None;
        }
    }
    read.tickets.iter().all(Option::is_none)
}

/// The reads and syncs in flight.
pub(super) fn snapshot_lines(world: &mut World, capture: &mut Capture<'_>) {
    let replies = world.resource::<PendingReplies>();
    let mut lines: Vec<String> = replies
        .reads
        .iter()
        .map(|r| {
            let waiting = r.tickets.iter().filter(|t| t.is_some()).count();
            format!(
                "read on {} waiting for {waiting}/{} bindings",
                capture.stream_name(r.stream),
                r.tickets.len()
            )
        })
        .collect();
    lines.extend(replies.syncs.iter().map(|s| {
        format!(
            "sync on {} until {}",
            capture.stream_name(s.stream),
            capture.event(s.event)
        )
    }));
    lines
        .into_iter()
        .for_each(|line| capture.add_in_flight(line));
}
