//! Tick-stepped pool state on the sim backend: where slices land in a page, when released memory
//! comes back (only after the device passed its events, on every stream that used it), how free
//! neighbours merge, and when a long-unused page goes back to the device.

mod common;

use common::{bytes_of, fill_first_cube};
use gpuworld::testing::SnapshotOptions;
use gpuworld::{
    ComputeClient, Driver, MemoryConfig, PoolConfig, PoolKind, RuntimeConfig, SimBackend,
    SimConfig, StreamId,
};

const KIB: u64 = 1024;

/// A sim runtime with a small ladder whose pages are easy to read in snapshots.
fn sim(latency_ticks: u64) -> ComputeClient<SimBackend> {
    let pools = vec![
        PoolConfig::new(
            PoolKind::Sliced {
                page_size: 16 * KIB,
                max_slice: 4 * KIB,
                first_page: 16 * KIB,
            },
            4 * KIB,
        )
        .with_max_reserved(None)
        .with_release_after_ticks(Some(3)),
        PoolConfig::new(PoolKind::Exclusive, u64::MAX)
            .with_max_reserved(None)
            .with_release_after_ticks(None),
    ];
    ComputeClient::new(
        SimBackend::new(SimConfig::default().with_latency_ticks(latency_ticks)),
        RuntimeConfig::default().with_memory(MemoryConfig::with_pools(pools)),
        Driver::Manual,
    )
    .with_stream(StreamId { value: 0 })
}

/// The memory lines of the snapshot and the sim's memory calls (allocations, writes with their
/// offsets, frees) during the last tick.
fn memory_state(client: &ComputeClient<SimBackend>) -> String {
    let snapshot = client.with_runtime(|rt| {
        rt.capture(&SnapshotOptions::default().with_pools())
            .to_string()
    });
    let memory = snapshot
        .find("memory:")
        .map_or(snapshot.as_str(), |at| &snapshot[at..]);
    let calls = client.with_runtime(|rt| {
        rt.backend_mut()
            .take_log()
            .iter()
            .map(|(tick, call)| format!("  t{tick} {}\n", rt.backend().call_text(call)))
            .filter(|line| line.contains("allocate") || line.contains("write"))
            .collect::<String>()
    });
    format!("{memory}memory calls:\n{calls}")
}

#[test]
fn slices_share_a_page_merge_when_freed_and_the_idle_page_goes_back() {
    let client = sim(1);
    let a = client.create(vec![1; KIB as usize]);
    let b = client.create(vec![2; 2 * KIB as usize]);
    let c = client.create(vec![3; KIB as usize]);
    client.tick();
    insta::assert_snapshot!("pool_three_slices_in_one_page", memory_state(&client));

    // Dropped while the fill still runs: parked for its stream, not free for the others.
    fill_first_cube(&client, &b, 1.0);
    drop(b);
    client.tick();
    insta::assert_snapshot!("pool_b_pinned", memory_state(&client));

    client.tick();
    insta::assert_snapshot!("pool_b_reclaimed", memory_state(&client));

    // Freeing `a` merges it with `b`'s range: a 3 KiB request fits at offset 0.
    drop(a);
    client.tick();
    let d = client.create(vec![4; 3 * KIB as usize]);
    client.tick();
    insta::assert_snapshot!("pool_merged_range_reused", memory_state(&client));
    assert_eq!(client.read_one(&d).unwrap(), vec![4; 3 * KIB as usize]);
    assert_eq!(client.read_one(&c).unwrap(), vec![3; KIB as usize]);

    drop((c, d));
    for _ in 0..5 {
        client.tick();
    }
    insta::assert_snapshot!("pool_idle_page_returned", memory_state(&client));
    assert_eq!(client.memory_usage().bytes_reserved, 0);
}

#[test]
fn memory_used_on_two_streams_is_reused_only_after_both_passed_their_events() {
    let client = sim(2);
    let other = client.with_stream(StreamId { value: 1 });
    let shared = client.create(bytes_of(&[1.0; 256]));
    fill_first_cube(&client, &shared, 1.0);
    fill_first_cube(&other, &shared, 1.0);
    let region_user = client.empty(KIB);
    drop(shared);
    let mut allocs = Vec::new();
    for _ in 0..5 {
        client.tick();
        allocs.push(client.with_runtime(|rt| rt.memory_usage().number_allocs));
    }
    // Both streams' work completes two ticks after submission; only then is the slice free.
    assert_eq!(allocs.first(), Some(&2), "{allocs:?}");
    assert_eq!(allocs.last(), Some(&1), "{allocs:?}");
    let reclaimed_at = allocs.iter().position(|&n| n == 1).unwrap_or(usize::MAX);
    assert!(
        reclaimed_at >= 2,
        "reclaimed before the device was done: {allocs:?}"
    );
    drop(region_user);
}

