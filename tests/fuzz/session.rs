//! One fuzzing run: a seeded random sequence of client calls on one runtime, as a user makes them
//! from one thread (so the runtime orders uses across streams in program order and the model is
//! sequential), each read checked against the host model. Handles, uploads, streams and the
//! end-of-run leak check live here; reads in `reads.rs`, launches in `launches.rs`, misuse in
//! `misuse.rs`.
//!
//! The sequence depends only on the seed: no choice depends on timing (a `read_async` is polled
//! after every operation, but settled at an operation drawn when it was issued), so a seed
//! replays the same operations on every run and every backend of the same arithmetic.

use super::leases::{Held, Lessor};
use super::model::{Arithmetic, ModelBuffer, View};
use super::reads::PendingRead;
use super::report::{OpLog, Tally};
use super::rng::Rng;
use gpuworld::{Backend, Binding, ComputeClient, Handle, HandleId, HostRecords, StreamId};
use gpuworld_systems::memory::MemoryPool;
use gpuworld_systems::stages::ingest::{HandleIndex, HandleState};
use gpuworld_systems::stages::lifetime::PinnedHandles;
use gpuworld_systems::stages::replies::PendingReplies;
use gpuworld_systems::world::{Allocation as HandleMemory, Stream};
use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

/// The streams the fuzzer works on. With the default four slots, 5 shares slot 1 with 1: two ids
/// that alias one stream (with eight, every id has a stream of its own).
pub const STREAMS: [u64; 5] = [0, 1, 2, 3, 5];

/// Live allocations stop growing past this many bytes: a create then drops a handle instead.
const LIVE_BYTES_LIMIT: usize = 48 << 20;

/// Live handles stop growing past this many: a create then drops one instead.
const LIVE_HANDLES_LIMIT: usize = 48;

/// Bindings of released handles kept for misuse.
const RELEASED_KEPT: usize = 8;

/// How long a read or the end-of-run reclamation may take before the run fails as stuck.
pub const SETTLE_LIMIT: Duration = Duration::from_secs(60);

/// What the world still holds at the end of a run besides its streams: entities (handles, pending
/// GCs; Bevy's own, which a fresh runtime has too), pins of shared handles, reads and syncs in
/// flight.
#[derive(Debug, Default, PartialEq, Eq)]
struct Lingering {
    entities: usize,
    pins: usize,
    replies: usize,
}

/// The world's entities that are not streams: Bevy's own, handles and pending GCs.
fn other_entities(world: &bevy_ecs::world::World) -> usize {
    world
        .iter_entities()
        .filter(|entity| !entity.contains::<Stream>())
        .count()
}

/// An allocation the fuzzer holds handles to, and what it must contain.
pub struct Allocation {
    pub model: ModelBuffer,
    /// Clones of its handle in `Fuzzer::handles`; the last one dropped releases it.
    holders: usize,
}

/// A fuzzing run on one runtime.
pub struct Fuzzer<'log, B: Backend> {
    pub client: ComputeClient<B>,
    /// One client per entry of [`STREAMS`].
    pub streams: Vec<ComputeClient<B>>,
    /// The index in `streams` of the stream calls go to.
    pub current: usize,
    pub rng: Rng,
    pub arithmetic: Arithmetic,
    /// Every handle clone the fuzzer holds; an allocation may appear several times.
    pub handles: Vec<Handle>,
    pub allocations: HashMap<HandleId, Allocation>,
    /// Bindings of released handles.
    pub released: VecDeque<Binding>,
    pub reads: Vec<PendingRead>,
    /// How this backend takes leases; `None` where it has none (cpu): no lease is drawn.
    pub lessor: Option<&'static dyn Lessor<B>>,
    /// Leases held, with what their bytes must be.
    pub leases: Vec<Held>,
    live_bytes: usize,
    log: &'log OpLog,
    /// The number of the current operation.
    pub op: u64,
    /// Whether every live allocation is read back after every operation: slow, and it adds
    /// syncs between streams, but it names the first operation after which data is wrong.
    pub read_all_after_each_op: bool,
    /// What was checked so far.
    pub tally: Tally,
    /// The runtime's stream slots: which ids of [`STREAMS`] share a stream.
    stream_slots: u64,
    /// Entities other than streams in the fresh runtime (Bevy's own).
    entities_at_start: usize,
}

