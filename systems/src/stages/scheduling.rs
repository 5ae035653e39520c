//! Stage 4, scheduling: appends the new tasks to their streams' queues in arrival order and
//! marks a queue ready once it holds `max_tasks` tasks. Owns `TaskQueue::tasks`.

use super::flush_wait::mark_flush;
use crate::world::*;
use bevy_ecs::prelude::*;

/// Queues new tasks per stream and marks full queues ready.
pub fn queue_tasks(
    mut new: ResMut<NewTasks>,
    config: Res<RuntimeConfig>,
    mut queues: Query<&mut TaskQueue>,
) {
    for task in new.tasks.drain(..) {
        let Ok(mut queue) = queues.get_mut(task.stream) else {
            continue;
        };
        let cursor = task.cursor;
        queue.tasks.push_back(task);
        if queue.tasks.len() >= config.max_tasks {
            mark_flush(&mut queue, cursor);
        }
    }
}
