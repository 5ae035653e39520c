//! `Runtime::snapshot()`: the tick, streams, tasks, in-flight work, handles and memory, sorted by
//! ids, as a [`Snapshot`] value: text by default (`Display`), or any serde format (`Serialize`),
//! so `insta` can redact it. A stream has one name everywhere (`s0`, `gc`: its `StreamId`'s), and
//! the text holds no internal keys, addresses, times or hash order.

use crate::backend::{DeviceEvent, DeviceStream, Region};
use crate::memory::MemoryPool;
use crate::stages::alignment::{Owner, Uses};
use crate::stages::flush_wait::LastSynced;
use crate::stages::gc::{AwaitingGc, PendingGc, PendingRead, PendingSync, PinnedHandles};
use crate::stages::ingest::{DeferredCommands, HandleIndex, HandleState, UsedOn};
use crate::world::*;
use bevy_ecs::prelude::*;
use serde::Serialize;
use std::collections::HashMap;
use std::fmt;

/// What a snapshot shows beyond its default lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SnapshotOptions {
    /// Show each memory pool's line and the open allocation-mode windows.
    pub pools: bool,
    /// Show the first elements of each handle, read from device memory where the backend can
    /// ([`crate::Backend::peek`]; the sim can: a device running work on
    /// other threads cannot be read safely mid-tick).
    pub contents: Option<Contents>,
}

impl SnapshotOptions {
    /// The default lines and the memory pools' lines.
    pub fn with_pools(mut self) -> SnapshotOptions {
        self.pools = true;
        self
    }

    /// The default lines and the first `elements` values of each handle, as `element`s.
    pub fn with_contents(mut self, elements: usize, element: Element) -> SnapshotOptions {
        self.contents = Some(Contents { elements, element });
        self
    }
}

/// How many elements of each handle a snapshot shows, and of what type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Contents {
    /// Elements shown from the start of each handle.
    pub elements: usize,
    /// Their type.
    pub element: Element,
}

/// The element type buffer contents are shown as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Element {
    /// 32-bit floats.
    F32,
    /// 32-bit unsigned integers.
    U32,
    /// 32-bit signed integers.
    I32,
    /// Bytes.
    U8,
}

impl Element {
    fn size(self) -> usize {
        match self {
            Element::U8 => 1,
            _ => 4,
        }
    }
}

/// The first elements of a handle, typed.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Values {
    /// 32-bit floats.
    F32(Vec<f32>),
    /// 32-bit unsigned integers.
    U32(Vec<u32>),
    /// 32-bit signed integers.
    I32(Vec<i32>),
    /// Bytes.
    U8(Vec<u8>),
}

impl Values {
    /// `bytes` as `element`s (a trailing partial element is left out).
    pub fn decode(bytes: &[u8], element: Element) -> Values {
        let words = || {
            bytes
                .chunks_exact(4)
                .map(|c| [c[0], c[1], c[2], c[3]])
                .collect::<Vec<_>>()
        };
        match element {
            Element::F32 => Values::F32(words().into_iter().map(f32::from_le_bytes).collect()),
            Element::U32 => Values::U32(words().into_iter().map(u32::from_le_bytes).collect()),
            Element::I32 => Values::I32(words().into_iter().map(i32::from_le_bytes).collect()),
            Element::U8 => Values::U8(bytes.to_vec()),
        }
    }
}

impl fmt::Display for Values {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn list<T: fmt::Debug>(f: &mut fmt::Formatter<'_>, values: &[T]) -> fmt::Result {
            let items: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
            write!(f, "[{}]", items.join(", "))
        }
        match self {
            Values::F32(v) => list(f, v),
            Values::U32(v) => list(f, v),
            Values::I32(v) => list(f, v),
            Values::U8(v) => list(f, v),
        }
    }
}

/// The runtime's state after a tick.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Snapshot {
    /// Ticks run so far.
    pub tick: u64,
    /// Every stream opened, by name.
    pub streams: Vec<StreamLine>,
    /// Tasks not yet handed to the device, in arrival order.
    pub tasks: Vec<TaskLine>,
    /// Commands waiting for released memory to retire.
    pub deferred_commands: usize,
    /// Reads, syncs and memory reclamations waiting for the device, sorted.
    pub in_flight: Vec<String>,
    /// Every live or retiring handle, by id.
    pub handles: Vec<HandleLine>,
    /// Memory in use and reserved.
    pub memory: MemoryLine,
    /// One line per memory pool and open allocation-mode window, when asked for.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<String>,
    /// The backend calls of the tick, when the snapshot comes from `gpuworld::testing`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub backend_calls: Vec<String>,
}

