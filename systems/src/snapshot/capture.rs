//! Building a [`Snapshot`] from the world: names for streams, events and handles, every list
//! sorted by id, and handle contents read through the backend.

use super::{HandleLine, MemoryLine, Snapshot, SnapshotOptions, StreamLine, TaskLine, Values};
use crate::backend::{DeviceEvent, DeviceStream, Region};
use crate::memory::MemoryPool;
use crate::stages::alignment::{Owner, Uses};
use crate::stages::flush_wait::LastSynced;
use crate::stages::gc::{AwaitingGc, PendingGc, PendingReplies, PinnedHandles};
use crate::stages::ingest::{DeferredCommands, HandleIndex, HandleState, UsedOn};
use crate::world::*;
use bevy_ecs::prelude::*;
use std::collections::HashMap;

/// The names of the streams of `world`, by entity and by slot.
struct StreamNames {
    by_entity: HashMap<Entity, String>,
    by_slot: HashMap<usize, String>,
    by_device: HashMap<DeviceStream, String>,
}

impl StreamNames {
    fn of(world: &mut World) -> StreamNames {
        let mut names = StreamNames {
            by_entity: HashMap::new(),
            by_slot: HashMap::new(),
            by_device: HashMap::new(),
        };
        for (entity, stream) in world.query::<(Entity, &Stream)>().iter(world) {
            let name = stream.name();
            names.by_entity.insert(entity, name.clone());
            names.by_slot.insert(stream.slot, name.clone());
            names.by_device.insert(stream.device, name);
        }
        names
    }

    fn entity(&self, entity: &Entity) -> String {
        self.by_entity
            .get(entity)
            .cloned()
            .unwrap_or_else(|| "?".to_string())
    }

    fn slot(&self, slot: usize) -> String {
        self.by_slot
            .get(&slot)
            .cloned()
            .unwrap_or_else(|| "?".to_string())
    }
}

/// The names of the device streams of `world`'s streams (`s0`, `gc`), for labelling backend
/// calls with the names snapshots use.
pub fn device_stream_names(world: &mut World) -> HashMap<DeviceStream, String> {
    StreamNames::of(world).by_device
}

/// A backend's view of an event: the device stream it follows and the operations before it.
pub type EventPosition<'a> = &'a dyn Fn(DeviceEvent) -> Option<(DeviceStream, u64)>;

