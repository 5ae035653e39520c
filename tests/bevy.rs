//! `GpuworldPlugin` in a Bevy app, frame by frame: the world after every frame is the same in
//! two runs on the sim, readbacks arrive on the frame the sim's latency says, the
//! frames-in-flight limit holds in both modes, a despawned readback leaks nothing, two runtimes
//! run side by side, a fixed timestep ticks per step, and cpu and wgpu give the same values.
//! A repeating readback keeps its memory alive, delivers every frame's own data in frame order,
//! and reports each frame it had to skip.

mod common;

use bevy_app::{App, FixedUpdate, PostUpdate};
use bevy_ecs::prelude::*;
use gpuworld::bevy::{
    DEFAULT_READS_IN_FLIGHT, FramesFull, Gpu, GpuFrameGraph, GpuFrames, GpuworldPlugin,
    GpuworldSet, Readback, ReadbackComplete, ReadbackFailed, TickPolicy,
};
use gpuworld::error::LayoutError;
use gpuworld::{
    Backend, Bindings, ComputeClient, CpuSource, CubeCount, Driver, Handle, KernelDef, Param,
    Signature, SimConfig,
};
use std::time::Duration;

test_main![
    a_sim_app_gives_the_same_world_after_every_frame_and_readbacks_arrive_latency_frames_later,
    the_frames_in_flight_limit_waits_for_the_oldest_frame,
    the_frames_in_flight_limit_skips_submissions,
    a_readback_despawned_before_its_bytes_arrive_loses_nothing_else_and_leaks_nothing,
    two_runtimes_each_tick_once_a_frame_and_deliver_their_own_readbacks,
    under_fixed_update_the_runtime_ticks_once_per_fixed_step,
    ticking_until_idle_delivers_a_readback_in_the_frame_that_issued_it,
    cpu_and_wgpu_deliver_the_same_values_as_the_sim,
    every_frame_on_the_sim_delivers_each_frames_own_data_latency_frames_later,
    every_frame_on_cpu_accounts_for_every_frame_of_a_headless_app,
    a_readback_at_its_bound_of_reads_in_flight_reports_the_frames_it_skipped,
    a_repeating_readback_keeps_delivering_after_the_user_drops_its_handle,
    a_readback_of_several_sources_decodes_each_of_them,
    an_opted_in_frame_graph_replays_repeated_frames_and_the_values_stay_the_eager_ones,
];

/// `x[i] += step`, 64 units per cube.
static BUMP: KernelDef = KernelDef {
    id: "tests.bevy.bump",
    name: "bump",
    signature: Signature {
        buffers: &[Param::f32("x")],
        scalars: &[Param::f32("step")],
        cube_dim: [64, 1, 1],
    },
    sources: &[
        &CpuSource(|cube, io| {
            for i in cube.units_1d(io.len32(0)) {
                io.store_f32(0, i, io.load_f32(0, i) + io.scalar_f32(0));
            }
        }),
        #[cfg(feature = "wgpu")]
        &gpuworld::WgslSource(
            "@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < arrayLength(&x) { x[id.x] = x[id.x] + scalars.step; }
}",
        ),
    ],
};

/// Elements of the buffer the test bumps.
const LEN: usize = 256;

/// The frame being run, counted from 0 by a system in `First`.
#[derive(Resource, Default)]
struct Frame(u64);

/// A readback that arrived: the frame it was issued in, the frame it arrived in, its values.
type Arrival = (u64, u64, Vec<f32>);

/// Every readback that arrived.
#[derive(Resource, Default)]
struct Arrivals(Vec<Arrival>);

/// The buffer of runtime `(B, M)`, and how often `Submit` ran for it.
#[derive(Resource)]
struct Counter<M: Send + Sync + 'static> {
    buffer: Handle,
    submits: u64,
    marker: std::marker::PhantomData<fn() -> M>,
}

fn count_frames(mut frame: ResMut<Frame>) {
    frame.0 += 1;
}

