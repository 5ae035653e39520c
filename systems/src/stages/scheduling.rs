//! Stage 4, scheduling: appends the new tasks to their streams' queues in arrival order and
//! marks how far each queue must be submitted this tick: through a flush, sync, read, mark or
//! native task; through what another stream waits for; whole once it holds `max_tasks` tasks or
//! while commands wait for memory. Owns `TaskQueue::tasks` and the queues' flush marks.

use super::ingest::DeferredCommands;
use super::tick::TickStage;
use crate::world::*;
use bevy_ecs::prelude::*;

/// Registers the scheduling stage's system.
pub fn build(_world: &mut World, schedule: &mut Schedule) {
    schedule.add_systems(queue_tasks.in_set(TickStage::Scheduling));
}

/// Queues new tasks per stream and marks the queues that must be submitted: through a task
/// whose results are wanted, through what another stream waits for, and whole once full; while
/// commands wait for released memory, every queue, so that the work holding that memory runs
/// and it can retire.
pub fn queue_tasks(
    mut new: ResMut<NewTasks>,
    config: Res<RuntimeConfig>,
    deferred: Res<DeferredCommands>,
    mut queues: Query<&mut TaskQueue>,
    mut waited_for: Local<Vec<(Entity, u64)>>,
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
            let results_wanted = results_wanted(&task);
            waited_for.extend_from_slice(&task.waits);
            queue.tasks.push_back(task);
            if results_wanted || queue.tasks.len() >= config.max_tasks {
                mark_flush(queue, cursor);
            }
            next = tasks.next_if(|t| t.stream == stream);
        }
    }
    // The origins of this tick's waits: their events follow their work up to the wait.
    for (origin, through) in waited_for.drain(..) {
        if let Ok(mut queue) = queues.get_mut(origin) {
            mark_flush(&mut queue, through);
        }
    }
    if deferred.wait_for_memory() {
        for mut queue in &mut queues {
            if let Some(last) = queue.tasks.back().map(|t| t.cursor) {
                mark_flush(&mut queue, last);
            }
        }
    }
}

/// Whether someone waits for `task`'s results this tick: the host (a flush, sync, read or mark)
/// or other devices (a native task: a collective's other ranks).
fn results_wanted(task: &Task) -> bool {
    matches!(
        task.work,
        Some(
            TaskWork::Flush
                | TaskWork::Sync(_)
                | TaskWork::Read(_)
                | TaskWork::Mark(_)
                | TaskWork::Native(_)
        )
    )
}

/// Requires the queue to be submitted at least through `cursor` this tick.
fn mark_flush(queue: &mut TaskQueue, cursor: u64) {
    queue.flush_through = Some(queue.flush_through.map_or(cursor, |c| c.max(cursor)));
}
