//! Process groups on GPUs (issue 29): two processes, each a rank with a CUDA client on its own
//! GPU, whose collectives run over NCCL communicators spanning the processes. Every collective
//! and the grouped send/recv against the host reduction bit for bit; a rank that exits and a rank
//! that never calls the collective make the other's collective fail with a typed error naming
//! why, within the timeout, instead of a hang; sizes that differ fail both ranks and the group
//! goes on. Each over NVLink and over sockets (`NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1
//! NCCL_IB_DISABLE=1` on loopback).
//!
//! A rank is this very test binary, started by the test with torchrun's variables and told by
//! `GPUWORLD_TEST_NCCL_PROGRAM` what to run. Needs two GPUs and NCCL; `GPUWORLD_REQUIRE_NCCL=1`
//! makes their absence a failure.

mod common;

use common::Skip;
use common::harness::{run, trial};
use gpuworld::collective::{ElemType, ReduceOp, reduce_host};
use gpuworld::distributed::{CollectivesOn, ProcessGroup, ProcessGroupConfig};
use gpuworld::{ComputeClient, CudaBackend, CudaConfig, Error};
use std::io::Read;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// Set on a rank: the program it runs.
const PROGRAM: &str = "GPUWORLD_TEST_NCCL_PROGRAM";
/// The exit code of a rank whose collective failed as the test expects.
const FAILED_AS_EXPECTED: i32 = 42;
/// How long a test waits for its ranks.
const RANKS_LIMIT: Duration = Duration::from_secs(120);

fn main() -> ExitCode {
    if let Ok(program) = std::env::var(PROGRAM) {
        return rank_main(&program);
    }
    run(vec![
        trial(
            "every_collective_across_two_processes_over_nccl_matches_the_host_bit_for_bit",
            every_collective_across_two_processes_over_nccl_matches_the_host_bit_for_bit,
        ),
        trial(
            "every_collective_over_nccl_sockets_matches_the_host_bit_for_bit",
            every_collective_over_nccl_sockets_matches_the_host_bit_for_bit,
        ),
        trial(
            "a_rank_that_exits_fails_the_other_ranks_collective_naming_it",
            a_rank_that_exits_fails_the_other_ranks_collective_naming_it,
        ),
        trial(
            "a_rank_that_never_calls_the_collective_fails_the_other_after_the_timeout",
            a_rank_that_never_calls_the_collective_fails_the_other_after_the_timeout,
        ),
        trial(
            "sizes_that_differ_fail_both_ranks_and_the_group_goes_on",
            sizes_that_differ_fail_both_ranks_and_the_group_goes_on,
        ),
        trial(
            "over_sockets_a_rank_that_exits_fails_the_other_ranks_collective",
            over_sockets_a_rank_that_exits_fails_the_other_ranks_collective,
        ),
        trial(
            "over_sockets_a_rank_that_never_calls_fails_the_other_after_the_timeout",
            over_sockets_a_rank_that_never_calls_fails_the_other_after_the_timeout,
        ),
        trial(
            "over_sockets_sizes_that_differ_fail_both_ranks_and_the_group_goes_on",
            over_sockets_sizes_that_differ_fail_both_ranks_and_the_group_goes_on,
        ),
    ])
}

// ---- the tests: two ranks started here ----

/// Two GPUs and NCCL, or why not (a failure under `GPUWORLD_REQUIRE_NCCL=1`).
fn two_gpus_and_nccl() -> Result<(), Skip> {
    let required = std::env::var("GPUWORLD_REQUIRE_NCCL").is_ok_and(|v| v == "1");
    let missing = match (gpuworld_cuda::device_count(), gpuworld_cuda::nccl()) {
        (Ok(count), Ok(_)) if count >= 2 => return Ok(()),
        (Ok(count), Ok(_)) => format!("two GPUs needed, the driver sees {count}"),
        (Err(error), _) => format!("no CUDA driver: {error}"),
        (_, Err(error)) => format!("no NCCL: {error}"),
    };
    assert!(!required, "GPUWORLD_REQUIRE_NCCL=1 but {missing}");
    Err(Skip(missing))
}

