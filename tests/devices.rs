//! Many devices: enumeration, a client per device, and `to_client` between devices of one
//! backend and of two, with its ordering on both sides and its errors.

mod common;

test_main![
    devices_lists_the_host_cpu_and_the_sim_with_their_properties,
    a_client_of_any_listed_device_runs_on_that_device,
    every_backend_lists_its_own_devices_and_devices_lists_them_all,
    open_refuses_a_bad_configuration_with_a_typed_error,
    #[cfg(feature = "wgpu")]
    open_refuses_a_wgpu_adapter_that_is_not_there,
    #[cfg(feature = "cuda")]
    open_refuses_a_cuda_ordinal_that_is_not_there,
    cpu_and_sim_devices_are_numbered_and_separate,
    to_client_copies_between_cpu_devices_sim_devices_and_across_them,
    to_client_returns_at_once_and_the_copy_arrives_with_ticks,
    to_client_is_ordered_after_earlier_writes_and_before_later_uses_under_concurrent_writes,
    to_client_into_lands_between_the_destination_writes_around_it,
    to_client_into_moves_exactly_the_bytes_of_any_size_to_an_odd_offset,
    to_client_refuses_what_does_not_fit_and_reports_what_fails_on_the_way,
    #[cfg(feature = "wgpu")]
    to_client_copies_between_wgpu_and_cpu,
    a_transfer_between_sim_devices_costs_the_configured_link_time_on_both,
];

use gpuworld::error::{ConfigError, DeviceError};
use gpuworld::{
    ComputeClient, CpuBackend, DeviceId, Driver, Error, Handle, OpenBackend, RuntimeConfig,
    SimBackend, SimConfig, cpu_clients, devices, sim_clients,
};
use gpuworld_systems::backend::Kernels;

fn devices_lists_the_host_cpu_and_the_sim_with_their_properties() {
    let found = devices();
    let ids: Vec<String> = found.iter().map(|d| d.id.to_string()).collect();
    assert_eq!(ids[..2], ["cpu:0", "sim:0"]);
    for device in &found[..2] {
        let properties = device
            .properties
            .as_ref()
            .expect("host devices always open");
        assert!(properties.memory_bytes > 0, "{}", device.id);
    }
    #[cfg(feature = "wgpu")]
    {
        let adapters = gpuworld::wgpu_adapters(gpuworld::WgpuConfig::default().backends);
        let wgpu: Vec<u32> = found
            .iter()
            .filter(|d| d.id.backend == "wgpu")
            .map(|d| d.id.index)
            .collect();
        let expected: Vec<u32> = adapters.iter().map(|a| a.index as u32).collect();
        assert_eq!(wgpu, expected, "one entry per wgpu adapter");
    }
}

fn a_client_of_any_listed_device_runs_on_that_device() {
    for device in devices() {
        if device.properties.is_err() {
            continue;
        }
        match device.id.backend {
            CpuBackend::NAME => runs_on_its_device::<CpuBackend>(device.id),
            SimBackend::NAME => runs_on_its_device::<SimBackend>(device.id),
            #[cfg(feature = "wgpu")]
            gpuworld::WgpuBackend::NAME => runs_on_its_device::<gpuworld::WgpuBackend>(device.id),
            #[cfg(feature = "cuda")]
            gpuworld::CudaBackend::NAME => runs_on_its_device::<gpuworld::CudaBackend>(device.id),
            other => panic!("a device of a backend this test does not know: {other}"),
        }
    }
    let missing = DeviceId {
        backend: "tpu",
        index: 0,
    };
    match ComputeClient::<CpuBackend>::open_device(missing, Driver::Manual) {
        Err(Error::Device(DeviceError::NoSuchDevice { device, .. })) => {
            assert_eq!(&*device, "tpu:0")
        }
        Err(other) => panic!("expected NoSuchDevice, got {other}"),
        Ok(_) => panic!("a cpu client of tpu:0"),
    }
}

/// Opens `id` through `ComputeClient::open_device` and runs a round trip on it.
fn runs_on_its_device<B: OpenBackend>(id: DeviceId) {
    let client =
        ComputeClient::<B>::open_device(id, Driver::Manual).expect("a listed device opens");
    assert_eq!(client.device_id(), id);
    let handle = client.create_from_slice(&[7u8; 8]);
    assert_eq!(client.read_one(&handle).expect("read"), [7u8; 8]);
}

fn every_backend_lists_its_own_devices_and_devices_lists_them_all() {
    let cpu = CpuBackend::enumerate();
    let sim = SimBackend::enumerate();
    assert_eq!(cpu.len(), 1);
    assert_eq!(sim.len(), 1);
    let all: Vec<DeviceId> = devices().into_iter().map(|d| d.id).collect();
    for device in cpu.iter().chain(&sim) {
        assert!(
            all.contains(&device.id),
            "{} missing from devices()",
            device.id
        );
    }
    #[cfg(feature = "wgpu")]
    assert_eq!(
        gpuworld::WgpuBackend::enumerate().len(),
        all.iter().filter(|id| id.backend == "wgpu").count()
    );
}