impl<'log, B: Backend> Fuzzer<'log, B> {
    /// A run on `client` with the random sequence of `seed`.
    pub fn new(
        client: ComputeClient<B>,
        seed: u64,
        arithmetic: Arithmetic,
        log: &'log OpLog,
    ) -> Self {
        let streams = STREAMS
            .iter()
            .map(|&value| client.with_stream(StreamId { value }))
            .collect();
        let (stream_slots, entities_at_start) = client.with_runtime(|runtime| {
            (
                runtime.config().stream_slots as u64,
                other_entities(runtime.world()),
            )
        });
        Fuzzer {
            entities_at_start,
            stream_slots,
            client,
            streams,
            current: 0,
            rng: Rng::new(seed),
            arithmetic,
            handles: Vec::new(),
            allocations: HashMap::new(),
            released: VecDeque::new(),
            reads: Vec::new(),
            lessor: None,
            leases: Vec::new(),
            live_bytes: 0,
            log,
            op: 0,
            read_all_after_each_op: false,
            tally: Tally::default(),
        }
    }

    /// Runs `ops` operations, then drops everything and checks that nothing stays in use.
    pub fn run(&mut self, ops: u64) -> Result<(), String> {
        for op in 0..ops {
            self.op = op;
            self.step()?;
            self.poll_reads()?;
            self.check_every_slice_has_a_holder()?;
            if self.read_all_after_each_op {
                self.read_everything()?;
            }
        }
        self.op = ops;
        self.finish()
    }

    fn step(&mut self) -> Result<(), String> {
        let full = self.handles.len() >= LIVE_HANDLES_LIMIT || self.live_bytes >= LIVE_BYTES_LIMIT;
        // Backends with leases draw them past the other operations, so that a cpu run replays the
        // sequences it drew before leases.
        let draws = if self.lessor.is_some() { 1024 } else { 1000 };
        match self.rng.below(draws) {
            _ if self.handles.is_empty() => self.create(),
            0..60 if full => self.drop_handle(),
            0..60 => self.create(),
            60..90 if full => self.drop_handle(),
            60..90 => self.create_empty(),
            90..200 => self.write(),
            200..290 => self.read(),
            290..340 => self.read_async(),
            340..590 => self.launch(),
            590..630 => self.clone_handle(),
            630..710 => self.drop_handle(),
            710..810 => self.switch_stream(),
            810..840 => self.sync(),
            840..865 => self.flush(),
            865..880 => self.tick(),
            880..890 => self.memory_cleanup(),
            890..950 => self.misuse_rejected(),
            950..1000 => self.misuse_released(),
            1000..1012 => self.take_lease(),
            _ => self.drop_lease(),
        }
    }

    /// Records operation `entry` on the current stream before it runs.
    pub fn log(&self, entry: impl std::fmt::Display) {
        let stream = STREAMS[self.current];
        self.log.record(format!("#{} s{stream} {entry}", self.op));
    }

    /// The client of the current stream.
    pub fn stream(&self) -> &ComputeClient<B> {
        &self.streams[self.current]
    }

    /// The slot of stream `index` of [`STREAMS`] in this runtime.
    pub fn slot(&self, index: usize) -> u64 {
        STREAMS[index] % self.stream_slots
    }

    /// A random live handle's index in `handles`.
    pub fn pick_handle(&mut self) -> usize {
        self.rng.index(self.handles.len())
    }

    /// The model of the allocation behind `handles[index]`.
    pub fn model(&self, index: usize) -> &ModelBuffer {
        &self.allocations[&self.handles[index].id()].model
    }

