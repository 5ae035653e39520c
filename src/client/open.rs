//! Opening a client: `ComputeClient::open` is the one entry point of every backend, built in or
//! in a crate of its own ([`OpenBackend`]). The configuration file and environment apply here,
//! alike for every backend that reads them: the backend takes its own section
//! ([`Settings::backend_settings`]), the runtime the scheduler and memory settings over the
//! backend's defaults. The constructors of each built-in backend's client (`cpu_client`, ...)
//! open through it.

use super::{ComputeClient, Driver};
use crate::config::Settings;
#[cfg(feature = "cpu")]
use gpuworld_cpu::{CpuBackend, CpuConfig};
#[cfg(feature = "cuda")]
use gpuworld_cuda::{CudaBackend, CudaConfig};
use gpuworld_sim::{SimBackend, SimConfig};
use gpuworld_systems::error::DeviceError;
use gpuworld_systems::open::{BackendSettings, DeviceId, OpenBackend};
use gpuworld_systems::{Error, Result, RuntimeConfig};
#[cfg(feature = "wgpu")]
use gpuworld_wgpu::{WgpuBackend, WgpuConfig, wgpu};

impl<B: OpenBackend> ComputeClient<B> {
    /// A client of a new runtime on the device `config` selects, advanced by `driver`, with the
    /// scheduler and memory settings of `gpuworld.toml` and `GPUWORLD_*` over the backend's
    /// defaults (unless the backend reads none: the sim). `ConfigError::InvalidSetting` when the
    /// configuration cannot be read; the backend's error (`DeviceError::NoSuchDevice`,
    /// `DeviceError::BackendUnavailable`, `ConfigError::InvalidSetting`) when it cannot open the
    /// device.
    pub fn open(config: B::Config, driver: Driver) -> Result<ComputeClient<B>> {
        let settings = if B::READS_SETTINGS {
            Some(Settings::load()?)
        } else {
            None
        };
        let backend_settings = settings
            .as_ref()
            .map_or_else(BackendSettings::default, |s| s.backend_settings(B::NAME));
        let backend = B::open(config, &backend_settings)?;
        let base = RuntimeConfig::for_backend::<B>();
        let runtime = match &settings {
            Some(settings) => settings.runtime_config(&backend.properties(), base),
            None => base,
        };
        Ok(ComputeClient::new(backend, runtime, driver))
    }

    /// Like [`ComputeClient::open`], on device `id` ([`crate::devices`]) with the backend's default
    /// configuration otherwise; `DeviceError::NoSuchDevice` when `id` names another backend.
    pub fn open_device(id: DeviceId, driver: Driver) -> Result<ComputeClient<B>> {
        if id.backend != B::NAME {
            return Err(Error::Device(DeviceError::NoSuchDevice {
                device: id.to_string().into(),
                reason: format!("it is not a {} device", B::NAME).into(),
            }));
        }
        ComputeClient::open(B::device_config(id.index), driver)
    }
}

/// A client of a new runtime on the CPU backend: [`ComputeClient::open`] with the default
/// [`CpuConfig`], so the scheduler and memory settings of `gpuworld.toml` and `GPUWORLD_*` apply,
/// the cpu device's memory limit included (see [`config`](crate::config)).
#[cfg(feature = "cpu")]
pub fn cpu_client(driver: Driver) -> Result<ComputeClient<CpuBackend>> {
    ComputeClient::open(CpuConfig::default(), driver)
}

/// A client of a new runtime on the wgpu device `config` selects, ticked by a device thread:
/// [`ComputeClient::open`] with `Driver::DeviceThread`.
#[cfg(feature = "wgpu")]
pub fn wgpu_client(config: WgpuConfig) -> Result<ComputeClient<WgpuBackend>> {
    ComputeClient::open(config, Driver::DeviceThread)
}

/// Like [`wgpu_client`], advanced by `driver`: [`ComputeClient::open`].
#[cfg(feature = "wgpu")]
pub fn wgpu_client_with(config: WgpuConfig, driver: Driver) -> Result<ComputeClient<WgpuBackend>> {
    ComputeClient::open(config, driver)
}

/// A client of a new runtime on a wgpu device the caller already opened (a renderer's),
/// advanced by `driver`: gpuworld submits on `queue`, so its work and the caller's run in
/// submission order (docs/render.md). The scheduler and memory settings of `gpuworld.toml` and
/// `GPUWORLD_*` apply as in [`ComputeClient::open`]. `DeviceError::BackendUnavailable` naming
/// each limit the device lacks ([`WgpuBackend::on_device`] gives the typed
/// [`SharedDeviceError`](gpuworld_wgpu::SharedDeviceError)); `ConfigError::InvalidSetting` when the configuration cannot be read.
#[cfg(feature = "wgpu")]
pub fn wgpu_client_on_device(
    adapter: &wgpu::Adapter,
    device: wgpu::Device,
    queue: wgpu::Queue,
    config: WgpuConfig,
    driver: Driver,
) -> Result<ComputeClient<WgpuBackend>> {
    let settings = Settings::load()?;
    let backend = WgpuBackend::on_device(adapter, device, queue, config)?;
    let runtime = settings.runtime_config(
        &gpuworld_systems::Backend::properties(&backend),
        RuntimeConfig::for_backend::<WgpuBackend>(),
    );
    Ok(ComputeClient::new(backend, runtime, driver))
}

/// A client of a new runtime on the CUDA device `config` names, ticked by a device thread:
/// [`ComputeClient::open`] with `Driver::DeviceThread`.
#[cfg(feature = "cuda")]
pub fn cuda_client(config: CudaConfig) -> Result<ComputeClient<CudaBackend>> {
    ComputeClient::open(config, Driver::DeviceThread)
}

/// Like [`cuda_client`], advanced by `driver`: [`ComputeClient::open`].
#[cfg(feature = "cuda")]
pub fn cuda_client_with(config: CudaConfig, driver: Driver) -> Result<ComputeClient<CudaBackend>> {
    ComputeClient::open(config, driver)
}

/// A client of a new runtime on the sim backend, ticked by hand: [`ComputeClient::open`] with
/// `Driver::Manual` (the sim reads no configuration file).
pub fn sim_client(config: SimConfig) -> Result<ComputeClient<SimBackend>> {
    ComputeClient::open(config, Driver::Manual)
}