/// How one rank ended: its exit code (`None`: killed) and its stderr.
struct Ended {
    code: Option<i32>,
    stderr: String,
}

/// Runs `program` as ranks 0 and 1 with `env` set, and waits for both (killing both past the
/// limit, which fails the test: a hang).
fn two_ranks(program: &str, env: &[(&str, &str)]) -> [Ended; 2] {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
        .to_string();
    let exe = std::env::current_exe().expect("this test binary");
    let mut children: Vec<_> = (0..2)
        .map(|rank| {
            let rank = rank.to_string();
            let mut command = Command::new(&exe);
            command
                .env(PROGRAM, program)
                .env("RANK", &rank)
                .env("LOCAL_RANK", &rank)
                .env("WORLD_SIZE", "2")
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", &port)
                .env("GPUWORLD_PROCESS_COLLECTIVES", "device")
                .stdout(Stdio::null())
                .stderr(Stdio::piped());
            for (name, value) in env {
                command.env(name, value);
            }
            command.spawn().expect("a rank starts")
        })
        .collect();
    let start = Instant::now();
    let mut codes = [None, None];
    let mut done = [false, false];
    while done.iter().any(|d| !d) {
        for (k, child) in children.iter_mut().enumerate() {
            if !done[k]
                && let Ok(Some(status)) = child.try_wait()
            {
                codes[k] = status.code();
                done[k] = true;
            }
        }
        if start.elapsed() > RANKS_LIMIT {
            for child in &mut children {
                let _ = child.kill();
            }
            panic!("the ranks of `{program}` did not end within {RANKS_LIMIT:?}: a hang");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut ended = children.into_iter().zip(codes).map(|(mut child, code)| {
        let mut stderr = String::new();
        if let Some(mut pipe) = child.stderr.take() {
            let _ = pipe.read_to_string(&mut stderr);
        }
        eprintln!("rank exited with {code:?}; its stderr:\n{stderr}");
        Ended { code, stderr }
    });
    let first = ended.next().expect("rank 0");
    [first, ended.next().expect("rank 1")]
}

fn every_collective_across_two_processes_over_nccl_matches_the_host_bit_for_bit() -> Result<(), Skip>
{
    two_gpus_and_nccl()?;
    let ranks = two_ranks("collectives", &[]);
    for (rank, ended) in ranks.iter().enumerate() {
        assert_eq!(ended.code, Some(0), "rank {rank}: {}", ended.stderr);
    }
    Ok(())
}

/// NCCL over sockets on one host: no NVLink or PCIe peer access, no shared memory, no
/// InfiniBand, the loopback interface.
const SOCKETS: [(&str, &str); 4] = [
    ("NCCL_P2P_DISABLE", "1"),
    ("NCCL_SHM_DISABLE", "1"),
    ("NCCL_IB_DISABLE", "1"),
    ("NCCL_SOCKET_IFNAME", "lo"),
];

fn every_collective_over_nccl_sockets_matches_the_host_bit_for_bit() -> Result<(), Skip> {
    two_gpus_and_nccl()?;
    let ranks = two_ranks("collectives", &SOCKETS);
    for (rank, ended) in ranks.iter().enumerate() {
        assert_eq!(ended.code, Some(0), "rank {rank}: {}", ended.stderr);
    }
    Ok(())
}

fn a_rank_that_exits_fails_the_other_ranks_collective_naming_it() -> Result<(), Skip> {
    two_gpus_and_nccl()?;
    a_rank_that_exits(&[])
}

fn over_sockets_a_rank_that_exits_fails_the_other_ranks_collective() -> Result<(), Skip> {
    two_gpus_and_nccl()?;
    a_rank_that_exits(&SOCKETS)
}

fn a_rank_that_exits(env: &[(&str, &str)]) -> Result<(), Skip> {
    let [zero, one] = two_ranks("leaves", env);
    assert_eq!(one.code, Some(0), "rank 1 leaves cleanly: {}", one.stderr);
    assert_eq!(
        zero.code,
        Some(FAILED_AS_EXPECTED),
        "rank 0's collective fails: {}",
        zero.stderr
    );
    // The watchdog sees the closed connection, or (over sockets) NCCL's own error first.
    assert!(
        zero.stderr.contains("rank 1 left") || zero.stderr.contains("reported an error"),
        "{}",
        zero.stderr
    );
    Ok(())
}

fn a_rank_that_never_calls_the_collective_fails_the_other_after_the_timeout() -> Result<(), Skip> {
    two_gpus_and_nccl()?;
    a_silent_rank(&[])
}

fn over_sockets_a_rank_that_never_calls_fails_the_other_after_the_timeout() -> Result<(), Skip> {
    two_gpus_and_nccl()?;
    a_silent_rank(&SOCKETS)
}

fn a_silent_rank(env: &[(&str, &str)]) -> Result<(), Skip> {
    let mut env = env.to_vec();
    env.push(("GPUWORLD_COLLECTIVE_TIMEOUT_SECS", "2"));
    let [zero, one] = two_ranks("silent", &env);
    assert_eq!(
        zero.code,
        Some(FAILED_AS_EXPECTED),
        "rank 0's collective fails: {}",
        zero.stderr
    );
    assert!(zero.stderr.contains("never called it"), "{}", zero.stderr);
    assert_eq!(one.code, Some(0), "{}", one.stderr);
    Ok(())
}

fn sizes_that_differ_fail_both_ranks_and_the_group_goes_on() -> Result<(), Skip> {
    two_gpus_and_nccl()?;
    sizes_that_differ(&[])
}

fn over_sockets_sizes_that_differ_fail_both_ranks_and_the_group_goes_on() -> Result<(), Skip> {
    two_gpus_and_nccl()?;
    sizes_that_differ(&SOCKETS)
}

fn sizes_that_differ(env: &[(&str, &str)]) -> Result<(), Skip> {
    let ranks = two_ranks("mismatch", env);
    for (rank, ended) in ranks.iter().enumerate() {
        assert_eq!(ended.code, Some(0), "rank {rank}: {}", ended.stderr);
    }
    Ok(())
}

// ---- the ranks ----

fn rank_main(program: &str) -> ExitCode {
    let _ = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_writer(std::io::stderr)
        .try_init();
    let config = ProcessGroupConfig::from_env()
        .expect("the rank's variables")
        .with_collectives_on(CollectivesOn::Device);
    let mut group = ProcessGroup::join(config).expect("the rendezvous");
    let device = group.local_rank();
    let client = gpuworld::cuda_client(CudaConfig::default().with_device(device))
        .expect("this rank's GPU opens");
    let code = match program {
        "collectives" => {
            every_collective(&mut group, &client);
            0
        }
        "leaves" => leaves(&mut group, &client),
        "silent" => silent(&mut group, &client),
        "mismatch" => {
            mismatch(&mut group, &client);
            0
        }
        other => panic!("no rank program `{other}`"),
    };
    ExitCode::from(code as u8)
}

/// Rank `rank`'s input of `n` floats: different on every rank, with fractions, so that the
/// order of a sum shows in its bits.
fn input(rank: usize, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7 + rank * 13) % 101) as f32 * 0.37 + rank as f32 * 0.011)
        .collect()
}