#[test]
fn the_snapshot_reports_every_pool_and_open_allocation_windows() {
    let client = sim(1);
    let (kept, snapshot) = client.memory_persistent_allocation((), |()| {
        let kept = client.empty(300);
        client.tick();
        let options = SnapshotOptions::default().with_pools();
        (
            kept,
            client.with_runtime(|rt| rt.capture(&options).to_string()),
        )
    });
    let pool_lines: Vec<&str> = snapshot
        .lines()
        .skip_while(|line| !line.starts_with("memory:"))
        .collect();
    insta::assert_snapshot!("pool_report_lines", pool_lines.join("\n"));
    let persistent = client.memory_report().pop().unwrap();
    assert_eq!((persistent.allocs, persistent.largest_alloc), (1, 300));
    drop(kept);
}

#[test]
fn an_allocation_waits_for_released_memory_to_retire_instead_of_failing() {
    // Room for two 4 KiB buffers; stream 1 wants a third while stream 0's is still retiring.
    let client = ComputeClient::new(
        SimBackend::new(
            SimConfig::default()
                .with_latency_ticks(2)
                .with_memory_bytes(8 * KIB),
        ),
        RuntimeConfig::default().with_memory(MemoryConfig::with_pools(vec![
            PoolConfig::new(PoolKind::Exclusive, u64::MAX)
                .with_max_reserved(None)
                .with_release_after_ticks(None),
        ])),
        Driver::Manual,
    )
    .with_stream(StreamId { value: 0 });
    let other = client.with_stream(StreamId { value: 1 });
    let a = client.create(vec![1; 4 * KIB as usize]);
    fill_first_cube(&client, &a, 1.0);
    drop(a);
    let b = other.create(vec![2; 4 * KIB as usize]);
    let c = other.create(vec![3; 4 * KIB as usize]);
    let mut ticks = Vec::new();
    for _ in 0..4 {
        client.tick();
        ticks.push(client.snapshot());
    }
    insta::assert_snapshot!("deferred_tick1", ticks[0]);
    insta::assert_snapshot!("deferred_tick3", ticks[2]);
    insta::assert_snapshot!("deferred_tick4", ticks[3]);
    assert_eq!(other.read_one(&b).unwrap(), vec![2; 4 * KIB as usize]);
    assert_eq!(other.read_one(&c).unwrap(), vec![3; 4 * KIB as usize]);
    assert_eq!(
        client.with_runtime(|rt| rt.memory_usage()).bytes_reserved,
        8 * KIB
    );
}

/// An idle tick costs no device call (issue 25): with work done, every handle dropped and every
/// reply in, a thousand further ticks allocate nothing, free nothing and submit nothing, on the
/// default ladder, whose free pages go back when the pool needs room, not after some ticks.
#[test]
fn an_idle_tick_makes_no_device_call_that_allocates_frees_or_submits() {
    let client = gpuworld::sim_client(SimConfig::default()).expect("the sim opens");
    let mut kept = Vec::new();
    for round in 0..20u64 {
        let handle = client.create_from_slice(&vec![round as u8; 256 << (round % 8)]);
        let other = client.empty(4096 + 512 * round);
        fill_first_cube(&client, &other, round as f32);
        client.read_one(&other).expect("read");
        if round % 3 == 0 {
            kept.push(handle);
        }
    }
    drop(kept);
    client.sync().expect("sync");
    // Let the releases retire.
    for _ in 0..10 {
        client.tick();
    }
    let before = client.with_runtime(|runtime| runtime.backend().log().len());
    for _ in 0..1000 {
        client.tick();
    }
    let calls: Vec<String> = client.with_runtime(|runtime| {
        let backend = runtime.backend();
        backend.log()[before..]
            .iter()
            .filter(|(_, call)| {
                matches!(
                    call,
                    gpuworld::SimCall::Allocate { .. }
                        | gpuworld::SimCall::Deallocate { .. }
                        | gpuworld::SimCall::Enqueue { .. }
                        | gpuworld::SimCall::Flush { .. }
                        | gpuworld::SimCall::Wait { .. }
                )
            })
            .map(|(tick, call)| format!("t{tick} {}", backend.call_text(call)))
            .collect()
    });
    assert!(calls.is_empty(), "idle ticks called the device: {calls:#?}");
    assert!(
        client.memory_usage().bytes_reserved > 0,
        "the free pages stay cached"
    );
}
