//! Collectives on cpu devices and on the sim: every collective, operator and element type
//! against a reference computed here on the host, for groups of one to four devices; and the
//! errors of groups and buffers that do not fit. On a wgpu adapter (lavapipe in CI), a group of
//! one. On CUDA (the GPU machine), over NCCL on one GPU and on every GPU there is.

mod common;

use gpuworld::collective::{ElemType, Group, ReduceOp};
use gpuworld::error::{BindingError, CollectiveError};
use gpuworld::{Backend, Binding, Driver, Error, Handle, SimConfig, cpu_clients, sim_clients};
use half::{bf16, f16};

test_main![
    every_collective_op_and_type_matches_the_host_reference_on_cpu_devices,
    every_collective_op_and_type_matches_the_host_reference_on_manually_ticked_cpu_devices,
    every_collective_op_and_type_matches_the_host_reference_on_sim_devices,
    a_collective_waits_for_writes_before_it_and_comes_before_writes_after_it,
    a_group_that_lists_a_device_twice_is_refused,
    buffers_that_do_not_fit_are_refused_and_the_devices_stay_usable,
    a_rank_whose_input_faulted_fails_the_collective_on_every_rank_and_nothing_is_stuck,
    a_device_lost_mid_collective_fails_the_others_with_a_typed_error,
    a_collective_on_sim_devices_costs_each_rank_its_read_and_its_write_on_the_link,
    #[cfg(feature = "wgpu")]
    every_collective_matches_the_host_reference_on_a_wgpu_adapter_and_it_counts_once,
    #[cfg(feature = "cuda")]
    every_collective_op_and_type_matches_the_host_reference_on_cuda_devices,
    #[cfg(feature = "cuda")]
    a_collective_on_cuda_devices_waits_for_writes_before_it_and_comes_before_writes_after_it,
];

const ELEMS: usize = 24;
const OPS: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max];
const TYPES: [ElemType; 4] = [ElemType::F32, ElemType::F16, ElemType::BF16, ElemType::I32];

/// Rank `rank`'s input: small values with fractions and signs, different on every rank.
fn input(rank: usize, elem: ElemType, len: usize) -> Vec<u8> {
    let value = |i: usize| ((rank * 7 + i * 3) % 11) as f32 - 5.0 + 0.25 * rank as f32;
    (0..len)
        .flat_map(|i| match elem {
            ElemType::F32 => value(i).to_le_bytes().to_vec(),
            ElemType::F16 => f16::from_f32(value(i)).to_le_bytes().to_vec(),
            ElemType::BF16 => bf16::from_f32(value(i)).to_le_bytes().to_vec(),
            ElemType::I32 => (((rank * 5 + i) % 9) as i32 - 4).to_le_bytes().to_vec(),
        })
        .collect()
}