fn bytes(values: &[f32]) -> Vec<u8> {
    bytemuck::cast_slice(values).to_vec()
}

fn every_collective(group: &mut ProcessGroup, client: &ComputeClient<CudaBackend>) {
    let (rank, world) = (group.rank(), group.world_size());
    let n = (1 << 18) + 3;
    let inputs: Vec<Vec<u8>> = (0..world).map(|r| bytes(&input(r, n))).collect();
    let slices: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();

    // all_reduce, f32 sum: the host's reduction in rank order, bit for bit.
    let x = client.create_from_slice(&inputs[rank]);
    group
        .all_reduce(client, &x, ElemType::F32, ReduceOp::Sum)
        .expect("all_reduce");
    assert_eq!(group.collectives_device(), Some("cuda"), "NCCL runs them");
    let expected = reduce_host(&slices, ElemType::F32, ReduceOp::Sum).unwrap();
    assert_eq!(
        client.read_one(&x).unwrap().into_vec(),
        expected,
        "all_reduce"
    );

    // all_reduce, i32 max, after a write on the same stream: ordered behind it.
    let ints: Vec<i32> = (0..4096).map(|i| (i * (rank as i32 + 3)) % 997).collect();
    let y = client.empty(4096 * 4);
    client.write(&y, bytemuck::cast_slice(&ints)).unwrap();
    group
        .all_reduce(client, &y, ElemType::I32, ReduceOp::Max)
        .expect("all_reduce max");
    let expected: Vec<i32> = (0..4096)
        .map(|i| {
            (0..world as i32)
                .map(|r| (i * (r + 3)) % 997)
                .max()
                .unwrap()
        })
        .collect();
    assert_eq!(client.read_one_as::<i32>(&y).unwrap(), expected, "max");

    // broadcast from rank 1.
    let b = client.create_from_slice(&inputs[rank]);
    group.broadcast(client, &b, 1).expect("broadcast");
    assert_eq!(
        client.read_one(&b).unwrap().into_vec(),
        inputs[1],
        "broadcast"
    );

    // all_gather: every rank's input in rank order.
    let input_handle = client.create_from_slice(&inputs[rank]);
    let gathered = client.empty((inputs[rank].len() * world) as u64);
    group
        .all_gather(client, &input_handle, &gathered)
        .expect("all_gather");
    assert_eq!(
        client.read_one(&gathered).unwrap().into_vec(),
        inputs.concat(),
        "all_gather"
    );

    // reduce_scatter: this rank's part of the sum.
    let m = 1 << 16;
    let long: Vec<Vec<u8>> = (0..world)
        .map(|r| bytes(&input(r + 5, m * world)))
        .collect();
    let long_slices: Vec<&[u8]> = long.iter().map(Vec::as_slice).collect();
    let scatter_in = client.create_from_slice(&long[rank]);
    let part = client.empty((m * 4) as u64);
    group
        .reduce_scatter(client, &scatter_in, &part, ElemType::F32, ReduceOp::Sum)
        .expect("reduce_scatter");
    let sum = reduce_host(&long_slices, ElemType::F32, ReduceOp::Sum).unwrap();
    assert_eq!(
        client.read_one(&part).unwrap().into_vec(),
        sum[rank * m * 4..(rank + 1) * m * 4],
        "reduce_scatter"
    );

    // send_recv: both ranks send to and receive from each other in one call.
    let other = 1 - rank;
    let mine = client.create_from_slice(&inputs[rank]);
    let theirs = client.empty(inputs[rank].len() as u64);
    group
        .send_recv(
            client,
            &[((&mine).into(), other)],
            &[((&theirs).into(), other)],
        )
        .expect("send_recv");
    assert_eq!(
        client.read_one(&theirs).unwrap().into_vec(),
        inputs[other],
        "send_recv"
    );

    // send and recv on their own: rank 0 sends, rank 1 receives.
    let one_way = client.create_from_slice(&inputs[rank]);
    if rank == 0 {
        group.send(client, &one_way, 1).expect("send");
    } else {
        group.recv(client, &one_way, 0).expect("recv");
    }
    assert_eq!(
        client.read_one(&one_way).unwrap().into_vec(),
        inputs[0],
        "send then recv"
    );

    // A loop of the same calls: checked across ranks once, then queued back to back.
    for _ in 0..50 {
        group
            .all_reduce(client, &x, ElemType::F32, ReduceOp::Sum)
            .expect("all_reduce in a loop");
    }
    client.sync().expect("the loop completes");
    // Leave together: a rank that left would close the other's group.
    group
        .all_reduce_bytes(&[0; 4], ElemType::I32, ReduceOp::Sum)
        .unwrap();
}

