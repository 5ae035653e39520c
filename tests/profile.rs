//! `profile()` times exactly the work its closure enqueued on its stream (the sim's virtual time
//! to the nanosecond; on cpu and wgpu within the wall time around it), and `kernel_stats()`
//! counts launches, bytes bound and device time per kernel on every backend.

mod common;

test_main![
    profile_on_the_sim_returns_the_virtual_cost_of_exactly_the_closures_work,
    profile_on_the_sim_times_work_by_the_cost_model_of_sim_config_costs,
    profile_on_the_sim_without_a_cost_model_is_an_error,
    profile_on_the_cpu_is_within_the_wall_time_around_it,
    #[cfg(feature = "wgpu")]
    profile_on_wgpu_is_within_the_wall_time_around_it,
    #[cfg(feature = "cuda")]
    profile_on_cuda_is_within_the_wall_time_around_it,
    kernel_stats_on_the_sim_count_launches_bytes_and_virtual_time,
    kernel_stats_on_the_cpu_count_every_launch_with_its_worker_time,
    #[cfg(feature = "wgpu")]
    kernel_stats_on_wgpu_count_every_launch,
    #[cfg(feature = "cuda")]
    kernel_stats_on_cuda_count_every_launch_with_its_event_time,
];

use gpuworld::error::ProfileError;
use gpuworld::{
    Backend, Bindings, ComputeClient, CubeCount, Error, KernelDef, SimConfig, StreamId, library,
};
use std::time::{Duration, Instant};

/// 1,000 virtual nanoseconds per cube of FILL, 3,000 per cube of anything else.
fn cost(kernel: &KernelDef, cubes: [u32; 3]) -> u64 {
    let per_cube = if kernel.id == library::FILL.id {
        1_000
    } else {
        3_000
    };
    per_cube * u64::from(cubes[0] * cubes[1] * cubes[2])
}

fn timed_sim() -> ComputeClient<gpuworld::SimBackend> {
    gpuworld::sim_client(SimConfig::default().with_kernel_cost(Some(cost))).expect("the sim opens")
}

fn fill<B: Backend>(client: &ComputeClient<B>, handle: &gpuworld::Handle, cubes: u32) {
    client
        .launch(
            &library::FILL,
            CubeCount::new_1d(cubes),
            Bindings::new().buffer(handle).scalar_f32(1.0),
        )
        .unwrap();
}

/// One cube of ADD with `handle` as both inputs and the output.
fn add_in_place<B: Backend>(client: &ComputeClient<B>, handle: &gpuworld::Handle) {
    client
        .launch(
            &library::ADD,
            CubeCount::new_1d(1),
            Bindings::new().buffer(handle).buffer(handle).buffer(handle),
        )
        .unwrap();
}

fn profile_on_the_sim_returns_the_virtual_cost_of_exactly_the_closures_work() {
    let client = timed_sim().with_stream(StreamId { value: 0 });
    let other = client.with_stream(StreamId { value: 1 });
    let buffer = client.empty(4 * 256 * 4);
    let elsewhere = other.empty(4 * 256 * 4);
    fill(&client, &buffer, 4); // before the closure: not counted
    let (value, duration) = client
        .profile(
            || {
                fill(&client, &buffer, 2); // 2,000 ns
                fill(&other, &elsewhere, 4); // another stream: not counted
                add_in_place(&client, &buffer); // 3,000 ns
                7
            },
            "fill and add",
        )
        .unwrap();
    fill(&client, &buffer, 4); // after the closure: not counted
    client.sync().unwrap();
    assert_eq!(value, 7);
    assert_eq!(duration.name, "fill and add");
    assert_eq!(duration.device, Duration::from_nanos(5_000));
}

