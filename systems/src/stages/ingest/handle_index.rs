//! The ingest stage's index of live handles: a handle's facts live in its entry until a task
//! first uses it (handles no work uses cost no entity), then on its entity. A release hands the
//! handle's memory to the lifetime's step 1 (`stages/lifetime.rs`).

use crate::backend::Region;
use crate::binding::Binding;
use crate::error::{BindingError, Error};
use crate::ids::HandleId;
use crate::memory::{MemoryPool, SliceKey};
use crate::snapshot::{Capture, HandleLine};
use crate::stages::alignment::{self, Owner};
use crate::stages::lifetime::{self, Freed, UsedOn};
use crate::world::*;
use bevy_ecs::prelude::*;

/// What the ingest stage knows about each live handle, by id.
#[derive(Clone, Debug)]
pub struct HandleEntry {
    /// Where the handle's facts live.
    pub state: HandleState,
    /// The streams whose tasks used its memory, counted as ingest creates the tasks (alignment
    /// records the same uses in `Uses`, with cursors, a stage later, so a release in the same
    /// drain cannot read them there): how its release may go.
    pub used_on: UsedOn,
    /// Captured graphs and render leases holding the handle (`Op::Pin`): while any does, a
    /// release only marks it, and the last unpin releases it.
    pub pins: u32,
    /// How many of `pins` are render leases (for snapshots).
    pub lease_pins: u32,
    /// The user released the handle while a graph held it.
    pub released_while_pinned: bool,
}

/// A handle's facts: in its index entry until a task first uses it, then on its entity only.
#[derive(Clone, Debug)]
pub enum HandleState {
    /// No task used the handle: it has no entity (allocate-and-drop loops are common), and this
    /// is the only home of its facts.
    Unspawned {
        /// Requested size in bytes.
        size: u64,
        /// Its pool slice and the bytes it covers in a backend buffer (bindings are offset
        /// from `region.offset`), or why the allocation failed.
        memory: std::result::Result<(SliceKey, Region), Error>,
        /// The stream it was created on, at that stream's cursor then: its first owner.
        created: Owner,
    },
    /// The handle entity: `HandleRecord`, `Allocation`, `Owner` and `Uses` hold its facts.
    Spawned {
        /// The entity.
        entity: Entity,
        /// Its pool slice, as in its `Allocation` (which changes only at release): what the
        /// release hands to the lifetime, known even while the entity's spawn is pending.
        slice: SliceKey,
        /// The bytes its slice covers, read by every binding of the handle: fixed while the
        /// handle lives (its `Allocation` changes only at release, when the entry goes), and
        /// reading it from the entity instead cost ~80 instructions per binding (measured).
        region: Region,
    },
}

/// Live handles by id (ids are dense integers: a multiply-hash is enough); an entry goes when
/// the user releases the handle.
#[derive(Debug, Resource, Default)]
pub struct HandleIndex(pub rustc_hash::FxHashMap<HandleId, HandleEntry>);

impl HandleIndex {
    /// The device bytes `binding` names, checked as ingest checks a user's binding: its range,
    /// its handle still live (not released, pinned or not), its allocation made, the range
    /// inside the memory it has.
    pub fn region(&self, binding: &Binding) -> std::result::Result<Region, Error> {
        let (start, end) = binding.range()?;
        let entry = (self.0.get(&binding.handle()))
            .filter(|entry| !entry.released_while_pinned)
            .ok_or(Error::Binding(BindingError::ReleasedHandle {
                handle: binding.handle(),
            }))?;
        region_in(binding.handle(), entry.state.memory()?, start, end)
    }
}

impl HandleState {
    /// The bytes the handle's slice covers, or why its allocation failed.
    pub fn memory(&self) -> std::result::Result<Region, Error> {
        match self {
            HandleState::Spawned { region, .. } => Ok(*region),
            HandleState::Unspawned { memory, .. } => {
                memory.as_ref().map(|m| m.1).map_err(Clone::clone)
            }
        }
    }
}

