//! Devices: every device of every backend built in (`devices()`), each named by a [`DeviceId`];
//! a client of any of them opens through `ComputeClient::open_device`. A client knows its device
//! (`ComputeClient::device_id`), which is how groups of clients refuse a device listed twice.

use crate::{ComputeClient, Driver, RuntimeConfig, SimBackend, SimConfig};
use gpuworld_systems::error::CollectiveError;
use gpuworld_systems::open::{DeviceId, DeviceInfo, OpenBackend};
use gpuworld_systems::{Error, Result};

/// Every device of every backend built into this binary, in backend order (cpu, sim, wgpu,
/// cuda) and index order, as each backend's [`OpenBackend::enumerate`] finds them: the host CPU
/// and the sim as one device each (more are a matter of [`crate::CpuBackend::with_devices`] and
/// [`SimBackend::with_devices`]), each wgpu adapter, each CUDA ordinal. A backend of another
/// crate lists its own devices the same way: `B::enumerate()`.
pub fn devices() -> Vec<DeviceInfo> {
    // The backends this binary was built with: the one place that names them.
    let backends: &[fn() -> Vec<DeviceInfo>] = &[
        #[cfg(feature = "cpu")]
        gpuworld_cpu::CpuBackend::enumerate,
        SimBackend::enumerate,
        #[cfg(feature = "wgpu")]
        gpuworld_wgpu::WgpuBackend::enumerate,
        #[cfg(feature = "cuda")]
        gpuworld_cuda::CudaBackend::enumerate,
    ];
    backends.iter().flat_map(|enumerate| enumerate()).collect()
}

/// Checks that `ids` name each device once: a group listing one twice is
/// `CollectiveError::DeviceListedTwice`.
pub(crate) fn check_distinct(ids: &[DeviceId]) -> Result<()> {
    for (i, id) in ids.iter().enumerate() {
        if ids[..i].contains(id) {
            return Err(Error::Collective(CollectiveError::DeviceListedTwice {
                device: id.to_string().into(),
            }));
        }
    }
    Ok(())
}

/// Clients of `n` new runtimes, one on each of `n` cpu devices
/// ([`crate::CpuBackend::with_devices`]).
#[cfg(feature = "cpu")]
pub fn cpu_clients(n: usize, driver: Driver) -> Vec<ComputeClient<gpuworld_cpu::CpuBackend>> {
    gpuworld_cpu::CpuBackend::with_devices(n)
        .into_iter()
        .map(|backend| ComputeClient::new(backend, RuntimeConfig::default(), driver))
        .collect()
}

/// Clients of `n` new runtimes, one on each of `n` sim devices with `config`, ticked by hand.
pub fn sim_clients(config: &SimConfig, n: usize) -> Vec<ComputeClient<SimBackend>> {
    SimBackend::with_devices(config, n)
        .into_iter()
        .map(|backend| ComputeClient::new(backend, RuntimeConfig::default(), Driver::Manual))
        .collect()
}