fn open_refuses_a_bad_configuration_with_a_typed_error() {
    let zero = gpuworld::CpuConfig::default().with_memory_limit(Some(0));
    match ComputeClient::<CpuBackend>::open(zero, Driver::Manual) {
        Err(Error::Config(ConfigError::InvalidSetting { problem, .. })) => {
            assert!(problem.contains("memory_limit"), "{problem}")
        }
        Err(other) => panic!("expected ConfigError::InvalidSetting, got {other}"),
        Ok(_) => panic!("a cpu device with 0 bytes"),
    }
    let empty_sim = SimConfig::default().with_memory_bytes(0);
    assert!(matches!(
        ComputeClient::<SimBackend>::open(empty_sim, Driver::Manual),
        Err(Error::Config(ConfigError::InvalidSetting { .. }))
    ));
    // A cpu device with a limit of its own opens with it.
    let small = gpuworld::CpuConfig::device(3).with_memory_limit(Some(1 << 20));
    let client = ComputeClient::<CpuBackend>::open(small, Driver::Manual).expect("opens");
    assert_eq!(client.device_id().index, 3);
    assert_eq!(client.properties().memory_bytes, 1 << 20);
}

#[cfg(feature = "wgpu")]
fn open_refuses_a_wgpu_adapter_that_is_not_there() {
    let config = gpuworld::WgpuBackend::device_config(10_000);
    match ComputeClient::<gpuworld::WgpuBackend>::open(config, Driver::Manual) {
        Err(error) if error.is_unavailable() => {}
        Err(other) => panic!("expected a missing device, got {other}"),
        Ok(_) => panic!("a client of wgpu adapter 10000"),
    }
}

#[cfg(feature = "cuda")]
fn open_refuses_a_cuda_ordinal_that_is_not_there() {
    // Without a driver this is `BackendUnavailable`; with one, the ordinal is past the last.
    let config = gpuworld::CudaBackend::device_config(10_000);
    match ComputeClient::<gpuworld::CudaBackend>::open(config, Driver::Manual) {
        Err(error) if error.is_unavailable() => {}
        Err(other) => panic!("expected a missing device, got {other}"),
        Ok(_) => panic!("a client of CUDA ordinal 10000"),
    }
}

fn cpu_and_sim_devices_are_numbered_and_separate() {
    let cpus = cpu_clients(3, Driver::Manual);
    let ids: Vec<String> = cpus.iter().map(|c| c.device_id().to_string()).collect();
    assert_eq!(ids, ["cpu:0", "cpu:1", "cpu:2"]);
    let sims = sim_clients(&SimConfig::default(), 2);
    let ids: Vec<String> = sims.iter().map(|c| c.device_id().to_string()).collect();
    assert_eq!(ids, ["sim:0", "sim:1"]);
    // Memory of one device is not memory of another.
    let handle = cpus[0].create_from_slice(&[1u8; 1024]);
    cpus[0].sync().expect("sync");
    assert_eq!(cpus[0].memory_usage().bytes_in_use, 1024);
    assert_eq!(cpus[1].memory_usage().bytes_in_use, 0);
    drop(handle);
}

fn f32_handle<B: gpuworld::Backend>(client: &ComputeClient<B>, values: &[f32]) -> Handle {
    client.create_from_slice(bytemuck::cast_slice(values))
}

fn to_client_copies_between_cpu_devices_sim_devices_and_across_them() {
    let cpus = cpu_clients(2, Driver::DeviceThread);
    common::to_client_round_trip(&cpus[0], &cpus[1], 1000);
    let manual = cpu_clients(2, Driver::Manual);
    common::to_client_round_trip(&manual[0], &manual[1], 1000);
    let sims = sim_clients(&SimConfig::default(), 2);
    common::to_client_round_trip(&sims[0], &sims[1], 1000);
    common::to_client_round_trip(&cpus[0], &sims[1], 1000);
    common::to_client_round_trip(&sims[0], &manual[1], 1000);
}

fn to_client_returns_at_once_and_the_copy_arrives_with_ticks() {
    let sims = sim_clients(&SimConfig::default(), 2);
    let source = f32_handle(&sims[0], &[1.0, 2.0]);
    let copy = sims[0].to_client(&source, &sims[1]).expect("to_client");
    // Nothing has ticked yet: the destination holds the write (and the read behind it).
    let pending = sims[1].read_async(&[copy.binding()]);
    let mut pending = common::Pending::new(pending);
    let mut ticks = 0;
    let bytes = loop {
        sims[1].tick();
        sims[0].tick();
        ticks += 1;
        if let Some(bytes) = pending.poll() {
            break bytes.expect("read");
        }
        assert!(ticks < 20, "the copy never arrived");
    };
    assert_eq!(common::f32s(&bytes[0]), [1.0, 2.0]);
    assert!(
        ticks >= 2,
        "a transfer takes the source's read and the destination's write"
    );
}

