//! A short soak (issue 30's long run, `benches/soak.rs`, in seconds): the workload of
//! `benches/common/soak.rs` on the cpu client and on the sim, every value it reads checked,
//! sampled every 250 ms. After a warm-up, what a long-running game relies on stays flat:
//! reserved memory, resident memory and the runtime's handle records do not grow with frames.
//! `GPUWORLD_SOAK_TEST_SECS=n` lengthens each run (default 3).

#[path = "../benches/common/soak.rs"]
mod soak;

use gpuworld::{Backend, ComputeClient, Driver, SimConfig};
use soak::{MIB, Sample, Settings, Sizes};
use std::sync::Mutex;
use std::time::Duration;

/// Resident memory is the whole process's: the soaks run one at a time so that one's growth is
/// not read as the other's.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Handles the workload keeps between frames: the field and the buffer of its next step.
const KEPT_LIVE: usize = 2;
/// Handle records a frame may leave behind for the ticks after it: its transient buffers, the
/// reduction's partials, those of the asynchronous reads in flight.
const RECORDS_IN_FLIGHT: usize = 64;
/// Component removals Bevy keeps (those of the last two ticks): a few per handle of a frame.
const REMOVALS_BOUND: usize = 256;
/// Reserved memory may move by the pool's rounding between the halves, no more.
const RESERVED_SLACK: u64 = MIB;
/// Resident memory may move by the allocator's caches between the halves, no more.
const RSS_SLACK: u64 = 8 * MIB;

fn settings() -> Settings {
    let secs = std::env::var("GPUWORLD_SOAK_TEST_SECS")
        .ok()
        .map_or(3.0, |value| {
            value
                .trim()
                .parse::<f64>()
                .unwrap_or_else(|_| panic!("GPUWORLD_SOAK_TEST_SECS: `{value}` is not a number"))
        });
    Settings {
        sizes: Sizes::test(),
        duration: Duration::from_secs_f64(secs),
        interval: Duration::from_millis(250),
    }
}

/// Runs the soak on `client` and asserts it stayed flat after its warm-up (the first fifth of
/// the samples): the second half's peaks of reserved and resident memory at most a little over
/// the first half's, handle records bounded in every sample after the warm-up, no error.
fn assert_soak_stays_flat<B: Backend>(name: &str, client: &ComputeClient<B>) {
    let _one_at_a_time = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let result = soak::run(client, &settings(), |_| {});
    if let Some(failure) = &result.failure {
        panic!("{name}: the soak stopped: {failure}");
    }
    let samples = &result.samples;
    assert!(
        samples.len() >= 8,
        "{name}: {} samples in {} frames; the run is too short to judge",
        samples.len(),
        result.frames
    );
    let steady = &samples[samples.len() / 5..];
    let (first, second) = steady.split_at(steady.len() / 2);
    let peak =
        |half: &[Sample], value: fn(&Sample) -> u64| half.iter().map(value).max().unwrap_or(0);
    let table = || {
        samples
            .iter()
            .map(|s| s.csv_row(name))
            .collect::<Vec<_>>()
            .join("\n")
    };

    let (reserved_before, reserved_after) =
        (peak(first, |s| s.reserved), peak(second, |s| s.reserved));
    assert!(
        reserved_after <= reserved_before + RESERVED_SLACK,
        "{name}: reserved memory grew from a peak of {reserved_before} B to {reserved_after} B:\n{}\n{}",
        soak::CSV_HEADER,
        table()
    );
    let (rss_before, rss_after) = (peak(first, |s| s.rss), peak(second, |s| s.rss));
    assert!(
        rss_after <= rss_before + RSS_SLACK,
        "{name}: resident memory grew from a peak of {rss_before} B to {rss_after} B:\n{}\n{}",
        soak::CSV_HEADER,
        table()
    );
    let bound = KEPT_LIVE + RECORDS_IN_FLIGHT;
    for sample in steady {
        assert!(
            sample.indexed_handles <= bound
                && sample.handle_entities <= bound
                && sample.removals <= REMOVALS_BOUND,
            "{name}: {} indexed handles, {} handle entities (bound {bound}), {} removals (bound \
             {REMOVALS_BOUND}) at {:.2} s:\n{}\n{}",
            sample.indexed_handles,
            sample.handle_entities,
            sample.removals,
            sample.secs,
            soak::CSV_HEADER,
            table()
        );
    }
    assert_eq!(
        samples.last().map_or(0, |s| s.errors),
        0,
        "{name}: errors counted"
    );
}

#[test]
fn a_cpu_soak_keeps_memory_and_handle_records_flat() {
    let client = gpuworld::cpu_client(Driver::DeviceThread).expect("the cpu client opens");
    assert_soak_stays_flat("cpu", &client);
}

#[test]
fn a_sim_soak_keeps_memory_and_handle_records_flat() {
    // The sim records every call by default, a log that grows by design: off for a soak.
    let client = gpuworld::sim_client(SimConfig::default().with_record(false))
        .expect("the sim client opens");
    assert_soak_stays_flat("sim", &client);
}
