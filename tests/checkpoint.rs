//! Checkpoints and rollbacks (issue 51), as a user runs them: a simulation written as a
//! `#[gpuworld::kernel]` is checkpointed, restored on the same or another backend and continued
//! to the very bits of the uninterrupted run; a child process killed while it writes checkpoints
//! always leaves one that loads and resumes; every truncation and flipped byte of a file is a
//! typed error; a rollback ring restores frame k-8 on the device and re-simulates to the same
//! bits. A backend this machine lacks is reported ignored.
//!
//! The crash test re-runs this binary as the child (`GPUWORLD_CHECKPOINT_CHILD=DIR`); it kills
//! it 50 times, or `GPUWORLD_CHECKPOINT_KILLS` times.

mod common;

use common::Skip;
use common::harness::{Trial, run, trial};
use gpuworld::checkpoint::{Checkpoint, CheckpointMeta, Progress, inspect};
use gpuworld::error::CheckpointError;
use gpuworld::{
    Backend, Bindings, ComputeClient, CpuBackend, CubeCount, Driver, Error, ErrorKind, Handle,
};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    if let Some(dir) = std::env::var_os(CHILD) {
        crash::child(Path::new(&dir));
    }
    let trials: Vec<Trial> = vec![
        trial(
            "a_restart_on_cpu_continues_to_the_same_bits",
            a_restart_on_cpu_continues_to_the_same_bits,
        ),
        trial(
            "a_restart_on_the_sim_continues_to_the_same_bits",
            a_restart_on_the_sim_continues_to_the_same_bits,
        ),
        trial(
            "a_cpu_run_continues_on_the_sim_to_the_same_bits",
            a_cpu_run_continues_on_the_sim_to_the_same_bits,
        ),
        #[cfg(feature = "wgpu")]
        trial(
            "a_cpu_run_continues_on_wgpu_to_the_same_bits",
            gpus::a_cpu_run_continues_on_wgpu_to_the_same_bits,
        ),
        #[cfg(feature = "wgpu")]
        trial(
            "a_wgpu_run_continues_on_cpu_to_the_same_bits",
            gpus::a_wgpu_run_continues_on_cpu_to_the_same_bits,
        ),
        #[cfg(feature = "wgpu")]
        trial(
            "a_restart_on_wgpu_continues_to_the_same_bits",
            gpus::a_restart_on_wgpu_continues_to_the_same_bits,
        ),
        #[cfg(feature = "cuda")]
        trial(
            "a_cuda_run_continues_on_cpu_to_the_same_bits",
            gpus::a_cuda_run_continues_on_cpu_to_the_same_bits,
        ),
        #[cfg(feature = "cuda")]
        trial(
            "a_cpu_run_continues_on_cuda_to_the_same_bits",
            gpus::a_cpu_run_continues_on_cuda_to_the_same_bits,
        ),
        #[cfg(feature = "cuda")]
        trial(
            "a_restart_on_cuda_continues_to_the_same_bits",
            gpus::a_restart_on_cuda_continues_to_the_same_bits,
        ),
        #[cfg(feature = "cuda")]
        trial(
            "rolling_back_on_cuda_gives_the_same_bits",
            gpus::rolling_back_on_cuda_gives_the_same_bits,
        ),
        trial(
            "names_metadata_streams_and_order_come_back_as_saved",
            names_metadata_streams_and_order_come_back_as_saved,
        ),
        trial(
            "a_buffer_larger_than_a_chunk_streams_through_in_parts",
            a_buffer_larger_than_a_chunk_streams_through_in_parts,
        ),
        trial(
            "inspect_lists_the_buffers_and_their_checksums",
            inspect_lists_the_buffers_and_their_checksums,
        ),
        trial(
            "every_truncation_is_a_truncated_error",
            every_truncation_is_a_truncated_error,
        ),
        trial(
            "every_flipped_byte_is_a_typed_error_and_nothing_is_left_allocated",
            every_flipped_byte_is_a_typed_error_and_nothing_is_left_allocated,
        ),
        trial(
            "a_file_of_another_kind_or_version_is_named_as_such",
            a_file_of_another_kind_or_version_is_named_as_such,
        ),
        trial(
            "a_state_too_large_for_the_device_allocates_nothing",
            a_state_too_large_for_the_device_allocates_nothing,
        ),
        trial(
            "a_failed_checkpoint_keeps_the_previous_file",
            a_failed_checkpoint_keeps_the_previous_file,
        ),
        trial(
            "a_child_killed_while_writing_always_leaves_a_checkpoint_that_resumes",
            crash::a_child_killed_while_writing_always_leaves_a_checkpoint_that_resumes,
        ),
        trial(
            "many_small_buffers_on_several_streams_round_trip",
            many_small_buffers_on_several_streams_round_trip,
        ),
        trial(
            "saving_and_rolling_back_never_tick",
            saving_and_rolling_back_never_tick,
        ),
        trial(
            "the_worked_example_of_docs_checkpoints_md_runs",
            the_worked_example_of_docs_checkpoints_md_runs,
        ),
        trial(
            "rolling_back_8_frames_and_resimulating_gives_the_same_bits",
            rolling_back_8_frames_and_resimulating_gives_the_same_bits,
        ),
        trial(
            "a_frame_the_ring_no_longer_holds_is_an_error",
            a_frame_the_ring_no_longer_holds_is_an_error,
        ),
        #[cfg(feature = "wgpu")]
        trial(
            "rolling_back_on_wgpu_gives_the_same_bits",
            gpus::rolling_back_on_wgpu_gives_the_same_bits,
        ),
    ];
    run(trials)
}