/// The bytes `start..end` of `handle`, whose slice covers `memory`. The range is checked
/// against the memory the handle really has, not only against the capacity its binding claims:
/// a binding comes only from a handle, but one that claimed more would otherwise reach a
/// neighbour's bytes (issue 27).
#[inline]
pub(super) fn region_in(
    handle: HandleId,
    memory: Region,
    start: u64,
    end: u64,
) -> std::result::Result<Region, Error> {
    if end > memory.size {
        return Err(Error::Binding(BindingError::OutOfRange {
            handle,
            start,
            end,
            size: memory.size,
        }));
    }
    Ok(Region {
        storage: memory.storage,
        offset: memory.offset + start,
        size: end - start,
    })
}

/// The entity of a handle first used now, from its index entry's facts: its record,
/// allocation, first owner, and the use it inherits from memory its stream parked (that
/// stream's earlier work may still touch it). An entity's state spawns nothing new.
pub(super) fn spawn_handle(
    commands: &mut Commands,
    id: HandleId,
    state: HandleState,
    used_on: UsedOn,
) -> Entity {
    let (size, memory, created) = match state {
        HandleState::Spawned { entity, .. } => return entity,
        HandleState::Unspawned {
            size,
            memory,
            created,
        } => (size, memory, created),
    };
    let allocation = match memory {
        Ok((slice, region)) => Allocation::Slice { slice, region },
        Err(error) => Allocation::Failed(error),
    };
    let inherited = match used_on {
        UsedOn::One(stream) => Some(stream),
        UsedOn::Nothing | UsedOn::Several => None,
    };
    let (owner, uses) = alignment::first_owner_and_uses(created, inherited);
    commands
        .spawn((HandleRecord { id, size }, allocation, owner, uses))
        .id()
}

/// Releases a handle the user dropped, in arrival order, through the lifetime's step 1
/// (`lifetime::release`); a failed allocation holds no memory, and only its entity goes. Whether
/// the memory went back now.
pub(super) fn release(
    commands: &mut Commands,
    pool: &mut MemoryPool,
    id: HandleId,
    entry: HandleEntry,
) -> Freed {
    let (slice, entity) = match &entry.state {
        HandleState::Unspawned { memory, .. } => match memory {
            Ok((slice, _)) => (*slice, None),
            Err(_) => return Freed::NothingHeld,
        },
        // A spawned handle's allocation succeeded: only a use spawns it.
        HandleState::Spawned { entity, slice, .. } => (*slice, Some(*entity)),
    };
    let used_on = entry.used_on;
    lifetime::release(commands, pool, slice, entity, used_on, |commands| {
        spawn_handle(commands, id, entry.state, used_on)
    })
}

/// The lines of the handles no work used yet: they have no entity, their index entry holds what
/// the line shows.
pub(super) fn snapshot_lines(world: &mut World, capture: &mut Capture<'_>) {
    let pinned: Vec<(HandleId, u32, u32, bool)> = world
        .resource::<HandleIndex>()
        .0
        .iter()
        .filter(|(_, entry)| entry.pins > 0)
        .map(|(id, entry)| {
            let graphs = entry.pins.saturating_sub(entry.lease_pins);
            (*id, graphs, entry.lease_pins, entry.released_while_pinned)
        })
        .collect();
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
            Ok((_, region)) => (
                format!("{}+{}", region.storage, region.offset),
                Some(*region),
            ),
            Err(e) => (format!("failed ({e})"), None),
        };
        let uses = match entry.used_on {
            UsedOn::One(stream) => vec![format!(
                "{}@{}",
                capture.stream_name(stream),
                created.cursor
            )],
            _ => Vec::new(),
        };
        capture.add_handle(
            *id,
            HandleLine {
                id: id.to_string(),
                size: *size,
                memory,
                written: format!("{}@{}", capture.stream_name(created.stream), created.cursor),
                uses,
                state: "live".to_string(),
                contents: None,
                region,
            },
        );
    }
    // A handle a captured graph or a render lease holds says so, and whether its user let go.
    for (id, graphs, leases, released) in pinned {
        if let Some(line) = capture.handle_line_by_id(id) {
            let count = |n: u32, one: &str, many: &str| match n {
                0 => None,
                1 => Some(format!("1 {one}")),
                n => Some(format!("{n} {many}")),
            };
            let holders = [
                count(graphs, "graph", "graphs"),
                count(leases, "lease", "leases"),
            ];
            let holders: Vec<String> = holders.into_iter().flatten().collect();
            let holders = holders.join(" and ");
            line.state = match released {
                true => format!("released, held by {holders}"),
                false => format!("{}, held by {holders}", line.state),
            };
        }
    }
}
