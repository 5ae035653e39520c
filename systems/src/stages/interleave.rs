//! Stage 5, interleave: hands the ready queues to the backend, `Interleave` (round-robin, one
//! task per stream) or `Sequential` (stream after stream). Before a task that must wait on
//! another stream, that stream's work up to the needed cursor is submitted and flushed to an
//! event the consumer waits on; after it, the shared bindings are pinned behind an event of the
//! consumer. Owns `SubmittedCursor`; starts reads and syncs through `replies.rs` and pins
//! shared bindings through `lifetime.rs` (its step 2).

use super::lifetime::{PendingGc, PinnedHandles};
use super::replies::PendingReplies;
use super::tick::TickStage;
use crate::backend::{Backend, DeviceStream, Region};
use crate::outbox::Outbox;
use crate::trace::{OpKind, TraceRecorder};
use crate::world::*;
use bevy_ecs::prelude::*;
use smallvec::SmallVec;

/// Registers the interleave stage's system.
pub fn build<B: Backend>(_world: &mut World, schedule: &mut Schedule) {
    schedule.add_systems(submit_ready_queues::<B>.in_set(TickStage::Interleave));
}

/// Submits every ready queue to the backend.
#[allow(clippy::too_many_arguments, reason = "a system's parameters")]
pub fn submit_ready_queues<B: Backend>(
    mut commands: Commands,
    config: Res<RuntimeConfig>,
    mut device: ResMut<Device<B>>,
    mut stats: ResMut<Stats>,
    mut pinned: ResMut<PinnedHandles>,
    mut new: ResMut<NewTasks>,
    mut replies: ResMut<PendingReplies>,
    mut outbox: ResMut<Outbox>,
    recorder: ResMut<TraceRecorder>,
    mut streams: StreamQuery,
) {
    let _span = tracing::trace_span!(target: "gpuworld::stream", "interleave").entered();
    let mut ready: SmallVec<[(usize, Entity); 8]> = SmallVec::new();
    for (entity, stream, queue, ..) in &streams {
        if queue.flush_through.is_some() {
            ready.push((stream.slot, entity));
        }
    }
    if ready.is_empty() {
        return;
    }
    ready.sort_unstable();
    let mut submitter = Submitter {
        device: &mut device.0,
        stats: &mut stats,
        pinned: &mut pinned,
        streams: &mut streams,
        pins: Vec::new(),
        replies: &mut replies,
        outbox: &mut outbox,
        spare: &mut new.spare,
        recorder: recorder.times_submissions().then(|| recorder.into_inner()),
    };
    match config.strategy {
        SchedulingStrategy::Sequential => {
            for &(_, stream) in &ready {
                while submitter.submit_next(stream) {}
            }
        }
        SchedulingStrategy::Interleave => loop {
            let mut progressed = false;
            for &(_, stream) in &ready {
                progressed |= submitter.submit_next(stream);
            }
            if !progressed {
                break;
            }
        },
    }
    for gc in submitter.pins {
        commands.spawn(gc);
    }
}

type StreamQuery<'w, 's> = Query<
    'w,
    's,
    (
        Entity,
        &'static Stream,
        &'static mut TaskQueue,
        &'static mut SubmittedCursor,
        &'static mut StreamFault,
    ),
>;

/// Submits tasks in order, collecting the pending GCs to spawn afterwards.
struct Submitter<'a, 'sw, 'ss, B: Backend> {
    device: &'a mut B,
    stats: &'a mut Stats,
    pinned: &'a mut PinnedHandles,
    streams: &'a mut StreamQuery<'sw, 'ss>,
    /// Shared handles pinned behind their consumers' events, spawned afterwards.
    pins: Vec<PendingGc>,
    /// Where reads and syncs in flight go.
    replies: &'a mut PendingReplies,
    /// Where marks are answered, at the end of the tick.
    outbox: &'a mut Outbox,
    spare: &'a mut SpareTasks,
    /// Where submissions and waits are recorded, while a trace or kernel statistics need the
    /// runtime to time what the backend cannot.
    recorder: Option<&'a mut TraceRecorder>,
}

