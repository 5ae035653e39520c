//! Collectives across processes on GPUs (issue 29): two processes, one GPU each, an
//! `all_reduce` of f32 through `ProcessGroup` (NCCL communicators spanning the processes) beside
//! raw NCCL driven from the same two processes (its own communicator, buffer and stream), rounds
//! alternated; then the halo exchange of a split domain, `send_recv` of one row each way, beside
//! raw `ncclSend`/`ncclRecv`. Over NVLink (NCCL's default) and over sockets
//! (`NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1`, on loopback).
//!
//! `distributed-* --bench` starts the ranks itself (this binary again, with torchrun's
//! variables) for each transport and prints rank 0's table. Settings:
//! `GPUWORLD_DIST_MIB` (all_reduce size, default 256), `GPUWORLD_DIST_ITERS` (per round,
//! default 20), `GPUWORLD_DIST_ROUNDS` (default 5), `GPUWORLD_DIST_TRANSPORTS` (`nvlink,sockets`),
//! `GPUWORLD_DIST_ROW` (halo row bytes, default 16384).

use gpuworld::collective::{ElemType, ReduceOp};
use gpuworld::cudarc::driver::sys;
use gpuworld::cudarc::nccl::sys as nccl_sys;
use gpuworld::distributed::{CollectivesOn, ProcessGroup, ProcessGroupConfig};
use gpuworld::{CudaConfig, Handle};
use std::process::Command;
use std::time::{Duration, Instant};

/// Set on a rank: the transport's name, for its report.
const RANK_OF: &str = "GPUWORLD_DIST_BENCH_RANK";

fn setting(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(text) => text
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text} is not a whole number")),
        Err(_) => default,
    }
}