/// One step of a toy world: cells of bits mixed with their neighbours and a salt from the host's
/// RNG, and a heat field diffused and fed by the cells. Integer and float arithmetic, so a
/// backend that rounded otherwise would show.
#[gpuworld::kernel(cube_dim = 64)]
fn world_step(
    cells: &[u32],
    heat: &[f32],
    next_cells: &mut [u32],
    next_heat: &mut [f32],
    salt: u32,
) {
    let i = global_index();
    let n = next_cells.len();
    if i < n {
        let left = if i == 0 { n - 1 } else { i - 1 };
        let right = if i + 1 == n { 0 } else { i + 1 };
        let x = cells[i] ^ (cells[left] << 3) ^ (cells[right] >> 5) ^ salt;
        next_cells[i] = x * 2654435761 + (x >> 7);
        next_heat[i] =
            0.5 * heat[i] + 0.25 * (heat[left] + heat[right]) + (x & 255) as f32 / 1024.0;
    }
}

/// The toy world on one client: the current and next buffers, the tick and the host RNG.
struct Sim<B: Backend> {
    client: ComputeClient<B>,
    cells: Handle,
    heat: Handle,
    next_cells: Handle,
    next_heat: Handle,
    tick: u64,
    rng: u64,
}

impl<B: Backend> Sim<B> {
    /// A world of `n` cells at tick 0.
    fn new(client: ComputeClient<B>, n: usize) -> Sim<B> {
        let cells: Vec<u32> = (0..n as u32)
            .map(|i| i.wrapping_mul(0x9e37_79b9) ^ 0x5555)
            .collect();
        let heat: Vec<f32> = (0..n).map(|i| (i % 17) as f32 * 0.125).collect();
        Sim {
            cells: client.create_from_pod(&cells),
            heat: client.create_from_pod(&heat),
            next_cells: client.empty(4 * n as u64),
            next_heat: client.empty(4 * n as u64),
            client,
            tick: 0,
            rng: 0x2545_f491_4f6c_dd1d,
        }
    }

    /// The world a checkpoint at `path` holds, on `client`.
    fn restore(client: ComputeClient<B>, path: &Path) -> Result<Sim<B>, Error> {
        let restored = client.restore(path)?;
        let cells = restored.handle("cells").expect("a cells buffer").clone();
        let heat = restored.handle("heat").expect("a heat buffer").clone();
        let rng: [u8; 8] = restored
            .meta
            .rng_state
            .as_slice()
            .try_into()
            .expect("8 bytes of RNG");
        Ok(Sim {
            next_cells: client.empty(cells.size()),
            next_heat: client.empty(heat.size()),
            cells,
            heat,
            client,
            tick: restored.meta.tick,
            rng: u64::from_le_bytes(rng),
        })
    }

    fn checkpoint(&self, path: &Path) -> Result<(), Error> {
        let meta = CheckpointMeta::at_tick(self.tick).with_rng_state(self.rng.to_le_bytes());
        let checkpoint = Checkpoint::new()
            .buffer("cells", &self.cells)
            .buffer("heat", &self.heat)
            .meta(meta);
        self.client.checkpoint(path, checkpoint).map(drop)
    }

