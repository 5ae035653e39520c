//! Many callers sharing one client (issue 31): eight threads running the mixed workload of
//! `benches/common/callers.rs` (creates, writes, launches, blocking and async reads, clones and
//! drops, handles shared across threads, syncs; every value checked) must not take much longer
//! for the same number of calls than one thread does. Before the fix, eight callers on two
//! cores did a tenth of one caller's calls per second: waiters spun for the rest of a tick that
//! had answered them, and `read_async` under the manual driver polled without pause. A guard
//! against that collapse, with a generous bound, not a benchmark (`benches/callers.rs` is).

#[path = "../benches/common/callers.rs"]
mod callers;

use callers::{Stop, Workload};
use gpuworld::{ComputeClient, CpuBackend, Driver};
use std::time::Duration;

/// Calls made in all, by one caller or shared among eight.
const CALLS: u64 = 12_000;

/// How many times one caller's time eight callers may take for the same calls.
const BOUND: f64 = 4.0;

fn time_of(client: &ComputeClient<CpuBackend>, callers: usize) -> Duration {
    let outcome = callers::run(
        client,
        callers,
        Workload::Mixed,
        Stop::Calls(CALLS / callers as u64),
    );
    assert!(outcome.calls >= CALLS, "{outcome:?}");
    outcome.elapsed
}

fn no_collapse(driver: Driver) {
    let client = gpuworld::cpu_client(driver).unwrap();
    // Warm-up: pools, worker threads.
    time_of(&client, 1);
    let (mut one, mut eight) = (Duration::MAX, Duration::MAX);
    // The best of three of each, alternated, so one slow moment of a shared machine does not
    // decide.
    for _ in 0..3 {
        one = one.min(time_of(&client, 1));
        eight = eight.min(time_of(&client, 8));
    }
    let ratio = eight.as_secs_f64() / one.as_secs_f64();
    eprintln!("{driver:?}: {CALLS} calls, 1 caller {one:?}, 8 callers {eight:?} ({ratio:.2}x)");
    assert!(
        ratio <= BOUND,
        "{driver:?}: eight callers took {ratio:.1}x one caller's time for the same calls \
         ({eight:?} against {one:?}; bound {BOUND}x)"
    );
    // Every handle was dropped and every caller synced: nothing is left in use.
    client.sync().expect("sync");
    client.tick();
    assert_eq!(client.memory_usage().number_allocs, 0);
}

/// One test for both drivers, so that the two never run at once on the same cores.
#[test]
fn eight_callers_do_not_collapse_beside_the_device_thread_or_ticking_by_hand() {
    no_collapse(Driver::DeviceThread);
    no_collapse(Driver::Manual);
}

/// Callers that outrun the tick wait for it: while no tick can run (the test holds the runtime),
/// four threads launching beside a device thread stop once the inbox holds `Inbox::ROOM`
/// commands, instead of queueing all of theirs; once ticks run again every launch runs, in
/// order. Under the manual driver, where the host decides when to tick, nobody waits.
#[test]
fn callers_that_outrun_the_tick_wait_for_room_in_the_inbox() {
    use gpuworld::{Bindings, CubeCount, library};
    use gpuworld_systems::inbox::Inbox;
    const CALLERS: usize = 4;
    const LAUNCHES: usize = Inbox::ROOM; // each: together four times the room
    let client = gpuworld::cpu_client(Driver::DeviceThread).unwrap();
    let handles: Vec<_> = (0..CALLERS).map(|_| client.empty(4)).collect();
    client.sync().unwrap();
    let fill = |client: &ComputeClient<CpuBackend>, handle: &gpuworld::Handle, value: f32| {
        client
            .launch(
                &library::FILL,
                CubeCount::new_1d(1),
                Bindings::new().buffer(handle).scalar_f32(value),
            )
            .expect("FILL takes a buffer and a scalar");
    };
    let queued = std::thread::scope(|scope| {
        let queued = client.with_runtime(|_held| {
            for (caller, handle) in handles.iter().enumerate() {
                let client = client.clone();
                scope.spawn(move || {
                    for launch in 0..LAUNCHES {
                        fill(&client, handle, (caller * LAUNCHES + launch) as f32);
                    }
                });
            }
            // Long enough for the callers to fill the inbox; no tick can drain it meanwhile.
            let start = std::time::Instant::now();
            let mut queued = 0;
            while start.elapsed() < Duration::from_secs(20) {
                queued = client.in_flight().commands;
                if queued >= Inbox::ROOM {
                    // Give them time to go past it, if they would.
                    std::thread::sleep(Duration::from_millis(200));
                    queued = client.in_flight().commands;
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            queued
        });
        // Released: the device thread ticks, and the callers finish.
        queued
    });
    assert!(
        (Inbox::ROOM..=Inbox::ROOM + CALLERS).contains(&queued),
        "{queued} commands queued with room for {}",
        Inbox::ROOM
    );
    for (caller, handle) in handles.iter().enumerate() {
        let last = (caller * LAUNCHES + LAUNCHES - 1) as f32;
        assert_eq!(client.read_one(handle).unwrap(), last.to_le_bytes());
    }

    // The manual driver: the host ticks when it decides, so a push never waits for room.
    let client = gpuworld::cpu_client(Driver::Manual).unwrap();
    let handle = client.empty(4);
    for launch in 0..Inbox::ROOM + 100 {
        fill(&client, &handle, launch as f32);
    }
    assert!(client.in_flight().commands > Inbox::ROOM);
    let last = (Inbox::ROOM + 99) as f32;
    assert_eq!(client.read_one(&handle).unwrap(), last.to_le_bytes());
}
