//! A collective call run on one of the backend's streams, and the aborts a failed device causes.

use super::clique::{Clique, KnownClique};
use super::comms::{NcclCall, aborted_message, enqueue, refused_message};
use super::library::nccl;
use crate::device::CudaBackend;
use cudarc::nccl::sys;
use gpuworld_hal::backend::Backend;
use gpuworld_hal::backend::{NativeOp, Region};
use gpuworld_hal::error::Error;
use std::sync::Arc;

impl CudaBackend {
    /// Enqueues `call` on stream `s` over the task's regions.
    pub(crate) fn run_nccl(
        &mut self,
        s: usize,
        buffers: &[Region],
        call: &NcclCall,
    ) -> Result<(), Error> {
        let stream_id = self.streams[s].id;
        let fault = |message: String| Error::device_fault(stream_id, message);
        let nccl = nccl()?;
        if call.comm.device != Backend::device_index(self) {
            return Err(fault(format!(
                "an NCCL communicator of device {} used on device {}",
                call.comm.device,
                Backend::device_index(self)
            )));
        }
        self.note_collective(s, &call.comm.clique);
        let stream: sys::cudaStream_t = self.work_stream(s).cast();
        let pointer = |i: usize| {
            buffers
                .get(i)
                .and_then(|region| self.region_pointer(*region))
                .ok_or_else(|| fault(format!("{} bound to freed or missing memory", call.name())))
        };
        // Held shared while the call is enqueued: an abort waits for it (briefly), then frees.
        let Some(comms) = call.comm.clique.live(call.comm.slot) else {
            return Err(fault(refused_message(call)));
        };
        let comm = comms[call.comm.slot];
        self.bind();
        // SAFETY: the pointers are live allocations of this device covering the task's
        // regions, whose sizes the client checked against `count` and the group's size;
        // `stream` is this context's stream; `comm` is this device's communicator, live (not
        // aborted) while the lock is held.
        let code = unsafe { enqueue(nccl, call, comm, stream, buffers, &pointer)? };
        drop(comms);
        nccl.check(code, call.name()).map_err(fault)?;
        call.comm.clique.watch_after(stream.cast());
        Ok(())
    }

    /// Remembers that stream `s` ran a collective of `clique`, so that an abort of the clique
    /// faults the stream (its collective's result is undefined) and a failure of this device
    /// aborts the clique.
    pub(crate) fn note_collective(&mut self, s: usize, clique: &Arc<Clique>) {
        let known = self
            .cliques
            .iter_mut()
            .find(|known| std::ptr::eq(known.clique.as_ptr(), Arc::as_ptr(clique)));
        match known {
            Some(known) => {
                if !known.streams.contains(&s) {
                    known.streams.push(s);
                }
            }
            None => self.cliques.push(KnownClique {
                clique: Arc::downgrade(clique),
                streams: vec![s],
                reported: false,
            }),
        }
        self.cliques.retain(|known| known.clique.strong_count() > 0);
    }

    /// Faults the streams that ran collectives of a clique another rank aborted, once per
    /// clique: their next read or sync reports it.
    pub(crate) fn notice_aborted_cliques(&mut self) {
        let mut faults = Vec::new();
        for known in &mut self.cliques {
            if known.reported {
                continue;
            }
            let Some(reason) = known.clique.upgrade().and_then(|clique| clique.aborted()) else {
                continue;
            };
            known.reported = true;
            for &s in &known.streams {
                faults.push((s, aborted_message("a collective", &reason)));
            }
        }
        for (s, message) in faults {
            self.fault(s, message);
        }
    }

    /// This device failed (`reason`): aborts every clique it ran collectives in, so the other
    /// ranks' collectives end instead of waiting for this one forever.
    pub(crate) fn abort_cliques(&mut self, reason: &str) {
        let device = Backend::device_index(self);
        for known in &mut self.cliques {
            known.reported = true;
            if let Some(clique) = known.clique.upgrade() {
                clique.abort(&format!("GPU {device} failed: {reason}"));
            }
        }
    }
}