/// A `Submit` system: bumps every element by 1, and every `every` frames spawns a readback of
/// the buffer whose arrival is recorded with the frame it was issued in.
fn bump_and_read<B: Backend, M: Send + Sync + 'static, const EVERY: u64>(
    gpu: Res<Gpu<B, M>>,
    mut counter: ResMut<Counter<M>>,
    frame: Res<Frame>,
    mut commands: Commands,
) {
    counter.submits += 1;
    let bindings = Bindings::new().buffer(&counter.buffer).scalar_f32(1.0);
    gpu.launch(&BUMP, CubeCount::covering(LEN as u64, 64), bindings)
        .expect("bump launches");
    if frame.0.is_multiple_of(EVERY) {
        let ticket = gpu
            .read_ticket(&[counter.buffer.binding()])
            .expect("read is valid");
        let issued = frame.0;
        commands.spawn(Readback::once(ticket)).observe(
            move |event: On<ReadbackComplete>,
                  frame: Res<Frame>,
                  mut arrivals: ResMut<Arrivals>| {
                arrivals
                    .0
                    .push((issued, frame.0, event.to_vec::<f32>().unwrap()));
            },
        );
    }
}

/// An app with the plugin over `client` (marker `M`), bumping and reading every `EVERY` frames.
fn app_with<B: Backend, M: Send + Sync + 'static, const EVERY: u64>(
    app: &mut App,
    plugin: GpuworldPlugin<B, M>,
    client: &ComputeClient<B>,
) {
    let buffer = client.create_from_slice(bytemuck::cast_slice(&[0.0f32; LEN]));
    app.add_plugins(plugin)
        .insert_resource(Counter::<M> {
            buffer,
            submits: 0,
            marker: std::marker::PhantomData,
        })
        .add_systems(
            PostUpdate,
            bump_and_read::<B, M, EVERY>.in_set(GpuworldSet::Submit),
        );
}

fn new_app() -> App {
    let mut app = App::new();
    app.init_resource::<Frame>()
        .init_resource::<Arrivals>()
        .add_systems(bevy_app::First, count_frames);
    app
}

fn sim(latency_ticks: u64) -> ComputeClient<gpuworld::SimBackend> {
    gpuworld::sim_client(SimConfig::default().with_latency_ticks(latency_ticks))
        .expect("the sim opens")
}

/// Runs 120 frames of the sim app; the runtime's snapshot after each frame, and the arrivals.
fn run_sim_app(latency: u64) -> (Vec<String>, Vec<Arrival>) {
    let client = sim(latency);
    let mut app = new_app();
    app_with::<_, (), 10>(&mut app, GpuworldPlugin::new(client.clone()), &client);
    let mut snapshots = Vec::new();
    for _ in 0..120 {
        app.update();
        snapshots.push(client.snapshot());
    }
    let arrivals = app.world_mut().remove_resource::<Arrivals>().unwrap().0;
    (snapshots, arrivals)
}

fn a_sim_app_gives_the_same_world_after_every_frame_and_readbacks_arrive_latency_frames_later() {
    let latency = 2;
    let (first, arrivals) = run_sim_app(latency);
    let (second, again) = run_sim_app(latency);
    assert_eq!(first.len(), 120);
    for (frame, (a, b)) in first.iter().zip(&second).enumerate() {
        assert_eq!(a, b, "the runtime differs after frame {}", frame + 1);
    }
    assert_eq!(arrivals, again);
    // Frames count from 1; a readback every 10th frame, each `latency` frames after its frame,
    // holding the bumps of every frame up to and including its own.
    let expected: Vec<Arrival> = (1..=120)
        .filter(|f: &u64| f.is_multiple_of(10) && f + latency <= 120)
        .map(|f| (f, f + latency, vec![f as f32; LEN]))
        .collect();
    assert_eq!(arrivals, expected);
}

