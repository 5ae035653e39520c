//! Stage 2, alignment analysis: gives each new task its stream cursor and finds the other
//! streams it depends on: the last writer of each binding (read after write) and, for bindings it
//! writes, every other stream that used them (write after read or write), unless this stream
//! already synced with them at or after that use. Owns `Owner` and `Uses`.

use crate::world::*;
use bevy_ecs::prelude::*;

/// Assigns cursors, records sync needs and shared handles, and updates owners and uses.
pub fn analyze_alignment(
    mut new: ResMut<NewTasks>,
    mut cursors: Query<&mut StreamCursor>,
    streams: Query<(&Stream, &LastSynced)>,
    mut handles: Query<(&mut Owner, &mut Uses)>,
) {
    for task in &mut new.tasks {
        let Ok(mut cursor) = cursors.get_mut(task.stream) else {
            continue;
        };
        cursor.0 += 1;
        let now = cursor.0;
        task.cursor = now;
        let consumer = task.stream;
        for index in 0..task.bindings.len() {
            let binding = task.bindings[index];
            let Ok((mut owner, mut uses)) = handles.get_mut(binding.handle) else {
                continue;
            };
            let depends_on = |origin: Entity, used_at: u64, task: &mut Task| {
                if origin == consumer {
                    return;
                }
                let Ok((origin_stream, _)) = streams.get(origin) else {
                    return;
                };
                let synced = streams
                    .get(consumer)
                    .ok()
                    .and_then(|(_, synced)| synced.get(origin_stream.slot));
                if synced.is_some_and(|c| c >= used_at) {
                    return;
                }
                let through = cursors.get(origin).map_or(used_at, |c| c.0);
                tracing::trace!(
                    target: "gpuworld::stream",
                    origin = origin_stream.slot, used_at, ?synced,
                    "binding used on another stream since the last sync"
                );
                task.record_need(origin, used_at, through, binding.handle);
            };
            depends_on(owner.stream, owner.cursor, task);
            if binding.writes {
                for &(stream, used_at) in &uses.0 {
                    depends_on(stream, used_at, task);
                }
                *owner = Owner {
                    stream: consumer,
                    cursor: now,
                };
            }
            uses.record(consumer, now);
        }
    }
}