    /// The model of allocation `id`, to change.
    pub fn model_mut(&mut self, id: HandleId) -> &mut ModelBuffer {
        &mut self
            .allocations
            .get_mut(&id)
            .expect("a handle the fuzzer holds has a model")
            .model
    }

    /// A size for a new allocation: mostly small and odd, sometimes past the 1 MiB from which
    /// uploads are staged in chunks, rarely past one 8 MiB chunk.
    fn random_size(&mut self) -> usize {
        let size = match self.rng.below(1000) {
            0..450 => self.rng.below(65),
            450..800 => self.rng.between(65, 8 << 10),
            800..940 => self.rng.between(8 << 10, 256 << 10),
            940..980 => self.rng.between(256 << 10, 1 << 20),
            980..998 => self.rng.between(1 << 20, 4 << 20),
            _ => self.rng.between(8 << 20, 9 << 20),
        };
        size as usize
    }

    /// A random byte range of `size` bytes: often all of it, else any `start..end`.
    pub fn random_view(&mut self, size: usize) -> View {
        if self.rng.chance(300) {
            return View::whole(size);
        }
        let start = self.rng.below(size as u64 + 1) as usize;
        let end = if self.rng.chance(300) {
            size
        } else {
            self.rng.between(start as u64, size as u64) as usize
        };
        View { start, end }
    }

    /// A random byte range of `size` bytes of whole 4-byte words from a multiple of 4, as a
    /// launch's buffers must be (`LaunchError::MisalignedBinding`,
    /// `LaunchError::BufferElementSize`).
    pub fn random_aligned_view(&mut self, size: usize) -> View {
        let mut view = self.random_view(size);
        view.start -= view.start % 4;
        view.end -= (view.end - view.start) % 4;
        view
    }

    /// A handle that names `view` of `handles[index]`, as users make one.
    pub fn view_handle(&self, index: usize, view: View) -> Handle {
        let handle = &self.handles[index];
        let capacity = handle.capacity() as usize;
        handle
            .clone()
            .offset_start(view.start as u64)
            .offset_end((capacity - view.end) as u64)
    }

    /// How `view` of `handles[index]` reads in the log.
    pub fn name(&self, index: usize, view: View) -> String {
        let handle = &self.handles[index];
        if view == View::whole(handle.capacity() as usize) {
            format!("{}", handle.id())
        } else {
            format!("{}[{}..{}]", handle.id(), view.start, view.end)
        }
    }

    /// Holds `handle`, a new allocation that must contain `model`.
    pub fn adopt(&mut self, handle: Handle, model: ModelBuffer) {
        self.live_bytes += model.len();
        self.allocations
            .insert(handle.id(), Allocation { model, holders: 1 });
        self.handles.push(handle);
    }

    fn create(&mut self) -> Result<(), String> {
        let size = self.random_size();
        let data = self.rng.bytes(size);
        let client = self.stream().clone();
        let (how, handle) = match self.rng.below(4) {
            0 => ("create", client.create(data.clone())),
            1 => (
                "create_from_slice_pinned",
                client.create_from_slice_pinned(&data),
            ),
            2 => {
                let mut staging = client.reserve_staging(&[size]).remove(0);
                staging.copy_from_slice(&data);
                ("create(reserve_staging)", client.create(staging))
            }
            _ => ("create_from_slice", client.create_from_slice(&data)),
        };
        self.log(format!("{} = {how}({size} bytes)", handle.id()));
        self.adopt(handle, ModelBuffer::with_bytes(&data));
        Ok(())
    }

    fn create_empty(&mut self) -> Result<(), String> {
        let size = self.random_size();
        let handle = self.stream().empty(size as u64);
        self.log(format!("{} = empty({size})", handle.id()));
        self.adopt(handle, ModelBuffer::undefined(size));
        Ok(())
    }

    fn clone_handle(&mut self) -> Result<(), String> {
        let index = self.pick_handle();
        let handle = self.handles[index].clone();
        self.log(format!("clone {}", handle.id()));
        if let Some(allocation) = self.allocations.get_mut(&handle.id()) {
            allocation.holders += 1;
        }
        self.handles.push(handle);
        Ok(())
    }

