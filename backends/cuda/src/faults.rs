//! Faults on the cuda backend: a failed call faults its stream; a sticky device error poisons the
//! context, after which every stream faults and nothing waits on the dead device.

use crate::device::CudaBackend;
use crate::loader::{self, sys_error};
use cudarc::driver::sys;
use gpuworld_hal::backend::HostBytes;
use gpuworld_hal::error::Error;
use std::sync::Arc;

impl CudaBackend {
    pub(crate) fn fault(&mut self, s: usize, message: impl Into<Arc<str>>) {
        if let Some(stream) = self.streams.get_mut(s) {
            let error = Error::device_fault(stream.id, message);
            stream.fault.get_or_insert(error);
        }
    }

    pub(crate) fn fault_with(&mut self, s: usize, error: Error) {
        if let Some(stream) = self.streams.get_mut(s) {
            stream.fault.get_or_insert(error);
        }
    }

    /// Records a failed driver call made for stream `s`: a sticky error poisons the context.
    pub(crate) fn failed(&mut self, s: usize, what: &str, code: sys::CUresult) {
        let message = format!("{what}: {}", loader::describe(sys_error(code)));
        if loader::is_sticky(code) {
            self.poison(message);
        } else {
            tracing::warn!(target: "gpuworld::stream", stream = s, %message, "CUDA call failed");
            self.fault(s, message);
        }
    }

    /// The context is unusable: every stream faults, every event and read completes, and every
    /// later call faults its stream, so nothing waits on a dead device.
    pub(crate) fn poison(&mut self, message: String) {
        let message: Arc<str> = match &self.poisoned {
            Some(existing) => existing.clone(),
            None => {
                tracing::error!(target: "gpuworld::stream", %message, "the CUDA context is unusable");
                format!("{message} (the CUDA context is unusable from now on)").into()
            }
        };
        self.poisoned = Some(message.clone());
        self.abort_cliques(&message);
        for s in 0..self.streams.len() {
            self.fault(s, message.clone());
        }
        self.events.complete_all();
        // A dead context runs no more copies: the staging can go back to the pool.
        for (ticket, _read) in self.reads.drain() {
            self.finished_reads.insert(ticket, HostBytes::default());
        }
    }

    /// Faults stream `s` and returns true when the context is poisoned or the stream is unknown.
    pub(crate) fn refuse(&mut self, s: usize) -> bool {
        match (&self.poisoned, self.streams.get(s)) {
            (Some(message), Some(_)) => {
                let message = message.clone();
                self.fault(s, message);
                true
            }
            (None, Some(stream)) if stream.handle.is_null() => {
                self.fault(s, "the CUDA stream could not be created");
                true
            }
            (None, Some(_)) => false,
            (_, None) => true,
        }
    }
}