/// The reduction of `inputs` by `op`, element by element, folded in rank order in the element
/// type, written out value by value.
fn reference(inputs: &[Vec<u8>], elem: ElemType, op: ReduceOp) -> Vec<u8> {
    fn fold<T: Copy>(values: Vec<Vec<T>>, f: impl Fn(T, T) -> T) -> Vec<T> {
        let mut acc = values[0].clone();
        for rank in &values[1..] {
            for (a, &b) in acc.iter_mut().zip(rank) {
                *a = f(*a, b);
            }
        }
        acc
    }
    let float = move |a: f32, b: f32| match op {
        ReduceOp::Sum => a + b,
        ReduceOp::Prod => a * b,
        ReduceOp::Min => a.min(b),
        ReduceOp::Max => a.max(b),
    };
    match elem {
        ElemType::F32 => {
            let values = inputs
                .iter()
                .map(|b| {
                    b.chunks(4)
                        .map(bytemuck::pod_read_unaligned::<f32>)
                        .collect()
                })
                .collect();
            bytemuck::cast_slice(&fold(values, float)).to_vec()
        }
        ElemType::F16 => {
            let values = inputs
                .iter()
                .map(|b| {
                    b.chunks(2)
                        .map(|c| f16::from_le_bytes([c[0], c[1]]))
                        .collect()
                })
                .collect();
            fold(values, |a: f16, b: f16| {
                f16::from_f32(float(a.to_f32(), b.to_f32()))
            })
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect()
        }
        ElemType::BF16 => {
            let values = inputs
                .iter()
                .map(|b| {
                    b.chunks(2)
                        .map(|c| bf16::from_le_bytes([c[0], c[1]]))
                        .collect()
                })
                .collect();
            fold(values, |a: bf16, b: bf16| {
                bf16::from_f32(float(a.to_f32(), b.to_f32()))
            })
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect()
        }
        ElemType::I32 => {
            let values = inputs
                .iter()
                .map(|b| {
                    b.chunks(4)
                        .map(bytemuck::pod_read_unaligned::<i32>)
                        .collect()
                })
                .collect();
            let int = move |a: i32, b: i32| match op {
                ReduceOp::Sum => a.wrapping_add(b),
                ReduceOp::Prod => a.wrapping_mul(b),
                ReduceOp::Min => a.min(b),
                ReduceOp::Max => a.max(b),
            };
            bytemuck::cast_slice(&fold(values, int)).to_vec()
        }
    }
}

fn bindings(handles: &[Handle]) -> Vec<Binding> {
    handles.iter().map(Handle::binding).collect()
}

fn upload<B: Backend>(group: &Group<B>, data: &[Vec<u8>]) -> Vec<Handle> {
    group
        .clients()
        .iter()
        .zip(data)
        .map(|(client, bytes)| client.create_from_slice(bytes))
        .collect()
}

fn read_all<B: Backend>(group: &Group<B>, handles: &[Handle]) -> Vec<Vec<u8>> {
    group
        .clients()
        .iter()
        .zip(handles)
        .map(|(client, handle)| client.read_one(handle).map(Vec::from))
        .collect::<Result<_, Error>>()
        .expect("the collective's results read back")
}

fn every_collective_matches_the_reference<B: Backend>(group: &Group<B>) {
    let n = group.size();
    for elem in TYPES {
        let inputs: Vec<Vec<u8>> = (0..n).map(|r| input(r, elem, ELEMS)).collect();
        for op in OPS {
            let expected = reference(&inputs, elem, op);
            let buffers = upload(group, &inputs);
            group
                .all_reduce(&bindings(&buffers), elem, op)
                .expect("all_reduce is accepted");
            for (rank, got) in read_all(group, &buffers).iter().enumerate() {
                assert_eq!(
                    got, &expected,
                    "all_reduce {op:?} {elem:?}, {n} ranks, rank {rank}"
                );
            }

            let scatter_in: Vec<Vec<u8>> = (0..n).map(|r| input(r, elem, ELEMS * n)).collect();
            let reduced = reference(&scatter_in, elem, op);
            let part = ELEMS * elem.size();
            let sources = upload(group, &scatter_in);
            let outputs: Vec<Handle> = group
                .clients()
                .iter()
                .map(|c| c.empty(part as u64))
                .collect();
            group
                .reduce_scatter(&bindings(&sources), &bindings(&outputs), elem, op)
                .expect("reduce_scatter is accepted");
            for (rank, got) in read_all(group, &outputs).iter().enumerate() {
                assert_eq!(
                    got,
                    &reduced[rank * part..(rank + 1) * part],
                    "reduce_scatter {op:?} {elem:?}, {n} ranks, rank {rank}"
                );
            }
        }
    }

    let inputs: Vec<Vec<u8>> = (0..n).map(|r| input(r, ElemType::F32, ELEMS)).collect();
    for root in 0..n {
        let buffers = upload(group, &inputs);
        group
            .broadcast(&bindings(&buffers), root)
            .expect("broadcast is accepted");
        for (rank, got) in read_all(group, &buffers).iter().enumerate() {
            assert_eq!(
                got, &inputs[root],
                "broadcast from {root}, {n} ranks, rank {rank}"
            );
        }
    }

    let sources = upload(group, &inputs);
    let outputs: Vec<Handle> = group
        .clients()
        .iter()
        .map(|c| c.empty((ELEMS * 4 * n) as u64))
        .collect();
    group
        .all_gather(&bindings(&sources), &bindings(&outputs))
        .expect("all_gather is accepted");
    for (rank, got) in read_all(group, &outputs).iter().enumerate() {
        assert_eq!(got, &inputs.concat(), "all_gather, {n} ranks, rank {rank}");
    }
    group.sync_collective().expect("every rank synced");
}

