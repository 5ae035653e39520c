//! Building a [`Snapshot`] from the world: the lines the shared components and resources give
//! (streams, tasks, handles, memory), which each stage then completes with the facts it owns
//! (`stages::snapshot_lines`); names for streams, events and handles; every list sorted by id;
//! and handle contents read through the backend.

use super::{HandleLine, MemoryLine, Snapshot, SnapshotOptions, StreamLine, TaskLine, Values};
use crate::backend::{DeviceEvent, DeviceStream, Region};
use crate::ids::HandleId;
use crate::memory::MemoryPool;
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
}

/// The names of the device streams of `world`'s streams (`s0`, `gc`), for labelling backend
/// calls with the names snapshots use.
pub fn device_stream_names(world: &mut World) -> HashMap<DeviceStream, String> {
    StreamNames::of(world).by_device
}

/// A backend's view of an event: the device stream it follows and the operations before it.
pub type EventPosition<'a> = &'a dyn Fn(DeviceEvent) -> Option<(DeviceStream, u64)>;

/// The stages' part of a snapshot: each completes the lines with the facts it owns.
pub type StageLines = fn(&mut World, &mut Capture<'_>);

/// A snapshot being built, and the names its lines use. The shared lines come first; a stage
/// completes them (`stream_line`, `handle_line`) or adds its own (`add_handle`,
/// `add_in_flight`, `set_deferred_commands`).
pub struct Capture<'a> {
    snapshot: Snapshot,
    handles: Vec<(HandleId, HandleLine)>,
    streams: StreamNames,
    stream_lines: HashMap<Entity, usize>,
    handle_names: HashMap<Entity, String>,
    handle_lines: HashMap<Entity, usize>,
    event_position: EventPosition<'a>,
    event_label: &'a dyn Fn(DeviceEvent) -> String,
}

impl std::fmt::Debug for Capture<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capture")
            .field("tick", &self.snapshot.tick)
            .finish_non_exhaustive()
    }
}

impl Capture<'_> {
    /// The name of the stream `entity` (`s0`, `gc`; `?` for none).
    pub fn stream_name(&self, entity: Entity) -> String {
        self.streams
            .by_entity
            .get(&entity)
            .cloned()
            .unwrap_or_else(|| "?".to_string())
    }

    /// The name of the stream in `slot`.
    pub fn slot_name(&self, slot: usize) -> String {
        self.streams
            .by_slot
            .get(&slot)
            .cloned()
            .unwrap_or_else(|| "?".to_string())
    }

    /// The name of the handle `entity` (`h3`; `?` for none).
    pub fn handle_name(&self, entity: Entity) -> String {
        self.handle_names
            .get(&entity)
            .cloned()
            .unwrap_or_else(|| "?".to_string())
    }

    /// An event, by the stream and operation count it follows (`s0 op 2`) where the backend
    /// can place it, else by the backend's label.
    pub fn event(&self, event: DeviceEvent) -> String {
        match (self.event_position)(event) {
            Some((stream, ops)) => match self.streams.by_device.get(&stream) {
                Some(name) => format!("{name} op {ops}"),
                None => (self.event_label)(event),
            },
            None => (self.event_label)(event),
        }
    }

    /// The line of the stream `entity`, to complete.
    pub fn stream_line(&mut self, entity: Entity) -> Option<&mut StreamLine> {
        let line = *self.stream_lines.get(&entity)?;
        self.snapshot.streams.get_mut(line)
    }

    /// The line of the handle `entity`, to complete.
    pub fn handle_line(&mut self, entity: Entity) -> Option<&mut HandleLine> {
        let line = *self.handle_lines.get(&entity)?;
        self.handles.get_mut(line).map(|(_, line)| line)
    }

    /// The line of the handle `id`, entity or not, to complete.
    pub fn handle_line_by_id(&mut self, id: HandleId) -> Option<&mut HandleLine> {
        let name = id.to_string();
        self.handles
            .iter_mut()
            .find(|(handle, line)| *handle == id || line.id == name)
            .map(|(_, line)| line)
    }

    /// Adds the line of a handle that has no entity.
    pub fn add_handle(&mut self, id: HandleId, line: HandleLine) {
        self.handles.push((id, line));
    }

    /// Adds a line of work in flight.
    pub fn add_in_flight(&mut self, line: String) {
        self.snapshot.in_flight.push(line);
    }

    /// Sets the number of commands waiting for memory or arriving bytes.
    pub fn set_deferred_commands(&mut self, commands: usize) {
        self.snapshot.deferred_commands = commands;
    }
}

