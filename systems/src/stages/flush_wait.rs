//! Stage 3, flush/wait: decides, in arrival order, which origin streams each task must wait on
//! (skipping origins this stream already synced with) and which streams must flush this tick
//! because a flush, sync or read was asked. Owns `LastSynced` and the queues' flush marks.
//! The event calls themselves are issued by the interleave stage, right after the origin's
//! work is submitted: an event must follow the work it proves done.

use crate::world::*;
use bevy_ecs::prelude::*;

/// Turns sync needs into waits and marks the streams that must flush.
pub fn decide_flush_and_waits(
    new: Res<NewTasks>,
    mut tasks: Query<&mut Task>,
    mut streams: Query<(&Stream, &mut LastSynced, &mut TaskQueue)>,
) {
    for &entity in &new.tasks {
        let Ok(mut task) = tasks.get_mut(entity) else {
            continue;
        };
        let task = task.as_mut();
        for (origin, cursor) in std::mem::take(&mut task.sync_needs) {
            let Ok((origin_stream, _, _)) = streams.get(origin) else {
                continue;
            };
            let origin_slot = origin_stream.slot;
            let Ok((consumer, mut synced, _)) = streams.get_mut(task.stream) else {
                continue;
            };
            if synced.get(origin_slot).is_some_and(|c| c >= cursor) {
                continue;
            }
            tracing::debug!(
                target: "gpuworld::stream",
                consumer = consumer.slot, origin = origin_slot, cursor,
                "waits on origin: it wrote a binding after the last sync"
            );
            synced.record(origin_slot, cursor);
            task.waits.push((origin, cursor));
            // The origin must reach this cursor before the consumer can wait on it.
            if let Ok((_, _, mut origin_queue)) = streams.get_mut(origin) {
                mark_flush(&mut origin_queue, cursor);
            }
        }
        let needs_results = matches!(
            task.work,
            Some(TaskWork::Flush | TaskWork::Sync(_) | TaskWork::Read(_))
        );
        if needs_results && let Ok((_, _, mut queue)) = streams.get_mut(task.stream) {
            mark_flush(&mut queue, task.cursor);
        }
    }
}

/// Requires the queue to be submitted at least through `cursor` this tick.
pub fn mark_flush(queue: &mut TaskQueue, cursor: u64) {
    queue.flush_through = Some(queue.flush_through.map_or(cursor, |c| c.max(cursor)));
}
