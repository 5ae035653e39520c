//! Timing one candidate: warm-up runs, then samples, each run followed by a sync, timed with
//! the backend's device clock when it has one (the sim's virtual clock), else with the device
//! time between two marks where the backend measures it (CUDA events, wgpu timestamp queries),
//! else with host wall time around the sync. A candidate that errs, faults or panics gives its
//! reason.

use super::settings::BenchmarkConfig;
use super::tunable::TuneOp;
use crate::ComputeClient;
use gpuworld_systems::Backend;
use gpuworld_systems::kernel::panic_message;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

/// What timing a candidate gave.
pub(crate) struct Measured<O> {
    /// Median time of one run.
    pub median: Duration,
    /// The output of the last run, for output checks.
    pub output: O,
}

/// Which clock times the runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Clock {
    /// The backend's running device clock (the sim's virtual time).
    Device,
    /// Device time between two marks on the stream (CUDA events, wgpu timestamp queries).
    Events,
    /// Host time around the work and its sync.
    Host,
}

fn device_clock<B: Backend>(client: &ComputeClient<B>) -> Option<Duration> {
    client.with_runtime(|runtime| runtime.backend().device_clock())
}

/// Runs `op` once without waiting for its work; a panic or an error becomes the reason.
fn run_op<B: Backend, I, O>(
    client: &ComputeClient<B>,
    op: &TuneOp<B, I, O>,
    inputs: &I,
) -> Result<O, String> {
    catch_unwind(AssertUnwindSafe(|| op(client, inputs)))
        .map_err(|payload| format!("panicked: {}", panic_message(payload)))?
        .map_err(|error| error.to_string())
}

/// Runs `op` once and waits for its work.
fn run_once<B: Backend, I, O>(
    client: &ComputeClient<B>,
    op: &TuneOp<B, I, O>,
    inputs: &I,
) -> Result<O, String> {
    let output = run_op(client, op, inputs)?;
    client.sync().map_err(|error| error.to_string())?;
    Ok(output)
}

/// Runs `op` once between two marks and returns its output and the device time between them,
/// if the backend measures it.
fn run_marked<B: Backend, I, O>(
    client: &ComputeClient<B>,
    op: &TuneOp<B, I, O>,
    inputs: &I,
) -> Result<(O, Option<Duration>), String> {
    let start = client.mark().map_err(|error| error.to_string())?;
    let output = run_op(client, op, inputs)?;
    let end = client.mark().map_err(|error| error.to_string())?;
    client.sync().map_err(|error| error.to_string())?;
    Ok((output, client.device_elapsed(start, end)))
}

/// Times `op` on `inputs` as `config` says, with the best clock the backend offers.
pub(crate) fn measure<B: Backend, I, O>(
    client: &ComputeClient<B>,
    op: &TuneOp<B, I, O>,
    inputs: &I,
    config: BenchmarkConfig,
) -> Result<Measured<O>, String> {
    let mut output = None;
    let mut clock = Clock::Host;
    for _ in 0..config.warmup {
        output = Some(run_once(client, op, inputs)?);
    }
    if client.capabilities().device_clock {
        clock = Clock::Device;
    } else {
        let (warm, device) = run_marked(client, op, inputs)?;
        output = Some(warm);
        if device.is_some() {
            clock = Clock::Events;
        }
    }
    // Host time is kept for every sample: if the device clock misses one, the candidate's
    // samples all fall back to host time, so one median never mixes the two clocks.
    let samples = config.samples.max(1);
    let mut device_times = Vec::with_capacity(samples);
    let mut host_times = Vec::with_capacity(samples);
    for _ in 0..samples {
        let host_start = Instant::now();
        let device = match clock {
            Clock::Device => {
                let start = device_clock(client);
                output = Some(run_once(client, op, inputs)?);
                match (start, device_clock(client)) {
                    (Some(start), Some(end)) => Some(end.saturating_sub(start)),
                    _ => None,
                }
            }
            Clock::Events => {
                let (out, device) = run_marked(client, op, inputs)?;
                output = Some(out);
                device
            }
            Clock::Host => {
                output = Some(run_once(client, op, inputs)?);
                None
            }
        };
        host_times.push(host_start.elapsed());
        device_times.push(device);
    }
    let mut times: Vec<Duration> = match device_times.into_iter().collect::<Option<Vec<_>>>() {
        Some(device) if !matches!(clock, Clock::Host) => device,
        _ => {
            if !matches!(clock, Clock::Host) {
                tracing::warn!(target: "gpuworld::tune", clock = ?clock, "a sample had no device time: the candidate is timed by the host clock");
                clock = Clock::Host;
            }
            host_times
        }
    };
    tracing::debug!(target: "gpuworld::tune", clock = ?clock, "candidate timed");
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