/// Captures the world; `event_label` names the backend's events where `event_position` cannot
/// place them on a stream.
pub fn capture(
    world: &mut World,
    event_position: EventPosition<'_>,
    event_label: &dyn Fn(DeviceEvent) -> String,
    options: &SnapshotOptions,
) -> Snapshot {
    let names = StreamNames::of(world);
    let event = |e: DeviceEvent| match event_position(e) {
        Some((stream, ops)) => match names.by_device.get(&stream) {
            Some(name) => format!("{name} op {ops}"),
            None => event_label(e),
        },
        None => event_label(e),
    };
    let tick = world.resource::<TickCounter>().0;
    let handle_of: HashMap<Entity, String> = world
        .query::<(Entity, &HandleRecord)>()
        .iter(world)
        .map(|(e, h)| (e, h.id.to_string()))
        .collect();
    let handle = |e: &Entity| handle_of.get(e).cloned().unwrap_or_else(|| "?".to_string());

    let mut streams: Vec<((bool, u64), StreamLine)> = world
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
            (
                (s.role == StreamRole::Gc, s.ordinal),
                StreamLine {
                    name: s.name(),
                    cursor: c.0,
                    submitted: sub.0,
                    queued: q.tasks.len(),
                    synced: synced
                        .0
                        .iter()
                        .map(|(s, c)| format!("{}@{c}", names.slot(*s)))
                        .collect(),
                    fault: f.0.as_ref().map(ToString::to_string),
                },
            )
        })
        .collect();
    streams.sort_by_key(|(id, _)| *id);

    let mut tasks: Vec<TaskLine> = world
        .query::<&TaskQueue>()
        .iter(world)
        .flat_map(|queue| queue.tasks.iter())
        .chain(world.resource::<NewTasks>().tasks.iter())
        .map(|t| TaskLine {
            seq: t.seq,
            at: format!("{}@{}", names.entity(&t.stream), t.cursor),
            work: t
                .work
                .as_ref()
                .map_or("submitted".to_string(), TaskWork::label),
            bindings: t.bindings.iter().map(|b| handle(&b.handle)).collect(),
            waits: t
                .waits
                .iter()
                .map(|(s, c)| format!("{}@{c}", names.entity(s)))
                .collect(),
        })
        .collect();
    tasks.sort_by_key(|t| t.seq);
    let deferred_commands = world.resource::<DeferredCommands>().0.len();

    let replies = world.resource::<PendingReplies>();
    let mut in_flight: Vec<String> = replies
        .reads
        .iter()
        .map(|r| {
            let waiting = r.tickets.iter().filter(|t| t.is_some()).count();
            format!(
                "read on {} waiting for {waiting}/{} bindings",
                names.entity(&r.stream),
                r.tickets.len()
            )
        })
        .collect();
    in_flight.extend(replies.syncs.iter().map(|s| {
        format!(
            "sync on {} until {}",
            names.entity(&s.stream),
            event(s.event)
        )
    }));
    in_flight.extend(world.query::<&PendingGc>().iter(world).map(|g| {
        let mut handles: Vec<String> = g.handles.iter().map(&handle).collect();
        handles.sort();
        let mut pins: Vec<String> = g.pins.iter().map(&handle).collect();
        pins.sort();
        let events: Vec<String> = g.events.iter().map(|e| event(*e)).collect();
        format!(
            "gc reclaims [{}] unpins [{}] after [{}]",
            handles.join(", "),
            pins.join(", "),
            events.join(", ")
        )
    }));
    in_flight.sort();

    let pinned: HashMap<Entity, u32> = world.resource::<PinnedHandles>().0.clone();
    let at = |r: &Region| format!("{}+{}", r.storage, r.offset);
    let mut handles: Vec<(crate::ids::HandleId, HandleLine)> = world
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
                let (memory, region) = match allocation {
                    Allocation::Slice { region, .. } => (at(region), Some(*region)),
                    Allocation::Parked { .. } => ("parked".to_string(), None),
                    Allocation::Failed(e) => (format!("failed ({e})"), None),
                };
                let mut uses: Vec<String> = uses
                    .0
                    .iter()
                    .map(|(s, c)| format!("{}@{c}", names.entity(s)))
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
                    HandleLine {
                        id: record.id.to_string(),
                        size: record.size,
                        memory,
                        written: format!("{}@{}", names.entity(&owner.stream), owner.cursor),
                        uses,
                        state,
                        contents: None,
                        region,
                    },
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
        let (memory, region) = match memory {
            Ok((_, region)) => (at(region), Some(*region)),
            Err(e) => (format!("failed ({e})"), None),
        };
        let uses = match entry.used_on {
            UsedOn::One(stream) => vec![format!("{}@{}", names.entity(&stream), created.cursor)],
            _ => Vec::new(),
        };
        handles.push((
            *id,
            HandleLine {
                id: id.to_string(),
                size: *size,
                memory,
                written: format!("{}@{}", names.entity(&created.stream), created.cursor),
                uses,
                state: "live".to_string(),
                contents: None,
                region,
            },
        ));
    }
    handles.sort_by_key(|(id, _)| *id);

    let pool = world.resource::<MemoryPool>();
    let usage = pool.usage();
    let (parked_slices, parked_bytes) = pool.parked();
    let memory = MemoryLine {
        allocs: usage.number_allocs,
        in_use: usage.bytes_in_use,
        padding: usage.bytes_padding,
        reserved: usage.bytes_reserved,
        free_slices: pool.free_slices(),
        parked_slices,
        parked_bytes,
    };
    let pools = if options.pools {
        pool.describe()
            .lines()
            .skip(1)
            .map(|line| line.trim_start().to_string())
            .collect()
    } else {
        Vec::new()
    };

    Snapshot {
        tick,
        streams: streams.into_iter().map(|(_, s)| s).collect(),
        tasks,
        deferred_commands,
        in_flight,
        handles: handles.into_iter().map(|(_, h)| h).collect(),
        memory,
        pools,
        backend_calls: Vec::new(),
    }
}

/// Fills each handle's `contents` with its first elements as `options` asks, reading through
/// `peek`; a handle whose bytes cannot be read keeps none.
pub fn fill_contents(
    snapshot: &mut Snapshot,
    options: &SnapshotOptions,
    mut peek: impl FnMut(Region) -> Option<Vec<u8>>,
) {
    let Some(contents) = options.contents else {
        return;
    };
    for handle in &mut snapshot.handles {
        let Some(region) = handle.region else {
            continue;
        };
        let bytes = (contents.elements * contents.element.size()) as u64;
        let shown = Region {
            size: region.size.min(bytes),
            ..region
        };
        handle.contents = peek(shown).map(|b| Values::decode(&b, contents.element));
    }
}
