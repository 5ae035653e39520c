//! Device errors as values. wgpu reports validation and out-of-memory errors through the
//! uncaptured-error handler (synchronously, inside the call that caused them) and device loss
//! through a callback; both land here, and the backend moves them onto the stream whose call
//! raised them, to be reported by that stream's next read or sync.

use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The backend's name (`Backend::NAME`), for errors raised below the backend.
pub(crate) const NAME: &str = "wgpu";

/// Errors raised by the device since they were last taken, and whether it was lost.
pub(crate) struct DeviceErrors {
    raised: Arc<Mutex<Vec<wgpu::Error>>>,
    any_raised: Arc<AtomicBool>,
    lost: Arc<Mutex<Option<String>>>,
    any_lost: Arc<AtomicBool>,
}

impl DeviceErrors {
    /// Installs the handlers on `device`; wgpu's default handler would panic instead.
    pub fn install(device: &wgpu::Device) -> DeviceErrors {
        let errors = DeviceErrors {
            raised: Arc::default(),
            any_raised: Arc::default(),
            lost: Arc::default(),
            any_lost: Arc::default(),
        };
        let (raised, any_raised) = (errors.raised.clone(), errors.any_raised.clone());
        device.on_uncaptured_error(Arc::new(move |error: wgpu::Error| {
            raised.lock().push(error);
            any_raised.store(true, Ordering::Release);
        }));
        let (lost, any_lost) = (errors.lost.clone(), errors.any_lost.clone());
        device.set_device_lost_callback(move |reason, message| {
            lost.lock()
                .get_or_insert_with(|| format!("device lost ({reason:?}): {message}"));
            any_lost.store(true, Ordering::Release);
        });
        errors
    }

    /// The errors raised since the last call; cheap when there are none.
    pub fn take(&self) -> Vec<wgpu::Error> {
        if !self.any_raised.swap(false, Ordering::AcqRel) {
            return Vec::new();
        }
        std::mem::take(&mut *self.raised.lock())
    }

    /// Why the device was lost, once it was.
    pub fn lost(&self) -> Option<String> {
        if !self.any_lost.load(Ordering::Acquire) {
            return None;
        }
        self.lost.lock().clone()
    }
}

/// One line for a wgpu error, as a stream fault shows it.
pub(crate) fn describe(error: &wgpu::Error) -> String {
    match error {
        wgpu::Error::OutOfMemory { .. } => "device out of memory".to_string(),
        wgpu::Error::Validation { description, .. } => format!("validation error: {description}"),
        wgpu::Error::Internal { description, .. } => format!("internal error: {description}"),
    }
}