    fn step(&mut self) {
        // xorshift64: the host's RNG, which the checkpoint carries.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let n = self.cells.size() / 4;
        let bindings = Bindings::new()
            .buffer(&self.cells)
            .buffer(&self.heat)
            .buffer(&self.next_cells)
            .buffer(&self.next_heat)
            .scalar_u32(self.rng as u32);
        self.client
            .launch(&world_step, CubeCount::covering(n, 64), bindings)
            .expect("the step launches");
        std::mem::swap(&mut self.cells, &mut self.next_cells);
        std::mem::swap(&mut self.heat, &mut self.next_heat);
        self.tick += 1;
    }

    /// A step that leaves the new state in the same handles (copied back on the device), as a
    /// game keeps its state in fixed buffers that a rollback ring saves.
    fn step_in_place(&mut self) {
        self.step();
        for (src, dst) in [
            (&self.cells, &self.next_cells),
            (&self.heat, &self.next_heat),
        ] {
            let count = CubeCount::covering(src.size() / 4, 256);
            let bindings = Bindings::new().buffer(src).buffer(dst);
            self.client
                .launch(&gpuworld::library::COPY, count, bindings)
                .expect("the copy launches");
        }
        std::mem::swap(&mut self.cells, &mut self.next_cells);
        std::mem::swap(&mut self.heat, &mut self.next_heat);
    }

    fn run(&mut self, ticks: u64) {
        for _ in 0..ticks {
            self.step();
        }
    }

    /// A hash of the state's bits.
    fn hash(&self) -> u64 {
        let bytes = self
            .client
            .read(&[self.cells.binding(), self.heat.binding()])
            .expect("the state reads back");
        let mut hash = 0xcbf2_9ce4_8422_2325u64;
        for part in &bytes {
            for byte in part.iter() {
                hash = (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3);
            }
        }
        hash ^ self.tick.rotate_left(32) ^ self.rng
    }
}

const CELLS: usize = 10_000;
const BEFORE: u64 = 9;
const AFTER: u64 = 11;

/// N ticks on `first`, a checkpoint, M more: hash A; `second` restores the file and runs M:
/// exactly hash A.
fn restart<A: Backend, B: Backend>(first: ComputeClient<A>, second: ComputeClient<B>) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("world.ckpt");
    let mut sim = Sim::new(first, CELLS);
    sim.run(BEFORE);
    sim.checkpoint(&path).expect("the checkpoint is written");
    sim.run(AFTER);
    let hash_a = sim.hash();
    let mut resumed = Sim::restore(second, &path).expect("the checkpoint restores");
    assert_eq!(resumed.tick, BEFORE);
    resumed.run(AFTER);
    assert_eq!(resumed.hash(), hash_a, "{} -> {}", A::NAME, B::NAME);
}

fn cpu() -> ComputeClient<CpuBackend> {
    gpuworld::cpu_client(Driver::Manual).expect("a cpu client")
}

fn sim_backend() -> ComputeClient<gpuworld::SimBackend> {
    gpuworld::sim_client(gpuworld::SimConfig::default()).expect("a sim client")
}

fn a_restart_on_cpu_continues_to_the_same_bits() {
    restart(cpu(), cpu());
}

fn a_restart_on_the_sim_continues_to_the_same_bits() {
    restart(sim_backend(), sim_backend());
}

fn a_cpu_run_continues_on_the_sim_to_the_same_bits() {
    restart(cpu(), sim_backend());
}

mod gpus {
    #[allow(unused_imports)]
    use super::*;

    #[cfg(feature = "wgpu")]
    fn wgpu() -> Result<ComputeClient<gpuworld::WgpuBackend>, Skip> {
        common::wgpu_client_with(gpuworld::WgpuConfig::default(), Driver::Manual)
    }

    #[cfg(feature = "wgpu")]
    pub fn a_cpu_run_continues_on_wgpu_to_the_same_bits() -> Result<(), Skip> {
        restart(cpu(), wgpu()?);
        Ok(())
    }

    #[cfg(feature = "wgpu")]
    pub fn a_wgpu_run_continues_on_cpu_to_the_same_bits() -> Result<(), Skip> {
        restart(wgpu()?, cpu());
        Ok(())
    }