/// Each round writes the source from a second stream, copies it, overwrites it at once, and
/// on the destination uses the copy at once while other writes go on there (`common.rs`).
fn to_client_is_ordered_after_earlier_writes_and_before_later_uses_under_concurrent_writes() {
    let clients = cpu_clients(2, Driver::DeviceThread);
    common::to_client_under_concurrent_writes(&clients[0], &clients[1], 1024, 40);
}

fn to_client_into_lands_between_the_destination_writes_around_it() {
    let clients = cpu_clients(2, Driver::Manual);
    let (a, b) = (&clients[0], &clients[1]);
    let source = f32_handle(a, &[5.0; 4]);
    let target = f32_handle(b, &[0.0; 8]);
    let upper = target.clone().offset_start(16);
    a.to_client_into(&source, b, &upper)
        .expect("to_client_into");
    b.write(&target, bytemuck::cast_slice(&[9.0f32; 2]))
        .expect("write after");
    let got: Vec<f32> = b.read_one_as(&target).expect("read");
    assert_eq!(got, [9.0, 9.0, 0.0, 0.0, 5.0, 5.0, 5.0, 5.0]);
    a.to_client_into(&source, b, &target.clone().offset_end(16))
        .expect("to_client_into");
    let got: Vec<f32> = b.read_one_as(&target).expect("read");
    assert_eq!(got, [5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0]);
}

fn to_client_into_moves_exactly_the_bytes_of_any_size_to_an_odd_offset() {
    let clients = cpu_clients(2, Driver::DeviceThread);
    let (a, b) = (&clients[0], &clients[1]);
    // Large copies run in pieces on several threads; small ones on the stream's worker.
    for size in [0, 3, 4097, (3 << 20) + 5] {
        let data: Vec<u8> = (0..size).map(|i| (i * 31 + 7) as u8).collect();
        let source = a.create_from_slice(&data);
        let around = vec![0xEEu8; size + 8];
        let target = b.create_from_slice(&around);
        let inside = target.clone().offset_start(3).offset_end(5);
        a.to_client_into(&source, b, &inside)
            .expect("to_client_into");
        let copy = a.to_client(&source, b).expect("to_client");
        let mut expected = around;
        expected[3..3 + size].copy_from_slice(&data);
        assert!(
            b.read_one(&target).expect("read") == expected,
            "{size} bytes at offset 3, or the bytes around them"
        );
        assert!(
            b.read_one(&copy).expect("read") == data,
            "{size} bytes into a new handle"
        );
    }
}

fn to_client_refuses_what_does_not_fit_and_reports_what_fails_on_the_way() {
    let clients = cpu_clients(2, Driver::Manual);
    let (a, b) = (&clients[0], &clients[1]);
    common::to_client_errors(a, b);

    // A source runtime gone before it answered: the destination reports `Disconnected`.
    let doomed = ComputeClient::new(
        CpuBackend::device(5),
        RuntimeConfig::default(),
        Driver::Manual,
    );
    let source = f32_handle(&doomed, &[3.0; 4]);
    let _copy = doomed.to_client(&source, b).expect("accepted");
    drop(doomed);
    let error = b.sync().expect_err("the source is gone");
    assert!(matches!(error, Error::Disconnected), "{error}");
    common::to_client_round_trip(a, b, 1000);
}

#[cfg(feature = "wgpu")]
fn to_client_copies_between_wgpu_and_cpu() -> Result<(), common::Skip> {
    let gpu = common::wgpu_client_or_skip()?;
    let cpus = cpu_clients(1, Driver::DeviceThread);
    common::to_client_round_trip(&gpu, &cpus[0], 1000);
    common::to_client_round_trip(&cpus[0], &gpu, 1000);
    Ok(())
}

fn a_transfer_between_sim_devices_costs_the_configured_link_time_on_both() {
    let link = gpuworld::SimLink {
        latency_ns: 1_000,
        bytes_per_second: 1 << 30,
    };
    let config = SimConfig::default().with_link(Some(link));
    let sims = sim_clients(&config, 2);
    let clock = |c: &ComputeClient<gpuworld::SimBackend>| {
        c.with_runtime(|rt| gpuworld_systems::backend::DeviceTiming::device_clock(rt.backend()))
            .expect("the sim keeps a clock with a link")
    };
    let source = sims[0].empty(1 << 20);
    sims[0].sync().expect("sync");
    let copy = sims[0].to_client(&source, &sims[1]).expect("to_client");
    sims[1].sync().expect("the copy arrived");
    // 1 MiB over 1 GiB/s is 1/1024 s, plus the latency, once on each side.
    let one_copy = std::time::Duration::from_nanos(1_000 + 1_000_000_000 / 1024);
    assert_eq!(clock(&sims[0]), one_copy, "the source's read");
    assert_eq!(clock(&sims[1]), one_copy, "the destination's write");
    drop(copy);
}
