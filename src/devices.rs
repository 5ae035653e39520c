//! Devices: every device of every backend built in (`devices()`), each named by a [`DeviceId`],
//! and a client for any of them (`device_client`). A client knows its device
//! (`ComputeClient::device_id`), which is how groups of clients refuse a device listed twice.

use crate::{ComputeClient, Driver, RuntimeConfig, SimBackend, SimConfig};
use gpuworld_systems::{Backend, DeviceProperties, Error, Result};
use std::fmt;

/// A device: its backend's name and its index among that backend's devices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceId {
    /// The backend (`"cpu"`, `"sim"`, `"wgpu"`, `"cuda"`).
    pub backend: &'static str,
    /// The device's index: a cpu or sim device's number, a wgpu adapter's index in
    /// `wgpu_adapters`, a CUDA ordinal.
    pub index: u32,
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.backend, self.index)
    }
}

/// A device found by [`devices`].
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    /// Which device.
    pub id: DeviceId,
    /// What it offers, or why it could not be opened to ask.
    pub properties: Result<DeviceProperties>,
    /// Backend-specific facts in one line (adapter type and driver, compute capability).
    pub detail: String,
}

/// Every device of every backend built into this binary, in backend order (cpu, sim, wgpu,
/// cuda) and index order: the host CPU and the sim as one device each (more are a matter of
/// [`crate::CpuBackend::with_devices`]/[`SimBackend::with_devices`]), each wgpu adapter, each
/// CUDA ordinal. Opens each GPU device to read its properties; a backend with no device adds
/// nothing.
#[allow(
    clippy::vec_init_then_push,
    reason = "which pushes run depends on the features"
)]
pub fn devices() -> Vec<DeviceInfo> {
    let mut found = Vec::new();
    #[cfg(feature = "cpu")]
    found.push(DeviceInfo {
        id: DeviceId {
            backend: "cpu",
            index: 0,
        },
        properties: Ok(gpuworld_cpu::CpuBackend::new().properties()),
        detail: String::new(),
    });
    found.push(DeviceInfo {
        id: DeviceId {
            backend: "sim",
            index: 0,
        },
        properties: Ok(SimBackend::new(SimConfig::default()).properties()),
        detail: String::new(),
    });
    #[cfg(feature = "wgpu")]
    for adapter in gpuworld_wgpu::list_adapters(gpuworld_wgpu::WgpuConfig::default().backends) {
        let config = gpuworld_wgpu::WgpuConfig::default()
            .with_adapter(gpuworld_wgpu::AdapterSelection::Index(adapter.index));
        found.push(DeviceInfo {
            id: DeviceId {
                backend: "wgpu",
                index: adapter.index as u32,
            },
            properties: gpuworld_wgpu::WgpuBackend::new(config).map(|b| b.properties()),
            detail: format!(
                "{:?} on {:?}, {}",
                adapter.device_type, adapter.backend, adapter.driver
            ),
        });
    }
    #[cfg(feature = "cuda")]
    for ordinal in 0..gpuworld_cuda::device_count().unwrap_or(0) {
        let config = gpuworld_cuda::CudaConfig::default().with_device(ordinal);
        let backend = gpuworld_cuda::CudaBackend::new(config);
        let detail = backend.as_ref().map_or(String::new(), |b| {
            let (major, minor) = b.compute_capability();
            format!(
                "compute capability {major}.{minor}, {} multiprocessors",
                b.multiprocessors()
            )
        });
        found.push(DeviceInfo {
            id: DeviceId {
                backend: "cuda",
                index: ordinal as u32,
            },
            properties: backend.map(|b| b.properties()),
            detail,
        });
    }
    found
}

/// A client of any backend, as [`device_client`] opens it.
#[derive(Debug)]
pub enum DeviceClient {
    /// A cpu device.
    #[cfg(feature = "cpu")]
    Cpu(ComputeClient<gpuworld_cpu::CpuBackend>),
    /// A sim device.
    Sim(ComputeClient<SimBackend>),
    /// A wgpu adapter.
    #[cfg(feature = "wgpu")]
    Wgpu(ComputeClient<gpuworld_wgpu::WgpuBackend>),
    /// A CUDA device.
    #[cfg(feature = "cuda")]
    Cuda(ComputeClient<gpuworld_cuda::CudaBackend>),
}

impl DeviceClient {
    /// The device the client runs on.
    pub fn device_id(&self) -> DeviceId {
        match self {
            #[cfg(feature = "cpu")]
            DeviceClient::Cpu(client) => client.device_id(),
            DeviceClient::Sim(client) => client.device_id(),
            #[cfg(feature = "wgpu")]
            DeviceClient::Wgpu(client) => client.device_id(),
            #[cfg(feature = "cuda")]
            DeviceClient::Cuda(client) => client.device_id(),
        }
    }
}

/// A client of a new runtime on device `id`, configured as the backend's own constructor
/// ([`crate::cpu_client`], [`crate::sim_client`], [`crate::wgpu_client`],
/// [`crate::cuda_client`]) would; `Error::NoSuchDevice` for a backend not built in, and the
/// backend's error for a device it cannot open.
pub fn device_client(id: DeviceId) -> Result<DeviceClient> {
    match id.backend {
        #[cfg(feature = "cpu")]
        "cpu" => Ok(DeviceClient::Cpu(ComputeClient::new(
            gpuworld_cpu::CpuBackend::device(id.index),
            RuntimeConfig::default(),
            Driver::DeviceThread,
        ))),
        "sim" => Ok(DeviceClient::Sim(ComputeClient::new(
            SimBackend::device(SimConfig::default(), id.index),
            RuntimeConfig::default(),
            Driver::Manual,
        ))),
        #[cfg(feature = "wgpu")]
        "wgpu" => crate::wgpu_client(
            gpuworld_wgpu::WgpuConfig::default()
                .with_adapter(gpuworld_wgpu::AdapterSelection::Index(id.index as usize)),
        )
        .map(DeviceClient::Wgpu),
        #[cfg(feature = "cuda")]
        "cuda" => {
            crate::cuda_client(gpuworld_cuda::CudaConfig::default().with_device(id.index as usize))
                .map(DeviceClient::Cuda)
        }
        _ => Err(no_such_device(
            id,
            "that backend is not built into this binary",
        )),
    }
}

fn no_such_device(id: DeviceId, reason: &str) -> Error {
    Error::NoSuchDevice {
        device: id.to_string().into(),
        reason: reason.into(),
    }
}

/// Checks that `ids` name each device once: a group listing one twice is
/// `Error::DeviceListedTwice`.
pub(crate) fn check_distinct(ids: &[DeviceId]) -> Result<()> {
    for (i, id) in ids.iter().enumerate() {
        if ids[..i].contains(id) {
            return Err(Error::DeviceListedTwice {
                device: id.to_string().into(),
            });
        }
    }
    Ok(())
}

/// Clients of `n` new runtimes, one on each of `n` cpu devices ([`crate::CpuBackend::with_devices`]).
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
