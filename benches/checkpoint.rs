//! Checkpoints and rollbacks (issue 51), through the public client as users call them, beside
//! the client's own raw bandwidth in the same run: a checkpoint and a restore of N MiB of device
//! state (GB/s) against `read` and `write` of the same buffers and against writing the bytes to
//! a file from host memory; and a rollback of 64 MiB of particle state (1M particles × 64 bytes)
//! to frame k-8 plus 8 re-simulated ticks, each saved again as a game would (goal: inside a
//! 16.6 ms frame). Each row is the best of `GPUWORLD_BENCH_REPEATS` (3) runs.
//!
//! Run: `cargo bench --bench checkpoint` (cpu, 256 MiB);
//! `GPUWORLD_CHECKPOINT_BACKEND=cuda GPUWORLD_CHECKPOINT_MIB=1024 cargo bench --features cuda --bench checkpoint`
//! (CUDA, 1 GiB). `GPUWORLD_CHECKPOINT_DIR` says where the file goes (default: the temporary
//! directory; put it on the disk a real run would use).

use gpuworld::checkpoint::{Checkpoint, CheckpointMeta};
use gpuworld::{
    Backend, Bindings, ComputeClient, CpuBackend, CubeCount, Driver, Handle, RuntimeConfig,
};
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Bytes per buffer of the checkpointed state: a large state is several buffers.
const BUFFER_BYTES: u64 = 256 << 20;
/// Particles of the rollback row, and the frames it rolls back.
const PARTICLES: u32 = 1 << 20;
const ROLLBACK_FRAMES: u64 = 8;

/// One step of the particles: 4 vec4 buffers (position, velocity, colour, age and seed), 64
/// bytes a particle; positions bounce in the unit box, colours follow speed.
#[gpuworld::kernel(cube_dim = 256)]
fn particles_step(pos: &mut [f32], vel: &mut [f32], color: &mut [f32], life: &mut [f32], dt: f32) {
    let i = global_index();
    if 4 * i < pos.len() {
        for c in 0..3 {
            let k = 4 * i + c;
            let mut p = pos[k] + vel[k] * dt;
            let mut v = vel[k];
            if p < 0.0 {
                p = -p;
                v = -v;
            }
            if p > 1.0 {
                p = 2.0 - p;
                v = -v;
            }
            pos[k] = p;
            vel[k] = v * 0.999;
            color[k] = color[k] * 0.9 + v.abs() * 0.1;
        }
        life[4 * i] = life[4 * i] + dt;
    }
}

fn main() {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let number = |name: &str, default: u64| {
        var(name).map_or(default, |v| {
            v.trim()
                .parse()
                .unwrap_or_else(|_| panic!("{name}: `{v}` is not a number"))
        })
    };
    let mib = number("GPUWORLD_CHECKPOINT_MIB", 256);
    let repeats = number("GPUWORLD_BENCH_REPEATS", 3).max(1);
    let dir = var("GPUWORLD_CHECKPOINT_DIR").map_or_else(std::env::temp_dir, PathBuf::from);
    let backend = var("GPUWORLD_CHECKPOINT_BACKEND").unwrap_or_else(|| "cpu".into());
    let settings = Settings {
        bytes: mib << 20,
        repeats,
        dir,
    };
    match backend.as_str() {
        "cpu" => run(
            ComputeClient::new(
                CpuBackend::new(),
                RuntimeConfig::default(),
                Driver::DeviceThread,
            ),
            &settings,
        ),
        #[cfg(feature = "cuda")]
        "cuda" => run(
            gpuworld::cuda_client(gpuworld::CudaConfig::default()).expect("a CUDA device"),
            &settings,
        ),
        #[cfg(feature = "wgpu")]
        "wgpu" => run(
            gpuworld::wgpu_client(gpuworld::WgpuConfig::default()).expect("a wgpu adapter"),
            &settings,
        ),
        other => {
            panic!("GPUWORLD_CHECKPOINT_BACKEND={other}: cpu, or cuda or wgpu with their feature")
        }
    }
}

struct Settings {
    bytes: u64,
    repeats: u64,
    dir: PathBuf,
}

/// The best time of `repeats` runs of `work`.
fn best(repeats: u64, mut work: impl FnMut() -> Duration) -> Duration {
    (0..repeats).map(|_| work()).min().unwrap_or_default()
}

fn gbps(bytes: u64, time: Duration) -> f64 {
    bytes as f64 / time.as_secs_f64() / 1e9
}

