//! A backend on a device the renderer already has: the checks that the device can run
//! gpuworld's kernels, and the typed error naming what it lacks. gpuworld submits on the queue
//! it is given, so its work and the renderer's run in the order they are submitted.

use gpuworld_hal::error::{DeviceError, Error};

/// The least a device must offer for gpuworld's kernels: wgpu's downlevel defaults (what
/// WebGPU-class hardware guarantees) for every limit a compute dispatch or binding reads.
pub fn required_limits() -> wgpu::Limits {
    let floor = wgpu::Limits::downlevel_defaults();
    // Only the limits the backend reads; a renderer's device may lower every other one.
    wgpu::Limits {
        max_bind_groups: 1,
        max_storage_buffers_per_shader_stage: floor.max_storage_buffers_per_shader_stage,
        max_uniform_buffers_per_shader_stage: 1,
        max_storage_buffer_binding_size: floor.max_storage_buffer_binding_size,
        max_compute_invocations_per_workgroup: floor.max_compute_invocations_per_workgroup,
        max_compute_workgroup_size_x: floor.max_compute_workgroup_size_x,
        max_compute_workgroups_per_dimension: floor.max_compute_workgroups_per_dimension,
        ..wgpu::Limits::downlevel_webgl2_defaults()
    }
}

/// One limit of a renderer's device below what the backend needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitShortfall {
    /// The limit's field name in `wgpu::Limits`.
    pub name: &'static str,
    /// What the backend needs.
    pub needed: u64,
    /// What the device has.
    pub has: u64,
}

/// Why a backend cannot run on a device it was handed ([`crate::WgpuBackend::on_device`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SharedDeviceError {
    /// The adapter runs no compute shaders (a downlevel GL or WebGL2 adapter).
    NoComputeShaders {
        /// The adapter's name.
        adapter: String,
    },
    /// The device was requested with limits below what the backend needs.
    LimitsTooLow {
        /// The adapter's name.
        adapter: String,
        /// Each limit short, with what is needed and what the device has.
        limits: Vec<LimitShortfall>,
    },
}

impl std::fmt::Display for SharedDeviceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SharedDeviceError::NoComputeShaders { adapter } => write!(
                f,
                "adapter {adapter} runs no compute shaders (DownlevelFlags::COMPUTE_SHADERS)"
            ),
            SharedDeviceError::LimitsTooLow { adapter, limits } => {
                write!(
                    f,
                    "the device on {adapter} was requested with limits too low for gpuworld:"
                )?;
                for l in limits {
                    write!(f, " {} is {}, needs at least {};", l.name, l.has, l.needed)?;
                }
                write!(
                    f,
                    " request the device with `gpuworld::wgpu_required_limits()` or higher"
                )
            }
        }
    }
}

impl std::error::Error for SharedDeviceError {}

impl From<SharedDeviceError> for Error {
    /// `DeviceError::BackendUnavailable`, its reason the shared device's error.
    fn from(error: SharedDeviceError) -> Error {
        Error::Device(DeviceError::BackendUnavailable {
            backend: "wgpu",
            reason: error.to_string().into(),
        })
    }
}

/// Checks that `device`, opened on `adapter`, can run the backend.
pub(crate) fn check(
    adapter: &wgpu::Adapter,
    device: &wgpu::Device,
) -> Result<(), SharedDeviceError> {
    let name = adapter.get_info().name;
    let flags = adapter.get_downlevel_capabilities().flags;
    if !flags.contains(wgpu::DownlevelFlags::COMPUTE_SHADERS) {
        return Err(SharedDeviceError::NoComputeShaders { adapter: name });
    }
    let mut limits = Vec::new();
    required_limits().check_limits_with_fail_fn(&device.limits(), false, |name, needed, has| {
        limits.push(LimitShortfall { name, needed, has });
    });
    if limits.is_empty() {
        Ok(())
    } else {
        Err(SharedDeviceError::LimitsTooLow {
            adapter: name,
            limits,
        })
    }
}