/// Runs `frames` frames with a latency far above the limit; after each, the frames in flight.
fn run_with_limit(when_full: FramesFull) -> (App, ComputeClient<gpuworld::SimBackend>, Vec<usize>) {
    let client = sim(6);
    let mut app = new_app();
    let plugin = GpuworldPlugin::new(client.clone()).frames_in_flight(2, when_full);
    app_with::<_, (), 1000>(&mut app, plugin, &client);
    let mut in_flight = Vec::new();
    for _ in 0..30 {
        app.update();
        in_flight.push(client.frames_in_flight());
    }
    (app, client, in_flight)
}

fn the_frames_in_flight_limit_waits_for_the_oldest_frame() {
    let (mut app, client, in_flight) = run_with_limit(FramesFull::Wait);
    assert!(in_flight.iter().all(|&n| n <= 2), "{in_flight:?}");
    let frames = app.world().resource::<GpuFrames<gpuworld::SimBackend>>();
    assert_eq!(frames.ended, 30);
    assert_eq!(frames.skipped, 0);
    assert!(frames.waited > 0);
    // Waiting ticked: more ticks than frames, every submission ran.
    assert!(client.tick_count() > 30);
    let counter = app.world_mut().resource::<Counter<()>>();
    assert_eq!(counter.submits, 30);
    let values: Vec<f32> = client.read_one_as(&counter.buffer).unwrap();
    assert_eq!(values, vec![30.0; LEN]);
}

fn the_frames_in_flight_limit_skips_submissions() {
    let (mut app, client, in_flight) = run_with_limit(FramesFull::Skip);
    assert!(in_flight.iter().all(|&n| n <= 2), "{in_flight:?}");
    let frames = app.world().resource::<GpuFrames<gpuworld::SimBackend>>();
    let (ended, skipped) = (frames.ended, frames.skipped);
    assert!(skipped > 0);
    assert_eq!(ended + skipped, 30);
    // One tick a frame, never more: skipping does not wait.
    assert_eq!(client.tick_count(), 30);
    let counter = app.world_mut().resource::<Counter<()>>();
    assert_eq!(counter.submits, ended);
    let values: Vec<f32> = client.read_one_as(&counter.buffer).unwrap();
    assert_eq!(values, vec![ended as f32; LEN]);
}

fn a_readback_despawned_before_its_bytes_arrive_loses_nothing_else_and_leaks_nothing() {
    let client = sim(3);
    let mut app = new_app();
    app.add_plugins(GpuworldPlugin::new(client.clone()));
    let a = client.create_from_slice(bytemuck::cast_slice(&[1.0f32; 64]));
    let b = client.create_from_slice(bytemuck::cast_slice(&[2.0f32; 64]));
    let dropped = app
        .world_mut()
        .spawn(Readback::once(client.read_ticket(&[a.binding()]).unwrap()))
        .observe(|_: On<ReadbackComplete>| panic!("a despawned readback was delivered"))
        .id();
    app.world_mut()
        .spawn(Readback::once(client.read_ticket(&[b.binding()]).unwrap()))
        .observe(
            |event: On<ReadbackComplete>, mut arrivals: ResMut<Arrivals>| {
                arrivals.0.push((0, 0, event.to_vec::<f32>().unwrap()));
            },
        );
    app.update();
    app.world_mut().despawn(dropped);
    for _ in 0..10 {
        app.update();
    }
    let arrivals = &app.world().resource::<Arrivals>().0;
    assert_eq!(arrivals, &[(0, 0, vec![2.0; 64])]);
    // Both reads are done: no read is left in flight (the last frames' fences still are).
    let in_flight = client.in_flight();
    assert_eq!(in_flight.reads, 0, "{in_flight:?}");
    assert!(
        app.world_mut()
            .query::<&Readback>()
            .iter(app.world())
            .next()
            .is_none()
    );
    drop((a, b));
    for _ in 0..5 {
        app.update();
    }
    assert_eq!(client.memory_usage().bytes_in_use, 0);
}

