//! [`TestRuntime`]: a sim-backed runtime stepped by hand, whose snapshot after each tick shows the
//! world and the backend calls of that tick together.

use crate::{ComputeClient, Driver, RuntimeConfig, SimBackend, SimConfig, StreamId};
use gpuworld_systems::snapshot::{Snapshot, SnapshotOptions};
use std::ops::Deref;

/// Most ticks [`TestRuntime::step_until_idle`] runs before it gives up.
pub const MAX_IDLE_TICKS: u64 = 10_000;

/// The runtime still had work in flight after [`MAX_IDLE_TICKS`] ticks.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("the runtime still had work in flight after {ticks} ticks")]
pub struct NotIdle {
    /// Ticks run.
    pub ticks: u64,
}

/// A runtime on the sim backend, ticked only by [`TestRuntime::step`] and by blocking calls;
/// derefs to the client of stream `s0`, so `create`, `launch`, `read_one_as`... work on it.
#[derive(Debug)]
pub struct TestRuntime {
    client: ComputeClient<SimBackend>,
}

impl Default for TestRuntime {
    fn default() -> Self {
        TestRuntime::new()
    }
}

impl Deref for TestRuntime {
    type Target = ComputeClient<SimBackend>;

    fn deref(&self) -> &ComputeClient<SimBackend> {
        &self.client
    }
}

impl TestRuntime {
    /// A runtime on the default sim: work completes one tick after it is submitted.
    pub fn new() -> TestRuntime {
        TestRuntime::with_configs(SimConfig::default(), RuntimeConfig::default())
    }

    /// A runtime on a sim configured by `sim` (latency, memory, faults, costs).
    pub fn with_sim(sim: SimConfig) -> TestRuntime {
        TestRuntime::with_configs(sim, RuntimeConfig::default())
    }

    /// A runtime on a sim configured by `sim`, with the runtime configured by `runtime`.
    pub fn with_configs(sim: SimConfig, runtime: RuntimeConfig) -> TestRuntime {
        let client = ComputeClient::new(SimBackend::new(sim), runtime, Driver::Manual)
            .with_stream(StreamId { value: 0 });
        TestRuntime { client }
    }

    /// The client of stream `s0` (the one this runtime derefs to).
    pub fn client(&self) -> &ComputeClient<SimBackend> {
        &self.client
    }

    /// A client of the same runtime working on stream `s<id>`.
    pub fn stream(&self, id: u64) -> ComputeClient<SimBackend> {
        self.client.with_stream(StreamId { value: id })
    }

    /// Runs one tick; its number.
    pub fn step(&self) -> u64 {
        self.client.with_runtime(|rt| {
            rt.tick();
            let tick = rt.tick_count();
            // Keep only this tick's calls: the snapshot of a tick shows that tick's.
            let log = rt.sim_mut().take_log();
            let kept: Vec<_> = log.into_iter().filter(|(t, _)| *t == tick).collect();
            rt.sim_mut().restore_log(kept);
            tick
        })
    }

    /// Ticks until nothing is in flight (commands not yet ingested, work the device has not run,
    /// reads, syncs, memory waiting for the device); the ticks run.
    pub fn step_until_idle(&self) -> Result<u64, NotIdle> {
        for ticks in 1..=MAX_IDLE_TICKS {
            self.step();
            let inbox = self.client.inbox();
            let busy = self.client.with_runtime(|rt| {
                rt.has_work_in_flight() || inbox.has_work() || !rt.backend().is_idle()
            });
            if !busy {
                return Ok(ticks);
            }
        }
        Err(NotIdle {
            ticks: MAX_IDLE_TICKS,
        })
    }

    /// The world after the last tick and the backend calls of that tick.
    pub fn tick_snapshot(&self) -> Snapshot {
        self.tick_snapshot_with(&SnapshotOptions::default())
    }

    /// Like [`TestRuntime::tick_snapshot`], with the pools' lines or handle contents as
    /// `options` asks.
    pub fn tick_snapshot_with(&self, options: &SnapshotOptions) -> Snapshot {
        self.client.with_runtime(|rt| {
            let mut snapshot = rt.capture(options);
            let tick = rt.tick_count();
            let sim = rt.backend();
            snapshot.backend_calls = sim
                .log()
                .iter()
                .filter(|(t, _)| *t == tick)
                .map(|(_, call)| sim.call_text(call))
                .collect();
            snapshot
        })
    }

    /// Runs `f` with the sim backend (its timeline, call counts, memory).
    pub fn sim<R>(&self, f: impl FnOnce(&SimBackend) -> R) -> R {
        self.client.with_runtime(|rt| f(rt.backend()))
    }
}
