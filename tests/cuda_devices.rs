//! Many devices on CUDA (run on the GPU machine; skipped loudly without a driver, failed with
//! `GPUWORLD_REQUIRE_CUDA=1`): NCCL collectives over a single-rank group (and two ranks where
//! two GPUs are), `to_client` between two clients of one GPU, between cpu and cuda and between
//! wgpu and cuda, and `get_resource`'s device pointer. Without NCCL a collective is
//! `Error::BackendUnavailable` (failed with `GPUWORLD_REQUIRE_NCCL=1`).
#![cfg(feature = "cuda")]

mod common;

use gpuworld::collective::{ElemType, Group, ReduceOp, reduce_host};
use gpuworld::{ComputeClient, CudaBackend, CudaConfig, Driver, Error, Handle, cpu_clients};

fn nccl_or_skip() -> bool {
    match gpuworld_cuda::nccl() {
        Ok(_) => true,
        Err(error) if std::env::var("GPUWORLD_REQUIRE_NCCL").is_ok_and(|v| v == "1") => {
            panic!("GPUWORLD_REQUIRE_NCCL=1 but NCCL is unavailable: {error}")
        }
        Err(error) => {
            eprintln!("SKIPPED: no NCCL: {error}");
            false
        }
    }
}

fn round_trip<A: gpuworld::Backend, B: gpuworld::Backend>(
    a: &ComputeClient<A>,
    b: &ComputeClient<B>,
) {
    let values: Vec<f32> = (0..(1 << 20)).map(|i| i as f32 * 0.25).collect();
    let source = a.create_from_slice(bytemuck::cast_slice(&values));
    let there = a.to_client(&source, b).expect("to_client");
    let back = b.to_client(&there, a).expect("to_client back");
    assert_eq!(b.read_one_as::<f32>(&there).expect("read"), values);
    assert_eq!(a.read_one_as::<f32>(&back).expect("read"), values);
}

#[test]
fn to_client_between_two_clients_of_one_gpu_and_between_cpu_and_cuda() {
    let (Some(a), Some(b)) = (common::cuda_client_or_skip(), common::cuda_client_or_skip()) else {
        return;
    };
    round_trip(&a, &b);
    let cpu = cpu_clients(1, Driver::DeviceThread);
    round_trip(&cpu[0], &a);
    round_trip(&a, &cpu[0]);
}

#[cfg(feature = "wgpu")]
#[test]
fn to_client_between_wgpu_and_cuda() {
    let (Some(cuda), Some(gpu)) = (common::cuda_client_or_skip(), common::wgpu_client_or_skip())
    else {
        return;
    };
    round_trip(&gpu, &cuda);
    round_trip(&cuda, &gpu);
}

fn input(rank: usize, elem: ElemType, len: usize) -> Vec<u8> {
    let value = |i: usize| ((rank * 7 + i * 3) % 11) as f32 - 5.0 + 0.25 * rank as f32;
    (0..len)
        .flat_map(|i| match elem {
            ElemType::F32 => value(i).to_le_bytes().to_vec(),
            ElemType::F16 => half::f16::from_f32(value(i)).to_le_bytes().to_vec(),
            ElemType::BF16 => half::bf16::from_f32(value(i)).to_le_bytes().to_vec(),
            ElemType::I32 => (((rank * 5 + i) % 9) as i32 - 4).to_le_bytes().to_vec(),
        })
        .collect()
}

fn check_group(group: &Group<CudaBackend>) {
    let n = group.size();
    for elem in [ElemType::F32, ElemType::F16, ElemType::BF16, ElemType::I32] {
        for op in [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max] {
            let inputs: Vec<Vec<u8>> = (0..n).map(|r| input(r, elem, 1000)).collect();
            let slices: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
            let expected = reduce_host(&slices, elem, op).expect("reference");
            let buffers: Vec<Handle> = group
                .clients()
                .iter()
                .zip(&inputs)
                .map(|(c, bytes)| c.create_from_slice(bytes))
                .collect();
            let bindings: Vec<_> = buffers.iter().map(Handle::binding).collect();
            group.all_reduce(&bindings, elem, op).expect("all_reduce");
            for (client, buffer) in group.clients().iter().zip(&buffers) {
                let got = client.read_one(buffer).expect("read");
                // NCCL's order of accumulation may differ from the host's for floats of more
                // than two ranks; with one or two ranks every order is the same.
                assert_eq!(got, expected, "{op:?} {elem:?} over {n} rank(s)");
            }
        }
    }
    let inputs: Vec<Vec<u8>> = (0..n).map(|r| input(r, ElemType::F32, 512)).collect();
    let sources: Vec<Handle> = group
        .clients()
        .iter()
        .zip(&inputs)
        .map(|(c, bytes)| c.create_from_slice(bytes))
        .collect();
    let gathered: Vec<Handle> = group
        .clients()
        .iter()
        .map(|c| c.empty((2048 * n) as u64))
        .collect();
    let sb: Vec<_> = sources.iter().map(Handle::binding).collect();
    let gb: Vec<_> = gathered.iter().map(Handle::binding).collect();
    group.all_gather(&sb, &gb).expect("all_gather");
    for (client, out) in group.clients().iter().zip(&gathered) {
        assert_eq!(client.read_one(out).expect("read"), inputs.concat());
    }
    group.broadcast(&sb, 0).expect("broadcast");
    for (client, out) in group.clients().iter().zip(&sources) {
        assert_eq!(client.read_one(out).expect("read"), inputs[0]);
    }
    group.sync_collective().expect("no fault");
}

#[test]
fn nccl_collectives_over_a_single_rank_group() {
    let Some(client) = common::cuda_client_or_skip() else {
        return;
    };
    let group = Group::new(vec![client]).expect("one device");
    if !nccl_or_skip() {
        let buffer = group.clients()[0].create_from_slice(&[0u8; 16]);
        let error = group
            .all_reduce(&[buffer.binding()], ElemType::F32, ReduceOp::Sum)
            .expect_err("no NCCL");
        assert!(matches!(error, Error::BackendUnavailable { .. }), "{error}");
        return;
    }
    check_group(&group);
}

#[test]
fn nccl_collectives_over_two_gpus_where_there_are_two() {
    if gpuworld_cuda::device_count().unwrap_or(0) < 2 || !nccl_or_skip() {
        eprintln!("SKIPPED: fewer than two GPUs or no NCCL");
        return;
    }
    let clients: Vec<_> = (0..2)
        .map(|device| {
            gpuworld::cuda_client(CudaConfig {
                device,
                ..CudaConfig::default()
            })
            .expect("two GPUs")
        })
        .collect();
    check_group(&Group::new(clients).expect("distinct devices"));
}

#[test]
fn get_resource_gives_the_device_pointer_of_the_binding() {
    let Some(client) = common::cuda_client_or_skip() else {
        return;
    };
    let handle = client.create_from_slice(&[1u8; 4096]);
    let whole = client.get_resource(&handle).expect("live").device_pointer();
    let part = client
        .get_resource(&handle.clone().offset_start(256))
        .expect("live")
        .device_pointer();
    assert_eq!(part.zip(whole).map(|(p, w)| p - w), Some(256));
}