/// Tells the second runtime apart from the first.
struct Second;

fn two_runtimes_each_tick_once_a_frame_and_deliver_their_own_readbacks() {
    let first = sim(1);
    let second = sim(2);
    let mut app = new_app();
    app_with::<_, (), 5>(&mut app, GpuworldPlugin::new(first.clone()), &first);
    app_with::<_, Second, 5>(
        &mut app,
        GpuworldPlugin::new(second.clone()).with_marker::<Second>(),
        &second,
    );
    for _ in 0..20 {
        app.update();
    }
    assert_eq!(first.tick_count(), 20);
    assert_eq!(second.tick_count(), 20);
    let mut arrivals = app.world().resource::<Arrivals>().0.clone();
    arrivals.sort_by_key(|(issued, arrived, _)| (*issued, *arrived));
    // Frames 5, 10, 15 on both, each runtime with its latency (frame 20's arrive past the run);
    // a latency under the frames-in-flight limit (3) never waits, so one tick a frame each.
    let mut expected = Vec::new();
    for f in [5u64, 10, 15] {
        expected.push((f, f + 1, vec![f as f32; LEN]));
        expected.push((f, f + 2, vec![f as f32; LEN]));
    }
    assert_eq!(arrivals, expected);
}

fn under_fixed_update_the_runtime_ticks_once_per_fixed_step() {
    let client = sim(1);
    let mut app = new_app();
    app.add_plugins(bevy_time::TimePlugin)
        .insert_resource(bevy_time::TimeUpdateStrategy::ManualDuration(
            Duration::from_millis(50),
        ))
        .insert_resource(bevy_time::Time::<bevy_time::Fixed>::from_hz(40.0));
    let plugin = GpuworldPlugin::new(client.clone()).in_schedule(FixedUpdate);
    let buffer = client.create_from_slice(bytemuck::cast_slice(&[0.0f32; LEN]));
    app.add_plugins(plugin)
        .insert_resource(Counter::<()> {
            buffer,
            submits: 0,
            marker: std::marker::PhantomData,
        })
        .add_systems(
            FixedUpdate,
            bump_and_read::<gpuworld::SimBackend, (), 1000>.in_set(GpuworldSet::Submit),
        );
    for _ in 0..20 {
        app.update();
    }
    let steps = app.world().resource::<Counter<()>>().submits;
    // 50 ms frames at 40 Hz: two steps a frame after the first (whose time delta is zero).
    assert!(steps >= 36, "{steps} fixed steps");
    assert_eq!(client.tick_count(), steps);
    let values: Vec<f32> = client
        .read_one_as(&app.world().resource::<Counter<()>>().buffer)
        .unwrap();
    assert_eq!(values, vec![steps as f32; LEN]);
}

fn ticking_until_idle_delivers_a_readback_in_the_frame_that_issued_it() {
    let client = sim(3);
    let mut app = new_app();
    let plugin = GpuworldPlugin::new(client.clone()).ticks(TickPolicy::UntilIdle {
        budget: Duration::from_secs(5),
    });
    app_with::<_, (), 2>(&mut app, plugin, &client);
    for _ in 0..6 {
        app.update();
    }
    let arrivals = &app.world().resource::<Arrivals>().0;
    let expected: Vec<_> = [2u64, 4, 6].map(|f| (f, f, vec![f as f32; LEN])).into();
    assert_eq!(arrivals, &expected);
    assert_eq!(client.in_flight(), gpuworld::InFlight::default());
}

/// Runs 12 frames bumping and reading every 3rd frame on `client`, ticked until idle so every
/// backend delivers in the frame (their latency is the device's); the arrivals.
fn values_on<B: Backend>(client: ComputeClient<B>) -> Vec<Arrival> {
    let mut app = new_app();
    let plugin = GpuworldPlugin::new(client.clone()).ticks(TickPolicy::UntilIdle {
        budget: Duration::from_secs(10),
    });
    client.warm_up(&BUMP).expect("bump compiles");
    app_with::<_, (), 3>(&mut app, plugin, &client);
    for _ in 0..12 {
        app.update();
    }
    app.world_mut().remove_resource::<Arrivals>().unwrap().0
}

