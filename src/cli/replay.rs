//! `gpuworld replay FILE [--backend ...]`: replays a recording (`gpuworld::testing::Recorder`)
//! tick for tick on a backend, prints what each read and sync returned, and on a backend other
//! than the sim also replays it on the sim and says whether the results agree.

use super::CliError;
use super::backends::{BackendKind, sim_config};
use gpuworld::testing::{Recording, ReplayReport, Replayer};
use gpuworld::{Backend, ComputeClient, Driver, RuntimeConfig, SimBackend};
use std::io::Write;
use std::path::PathBuf;

/// Arguments of `replay`.
#[derive(clap::Args, Debug)]
pub struct ReplayArgs {
    /// The recording (JSON, as `Recording::save` writes it)
    pub file: PathBuf,
    /// The backend to replay on
    #[arg(long, value_enum, default_value = "sim")]
    pub backend: BackendKind,
}

/// Replays the recording and prints the report.
pub fn run(args: &ReplayArgs) -> Result<(), CliError> {
    let recording = Recording::load(&args.file)?;
    let replayer = Replayer::new(recording);
    let report = match args.backend {
        BackendKind::Sim => on(SimBackend::new(sim_config()), &replayer)?,
        #[cfg(feature = "cpu")]
        BackendKind::Cpu => on(gpuworld::CpuBackend::new(), &replayer)?,
        #[cfg(feature = "wgpu")]
        BackendKind::Wgpu => on(
            gpuworld::WgpuBackend::new(gpuworld::WgpuConfig::default())?,
            &replayer,
        )?,
        #[cfg(feature = "cuda")]
        BackendKind::Cuda => on(
            gpuworld::CudaBackend::new(gpuworld::CudaConfig::default())?,
            &replayer,
        )?,
        #[allow(unreachable_patterns)]
        other => return Err(CliError::BackendNotBuilt(other)),
    };
    let mut out = std::io::stdout().lock();
    let recorded = replayer.recording();
    writeln!(
        out,
        "replayed {} (recorded on {}, {} ticks, {} commands) on {}: {} ticks",
        args.file.display(),
        recorded.backend,
        recorded.ticks,
        report.commands,
        args.backend.name(),
        report.ticks
    )?;
    for (index, read) in report.reads.iter().enumerate() {
        let result = match &read.result {
            Ok(buffers) => buffers
                .iter()
                .map(|bytes| format!("{}B fnv1a {:016x}", bytes.len(), fnv1a(bytes)))
                .collect::<Vec<_>>()
                .join(", "),
            Err(error) => format!("error: {error}"),
        };
        writeln!(
            out,
            "  read {} (tick {}, s{}): {result}",
            index + 1,
            read.tick,
            read.stream
        )?;
    }
    for (index, (stream, result)) in report.syncs.iter().enumerate() {
        let result = match result {
            Ok(()) => "ok".to_string(),
            Err(error) => format!("error: {error}"),
        };
        writeln!(out, "  sync {} (s{stream}): {result}", index + 1)?;
    }
    if args.backend != BackendKind::Sim {
        let on_sim = on(SimBackend::new(sim_config()), &replayer)?;
        let same = report.same_results(&on_sim);
        writeln!(
            out,
            "results {} the sim's replay",
            if same { "match" } else { "differ from" }
        )?;
        if !same {
            return Err(CliError::ReplayDiffers(args.backend));
        }
    }
    Ok(())
}

/// Replays on a manually ticked runtime over `backend`, so ticks follow the recording's.
fn on<B: Backend>(backend: B, replayer: &Replayer) -> Result<ReplayReport, CliError> {
    let client = ComputeClient::new(backend, RuntimeConfig::default(), Driver::Manual);
    Ok(replayer.replay(&client, |_| {})?)
}

/// A short, stable digest of read bytes (FNV-1a, 64 bits), to compare replays by eye.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}
