//! Process groups (`gpuworld::distributed`): ranks as threads of this process for the
//! collectives' results and failures, and ranks as processes started by `gpuworld launch`. A
//! launched rank is this very test binary, told by `RANK_PROGRAM` which program to run.

use gpuworld::collective::{ElemType, ReduceOp, reduce_host};
use gpuworld::distributed::{ProcessGroup, ProcessGroupConfig};
use gpuworld::error::CollectiveError;
use gpuworld::{ComputeClient, CpuBackend, Driver, Error};
use libtest_mimic::{Arguments, Trial};
use std::io::Read;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// Set on a launched rank: the program it runs (`every_collective`, `last_rank_leaves`, ...).
const RANK_PROGRAM: &str = "GPUWORLD_TEST_RANK_PROGRAM";
/// The exit code of a launched rank whose collective failed as the test expects.
const PEER_FAILED_EXIT: u8 = 42;

fn main() -> ExitCode {
    if let Ok(program) = std::env::var(RANK_PROGRAM) {
        return rank_program(&program);
    }
    let tests: [(&str, fn()); 9] = [
        (
            "collectives_between_threads_match_the_host_reduction_bit_for_bit",
            collectives_between_threads_match_the_host_reduction_bit_for_bit,
        ),
        (
            "a_rank_that_never_arrives_is_named_by_the_rendezvous_error",
            a_rank_that_never_arrives_is_named_by_the_rendezvous_error,
        ),
        (
            "a_duplicate_rank_or_another_world_size_fails_the_rendezvous",
            a_duplicate_rank_or_another_world_size_fails_the_rendezvous,
        ),
        (
            "a_rank_that_leaves_fails_the_others_collectives_naming_it_and_every_later_one",
            a_rank_that_leaves_fails_the_others_collectives_naming_it_and_every_later_one,
        ),
        (
            "a_silent_rank_times_out_with_an_error_naming_it",
            a_silent_rank_times_out_with_an_error_naming_it,
        ),
        (
            "buffers_that_do_not_fit_fail_every_rank_and_the_group_goes_on",
            buffers_that_do_not_fit_fail_every_rank_and_the_group_goes_on,
        ),
        (
            "launch_runs_2_and_4_ranks_through_every_collective",
            launch_runs_2_and_4_ranks_through_every_collective,
        ),
        (
            "a_launched_rank_that_exits_early_fails_the_others_with_an_error_naming_it",
            a_launched_rank_that_exits_early_fails_the_others_with_an_error_naming_it,
        ),
        (
            "launch_stops_every_rank_when_one_fails_and_names_it",
            launch_stops_every_rank_when_one_fails_and_names_it,
        ),
    ];
    let trials = tests
        .into_iter()
        .map(|(name, body)| {
            Trial::test(name, move || {
                body();
                Ok(())
            })
        })
        .collect();
    libtest_mimic::run(&Arguments::from_args(), trials).exit_code()
}

// ---- ranks as threads ----

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener
        .local_addr()
        .expect("the free port's address")
        .port()
}

