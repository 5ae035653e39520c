//! A wait for the device that runs without the backend (`Backend::progress_watch`).

use crate::device::DevicePolls;
use gpuworld_hal::backend::ProgressWatch;

/// A wait for the GPU without the backend: wgpu's device may be polled from any thread, and the
/// callbacks it runs (completions, mapped readbacks) write only to state shared with the backend.
pub(crate) struct WgpuWatch {
    pub(crate) device: wgpu::Device,
    /// The backend's poll lock, held while waiting.
    pub(crate) polls: DevicePolls,
}

impl ProgressWatch for WgpuWatch {
    fn wait(&mut self, timeout: std::time::Duration, interrupt: Option<&dyn Fn() -> bool>) {
        if interrupt.is_some_and(|interrupted| interrupted()) {
            return;
        }
        // A timeout is the wait's end; a lost device shows in the backend's next poll, which
        // the caller's next tick runs, as a fault on every stream.
        let _polling = self.polls.0.lock();
        if let Err(error) = self.device.poll(wgpu::PollType::Wait {
            submission_index: None,
            timeout: Some(timeout),
        }) && !matches!(error, wgpu::PollError::Timeout)
        {
            tracing::warn!(target: "gpuworld::wgpu", %error, "waiting for the device failed");
        }
    }
}