fn every_collective_op_and_type_matches_the_host_reference_on_cpu_devices() {
    for n in 1..=4 {
        let group = Group::new(cpu_clients(n, Driver::DeviceThread)).expect("distinct devices");
        every_collective_matches_the_reference(&group);
    }
}

fn every_collective_op_and_type_matches_the_host_reference_on_manually_ticked_cpu_devices() {
    for n in 1..=4 {
        let group = Group::new(cpu_clients(n, Driver::Manual)).expect("distinct devices");
        every_collective_matches_the_reference(&group);
    }
}

fn every_collective_op_and_type_matches_the_host_reference_on_sim_devices() {
    for n in 1..=4 {
        let group = Group::new(sim_clients(&SimConfig::default(), n)).expect("distinct devices");
        every_collective_matches_the_reference(&group);
    }
}

/// Twenty rounds of: each rank writes `len` i32 of its own, the all_reduce runs, each rank reads
/// its result before the next round's write replaces it.
fn all_reduce_between_writes<B: Backend>(group: &Group<B>, len: usize) {
    let buffers: Vec<Handle> = group
        .clients()
        .iter()
        .map(|c| c.empty((len * 4) as u64))
        .collect();
    for round in 0..20u32 {
        for (rank, (client, buffer)) in group.clients().iter().zip(&buffers).enumerate() {
            let value = vec![(round * 10 + rank as u32) as i32; len];
            client
                .write(buffer, bytemuck::cast_slice(&value))
                .expect("write");
        }
        group
            .all_reduce(&bindings(&buffers), ElemType::I32, ReduceOp::Sum)
            .expect("all_reduce");
        let expected = (0..group.size() as u32)
            .map(|r| (round * 10 + r) as i32)
            .sum::<i32>();
        for (client, buffer) in group.clients().iter().zip(&buffers) {
            let got: Vec<i32> = client.read_one_as(buffer).expect("read");
            assert_eq!(got, vec![expected; len], "round {round}");
        }
    }
}

fn a_collective_waits_for_writes_before_it_and_comes_before_writes_after_it() {
    let group = Group::new(cpu_clients(3, Driver::DeviceThread)).expect("distinct devices");
    all_reduce_between_writes(&group, 4);
}

fn a_group_that_lists_a_device_twice_is_refused() {
    let mut clients = cpu_clients(2, Driver::Manual);
    clients.push(clients[0].clone());
    match Group::new(clients) {
        Err(Error::Collective(CollectiveError::DeviceListedTwice { device })) => {
            assert_eq!(&*device, "cpu:0")
        }
        Err(other) => panic!("expected DeviceListedTwice, got {other}"),
        Ok(_) => panic!("a group listing cpu:0 twice was accepted"),
    }
}

