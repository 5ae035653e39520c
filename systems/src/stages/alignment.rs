//! Stage 2, alignment analysis: gives each new task its stream cursor and finds the other
//! streams it depends on: the last writer of each binding (read after write) and, for bindings it
//! writes, every other stream that used them (write after read or write), unless this stream
//! already synced with them at or after that use. Owns `Owner` and `Uses`.

use super::flush_wait::LastSynced;
use super::tick::TickStage;
use crate::snapshot::Capture;
use crate::world::*;
use bevy_ecs::prelude::*;
use smallvec::SmallVec;
/// The stream and cursor of the last task that wrote the handle.
#[derive(Component, Debug, Clone, Copy)]
pub struct Owner {
    /// The stream entity.
    pub stream: Entity,
    /// That stream's cursor at the write.
    pub cursor: u64,
}

/// For each stream that used the handle, the cursor of its last use.
#[derive(Component, Debug, Default)]
pub struct Uses(pub SmallVec<[(Entity, u64); 2]>);

impl Uses {
    /// Records a use on `stream` at `cursor`.
    pub fn record(&mut self, stream: Entity, cursor: u64) {
        match self.0.iter_mut().find(|(s, _)| *s == stream) {
            Some((_, c)) => *c = (*c).max(cursor),
            None => self.0.push((stream, cursor)),
        }
    }
}

/// The `Owner` and `Uses` a handle entity starts with, which ingest spawns it with (a one-way
/// handoff: alignment alone changes them afterwards): its creation, at `created`'s cursor, is its
/// first write; memory it took parked from `inherited` counts as that stream's use at the same
/// cursor, since that stream's earlier work may still touch it.
pub fn first_owner_and_uses(created: Owner, inherited: Option<Entity>) -> (Owner, Uses) {
    let mut uses = Uses::default();
    if let Some(stream) = inherited {
        uses.record(stream, created.cursor);
    }
    (created, uses)
}

/// Registers the alignment stage's system (`Owner` and `Uses` come with the handle entities
/// ingest spawns, from [`first_owner_and_uses`]).
pub fn build(_world: &mut World, schedule: &mut Schedule) {
    schedule.add_systems(analyze_alignment.in_set(TickStage::AlignmentAnalysis));
}

/// Assigns cursors, records sync needs and shared handles, and updates owners and uses.
pub fn analyze_alignment(
    mut new: ResMut<NewTasks>,
    mut cursors: Query<&mut StreamCursor>,
    streams: Query<(&Stream, &LastSynced)>,
    mut handles: Query<(&mut Owner, &mut Uses)>,
) {
    let _span = tracing::trace_span!(target: "gpuworld::stream", "alignment analysis").entered();
    for task in &mut new.tasks {
        let Ok(mut cursor) = cursors.get_mut(task.stream) else {
            continue;
        };
        cursor.0 += 1;
        let now = cursor.0;
        task.cursor = now;
        let consumer = task.stream;
        for index in 0..task.bindings.len() {
            let TaskBinding { handle, writes, .. } = task.bindings[index];
            let Ok((mut owner, mut uses)) = handles.get_mut(handle) else {
                continue;
            };
            // The single-stream path only compares entities; other streams' uses go through
            // `depend_on`, which finds out whether this stream already synced with them.
            if owner.stream != consumer {
                depend_on(&streams, &cursors, task, owner.stream, owner.cursor, handle);
            }
            if writes {
                for &(stream, used_at) in &uses.0 {
                    if stream != consumer {
                        depend_on(&streams, &cursors, task, stream, used_at, handle);
                    }
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

/// Records that `task` must wait for `origin`'s use of `handle` at `used_at`, unless the task's
/// stream already synced with `origin` at or after it.
#[cold]
fn depend_on(
    streams: &Query<(&Stream, &LastSynced)>,
    cursors: &Query<&mut StreamCursor>,
    task: &mut Task,
    origin: Entity,
    used_at: u64,
    handle: Entity,
) {
    let Ok((origin_stream, _)) = streams.get(origin) else {
        return;
    };
    let synced = streams.get(task.stream).ok().map(|(_, synced)| synced);
    if synced.is_some_and(|synced| synced.covers(origin_stream.slot, used_at)) {
        return;
    }
    let through = cursors.get(origin).map_or(used_at, |c| c.0);
    tracing::trace!(
        target: "gpuworld::stream",
        origin = origin_stream.slot, used_at, synced = ?synced.and_then(|s| s.get(origin_stream.slot)),
        "binding used on another stream since the last sync"
    );
    task.record_need(origin, used_at, through, handle);
}

/// A handle's last write and its uses, on its snapshot line.
pub(super) fn snapshot_lines(world: &mut World, capture: &mut Capture<'_>) {
    for (entity, owner, uses) in world.query::<(Entity, &Owner, &Uses)>().iter(world) {
        let written = format!("{}@{}", capture.stream_name(owner.stream), owner.cursor);
        let mut uses: Vec<String> = uses
            .0
            .iter()
            .map(|(s, c)| format!("{}@{c}", capture.stream_name(*s)))
            .collect();
        uses.sort();
        if let Some(line) = capture.handle_line(entity) {
            line.written = written;
            line.uses = uses;
        }
    }
}
