//! Stage 3, flush/wait: decides, in arrival order, which origin streams each task must wait on,
//! skipping origins this stream already synced with at or after the use (so a second use adds
//! no second wait). Owns `LastSynced`, and with it the test of whether a wait is still needed.
//! Scheduling marks the origins to flush; the event calls themselves are issued by the
//! interleave stage, right after the origin's work is submitted: an event must follow the work
//! it proves done.

use super::tick::TickStage;
use crate::snapshot::Capture;
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

    /// Whether this stream already waited for the stream in `slot` at or after its cursor
    /// `used_at`: then work it did up to there needs no new wait.
    pub fn covers(&self, slot: usize, used_at: u64) -> bool {
        self.get(slot).is_some_and(|c| c >= used_at)
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
    schedule.add_systems(decide_waits.in_set(TickStage::FlushWait));
}

/// Turns sync needs into waits.
pub fn decide_waits(mut new: ResMut<NewTasks>, mut streams: Query<(&Stream, &mut LastSynced)>) {
    let _span = tracing::trace_span!(target: "gpuworld::stream", "flush/wait").entered();
    for task in &mut new.tasks {
        for need in std::mem::take(&mut task.sync_needs) {
            let Ok((origin_stream, _)) = streams.get(need.origin) else {
                continue;
            };
            let origin_slot = origin_stream.slot;
            let Ok((consumer, mut synced)) = streams.get_mut(task.stream) else {
                continue;
            };
            if synced.covers(origin_slot, need.used_at) {
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
        }
    }
}

/// How far each stream has waited for each other one, on its snapshot line (`s1@3`).
pub(super) fn snapshot_lines(world: &mut World, capture: &mut Capture<'_>) {
    for (entity, synced) in world.query::<(Entity, &LastSynced)>().iter(world) {
        let synced: Vec<String> = synced
            .0
            .iter()
            .map(|(slot, cursor)| format!("{}@{cursor}", capture.slot_name(*slot)))
            .collect();
        if let Some(line) = capture.stream_line(entity) {
            line.synced = synced;
        }
    }
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