    #[cfg(feature = "wgpu")]
    pub fn a_restart_on_wgpu_continues_to_the_same_bits() -> Result<(), Skip> {
        restart(wgpu()?, wgpu()?);
        Ok(())
    }

    #[cfg(feature = "wgpu")]
    pub fn rolling_back_on_wgpu_gives_the_same_bits() -> Result<(), Skip> {
        rollback_and_resimulate(wgpu()?);
        Ok(())
    }

    #[cfg(feature = "cuda")]
    pub fn a_cuda_run_continues_on_cpu_to_the_same_bits() -> Result<(), Skip> {
        restart(common::cuda_client_or_skip()?, cpu());
        Ok(())
    }

    #[cfg(feature = "cuda")]
    pub fn a_cpu_run_continues_on_cuda_to_the_same_bits() -> Result<(), Skip> {
        restart(cpu(), common::cuda_client_or_skip()?);
        Ok(())
    }

    #[cfg(feature = "cuda")]
    pub fn a_restart_on_cuda_continues_to_the_same_bits() -> Result<(), Skip> {
        restart(
            common::cuda_client_or_skip()?,
            common::cuda_client_or_skip()?,
        );
        Ok(())
    }

    #[cfg(feature = "cuda")]
    pub fn rolling_back_on_cuda_gives_the_same_bits() -> Result<(), Skip> {
        rollback_and_resimulate(common::cuda_client_or_skip()?);
        Ok(())
    }
}

fn names_metadata_streams_and_order_come_back_as_saved() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.ckpt");
    let client = cpu();
    let stream = gpuworld::StreamId { value: 7 };
    let b = client.create(vec![1u8, 2, 3]);
    let a = client.create(vec![9u8; 10]);
    let empty = client.create(Vec::new());
    let meta = CheckpointMeta::at_tick(42)
        .with_rng_state(vec![1, 2, 3, 4])
        .with_app_data(b"level 3".to_vec());
    let checkpoint = Checkpoint::new()
        .buffer("b", &b)
        .buffer_on("a", &a, stream)
        .buffer("nothing", &empty)
        .meta(meta.clone());
    client.checkpoint(&path, checkpoint).unwrap();

    let other = cpu();
    let restored = other.restore(&path).unwrap();
    let names: Vec<&str> = restored.buffers.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(names, ["b", "a", "nothing"]);
    assert_eq!(restored.meta, meta);
    assert_eq!(restored.backend, "cpu");
    assert_eq!(restored.buffers[1].stream, stream);
    assert_eq!(restored.buffers[0].stream, client.stream_id());
    let contents: Vec<Vec<u8>> = restored
        .handles()
        .iter()
        .map(|h| other.read_one(h).unwrap().into_vec())
        .collect();
    assert_eq!(contents, [vec![1u8, 2, 3], vec![9u8; 10], vec![]]);

    let twice = Checkpoint::new().buffer("x", &a).buffer("x", &b);
    let error = client
        .checkpoint(dir.path().join("b.ckpt"), twice)
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::DuplicateName, "{error}");
    assert!(!dir.path().join("b.ckpt").exists());
}

fn a_buffer_larger_than_a_chunk_streams_through_in_parts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.ckpt");
    let client = gpuworld::cpu_client(Driver::DeviceThread).unwrap();
    // Two chunks of 16 MiB and a tail that is not a whole word.
    let data: Vec<u8> = (0..(33 << 20) + 3)
        .map(|i: u32| (i.wrapping_mul(31) >> 3) as u8)
        .collect();
    let big = client.create_from_slice(&data);
    let mut seen: Vec<Progress> = Vec::new();
    let checkpoint = Checkpoint::new()
        .buffer("big", &big)
        .on_progress(|p| seen.push(p));
    let summary = client.checkpoint(&path, checkpoint).unwrap();
    assert_eq!(summary.buffer_bytes, data.len() as u64);
    assert_eq!(summary.checksums, [crc32fast::hash(&data)]);
    assert_eq!(seen.len(), 3);
    assert!(seen.windows(2).all(|w| w[0].bytes_done < w[1].bytes_done));
    assert_eq!(seen.last().map(|p| p.bytes_done), Some(data.len() as u64));
    drop(big);

    let mut restored_progress = 0;
    let restored = client
        .restore_with_progress(&path, |p| restored_progress = p.bytes_done)
        .unwrap();
    assert_eq!(restored_progress, data.len() as u64);
    let back = client.read_one(&restored.buffers[0].handle).unwrap();
    assert!(back[..] == data[..], "the restored bytes differ");
}

