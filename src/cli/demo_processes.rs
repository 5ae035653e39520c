//! `gpuworld demo --distributed`: the heat demo split across the processes of a process group
//! (`gpuworld launch`, torchrun, mpirun or Slurm), one slab per rank, the halos exchanged every
//! step through the group (NCCL on CUDA, TCP elsewhere). Rank 0 gathers the field, checks it
//! against a one-device run of its own bit for bit, and tells every rank the verdict, so every
//! rank exits with the same status.

use super::CliError;
use super::backends::{BackendKind, sim_config};
use super::demo_args::{DemoArgs, DriverKind, progress_bar};
use super::field_stats::FieldStats;
use super::heat::HeatProblem;
use super::heatmap;
use super::summary::RunSummary;
use gpuworld::distributed::ProcessGroup;
use gpuworld::{Backend, ComputeClient, RuntimeConfig, SimBackend, library};
use indicatif::ProgressBar;
use std::io::Write;

/// Runs this process's rank of the demo of `args`.
pub fn run(args: &DemoArgs) -> Result<(), CliError> {
    let mut group = ProcessGroup::from_env()?;
    match args.backend {
        #[cfg(feature = "cpu")]
        BackendKind::Cpu => {
            let driver = args.driver.unwrap_or(DriverKind::DeviceThread);
            let backend = gpuworld::CpuBackend::new();
            run_on(backend, RuntimeConfig::default(), driver, args, &mut group)
        }
        BackendKind::Sim => {
            let driver = args.driver.unwrap_or(DriverKind::Manual);
            let backend = SimBackend::new(sim_config());
            run_on(backend, RuntimeConfig::default(), driver, args, &mut group)
        }
        #[cfg(feature = "cuda")]
        BackendKind::Cuda => {
            let driver = args.driver.unwrap_or(DriverKind::DeviceThread);
            // One GPU per process of a host, as torchrun's LOCAL_RANK says.
            let device = group.local_rank();
            let backend =
                gpuworld::CudaBackend::new(gpuworld::CudaConfig::default().with_device(device))?;
            let runtime = RuntimeConfig::default().with_max_tasks(gpuworld::CUDA_MAX_TASKS);
            run_on(backend, runtime, driver, args, &mut group)
        }
        other => Err(CliError::NoMultiDevice(other)),
    }
}

fn run_on<B: Backend>(
    backend: B,
    runtime: RuntimeConfig,
    driver: DriverKind,
    args: &DemoArgs,
    group: &mut ProcessGroup,
) -> Result<(), CliError> {
    let client = ComputeClient::new(backend, runtime, driver.into());
    let problem = HeatProblem {
        side: args.size,
        alpha: args.alpha,
    };
    client.warm_up(&library::STENCIL)?;
    let quiet = args.quiet || group.rank() != 0;
    let progress = progress_bar(args.ticks, quiet);
    let result = problem.simulate_across_processes(&client, group, args.ticks, &progress);
    progress.finish_and_clear();
    let result = result?;
    // Every rank's rows to rank 0, in rank order.
    let mine: &[u8] = bytemuck::cast_slice(&result.owned);
    if group.rank() != 0 {
        group.send_bytes(mine, 0)?;
        let verdict = group.broadcast_bytes(&[0; 8], 0)?;
        let differing =
            <[u8; 8]>::try_from(verdict.as_slice()).map_or(u64::MAX, u64::from_le_bytes);
        if differing > 0 {
            return Err(CliError::DevicesDiffer {
                devices: group.world_size(),
                differing: differing as usize,
            });
        }
        return Ok(());
    }
    let mut field: Vec<f32> = result.owned.clone();
    for rank in 1..group.world_size() {
        let rows = group.recv_bytes(rank)?;
        field.extend(
            rows.chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        );
    }
    let one_device = if field.len() == problem.cells() {
        Some(problem.simulate(&client, args.ticks, &ProgressBar::hidden())?)
    } else {
        None
    };
    let differing = match &one_device {
        Some(one) => field
            .iter()
            .zip(&one.field)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count(),
        None => problem.cells(),
    };
    group.broadcast_bytes(&(differing as u64).to_le_bytes(), 0)?;
    let Some(one_device) = one_device else {
        return Err(CliError::FieldSize {
            expected: problem.cells(),
            got: field.len(),
        });
    };
    if differing > 0 {
        return Err(CliError::DevicesDiffer {
            devices: group.world_size(),
            differing,
        });
    }
    heatmap::write_png(&args.output, &field, args.size).map_err(|source| CliError::Image {
        path: args.output.clone(),
        source,
    })?;
    let (ticks, stats, peak_memory) =
        client.with_runtime(|rt| (rt.tick_count(), rt.stats(), rt.peak_memory()));
    let summary = RunSummary {
        size: args.size,
        backend: B::NAME,
        device: format!(
            "{} processes (rank 0 on {})",
            group.world_size(),
            client.device_id()
        ),
        steps: args.ticks,
        driver: driver.name(),
        ticks,
        launches: stats.launches,
        bytes_written: stats.bytes_written,
        bytes_read: stats.bytes_read,
        peak_memory,
        elapsed: result.elapsed,
        field: FieldStats::of(&field),
        output: args.output.clone(),
    };
    let per_step =
        |elapsed: std::time::Duration| elapsed.as_secs_f64() * 1e3 / args.ticks.max(1) as f64;
    let mut out = std::io::stdout().lock();
    write!(out, "{summary}")?;
    writeln!(
        out,
        "  one device       equal bit for bit (checked against a run on {}: {:.3} ms/step there, {:.3} ms/step across {} processes, steps alone; rows of rank 0: {}..{}; halos over {})",
        client.device_id(),
        per_step(one_device.steps_elapsed),
        per_step(result.steps_elapsed),
        group.world_size(),
        result.rows.0,
        result.rows.1,
        match group.collectives_device() {
            Some(backend) => format!("the {backend} devices' collectives"),
            None => "TCP".into(),
        }
    )?;
    Ok(())
}