fn cpu_and_wgpu_deliver_the_same_values_as_the_sim() -> Result<(), common::Skip> {
    let expected: Vec<_> = [3u64, 6, 9, 12].map(|f| (f, f, vec![f as f32; LEN])).into();
    assert_eq!(values_on(sim(2)), expected);
    assert_eq!(
        values_on(gpuworld::cpu_client(Driver::Manual).unwrap()),
        expected
    );
    #[cfg(feature = "wgpu")]
    assert_eq!(
        values_on(common::wgpu_client_with(
            gpuworld::WgpuConfig::default(),
            Driver::Manual
        )?),
        expected
    );
    Ok(())
}

/// A repeating readback's delivery: the readback's frame, the app frame it arrived in, the
/// frames it reported skipped, the values.
type Delivery = (u64, u64, Vec<u64>, Vec<f32>);

/// Every delivery of the repeating readback, and how many reads of it failed.
#[derive(Resource, Default)]
struct Deliveries {
    delivered: Vec<Delivery>,
    failed: usize,
}

/// Spawns `readback` with observers recording its deliveries and failures into `Deliveries`.
fn spawn_recorded(app: &mut App, readback: Readback) -> Entity {
    app.init_resource::<Deliveries>();
    app.world_mut()
        .spawn(readback)
        .observe(
            |event: On<ReadbackComplete>, frame: Res<Frame>, mut deliveries: ResMut<Deliveries>| {
                let readback_frame = event
                    .frame
                    .expect("a repeating readback numbers its frames");
                let values = event.to_vec::<f32>().expect("whole f32s");
                deliveries
                    .delivered
                    .push((readback_frame, frame.0, event.skipped.clone(), values));
            },
        )
        .observe(
            |_: On<ReadbackFailed>, mut deliveries: ResMut<Deliveries>| {
                deliveries.failed += 1;
            },
        )
        .id()
}

/// Runs frames until the readback has delivered or reported skipped every frame below
/// `frames` (at most 200 frames more); checks each of those frames is accounted for exactly
/// once, delivered in order with that frame's data (`k + 1` after `k + 1` bumps), and returns
/// the frames skipped.
fn every_frame_accounted_for(app: &mut App, frames: u64) -> Vec<u64> {
    for _ in 0..frames {
        app.update();
    }
    let covered = |app: &App| {
        let deliveries = &app.world().resource::<Deliveries>().delivered;
        deliveries.iter().any(|(frame, ..)| *frame + 1 >= frames)
            || deliveries
                .iter()
                .flat_map(|(_, _, skipped, _)| skipped)
                .any(|frame| *frame + 1 >= frames)
    };
    for _ in 0..200 {
        if covered(app) {
            break;
        }
        app.update();
    }
    let deliveries = &app.world().resource::<Deliveries>();
    assert_eq!(deliveries.failed, 0);
    let mut seen = vec![0u32; frames as usize];
    let mut skipped_frames = Vec::new();
    let mut last = None;
    for (frame, _, skipped, values) in &deliveries.delivered {
        assert!(last < Some(*frame), "frame {frame} delivered out of order");
        for &k in skipped {
            assert!(
                Some(k) > last && k < *frame,
                "frame {k} reported skipped with frame {frame}'s delivery"
            );
            if k < frames {
                seen[k as usize] += 1;
                skipped_frames.push(k);
            }
        }
        last = Some(*frame);
        if *frame < frames {
            seen[*frame as usize] += 1;
            assert_eq!(
                values,
                &vec![(*frame + 1) as f32; LEN],
                "frame {frame}'s delivery holds another frame's data"
            );
        }
    }
    for (k, n) in seen.iter().enumerate() {
        assert_eq!(*n, 1, "frame {k} delivered or reported skipped {n} times");
    }
    skipped_frames
}

