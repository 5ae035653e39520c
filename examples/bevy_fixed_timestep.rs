//! A fixed-timestep simulation in a headless Bevy app: heat diffusing on a 256x256 plate, one
//! stencil step per fixed step at 60 Hz. `GpuworldPlugin` runs in `FixedUpdate`, so the runtime
//! ticks once per step however many steps a frame runs; a repeating `Readback` of the plate
//! every 60 steps logs its total heat (conserved, up to the fixed borders) and its hottest cell.
//! Time advances 1/30 s a frame (two steps), so the run is deterministic and bounded.
//!
//! ```sh
//! cargo run --example bevy_fixed_timestep --features bevy -- --frames 120
//! ```

use bevy_app::{App, AppExit, FixedUpdate, Last, ScheduleRunnerPlugin, Startup, TaskPoolPlugin};
use bevy_ecs::prelude::*;
use bevy_time::{Fixed, Time, TimePlugin, TimeUpdateStrategy};
use gpuworld::bevy::{Gpu, GpuworldPlugin, GpuworldSet, Readback, ReadbackComplete};
use gpuworld::{Bindings, CpuBackend, CubeCount, Driver, Handle, library};
use std::time::Duration;

/// Cells per side of the plate.
const SIDE: u32 = 256;

/// The plate, ping-ponged between two buffers.
#[derive(Resource)]
struct Plate {
    current: Handle,
    next: Handle,
    steps: u64,
}

/// Frames run and to run.
#[derive(Resource)]
struct Frames {
    run: u64,
    limit: u64,
}

/// A cold plate with a hot square in its middle.
fn initial_plate() -> Vec<f32> {
    let side = SIDE as usize;
    (0..side * side)
        .map(|i| {
            let (x, y) = (i % side, i / side);
            let hot = (side / 2 - 16..side / 2 + 16).contains(&x)
                && (side / 2 - 16..side / 2 + 16).contains(&y);
            if hot { 100.0 } else { 0.0 }
        })
        .collect()
}

fn setup(gpu: Res<Gpu<CpuBackend>>, mut commands: Commands) {
    let current = gpu.create_from_slice(bytemuck::cast_slice(&initial_plate()));
    let next = gpu.empty(current.size());
    commands.insert_resource(Plate {
        current,
        next,
        steps: 0,
    });
}

/// One diffusion step, then the buffers swap. Each 60th step reads the new plate back.
fn diffuse(gpu: Res<Gpu<CpuBackend>>, mut plate: ResMut<Plate>, mut commands: Commands) {
    let bindings = Bindings::new()
        .buffer(&plate.current)
        .buffer(&plate.next)
        .scalar_u32(SIDE)
        .scalar_u32(SIDE)
        .scalar_f32(0.2);
    let count = CubeCount::covering_2d(SIDE, SIDE, library::STENCIL_TILE);
    if let Err(error) = gpu.launch(&library::STENCIL, count, bindings) {
        eprintln!("stencil refused: {error}");
        return;
    }
    let plate = &mut *plate;
    std::mem::swap(&mut plate.current, &mut plate.next);
    plate.steps += 1;
    if plate.steps.is_multiple_of(60) {
        match gpu.read_ticket(&[plate.current.binding()]) {
            Ok(ticket) => {
                let step = plate.steps;
                commands
                    .spawn(Readback::once(ticket))
                    .observe(move |event: On<ReadbackComplete>| log_plate(step, &event));
            }
            Err(error) => eprintln!("read refused: {error}"),
        }
    }
}

fn log_plate(step: u64, event: &ReadbackComplete) {
    let cells = match event.to_vec::<f32>() {
        Ok(cells) => cells,
        Err(error) => {
            eprintln!("step {step}: {error}");
            return;
        }
    };
    let total: f64 = cells.iter().map(|&c| c as f64).sum();
    let hottest = cells.iter().copied().fold(f32::MIN, f32::max);
    println!("step {step:>5}: total heat {total:.1}, hottest cell {hottest:.3}");
}

fn count_frames(mut frames: ResMut<Frames>, mut exit: MessageWriter<AppExit>) {
    frames.run += 1;
    if frames.run >= frames.limit {
        exit.write(AppExit::Success);
    }
}

fn frames_from_args() -> Result<u64, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => Ok(240),
        [flag, value] if flag == "--frames" => value.parse().map_err(|e| format!("--frames: {e}")),
        _ => Err("usage: bevy_fixed_timestep [--frames N]".into()),
    }
}

fn main() -> AppExit {
    let limit = match frames_from_args() {
        Ok(limit) => limit,
        Err(error) => {
            eprintln!("error: {error}");
            return AppExit::error();
        }
    };
    let client = match gpuworld::cpu_client(Driver::Manual) {
        Ok(client) => client,
        Err(error) => {
            eprintln!("error: {error}");
            return AppExit::error();
        }
    };
    App::new()
        .add_plugins((
            TaskPoolPlugin::default(),
            TimePlugin,
            ScheduleRunnerPlugin::run_loop(Duration::ZERO),
        ))
        .insert_resource(TimeUpdateStrategy::ManualDuration(Duration::from_secs_f64(
            1.0 / 30.0,
        )))
        .insert_resource(Time::<Fixed>::from_hz(60.0))
        .add_plugins(GpuworldPlugin::new(client).in_schedule(FixedUpdate))
        .insert_resource(Frames { run: 0, limit })
        .add_systems(Startup, setup)
        .add_systems(FixedUpdate, diffuse.in_set(GpuworldSet::Submit))
        .add_systems(Last, count_frames)
        .run()
}
