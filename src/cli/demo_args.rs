//! `gpuworld demo`'s arguments, and what its three runs (one device, several devices, several
//! processes) share: the progress bar and the trace writer.

use super::CliError;
use super::backends::{BackendKind, DeviceTypeArg};
use clap::{Args, ValueEnum};
use gpuworld::Driver;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;

const DEFAULT_BACKEND: BackendKind = BackendKind::Cpu;
const DEFAULT_SIZE: u32 = 512;
const MIN_SIZE: u32 = 3;
const MAX_SIZE: u32 = 16384;
const DEFAULT_TICKS: u64 = 500;
const DEFAULT_ALPHA: f32 = 0.2;
const MAX_ALPHA: f32 = 0.25;
const DEFAULT_OUTPUT: &str = "heat.png";

/// Arguments of `gpuworld demo`.
#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Backend to run on
    #[arg(long, value_enum, default_value_t = DEFAULT_BACKEND)]
    pub backend: BackendKind,
    /// Grid side in cells (3 to 16384)
    #[arg(long, value_name = "N", default_value_t = DEFAULT_SIZE,
          value_parser = clap::value_parser!(u32).range(i64::from(MIN_SIZE)..=i64::from(MAX_SIZE)))]
    pub size: u32,
    /// Number of simulation steps, one kernel launch each
    #[arg(long, value_name = "N", default_value_t = DEFAULT_TICKS)]
    pub ticks: u64,
    /// Diffusion coefficient, in (0, 0.25] for a stable explicit step
    #[arg(long, default_value_t = DEFAULT_ALPHA, value_parser = parse_alpha)]
    pub alpha: f32,
    /// Where to write the final field as a PNG
    #[arg(long, value_name = "PATH", default_value = DEFAULT_OUTPUT)]
    pub output: PathBuf,
    /// Who advances the runtime [default: device-thread for cpu, wgpu and cuda, manual for sim]
    #[arg(long, value_enum)]
    pub driver: Option<DriverKind>,
    /// wgpu adapter to run on, by its index in `gpuworld info`
    #[arg(long, value_name = "INDEX", conflicts_with = "device_type")]
    pub adapter: Option<usize>,
    /// wgpu adapter to run on, the first of this type
    #[arg(long, value_enum)]
    pub device_type: Option<DeviceTypeArg>,
    /// Hide the progress bar
    #[arg(long)]
    pub quiet: bool,
    /// Write a Chrome trace of the run (opens in Perfetto) [default: `trace.output` of the
    /// configuration]; split over devices, one per device (`FILE` with `-0`, `-1`, ... before
    /// its extension)
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Devices to split the field over (cpu, sim or cuda); above 1, the result is checked
    /// against the one-device run bit for bit
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=64))]
    pub devices: u32,
    /// Run as one rank of a process group (under `gpuworld launch`, torchrun, mpirun or
    /// Slurm): the field split across the ranks, halos exchanged through the group (NCCL on
    /// cuda), checked on rank 0 against its one-device run bit for bit
    #[arg(long, conflicts_with = "devices")]
    pub distributed: bool,
    /// Capture a pair of steps of the split run (launches and halo transfers on every device)
    /// once as one graph (`Graph::capture_group`) and replay it, instead of issuing every step
    #[arg(long, conflicts_with = "distributed")]
    pub graph: bool,
    /// cuda: put every device's runtime on GPU 0 (the split's runtime overhead, measured on a
    /// machine with one GPU)
    #[arg(long, conflicts_with = "distributed")]
    pub same_gpu: bool,
    /// Save the field every N steps to `--checkpoint` (crash-safe: the previous file stays
    /// whole until the new one is)
    #[arg(long, value_name = "N", requires = "checkpoint",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub checkpoint_every: Option<u64>,
    /// Where to save the field (after the last step, or every `--checkpoint-every` steps)
    #[arg(long, value_name = "PATH", conflicts_with_all = ["devices", "distributed", "graph"])]
    pub checkpoint: Option<PathBuf>,
    /// Continue from a checkpoint of this demo (same size and alpha) up to `--ticks` steps in all
    #[arg(long, value_name = "PATH", conflicts_with_all = ["devices", "distributed", "graph"])]
    pub resume: Option<PathBuf>,
}

impl Default for DemoArgs {
    fn default() -> Self {
        DemoArgs {
            backend: DEFAULT_BACKEND,
            size: DEFAULT_SIZE,
            ticks: DEFAULT_TICKS,
            alpha: DEFAULT_ALPHA,
            output: PathBuf::from(DEFAULT_OUTPUT),
            driver: None,
            adapter: None,
            device_type: None,
            quiet: false,
            trace: None,
            devices: 1,
            distributed: false,
            graph: false,
            same_gpu: false,
            checkpoint_every: None,
            checkpoint: None,
            resume: None,
        }
    }
}

/// Who advances the runtime, as named on the command line.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DriverKind {
    /// This thread ticks the runtime once per step
    Manual,
    /// A device thread ticks whenever work is queued; steps only enqueue
    DeviceThread,
}

impl DriverKind {
    pub(super) fn name(self) -> &'static str {
        match self {
            DriverKind::Manual => "manual",
            DriverKind::DeviceThread => "device-thread",
        }
    }
}

impl From<DriverKind> for Driver {
    fn from(kind: DriverKind) -> Driver {
        match kind {
            DriverKind::Manual => Driver::Manual,
            DriverKind::DeviceThread => Driver::DeviceThread,
        }
    }
}

fn parse_alpha(text: &str) -> Result<f32, String> {
    let alpha = text
        .parse::<f32>()
        .ok()
        .filter(|alpha| !alpha.is_nan())
        .ok_or_else(|| format!("`{text}` is not a number"))?;
    if alpha <= 0.0 {
        Err(format!(
            "{alpha} must be in (0, {MAX_ALPHA}]: without diffusion nothing happens"
        ))
    } else if alpha > MAX_ALPHA {
        Err(format!(
            "{alpha} must be in (0, {MAX_ALPHA}]: larger values make the explicit step unstable"
        ))
    } else {
        Ok(alpha)
    }
}

/// The progress bar of a run of `steps` steps; hidden when `quiet`.
pub(super) fn progress_bar(steps: u64, quiet: bool) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    // The template is fixed text, so a parse failure is a bug here; a plain bar still works.
    let style = ProgressStyle::with_template(
        "{spinner} heat diffusion [{wide_bar}] {pos}/{len} steps, eta {eta} {msg}",
    )
    .map(|style| style.progress_chars("=> "))
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    ProgressBar::new(steps).with_style(style)
}

/// Writes `trace` to `path` as Chrome JSON.
pub(super) fn write_trace(trace: &gpuworld::Trace, path: &std::path::Path) -> Result<(), CliError> {
    trace.write(path).map_err(|source| CliError::Trace {
        path: path.to_path_buf(),
        source,
    })
}