/// An error the test expects: printed for the test to read, and the rank's exit code.
fn failed_as_expected(what: &str, error: &Error) -> i32 {
    eprintln!("{what} failed as expected: {error}");
    FAILED_AS_EXPECTED
}

/// Rank 1 leaves after one collective; rank 0's next collective fails naming it.
fn leaves(group: &mut ProcessGroup, client: &ComputeClient<CudaBackend>) -> i32 {
    let x = client.create_from_slice(&bytes(&input(group.rank(), 1 << 16)));
    group
        .all_reduce(client, &x, ElemType::F32, ReduceOp::Sum)
        .expect("the first all_reduce");
    client.read_one(&x).expect("the first result");
    if group.rank() == 1 {
        std::process::exit(0);
    }
    let started = Instant::now();
    let result = group
        .all_reduce(client, &x, ElemType::F32, ReduceOp::Sum)
        .and_then(|()| client.read_one(&x).map(|_| ()));
    match result {
        Ok(()) => panic!("an all_reduce with a rank that left completed"),
        Err(error) => {
            eprintln!("after {:.2} s", started.elapsed().as_secs_f64());
            // A later call returns too: nothing hangs.
            eprintln!("a later sync: {:?}", client.sync());
            failed_as_expected("rank 0's all_reduce", &error)
        }
    }
}