/// An app bumping a buffer by 1 every frame, with a readback of it every frame.
fn bumping_app_with_readback<B: Backend>(
    plugin: GpuworldPlugin<B>,
    client: &ComputeClient<B>,
    reads_in_flight: usize,
) -> (App, Entity) {
    let mut app = new_app();
    app_with::<_, (), { u64::MAX }>(&mut app, plugin, client);
    let buffer = app.world().resource::<Counter<()>>().buffer.clone();
    let readback = Readback::every_frame([&buffer]).reads_in_flight(reads_in_flight);
    let entity = spawn_recorded(&mut app, readback);
    (app, entity)
}

fn every_frame_on_the_sim_delivers_each_frames_own_data_latency_frames_later() {
    let latency = 2;
    let client = sim(latency);
    let (mut app, _) = bumping_app_with_readback(
        GpuworldPlugin::new(client.clone()),
        &client,
        DEFAULT_READS_IN_FLIGHT,
    );
    let skipped = every_frame_accounted_for(&mut app, 40);
    assert!(skipped.is_empty(), "{skipped:?}");
    // Readback frame k is app frame k + 1 (frames count from 1), arriving `latency` later.
    for (frame, arrived, _, _) in &app.world().resource::<Deliveries>().delivered {
        assert_eq!(*arrived, frame + 1 + latency);
    }
}

fn every_frame_on_cpu_accounts_for_every_frame_of_a_headless_app() {
    let client = gpuworld::cpu_client(Driver::Manual).unwrap();
    let frames = 100;
    let (mut app, entity) = bumping_app_with_readback(
        GpuworldPlugin::new(client.clone()),
        &client,
        DEFAULT_READS_IN_FLIGHT,
    );
    let skipped = every_frame_accounted_for(&mut app, frames);
    let delivered = app
        .world()
        .resource::<Deliveries>()
        .delivered
        .iter()
        .filter(|(frame, ..)| *frame < frames)
        .count();
    assert_eq!(delivered + skipped.len(), frames as usize);
    let readback = app.world().get::<Readback>(entity).unwrap();
    assert!(readback.skipped() >= skipped.len() as u64);
}

fn a_readback_at_its_bound_of_reads_in_flight_reports_the_frames_it_skipped() {
    // Reads take 4 frames; a bound of 2 must skip some, and say which.
    let client = sim(4);
    let plugin = GpuworldPlugin::new(client.clone()).frames_in_flight(8, FramesFull::Wait);
    let (mut app, entity) = bumping_app_with_readback(plugin, &client, 2);
    let skipped = every_frame_accounted_for(&mut app, 30);
    assert!(!skipped.is_empty());
    let readback = app.world().get::<Readback>(entity).unwrap();
    assert!(readback.skipped() >= skipped.len() as u64);
    assert!(
        app.world()
            .resource::<GpuFrames<gpuworld::SimBackend>>()
            .waited
            == 0
    );
}

fn a_repeating_readback_keeps_delivering_after_the_user_drops_its_handle() {
    let client = sim(1);
    let mut app = new_app();
    app.add_plugins(GpuworldPlugin::new(client.clone()));
    let buffer = client.create_from_slice(bytemuck::cast_slice(&[3.0f32; LEN]));
    let entity = spawn_recorded(&mut app, Readback::every_frame([&buffer]));
    drop(buffer);
    for _ in 0..12 {
        app.update();
    }
    let deliveries = app.world().resource::<Deliveries>();
    assert_eq!(deliveries.failed, 0);
    // Frames 0 to 10 arrived (frame 11's a frame later), every one with the data.
    assert_eq!(deliveries.delivered.len(), 11);
    for (_, _, skipped, values) in &deliveries.delivered {
        assert!(skipped.is_empty());
        assert_eq!(values, &vec![3.0; LEN]);
    }
    // The readback held the memory; despawning it lets it go.
    assert!(client.memory_usage().bytes_in_use > 0);
    app.world_mut().despawn(entity);
    for _ in 0..5 {
        app.update();
    }
    assert_eq!(client.memory_usage().bytes_in_use, 0);
}

