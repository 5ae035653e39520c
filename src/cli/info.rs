//! `gpuworld info`: which backends this binary was built with and the device each one drives,
//! so a user can tell what `--backend` will accept before running a job.

use super::CliError;
use super::backends::{BackendKind, describe_device, sim_config};
use gpuworld::{Backend, SimBackend};
use std::io::Write;

/// Prints one line per backend to stdout.
pub fn run() -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    for backend in BackendKind::ALL {
        writeln!(out, "{}: {}", backend.name(), device_line(backend))?;
    }
    Ok(())
}

fn device_line(backend: BackendKind) -> String {
    match backend {
        #[cfg(feature = "cpu")]
        BackendKind::Cpu => describe_device(&gpuworld::CpuBackend::new().properties()),
        BackendKind::Sim => describe_device(&SimBackend::new(sim_config()).properties()),
        missing => format!(
            "not built into this binary (enable feature `{}`)",
            missing.feature()
        ),
    }
}
