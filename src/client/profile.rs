//! What the runtime did, seen from the client: traces (`start_trace`/`stop_trace`), the device
//! time of a closure's work (`profile`) and per-kernel statistics (`kernel_stats`).

use super::ComputeClient;
use gpuworld_systems::error::ProfileError;
use gpuworld_systems::trace::{KernelStat, Trace};
use gpuworld_systems::{Backend, Error, Result};
use std::time::Duration;

/// The device time of the work a [`ComputeClient::profile`] closure enqueued on its stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProfileDuration {
    /// The name given to `profile`.
    pub name: String,
    /// The device time: the sim's virtual time, the cpu worker's busy time, CUDA events or wgpu
    /// timestamp queries.
    pub device: Duration,
}

impl<B: Backend> ComputeClient<B> {
    /// Starts recording a trace of everything the runtime does (see [`Trace`]), replacing one
    /// already running.
    pub fn start_trace(&self) {
        self.with_runtime(|runtime| runtime.start_trace());
    }

    /// Ends the trace started by [`ComputeClient::start_trace`] and returns it;
    /// `Error::Profile(ProfileError::TraceNotStarted)` when none runs. Work still in flight is not
    /// in it: [`ComputeClient::sync`] first to include it.
    pub fn stop_trace(&self) -> Result<Trace> {
        self.with_runtime(|runtime| runtime.stop_trace())
            .ok_or(Error::Profile(ProfileError::TraceNotStarted))
    }

    /// Starts or stops gathering per-kernel statistics ([`ComputeClient::kernel_stats`]);
    /// while on, the backend times every operation.
    pub fn set_kernel_stats(&self, on: bool) {
        self.with_runtime(|runtime| runtime.set_kernel_stats(on));
    }

    /// Per kernel, by id: launches, bytes bound and device time (total, mean, p50, p99), for the
    /// launches run while statistics were on. Device time is `None` where the backend cannot
    /// time launches (wgpu on an adapter without timestamp queries).
    pub fn kernel_stats(&self) -> Vec<KernelStat> {
        self.with_runtime(|runtime| runtime.kernel_stats())
    }

    /// Runs `work` and returns its value with the device time of exactly the work it enqueued
    /// on this client's stream, between two marks; waits for that work to finish. Errors: the
    /// work's fault, or `ProfileError::TimingUnavailable` where the backend cannot time it.
    pub fn profile<T>(&self, work: impl FnOnce() -> T, name: &str) -> Result<(T, ProfileDuration)> {
        let _span = tracing::debug_span!(target: "gpuworld::kernel", "profile", name).entered();
        let start = self.mark()?;
        let value = work();
        let end = self.mark()?;
        self.sync()?;
        match self.device_elapsed(start, end) {
            Some(device) => {
                tracing::debug!(target: "gpuworld::kernel", name, ?device, "profiled");
                Ok((
                    value,
                    ProfileDuration {
                        name: name.to_string(),
                        device,
                    },
                ))
            }
            None => Err(Error::Profile(ProfileError::TimingUnavailable {
                name: name.into(),
                backend: B::NAME,
                reason: match B::NAME {
                    "sim" => {
                        "the sim keeps device time only with SimConfig::kernel_cost or SimConfig::costs"
                    }
                    "wgpu" => "the adapter has no timestamp queries (or mark_timestamps is off)",
                    _ => "the backend keeps no device timestamps",
                },
            })),
        }
    }
}
