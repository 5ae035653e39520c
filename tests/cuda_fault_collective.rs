//! A device fault on one of two GPUs joined by an NCCL group (issue 30). GPU 1's part of an
//! all_reduce runs and waits for GPU 0's, which is queued behind a kernel that faults on GPU 0:
//! without help GPU 1 would wait forever. GPU 0's runtime aborts the group's NCCL communicators
//! when it finds its context dead, which ends GPU 1's part, and both ranks' syncs fail with a
//! typed error within the bound; so do every later call and collective, and none hangs. GPU 1's
//! context does not survive here: with the two contexts joined (NCCL's peer mappings), the
//! driver fails GPU 1's next calls with the same illegal address, with or without the abort
//! (measured: `docs/benchmarks.md`, issue 30). One test in its binary (the fault is sticky for
//! the process). Needs two GPUs and NCCL.

mod common;

use common::Skip;
use common::two_gpus::{all_reduce, fault_after, read_within, sync_within, two_gpus};
use gpuworld::Error;
use gpuworld::error::ExecutionError;

test_main![a_fault_during_a_collective_fails_it_on_every_rank_instead_of_hanging];

/// A device fault that names the group's abort or the illegal address.
fn assert_rank_failed(result: Result<impl std::fmt::Debug, Error>, what: &str) {
    match result {
        Err(Error::Execution(ExecutionError::DeviceFault { message, .. }))
            if message.contains("aborted") || message.contains("ILLEGAL_ADDRESS") =>
        {
            eprintln!("{what}: {message}");
        }
        other => panic!("{what}: expected a device fault, got {other:?}"),
    }
}

fn a_fault_during_a_collective_fails_it_on_every_rank_instead_of_hanging() -> Result<(), Skip> {
    let n = 1 << 16;
    let (a, b, group, xs) = two_gpus(n)?;
    // GPU 0 spins ~100 ms, then faults; GPU 1's part of the collective starts at once.
    fault_after(&a, 100);
    all_reduce(&group, &xs).expect("queued");
    assert_rank_failed(sync_within("GPU 1's sync", &b), "GPU 1's sync");
    assert_rank_failed(sync_within("GPU 0's sync", &a), "GPU 0's sync");
    // Later calls and collectives fail on both ranks, typed, without a hang.
    assert!(read_within("GPU 1's read", &b, &xs[1]).is_err());
    assert!(read_within("GPU 0's read", &a, &xs[0]).is_err());
    match all_reduce(&group, &xs) {
        Err(error) => eprintln!("a later all_reduce is refused at the call: {error}"),
        Ok(()) => {
            assert_rank_failed(sync_within("GPU 1's sync", &b), "GPU 1, later");
            assert_rank_failed(sync_within("GPU 0's sync", &a), "GPU 0, later");
        }
    }
    Ok(())
}
