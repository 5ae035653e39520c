//! Many devices on CUDA (run on the GPU machine; reported ignored without a driver, failed with
//! `GPUWORLD_REQUIRE_CUDA=1`; the two-GPU cases are ignored with one GPU unless
//! `GPUWORLD_REQUIRE_GPUS=2`):
//! `to_client` between two clients of one GPU and between two GPUs (both ways, under concurrent
//! writes, exact bytes at odd offsets, after earlier work on the destination), between cpu and
//! cuda and between wgpu and cuda, its errors, and `get_resource`'s device pointer. Without NCCL a
//! collective is `DeviceError::BackendUnavailable`; the collectives themselves, on one GPU and on
//! every GPU there is, are in `tests/collectives.rs`.

mod common;

use common::Skip;
use gpuworld::collective::{ElemType, Group, ReduceOp};
use gpuworld::error::DeviceError;
use gpuworld::{ComputeClient, CudaBackend, CudaConfig, Driver, Error, cpu_clients};

test_main![
    to_client_between_two_clients_of_one_gpu_and_between_cpu_and_cuda,
    #[cfg(feature = "wgpu")]
    to_client_between_wgpu_and_cuda,
    without_nccl_a_collective_is_backend_unavailable,
    to_client_between_clients_of_one_gpu_under_concurrent_writes,
    to_client_between_two_gpus_in_both_directions_under_concurrent_writes,
    to_client_between_two_gpus_moves_exactly_the_bytes_to_any_offset,
    to_client_into_waits_for_earlier_work_on_the_destination_on_one_gpu,
    to_client_into_waits_for_earlier_work_on_the_destination_between_two_gpus,
    peer_copy_errors_between_clients_of_one_gpu,
    peer_copy_errors_between_two_gpus,
    get_resource_gives_the_device_pointer_of_the_binding,
];

fn to_client_between_two_clients_of_one_gpu_and_between_cpu_and_cuda() -> Result<(), Skip> {
    let (a, b) = (
        common::cuda_client_or_skip()?,
        common::cuda_client_or_skip()?,
    );
    common::to_client_round_trip(&a, &b, 1 << 20);
    let cpu = cpu_clients(1, Driver::DeviceThread);
    common::to_client_round_trip(&cpu[0], &a, 1 << 20);
    common::to_client_round_trip(&a, &cpu[0], 1 << 20);
    Ok(())
}

#[cfg(feature = "wgpu")]
fn to_client_between_wgpu_and_cuda() -> Result<(), Skip> {
    let (cuda, gpu) = (
        common::cuda_client_or_skip()?,
        common::wgpu_client_or_skip()?,
    );
    common::to_client_round_trip(&gpu, &cuda, 1 << 20);
    common::to_client_round_trip(&cuda, &gpu, 1 << 20);
    Ok(())
}

fn without_nccl_a_collective_is_backend_unavailable() -> Result<(), Skip> {
    let client = common::cuda_client_or_skip()?;
    if gpuworld_cuda::nccl().is_ok() {
        return Err(Skip(
            "NCCL is here (tests/collectives.rs runs the collectives)".into(),
        ));
    }
    let group = Group::new(vec![client]).expect("one device");
    let buffer = group.clients()[0].create_from_slice(&[0u8; 16]);
    let error = group
        .all_reduce(&[buffer.binding()], ElemType::F32, ReduceOp::Sum)
        .expect_err("no NCCL");
    assert!(
        matches!(error, Error::Device(DeviceError::BackendUnavailable { .. })),
        "{error}"
    );
    Ok(())
}

fn to_client_between_clients_of_one_gpu_under_concurrent_writes() -> Result<(), Skip> {
    let (a, b) = (
        common::cuda_client_or_skip()?,
        common::cuda_client_or_skip()?,
    );
    common::to_client_under_concurrent_writes(&a, &b, 1 << 20, 24);
    Ok(())
}

fn to_client_between_two_gpus_in_both_directions_under_concurrent_writes() -> Result<(), Skip> {
    let clients = common::cuda_clients_or_skip(2)?;
    common::to_client_under_concurrent_writes(&clients[0], &clients[1], 1 << 20, 24);
    common::to_client_under_concurrent_writes(&clients[1], &clients[0], 1 << 20, 24);
    Ok(())
}

/// 64 MiB and a few odd sizes between two GPUs, each way, into odd offsets of a larger buffer
/// whose other bytes stay as they were.
fn to_client_between_two_gpus_moves_exactly_the_bytes_to_any_offset() -> Result<(), Skip> {
    let clients = common::cuda_clients_or_skip(2)?;
    let big: Vec<f32> = (0..(16 << 20)).map(|i| i as f32 * 0.5).collect();
    for (from, to) in [(0, 1), (1, 0)] {
        let (a, b) = (&clients[from], &clients[to]);
        let source = a.create_from_slice(bytemuck::cast_slice(&big));
        let copy = a.to_client(&source, b).expect("to_client");
        assert_eq!(
            b.read_one_as::<f32>(&copy).expect("read"),
            big,
            "cuda:{from} -> cuda:{to}"
        );
        for (len, offset) in [(1usize, 3u64), (4, 1), (4099, 4097), (65_537, 12_345)] {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 31 + from) as u8).collect();
            let source = a.create_from_slice(&bytes);
            let target = b.create_from_slice(&vec![0xEEu8; len + offset as usize + 7]);
            let range = target.clone().offset_start(offset).offset_end(7);
            a.to_client_into(&source, b, &range)
                .expect("to_client_into");
            let got = b.read_one(&target).expect("read");
            let off = offset as usize;
            assert!(
                got[..off].iter().all(|&v| v == 0xEE),
                "{len} B at {offset}: before"
            );
            assert_eq!(&got[off..off + len], &bytes[..], "{len} B at {offset}");
            assert!(
                got[off + len..].iter().all(|&v| v == 0xEE),
                "{len} B at {offset}: after"
            );
        }
    }
    Ok(())
}