fn inspect_lists_the_buffers_and_their_checksums() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("i.ckpt");
    let client = cpu();
    let pos = client.create(vec![5u8; 64]);
    let vel = client.create(vec![6u8; 32]);
    let checkpoint = Checkpoint::new()
        .buffer("pos", &pos)
        .buffer("vel", &vel)
        .meta(CheckpointMeta::at_tick(3));
    let summary = client.checkpoint(&path, checkpoint).unwrap();
    let info = inspect(&path).unwrap();
    assert_eq!(info.version, gpuworld::checkpoint::VERSION);
    assert_eq!(info.file_len, std::fs::metadata(&path).unwrap().len());
    assert_eq!(info.file_len, summary.file_len);
    assert_eq!(info.meta.tick, 3);
    let listed: Vec<(&str, u64, u32)> = info
        .buffers
        .iter()
        .map(|b| (b.name.as_str(), b.len, b.checksum))
        .collect();
    assert_eq!(
        listed,
        [
            ("pos", 64, crc32fast::hash(&[5u8; 64])),
            ("vel", 32, crc32fast::hash(&[6u8; 32]))
        ]
    );
}

/// A small checkpoint's bytes and the client that wrote it.
fn small_checkpoint(dir: &Path) -> (PathBuf, Vec<u8>) {
    let path = dir.join("small.ckpt");
    let client = cpu();
    let mut sim = Sim::new(client, 100);
    sim.run(3);
    sim.checkpoint(&path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    (path, bytes)
}

/// A xorshift generator for the tests' random choices, seeded so a failure repeats.
struct Seeded(u64);

impl Seeded {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

fn every_truncation_is_a_truncated_error() {
    let dir = tempfile::tempdir().unwrap();
    let (_, bytes) = small_checkpoint(dir.path());
    let cut = dir.path().join("cut.ckpt");
    let client = cpu();
    let mut rng = Seeded(0x51);
    let lengths = (0..200).map(|_| rng.below(bytes.len() as u64) as usize);
    for len in lengths.chain([0, 7, 8, 31, 32, bytes.len() - 1]) {
        std::fs::write(&cut, &bytes[..len]).unwrap();
        let error = client.restore(&cut).map(drop).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Truncated, "cut at {len}: {error}");
        assert!(error.to_string().contains("truncated"), "{error}");
        let error = inspect(&cut).map(drop).unwrap_err();
        assert_eq!(
            error.kind(),
            ErrorKind::Truncated,
            "inspect, cut at {len}: {error}"
        );
    }
}

fn every_flipped_byte_is_a_typed_error_and_nothing_is_left_allocated() {
    let dir = tempfile::tempdir().unwrap();
    let (_, bytes) = small_checkpoint(dir.path());
    let bad = dir.path().join("bad.ckpt");
    let client = cpu();
    client.sync().unwrap();
    let in_use = client.memory_usage().bytes_in_use;
    let mut rng = Seeded(0x5eed);
    // Every byte of the header and trailer, and random bytes elsewhere.
    let ends = (0..32).chain(bytes.len() - 24..bytes.len());
    let random: Vec<usize> = (0..300)
        .map(|_| rng.below(bytes.len() as u64) as usize)
        .collect();
    for at in ends.chain(random) {
        let mut flipped = bytes.clone();
        flipped[at] ^= 1 << rng.below(8);
        std::fs::write(&bad, &flipped).unwrap();
        let error = client.restore(&bad).map(drop).unwrap_err();
        assert!(
            matches!(
                error,
                Error::Checkpoint(
                    CheckpointError::Corrupted { .. }
                        | CheckpointError::NotACheckpoint { .. }
                        | CheckpointError::UnsupportedVersion { .. }
                )
            ),
            "byte {at}: {error:?}"
        );
        assert!(inspect(&bad).is_err(), "inspect of byte {at}");
    }
    // The handles of failed restores were dropped: their memory is released at the next tick.
    client.sync().unwrap();
    client.sync().unwrap();
    assert_eq!(client.memory_usage().bytes_in_use, in_use);
}

fn a_file_of_another_kind_or_version_is_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let (_, bytes) = small_checkpoint(dir.path());
    let client = cpu();
    let other = dir.path().join("other.ckpt");
    std::fs::write(&other, b"PK\x03\x04 a zip file, not a checkpoint").unwrap();
    let error = client.restore(&other).map(drop).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotACheckpoint, "{error}");
    assert!(
        error.to_string().contains("is not a gpuworld checkpoint"),
        "{error}"
    );

    // Version 2 with a header checksum that matches: a newer writer's file.
    let mut newer = bytes.clone();
    newer[8..12].copy_from_slice(&2u32.to_le_bytes());
    let crc = crc32fast::hash(&newer[0..28]);
    newer[28..32].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&other, &newer).unwrap();
    let error = client.restore(&other).map(drop).unwrap_err();
    assert!(
        matches!(
            error,
            Error::Checkpoint(CheckpointError::UnsupportedVersion {
                version: 2,
                supported: 1,
                ..
            })
        ),
        "{error:?}"
    );
    let missing = client
        .restore(dir.path().join("missing.ckpt"))
        .map(drop)
        .unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::Io, "{missing}");
}