fn profile_on_the_sim_times_work_by_the_cost_model_of_sim_config_costs() {
    use gpuworld::testing::{CostModel, KernelRate};
    let per_cube = |per_cube_ns| KernelRate {
        fixed_ns: 500,
        per_cube_ns,
        per_byte_ns: 0,
    };
    let costs = CostModel::default()
        .with_kernel(library::FILL.id, per_cube(1_000))
        .with_kernel(library::ADD.id, per_cube(3_000));
    let client = gpuworld::sim_client(SimConfig::default().with_costs(Some(costs)))
        .expect("the sim opens")
        .with_stream(StreamId { value: 0 });
    let other = client.with_stream(StreamId { value: 1 });
    let buffer = client.empty(4 * 256 * 4);
    let elsewhere = other.empty(4 * 256 * 4);
    fill(&client, &buffer, 4); // before the closure: not counted
    let ((), duration) = client
        .profile(
            || {
                fill(&client, &buffer, 2); // 500 + 2,000 ns
                fill(&other, &elsewhere, 4); // another stream: not counted
                add_in_place(&client, &buffer); // 500 + 3,000 ns
            },
            "fill and add",
        )
        .unwrap();
    client.sync().unwrap();
    assert_eq!(duration.device, Duration::from_nanos(6_000));
}

fn profile_on_the_sim_without_a_cost_model_is_an_error() {
    let client = gpuworld::sim_client(SimConfig::default()).expect("the sim opens");
    let buffer = client.empty(1024);
    let error = client
        .profile(|| fill(&client, &buffer, 1), "fill")
        .unwrap_err();
    assert!(
        matches!(
            &error,
            Error::Profile(ProfileError::TimingUnavailable { backend: "sim", .. })
        ),
        "{error}"
    );
    assert!(error.to_string().contains("kernel_cost"), "{error}");
    // The runtime still works.
    fill(&client, &buffer, 1);
    assert_eq!(client.read_one_as::<f32>(&buffer).unwrap(), vec![1.0; 256]);
}

/// Profiles a closure of heavy launches and checks the device time against the wall time
/// around the call.
fn profile_is_within_wall_time<B: Backend>(client: &ComputeClient<B>) {
    let n = 1 << 20;
    let buffer = client.empty(n * 4);
    client.sync().unwrap();
    let started = Instant::now();
    let ((), duration) = client
        .profile(
            || {
                for _ in 0..4 {
                    fill(client, &buffer, (n / 256) as u32);
                }
            },
            "fills",
        )
        .unwrap();
    let wall = started.elapsed();
    assert!(duration.device > Duration::ZERO, "{duration:?}");
    assert!(
        duration.device <= wall,
        "device {:?} > wall {wall:?}",
        duration.device
    );
}

fn profile_on_the_cpu_is_within_the_wall_time_around_it() {
    profile_is_within_wall_time(&gpuworld::cpu_client(gpuworld::Driver::DeviceThread).unwrap());
    profile_is_within_wall_time(&gpuworld::cpu_client(gpuworld::Driver::Manual).unwrap());
}

#[cfg(feature = "wgpu")]
fn profile_on_wgpu_is_within_the_wall_time_around_it() -> Result<(), common::Skip> {
    let client = common::wgpu_client_or_skip()?;
    profile_is_within_wall_time(&client);
    Ok(())
}

#[cfg(feature = "cuda")]
fn profile_on_cuda_is_within_the_wall_time_around_it() -> Result<(), common::Skip> {
    let client = common::cuda_client_or_skip()?;
    profile_is_within_wall_time(&client);
    Ok(())
}

fn kernel_stats_on_the_sim_count_launches_bytes_and_virtual_time() {
    let client = timed_sim();
    let buffer = client.empty(8 * 256 * 4);
    fill(&client, &buffer, 1); // before statistics: not counted
    client.sync().unwrap();
    client.set_kernel_stats(true);
    for cubes in [1, 2, 3, 4] {
        fill(&client, &buffer, cubes);
    }
    add_in_place(&client, &buffer);
    client.sync().unwrap();
    let stats = client.kernel_stats();
    let names: Vec<&str> = stats.iter().map(|s| s.name).collect();
    assert_eq!(names, ["add", "fill"]);
    let fill_stats = &stats[1];
    assert_eq!(fill_stats.launches, 4);
    assert_eq!(fill_stats.bytes_bound, 4 * 8 * 256 * 4);
    let times = fill_stats.device_time.unwrap();
    assert_eq!(times.total, Duration::from_nanos(10_000));
    assert_eq!(times.mean, Duration::from_nanos(2_500));
    assert_eq!(times.p50, Duration::from_nanos(2_000));
    assert_eq!(times.p99, Duration::from_nanos(4_000));
    assert_eq!(stats[0].launches, 1);
    assert_eq!(stats[0].bytes_bound, 3 * 8 * 256 * 4);
    assert_eq!(
        stats[0].device_time.unwrap().total,
        Duration::from_nanos(3_000)
    );
    // Stopping keeps what was counted and counts no more.
    client.set_kernel_stats(false);
    fill(&client, &buffer, 1);
    client.sync().unwrap();
    assert_eq!(client.kernel_stats(), stats);
}