    /// Drops one clone; the last one releases the allocation, often while work using it is in
    /// flight.
    fn drop_handle(&mut self) -> Result<(), String> {
        let index = self.pick_handle();
        let handle = self.handles.swap_remove(index);
        let id = handle.id();
        let allocation = self
            .allocations
            .get_mut(&id)
            .expect("a handle the fuzzer holds has a model");
        allocation.holders -= 1;
        if allocation.holders > 0 {
            self.log(format!("drop a clone of {id}"));
            return Ok(());
        }
        self.log(format!("drop {id} (the last clone: released)"));
        self.tally.releases += 1;
        self.leased_handle_released(id);
        let size = self.allocations.remove(&id).map_or(0, |a| a.model.len());
        self.live_bytes -= size;
        if self.released.len() == RELEASED_KEPT {
            self.released.pop_front();
        }
        self.released.push_back(handle.binding());
        drop(handle);
        Ok(())
    }

    fn write(&mut self) -> Result<(), String> {
        let index = self.pick_handle();
        let capacity = self.handles[index].capacity() as usize;
        let view = self.random_view(capacity);
        let len = match self.rng.below(3) {
            0 => view.len(),
            _ => self.rng.below(view.len() as u64 + 1) as usize,
        };
        let data = self.rng.bytes(len);
        let dst = self.view_handle(index, view);
        let client = self.stream().clone();
        let name = self.name(index, view);
        let result = match self.rng.below(3) {
            0 => {
                self.log(format!("write_bytes({name}, {len} bytes)"));
                client.write_bytes(&dst, data.clone())
            }
            1 => {
                self.log(format!(
                    "write_bytes({name}, {len} bytes of reserve_staging)"
                ));
                let mut staging = client.reserve_staging(&[len]).remove(0);
                staging.copy_from_slice(&data);
                client.write_bytes(&dst, staging)
            }
            _ => {
                self.log(format!("write({name}, {len} bytes)"));
                client.write(&dst, &data)
            }
        };
        result.map_err(|error| format!("a valid write failed: {error}"))?;
        let id = dst.id();
        self.model_mut(id).write(view.start, &data);
        Ok(())
    }

    fn switch_stream(&mut self) -> Result<(), String> {
        self.current = self.rng.index(STREAMS.len());
        self.log("switch to this stream");
        Ok(())
    }

    fn sync(&mut self) -> Result<(), String> {
        self.log("sync");
        self.stream()
            .sync()
            .map_err(|error| format!("sync failed: {error}"))
    }

    fn flush(&mut self) -> Result<(), String> {
        self.log("flush");
        self.stream().flush();
        Ok(())
    }

    fn tick(&mut self) -> Result<(), String> {
        self.log("tick");
        self.client.tick();
        Ok(())
    }

    fn memory_cleanup(&mut self) -> Result<(), String> {
        self.log("memory_cleanup");
        self.client.memory_cleanup();
        Ok(())
    }

