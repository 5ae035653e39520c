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