fn run<B: Backend>(client: ComputeClient<B>, settings: &Settings) {
    let bytes = settings.bytes;
    let device = format!("{} ({})", B::NAME, client.properties().name);
    eprintln!(
        "checkpoint bench on {device}: {} MiB of state, best of {}",
        bytes >> 20,
        settings.repeats
    );
    let sizes: Vec<u64> = (0..bytes.div_ceil(BUFFER_BYTES))
        .map(|i| BUFFER_BYTES.min(bytes - i * BUFFER_BYTES))
        .collect();
    let host: Vec<u8> = (0..BUFFER_BYTES.min(bytes))
        .map(|i| ((i * 2_654_435_761) >> 13) as u8)
        .collect();
    let state: Vec<Handle> = sizes
        .iter()
        .map(|&n| client.create_from_slice(&host[..n as usize]))
        .collect();
    client.sync().expect("the state uploads");
    let path = settings
        .dir
        .join(format!("gpuworld-bench-{}.ckpt", std::process::id()));

    let raw_read = best(settings.repeats, || {
        let start = Instant::now();
        for handle in &state {
            drop(client.read_one(handle).expect("read"));
        }
        start.elapsed()
    });
    let raw_write = best(settings.repeats, || {
        let start = Instant::now();
        for (handle, &n) in state.iter().zip(&sizes) {
            client.write(handle, &host[..n as usize]).expect("write");
        }
        client.sync().expect("written");
        start.elapsed()
    });
    let file_write = best(settings.repeats, || {
        let start = Instant::now();
        let mut file = std::fs::File::create(&path).expect("a file");
        for &n in &sizes {
            file.write_all(&host[..n as usize]).expect("file write");
        }
        file.sync_all().expect("fsync");
        start.elapsed()
    });
    let checkpoint = best(settings.repeats, || {
        let start = Instant::now();
        let mut ckpt = Checkpoint::new().meta(CheckpointMeta::at_tick(1));
        for (i, handle) in state.iter().enumerate() {
            ckpt = ckpt.buffer(format!("b{i}"), handle);
        }
        client.checkpoint(&path, ckpt).expect("checkpoint");
        start.elapsed()
    });
    let restore = best(settings.repeats, || {
        let start = Instant::now();
        let restored = client.restore(&path).expect("restore");
        let time = start.elapsed();
        drop(restored);
        client.sync().expect("released");
        time
    });
    let _ = std::fs::remove_file(&path);
    drop(state);
    client.memory_cleanup();
    client.sync().expect("cleanup");

    let row = |name: &str, time: Duration| {
        eprintln!(
            "  {name:<40} {:>9.3} ms  {:>7.2} GB/s",
            time.as_secs_f64() * 1e3,
            gbps(bytes, time)
        );
    };
    row("checkpoint (device -> file, fsync)", checkpoint);
    row("restore (file -> device)", restore);
    row("raw client read (device -> host)", raw_read);
    row("raw client write (host -> device)", raw_write);
    row("host write to file + fsync", file_write);

    rollback(&client, settings.repeats);
}

/// Rollback of 64 MiB to frame k-8 and 8 re-simulated ticks, each saved to the ring again.
fn rollback<B: Backend>(client: &ComputeClient<B>, repeats: u64) {
    let n = 4 * PARTICLES as usize;
    let init: Vec<f32> = (0..n)
        .map(|i| ((i * 7919) % 1000) as f32 / 1000.0)
        .collect();
    let buffers: Vec<Handle> = (0..4).map(|_| client.create_from_pod(&init)).collect();
    let mut ring = client
        .rollback_ring(&buffers, ROLLBACK_FRAMES as usize + 2)
        .expect("a ring");
    let step = |frame: u64| {
        let bindings = buffers
            .iter()
            .fold(Bindings::new(), |b, h| b.buffer(h))
            .scalar_f32(1.0 / 60.0);
        client
            .launch(
                &particles_step,
                CubeCount::covering(u64::from(PARTICLES), 256),
                bindings,
            )
            .expect("step");
        let _ = frame;
    };
    let mut frame = 0;
    for _ in 0..=ROLLBACK_FRAMES {
        ring.save(frame).expect("save");
        step(frame);
        frame += 1;
    }
    client.sync().expect("warm");
    let save = best(repeats, || {
        let start = Instant::now();
        ring.save(frame).expect("save");
        client.sync().expect("saved");
        start.elapsed()
    });
    let resimulate = best(repeats, || {
        let start = Instant::now();
        let back = frame - ROLLBACK_FRAMES;
        ring.rollback(back).expect("rollback");
        for f in back..frame {
            ring.save(f).expect("save");
            step(f);
        }
        ring.save(frame).expect("save");
        client.sync().expect("resimulated");
        start.elapsed()
    });
    let ticks = best(repeats, || {
        let start = Instant::now();
        for f in 0..ROLLBACK_FRAMES {
            step(f);
        }
        client.sync().expect("ticks");
        start.elapsed()
    });
    let ms = |t: Duration| t.as_secs_f64() * 1e3;
    eprintln!("  rollback of 64 MiB (1M particles x 64 B):");
    eprintln!(
        "    save one frame (4 device copies)          {:>9.3} ms",
        ms(save)
    );
    eprintln!(
        "    rollback k-8 + 8 ticks, each saved        {:>9.3} ms  (frame budget 16.6 ms)",
        ms(resimulate)
    );
    eprintln!(
        "    8 ticks alone (no ring)                   {:>9.3} ms",
        ms(ticks)
    );
}
