//! `gpuworld demo`: the run that picks a backend, simulates heat diffusion on it, writes the final
//! field as a PNG and prints a closing summary (its arguments: `demo_args.rs`).

use super::CliError;
use super::backends::{BackendKind, sim_config};
use super::demo_args::{DemoArgs, DriverKind, progress_bar, write_trace};
use super::field_stats::FieldStats;
use super::heat::{HeatProblem, Persistence};
use super::heatmap;
use super::kernel_table::KernelTable;
use super::summary::RunSummary;
use gpuworld::config::Settings;
use gpuworld::{Backend, ComputeClient, RuntimeConfig, SimBackend};
use std::io::Write;
use std::path::PathBuf;

/// Runs the demo described by `args`, with the configuration's settings where the arguments
/// say nothing.
pub fn run(args: &DemoArgs) -> Result<(), CliError> {
    let settings = Settings::load()?;
    if args.distributed {
        return super::demo_processes::run(args);
    }
    if args.devices > 1 || args.graph {
        return super::demo_devices::run(args, trace_path(args, &settings));
    }
    match args.backend {
        #[cfg(feature = "cpu")]
        BackendKind::Cpu => {
            let driver = args.driver.unwrap_or(DriverKind::DeviceThread);
            let backend = gpuworld::CpuBackend::new();
            run_on(backend, RuntimeConfig::default(), driver, args, &settings)
        }
        #[cfg(feature = "wgpu")]
        BackendKind::Wgpu => {
            let driver = args.driver.unwrap_or(DriverKind::DeviceThread);
            let config = super::backends::wgpu_config(args.adapter, args.device_type)
                // Kernel statistics want every dispatch timed.
                .with_timestamps(true);
            let backend = gpuworld::WgpuBackend::new(config)?;
            let runtime = RuntimeConfig::default().with_max_tasks(gpuworld::WGPU_MAX_TASKS);
            run_on(backend, runtime, driver, args, &settings)
        }
        #[cfg(feature = "cuda")]
        BackendKind::Cuda => {
            let driver = args.driver.unwrap_or(DriverKind::DeviceThread);
            let config = gpuworld::CudaConfig::default().with_cache_dir(
                settings
                    .cuda_cache
                    .value
                    .clone()
                    .or(gpuworld::CudaConfig::default().cache_dir),
            );
            let backend = gpuworld::CudaBackend::new(config)?;
            let runtime = RuntimeConfig::default().with_max_tasks(gpuworld::CUDA_MAX_TASKS);
            run_on(backend, runtime, driver, args, &settings)
        }
        BackendKind::Sim => {
            // The sim exists for stepping by hand; a device thread would only spin on latency.
            let driver = args.driver.unwrap_or(DriverKind::Manual);
            run_on(
                SimBackend::new(sim_config()),
                RuntimeConfig::default(),
                driver,
                args,
                &settings,
            )
        }
        // Reached only for a backend whose feature is off in this build.
        #[allow(unreachable_patterns)]
        missing => Err(CliError::BackendNotBuilt(missing)),
    }
}

fn run_on<B: Backend>(
    backend: B,
    runtime: RuntimeConfig,
    driver: DriverKind,
    args: &DemoArgs,
    settings: &Settings,
) -> Result<(), CliError> {
    let runtime = settings.runtime_config(&backend.properties(), runtime);
    let trace_path = trace_path(args, settings);
    let client = ComputeClient::new(backend, runtime, driver.into());
    client.set_kernel_stats(true);
    if trace_path.is_some() {
        client.start_trace();
    }
    let problem = HeatProblem {
        side: args.size,
        alpha: args.alpha,
    };
    let progress = progress_bar(args.ticks, args.quiet);
    let persistence = Persistence {
        every: args.checkpoint_every,
        path: args.checkpoint.clone(),
        resume: args.resume.clone(),
    };
    let result = problem.simulate_with(&client, args.ticks, &progress, &persistence);
    progress.finish_and_clear();
    let result = result?;
    if let Some(path) = &trace_path {
        client.sync()?;
        write_trace(&client.stop_trace()?, path)?;
    }
    let (ticks, stats, peak_memory) =
        client.with_runtime(|rt| (rt.tick_count(), rt.stats(), rt.peak_memory()));
    heatmap::write_png(&args.output, &result.field, args.size).map_err(|source| {
        CliError::Image {
            path: args.output.clone(),
            source,
        }
    })?;
    let summary = RunSummary {
        size: args.size,
        backend: B::NAME,
        device: client.properties().name.clone(),
        steps: args.ticks,
        driver: driver.name(),
        ticks,
        launches: stats.launches,
        bytes_written: stats.bytes_written,
        bytes_read: stats.bytes_read,
        peak_memory,
        elapsed: result.elapsed,
        field: FieldStats::of(&result.field),
        output: args.output.clone(),
    };
    let mut stdout = std::io::stdout().lock();
    write!(stdout, "{summary}")?;
    write!(stdout, "\n{}", KernelTable(client.kernel_stats()))?;
    if let Some(path) = &trace_path {
        writeln!(stdout, "trace: {}", path.display())?;
    }
    Ok(())
}

/// Where the run's trace goes: `--trace`, else the configuration's `trace.output`, else none.
fn trace_path(args: &DemoArgs, settings: &Settings) -> Option<PathBuf> {
    args.trace.clone().or(settings.trace_output.value.clone())
}