fn a_readback_of_several_sources_decodes_each_of_them() {
    let client = sim(1);
    let mut app = new_app();
    app.add_plugins(GpuworldPlugin::new(client.clone()));
    let a = client.create_from_slice(bytemuck::cast_slice(&[1.0f32; 64]));
    let b = client.create_from_slice(bytemuck::cast_slice(&[2.0f32; 16]));
    let ticket = client.read_ticket(&[a.binding(), b.binding()]).unwrap();
    app.world_mut().spawn(Readback::once(ticket)).observe(
        |event: On<ReadbackComplete>, mut arrivals: ResMut<Arrivals>| {
            assert_eq!(event.frame, None);
            let sources = event.to_vecs::<f32>().unwrap();
            assert_eq!(sources, vec![vec![1.0; 64], vec![2.0; 16]]);
            // Every source's elements, one after the other.
            let all = event.to_vec::<f32>().unwrap();
            assert_eq!(all.len(), 80);
            assert_eq!((all[63], all[64]), (1.0, 2.0));
            // Bytes that are not whole elements are an error, not a silent truncation.
            let error = event.to_vecs::<[u8; 3]>().unwrap_err();
            assert!(
                matches!(
                    error,
                    gpuworld::Error::Layout(LayoutError::ElementSize { .. })
                ),
                "{error}"
            );
            assert!(event.to_vec::<[u8; 3]>().is_err());
            arrivals.0.push((0, 0, all));
        },
    );
    for _ in 0..3 {
        app.update();
    }
    assert_eq!(app.world().resource::<Arrivals>().0.len(), 1);
}

/// The modes the frame graph ran the frames in.
#[derive(Resource, Default)]
struct Modes(Vec<gpuworld::FrameMode>);

/// A `Submit` system bumping the buffer through the opted-in frame graph: by 1, but by 2 on
/// frame 8.
fn bump_through_the_frame_graph(
    mut frames: ResMut<GpuFrameGraph<gpuworld::SimBackend>>,
    counter: Res<Counter<()>>,
    frame: Res<Frame>,
    mut modes: ResMut<Modes>,
) {
    let step = if frame.0 == 8 { 2.0 } else { 1.0 };
    let mode = frames
        .run(|c| {
            let bindings = Bindings::new().buffer(&counter.buffer).scalar_f32(step);
            c.launch(&BUMP, CubeCount::covering(LEN as u64, 64), bindings)
        })
        .expect("the frame runs");
    modes.0.push(mode);
}

fn an_opted_in_frame_graph_replays_repeated_frames_and_the_values_stay_the_eager_ones() {
    let client = sim(1);
    let buffer = client.create_from_slice(bytemuck::cast_slice(&[0.0f32; LEN]));
    let mut app = new_app();
    app.add_plugins(GpuworldPlugin::new(client.clone()).with_frame_graph(3))
        .init_resource::<Modes>()
        .insert_resource(Counter::<()> {
            buffer: buffer.clone(),
            submits: 0,
            marker: std::marker::PhantomData,
        })
        .add_systems(
            PostUpdate,
            bump_through_the_frame_graph.in_set(GpuworldSet::Submit),
        );
    for _ in 0..12 {
        app.update();
    }
    let modes = app.world_mut().remove_resource::<Modes>().unwrap().0;
    use gpuworld::FrameMode::*;
    assert_eq!(
        modes,
        [
            Eager, Eager, Captured, Replayed, Replayed, Replayed, Replayed, Changed, Eager, Eager,
            Captured, Replayed
        ]
    );
    // 11 frames of 1 and one of 2.
    assert_eq!(client.read_one_as::<f32>(&buffer).unwrap(), vec![13.0; LEN]);
}