fn kernel_stats_count_every_launch<B: Backend>(client: &ComputeClient<B>, timed: bool) {
    let client = &client.with_stream(StreamId { value: 0 });
    let buffer = client.empty(256 * 4);
    client.set_kernel_stats(true);
    for _ in 0..10 {
        fill(client, &buffer, 1);
    }
    client.sync().unwrap();
    // A GPU's timestamps are read back a poll after the work completes.
    client.sync().unwrap();
    let stats = client.kernel_stats();
    assert_eq!(stats.len(), 1, "{stats:?}");
    assert_eq!(stats[0].name, "fill");
    assert_eq!(stats[0].launches, 10);
    assert_eq!(stats[0].bytes_bound, 10 * 256 * 4);
    if timed {
        let times = stats[0].device_time.expect("timed launches");
        assert!(times.p50 <= times.p99 && times.p99 <= times.total);
    }
}

fn kernel_stats_on_the_cpu_count_every_launch_with_its_worker_time() {
    let open = || gpuworld::cpu_client(gpuworld::Driver::DeviceThread).unwrap();
    kernel_stats_count_every_launch(&open(), true);
    kernel_stats_count_every_launch_of_a_replay(&open(), true);
}

/// A replay that the backend runs as one unit (a cpu worker's one operation, a wgpu plan) still
/// counts each of its launches, timed as eager launches are.
fn kernel_stats_count_every_launch_of_a_replay<B: Backend>(client: &ComputeClient<B>, timed: bool) {
    let client = &client.with_stream(StreamId { value: 0 });
    let buffer = client.empty(256 * 4);
    let graph = client
        .capture(|c| {
            for _ in 0..5 {
                fill(c, &buffer, 1);
            }
            Ok(())
        })
        .unwrap();
    client.sync().unwrap();
    client.set_kernel_stats(true);
    for _ in 0..2 {
        graph.replay().unwrap();
    }
    client.sync().unwrap();
    client.sync().unwrap();
    let stats = client.kernel_stats();
    assert_eq!(stats.len(), 1, "{stats:?}");
    assert_eq!(stats[0].launches, 10, "{stats:?}");
    assert_eq!(stats[0].bytes_bound, 10 * 256 * 4);
    if timed {
        let times = stats[0].device_time.expect("timed launches");
        assert!(times.p50 <= times.p99 && times.p99 <= times.total);
    }
}

#[cfg(feature = "wgpu")]
fn kernel_stats_on_wgpu_count_every_launch() -> Result<(), common::Skip> {
    let client = common::wgpu_client_or_skip()?;
    // Launches are timed by timestamp queries where the adapter has them.
    let timed = client.with_runtime(|rt| {
        rt.backend()
            .features()
            .contains(gpuworld::wgpu::Features::TIMESTAMP_QUERY)
    });
    kernel_stats_count_every_launch(&client, timed);
    kernel_stats_count_every_launch_of_a_replay(&common::wgpu_client_or_skip()?, timed);
    Ok(())
}

#[cfg(feature = "cuda")]
fn kernel_stats_on_cuda_count_every_launch_with_its_event_time() -> Result<(), common::Skip> {
    let client = common::cuda_client_or_skip()?;
    kernel_stats_count_every_launch(&client, true);
    Ok(())
}
