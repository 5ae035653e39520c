//! `Runtime::snapshot()`: the tick, streams, tasks, in-flight work, handles and memory as
//! stable text sorted by ids, so that `insta` snapshots read like a report.

use crate::backend::DeviceEvent;
use crate::memory::MemoryPool;
use crate::stages::alignment::{Owner, Uses};
use crate::stages::flush_wait::LastSynced;
use crate::stages::gc::{AwaitingGc, PendingGc, PendingRead, PendingSync, PinnedHandles};
use crate::stages::ingest::{DeferredCommands, HandleIndex, HandleState, UsedOn};
use crate::world::*;
use bevy_ecs::prelude::*;
use std::collections::HashMap;
use std::fmt::Write;

fn slot_name(slot: usize) -> String {
    if slot == GC_SLOT {
        "gc".to_string()
    } else {
        format!("s{slot}")
    }
}

/// Renders the world; `event_label` names the backend's events.
pub fn render(world: &mut World, event_label: &dyn Fn(DeviceEvent) -> String) -> String {
    let mut out = String::new();
    let tick = world.resource::<TickCounter>().0;
    let _ = writeln!(out, "tick {tick}");

    let slot_of: HashMap<Entity, usize> = world
        .query::<(Entity, &Stream)>()
        .iter(world)
        .map(|(e, s)| (e, s.slot))
        .collect();
    let slot = |e: &Entity| slot_of.get(e).map_or("?".to_string(), |&s| slot_name(s));
    let handle_of: HashMap<Entity, String> = world
        .query::<(Entity, &HandleRecord)>()
        .iter(world)
        .map(|(e, h)| (e, h.id.to_string()))
        .collect();
    let handle = |e: &Entity| handle_of.get(e).cloned().unwrap_or_else(|| "?".to_string());

    let _ = writeln!(out, "streams:");
    let mut streams: Vec<_> = world
        .query::<(
            &Stream,
            &StreamCursor,
            &SubmittedCursor,
            &LastSynced,
            &TaskQueue,
            &StreamFault,
        )>()
        .iter(world)
        .map(|(s, c, sub, synced, q, f)| {
            let synced: Vec<String> = synced.0.iter().map(|(s, c)| format!("s{s}@{c}")).collect();
            let fault = f.0.as_ref().map_or("-".to_string(), |e| e.to_string());
            (
                s.slot,
                format!(
                    "  {} ({:?}, {}) cursor {} submitted {} queued {} synced [{}] fault {}",
                    slot_name(s.slot),
                    s.role,
                    s.id,
                    c.0,
                    sub.0,
                    q.tasks.len(),
                    synced.join(", "),
                    fault
                ),
            )
        })
        .collect();
    streams.sort();
    for (_, line) in streams {
        let _ = writeln!(out, "{line}");
    }

    let _ = writeln!(out, "tasks:");
    let mut tasks: Vec<_> = world
        .query::<&TaskQueue>()
        .iter(world)
        .flat_map(|queue| queue.tasks.iter())
        .chain(world.resource::<NewTasks>().tasks.iter())
        .map(|t| {
            let bindings: Vec<String> = t.bindings.iter().map(|b| handle(&b.handle)).collect();
            let waits: Vec<String> = t
                .waits
                .iter()
                .map(|(s, c)| format!("{}@{c}", slot(s)))
                .collect();
            (
                t.seq,
                format!(
                    "  #{} {}@{} {} [{}] waits [{}]",
                    t.seq,
                    slot(&t.stream),
                    t.cursor,
                    t.work
                        .as_ref()
                        .map_or("submitted".to_string(), TaskWork::label),
                    bindings.join(", "),
                    waits.join(", ")
                ),
            )
        })
        .collect();
    tasks.sort_by_key(|(seq, _)| *seq);
    for (_, line) in tasks {
        let _ = writeln!(out, "{line}");
    }
    let deferred = world.resource::<DeferredCommands>().0.len();
    if deferred > 0 {
        let _ = writeln!(
            out,
            "  waiting for released memory to retire: {deferred} commands"
        );
    }

    let _ = writeln!(out, "in flight:");
    let mut flight: Vec<String> = world
        .query::<&PendingRead>()
        .iter(world)
        .map(|r| {
            let waiting = r.tickets.iter().filter(|t| t.is_some()).count();
            format!(
                "  read on {} waiting for {waiting}/{} bindings",
                slot(&r.stream),
                r.tickets.len()
            )
        })
        .collect();
    flight.extend(world.query::<&PendingSync>().iter(world).map(|s| {
        format!(
            "  sync on {} until event {}",
            slot(&s.stream),
            event_label(s.event)
        )
    }));
    flight.extend(world.query::<&PendingGc>().iter(world).map(|g| {
        let mut handles: Vec<String> = g.handles.iter().map(&handle).collect();
        handles.sort();
        let mut pins: Vec<String> = g.pins.iter().map(&handle).collect();
        pins.sort();
        let events: Vec<String> = g.events.iter().map(|e| event_label(*e)).collect();
        format!(
            "  gc reclaims [{}] unpins [{}] after [{}]",
            handles.join(", "),
            pins.join(", "),
            events.join(", ")
        )
    }));
    flight.sort();
    for line in flight {
        let _ = writeln!(out, "{line}");
    }

    let pinned: HashMap<Entity, u32> = world.resource::<PinnedHandles>().0.clone();
    let _ = writeln!(out, "handles:");
    let mut handles: Vec<_> = world
        .query::<(
            Entity,
            &HandleRecord,
            &Allocation,
            &Owner,
            &Uses,
            Has<Released>,
            Has<AwaitingGc>,
        )>()
        .iter(world)
        .map(
            |(entity, record, allocation, owner, uses, released, awaiting)| {
                let memory = match allocation {
                    Allocation::Slice { slice, .. } => format!("slice {slice:?}"),
                    Allocation::Parked { slice } => format!("slice {slice:?} parked"),
                    Allocation::Failed(e) => format!("failed ({e})"),
                };
                let mut uses: Vec<String> = uses
                    .0
                    .iter()
                    .map(|(s, c)| format!("{}@{c}", slot(s)))
                    .collect();
                uses.sort();
                let mut state = match (released, awaiting) {
                    (false, _) => "live",
                    (true, false) => "released",
                    (true, true) => "released, awaiting gc",
                }
                .to_string();
                if let Some(pins) = pinned.get(&entity) {
                    state.push_str(&format!(", pinned x{pins}"));
                }
                (
                    record.id,
                    format!(
                        "  {} {}B {} written {}@{} uses [{}] {}",
                        record.id,
                        record.size,
                        memory,
                        slot(&owner.stream),
                        owner.cursor,
                        uses.join(", "),
                        state
                    ),
                )
            },
        )
        .collect();
    // Handles no work used yet have no entity: the index holds what the line shows.
    for (id, entry) in &world.resource::<HandleIndex>().0 {
        let HandleState::Unspawned {
            size,
            memory,
            created,
        } = &entry.state
        else {
            continue;
        };
        let memory = match memory {
            Ok((slice, _)) => format!("slice {slice:?}"),
            Err(e) => format!("failed ({e})"),
        };
        let uses = match entry.used_on {
            UsedOn::One(stream) => format!("{}@{}", slot(&stream), created.cursor),
            _ => String::new(),
        };
        handles.push((
            *id,
            format!(
                "  {} {}B {} written {}@{} uses [{}] live",
                id,
                size,
                memory,
                slot(&created.stream),
                created.cursor,
                uses
            ),
        ));
    }
    handles.sort_by_key(|(id, _)| *id);
    for (_, line) in handles {
        let _ = writeln!(out, "{line}");
    }

    out.push_str(&world.resource::<MemoryPool>().describe());
    out
}
