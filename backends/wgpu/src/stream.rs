//! A device stream: the command encoder of its pending batch (created on first use), the compute
//! pass kept open across consecutive dispatches, and what the batch owns until it is submitted:
//! uniform chunks, upload staging, the timestamp set, the marks' timestamps. wgpu has one queue,
//! so streams differ only in which batch their commands go to; their submissions are ordered on
//! the queue.

use crate::marks::Stamp;
use crate::timing::TimingSet;
use crate::uniforms::UniformChunk;
use crate::uploads::UploadChunk;
use gpuworld_hal::error::Error;
use gpuworld_hal::ids::StreamId;

/// Commands after which the poll submits a batch even while the device is busy.
pub(crate) const AUTO_SUBMIT_COMMANDS: u32 = 512;

/// One stream's pending batch and fault.
pub(crate) struct WgpuStream {
    /// The runtime's stream.
    pub id: StreamId,
    encoder: Option<wgpu::CommandEncoder>,
    pass: Option<wgpu::ComputePass<'static>>,
    /// Commands recorded in the batch.
    pub commands: u32,
    /// Reads recorded in the batch: the poll submits it so they complete.
    pub reads: u32,
    /// Uniform chunks the batch's launches use.
    pub uniforms: Vec<UniformChunk>,
    /// Upload staging the batch's writes copy from.
    pub uploads: Vec<UploadChunk>,
    /// The timestamp set of the batch's timed dispatches.
    pub timing: Option<TimingSet>,
    /// Mark timestamps the batch writes, resolved when it is submitted.
    pub stamps: Vec<Stamp>,
    /// The last mark's start timestamp, written first by the next batch the stream begins.
    pub next_start: Option<Stamp>,
    /// The first fault since the last `take_fault`.
    pub fault: Option<Error>,
}

impl WgpuStream {
    /// A stream with nothing pending.
    pub fn new(id: StreamId) -> WgpuStream {
        WgpuStream {
            id,
            encoder: None,
            pass: None,
            commands: 0,
            reads: 0,
            uniforms: Vec::new(),
            uploads: Vec::new(),
            timing: None,
            stamps: Vec::new(),
            next_start: None,
            fault: None,
        }
    }

    /// Records a device fault with `message` unless an earlier fault is still unreported.
    pub fn fault(&mut self, message: impl Into<std::sync::Arc<str>>) {
        let id = self.id;
        self.fault
            .get_or_insert_with(|| Error::device_fault(id, message));
    }

    /// Records `error` unless an earlier fault is still unreported.
    pub fn fail(&mut self, error: Error) {
        self.fault.get_or_insert(error);
    }

    /// The batch's encoder, outside any pass, for copies; a new one begins with the last
    /// mark's start timestamp, if one is waiting.
    pub fn encoder(&mut self, device: &wgpu::Device) -> &mut wgpu::CommandEncoder {
        self.pass = None;
        let begun = self.encoder.is_none();
        let encoder = self.encoder.get_or_insert_with(|| {
            device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("gpuworld stream batch"),
            })
        });
        if begun && let Some(stamp) = self.next_start.take() {
            stamp.write(encoder);
            self.stamps.push(stamp);
        }
        encoder
    }

    /// The open compute pass, begun if there is none.
    pub fn pass(&mut self, device: &wgpu::Device) -> &mut wgpu::ComputePass<'static> {
        if let Some(pass) = self.pass.take() {
            return self.pass.insert(pass);
        }
        let pass = self
            .encoder(device)
            .begin_compute_pass(&wgpu::ComputePassDescriptor::default())
            .forget_lifetime();
        self.pass.insert(pass)
    }

    /// A pass of its own whose beginning and end write `timestamps`.
    pub fn timed_pass(
        &mut self,
        device: &wgpu::Device,
        timestamps: wgpu::ComputePassTimestampWrites<'_>,
    ) -> &mut wgpu::ComputePass<'static> {
        let pass = self
            .encoder(device)
            .begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: None,
                timestamp_writes: Some(timestamps),
            })
            .forget_lifetime();
        self.pass.insert(pass)
    }

    /// Ends the open pass, so the next dispatch begins a new one.
    pub fn end_pass(&mut self) {
        self.pass = None;
    }

    /// Whether the batch holds an encoder to submit.
    pub fn has_batch(&self) -> bool {
        self.encoder.is_some()
    }

    /// Takes the batch's encoder, its pass ended.
    pub fn take_encoder(&mut self) -> Option<wgpu::CommandEncoder> {
        self.pass = None;
        self.commands = 0;
        self.reads = 0;
        self.encoder.take()
    }
}
