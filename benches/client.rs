//! The public API as users call it, time and memory side by side (issue 11): the rows of
//! `common/client_rows.rs` through a `ComputeClient` with the device-thread driver on the cpu
//! backend and, with the `wgpu` feature, on the default wgpu adapter (skipped loudly without one);
//! the round trip also with the manual driver. A table of every row's time and memory goes to
//! stderr at the end.
//!
//! Run: `cargo bench --bench client -- --quick` (cpu);
//! `cargo bench --bench client --features wgpu -- --quick` (cpu and wgpu);
//! `GPUWORLD_BENCH_FULL=1` runs the full sizes (4 GB live in the ring) instead of the
//! host-memory ones.

#[path = "common/client_rows.rs"]
mod client_rows;

use client_rows::{Shape, Summary};
use criterion::Criterion;
use gpuworld::{ComputeClient, CpuBackend, Driver, RuntimeConfig};
use std::time::Duration;

/// The most host memory a cpu client may reserve here: a runtime that piles up reservations
/// reports `OutOfMemory` in its row instead of exhausting the machine.
const CPU_CAPACITY: u64 = 8 << 30;

fn cpu_client(driver: Driver) -> ComputeClient<CpuBackend> {
    ComputeClient::new(
        CpuBackend::with_capacity(Some(CPU_CAPACITY)),
        RuntimeConfig::default(),
        driver,
    )
}

fn cpu(c: &mut Criterion, shape: Shape, summary: &mut Summary) {
    let client = cpu_client(Driver::DeviceThread);
    client_rows::all_rows(c, "cpu device thread", &client, shape, summary);
    drop(client);
    let manual = cpu_client(Driver::Manual);
    client_rows::round_trip(c, "cpu manual", &manual, shape, summary);
}

#[cfg(feature = "wgpu")]
fn wgpu(c: &mut Criterion, shape: Shape, summary: &mut Summary) {
    use gpuworld::{SchedulingStrategy, WGPU_MAX_TASKS, WgpuBackend, WgpuConfig};
    let client = match gpuworld::wgpu_client(WgpuConfig::default()) {
        Ok(client) => client,
        Err(error) => {
            eprintln!("SKIPPED wgpu rows: no wgpu adapter: {error}");
            return;
        }
    };
    client_rows::all_rows(c, "wgpu device thread", &client, shape, summary);
    drop(client);
    // The manual driver with wgpu_client's runtime settings.
    let backend = match WgpuBackend::new(WgpuConfig::default()) {
        Ok(backend) => backend,
        Err(error) => {
            eprintln!("SKIPPED wgpu manual round trip: {error}");
            return;
        }
    };
    let runtime = RuntimeConfig::default()
        .with_max_tasks(WGPU_MAX_TASKS)
        .with_strategy(SchedulingStrategy::Interleave);
    let manual = ComputeClient::new(backend, runtime, Driver::Manual);
    client_rows::round_trip(c, "wgpu manual", &manual, shape, summary);
}

fn main() {
    let shape = Shape::host_unless_full();
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    let mut summary = Summary::default();
    cpu(&mut c, shape, &mut summary);
    #[cfg(feature = "wgpu")]
    wgpu(&mut c, shape, &mut summary);
    c.final_summary();
    summary.print();
}
