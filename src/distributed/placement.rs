//! Where a process group's collectives run: not decided yet, through host memory over TCP, or
//! on the devices (`on_device.rs`), with what running them there takes.

use super::watchdog::Watchdog;
use gpuworld_systems::cross_device::DeviceCollectives;
use std::collections::HashSet;
use std::sync::Arc;

/// Where this group's collectives run.
#[derive(Default)]
pub(super) enum OnDevice {
    /// Not decided: the first collective with a client decides.
    #[default]
    Undecided,
    /// Through host memory over the TCP connections.
    Host,
    /// On the devices of `backend`, this rank's on `device`.
    Device(DeviceGroup),
}

impl OnDevice {
    /// The backend whose devices run the collectives, if decided so.
    pub(super) fn backend(&self) -> Option<&'static str> {
        match self {
            OnDevice::Device(group) => Some(group.backend),
            _ => None,
        }
    }
}

impl std::fmt::Debug for OnDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OnDevice::Undecided => f.write_str("Undecided"),
            OnDevice::Host => f.write_str("Host"),
            OnDevice::Device(group) => write!(f, "Device({} {})", group.backend, group.device),
        }
    }
}

/// This rank's part of a group on the devices.
pub(super) struct DeviceGroup {
    /// The backend whose devices run the collectives.
    pub(super) backend: &'static str,
    /// This rank's device.
    pub(super) device: u32,
    /// The backend's collectives across the group's devices.
    pub(super) collectives: Arc<dyn DeviceCollectives>,
    /// Shapes of calls already checked across ranks.
    pub(super) checked: HashSet<Vec<u8>>,
    /// Ends the collectives once a rank leaves (kept for its drop).
    pub(super) _watchdog: Watchdog,
}