/// The lines of the streams: all but what the flush/wait stage adds (`synced`), in the order
/// the runtime opened them.
fn stream_lines(world: &mut World) -> Vec<(Entity, StreamLine)> {
    let mut streams: Vec<(u64, Entity, StreamLine)> = world
        .query::<(
            Entity,
            &Stream,
            &StreamCursor,
            &SubmittedCursor,
            &TaskQueue,
            &StreamFault,
        )>()
        .iter(world)
        .map(|(entity, s, c, sub, q, f)| {
            (
                s.ordinal,
                entity,
                StreamLine {
                    name: s.name(),
                    cursor: c.0,
                    submitted: sub.0,
                    queued: q.tasks.len(),
                    synced: Vec::new(),
                    fault: f.0.as_ref().map(ToString::to_string),
                },
            )
        })
        .collect();
    streams.sort_by_key(|(id, _, _)| *id);
    streams
        .into_iter()
        .map(|(_, entity, line)| (entity, line))
        .collect()
}

/// The lines of the tasks not yet handed to the device: this tick's and the queued ones.
fn task_lines(world: &mut World, capture: &Capture<'_>) -> Vec<TaskLine> {
    let mut tasks: Vec<TaskLine> = world
        .query::<&TaskQueue>()
        .iter(world)
        .flat_map(|queue| queue.tasks.iter())
        .chain(world.resource::<NewTasks>().tasks.iter())
        .map(|t| TaskLine {
            seq: t.seq,
            at: format!("{}@{}", capture.stream_name(t.stream), t.cursor),
            work: t
                .work
                .as_ref()
                .map_or("submitted".to_string(), TaskWork::label),
            bindings: t
                .bindings
                .iter()
                .map(|b| capture.handle_name(b.handle))
                .collect(),
            waits: t
                .waits
                .iter()
                .map(|(s, c)| format!("{}@{c}", capture.stream_name(*s)))
                .collect(),
        })
        .collect();
    tasks.sort_by_key(|t| t.seq);
    tasks
}

/// The lines of the handle entities: all but what the stages add (the last write and uses,
/// whether the GC stage holds it).
fn handle_lines(world: &mut World) -> Vec<(Entity, HandleId, HandleLine)> {
    let at = |r: &Region| format!("{}+{}", r.storage, r.offset);
    world
        .query::<(Entity, &HandleRecord, &Allocation, Has<Released>)>()
        .iter(world)
        .map(|(entity, record, allocation, released)| {
            let (memory, region) = match allocation {
                Allocation::Slice { region, .. } => (at(region), Some(*region)),
                Allocation::Parked { .. } => ("parked".to_string(), None),
                Allocation::Failed(e) => (format!("failed ({e})"), None),
            };
            let state = if released { "released" } else { "live" };
            (
                entity,
                record.id,
                HandleLine {
                    id: record.id.to_string(),
                    size: record.size,
                    memory,
                    written: String::new(),
                    uses: Vec::new(),
                    state: state.to_string(),
                    contents: None,
                    region,
                },
            )
        })
        .collect()
}

/// The memory line, and the pools' lines when `options` asks for them.
fn memory_lines(world: &World, options: &SnapshotOptions) -> (MemoryLine, Vec<String>) {
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
    (memory, pools)
}

/// Captures the world: the shared lines, then `stage_lines`; `event_label` names the backend's
/// events where `event_position` cannot place them on a stream.
pub fn capture(
    world: &mut World,
    event_position: EventPosition<'_>,
    event_label: &dyn Fn(DeviceEvent) -> String,
    options: &SnapshotOptions,
    stage_lines: StageLines,
) -> Snapshot {
    let streams = stream_lines(world);
    let handles = handle_lines(world);
    let (memory, pools) = memory_lines(world, options);
    let mut capture = Capture {
        snapshot: Snapshot {
            tick: world.resource::<TickCounter>().0,
            streams: Vec::new(),
            tasks: Vec::new(),
            deferred_commands: 0,
            in_flight: Vec::new(),
            handles: Vec::new(),
            memory,
            pools,
            backend_calls: Vec::new(),
        },
        handles: Vec::new(),
        streams: StreamNames::of(world),
        stream_lines: HashMap::new(),
        handle_names: HashMap::new(),
        handle_lines: HashMap::new(),
        event_position,
        event_label,
    };
    for (entity, line) in streams {
        capture
            .stream_lines
            .insert(entity, capture.snapshot.streams.len());
        capture.snapshot.streams.push(line);
    }
    for (entity, id, line) in handles {
        capture.handle_names.insert(entity, line.id.clone());
        capture.handle_lines.insert(entity, capture.handles.len());
        capture.handles.push((id, line));
    }
    capture.snapshot.tasks = task_lines(world, &capture);
    stage_lines(world, &mut capture);
    let Capture {
        mut snapshot,
        mut handles,
        ..
    } = capture;
    snapshot.in_flight.sort();
    handles.sort_by_key(|(id, _)| *id);
    snapshot.handles = handles.into_iter().map(|(_, h)| h).collect();
    snapshot
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