/// One stream of a [`Snapshot`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StreamLine {
    /// Its name (`s0`, `gc`).
    pub name: String,
    /// Tasks ever assigned to it.
    pub cursor: u64,
    /// Cursor of the last task handed to the device.
    pub submitted: u64,
    /// Tasks queued, not yet handed to the device.
    pub queued: usize,
    /// For each other stream, the cursor of it this stream has waited for (`s1@3`).
    pub synced: Vec<String>,
    /// The fault to be reported by the stream's next read or sync.
    pub fault: Option<String>,
}

/// One task of a [`Snapshot`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TaskLine {
    /// Arrival order across all streams.
    pub seq: u64,
    /// Its stream and cursor (`s0@2`).
    pub at: String,
    /// What it does (`launch fill`, `write 16B`).
    pub work: String,
    /// The handles it binds.
    pub bindings: Vec<String>,
    /// The stream cursors it waits for (`s1@1`).
    pub waits: Vec<String>,
}

/// One handle of a [`Snapshot`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HandleLine {
    /// Its id (`h0`).
    pub id: String,
    /// Requested bytes.
    pub size: u64,
    /// Where its bytes are: `storage#1+256`, `parked` (released, kept for its stream),
    /// `failed (why)`.
    pub memory: String,
    /// The stream and cursor of its last write (`s0@1`).
    pub written: String,
    /// The last use on each stream that used it (`s0@2`).
    pub uses: Vec<String>,
    /// `live`, `released`, `released, awaiting gc`, with `, pinned xN` while pinned.
    pub state: String,
    /// Its first elements, when asked for and readable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contents: Option<Values>,
    /// Where its bytes are on the device (read for `contents`).
    #[serde(skip)]
    pub region: Option<Region>,
}

/// The memory summary of a [`Snapshot`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MemoryLine {
    /// Live allocations.
    pub allocs: u64,
    /// Bytes requested by live allocations.
    pub in_use: u64,
    /// Bytes lost to alignment.
    pub padding: u64,
    /// Bytes held from the device.
    pub reserved: u64,
    /// Free slices in the pools.
    pub free_slices: usize,
    /// Released slices parked for their streams' later allocations.
    pub parked_slices: usize,
    /// Their bytes.
    pub parked_bytes: u64,
}

impl fmt::Display for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "tick {}", self.tick)?;
        writeln!(f, "streams:")?;
        for s in &self.streams {
            writeln!(
                f,
                "  {} cursor {} submitted {} queued {} synced [{}] fault {}",
                s.name,
                s.cursor,
                s.submitted,
                s.queued,
                s.synced.join(", "),
                s.fault.as_deref().unwrap_or("-")
            )?;
        }
        writeln!(f, "tasks:")?;
        for t in &self.tasks {
            writeln!(
                f,
                "  #{} {} {} [{}] waits [{}]",
                t.seq,
                t.at,
                t.work,
                t.bindings.join(", "),
                t.waits.join(", ")
            )?;
        }
        if self.deferred_commands > 0 {
            writeln!(
                f,
                "  waiting for released memory to retire: {} commands",
                self.deferred_commands
            )?;
        }
        writeln!(f, "in flight:")?;
        for line in &self.in_flight {
            writeln!(f, "  {line}")?;
        }
        writeln!(f, "handles:")?;
        for h in &self.handles {
            let at = if h.region.is_some() { "at " } else { "" };
            writeln!(
                f,
                "  {} {}B {at}{} written {} uses [{}] {}",
                h.id,
                h.size,
                h.memory,
                h.written,
                h.uses.join(", "),
                h.state
            )?;
            if let Some(values) = &h.contents {
                writeln!(f, "    = {values}")?;
            }
        }
        let m = &self.memory;
        write!(
            f,
            "memory: allocs {} in use {}B padding {}B reserved {}B free slices {}",
            m.allocs, m.in_use, m.padding, m.reserved, m.free_slices
        )?;
        if m.parked_slices > 0 {
            write!(f, " parked {} ({}B)", m.parked_slices, m.parked_bytes)?;
        }
        writeln!(f)?;
        for line in &self.pools {
            writeln!(f, "  {line}")?;
        }
        if !self.backend_calls.is_empty() {
            writeln!(f, "backend calls:")?;
            for line in &self.backend_calls {
                writeln!(f, "  {line}")?;
            }
        }
        Ok(())
    }
}

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
            let name = stream.id.to_string();
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

    let mut streams: Vec<(u64, StreamLine)> = world
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
                s.id.value,
                StreamLine {
                    name: s.id.to_string(),
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

    let mut in_flight: Vec<String> = world
        .query::<&PendingRead>()
        .iter(world)
        .map(|r| {
            let waiting = r.tickets.iter().filter(|t| t.is_some()).count();
            format!(
                "read on {} waiting for {waiting}/{} bindings",
                names.entity(&r.stream),
                r.tickets.len()
            )
        })
        .collect();
    in_flight.extend(world.query::<&PendingSync>().iter(world).map(|s| {
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
