//! Opening a client: `ComputeClient::open` is the one entry point of every backend, built in or
//! in a crate of its own ([`OpenBackend`]). The configuration file and environment apply here,
//! alike for every backend that reads them: the backend takes its own section
//! ([`Settings::backend_settings`]), the runtime the scheduler and memory settings over the
//! backend's defaults.

use super::{ComputeClient, Driver};
use crate::config::Settings;
use gpuworld_systems::error::DeviceError;
use gpuworld_systems::open::{BackendSettings, DeviceId, OpenBackend};
use gpuworld_systems::{Error, Result, RuntimeConfig};

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
