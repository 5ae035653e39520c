//! A headless Bevy app (no window) with Bevy's `RenderPlugin` and [`GpuworldRenderPlugin`]:
//! gpuworld steps `render_particles`' integrator on Bevy's render device in the main world, and
//! a render-world system of the test's (as a user's render node would) draws the particles as
//! points from the [`ExtractedLeases`] of a [`LeasedBuffers`] entity into an offscreen image and
//! copies the leased positions out, in the frame Bevy renders. Compared with the cpu backend's
//! positions for the same seed and step count: the positions bit for bit (one
//! `#[gpuworld::kernel]`, the same bits on every backend), the image with the tolerance of
//! `tests/render_particles.rs` (a point within a rounding error of a pixel edge may land in the
//! neighbouring pixel: every differing pixel has a neighbour differing the other way, or lost a
//! point across the image's edge; at most 3% of the lit pixels). Without an adapter the test says so and passes, unless
//! `GPUWORLD_REQUIRE_WGPU=1`.

#[path = "../../../examples/render_particles/scene.rs"]
#[allow(dead_code)]
mod scene;

use bevy_app::{App, PluginsState, PostUpdate, TaskPoolPlugin};
use bevy_asset::AssetPlugin;
use bevy_ecs::prelude::*;
use bevy_render::renderer::{RenderDevice, RenderQueue};
use bevy_render::{Render, RenderApp, RenderPlugin, RenderSystems};
use gpuworld::bevy::{Gpu, GpuworldSet};
use gpuworld::{ComputeClient, CpuConfig, Driver, WgpuBackend, wgpu};
use gpuworld_bevy_render::{ExtractedLeases, GpuworldRenderPlugin, LeasedBuffers};
use scene::{OFFSCREEN_FORMAT, Offscreen, POINT_COLOR, Particles, PointPipeline, SIDE};
use std::sync::{Arc, Mutex};

const PARTICLES: usize = 20_000;
const FRAMES: u32 = 24;
const SEED: u32 = 5;

/// The particles, a main-world resource.
#[derive(Resource)]
struct Simulated(Particles);

/// What the render world's frames saw: the last frame's image and leased positions, and how
/// many frames drew.
#[derive(Default)]
struct Seen {
    frames: u32,
    pixels: Vec<u8>,
    xs: Vec<f32>,
    ys: Vec<f32>,
    lease_sizes: Vec<u64>,
}

/// The test's renderer, a render-world resource: the point pipeline, the target, and a buffer
/// the leased positions are copied to.
#[derive(Resource)]
struct Drawing {
    pipeline: PointPipeline,
    target: Offscreen,
    positions: wgpu::Buffer,
    seen: Arc<Mutex<Seen>>,
}

fn required() -> bool {
    std::env::var("GPUWORLD_REQUIRE_WGPU").is_ok_and(|v| v == "1")
}

/// Whether wgpu finds an adapter here (Bevy's renderer panics without one).
fn adapter_found() -> bool {
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    match pollster::block_on(instance.request_adapter(&Default::default())) {
        Ok(_) => true,
        Err(error) if required() => panic!("GPUWORLD_REQUIRE_WGPU=1 but no adapter: {error}"),
        Err(error) => {
            eprintln!("skipped: no wgpu adapter ({error})");
            false
        }
    }
}

/// Main world: the particles, uploaded once, and the entity whose positions the render world
/// gets leased.
fn spawn_particles(gpu: Res<Gpu<WgpuBackend>>, mut commands: Commands) {
    let particles = Particles::new(gpu.client(), PARTICLES, SEED);
    commands.spawn(LeasedBuffers::new([
        particles.px.clone(),
        particles.py.clone(),
    ]));
    commands.insert_resource(Simulated(particles));
}

/// Main world, every frame while there are particles: one integration step.
fn step(gpu: Res<Gpu<WgpuBackend>>, particles: Option<Res<Simulated>>) {
    if let Some(particles) = particles {
        particles.0.step(gpu.client()).expect("a step");
    }
}