fn a_state_too_large_for_the_device_allocates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = small_checkpoint(dir.path());
    let small = ComputeClient::new(
        CpuBackend::with_capacity(Some(512)),
        Default::default(),
        Driver::Manual,
    );
    let error = small.restore(&path).map(drop).unwrap_err();
    assert!(
        matches!(
            error,
            Error::Checkpoint(CheckpointError::TooLargeForDevice {
                needed: 800,
                limit: 512,
                ..
            })
        ),
        "{error:?}"
    );
    small.sync().unwrap();
    assert_eq!(small.memory_usage().bytes_in_use, 0);
}

fn a_failed_checkpoint_keeps_the_previous_file() {
    let dir = tempfile::tempdir().unwrap();
    let (path, before) = small_checkpoint(dir.path());
    let client = cpu();
    let released = client.create(vec![1u8; 16]);
    let binding = released.binding();
    drop(released);
    client.sync().unwrap();
    let error = client
        .checkpoint(&path, Checkpoint::new().buffer("gone", binding))
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::ReleasedHandle, "{error}");
    assert_eq!(std::fs::read(&path).unwrap(), before);
    let leftovers = std::fs::read_dir(dir.path()).unwrap().count();
    assert_eq!(leftovers, 1, "the temporary file was removed");
}

/// Saves every frame, rolls back to frame k-8 at frame k, re-simulates 8 ticks: the same bits.
fn rollback_and_resimulate<B: Backend>(client: ComputeClient<B>) {
    let mut sim = Sim::new(client.clone(), CELLS);
    let mut ring = client.rollback_ring([&sim.cells, &sim.heat], 10).unwrap();
    let mut hashes = Vec::new();
    let mut rngs = Vec::new();
    for frame in 0..20u64 {
        ring.save(frame).unwrap();
        rngs.push(sim.rng);
        hashes.push(sim.hash());
        sim.step_in_place();
    }
    assert_eq!(ring.held(), (10..20).collect::<Vec<_>>());
    let final_hash = sim.hash();
    ring.rollback(12).unwrap();
    sim.tick = 12;
    sim.rng = rngs[12];
    assert_eq!(sim.hash(), hashes[12], "frame 12 restored on the device");
    assert_eq!(ring.held(), (10..=12).collect::<Vec<_>>());
    for frame in 12..20 {
        ring.save(frame).unwrap();
        sim.step_in_place();
    }
    assert_eq!(
        sim.hash(),
        final_hash,
        "8 re-simulated ticks give the first run's bits"
    );
}

fn rolling_back_8_frames_and_resimulating_gives_the_same_bits() {
    rollback_and_resimulate(cpu());
    rollback_and_resimulate(sim_backend());
}

fn a_frame_the_ring_no_longer_holds_is_an_error() {
    let client = cpu();
    let state = client.create(vec![0u8; 64]);
    let mut ring = client.rollback_ring([&state], 4).unwrap();
    for frame in 0..6 {
        ring.save(frame).unwrap();
    }
    let error = ring.rollback(1).unwrap_err();
    assert!(
        matches!(
            error,
            Error::Checkpoint(CheckpointError::FrameNotHeld { frame: 1, .. })
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("2..=5"), "{error}");
    let odd = client.create(vec![0u8; 6]);
    let error = client.rollback_ring([&odd], 2).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotWholeWords, "{error}");
}