fn main() {
    if let Ok(transport) = std::env::var(RANK_OF) {
        rank(&transport);
        return;
    }
    if !std::env::args().any(|a| a == "--bench") {
        // `cargo test` runs benches as tests: nothing to check without GPUs.
        return;
    }
    match gpuworld_cuda::device_count() {
        Ok(count) if count >= 2 => {}
        other => {
            eprintln!("SKIPPED distributed bench: two GPUs needed ({other:?})");
            return;
        }
    }
    if let Err(error) = gpuworld_cuda::nccl() {
        eprintln!("SKIPPED distributed bench: {error}");
        return;
    }
    let transports =
        std::env::var("GPUWORLD_DIST_TRANSPORTS").unwrap_or_else(|_| "nvlink,sockets".into());
    for transport in transports.split(',').map(str::trim) {
        let sockets: &[(&str, &str)] = match transport {
            "nvlink" => &[],
            "sockets" => &[
                ("NCCL_P2P_DISABLE", "1"),
                ("NCCL_SHM_DISABLE", "1"),
                ("NCCL_IB_DISABLE", "1"),
                ("NCCL_SOCKET_IFNAME", "lo"),
            ],
            other => panic!("GPUWORLD_DIST_TRANSPORTS: `{other}` is neither nvlink nor sockets"),
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port()
            .to_string();
        let exe = std::env::current_exe().expect("this binary");
        let children: Vec<_> = (0..2)
            .map(|rank| {
                let rank = rank.to_string();
                let mut command = Command::new(&exe);
                command
                    .env(RANK_OF, transport)
                    .env("RANK", &rank)
                    .env("LOCAL_RANK", &rank)
                    .env("WORLD_SIZE", "2")
                    .env("MASTER_ADDR", "127.0.0.1")
                    .env("MASTER_PORT", &port);
                for (name, value) in sockets {
                    command.env(name, value);
                }
                command.spawn().expect("a rank starts")
            })
            .collect();
        for mut child in children {
            let status = child.wait().expect("a rank ends");
            assert!(status.success(), "a rank of `{transport}` failed: {status}");
        }
    }
}

/// Median of `times`.
fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// `cu` as a panic naming `what` unless it succeeded.
fn check(code: sys::CUresult, what: &str) {
    assert_eq!(code, sys::CUresult::CUDA_SUCCESS, "{what}");
}

fn rank(transport: &str) {
    let mib = setting("GPUWORLD_DIST_MIB", 256);
    let iters = setting("GPUWORLD_DIST_ITERS", 20);
    let rounds = setting("GPUWORLD_DIST_ROUNDS", 5);
    let row = setting("GPUWORLD_DIST_ROW", 16384);
    let config = ProcessGroupConfig::from_env()
        .expect("torchrun's variables")
        .with_collectives_on(CollectivesOn::Device);
    let mut group = ProcessGroup::join(config).expect("the rendezvous");
    let (me, world) = (group.rank(), group.world_size());
    let device = group.local_rank();
    let client =
        gpuworld::cuda_client(CudaConfig::default().with_device(device)).expect("this rank's GPU");
    let bytes = mib << 20;
    let count = bytes / 4;
    let x: Handle = client.empty(bytes as u64);
    client.write(&x, &vec![0u8; bytes]).expect("zeros");
    // Raw NCCL beside it: its own communicator from rank 0's id, its own buffer and stream.
    let nccl = gpuworld_cuda::nccl().expect("NCCL");
    let id = if me == 0 {
        let id = nccl.unique_id().expect("an id");
        id.internal.iter().map(|&c| c as u8).collect()
    } else {
        vec![0u8; 128]
    };
    let id = group.broadcast_bytes(&id, 0).expect("the id");
    let comm = gpuworld_cuda::process_communicator(device as u32, &id, me, world)
        .expect("a raw communicator");
    let (mut raw, mut stream) = (0, std::ptr::null_mut());
    let (mut row_out, mut row_in) = (0, 0);
    // SAFETY: the communicator's join made the device's context current on this thread.
    unsafe {
        check(sys::cuMemAlloc_v2(&mut raw, bytes), "cuMemAlloc");
        check(sys::cuMemsetD8_v2(raw, 0, bytes), "cuMemsetD8");
        check(sys::cuMemAlloc_v2(&mut row_out, row), "cuMemAlloc");
        check(sys::cuMemAlloc_v2(&mut row_in, row), "cuMemAlloc");
        check(
            sys::cuStreamCreate(
                &mut stream,
                sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
            ),
            "cuStreamCreate",
        );
    }
    let raw_all_reduce = || {
        // SAFETY: `raw` holds `count` floats on this device; `stream` is its context's.
        unsafe {
            nccl.raw_all_reduce(
                raw,
                raw,
                count,
                nccl_sys::ncclDataType_t::ncclFloat32,
                nccl_sys::ncclRedOp_t::ncclSum,
                &comm,
                stream.cast(),
            )
        }
        .expect("raw all_reduce");
    };
    let raw_sync = || {
        // SAFETY: a live stream.
        check(unsafe { sys::cuStreamSynchronize(stream) }, "sync");
    };
    let barrier = |group: &mut ProcessGroup| {
        group
            .all_reduce_bytes(&[0; 4], ElemType::I32, ReduceOp::Sum)
            .expect("barrier");
    };
    // Warm-up of both paths (the group's first collective makes its communicator).
    for _ in 0..3 {
        group
            .all_reduce(&client, &x, ElemType::F32, ReduceOp::Sum)
            .expect("all_reduce");
        raw_all_reduce();
    }
    client.sync().expect("sync");
    raw_sync();
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        barrier(&mut group);
        let start = Instant::now();
        for _ in 0..iters {
            group
                .all_reduce(&client, &x, ElemType::F32, ReduceOp::Sum)
                .expect("all_reduce");
        }
        client.sync().expect("sync");
        ours.push(start.elapsed() / iters as u32);
        barrier(&mut group);
        let start = Instant::now();
        for _ in 0..iters {
            raw_all_reduce();
        }
        raw_sync();
        theirs.push(start.elapsed() / iters as u32);
    }
    // The halo exchange: one row each way with the other rank.
    let other = 1 - me;
    let (out, into) = (client.empty(row as u64), client.empty(row as u64));
    let exchanges = 1000;
    let exchange = |group: &mut ProcessGroup| {
        group
            .send_recv(
                &client,
                &[((&out).into(), other)],
                &[((&into).into(), other)],
            )
            .expect("send_recv");
    };
    for _ in 0..20 {
        exchange(&mut group);
    }
    client.sync().expect("sync");
    let (mut ours_row, mut theirs_row) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        barrier(&mut group);
        let start = Instant::now();
        for _ in 0..exchanges {
            exchange(&mut group);
        }
        client.sync().expect("sync");
        ours_row.push(start.elapsed() / exchanges);
        barrier(&mut group);
        let start = Instant::now();
        for _ in 0..exchanges {
            // SAFETY: both rows hold `row` bytes on this device; `stream` is its context's.
            unsafe { nccl.raw_exchange(row_out, row_in, row, other, &comm, stream.cast()) }
                .expect("raw exchange");
        }
        raw_sync();
        theirs_row.push(start.elapsed() / exchanges);
    }
    barrier(&mut group);
    if me != 0 {
        return;
    }
    let bus = |time: Duration| {
        bytes as f64 / time.as_secs_f64() / 1e9 * 2.0 * (world as f64 - 1.0) / world as f64
    };
    let (ours, theirs) = (median(ours), median(theirs));
    let (ours_row, theirs_row) = (median(ours_row), median(theirs_row));
    println!(
        "| {transport} | all_reduce {mib} MiB f32, 2 processes (median of {rounds} rounds of {iters}) | {:.1} GB/s bus ({:.2} ms) | {:.1} GB/s bus ({:.2} ms) | {:.3}x |",
        bus(ours),
        ours.as_secs_f64() * 1e3,
        bus(theirs),
        theirs.as_secs_f64() * 1e3,
        bus(ours) / bus(theirs)
    );
    println!(
        "| {transport} | send_recv of {row} B each way (median of {rounds} rounds of {exchanges}) | {:.1} µs | {:.1} µs | {:.3}x time |",
        ours_row.as_secs_f64() * 1e6,
        theirs_row.as_secs_f64() * 1e6,
        ours_row.as_secs_f64() / theirs_row.as_secs_f64()
    );
}
