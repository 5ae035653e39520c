//! Stage 2, alignment analysis: gives each new task its stream cursor and finds which other
//! streams wrote its inputs after this stream last synced with them. Owns `Owner` and `Uses`.

use crate::world::*;
use bevy_ecs::prelude::*;

/// Assigns cursors, records sync needs, and updates each binding's owner and uses.
pub fn analyze_alignment(
    new: Res<NewTasks>,
    mut tasks: Query<&mut Task>,
    mut cursors: Query<&mut StreamCursor>,
    streams: Query<(&Stream, &LastSynced)>,
    mut handles: Query<(&mut Owner, &mut Uses)>,
) {
    for &entity in &new.tasks {
        let Ok(mut task) = tasks.get_mut(entity) else {
            continue;
        };
        let Ok(mut cursor) = cursors.get_mut(task.stream) else {
            continue;
        };
        cursor.0 += 1;
        let now = cursor.0;
        task.cursor = now;
        let consumer = task.stream;
        let task = task.into_inner();
        for binding in &task.bindings {
            let Ok((mut owner, mut uses)) = handles.get_mut(binding.handle) else {
                continue;
            };
            if owner.stream != consumer {
                let origin_slot = streams.get(owner.stream).map(|(s, _)| s.slot);
                let synced = streams
                    .get(consumer)
                    .ok()
                    .and_then(|(_, synced)| synced.get(origin_slot.unwrap_or(usize::MAX)));
                if synced.is_none_or(|c| c < owner.cursor) {
                    tracing::trace!(
                        target: "gpuworld::stream",
                        origin = ?origin_slot, cursor = owner.cursor, synced = ?synced,
                        "binding written on another stream since the last sync"
                    );
                    match task.sync_needs.iter_mut().find(|(s, _)| *s == owner.stream) {
                        Some((_, c)) => *c = (*c).max(owner.cursor),
                        None => task.sync_needs.push((owner.stream, owner.cursor)),
                    }
                }
            }
            if binding.writes {
                *owner = Owner {
                    stream: consumer,
                    cursor: now,
                };
            }
            uses.record(consumer, now);
        }
    }
}