/// `to_client_into` lands after the destination's earlier work on the range and before its later
/// work: behind a busy destination stream (scaling 64 MiB a few times), a fill of the range, then
/// the copy, then a read. The copy must come out, never the fill.
fn to_client_into_waits_for_earlier_destination_work<A: gpuworld::Backend, B: gpuworld::Backend>(
    a: &ComputeClient<A>,
    b: &ComputeClient<B>,
) {
    use gpuworld::{Bindings, CubeCount, library};
    const ELEMS: usize = 16 << 20;
    let cubes = (ELEMS as u32).div_ceil(library::LINEAR_CUBE);
    let source = a.create_from_slice(bytemuck::cast_slice(&vec![2.0f32; ELEMS]));
    let busy_in = b.create_from_slice(bytemuck::cast_slice(&vec![1.0f32; ELEMS]));
    let busy_out = b.empty((ELEMS * 4) as u64);
    let target = b.empty((ELEMS * 4) as u64);
    a.sync().expect("source uploaded");
    b.sync().expect("destination ready");
    for round in 0..10 {
        for _ in 0..8 {
            let bindings = Bindings::new()
                .buffer(&busy_in)
                .buffer(&busy_out)
                .scalar_f32(1.0);
            b.launch(&library::SCALE, CubeCount::new_1d(cubes), bindings)
                .expect("busy work");
        }
        let fill = Bindings::new().buffer(&target).scalar_f32(-1.0);
        b.launch(&library::FILL, CubeCount::new_1d(cubes), fill)
            .expect("fill");
        a.to_client_into(&source, b, &target)
            .expect("to_client_into");
        let got: Vec<f32> = b.read_one_as(&target).expect("read");
        assert!(
            got.iter().all(|&v| v == 2.0),
            "round {round}: {} of {ELEMS} values are not the copy's",
            got.iter().filter(|&&v| v != 2.0).count()
        );
    }
}

fn to_client_into_waits_for_earlier_work_on_the_destination_on_one_gpu() -> Result<(), Skip> {
    let (a, b) = (
        common::cuda_client_or_skip()?,
        common::cuda_client_or_skip()?,
    );
    to_client_into_waits_for_earlier_destination_work(&a, &b);
    Ok(())
}

fn to_client_into_waits_for_earlier_work_on_the_destination_between_two_gpus() -> Result<(), Skip> {
    let clients = common::cuda_clients_or_skip(2)?;
    to_client_into_waits_for_earlier_destination_work(&clients[0], &clients[1]);
    to_client_into_waits_for_earlier_destination_work(&clients[1], &clients[0]);
    Ok(())
}

/// A peer copy refuses what does not fit at once, and a failure on the way (a released source,
/// a source runtime gone) is the destination stream's fault alone; both sides go on working.
fn peer_copy_errors(a: &ComputeClient<CudaBackend>, b: &ComputeClient<CudaBackend>) {
    common::to_client_errors(a, b);

    // A manually driven source runtime dropped before it ever ticked: `Disconnected`.
    let doomed = gpuworld::cuda_client_with(
        CudaConfig::default().with_device(a.device_id().index as usize),
        Driver::Manual,
    )
    .expect("a second client of a's device");
    let source = doomed.create_from_slice(&[3u8; 16]);
    let _copy = doomed.to_client(&source, b).expect("accepted");
    drop(source);
    drop(doomed);
    let error = b.sync().expect_err("the source is gone");
    assert!(matches!(error, Error::Disconnected), "{error}");
    common::to_client_round_trip(a, b, 1 << 20);
}

fn peer_copy_errors_between_clients_of_one_gpu() -> Result<(), Skip> {
    let (a, b) = (
        common::cuda_client_or_skip()?,
        common::cuda_client_or_skip()?,
    );
    peer_copy_errors(&a, &b);
    Ok(())
}

fn peer_copy_errors_between_two_gpus() -> Result<(), Skip> {
    let clients = common::cuda_clients_or_skip(2)?;
    peer_copy_errors(&clients[0], &clients[1]);
    peer_copy_errors(&clients[1], &clients[0]);
    Ok(())
}

fn get_resource_gives_the_device_pointer_of_the_binding() -> Result<(), Skip> {
    let client = common::cuda_client_or_skip()?;
    let handle = client.create_from_slice(&[1u8; 4096]);
    let whole = client.get_resource(&handle).expect("live").resource();
    let part = client
        .get_resource(&handle.clone().offset_start(256))
        .expect("live")
        .resource();
    assert_eq!(part.zip(whole).map(|(p, w)| p - w), Some(256));
    Ok(())
}