/// Render world, every frame: draws the points from the leased positions, copies the image and
/// the positions out, submits on Bevy's queue and reads them back.
fn draw(
    leased: Query<&ExtractedLeases>,
    drawing: Res<Drawing>,
    device: Res<RenderDevice>,
    queue: Res<RenderQueue>,
) {
    // None once the test despawned the entity.
    let Ok(leases) = leased.single() else {
        return;
    };
    let (xs, ys) = (
        leases.get(0).expect("x lease"),
        leases.get(1).expect("y lease"),
    );
    let device = device.wgpu_device();
    let mut encoder = device.create_command_encoder(&Default::default());
    drawing.pipeline.draw(
        &mut encoder,
        &drawing.target.view,
        xs.slice(),
        ys.slice(),
        PARTICLES as u32,
    );
    drawing.target.copy_out(&mut encoder);
    let size = xs.size();
    encoder.copy_buffer_to_buffer(xs.buffer(), xs.offset(), &drawing.positions, 0, size);
    encoder.copy_buffer_to_buffer(ys.buffer(), ys.offset(), &drawing.positions, size, size);
    queue.submit([encoder.finish()]);

    let pixels = drawing.target.pixels(device).expect("the frame");
    let slice = drawing.positions.slice(..);
    slice.map_async(wgpu::MapMode::Read, |result| result.expect("mapping"));
    device
        .poll(wgpu::PollType::wait_indefinitely())
        .expect("waiting for the copy");
    let positions: Vec<f32> =
        bytemuck::cast_slice(&slice.get_mapped_range().expect("mapped")).to_vec();
    drawing.positions.unmap();
    let mut seen = drawing.seen.lock().expect("the test's record");
    seen.frames += 1;
    seen.pixels = pixels;
    seen.xs = positions[..PARTICLES].to_vec();
    seen.ys = positions[PARTICLES..].to_vec();
    seen.lease_sizes = leases.leases.iter().map(|lease| lease.size()).collect();
}

/// The headless app: Bevy's renderer without a window, gpuworld on its device.
fn app(seen: Arc<Mutex<Seen>>) -> App {
    let mut app = App::new();
    app.add_plugins((
        TaskPoolPlugin::default(),
        bevy_diagnostic::FrameCountPlugin,
        bevy_time::TimePlugin,
        AssetPlugin::default(),
        bevy_window::WindowPlugin {
            primary_window: None,
            exit_condition: bevy_window::ExitCondition::DontExit,
            ..Default::default()
        },
        RenderPlugin {
            synchronous_pipeline_compilation: true,
            ..Default::default()
        },
        bevy_image::ImagePlugin::default(),
        bevy_mesh::MeshPlugin,
        bevy_camera::CameraPlugin,
        GpuworldRenderPlugin::default(),
    ));
    while app.plugins_state() == PluginsState::Adding {
        std::thread::yield_now();
    }
    app.finish();
    app.cleanup();
    app.add_systems(bevy_app::Startup, spawn_particles)
        .add_systems(PostUpdate, step.in_set(GpuworldSet::Submit));
    let render = app.sub_app_mut(RenderApp);
    let device = render
        .world()
        .resource::<RenderDevice>()
        .wgpu_device()
        .clone();
    let positions = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("leased positions, copied"),
        size: (2 * PARTICLES * 4) as u64,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    render.insert_resource(Drawing {
        pipeline: PointPipeline::new(&device, OFFSCREEN_FORMAT),
        target: Offscreen::new(&device),
        positions,
        seen,
    });
    render.add_systems(Render, draw.in_set(RenderSystems::Render));
    app
}

/// Per pixel, how many points the host puts there (as `tests/render_particles.rs`).
fn rasterise(xs: &[f32], ys: &[f32]) -> Vec<u32> {
    let side = SIDE as f32;
    let mut counts = vec![0u32; (SIDE * SIDE) as usize];
    for (&x, &y) in xs.iter().zip(ys) {
        let (column, row) = (x * side, (1.0 - y) * side);
        if (0.0..side).contains(&column) && (0.0..side).contains(&row) {
            counts[row as usize * SIDE as usize + column as usize] += 1;
        }
    }
    counts
}

/// Per pixel, the point count the frame shows (red adds `POINT_COLOR[0]` per point).
fn counts_in(rgba: &[u8]) -> Vec<u32> {
    rgba.chunks_exact(4)
        .map(|pixel| u32::from(pixel[0]) / u32::from(POINT_COLOR[0]))
        .collect()
}

