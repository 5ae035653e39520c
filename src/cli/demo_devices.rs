//! `gpuworld demo --devices N`: the heat demo with its field split over N devices of one backend
//! (`heat_slabs.rs`), checked against the one-device run on the first device bit for bit.

use super::CliError;
use super::backends::{BackendKind, sim_config};
use super::demo_args::{DemoArgs, DriverKind, progress_bar, write_trace};
use super::field_stats::FieldStats;
use super::heat::HeatProblem;
use super::heatmap;
use super::summary::RunSummary;
use gpuworld::{Backend, ComputeClient, RuntimeConfig, SimBackend, library};
use indicatif::ProgressBar;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Runs the demo of `args` on `args.devices` devices of `args.backend`, with a trace of each
/// device written beside `trace` where there is one.
pub fn run(args: &DemoArgs, trace: Option<PathBuf>) -> Result<(), CliError> {
    let n = args.devices as usize;
    match args.backend {
        #[cfg(feature = "cpu")]
        BackendKind::Cpu => {
            let driver = args.driver.unwrap_or(DriverKind::DeviceThread);
            let backends = gpuworld::CpuBackend::with_devices(n);
            run_on(backends, RuntimeConfig::default(), driver, args, trace)
        }
        BackendKind::Sim => {
            let driver = args.driver.unwrap_or(DriverKind::Manual);
            let backends = SimBackend::with_devices(&sim_config(), n);
            run_on(backends, RuntimeConfig::default(), driver, args, trace)
        }
        #[cfg(feature = "cuda")]
        BackendKind::Cuda => {
            let driver = args.driver.unwrap_or(DriverKind::DeviceThread);
            let backends = (0..n)
                .map(|device| {
                    let device = if args.same_gpu { 0 } else { device };
                    gpuworld::CudaBackend::new(gpuworld::CudaConfig::default().with_device(device))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let runtime = RuntimeConfig::default().with_max_tasks(gpuworld::CUDA_MAX_TASKS);
            run_on(backends, runtime, driver, args, trace)
        }
        // wgpu opens one adapter per runtime; several runtimes on one adapter are no devices.
        other => Err(CliError::NoMultiDevice(other)),
    }
}

fn run_on<B: Backend>(
    backends: Vec<B>,
    runtime: RuntimeConfig,
    driver: DriverKind,
    args: &DemoArgs,
    trace: Option<PathBuf>,
) -> Result<(), CliError> {
    let clients: Vec<ComputeClient<B>> = backends
        .into_iter()
        .map(|backend| ComputeClient::new(backend, runtime.clone(), driver.into()))
        .collect();
    let problem = HeatProblem {
        side: args.size,
        alpha: args.alpha,
    };
    // Both runs are timed warm: the kernel is compiled on every device before either starts.
    for client in &clients {
        client.warm_up(&library::STENCIL)?;
    }
    if trace.is_some() {
        clients.iter().for_each(ComputeClient::start_trace);
    }
    let progress = progress_bar(args.ticks, args.quiet);
    let result = problem.simulate_on_devices(&clients, args.ticks, &progress, args.graph);
    progress.finish_and_clear();
    let result = result?;
    if let Some(path) = &trace {
        for (k, client) in clients.iter().enumerate() {
            write_trace(&client.stop_trace()?, &device_trace_path(path, k))?;
        }
    }
    let one_device = problem.simulate(&clients[0], args.ticks, &ProgressBar::hidden())?;
    let differing = result
        .field
        .iter()
        .zip(&one_device.field)
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .count();
    if differing > 0 {
        return Err(CliError::DevicesDiffer {
            devices: clients.len(),
            differing,
        });
    }
    heatmap::write_png(&args.output, &result.field, args.size).map_err(|source| {
        CliError::Image {
            path: args.output.clone(),
            source,
        }
    })?;
    let mut summary = RunSummary {
        size: args.size,
        backend: B::NAME,
        device: format!(
            "{} devices: {}",
            clients.len(),
            clients
                .iter()
                .map(|c| c.device_id().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        steps: args.ticks,
        driver: driver.name(),
        ticks: 0,
        launches: 0,
        bytes_written: 0,
        bytes_read: 0,
        peak_memory: 0,
        elapsed: result.elapsed,
        field: FieldStats::of(&result.field),
        output: args.output.clone(),
    };
    // Totals over the devices; the check's one-device run on the first is counted too.
    for client in &clients {
        let (ticks, stats, peak) =
            client.with_runtime(|rt| (rt.tick_count(), rt.stats(), rt.peak_memory()));
        summary.ticks = summary.ticks.max(ticks);
        summary.launches += stats.launches;
        summary.bytes_written += stats.bytes_written;
        summary.bytes_read += stats.bytes_read;
        summary.peak_memory += peak;
    }
    let mut out = std::io::stdout().lock();
    write!(out, "{summary}")?;
    let per_step =
        |elapsed: std::time::Duration| elapsed.as_secs_f64() * 1e3 / args.ticks.max(1) as f64;
    writeln!(
        out,
        "  one device       equal bit for bit (checked against a run on {}: {:.3} ms/step there, {:.3} ms/step split, steps alone)",
        clients[0].device_id(),
        per_step(one_device.steps_elapsed),
        per_step(result.steps_elapsed)
    )?;
    if let Some(path) = &trace {
        for k in 0..clients.len() {
            writeln!(out, "trace: {}", device_trace_path(path, k).display())?;
        }
    }
    Ok(())
}

/// Where device `k`'s trace of a split run goes: `PATH` with `-k` before its extension
/// (`trace.json` becomes `trace-0.json`, `trace-1.json`, ...).
fn device_trace_path(path: &Path, k: usize) -> PathBuf {
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    let name = match path.extension() {
        Some(ext) => format!("{stem}-{k}.{}", ext.to_string_lossy()),
        None => format!("{stem}-{k}"),
    };
    path.with_file_name(name)
}
