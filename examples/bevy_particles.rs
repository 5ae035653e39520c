//! Particles in a headless Bevy app: `GpuworldPlugin` ticks the runtime once a frame, a `Submit`
//! system integrates every particle on the device each frame with a `#[gpuworld::kernel]` defined
//! here (one Rust source for every backend), and a repeating `Readback` brings positions and velocities back every
//! 30 frames for a log line of statistics. The frame count is bounded, so CI runs it.
//!
//! ```sh
//! cargo run --release --example bevy_particles --features bevy                  # cpu
//! cargo run --release --example bevy_particles --features bevy,wgpu -- --backend wgpu
//! cargo run --release --example bevy_particles --features bevy,cuda -- --backend cuda
//! ```
//! Options: `--frames N` (300), `--particles N` (131072), `--backend cpu|wgpu|cuda` (by
//! default the first of cuda, wgpu, cpu that is compiled in and has a device), `--no-warm-up`
//! (compile the kernel at its first launch, in the first frame, instead of before the app runs).

use bevy_app::{App, AppExit, Last, PostUpdate, ScheduleRunnerPlugin, Startup, TaskPoolPlugin};
use bevy_ecs::prelude::*;
use gpuworld::bevy::{Gpu, GpuFrames, GpuworldPlugin, GpuworldSet, Readback, ReadbackComplete};
use gpuworld::{Backend, Bindings, ComputeClient, CubeCount, Driver, Handle};
use std::time::{Duration, Instant};

/// Units per cube of the integration kernel.
const CUBE: u32 = 256;

/// Frames between two statistics readbacks.
const STATS_EVERY: u32 = 30;

/// One explicit Euler step under gravity in the unit box, bouncing off its walls: one
/// `#[gpuworld::kernel]` source, the same bits on every backend.
#[gpuworld::kernel(id = "examples.particles.integrate", cube_dim = 256)]
fn euler_step(
    px: &mut [f32],
    py: &mut [f32],
    vx: &mut [f32],
    vy: &mut [f32],
    dt: f32,
    gravity: f32,
) {
    let i = global_index();
    if i < px.len() {
        let mut u = vx[i];
        let mut w = vy[i] - gravity * dt;
        let mut x = px[i] + u * dt;
        let mut y = py[i] + w * dt;
        // Past a wall: folded back inside, the velocity reversed.
        if x < 0.0 {
            x = -x;
            u = -u;
        } else if x > 1.0 {
            x = 2.0 - x;
            u = -u;
        }
        if y < 0.0 {
            y = -y;
            w = -w;
        } else if y > 1.0 {
            y = 2.0 - y;
            w = -w;
        }
        px[i] = x;
        py[i] = y;
        vx[i] = u;
        vy[i] = w;
    }
}

/// The command line.
struct Options {
    frames: u64,
    particles: usize,
    backend: Option<String>,
    warm_up: bool,
}

fn options() -> Result<Options, String> {
    let mut options = Options {
        frames: 300,
        particles: 131_072,
        backend: None,
        warm_up: true,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--frames" => {
                options.frames = value()?.parse().map_err(|e| format!("--frames: {e}"))?
            }
            "--particles" => {
                options.particles = value()?.parse().map_err(|e| format!("--particles: {e}"))?
            }
            "--backend" => options.backend = Some(value()?),
            "--no-warm-up" => options.warm_up = false,
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    Ok(options)
}

/// The particle buffers.
#[derive(Resource)]
struct Particles {
    px: Handle,
    py: Handle,
    vx: Handle,
    vy: Handle,
    count: usize,
}

/// The run: particles, frames run and to run, and when the first one started.
#[derive(Resource)]
struct Run {
    particles: usize,
    frames: u64,
    limit: u64,
    started: Instant,
    warmed_up: bool,
}

/// A deterministic spread of starting positions and velocities.
fn initial(count: usize, seed: u32) -> Vec<f32> {
    (0..count as u32)
        .map(|i| {
            let h = i
                .wrapping_mul(2_654_435_761)
                .wrapping_add(seed.wrapping_mul(40_503));
            (h >> 8) as f32 / (1 << 24) as f32
        })
        .collect()
}

fn spawn_particles<B: Backend>(gpu: Res<Gpu<B>>, run: Res<Run>, mut commands: Commands) {
    let count = run.particles;
    let upload = |values: Vec<f32>| gpu.create_from_slice(bytemuck::cast_slice(&values));
    let particles = Particles {
        px: upload(initial(count, 1)),
        py: upload(initial(count, 2)),
        vx: upload(initial(count, 3).iter().map(|v| v - 0.5).collect()),
        vy: upload(initial(count, 4).iter().map(|v| v - 0.5).collect()),
        count,
    };
    commands
        .spawn(Readback::every(
            STATS_EVERY,
            [&particles.py, &particles.vx, &particles.vy],
        ))
        .observe(log_stats);
    commands.insert_resource(particles);
}

fn integrate<B: Backend>(gpu: Res<Gpu<B>>, particles: Res<Particles>) {
    let p = &*particles;
    let bindings = Bindings::new()
        .buffer(&p.px)
        .buffer(&p.py)
        .buffer(&p.vx)
        .buffer(&p.vy)
        .scalar_f32(1.0 / 60.0)
        .scalar_f32(0.5);
    if let Err(error) = gpu.launch(
        &euler_step,
        CubeCount::covering(p.count as u64, CUBE),
        bindings,
    ) {
        eprintln!("integrate refused: {error}");
    }
}