#[test]
fn bevy_draws_gpuworlds_positions_from_leases_in_its_render_world() {
    if !adapter_found() {
        return;
    }
    let seen = Arc::new(Mutex::new(Seen::default()));
    let mut app = app(seen.clone());
    for _ in 0..FRAMES {
        app.update();
    }
    // The client is the renderer's device's.
    let device = app.world().resource::<RenderDevice>().wgpu_device().clone();
    assert!(
        app.world().resource::<Gpu<WgpuBackend>>().wgpu_device() == device,
        "gpuworld runs on Bevy's render device"
    );
    let seen = seen.lock().expect("the record");
    assert_eq!(seen.frames, FRAMES, "every frame drew from its leases");
    assert_eq!(seen.lease_sizes, [(PARTICLES * 4) as u64; 2]);

    let cpu = ComputeClient::<gpuworld::CpuBackend>::open(CpuConfig::default(), Driver::Manual)
        .expect("the cpu backend");
    let on_cpu = Particles::new(&cpu, PARTICLES, SEED);
    for _ in 0..FRAMES {
        on_cpu.step(&cpu).expect("a cpu step");
    }
    let read = |h| bytemuck::cast_slice::<u8, f32>(&cpu.read_one(h).expect("read")).to_vec();
    let (xs, ys) = (read(&on_cpu.px), read(&on_cpu.py));
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    assert!(
        bits(&xs) == bits(&seen.xs) && bits(&ys) == bits(&seen.ys),
        "the leased positions of the last frame differ from the cpu backend's after {FRAMES} steps"
    );

    let frame = counts_in(&seen.pixels);
    let reference = rasterise(&xs, &ys);
    assert!(reference.iter().all(|&n| n < 31), "a pixel saturates");
    let lit = reference.iter().filter(|&&n| n > 0).count();
    assert!(lit > PARTICLES / 2, "only {lit} pixels lit");
    let side = SIDE as i64;
    let at = |x: i64, y: i64| (y * side + x) as usize;
    let mut differing = 0;
    for y in 0..side {
        for x in 0..side {
            let diff = i64::from(frame[at(x, y)]) - i64::from(reference[at(x, y)]);
            if diff == 0 {
                continue;
            }
            differing += 1;
            // A point within a rounding error of the image's edge may leave it.
            let on_edge = x == 0 || y == 0 || x == side - 1 || y == side - 1;
            let compensated = (on_edge && diff < 0)
                || (-1..=1)
                    .flat_map(|dy| (-1..=1).map(move |dx| (x + dx, y + dy)))
                    .any(|(nx, ny)| {
                        (0..side).contains(&nx)
                            && (0..side).contains(&ny)
                            && (i64::from(frame[at(nx, ny)]) - i64::from(reference[at(nx, ny)]))
                                .signum()
                                == -diff.signum()
                    });
            assert!(
                compensated,
                "pixel ({x}, {y}) has {} points, the host puts {}, no neighbour makes up for it",
                frame[at(x, y)],
                reference[at(x, y)]
            );
        }
    }
    assert!(
        differing * 100 <= 3 * lit,
        "{differing} of {lit} lit pixels differ"
    );
    eprintln!("{differing} of {lit} lit pixels differ by a point moved to a neighbour");
    // Nothing crossed the host per frame: the positions were uploaded once.
    let traffic = app
        .world()
        .resource::<Gpu<WgpuBackend>>()
        .wgpu_host_traffic();
    assert_eq!(traffic.read_back, 0, "{traffic:?}");
    assert_eq!(traffic.uploaded, (4 * PARTICLES * 4) as u64, "{traffic:?}");

    // The leases went with their frames: once the entity and the particles go, so does their
    // memory (a lease still held would keep its handle's pin).
    let entities: Vec<Entity> = (app.world_mut())
        .query_filtered::<Entity, With<LeasedBuffers>>()
        .iter(app.world())
        .collect();
    for entity in entities {
        app.world_mut().despawn(entity);
    }
    app.world_mut().remove_resource::<Simulated>();
    app.update();
    app.update();
    let usage = app.world().resource::<Gpu<WgpuBackend>>().memory_usage();
    assert_eq!(usage.bytes_in_use, 0, "{usage:?}");
}

#[test]
fn without_a_renderer_the_plugin_says_why_and_asks_the_app_to_exit() {
    let mut app = App::new();
    app.add_plugins((TaskPoolPlugin::default(), GpuworldRenderPlugin::default()));
    app.finish();
    let unavailable = app
        .world()
        .get_resource::<gpuworld_bevy_render::GpuworldRenderUnavailable>()
        .expect("the reason, as a resource");
    assert!(
        unavailable.reason.contains("no RenderDevice"),
        "{}",
        unavailable.reason
    );
    assert!(app.world().get_resource::<Gpu<WgpuBackend>>().is_none());
    assert!(
        app.should_exit().is_some_and(|exit| exit.is_error()),
        "the app is asked to exit with an error"
    );
}