fn buffers_that_do_not_fit_are_refused_and_the_devices_stay_usable() {
    let group = Group::new(cpu_clients(2, Driver::Manual)).expect("distinct devices");
    let [a, b] = [&group.clients()[0], &group.clients()[1]];
    let small = a.create_from_slice(&[1u8; 8]);
    let large = b.create_from_slice(&[2u8; 12]);
    let error = group
        .all_reduce(
            &[small.binding(), large.binding()],
            ElemType::F32,
            ReduceOp::Sum,
        )
        .expect_err("different sizes");
    assert!(
        matches!(
            &error,
            Error::Collective(CollectiveError::MismatchedBuffers {
                op: "all_reduce",
                ..
            })
        ),
        "{error}"
    );
    let odd = b.create_from_slice(&[2u8; 6]);
    let six = a.create_from_slice(&[1u8; 6]);
    let error = group
        .all_reduce(
            &[six.binding(), odd.binding()],
            ElemType::I32,
            ReduceOp::Sum,
        )
        .expect_err("6 bytes are no whole number of i32");
    assert!(
        matches!(
            error,
            Error::Collective(CollectiveError::MismatchedBuffers { .. })
        ),
        "{error}"
    );
    let error = group
        .all_reduce(&[small.binding()], ElemType::F32, ReduceOp::Sum)
        .expect_err("one buffer for two ranks");
    assert!(
        matches!(
            error,
            Error::Collective(CollectiveError::MismatchedBuffers { .. })
        ),
        "{error}"
    );
    let error = group
        .all_reduce(
            &[large.binding(), small.binding()],
            ElemType::F32,
            ReduceOp::Sum,
        )
        .expect_err("each buffer on the other rank");
    assert!(
        matches!(error, Error::Binding(BindingError::ForeignHandle { .. })),
        "{error}"
    );
    // Nothing was queued: both devices still work.
    group
        .all_reduce(
            &[small.binding(), b.create_from_slice(&[2u8; 8]).binding()],
            ElemType::I32,
            ReduceOp::Sum,
        )
        .expect("a fitting all_reduce");
    assert_eq!(a.read_one(&small).expect("read"), [3u8; 8]);
    group.sync_collective().expect("no fault");
}

fn a_rank_whose_input_faulted_fails_the_collective_on_every_rank_and_nothing_is_stuck() {
    let group = Group::new(cpu_clients(3, Driver::DeviceThread)).expect("distinct devices");
    let buffers: Vec<Handle> = group
        .clients()
        .iter()
        .map(|c| c.create_from_slice(&[1u8; 16]))
        .collect();
    // Rank 1's input was released before the collective reads it.
    let mut inputs = bindings(&buffers);
    let gone = group.clients()[1].create_from_slice(&[0u8; 16]);
    inputs[1] = gone.binding();
    drop(gone);
    group
        .all_reduce(&inputs, ElemType::I32, ReduceOp::Sum)
        .expect("accepted: the release is found when the read runs");
    for client in group.clients() {
        let error = client.sync().expect_err("the collective failed");
        assert!(
            matches!(error, Error::Binding(BindingError::ReleasedHandle { .. })),
            "{error}"
        );
    }
    // Every runtime goes on working.
    group
        .all_reduce(&bindings(&buffers), ElemType::I32, ReduceOp::Sum)
        .expect("accepted");
    let summed: Vec<i32> = group.clients()[2].read_one_as(&buffers[2]).expect("read");
    assert_eq!(summed, [3 * i32::from_le_bytes([1; 4]); 4]);
}

fn a_device_lost_mid_collective_fails_the_others_with_a_typed_error() {
    let group = Group::new(cpu_clients(3, Driver::Manual)).expect("distinct devices");
    let buffers = upload(&group, &[vec![1u8; 16], vec![1u8; 16], vec![1u8; 16]]);
    group
        .all_reduce(&bindings(&buffers), ElemType::I32, ReduceOp::Sum)
        .expect("accepted");
    // The third device goes away before anything ticked it: its input never comes.
    let mut clients = group.into_clients();
    drop(clients.pop());
    for (client, buffer) in clients.iter().zip(&buffers) {
        let error = client.sync().expect_err("the collective lost a rank");
        assert!(matches!(error, Error::Disconnected), "{error}");
        // Still usable, its buffer as it was.
        assert_eq!(client.read_one(buffer).expect("read"), [1u8; 16]);
    }
}

