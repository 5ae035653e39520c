//! Per-frame cost of `GpuworldPlugin` on the sim backend, with 100k idle handles live and 64
//! ADD launches a frame: one `App::update` (the plugin's systems, a user `Submit` system that
//! launches, the frame's fence and one tick), side by side with the same 64 launches and one
//! tick through the bare client, with and without the fence, in the same process. The handles
//! are made on the plugin's stream, as a `Startup` system using `Gpu` would.

use bevy_app::{App, PostUpdate};
use bevy_ecs::prelude::*;
use criterion::{Criterion, criterion_group, criterion_main};
use gpuworld::bevy::{Gpu, GpuFrames, GpuworldPlugin, GpuworldSet};
use gpuworld::{
    Bindings, ComputeClient, CubeCount, Driver, Handle, RuntimeConfig, SimBackend, SimConfig,
    library,
};
use std::time::Duration;

/// Idle handles live in the runtime.
const IDLE_HANDLES: usize = 100_000;
/// ADD launches a frame.
const LAUNCHES_PER_FRAME: usize = 64;
/// Bytes of each buffer the launches bind.
const WORK_BYTES: u64 = 1024;

/// The buffers each frame's launches bind, and the idle handles kept alive.
#[derive(Resource)]
struct Work {
    a: Handle,
    b: Handle,
    out: Handle,
    _idle: Vec<Handle>,
}

impl Work {
    fn new(client: &ComputeClient<SimBackend>) -> Work {
        let work = Work {
            _idle: (0..IDLE_HANDLES).map(|_| client.empty(256)).collect(),
            a: client.empty(WORK_BYTES),
            b: client.empty(WORK_BYTES),
            out: client.empty(WORK_BYTES),
        };
        client.tick();
        work
    }

    fn launch(&self, client: &ComputeClient<SimBackend>) {
        for _ in 0..LAUNCHES_PER_FRAME {
            let bindings = Bindings::new()
                .buffer(&self.a)
                .buffer(&self.b)
                .buffer(&self.out);
            client
                .launch(&library::ADD, CubeCount::new_1d(1), bindings)
                .expect("ADD takes three buffers");
        }
    }
}

fn sim_client() -> ComputeClient<SimBackend> {
    ComputeClient::new(
        SimBackend::new(
            SimConfig::default()
                .with_latency_ticks(1)
                .with_record(false),
        ),
        RuntimeConfig::default(),
        Driver::Manual,
    )
}

fn submit(gpu: Res<Gpu<SimBackend>>, work: Res<Work>) {
    work.launch(&gpu);
}

fn plugin_frame(c: &mut Criterion) {
    let mut group = c.benchmark_group("bevy");
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));

    let bare = sim_client();
    let bare_work = Work::new(&bare);
    group.bench_function("bare_client_64_launches_and_a_tick", |b| {
        b.iter(|| {
            bare_work.launch(&bare);
            bare.tick();
        })
    });

    let fenced = sim_client().with_stream(gpuworld::bevy::PLUGIN_STREAM);
    let fenced_work = Work::new(&fenced);
    group.bench_function("bare_client_64_launches_a_fence_and_a_tick", |b| {
        b.iter(|| {
            fenced_work.launch(&fenced);
            fenced.end_frame();
            fenced.tick();
        })
    });

    let client = sim_client().with_stream(gpuworld::bevy::PLUGIN_STREAM);
    let work = Work::new(&client);
    let mut app = App::new();
    app.add_plugins(GpuworldPlugin::new(client.clone()))
        .insert_resource(work)
        .add_systems(PostUpdate, submit.in_set(GpuworldSet::Submit));
    app.update();
    group.bench_function("plugin_frame_64_launches", |b| b.iter(|| app.update()));
    // The plugin's own systems (frames-in-flight check, fence, the tick of the 64 launches), as
    // `GpuFrames::time_in_plugin` measures them inside the same frames.
    group.bench_function("plugin_systems_and_tick_in_that_frame", |b| {
        b.iter_custom(|iters| {
            let in_plugin = |app: &App| {
                app.world()
                    .resource::<GpuFrames<SimBackend>>()
                    .time_in_plugin
            };
            let before = in_plugin(&app);
            for _ in 0..iters {
                app.update();
            }
            in_plugin(&app) - before
        })
    });

    let empty = sim_client().with_stream(gpuworld::bevy::PLUGIN_STREAM);
    let mut idle_app = App::new();
    idle_app
        .add_plugins(GpuworldPlugin::new(empty.clone()))
        .insert_resource(Work::new(&empty));
    idle_app.update();
    group.bench_function("plugin_frame_no_launches", |b| b.iter(|| idle_app.update()));

    let mut bare_app = App::new();
    bare_app.update();
    group.bench_function("empty_app_frame", |b| b.iter(|| bare_app.update()));
    group.finish();
    assert_eq!(
        client.frames_in_flight(),
        1,
        "one frame in flight at latency 1"
    );
}

// criterion_group!'s function is public and undocumented: it stays in a private module.
mod group {
    use super::*;
    criterion_group!(benches, plugin_frame);
}
criterion_main!(group::benches);
