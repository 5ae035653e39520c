//! `gpuworld info`: which backends this binary was built with and the device each one drives,
//! so a user can tell what `--backend` will accept before running a job; for wgpu, every
//! adapter with the index `--adapter` takes; then every device `gpuworld::devices()` finds, by
//! the id a multi-device program names it with.

use super::CliError;
use super::backends::{BackendKind, describe_device, sim_config};
use gpuworld::{Backend, SimBackend};
use std::io::Write;

/// Prints one line per backend to stdout.
pub fn run() -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    for backend in BackendKind::ALL {
        writeln!(out, "{}: {}", backend.name(), device_line(backend))?;
        #[cfg(feature = "wgpu")]
        if backend == BackendKind::Wgpu {
            let backends = gpuworld::WgpuConfig::default().backends;
            for adapter in gpuworld::wgpu_adapters(backends) {
                writeln!(out, "  adapter {adapter}")?;
            }
        }
    }
    writeln!(out, "devices:")?;
    for device in gpuworld::devices() {
        let line = match &device.properties {
            Ok(properties) => describe_device(properties),
            Err(error) => format!("cannot be opened: {error}"),
        };
        if device.detail.is_empty() {
            writeln!(out, "  {}: {line}", device.id)?;
        } else {
            writeln!(out, "  {}: {line} ({})", device.id, device.detail)?;
        }
    }
    Ok(())
}

fn device_line(backend: BackendKind) -> String {
    match backend {
        #[cfg(feature = "cpu")]
        BackendKind::Cpu => describe_device(&gpuworld::CpuBackend::new().properties()),
        BackendKind::Sim => describe_device(&SimBackend::new(sim_config()).properties()),
        #[cfg(feature = "wgpu")]
        BackendKind::Wgpu => match gpuworld::WgpuBackend::new(gpuworld::WgpuConfig::default()) {
            Ok(backend) => {
                let limits = backend.limits();
                format!(
                    "{} (default adapter), max buffer {}, max storage binding {}, \
                     storage offset alignment {}B, timestamps {}",
                    describe_device(&backend.properties()),
                    crate::cli::summary::format_bytes(limits.max_buffer_size),
                    crate::cli::summary::format_bytes(limits.max_storage_buffer_binding_size),
                    limits.min_storage_buffer_offset_alignment,
                    if backend
                        .features()
                        .contains(gpuworld::wgpu::Features::TIMESTAMP_QUERY)
                    {
                        "yes"
                    } else {
                        "no"
                    }
                )
            }
            Err(error) => format!("no device: {error}"),
        },
        #[cfg(feature = "cuda")]
        BackendKind::Cuda => match gpuworld::CudaBackend::new(gpuworld::CudaConfig::default()) {
            Ok(backend) => {
                let (major, minor) = backend.compute_capability();
                format!(
                    "{}, compute capability {major}.{minor}, {} multiprocessors",
                    describe_device(&backend.properties()),
                    backend.multiprocessors()
                )
            }
            Err(error) => format!("no device: {error}"),
        },
        // Reached only for a backend whose feature is off in this build.
        #[allow(unreachable_patterns)]
        missing => format!(
            "not built into this binary (enable feature `{}`)",
            missing.feature()
        ),
    }
}