    /// Settles every read, drops every handle, syncs every stream, and checks that the memory
    /// comes back: nothing in use once the device is done, nothing reserved after a cleanup, and
    /// no host record of any handle, nor any other entity, pin or reply, left in the world.
    fn finish(&mut self) -> Result<(), String> {
        self.log("end: settle every read, drop every handle, sync every stream");
        while !self.reads.is_empty() {
            self.settle_read(0)?;
        }
        self.log("end: drop every lease");
        self.leases.clear();
        self.handles.clear();
        self.allocations.clear();
        self.live_bytes = 0;
        for (stream, client) in STREAMS.iter().zip(&self.streams) {
            client
                .sync()
                .map_err(|error| format!("the final sync of stream {stream} failed: {error}"))?;
        }
        self.check_every_slice_has_a_holder()?;
        // Every stream is synced, so the device is done with all of it: the tick that answered
        // the last sync has returned every released handle's memory, with no further tick
        // (issue 30's leak: memory pinned behind an event that no sync covered stayed in use
        // until a tick that a manual driver never ran).
        let usage = self.client.memory_usage();
        if usage.bytes_in_use != 0 || usage.number_allocs != 0 {
            return Err(format!(
                "leak: expected nothing in use once every handle was dropped and every stream \
                 synced, got {usage:?}\n{}",
                self.client.snapshot()
            ));
        }
        self.log("end: memory_cleanup");
        self.client.memory_cleanup();
        self.wait_until_memory("nothing reserved after a cleanup", |usage| {
            usage.bytes_reserved == 0
        })?;
        self.log("end: two ticks, then no host record of any handle");
        self.client.tick();
        self.client.tick();
        let records = self.client.with_runtime(|runtime| runtime.host_records());
        if records != HostRecords::default() {
            return Err(format!(
                "leak: expected no host record of a handle once every handle was dropped and \
                 its memory reclaimed, got {records:?}\n{}",
                self.client.snapshot()
            ));
        }
        self.log("end: no entity but the streams, no pin, no reply in flight");
        let lingering = self.client.with_runtime(|runtime| {
            let world = runtime.world();
            let replies = world.resource::<PendingReplies>();
            Lingering {
                entities: other_entities(world),
                pins: world.resource::<PinnedHandles>().len(),
                replies: replies.len(),
            }
        });
        let expected = Lingering {
            entities: self.entities_at_start,
            ..Lingering::default()
        };
        if lingering != expected {
            return Err(format!(
                "leak: expected the world to hold nothing but its streams once every handle was \
                 dropped and its memory reclaimed, {expected:?}, got {lingering:?}\n{}",
                self.client.snapshot()
            ));
        }
        Ok(())
    }

    /// Checks that every slice of the pool is held by a handle (its index entry before a task
    /// used it, its entity after, released or parked until reclaimed): memory that nothing
    /// references would never come back. Runs after every operation, so that a failure names
    /// the operation that lost the memory, where the end-of-run check only sees that it is gone.
    fn check_every_slice_has_a_holder(&self) -> Result<(), String> {
        let orphans = self.client.with_runtime(|runtime| {
            let world = runtime.world();
            let mut held = HashSet::new();
            for entry in world.resource::<HandleIndex>().0.values() {
                if let HandleState::Unspawned {
                    memory: Ok((slice, _)),
                    ..
                } = &entry.state
                {
                    held.insert(*slice);
                }
            }
            if let Some(mut allocations) = world.try_query::<&HandleMemory>() {
                for allocation in allocations.iter(world) {
                    if let HandleMemory::Slice { slice, .. } | HandleMemory::Parked { slice } =
                        allocation
                    {
                        held.insert(*slice);
                    }
                }
            }
            world
                .resource::<MemoryPool>()
                .slices()
                .filter(|(slice, _)| !held.contains(slice))
                .collect::<Vec<_>>()
        });
        if orphans.is_empty() {
            return Ok(());
        }
        Err(format!(
            "leak: {} pool slices (key, parked for) are held by no handle: {orphans:?}\n{}",
            orphans.len(),
            self.client.snapshot()
        ))
    }

    /// Ticks until the published memory usage satisfies `done`, as the leak tests wait for the
    /// device to finish with released memory.
    fn wait_until_memory(
        &self,
        what: &str,
        done: impl Fn(&gpuworld::MemoryUsage) -> bool,
    ) -> Result<(), String> {
        let start = Instant::now();
        loop {
            self.streams[0]
                .sync()
                .map_err(|error| format!("sync failed: {error}"))?;
            self.client.tick();
            let usage = self.client.memory_usage();
            if done(&usage) {
                return Ok(());
            }
            if start.elapsed() > SETTLE_LIMIT {
                return Err(format!(
                    "leak: expected {what} once every handle was dropped, got {usage:?}\n{}",
                    self.client.snapshot()
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