fn a_collective_on_sim_devices_costs_each_rank_its_read_and_its_write_on_the_link() {
    let link = gpuworld::SimLink {
        latency_ns: 500,
        bytes_per_second: 1_000_000_000,
    };
    let config = SimConfig::default().with_link(Some(link));
    let group = Group::new(sim_clients(&config, 3)).expect("distinct devices");
    let buffers: Vec<Handle> = group.clients().iter().map(|c| c.empty(4000)).collect();
    group.sync_collective().expect("allocated");
    group
        .all_reduce(&bindings(&buffers), ElemType::F32, ReduceOp::Max)
        .expect("all_reduce");
    group.sync_collective().expect("done");
    for client in group.clients() {
        let clock = client
            .with_runtime(|rt| gpuworld_systems::backend::DeviceTiming::device_clock(rt.backend()));
        // 4000 B at 1 GB/s is 4 µs, plus 0.5 µs of latency: once for the read, once for the write.
        assert_eq!(clock, Some(std::time::Duration::from_nanos(2 * 4_500)));
    }
}

#[cfg(feature = "wgpu")]
fn every_collective_matches_the_host_reference_on_a_wgpu_adapter_and_it_counts_once()
-> Result<(), common::Skip> {
    let (first, second) = (
        common::wgpu_client_or_skip()?,
        common::wgpu_client_or_skip()?,
    );
    // Two runtimes on one adapter are one device.
    match Group::new(vec![first.clone(), second]) {
        Err(Error::Collective(CollectiveError::DeviceListedTwice { device })) => {
            assert_eq!(&*device, "wgpu:0")
        }
        Err(other) => panic!("expected DeviceListedTwice, got {other}"),
        Ok(_) => panic!("one adapter listed twice was accepted"),
    }
    every_collective_matches_the_reference(&Group::new(vec![first]).expect("one device"));
    Ok(())
}

/// How many CUDA devices NCCL can run collectives on here; a [`common::Skip`] without a driver (a
/// failure with `GPUWORLD_REQUIRE_CUDA=1`) or without NCCL (a failure with
/// `GPUWORLD_REQUIRE_NCCL=1`).
#[cfg(feature = "cuda")]
fn nccl_devices() -> Result<usize, common::Skip> {
    common::cuda_clients_or_skip(1)?;
    match gpuworld_cuda::nccl() {
        Ok(_) => Ok(gpuworld_cuda::device_count().expect("the driver loaded")),
        Err(error) if std::env::var("GPUWORLD_REQUIRE_NCCL").is_ok_and(|v| v == "1") => {
            panic!("GPUWORLD_REQUIRE_NCCL=1 but NCCL is unavailable: {error}")
        }
        Err(error) => Err(common::Skip(format!("no NCCL: {error}"))),
    }
}

/// Over NCCL, on groups of one CUDA device up to every device there is (two ranks on the
/// two-GPU machine, where `GPUWORLD_REQUIRE_GPUS=2` makes one GPU a failure).
#[cfg(feature = "cuda")]
fn every_collective_op_and_type_matches_the_host_reference_on_cuda_devices()
-> Result<(), common::Skip> {
    let count = nccl_devices()?;
    for n in 1..=count.max(2) {
        let clients = common::cuda_clients_or_skip(n)?;
        every_collective_matches_the_reference(&Group::new(clients).expect("distinct devices"));
    }
    Ok(())
}

/// `all_reduce_between_writes` over NCCL on every CUDA device there is (at least one), with
/// 4 MiB buffers so that a missed order shows.
#[cfg(feature = "cuda")]
fn a_collective_on_cuda_devices_waits_for_writes_before_it_and_comes_before_writes_after_it()
-> Result<(), common::Skip> {
    let count = nccl_devices()?;
    let clients = common::cuda_clients_or_skip(count)?;
    all_reduce_between_writes(&Group::new(clients).expect("distinct devices"), 1 << 20);
    Ok(())
}
