//! Timing one candidate: warm-up runs, then samples, each run followed by a sync, timed with
//! the backend's device clock when it has one (the sim's virtual clock) and with host wall time
//! around the sync otherwise. A candidate that errs, faults or panics gives its reason.

use super::tunable::TuneOp;
use crate::ComputeClient;
use gpuworld_systems::Backend;
use gpuworld_systems::kernel::panic_message;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

/// How many runs a candidate gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BenchmarkConfig {
    /// Runs before timing starts (compiles pipelines, fills caches).
    pub warmup: usize,
    /// Timed runs; the median of them decides.
    pub samples: usize,
}

impl Default for BenchmarkConfig {
    fn default() -> Self {
        BenchmarkConfig {
            warmup: 1,
            samples: 5,
        }
    }
}

/// What timing a candidate gave.
pub(crate) struct Measured<O> {
    /// Median time of one run.
    pub median: Duration,
    /// The output of the last run, for output checks.
    pub output: O,
}

/// Which clock times the runs.
#[derive(Clone, Copy)]
enum Clock {
    Device,
    Host,
}

fn device_clock<B: Backend>(client: &ComputeClient<B>) -> Option<Duration> {
    client.with_runtime(|runtime| runtime.backend().device_clock())
}

/// Runs `op` once and waits for its work; a panic or an error becomes the reason.
fn run_once<B: Backend, I, O>(
    client: &ComputeClient<B>,
    op: &TuneOp<B, I, O>,
    inputs: &I,
) -> Result<O, String> {
    let output = catch_unwind(AssertUnwindSafe(|| op(client, inputs)))
        .map_err(|payload| format!("panicked: {}", panic_message(payload)))?
        .map_err(|error| error.to_string())?;
    client.sync().map_err(|error| error.to_string())?;
    Ok(output)
}

/// Times `op` on `inputs` as `config` says.
pub(crate) fn measure<B: Backend, I, O>(
    client: &ComputeClient<B>,
    op: &TuneOp<B, I, O>,
    inputs: &I,
    config: BenchmarkConfig,
) -> Result<Measured<O>, String> {
    let mut output = None;
    for _ in 0..config.warmup {
        output = Some(run_once(client, op, inputs)?);
    }
    let clock = match device_clock(client) {
        Some(_) => Clock::Device,
        None => Clock::Host,
    };
    let mut times = Vec::with_capacity(config.samples.max(1));
    for _ in 0..config.samples.max(1) {
        let (device_start, host_start) = (device_clock(client), Instant::now());
        output = Some(run_once(client, op, inputs)?);
        let elapsed = match (clock, device_start, device_clock(client)) {
            (Clock::Device, Some(start), Some(end)) => end.saturating_sub(start),
            _ => host_start.elapsed(),
        };
        times.push(elapsed);
    }
    let output = output.ok_or_else(|| "no run completed".to_string())?;
    Ok(Measured {
        median: median(&mut times),
        output,
    })
}

/// The median of `times` (the mean of the two middle ones for an even count).
pub(crate) fn median(times: &mut [Duration]) -> Duration {
    times.sort_unstable();
    match times.len() {
        0 => Duration::ZERO,
        n if n % 2 == 1 => times[n / 2],
        n => (times[n / 2 - 1] + times[n / 2]) / 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_ignores_one_outlier() {
        let ms = Duration::from_millis;
        assert_eq!(median(&mut [ms(3), ms(1), ms(900), ms(2), ms(2)]), ms(2));
        assert_eq!(median(&mut [ms(4), ms(2)]), ms(3));
    }
}
