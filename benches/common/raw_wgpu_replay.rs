//! A trace replayed on raw wgpu, with no pool: a buffer created for every allocation and dropped
//! at its free, the device polled after every event (what a tick does). Reserved memory is
//! exactly what is live, so this is what holding memory to the floor costs on the adapter, with
//! the time spent in `create_buffer`, in dropping buffers and in `poll` told apart (issue 25:
//! where the exact-report replay's time goes on wgpu).

use crate::alloc_traces::{Event, Trace};
use gpuworld::wgpu;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Where a raw replay's time went.
pub struct RawReplay {
    /// The whole replay, the final wait included.
    pub time: Duration,
    /// Inside `create_buffer`.
    pub create: Duration,
    /// Inside `drop` of a buffer.
    pub free: Duration,
    /// Inside `poll`, the final wait included.
    pub poll: Duration,
    /// Buffers created.
    pub buffers: u64,
    /// Bytes created.
    pub bytes: u64,
}

/// Replays `trace` on a device of its own on the default adapter, with buffers of `usage`.
pub fn replay(trace: &Trace, usage: wgpu::BufferUsages) -> Result<RawReplay, String> {
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
        power_preference: wgpu::PowerPreference::HighPerformance,
        ..Default::default()
    }))
    .map_err(|error| format!("no adapter: {error}"))?;
    let (device, _queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        required_limits: adapter.limits(),
        ..Default::default()
    }))
    .map_err(|error| format!("no device: {error}"))?;
    let mut live: HashMap<u32, wgpu::Buffer> = HashMap::with_capacity(trace.peak_live_buffers);
    let (mut create, mut free, mut poll) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let (mut buffers, mut bytes) = (0, 0);
    let start = Instant::now();
    for event in &trace.events {
        match *event {
            Event::Alloc {
                id, bytes: size, ..
            } => {
                let size = size.max(4).next_multiple_of(4);
                let at = Instant::now();
                let buffer = device.create_buffer(&wgpu::BufferDescriptor {
                    label: None,
                    size,
                    usage,
                    mapped_at_creation: false,
                });
                create += at.elapsed();
                buffers += 1;
                bytes += size;
                live.insert(id, buffer);
            }
            Event::Free { id } => {
                let buffer = live.remove(&id);
                let at = Instant::now();
                drop(buffer);
                free += at.elapsed();
            }
        }
        let at = Instant::now();
        device
            .poll(wgpu::PollType::Poll)
            .map_err(|error| format!("poll: {error}"))?;
        poll += at.elapsed();
    }
    let at = Instant::now();
    device
        .poll(wgpu::PollType::wait_indefinitely())
        .map_err(|error| format!("wait: {error}"))?;
    poll += at.elapsed();
    let time = start.elapsed();
    Ok(RawReplay {
        time,
        create,
        free,
        poll,
        buffers,
        bytes,
    })
}
