//! Stage 3, flush/wait: decides, in arrival order, which origin streams each task must wait on
//! (skipping origins this stream already synced with at or after the use, so a second use adds
//! no second wait) and which streams must flush this tick: the origin of a wait, and any stream
//! with a flush, sync or read. Owns `LastSynced` and the queues' flush marks.
//! The event calls themselves are issued by the interleave stage, right after the origin's work
//! is submitted: an event must follow the work it proves done.

use super::tick::TickStage;
use crate::world::*;
use bevy_ecs::prelude::*;
use smallvec::SmallVec;
/// For each origin slot, the origin cursor this stream has waited for.
#[derive(Component, Debug, Default)]
pub struct LastSynced(pub SmallVec<[(usize, u64); 4]>);

impl LastSynced {
    /// The cursor synced with `slot`, if ever.
    pub fn get(&self, slot: usize) -> Option<u64> {
        self.0.iter().find(|(s, _)| *s == slot).map(|(_, c)| *c)
    }

    /// Records a sync with `slot` at `cursor` (never moves backwards).
    pub fn record(&mut self, slot: usize, cursor: u64) {
        match self.0.iter_mut().find(|(s, _)| *s == slot) {
            Some((_, c)) => *c = (*c).max(cursor),
            None => {
                self.0.push((slot, cursor));
                self.0.sort_unstable();
            }
        }
    }
}

/// Registers the flush/wait stage: `LastSynced` on every stream, and its system.
pub fn build(world: &mut World, schedule: &mut Schedule) {
    world.register_required_components::<Stream, LastSynced>();
    schedule.add_systems(decide_flush_and_waits.in_set(TickStage::FlushWait));
}

/// Turns sync needs into waits and marks the streams that must flush.
pub fn decide_flush_and_waits(
    mut new: ResMut<NewTasks>,
    mut streams: Query<(&Stream, &mut LastSynced, &mut TaskQueue)>,
) {
    let _span = tracing::trace_span!(target: "gpuworld::stream", "flush/wait").entered();
    for task in &mut new.tasks {
        for need in std::mem::take(&mut task.sync_needs) {
            let Ok((origin_stream, _, _)) = streams.get(need.origin) else {
                continue;
            };
            let origin_slot = origin_stream.slot;
            let Ok((consumer, mut synced, _)) = streams.get_mut(task.stream) else {
                continue;
            };
            if synced.get(origin_slot).is_some_and(|c| c >= need.used_at) {
                continue;
            }
            tracing::debug!(
                target: "gpuworld::stream",
                consumer = consumer.slot, origin = origin_slot, used_at = need.used_at,
                through = need.through,
                "waits on origin: it used a shared binding after the last sync"
            );
            synced.record(origin_slot, need.through);
            task.waits.push((need.origin, need.through));
            if let Ok((_, _, mut origin_queue)) = streams.get_mut(need.origin) {
                mark_flush(&mut origin_queue, need.through);
            }
        }
        let needs_results = matches!(
            task.work,
            Some(
                TaskWork::Flush
                    | TaskWork::Sync(_)
                    | TaskWork::Read(_)
                    | TaskWork::Mark(_)
                    // Other devices' work may wait on it (a collective's other ranks).
                    | TaskWork::Native(_)
            )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_synced_never_moves_backwards_and_stays_sorted() {
        let mut synced = LastSynced::default();
        synced.record(2, 5);
        synced.record(0, 1);
        synced.record(2, 3);
        assert_eq!(synced.get(2), Some(5));
        assert_eq!(synced.get(1), None);
        assert_eq!(synced.0.as_slice(), &[(0, 1), (2, 5)]);
    }
}
