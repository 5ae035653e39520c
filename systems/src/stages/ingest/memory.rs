//! Ingest's memory family: allocations (reserving from the pools, moving live handles a
//! compaction needs to), releases handed to the lifetime's step 1, allocation modes and cleanup
//! requests.

use super::drain::Ingest;
use super::handle_index::{HandleEntry, HandleState, release, spawn_handle};
use crate::backend::{Backend, Region};
use crate::bytes::HostBytes;
use crate::error::{Error, MemoryError};
use crate::ids::{HandleId, StreamId};
use crate::inbox::Op;
use crate::memory::{AllocationMode, Compaction, Movable, Moved, Reservation, SliceKey};
use crate::stages::alignment::Owner;
use crate::stages::lifetime::{Freed, UsedOn};
use crate::world::*;
use bevy_ecs::prelude::*;
use rustc_hash::FxHashMap;
use smallvec::SmallVec;

impl<B: Backend> Ingest<'_, '_, '_, B> {
    /// A new handle of `size` bytes on `stream_id`, written with `data` if given; the command
    /// back when it must wait for parked or retiring memory.
    pub(super) fn create(
        &mut self,
        handle: HandleId,
        size: u64,
        data: Option<HostBytes>,
        stream_id: StreamId,
    ) -> Option<Op> {
        let stream = self.stream_entity(stream_id);
        let must_wait = |data| {
            Some(Op::Create {
                handle,
                size,
                data,
                stream: stream_id,
            })
        };
        if self.pool.waits_for_parked(size, stream_id, stream) {
            return must_wait(data);
        }
        let (reserved, retiring) = self.reserve(size, stream_id, stream);
        let parked_by_stream = reserved.as_ref().is_ok_and(|r| r.parked_by_stream);
        if matches!(reserved, Err(MemoryError::OutOfMemory { .. }))
            && (retiring || self.memory_retiring())
        {
            return must_wait(data);
        }
        // The cursor of the stream's last task so far, this drain's included: a later
        // user of the handle on another stream waits for everything before its creation.
        let cursor = self.cursor_now(stream);
        let memory = reserved.map(|r| (r.slice, r.region)).map_err(Error::from);
        let mut used_on = UsedOn::Nothing;
        match &memory {
            // The stream's earlier work may still use memory it parked.
            Ok(_) if parked_by_stream => used_on.record(stream),
            Ok(_) => {}
            // The failure belongs to the handle: every use of it reports the error,
            // nothing else on the stream does.
            Err(error) => {
                tracing::warn!(target: "gpuworld::memory", %handle, size, %error, "allocation failed");
            }
        }
        let region = memory.as_ref().ok().map(|(_, region)| *region);
        let mut state = HandleState::Unspawned {
            size,
            memory,
            created: Owner { stream, cursor },
        };
        let entity = match (&data, &state) {
            (
                Some(_),
                HandleState::Unspawned {
                    memory: Ok((slice, region)),
                    ..
                },
            ) => {
                let (slice, region) = (*slice, *region);
                let entity = spawn_handle(self.commands, handle, state, used_on);
                state = HandleState::Spawned {
                    entity,
                    slice,
                    region,
                };
                used_on.record(stream);
                Some(entity)
            }
            _ => None,
        };
        self.index.insert(
            handle,
            HandleEntry {
                state,
                used_on,
                pins: 0,
                lease_pins: 0,
                released_while_pinned: false,
            },
        );
        if let (Some(data), Some(region), Some(entity)) = (data, region, entity) {
            let binding = TaskBinding {
                handle: entity,
                region,
                writes: true,
            };
            self.spawn_task(
                stream,
                TaskWork::Write(data),
                SmallVec::from_elem(binding, 1),
            );
        }
        None
    }

    /// Reserves `size` bytes for `stream`, moving live handles if a compaction needs to (their
    /// copies queued on `stream`); the reservation, and whether pages were retiring when it
    /// failed.
    fn reserve(
        &mut self,
        size: u64,
        stream_id: StreamId,
        stream: Entity,
    ) -> (Result<Reservation, MemoryError>, bool) {
        // Live handles a compaction may move, looked up only if one runs.
        let mut movable: Option<FxHashMap<SliceKey, (HandleId, Movable)>> = None;
        let mut moves = Vec::new();
        let reserved = {
            let index = &*self.index;
            let mut allows = |slice: SliceKey| {
                let handles = movable.get_or_insert_with(|| movable_handles(index));
                handles
                    .get(&slice)
                    .map_or(Movable::No, |&(_, movable)| movable)
            };
            self.pool.reserve_moving(
                self.device,
                size,
                stream_id,
                stream,
                Some(Compaction {
                    movable: &mut allows,
                    moves: &mut moves,
                    stream: Some(stream),
                }),
            )
        };
        let retiring = reserved.is_err() && self.pool.retiring() > 0;
        if let Some(handles) = &movable {
            self.apply_moves(stream, &moves, handles);
        }
        (reserved, retiring)
    }

    /// A handle the user dropped. One lookup on the common path (drop loops); a graph's pin
    /// puts it back, marked, for its last unpin to release.
    pub(super) fn release_handle(&mut self, handle: HandleId) {
        if let Some(entry) = self.index.remove(&handle) {
            if entry.pins > 0 {
                let entry = HandleEntry {
                    released_while_pinned: true,
                    ..entry
                };
                self.index.insert(handle, entry);
                return;
            }
            self.release_entry(handle, entry);
        }
    }

    /// Releases `handle`'s memory: back to the pool, parked for its stream, or to the GC stage.
    pub(super) fn release(&mut self, handle: HandleId) {
        if let Some(entry) = self.index.remove(&handle) {
            self.release_entry(handle, entry);
        }
    }

    /// Hands a released handle's memory to the lifetime's step 1, counting what went back now.
    pub(super) fn release_entry(&mut self, handle: HandleId, entry: HandleEntry) {
        match release(self.commands, self.pool, handle, entry) {
            Freed::Now => self.reclaimed += 1,
            Freed::Later => self.released_to_lifetime = true,
            Freed::NothingHeld => {}
        }
    }

    /// Whether released memory is still on its way back to the pools: an allocation that found
    /// none may succeed once it has retired.
    pub(super) fn memory_retiring(&self) -> bool {
        self.released_to_lifetime || !self.released.is_empty()
    }

    /// Opens an allocation-mode window on `stream`.
    pub(super) fn open_mode(&mut self, stream: StreamId, mode: AllocationMode) {
        self.pool.modes_mut().push(stream, mode);
    }

    /// Closes `stream`'s innermost allocation-mode window.
    pub(super) fn close_mode(&mut self, stream: StreamId) {
        if !self.pool.modes_mut().pop(stream) {
            tracing::warn!(target: "gpuworld::memory", %stream, "closing an allocation mode window that is not open");
        }
    }

    /// Points every handle a compaction moved at its new place and, where work wrote its bytes,
    /// queues their copy on `stream` (the allocating stream): after every earlier use of the
    /// handle (alignment makes the copy wait for other streams' uses, as for any write) and
    /// before every later one.
    fn apply_moves(
        &mut self,
        stream: Entity,
        moves: &[Moved],
        handles: &FxHashMap<SliceKey, (HandleId, Movable)>,
    ) {
        for moved in moves {
            let Some(&(handle, _)) = handles.get(&moved.slice) else {
                tracing::error!(target: "gpuworld::memory", slice = ?moved.slice, "a compaction moved a slice no live handle holds");
                continue;
            };
            let Some(entry) = self.index.get_mut(&handle) else {
                tracing::error!(target: "gpuworld::memory", %handle, "a compaction moved a handle the index no longer holds");
                continue;
            };
            let to = |region: Region| Region {
                storage: moved.to.storage,
                offset: moved.to.offset,
                size: region.size,
            };
            match &mut entry.state {
                HandleState::Unspawned { memory, .. } => {
                    if let Ok((_, region)) = memory {
                        *region = to(*region);
                    }
                }
                HandleState::Spawned {
                    entity,
                    slice,
                    region,
                } => {
                    let entity = *entity;
                    *region = to(*region);
                    // The entity's allocation covers the entry's bytes (it may be spawned in
                    // this drain: the insert applies after its spawn).
                    (self.commands.entity(entity)).insert(Allocation::Slice {
                        slice: *slice,
                        region: *region,
                    });
                    if moved.copied {
                        entry.used_on.record(stream);
                        let bindings = SmallVec::from_slice(&[
                            TaskBinding {
                                handle: entity,
                                region: moved.from,
                                writes: false,
                            },
                            TaskBinding {
                                handle: entity,
                                region: Region {
                                    size: moved.from.size,
                                    ..moved.to
                                },
                                writes: true,
                            },
                        ]);
                        self.spawn_task(stream, TaskWork::Move, bindings);
                    }
                }
            }
            tracing::debug!(target: "gpuworld::memory", %handle, from = ?moved.from, to = ?moved.to, copied = moved.copied, "moved to make room");
        }
    }
}

/// What each live handle's slice lets a compaction do: a handle no work used yet moves without
/// a copy; one work used moves with a copy, unless a captured graph holds it (its replays keep
/// the old place); a failed allocation, or one that inherited another stream's use of parked
/// memory without using it, stays.
fn movable_handles(
    index: &FxHashMap<HandleId, HandleEntry>,
) -> FxHashMap<SliceKey, (HandleId, Movable)> {
    let mut handles = FxHashMap::default();
    for (&handle, entry) in index {
        if entry.pins > 0 {
            continue;
        }
        match &entry.state {
            HandleState::Unspawned {
                memory: Ok((slice, _)),
                ..
            } if entry.used_on == UsedOn::Nothing => {
                handles.insert(*slice, (handle, Movable::Unwritten));
            }
            HandleState::Spawned { slice, .. } => {
                handles.insert(*slice, (handle, Movable::Copied));
            }
            _ => {}
        }
    }
    handles
}