/// `body` run by ranks `ranks` of a world of `world` (each a thread that joined the group with
/// `config` applied), their results by rank.
fn ranks<T: Send>(
    world: usize,
    ranks: &[usize],
    config: impl Fn(ProcessGroupConfig) -> ProcessGroupConfig + Sync,
    body: impl Fn(gpuworld::Result<ProcessGroup>) -> T + Sync,
) -> Vec<T> {
    let port = free_port();
    std::thread::scope(|scope| {
        let threads: Vec<_> = ranks
            .iter()
            .map(|&rank| {
                let (config, body) = (&config, &body);
                scope.spawn(move || {
                    let base = ProcessGroupConfig::new(rank, world, "127.0.0.1", port)
                        .expect("a rank below the world size")
                        .with_rendezvous_timeout(Duration::from_secs(10))
                        .with_io_timeout(Duration::from_secs(10));
                    body(ProcessGroup::join(config(base)))
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("a rank thread panicked"))
            .collect()
    })
}

fn same(config: ProcessGroupConfig) -> ProcessGroupConfig {
    config
}

fn peer_failed(result: gpuworld::Result<impl std::fmt::Debug>) -> (usize, String) {
    match result {
        Err(Error::Collective(CollectiveError::PeerFailed { rank, reason })) => {
            (rank, reason.to_string())
        }
        other => panic!("expected CollectiveError::PeerFailed, got {other:?}"),
    }
}

fn rendezvous_failed(result: gpuworld::Result<impl std::fmt::Debug>) -> String {
    match result {
        Err(Error::Collective(CollectiveError::RendezvousFailed { reason })) => reason.to_string(),
        other => panic!("expected CollectiveError::RendezvousFailed, got {other:?}"),
    }
}

fn collectives_between_threads_match_the_host_reduction_bit_for_bit() {
    for world in [1, 2, 3] {
        ranks(world, &(0..world).collect::<Vec<_>>(), same, |group| {
            let mut group = group.expect("every rank joins");
            let client = gpuworld::cpu_client(Driver::DeviceThread).expect("a cpu client");
            every_collective(&mut group, &client);
        });
    }
}

fn a_rank_that_never_arrives_is_named_by_the_rendezvous_error() {
    let started = Instant::now();
    let short = |c: ProcessGroupConfig| c.with_rendezvous_timeout(Duration::from_millis(500));
    let results = ranks(3, &[0, 1], short, |group| group.map(|_| ()));
    for result in results {
        let reason = rendezvous_failed(result);
        assert!(reason.contains("rank [2] of 3 never arrived"), "{reason}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

fn a_duplicate_rank_or_another_world_size_fails_the_rendezvous() {
    let port = free_port();
    let short = |rank, world| {
        ProcessGroupConfig::new(rank, world, "127.0.0.1", port)
            .expect("a rank below the world size")
            .with_rendezvous_timeout(Duration::from_secs(3))
    };
    let results: Vec<_> = std::thread::scope(|scope| {
        let threads: Vec<_> = [(0, 3), (1, 3), (1, 3)]
            .into_iter()
            .map(|(rank, world)| {
                scope.spawn(move || ProcessGroup::join(short(rank, world)).map(|_| ()))
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("a rank thread"))
            .collect()
    });
    let root = rendezvous_failed(results[0].clone());
    assert!(root.contains("rank 1 arrived twice"), "{root}");

    let port = free_port();
    let results: Vec<_> = std::thread::scope(|scope| {
        let configs = [(0, 2), (1, 3)].map(|(rank, world)| {
            ProcessGroupConfig::new(rank, world, "127.0.0.1", port)
                .expect("a rank below the world size")
                .with_rendezvous_timeout(Duration::from_secs(3))
        });
        let threads: Vec<_> = configs
            .into_iter()
            .map(|config| scope.spawn(move || ProcessGroup::join(config).map(|_| ())))
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("a rank thread"))
            .collect()
    });
    for result in results {
        let reason = rendezvous_failed(result);
        assert!(
            reason.contains("rank 1 was told the world has 3 ranks"),
            "{reason}"
        );
    }
}

fn a_rank_that_leaves_fails_the_others_collectives_naming_it_and_every_later_one() {
    let results = ranks(3, &[0, 1, 2], same, |group| {
        let mut group = group.expect("every rank joins");
        if group.rank() == 2 {
            drop(group);
            return Vec::new();
        }
        let mut errors = Vec::new();
        for _ in 0..2 {
            let started = Instant::now();
            errors.push(peer_failed(group.all_reduce_bytes(
                &[1, 2, 3, 4],
                ElemType::I32,
                ReduceOp::Sum,
            )));
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "{:?}",
                started.elapsed()
            );
        }
        if group.rank() == 1 {
            errors.push(peer_failed(group.recv_bytes(2)));
        }
        errors
    });
    for (rank, errors) in results.iter().enumerate().take(2) {
        for (failed, reason) in errors {
            assert_eq!(*failed, 2, "rank {rank} blamed rank {failed}: {reason}");
            assert!(
                reason.contains("closed its connection"),
                "rank {rank}: {reason}"
            );
        }
    }
}

fn a_silent_rank_times_out_with_an_error_naming_it() {
    let quick = |c: ProcessGroupConfig| c.with_io_timeout(Duration::from_millis(300));
    let results = ranks(2, &[0, 1], quick, |group| {
        let mut group = group.expect("every rank joins");
        if group.rank() == 1 {
            std::thread::sleep(Duration::from_millis(1500));
            return None;
        }
        let started = Instant::now();
        let error = peer_failed(group.all_gather_bytes(&[7]));
        Some((error, started.elapsed()))
    });
    let ((rank, reason), waited) = results[0].clone().expect("rank 0's error");
    assert_eq!(rank, 1, "{reason}");
    assert!(reason.contains("timed out"), "{reason}");
    assert!(waited < Duration::from_secs(1), "waited {waited:?}");
}

fn buffers_that_do_not_fit_fail_every_rank_and_the_group_goes_on() {
    let results = ranks(2, &[0, 1], same, |group| {
        let mut group = group.expect("every rank joins");
        let wrong = vec![1u8; 8 + 4 * group.rank()];
        let refused = group.all_reduce_bytes(&wrong, ElemType::F32, ReduceOp::Max);
        let summed = group.all_reduce_bytes(&1i32.to_le_bytes(), ElemType::I32, ReduceOp::Sum);
        (refused, summed)
    });
    for (refused, summed) in results {
        match refused {
            Err(Error::Collective(CollectiveError::MismatchedBuffers { op, reason })) => {
                assert_eq!(op, "all_reduce");
                assert!(
                    reason.contains("rank 0 has 8 bytes, rank 1 has 12"),
                    "{reason}"
                );
            }
            other => panic!("expected MismatchedBuffers, got {other:?}"),
        }
        assert_eq!(summed.expect("the group goes on"), 2i32.to_le_bytes());
    }
}

// ---- what every rank checks ----

/// Bytes of rank `rank` for case `case`: arbitrary bits, NaNs included, that every rank can
/// make for every other to compute the expected result.
fn input(rank: usize, case: usize, len: usize) -> Vec<u8> {
    let mut state = (rank as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ ((case as u64) << 32);
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 56) as u8
        })
        .collect()
}

/// Runs every collective and a ring of sends on `client`'s buffers and checks each result
/// against `reduce_host` over every rank's input, in rank order; panics naming the case.
fn every_collective(group: &mut ProcessGroup, client: &ComputeClient<CpuBackend>) {
    let (rank, world) = (group.rank(), group.world_size());
    let elems = [ElemType::F32, ElemType::F16, ElemType::BF16, ElemType::I32];
    let ops = [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max];
    let mut case = 0;
    for elem in elems {
        for op in ops {
            for count in [world, 5 * world] {
                case += 1;
                let len = count * elem.size();
                let inputs: Vec<Vec<u8>> = (0..world).map(|r| input(r, case, len)).collect();
                let slices: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
                let expected = reduce_host(&slices, elem, op).expect("the host reduction");
                let what = format!("rank {rank} of {world}, {elem:?} {op:?}, {count} elements");

                let buffer = client.create_from_slice(&inputs[rank]);
                group.all_reduce(client, &buffer, elem, op).expect(&what);
                assert_eq!(
                    client.read_one(&buffer).expect(&what).to_vec(),
                    expected,
                    "all_reduce {what}"
                );

                let source = client.create_from_slice(&inputs[rank]);
                let part = client.empty((len / world) as u64);
                group
                    .reduce_scatter(client, &source, &part, elem, op)
                    .expect(&what);
                let share = &expected[rank * len / world..(rank + 1) * len / world];
                assert_eq!(
                    client.read_one(&part).expect(&what).to_vec(),
                    share,
                    "reduce_scatter {what}"
                );
            }
        }
    }
    let gathered = client.empty((3 * world) as u64);
    let mine = client.create_from_slice(&input(rank, 0, 3));
    group
        .all_gather(client, &mine, &gathered)
        .expect("all_gather");
    let all: Vec<u8> = (0..world).flat_map(|r| input(r, 0, 3)).collect();
    assert_eq!(
        client.read_one(&gathered).expect("all_gather").to_vec(),
        all,
        "all_gather on rank {rank}"
    );
    for root in 0..world {
        let buffer = client.create_from_slice(&input(rank, 100 + root, 10));
        group.broadcast(client, &buffer, root).expect("broadcast");
        let got = client.read_one(&buffer).expect("broadcast").to_vec();
        assert_eq!(
            got,
            input(root, 100 + root, 10),
            "broadcast from {root} on rank {rank}"
        );
    }
    if world > 1 {
        let (next, previous) = ((rank + 1) % world, (rank + world - 1) % world);
        let outgoing = client.create_from_slice(&input(rank, 200, 33));
        let incoming = client.empty(33);
        group.send(client, &outgoing, next).expect("send");
        group.recv(client, &incoming, previous).expect("recv");
        let got = client.read_one(&incoming).expect("recv").to_vec();
        assert_eq!(
            got,
            input(previous, 200, 33),
            "rank {rank} from rank {previous}"
        );
        // A halo exchange: each rank sends to and receives from both neighbours in one call.
        let ahead = client.create_from_slice(&input(rank, 300, 17));
        let behind = client.create_from_slice(&input(rank, 400, 17));
        let (from_previous, from_next) = (client.empty(17), client.empty(17));
        let sends = [((&ahead).into(), next), ((&behind).into(), previous)];
        let recvs = [
            ((&from_previous).into(), previous),
            ((&from_next).into(), next),
        ];
        let (sends, recvs) = if world == 2 {
            // Next and previous are the same rank: one pair each way.
            (&sends[..1], &recvs[..1])
        } else {
            (&sends[..], &recvs[..])
        };
        group.send_recv(client, sends, recvs).expect("send_recv");
        let got = client.read_one(&from_previous).expect("recv").to_vec();
        assert_eq!(got, input(previous, 300, 17), "send_recv on rank {rank}");
        if world > 2 {
            let got = client.read_one(&from_next).expect("recv").to_vec();
            assert_eq!(got, input(next, 400, 17), "send_recv on rank {rank}");
        }
        assert_eq!(group.collectives_device(), None, "cpu ranks go over TCP");
    }
    let sum = group
        .all_reduce_bytes(&1i32.to_le_bytes(), ElemType::I32, ReduceOp::Sum)
        .expect("a last all_reduce");
    assert_eq!(sum, (world as i32).to_le_bytes());
    client.sync().expect("the client's work ran");
}

// ---- ranks as processes ----

/// What a launched rank runs, by name; its exit code.
fn rank_program(program: &str) -> ExitCode {
    let mut group = match ProcessGroup::from_env() {
        Ok(group) => group,
        Err(error) => {
            eprintln!("rank ?: cannot join: {error}");
            return ExitCode::FAILURE;
        }
    };
    let (rank, world) = (group.rank(), group.world_size());
    match program {
        "every_collective" => {
            let client = gpuworld::cpu_client(Driver::DeviceThread).expect("a cpu client");
            every_collective(&mut group, &client);
            ExitCode::SUCCESS
        }
        "last_rank_leaves" if rank == world - 1 => ExitCode::SUCCESS,
        "last_rank_leaves" => match group.all_reduce_bytes(&[0; 4], ElemType::F32, ReduceOp::Sum) {
            Err(error) => {
                eprintln!("rank {rank}: {error}");
                ExitCode::from(PEER_FAILED_EXIT)
            }
            Ok(_) => ExitCode::SUCCESS,
        },
        "rank_1_fails" if rank == 1 => ExitCode::from(3),
        "rank_1_fails" => {
            // Never gives up by itself: only the launcher can end it.
            std::thread::sleep(Duration::from_secs(60));
            ExitCode::SUCCESS
        }
        other => {
            eprintln!("rank {rank}: no rank program `{other}`");
            ExitCode::FAILURE
        }
    }
}

/// `gpuworld launch --nproc-per-node ranks -- <this binary>` running `program`: whether it
/// succeeded, and its stderr with its ranks'. Panics past `limit`.
fn launch(ranks: usize, program: &str, limit: Duration) -> (bool, String) {
    let this = std::env::current_exe().expect("the test binary's path");
    let mut child = Command::new(env!("CARGO_BIN_EXE_gpuworld"))
        .args(["launch", "--nproc-per-node", &ranks.to_string(), "--"])
        .arg(this)
        .env(RANK_PROGRAM, program)
        .env("GPUWORLD_RENDEZVOUS_TIMEOUT_SECS", "10")
        .env("GPUWORLD_COLLECTIVE_TIMEOUT_SECS", "10")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("gpuworld launch starts");
    let mut stderr = child.stderr.take().expect("the launcher's stderr");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("the launcher can be waited on") {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            panic!("gpuworld launch of {ranks} `{program}` ranks ran past {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let text = reader.join().expect("the stderr reader");
    (status.success(), text)
}

fn launch_runs_2_and_4_ranks_through_every_collective() {
    for ranks in [2, 4] {
        let (ok, stderr) = launch(ranks, "every_collective", Duration::from_secs(30));
        assert!(ok, "{ranks} ranks failed:\n{stderr}");
    }
}

fn a_launched_rank_that_exits_early_fails_the_others_with_an_error_naming_it() {
    let (ok, stderr) = launch(4, "last_rank_leaves", Duration::from_secs(30));
    assert!(!ok, "the launch should fail:\n{stderr}");
    assert!(
        stderr.contains("rank 3 of the process group failed"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "exited with code {PEER_FAILED_EXIT}; stopped the other ranks"
        )),
        "{stderr}"
    );
}

fn launch_stops_every_rank_when_one_fails_and_names_it() {
    let started = Instant::now();
    let (ok, stderr) = launch(3, "rank_1_fails", Duration::from_secs(30));
    assert!(!ok, "the launch should fail:\n{stderr}");
    assert!(
        stderr.contains("rank 1 exited with code 3; stopped the other ranks"),
        "{stderr}"
    );
    // The other ranks sleep a minute unless stopped.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
}
