//! Stage 1, ingest: drains the client inbox, in arrival order, into handle and task entities and
//! release markers. Owns `HandleIndex` and `NewTasks`; creates stream entities on first use.
//! It is an exclusive system because every later stage works on the entities it creates.

use crate::backend::{Backend, LaunchCount, Region};
use crate::error::Error;
use crate::handle::Binding;
use crate::ids::StreamId;
use crate::inbox::Command;
use crate::kernel::CubeCount;
use crate::memory::MemoryPool;
use crate::world::*;
use bevy_ecs::prelude::*;
use smallvec::SmallVec;

/// Drains the inbox into entities.
pub fn ingest_commands<B: Backend>(world: &mut World, mut drained: Local<Vec<Command>>) {
    let tick = world.resource::<TickCounter>().0;
    world.resource_mut::<Device<B>>().0.begin_tick(tick);
    let inbox = world.resource::<InboxQueue>().0.clone();
    inbox.drain_into(&mut drained);
    for command in drained.drain(..) {
        ingest_one::<B>(world, command);
    }
}

fn ingest_one<B: Backend>(world: &mut World, command: Command) {
    match command {
        Command::Create {
            handle,
            size,
            data,
            stream: stream_id,
        } => {
            let stream = stream_entity::<B>(world, stream_id);
            let reserved = world.resource_scope(|world, mut device: Mut<Device<B>>| {
                world
                    .resource_mut::<MemoryPool>()
                    .reserve_for(&mut device.0, size, stream_id)
            });
            let cursor = world.get::<StreamCursor>(stream).map_or(0, |c| c.0);
            let (allocation, memory) = match reserved {
                Ok(reservation) => (
                    Allocation::Slice {
                        slice: reservation.slice,
                        region: reservation.region,
                    },
                    Ok(reservation.region),
                ),
                Err(error) => {
                    tracing::warn!(target: "gpuworld::memory", %handle, size, %error, "allocation failed");
                    record_fault(world, stream, error.clone());
                    (Allocation::Failed(error.clone()), Err(error))
                }
            };
            let entity = world
                .spawn((
                    HandleRecord { id: handle, size },
                    allocation,
                    Owner { stream, cursor },
                    Uses::default(),
                ))
                .id();
            let region = memory.as_ref().ok().copied();
            world.resource_mut::<HandleIndex>().0.insert(
                handle,
                HandleEntry {
                    entity,
                    memory,
                    released: false,
                },
            );
            if let (Some(data), Some(region)) = (data, region) {
                let binding = TaskBinding {
                    handle: entity,
                    region,
                    writes: true,
                };
                spawn_task(
                    world,
                    stream,
                    TaskWork::Write(data),
                    SmallVec::from_elem(binding, 1),
                );
            }
        }
        Command::Write { dst, data, stream } => {
            let stream = stream_entity::<B>(world, stream);
            match resolve(world, &dst, true) {
                Ok(binding) => spawn_task(
                    world,
                    stream,
                    TaskWork::Write(data),
                    SmallVec::from_elem(binding, 1),
                ),
                Err(error) => record_fault(world, stream, error),
            }
        }
        Command::Launch {
            kernel,
            count,
            buffers,
            scalars,
            mode,
            stream,
        } => {
            let stream = stream_entity::<B>(world, stream);
            let mut bindings = SmallVec::<[TaskBinding; 4]>::new();
            let mut launch_count = LaunchCount::Static([0; 3]);
            let resolved = buffers
                .iter()
                .try_for_each(|b| resolve(world, b, true).map(|tb| bindings.push(tb)))
                .and_then(|()| match count {
                    CubeCount::Static(x, y, z) => {
                        launch_count = LaunchCount::Static([x, y, z]);
                        Ok(())
                    }
                    CubeCount::Dynamic(b) => resolve(world, &b, false).map(|tb| {
                        launch_count = LaunchCount::Dynamic(tb.region);
                        bindings.push(tb);
                    }),
                });
            match resolved {
                Ok(()) => spawn_task(
                    world,
                    stream,
                    TaskWork::Launch {
                        kernel,
                        count: launch_count,
                        scalars,
                        mode,
                    },
                    bindings,
                ),
                Err(error) => record_fault(world, stream, error),
            }
        }
        Command::Read {
            sources,
            stream,
            reply,
        } => {
            let stream = stream_entity::<B>(world, stream);
            let resolved: Result<SmallVec<[TaskBinding; 4]>, Error> =
                sources.iter().map(|b| resolve(world, b, false)).collect();
            match resolved {
                Ok(bindings) => spawn_task(world, stream, TaskWork::Read(reply), bindings),
                Err(error) => {
                    let _ = reply.send(Err(error));
                }
            }
        }
        Command::Flush { stream } => {
            let stream = stream_entity::<B>(world, stream);
            spawn_task(world, stream, TaskWork::Flush, SmallVec::new());
        }
        Command::Sync { stream, reply } => {
            let stream = stream_entity::<B>(world, stream);
            spawn_task(world, stream, TaskWork::Sync(reply), SmallVec::new());
        }
        Command::Release { handle } => {
            let entry = world
                .resource_mut::<HandleIndex>()
                .0
                .get_mut(&handle)
                .map(|entry| {
                    entry.released = true;
                    entry.entity
                });
            if let Some(entity) = entry {
                world.entity_mut(entity).insert(Released);
            }
        }
        Command::MemoryCleanup => world.resource_mut::<CleanupRequested>().0 = true,
        Command::OpenAllocationMode { stream, mode } => {
            world
                .resource_mut::<MemoryPool>()
                .modes_mut()
                .push(stream, mode);
        }
        Command::CloseAllocationMode { stream } => {
            if !world.resource_mut::<MemoryPool>().modes_mut().pop(stream) {
                tracing::warn!(target: "gpuworld::memory", %stream, "closing an allocation mode window that is not open");
            }
        }
    }
}

