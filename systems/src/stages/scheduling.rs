//! Stage 4, scheduling: appends the new tasks to their streams' queues in arrival order and
//! marks a queue ready once it holds `max_tasks` tasks, or whenever commands wait for memory.
//! Owns `TaskQueue::tasks`.

use super::flush_wait::mark_flush;
use super::ingest::DeferredCommands;
use super::tick::TickStage;
use crate::world::*;
use bevy_ecs::prelude::*;

/// Registers the scheduling stage's system.
pub fn build(_world: &mut World, schedule: &mut Schedule) {
    schedule.add_systems(queue_tasks.in_set(TickStage::Scheduling));
}

/// Queues new tasks per stream and marks full queues ready; while commands wait for released
/// memory, every queue, so that the work holding that memory runs and it can retire.
pub fn queue_tasks(
    mut new: ResMut<NewTasks>,
    config: Res<RuntimeConfig>,
    deferred: Res<DeferredCommands>,
    mut queues: Query<&mut TaskQueue>,
) {
    let _span = tracing::trace_span!(target: "gpuworld::stream", "scheduling").entered();
    // New tasks come in runs on one stream: each run looks its queue up once.
    let mut tasks = new.tasks.drain(..).peekable();
    while let Some(first) = tasks.next() {
        let stream = first.stream;
        let Ok(mut queue) = queues.get_mut(stream) else {
            continue;
        };
        let queue = &mut *queue;
        let mut next = Some(first);
        while let Some(task) = next {
            let cursor = task.cursor;
            queue.tasks.push_back(task);
            if queue.tasks.len() >= config.max_tasks {
                mark_flush(queue, cursor);
            }
            next = tasks.next_if(|t| t.stream == stream);
        }
    }
    if !deferred.0.is_empty() {
        for mut queue in &mut queues {
            if let Some(last) = queue.tasks.back().map(|t| t.cursor) {
                mark_flush(&mut queue, last);
            }
        }
    }
}
