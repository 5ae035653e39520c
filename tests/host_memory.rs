//! Host memory over a long run (issue 30): a steady loop that creates, uses and drops handles
//! leaves the process's host memory flat once warm, whatever `memory_usage()` says about the
//! device. Two measures: live heap bytes, counted exactly by this binary's global allocator (every
//! thread's, the device thread's and the CPU workers' included), and resident memory
//! (`/proc/self/status`, where there is one). Both are process-wide, so this binary holds this one
//! test only, and the allocator counts nothing in the other test binaries.
//!
//! `GPUWORLD_HOST_MEMORY_HANDLES` sets the handles measured (default 100,000; the test takes 10–30 s
//! in a debug build on the 2-core dev machine, most of it the blocking round trips).

/// Only the harness of `tests/common.rs`: this binary needs no device.
mod common {
    #[path = "harness.rs"]
    pub mod harness;
}

use gpuworld::{Bindings, ComputeClient, CpuBackend, CubeCount, Driver, library};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, Ordering};

test_main![host_memory_stays_flat_while_handles_are_created_read_and_dropped];

/// The system allocator, counting the bytes allocated and not yet freed.
struct CountingAllocator;

/// Bytes allocated and not yet freed, by every thread.
static LIVE_BYTES: AtomicI64 = AtomicI64::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; the counter only observes.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc`, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc_zeroed`, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: the caller's contract for `dealloc`, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract for `realloc`, passed on.
        let moved = unsafe { System.realloc(ptr, layout, new_size) };
        if !moved.is_null() {
            LIVE_BYTES.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
        }
        moved
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// What a handle may leave behind, on average, in live heap bytes and in resident memory: 16 bytes
/// of noise (a queue's capacity doubling once), where a record kept per handle ever made costs
/// about ten times as much.
const BYTES_PER_HANDLE: f64 = 16.0;

/// Handles created and dropped while measuring, unless `GPUWORLD_HOST_MEMORY_HANDLES` says.
const HANDLES: u64 = 100_000;

/// Every this many handles the loop reads the last one back (blocking): a round trip costs ~0.5
/// ms in a debug build (far more on a loaded machine), too much for every one of 100,000 handles;
/// the launch loop reads every round. The reads also bound the commands a tick drains at once,
/// and so the one growth a warm run may still show, the drain's buffer doubling.
const READ_EVERY: u64 = 500;

/// Rounds of the launch loop (create, empty, launch, read, each blocking read a round trip).
const LAUNCH_ROUNDS: u64 = 1_000;

/// The process's resident memory in bytes, where the system says.
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(kib * 1024)
}

/// Host memory now: live heap bytes and, where known, resident bytes.
#[derive(Clone, Copy, Debug)]
struct HostMemory {
    live: i64,
    resident: Option<u64>,
}

impl HostMemory {
    /// Once `client`'s work is done (the device thread answers the sync after the tick's work).
    fn now(client: &ComputeClient<CpuBackend>) -> HostMemory {
        client.sync().expect("the sync succeeds");
        HostMemory {
            live: LIVE_BYTES.load(Ordering::Relaxed),
            resident: resident_bytes(),
        }
    }
}

/// Runs `round` `warm_up` times, then `rounds` times, and checks that the second run left at
/// most [`BYTES_PER_HANDLE`] per handle made (`handles_per_round` a round) behind.
fn assert_flat(
    what: &str,
    client: &ComputeClient<CpuBackend>,
    warm_up: u64,
    rounds: u64,
    handles_per_round: u64,
    mut round: impl FnMut(u64),
) {
    (0..warm_up).for_each(&mut round);
    let before = HostMemory::now(client);
    (0..rounds).for_each(&mut round);
    let after = HostMemory::now(client);
    let handles = (rounds * handles_per_round) as f64;
    let live_per_handle = (after.live - before.live) as f64 / handles;
    let resident_per_handle = match (before.resident, after.resident) {
        (Some(before), Some(after)) => Some((after as f64 - before as f64) / handles),
        _ => None,
    };
    eprintln!(
        "{what}: live heap {} -> {} bytes ({live_per_handle:.2} per handle), resident {:?} -> \
         {:?} KiB ({resident_per_handle:.1?} per handle) over {handles} handles",
        before.live,
        after.live,
        before.resident.map(|r| r / 1024),
        after.resident.map(|r| r / 1024),
    );
    assert!(
        live_per_handle <= BYTES_PER_HANDLE,
        "{what}: the live heap grew by {live_per_handle:.1} bytes per handle (at most \
         {BYTES_PER_HANDLE} allowed) while the device reports {:?}: something keeps a record of \
         every handle ever made",
        client.memory_usage()
    );
    if let Some(resident) = resident_per_handle {
        assert!(
            resident <= BYTES_PER_HANDLE,
            "{what}: resident memory grew by {resident:.1} bytes per handle (at most \
             {BYTES_PER_HANDLE} allowed), the live heap by {live_per_handle:.1}"
        );
    }
}

fn host_memory_stays_flat_while_handles_are_created_read_and_dropped() {
    let handles = match std::env::var("GPUWORLD_HOST_MEMORY_HANDLES") {
        Ok(value) => value
            .parse()
            .unwrap_or_else(|_| panic!("GPUWORLD_HOST_MEMORY_HANDLES={value} is not a number")),
        Err(_) => HANDLES,
    };
    let client = gpuworld::cpu_client(Driver::DeviceThread).unwrap();
    let started = std::time::Instant::now();
    let data = [7u8; 256];

    assert_flat(
        "create_from_slice(256 B), drop; a blocking read every 500",
        &client,
        handles / 5,
        handles,
        1,
        |i| {
            let handle = client.create_from_slice(&data);
            if i % READ_EVERY == 0 {
                let back = client.read_one(&handle).expect("the read succeeds");
                assert_eq!(&back[..], &data[..]);
            }
        },
    );
    eprintln!("({:.1?})", started.elapsed());

    let rounds = LAUNCH_ROUNDS.min(handles);
    assert_flat(
        "create_from_slice(256 B), empty(256 B), launch scale, read, drop both",
        &client,
        rounds / 4,
        rounds,
        2,
        |_| {
            let x = client.create_from_slice(bytemuck::cast_slice(&[1.5f32; 64]));
            let out = client.empty(256);
            let bindings = Bindings::new().buffer(&x).buffer(&out).scalar_f32(2.0);
            client
                .launch(&library::SCALE, CubeCount::new_1d(1), bindings)
                .expect("the launch is valid");
            let back: Vec<f32> = client.read_one_as(&out).expect("the read succeeds");
            assert_eq!(back, [3.0f32; 64]);
        },
    );
    eprintln!("({:.1?})", started.elapsed());
}