/// The stream entity of `id`'s slot, created with its device stream on first use.
fn stream_entity<B: Backend>(world: &mut World, id: StreamId) -> Entity {
    let slots = world.resource::<StreamTable>().slots.len();
    let slot = (id.value % slots as u64) as usize;
    if let Some(entity) = world.resource::<StreamTable>().slots[slot] {
        return entity;
    }
    let device = world.resource_mut::<Device<B>>().0.create_stream(id);
    let entity = world
        .spawn((
            Stream {
                id,
                slot,
                role: StreamRole::Compute,
                device,
            },
            StreamCursor::default(),
            SubmittedCursor::default(),
            LastSynced::default(),
            TaskQueue::default(),
            StreamFault::default(),
        ))
        .id();
    world.resource_mut::<StreamTable>().slots[slot] = Some(entity);
    tracing::debug!(target: "gpuworld::stream", %id, slot, "stream opened");
    entity
}

/// Resolves a binding to device memory, or says why it cannot be used.
fn resolve(world: &World, binding: &Binding, writes: bool) -> Result<TaskBinding, Error> {
    let (start, end) = binding.range()?;
    let entry = world
        .resource::<HandleIndex>()
        .0
        .get(&binding.handle)
        .ok_or(Error::ReleasedHandle {
            handle: binding.handle,
        })?;
    if entry.released {
        return Err(Error::ReleasedHandle {
            handle: binding.handle,
        });
    }
    let memory = entry.memory.as_ref().map_err(Clone::clone)?;
    Ok(TaskBinding {
        handle: entry.entity,
        region: Region {
            storage: memory.storage,
            offset: memory.offset + start,
            size: end - start,
        },
        writes,
    })
}

fn spawn_task(
    world: &mut World,
    stream: Entity,
    work: TaskWork,
    bindings: SmallVec<[TaskBinding; 4]>,
) {
    let seq = world.resource::<NewTasks>().next_seq;
    let entity = world
        .spawn(Task {
            seq,
            stream,
            cursor: 0,
            work: Some(work),
            bindings,
            sync_needs: SmallVec::new(),
            waits: SmallVec::new(),
            shared: SmallVec::new(),
        })
        .id();
    let mut new = world.resource_mut::<NewTasks>();
    new.next_seq += 1;
    new.tasks.push(entity);
}

/// Keeps the first fault of a stream until a read or sync reports it.
fn record_fault(world: &mut World, stream: Entity, error: Error) {
    tracing::warn!(target: "gpuworld::stream", %error, "fault recorded on stream");
    if let Some(mut fault) = world.get_mut::<StreamFault>(stream) {
        fault.0.get_or_insert(error);
    }
}