impl<B: Backend> Submitter<'_, '_, '_, B> {
    /// Submits the next task of `stream` if the queue must reach it this tick.
    fn submit_next(&mut self, stream: Entity) -> bool {
        let Ok((_, info, mut queue, mut submitted, _)) = self.streams.get_mut(stream) else {
            return false;
        };
        let device_stream = info.device;
        let Some(through) = queue.flush_through else {
            return false;
        };
        if queue.tasks.front().is_none_or(|t| t.cursor > through) {
            queue.flush_through = None;
            return false;
        }
        let Some(task) = queue.tasks.pop_front() else {
            return false;
        };
        submitted.0 = submitted.0.max(task.cursor);
        self.submit(task, stream, device_stream);
        true
    }

    /// Submits `stream`'s queue up to `cursor`, so that an event flushed afterwards covers it.
    fn submit_through(&mut self, stream: Entity, cursor: u64) {
        loop {
            let Ok((_, info, mut queue, mut submitted, _)) = self.streams.get_mut(stream) else {
                return;
            };
            if submitted.0 >= cursor {
                return;
            }
            let device_stream = info.device;
            let Some(task) = queue.tasks.pop_front() else {
                return;
            };
            submitted.0 = submitted.0.max(task.cursor);
            self.submit(task, stream, device_stream);
        }
    }

    /// Submits one task; the caller has already advanced the stream's submitted cursor.
    fn submit(&mut self, mut task: Box<Task>, stream: Entity, device_stream: DeviceStream) {
        let waits = std::mem::take(&mut task.waits);
        let work = task.work.take();
        let shared = std::mem::take(&mut task.shared);
        let bindings = &task.bindings;
        let waited = !waits.is_empty();
        if waited {
            self.wait_for_origins(&waits, device_stream);
        }
        let timed = self.recorder.is_some().then(std::time::Instant::now);
        let mut submitted: Option<(OpKind, u64)> = None;
        match work {
            Some(TaskWork::Write(data)) => {
                if let Some(dst) = bindings.first() {
                    self.stats.bytes_written += data.len() as u64;
                    submitted = Some((OpKind::Write, data.len() as u64));
                    self.device.write(device_stream, dst.region, data);
                }
            }
            Some(TaskWork::Launch {
                kernel,
                count,
                scalars,
                mode,
            }) => {
                // The client checked the kernel's source for this backend.
                let mut buffers = SmallVec::<[Region; 4]>::new();
                for binding in bindings.iter().take(kernel.signature.buffers.len()) {
                    buffers.push(binding.region);
                }
                let _span = tracing::trace_span!(target: "gpuworld::kernel", "launch", kernel = kernel.name).entered();
                // SAFETY: ingest resolved each binding to a region of its handle's live
                // allocation and rejected ranges past its end (`BindingError::OutOfRange`); the
                // allocation is freed only after this task's event passes. An `Unchecked` mode
                // comes only from `ComputeClient::launch_unchecked`, whose caller promised
                // in-bounds accesses.
                unsafe {
                    self.device
                        .launch(device_stream, kernel, count, &buffers, &scalars, mode);
                }
                self.stats.launches += 1;
                if timed.is_some() {
                    submitted =
                        Some((OpKind::Launch(kernel), buffers.iter().map(|r| r.size).sum()));
                }
            }
            Some(TaskWork::Read(ReadRequest { reply, staging })) => {
                let mut tickets = SmallVec::new();
                for b in bindings.iter() {
                    self.stats.bytes_read += b.region.size;
                    tickets.push(Some(match &staging {
                        Some(staging) => self.device.read_for(device_stream, b.region, staging),
                        None => self.device.read(device_stream, b.region),
                    }));
                }
                submitted = Some((OpKind::Read, bindings.iter().map(|b| b.region.size).sum()));
                self.replies.await_read(stream, tickets, reply);
            }
            Some(TaskWork::Move) => {
                if let [from, to] = bindings[..] {
                    submitted = Some((OpKind::Copy, from.region.size));
                    self.device.copy(device_stream, from.region, to.region);
                }
            }
            // A replay's lane end orders its stream behind the replay through the waits issued
            // before it; there is nothing to run.
            Some(TaskWork::Native(work)) if work.as_any().is::<crate::graph::ReplayLaneEnd>() => {}
            Some(TaskWork::Native(work)) => {
                let buffers: SmallVec<[Region; 4]> = bindings.iter().map(|b| b.region).collect();
                if let Err(error) = self.device.run_native(device_stream, &buffers, work)
                    && let Ok((.., mut fault)) = self.streams.get_mut(stream)
                {
                    fault.record(error);
                }
            }
            Some(TaskWork::Flush) => {
                self.device.flush(device_stream);
            }
            Some(TaskWork::Mark(reply)) => {
                self.outbox.mark(reply, Ok(self.device.mark(device_stream)));
            }
            Some(TaskWork::Sync(reply)) => {
                let event = self.device.flush(device_stream);
                self.replies.await_sync(stream, event, reply);
            }
            None => {}
        }
        if let (Some(start), Some((kind, bytes)), Some(recorder)) =
            (timed, submitted, self.recorder.as_deref_mut())
        {
            recorder.submitted(device_stream, kind, bytes, start);
        }
        if waited && !shared.is_empty() {
            self.pin_shared(device_stream, shared);
        }
        self.stats.tasks_submitted += 1;
        self.spare.recycle(task);
    }

    /// Makes `device_stream` wait for each origin's work through the cursor it needs: that work
    /// is submitted first, then flushed to an event the consumer waits on.
    fn wait_for_origins(&mut self, waits: &[(Entity, u64)], device_stream: DeviceStream) {
        for &(origin, origin_cursor) in waits {
            self.submit_through(origin, origin_cursor);
            if let Ok((_, origin_info, ..)) = self.streams.get(origin) {
                let _span = tracing::trace_span!(target: "gpuworld::stream", "wait", origin = origin_info.slot).entered();
                tracing::debug!(
                    target: "gpuworld::stream",
                    consumer = ?device_stream, origin = origin_info.slot, through = origin_cursor,
                    "flushing origin: the consumer's next task uses what it wrote"
                );
                let event = self.device.flush(origin_info.device);
                self.device.wait_event(device_stream, event);
                tracing::debug!(
                    target: "gpuworld::stream",
                    consumer = ?device_stream, origin = origin_info.slot, ?event,
                    "stream waits on origin's event"
                );
                if let Some(recorder) = self.recorder.as_deref_mut() {
                    recorder.waited(origin_info.device, device_stream);
                }
            }
        }
    }

    /// Pins `shared` until the consumer's work so far has passed (the lifetime's step 2). (An
    /// event of a stream of the runtime's own that waited on the consumer's used to stand in
    /// between: it proved nothing
    /// more, and a caller that synced every stream still found memory pinned behind it, which a
    /// manual driver's next tick might never free: issue 30's leak.)
    fn pin_shared(&mut self, consumer: DeviceStream, shared: Vec<Entity>) {
        let consumer_event = self.device.flush(consumer);
        tracing::trace!(target: "gpuworld::memory", pins = shared.len(), "shared bindings pinned behind their consumer's event");
        self.pins
            .push(self.pinned.pin_behind(consumer_event, shared));
    }
}