const CHILD: &str = "GPUWORLD_CHECKPOINT_CHILD";

mod crash {
    use super::*;
    use std::process::{Command, Stdio};

    /// Cells of the child's world: 2 × 512 KiB per checkpoint, so a kill often lands mid-write.
    const CHILD_CELLS: usize = 128 * 1024;

    /// The child: resumes from `DIR/world.ckpt` if it is there, then steps and checkpoints
    /// until it is killed.
    pub fn child(dir: &Path) -> ! {
        let path = dir.join("world.ckpt");
        let client = cpu();
        let mut sim = if path.exists() {
            match Sim::restore(client, &path) {
                Ok(sim) => sim,
                Err(error) => {
                    eprintln!("child: the checkpoint does not restore: {error}");
                    std::process::exit(3);
                }
            }
        } else {
            Sim::new(client, CHILD_CELLS)
        };
        loop {
            sim.step();
            if let Err(error) = sim.checkpoint(&path) {
                eprintln!("child: checkpoint failed: {error}");
                std::process::exit(4);
            }
        }
    }

    fn kills() -> usize {
        std::env::var("GPUWORLD_CHECKPOINT_KILLS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(50)
    }

    pub fn a_child_killed_while_writing_always_leaves_a_checkpoint_that_resumes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("world.ckpt");
        let exe = std::env::current_exe().unwrap();
        let mut reference = Sim::new(cpu(), CHILD_CELLS);
        let mut reference_hashes = vec![reference.hash()];
        let mut rng = Seeded(0xc0ffee);
        let mut last_tick = 0;
        let mut mid_write = 0;
        let mut most_temps = 0;
        for kill in 0..kills() {
            let mut child = Command::new(&exe)
                .env(CHILD, dir.path())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .unwrap();
            std::thread::sleep(Duration::from_millis(30 + rng.below(270)));
            if let Ok(Some(status)) = child.try_wait() {
                panic!("kill {kill}: the child ended on its own: {status}");
            }
            child.kill().unwrap();
            child.wait().unwrap();
            let temps: Vec<String> = std::fs::read_dir(dir.path())
                .unwrap()
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|name| name.contains(".tmp."))
                .collect();
            if temps
                .iter()
                .any(|name| name.contains(&format!(".tmp.{}.", child.id())))
            {
                mid_write += 1;
            }
            most_temps = most_temps.max(temps.len());
            if !path.exists() {
                continue;
            }
            let mut resumed = Sim::restore(cpu(), &path).unwrap_or_else(|error| {
                panic!("kill {kill}: the newest checkpoint does not load: {error}")
            });
            assert!(
                resumed.tick >= last_tick,
                "kill {kill}: tick went back from {last_tick} to {}",
                resumed.tick
            );
            last_tick = resumed.tick;
            resumed.run(2);
            while reference_hashes.len() as u64 <= resumed.tick {
                reference.step();
                reference_hashes.push(reference.hash());
            }
            assert_eq!(
                resumed.hash(),
                reference_hashes[resumed.tick as usize],
                "kill {kill}: resumed from tick {}",
                last_tick
            );
        }
        eprintln!(
            "{} kills; the last checkpoint was of tick {last_tick}; {mid_write} kills mid-write; \
             at most {most_temps} temporary files at once",
            kills()
        );
        assert!(last_tick > 0, "no checkpoint was ever completed");
        // Each writer removes the files of the writers killed before it.
        assert!(
            most_temps < 10,
            "{most_temps} temporary files of killed writers piled up"
        );
    }
}