/// Rank 1 stays but never calls the second collective; rank 0's fails after the timeout.
fn silent(group: &mut ProcessGroup, client: &ComputeClient<CudaBackend>) -> i32 {
    let x = client.create_from_slice(&bytes(&input(group.rank(), 1 << 16)));
    group
        .all_reduce(client, &x, ElemType::F32, ReduceOp::Sum)
        .expect("the first all_reduce");
    client.read_one(&x).expect("the first result");
    if group.rank() == 1 {
        // Alive, connected, silent: longer than rank 0's timeout.
        std::thread::sleep(Duration::from_secs(6));
        return 0;
    }
    let started = Instant::now();
    let result = group
        .all_reduce(client, &x, ElemType::F32, ReduceOp::Sum)
        .and_then(|()| client.read_one(&x).map(|_| ()));
    match result {
        Ok(()) => panic!("an all_reduce that rank 1 never called completed"),
        Err(error) => {
            let waited = started.elapsed();
            eprintln!("after {:.2} s", waited.as_secs_f64());
            assert!(waited < Duration::from_secs(30), "the timeout is 2 s");
            failed_as_expected("rank 0's all_reduce", &error)
        }
    }
}

/// The ranks call all_reduce with buffers of different sizes: both fail with
/// `MismatchedBuffers`, then a correct call works.
fn mismatch(group: &mut ProcessGroup, client: &ComputeClient<CudaBackend>) {
    let rank = group.rank();
    let wrong = client.create_from_slice(&bytes(&input(rank, 1024 + 4 * rank)));
    match group.all_reduce(client, &wrong, ElemType::F32, ReduceOp::Sum) {
        Err(Error::Collective(gpuworld::error::CollectiveError::MismatchedBuffers {
            reason,
            ..
        })) => eprintln!("rank {rank}: {reason}"),
        other => panic!("rank {rank}: expected MismatchedBuffers, got {other:?}"),
    }
    let right = client.create_from_slice(&bytes(&input(rank, 1024)));
    group
        .all_reduce(client, &right, ElemType::F32, ReduceOp::Sum)
        .expect("the group goes on");
    let inputs: Vec<Vec<u8>> = (0..2).map(|r| bytes(&input(r, 1024))).collect();
    let slices: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
    assert_eq!(
        client.read_one(&right).unwrap().into_vec(),
        reduce_host(&slices, ElemType::F32, ReduceOp::Sum).unwrap()
    );
    group
        .all_reduce_bytes(&[0; 4], ElemType::I32, ReduceOp::Sum)
        .unwrap();
}