/// Heights, energy and the number of particles moving up, from one readback.
fn log_stats(event: On<ReadbackComplete>, run: Res<Run>) {
    let [py, vx, vy] = match event.to_vecs::<f32>().map(<[Vec<f32>; 3]>::try_from) {
        Ok(Ok(sources)) => sources,
        Ok(Err(sources)) => {
            eprintln!("expected 3 sources, got {}", sources.len());
            return;
        }
        Err(error) => {
            eprintln!("stats: {error}");
            return;
        }
    };
    let n = py.len() as f64;
    let mean_height = py.iter().map(|&y| y as f64).sum::<f64>() / n;
    let energy = py
        .iter()
        .zip(vx.iter().zip(&vy))
        .map(|(&y, (&u, &w))| 0.5 * (u as f64 * u as f64 + w as f64 * w as f64) + 0.5 * y as f64)
        .sum::<f64>()
        / n;
    let rising = vy.iter().filter(|&&w| w > 0.0).count();
    println!(
        "frame {:>5}: {} particles, mean height {mean_height:.4}, energy per particle {energy:.5}, rising {rising}",
        run.frames,
        py.len()
    );
}

fn count_frames<B: Backend>(
    mut run: ResMut<Run>,
    frames: Res<GpuFrames<B>>,
    mut exit: MessageWriter<AppExit>,
) {
    run.frames += 1;
    if run.frames == 1 {
        println!(
            "first frame (uploads, first launch; kernel {}): {:.3} ms",
            if run.warmed_up {
                "warmed up before"
            } else {
                "compiled in it"
            },
            run.started.elapsed().as_secs_f64() * 1e3
        );
        run.started = Instant::now();
    }
    if run.frames >= run.limit {
        let elapsed = run.started.elapsed();
        let per_frame = elapsed / (run.frames.max(2) - 1) as u32;
        println!(
            "{} frames on {}: {:.3} ms per frame (after the first), {:.1}% of it in gpuworld's systems",
            run.frames,
            B::NAME,
            per_frame.as_secs_f64() * 1e3,
            100.0 * frames.time_in_plugin.as_secs_f64() / elapsed.as_secs_f64().max(1e-9)
        );
        exit.write(AppExit::Success);
    }
}

fn run<B: Backend>(client: ComputeClient<B>, options: &Options) -> AppExit {
    if options.warm_up {
        let start = Instant::now();
        if let Err(error) = client.warm_up(&euler_step) {
            eprintln!(
                "the integration kernel does not compile on {}: {error}",
                B::NAME
            );
            return AppExit::error();
        }
        println!(
            "kernel warmed up on {} in {:.3} ms, before the first frame",
            B::NAME,
            start.elapsed().as_secs_f64() * 1e3
        );
    }
    App::new()
        .add_plugins((
            TaskPoolPlugin::default(),
            bevy_time::TimePlugin,
            ScheduleRunnerPlugin::run_loop(Duration::ZERO),
        ))
        .add_plugins(GpuworldPlugin::new(client))
        .insert_resource(Run {
            particles: options.particles,
            frames: 0,
            limit: options.frames,
            started: Instant::now(),
            warmed_up: options.warm_up,
        })
        .add_systems(Startup, spawn_particles::<B>)
        .add_systems(PostUpdate, integrate::<B>.in_set(GpuworldSet::Submit))
        .add_systems(Last, count_frames::<B>)
        .run()
}

fn main() -> AppExit {
    let options = match options() {
        Ok(options) => options,
        Err(error) => {
            eprintln!("error: {error}");
            return AppExit::error();
        }
    };
    if options.particles == 0 {
        eprintln!("error: --particles must be at least 1");
        return AppExit::error();
    }
    let wanted = options.backend.as_deref();
    #[cfg(feature = "cuda")]
    if wanted.is_none() || wanted == Some("cuda") {
        match gpuworld::cuda_client_with(gpuworld::CudaConfig::default(), Driver::Manual) {
            Ok(client) => return run(client, &options),
            Err(error) if wanted.is_some() => {
                eprintln!("error: {error}");
                return AppExit::error();
            }
            Err(error) => eprintln!("no CUDA device ({error}); trying the next backend"),
        }
    }
    #[cfg(feature = "wgpu")]
    if wanted.is_none() || wanted == Some("wgpu") {
        match gpuworld::wgpu_client_with(gpuworld::WgpuConfig::default(), Driver::Manual) {
            Ok(client) => return run(client, &options),
            Err(error) if wanted.is_some() => {
                eprintln!("error: {error}");
                return AppExit::error();
            }
            Err(error) => eprintln!("no wgpu adapter ({error}); using the cpu backend"),
        }
    }
    #[cfg(feature = "cpu")]
    if wanted.is_none() || wanted == Some("cpu") {
        return match gpuworld::cpu_client(Driver::Manual) {
            Ok(client) => run(client, &options),
            Err(error) => {
                eprintln!("error: {error}");
                AppExit::error()
            }
        };
    }
    eprintln!(
        "error: backend `{}` is not compiled in (features: cpu, wgpu, cuda)",
        wanted.unwrap_or("any")
    );
    AppExit::error()
}