/// The worked example of `docs/checkpoints.md`, in a temporary directory
/// (`GPUWORLD_KEEP_EXAMPLE=PATH` copies its file there, for the page's `inspect` output).
fn the_worked_example_of_docs_checkpoints_md_runs() {
    use gpuworld::library;
    let dir = tempfile::tempdir().unwrap();
    let run = || -> Result<(), Error> {
        // A run on the cpu backend: a field scaled every tick.
        let client = gpuworld::cpu_client(Driver::Manual)?;
        let field = client.create_from_pod(&[1.0f32, 2.0, 3.0, 4.0]);
        let scratch = client.empty(16);
        for _ in 0..3 {
            let bindings = Bindings::new()
                .buffer(&field)
                .buffer(&scratch)
                .scalar_f32(2.0);
            client.launch(&library::SCALE, CubeCount::new_1d(1), bindings)?;
            let bindings = Bindings::new().buffer(&scratch).buffer(&field);
            client.launch(&library::COPY, CubeCount::new_1d(1), bindings)?;
        }
        let path = dir.path().join("example.ckpt");
        let meta = CheckpointMeta::at_tick(3).with_rng_state(42u64.to_le_bytes());
        let summary =
            client.checkpoint(&path, Checkpoint::new().buffer("field", &field).meta(meta))?;
        assert_eq!(summary.buffer_bytes, 16);

        // Later, in another process, on any backend (here the sim): the same handles and
        // metadata.
        let sim = gpuworld::sim_client(gpuworld::SimConfig::default())?;
        let restored = sim.restore(&path)?;
        assert_eq!(restored.meta.tick, 3);
        let field = restored.handle("field").expect("saved above");
        assert_eq!(sim.read_one_as::<f32>(field)?, [8.0, 16.0, 24.0, 32.0]);

        // Rollback in device memory: keep 8 frames, go back to frame 3.
        let mut ring = sim.rollback_ring([field], 8)?;
        ring.save(3)?;
        sim.write(field, bytemuck::cast_slice(&[0.0f32; 4]))?;
        ring.rollback(3)?;
        assert_eq!(sim.read_one_as::<f32>(field)?, [8.0, 16.0, 24.0, 32.0]);
        if let Some(keep) = std::env::var_os("GPUWORLD_KEEP_EXAMPLE") {
            std::fs::copy(&path, keep).unwrap();
        }
        Ok(())
    };
    run().unwrap();
}

fn many_small_buffers_on_several_streams_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("many.ckpt");
    for_each_manual_backend(|first, second| {
        let contents: Vec<Vec<u8>> = (0..300u32)
            .map(|i| (0..(i * 37) % 1000).map(|j| (i ^ j) as u8).collect())
            .collect();
        let streams: Vec<gpuworld::StreamId> = (0..300u64)
            .map(|i| gpuworld::StreamId { value: i % 3 })
            .collect();
        let handles: Vec<Handle> = contents
            .iter()
            .zip(&streams)
            .map(|(bytes, &stream)| first.with_stream(stream).create(bytes.clone()))
            .collect();
        let mut checkpoint = Checkpoint::new();
        for (i, (handle, &stream)) in handles.iter().zip(&streams).enumerate() {
            checkpoint = checkpoint.buffer_on(format!("b{i}"), handle, stream);
        }
        first.checkpoint(&path, checkpoint).unwrap();
        let restored = second(&path);
        assert_eq!(restored.len(), 300);
        for (i, (stream, bytes)) in restored.iter().enumerate() {
            assert_eq!(*stream, streams[i], "buffer {i}");
            assert_eq!(bytes, &contents[i], "buffer {i}");
        }
    });
}

/// Runs `test` with a cpu writer and, as the restorer, a cpu and a sim client (each restores
/// and reads back every buffer's stream and bytes).
fn for_each_manual_backend(
    test: impl Fn(&ComputeClient<CpuBackend>, &dyn Fn(&Path) -> Vec<(gpuworld::StreamId, Vec<u8>)>),
) {
    fn restore_on<B: Backend>(
        client: &ComputeClient<B>,
        path: &Path,
    ) -> Vec<(gpuworld::StreamId, Vec<u8>)> {
        let restored = client.restore(path).unwrap();
        restored
            .buffers
            .iter()
            .map(|b| (b.stream, client.read_one(&b.handle).unwrap().into_vec()))
            .collect()
    }
    let writer = cpu();
    test(&writer, &|path| restore_on(&cpu(), path));
    test(&writer, &|path| restore_on(&sim_backend(), path));
}

fn saving_and_rolling_back_never_tick() {
    let client = sim_backend();
    let state = client.create(vec![1u8; 4096]);
    client.sync().unwrap();
    let before = client.tick_count();
    let mut ring = client.rollback_ring([&state], 3).unwrap();
    for frame in 0..5 {
        ring.save(frame).unwrap();
    }
    ring.rollback(3).unwrap();
    assert_eq!(client.tick_count(), before, "the ring ticked the runtime");
    assert_eq!(client.read_one(&state).unwrap().into_vec(), vec![1u8; 4096]);
}
