#![doc = include_str!("../README.md")]

mod memory_limit;
mod worker;

pub use memory_limit::{DEFAULT_LIMIT_PERCENT, default_memory_limit, physical_memory};

use gpuworld_hal::backend::*;
use gpuworld_hal::backend::{OpClock, OpTime};
use gpuworld_hal::error::{ConfigError, DeviceError, Error};
use gpuworld_hal::graph::PlannedLaunch;
use gpuworld_hal::host_memory::HostMemory;
use gpuworld_hal::host_ops::{HostOp, event_label};
use gpuworld_hal::ids::StreamId;
use gpuworld_hal::kernel::{CpuSource, ExecutionMode, Kernel};
use gpuworld_hal::native::{NativeOp, NativeWork};
use gpuworld_hal::open::{BackendSettings, DeviceId, DeviceInfo, OpenBackend};
use parking_lot::{RwLock, RwLockReadGuard};
use smallvec::SmallVec;
use std::sync::Arc;
use std::time::Duration;
use worker::{Progress, StreamWorker};

/// The longest a wait for progress with an interrupt blocks before it looks at it again.
const WAIT_SLICE: Duration = Duration::from_micros(10);

/// How a cpu device is opened (`ComputeClient::<CpuBackend>::open`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CpuConfig {
    /// Which of the host's cpu devices: its `DeviceId` index.
    pub device: u32,
    /// The most memory the device may allocate: `Some(Some(bytes))`, `Some(None)` for no limit
    /// but the host's; `None` takes the configuration's `[cpu] memory_limit`, else
    /// [`default_memory_limit`].
    pub memory_limit: Option<Option<u64>>,
}

impl CpuConfig {
    /// Device `index`, its memory limit left to the configuration.
    pub fn device(index: u32) -> CpuConfig {
        CpuConfig {
            device: index,
            memory_limit: None,
        }
    }

    /// This configuration with the memory limit `limit` (`None`: no limit but the host's).
    pub fn with_memory_limit(self, limit: Option<u64>) -> CpuConfig {
        CpuConfig {
            memory_limit: Some(limit),
            ..self
        }
    }
}

/// The CPU device.
pub struct CpuBackend {
    memory: Arc<RwLock<HostMemory>>,
    /// Host memory for uploads and readbacks, shared with the clients and the workers.
    staging: Arc<HeapStaging>,
    progress: Arc<Progress>,
    workers: Vec<StreamWorker>,
    next_ticket: u64,
    /// `Progress::generation` at the last poll: work finished after it is progress a driver
    /// waiting between ticks must not sleep through.
    polled_generation: u64,
    /// Which of the host's cpu devices this is (see [`CpuBackend::with_devices`]).
    device: u32,
    /// Whether a tick runs: operations it sends may wait for the tick's poll or end to start
    /// their workers (see [`StreamWorker::start`]), so that a worker is woken once for many.
    in_tick: bool,
}

impl std::fmt::Debug for CpuBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuBackend")
            .field("device", &self.device)
            .field("streams", &self.workers.len())
            .field("next_ticket", &self.next_ticket)
            .finish_non_exhaustive()
    }
}

impl Default for CpuBackend {
    fn default() -> Self {
        CpuBackend::new()
    }
}

impl CpuBackend {
    /// A CPU device whose memory is limited to [`default_memory_limit`] (none where the
    /// machine's memory cannot be read).
    pub fn new() -> CpuBackend {
        CpuBackend::with_capacity(default_memory_limit())
    }

    /// A CPU device that refuses allocations beyond `capacity` bytes, when given; `None` is no
    /// limit but the host's (allocating past it may get the process killed).
    pub fn with_capacity(capacity: Option<u64>) -> CpuBackend {
        CpuBackend {
            memory: Arc::new(RwLock::new(HostMemory::new(capacity))),
            staging: HeapStaging::new(DEFAULT_MAX_FREE_HEAP_STAGING),
            progress: Arc::new(Progress::default()),
            workers: Vec::new(),
            next_ticket: 0,
            polled_generation: 0,
            device: 0,
            in_tick: false,
        }
    }

    /// `n` cpu devices, numbered 0 to n-1: each has memory, workers and staging of its own, so a
    /// runtime over each behaves as a device of its own (how multi-device code is tested without
    /// GPUs). Each has the default memory limit: together they may take more than the host has.
    pub fn with_devices(n: usize) -> Vec<CpuBackend> {
        (0..n)
            .map(|index| CpuBackend::device(index as u32))
            .collect()
    }

    /// The cpu device numbered `index`, with the default memory limit.
    pub fn device(index: u32) -> CpuBackend {
        CpuBackend {
            device: index,
            ..CpuBackend::new()
        }
    }

    /// Bytes allocated from the host.
    pub fn allocated(&self) -> u64 {
        self.memory.read().allocated()
    }

    fn send(&mut self, stream: DeviceStream, op: HostOp) {
        let start = !self.in_tick;
        if let Some(worker) = self.workers.get_mut(stream.0 as usize) {
            worker.send(op, start);
        }
    }

    /// Wakes the workers for what the tick left queued for them: before anything looks for or
    /// waits on their progress, and when the tick ends.
    fn start_workers(&mut self) {
        self.workers.iter_mut().for_each(StreamWorker::start);
    }

    /// Queues a read of `src` on `stream`, its bytes landing in `into` when given.
    fn enqueue_read(
        &mut self,
        stream: DeviceStream,
        src: Region,
        into: Option<Arc<dyn StagingAllocator>>,
    ) -> ReadTicket {
        let ticket = ReadTicket(self.next_ticket);
        self.next_ticket += 1;
        self.send(stream, HostOp::Read { ticket, src, into });
        ticket
    }
}

impl OpenBackend for CpuBackend {
    type Config = CpuConfig;

    fn device_config(index: u32) -> CpuConfig {
        CpuConfig::device(index)
    }

    fn open(config: CpuConfig, settings: &BackendSettings) -> Result<CpuBackend, Error> {
        let capacity = match config.memory_limit.or(settings.memory_limit) {
            Some(Some(0)) => {
                return Err(Error::Config(ConfigError::InvalidSetting {
                    origin: "CpuConfig".into(),
                    problem: "memory_limit is 0 bytes: expected at least 1, or no limit".into(),
                }));
            }
            Some(limit) => limit,
            None => default_memory_limit(),
        };
        Ok(CpuBackend {
            device: config.device,
            ..CpuBackend::with_capacity(capacity)
        })
    }

    /// The host CPU as one device: more are a matter of [`CpuBackend::with_devices`].
    fn enumerate() -> Vec<DeviceInfo> {
        vec![DeviceInfo {
            id: DeviceId {
                backend: Self::NAME,
                index: 0,
            },
            properties: Ok(CpuBackend::new().properties()),
            detail: String::new(),
        }]
    }
}

/// A binding's 32-bit words in host memory, read-locked while this lives (kernels share them,
/// hence atomics).
pub struct HostWords<'a> {
    memory: RwLockReadGuard<'a, HostMemory>,
    region: Region,
}

impl std::fmt::Debug for HostWords<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostWords")
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

impl HostWords<'_> {
    /// The words.
    pub fn words(&self) -> &[std::sync::atomic::AtomicU32] {
        // The region was checked when the words were handed out, and the read lock keeps it.
        self.memory
            .view(self.region)
            .map_or(&[], |view| view.words())
    }
}

impl NativeResource for CpuBackend {
    type Resource<'a> = HostWords<'a>;

    /// The region's words; `None` for freed memory or a region that does not start on a word.
    fn resource(&self, region: Region) -> Option<HostWords<'_>> {
        let memory = self.memory.read();
        memory.view(region)?;
        Some(HostWords { memory, region })
    }
}

impl Kernels for CpuBackend {
    const NAME: &'static str = "cpu";
    type Source = CpuSource;
}

impl Memory for CpuBackend {
    fn allocate(&mut self, size: u64) -> Result<StorageId, AllocError> {
        self.memory.write().allocate(size)
    }

    unsafe fn deallocate(&mut self, storage: StorageId) {
        self.memory.write().deallocate(storage);
    }

    /// Host addresses with no memory under them (`mmap(PROT_NONE)`), where
    /// [`HostMemory::page_mapping`] says the host maps pages.
    fn reserve_addresses(&mut self, size: u64) -> Result<StorageId, AllocError> {
        self.memory.write().reserve_addresses(size)
    }

    /// Makes the pages readable and writable; the kernel gives them memory at their first touch.
    fn map_pages(&mut self, storage: StorageId, offset: u64, len: u64) -> Result<(), AllocError> {
        self.memory.write().map_pages(storage, offset, len)
    }

    /// No view can be made over the pages from now on; their memory goes back at the next
    /// `trim_pages`, unless mapped again before. Any run of mapped pages, whatever calls mapped
    /// them (`split_mappings`).
    unsafe fn unmap_pages(&mut self, storage: StorageId, offset: u64, len: u64) {
        if let Err(error) = self.memory.write().unmap_pages(storage, offset, len) {
            tracing::error!(target: "gpuworld::memory", ?error, offset, len, "cpu: unmapping pages that are not mapped");
        }
    }

    fn trim_pages(&mut self) {
        self.memory.write().trim_pages();
    }

    unsafe fn free_addresses(&mut self, storage: StorageId) {
        self.memory.write().free_addresses(storage);
    }

    fn staging(&self) -> Arc<dyn StagingAllocator> {
        self.staging.clone()
    }
}

impl Queue for CpuBackend {
    fn create_stream(&mut self, id: StreamId) -> DeviceStream {
        let index = self.workers.len();
        self.progress.add_stream();
        self.workers.push(StreamWorker::spawn(
            id,
            index,
            self.memory.clone(),
            self.staging.clone(),
            self.progress.clone(),
        ));
        DeviceStream(index as u32)
    }

    fn write(&mut self, stream: DeviceStream, dst: Region, data: HostBytes) {
        self.send(stream, HostOp::Write { dst, data });
    }

    fn copy(&mut self, stream: DeviceStream, src: Region, dst: Region) {
        self.send(stream, HostOp::Copy { src, dst });
    }

    unsafe fn launch(
        &mut self,
        stream: DeviceStream,
        kernel: Kernel,
        count: LaunchCount,
        buffers: &[Region],
        scalars: &[u32],
        mode: ExecutionMode,
    ) {
        self.send(
            stream,
            HostOp::launch(kernel, count, buffers, scalars, mode),
        );
    }

    fn read(&mut self, stream: DeviceStream, src: Region) -> ReadTicket {
        self.enqueue_read(stream, src, None)
    }

    /// The worker copies straight into `staging`, falling back to its own when it has none to lend.
    fn read_for(
        &mut self,
        stream: DeviceStream,
        src: Region,
        staging: &Arc<dyn StagingAllocator>,
    ) -> ReadTicket {
        self.enqueue_read(stream, src, Some(staging.clone()))
    }

    fn flush(&mut self, stream: DeviceStream) -> DeviceEvent {
        let sent = self
            .workers
            .get(stream.0 as usize)
            .map_or(0, StreamWorker::sent);
        DeviceEvent::on_stream(stream.0, sent)
    }

    fn wait_event(&mut self, stream: DeviceStream, event: DeviceEvent) {
        self.send(stream, HostOp::Wait { event });
    }

    fn mark(&mut self, stream: DeviceStream) -> DeviceEvent {
        let event = self.flush(stream);
        self.progress.mark(event);
        event
    }

    /// The replay's launches, handed to the stream's worker at once (`HostOp::Replay`).
    fn graph_replay(
        _graph: u64,
        _version: u64,
        launches: Arc<[PlannedLaunch]>,
    ) -> Option<NativeWork> {
        Some(Box::new(CpuReplay(launches)))
    }

    fn run_native(
        &mut self,
        stream: DeviceStream,
        buffers: &[Region],
        work: NativeWork,
    ) -> Result<(), Error> {
        let Some(replay) = work.as_any().downcast_ref::<CpuReplay>() else {
            return Err(Error::Device(DeviceError::BackendUnavailable {
                backend: Self::NAME,
                reason: format!("it runs no native work `{}`", work.name()).into(),
            }));
        };
        let launches = replay.0.clone();
        let buffers: SmallVec<[Region; 4]> = buffers.iter().copied().collect();
        if self.progress.measuring() {
            // Timed launch by launch, as eager launches are.
            for launch in launches.iter() {
                let op = HostOp::Replay {
                    launches: Arc::from([launch.clone()]),
                    buffers: buffers.clone(),
                };
                self.send(stream, op);
            }
        } else {
            self.send(stream, HostOp::Replay { launches, buffers });
        }
        Ok(())
    }
}

impl Completion for CpuBackend {
    fn poll(&mut self, _tick: u64) {
        self.start_workers();
        self.polled_generation = self.progress.generation();
    }

    fn progress_watch(&mut self) -> Option<Box<dyn ProgressWatch>> {
        self.start_workers();
        Some(Box::new(CpuWatch {
            progress: self.progress.clone(),
            seen: self.polled_generation,
        }))
    }

    fn event_label(&self, event: DeviceEvent) -> String {
        event_label(event)
    }

    fn event_position(&self, event: DeviceEvent) -> Option<(DeviceStream, u64)> {
        let (stream, ops) = event.stream_and_ops();
        Some((DeviceStream(stream), ops))
    }

    fn event_done(&mut self, event: DeviceEvent) -> bool {
        self.start_workers();
        let (stream, ops) = event.stream_and_ops();
        self.progress.completed(stream as usize) >= ops
    }

    fn take_read(&mut self, ticket: ReadTicket) -> Option<HostBytes> {
        self.progress.take_read(ticket)
    }

    fn take_fault(&mut self, stream: DeviceStream) -> Option<Error> {
        self.progress.take_fault(stream.0 as usize)
    }
}

impl DeviceTiming for CpuBackend {
    /// The time the stream's worker spent running work between the marks (waits excluded).
    fn device_elapsed(&mut self, start: DeviceEvent, end: DeviceEvent) -> Option<Duration> {
        self.progress.elapsed(start, end)
    }

    fn record_op_times(&mut self, on: bool) -> Option<OpClock> {
        self.progress.set_recording(on);
        Some(OpClock::HostSince(self.progress.epoch()))
    }

    fn take_op_times(&mut self, into: &mut Vec<OpTime>) {
        self.progress.take_op_times(into);
    }
}

impl CrossDevice for CpuBackend {}

impl Backend for CpuBackend {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            // A replay of launches on one stream is one operation for the stream's worker; one
            // over several streams runs on the first stream's worker, its launches in the
            // frame's order, one that every dependency between lanes follows.
            graph_replay: true,
            graph_replay_across_streams: true,
            progress_watch: true,
            ..Capabilities::default()
        }
    }

    /// Maps host pages where the host can ([`HostMemory::page_mapping`]: unix), so the default
    /// ladder places requests over a page in a mapped pool; host mappings split, so it keeps its
    /// pages as runs.
    fn properties(&self) -> DeviceProperties {
        let page_mapping = HostMemory::page_mapping();
        DeviceProperties {
            page_mapping,
            split_mappings: page_mapping.is_some(),
            ..HostMemory::device_properties(
                format!("host CPU ({} threads)", rayon::current_num_threads()),
                self.memory.read().capacity().unwrap_or(u64::MAX),
                64,
            )
        }
    }

    fn device_index(&self) -> u32 {
        self.device
    }

    fn begin_tick(&mut self, _tick: u64) {
        self.in_tick = true;
    }

    fn end_tick(&mut self) {
        self.in_tick = false;
        self.start_workers();
    }
}

/// A captured graph's launches, for the operation `run_native` sends the stream's worker.
#[derive(Debug)]
struct CpuReplay(Arc<[PlannedLaunch]>);

impl NativeOp for CpuReplay {
    fn name(&self) -> &'static str {
        "cpu graph replay"
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// A wait for the stream workers without the backend: work finished after the last poll.
struct CpuWatch {
    progress: Arc<Progress>,
    /// `Progress::generation` at the last poll.
    seen: u64,
}

impl ProgressWatch for CpuWatch {
    /// The workers run on their own threads: waiting always lets them progress. With an
    /// interrupt the wait is cut in slices, so that new work (another runtime's part arrived) is
    /// seen soon; without one it blocks once.
    fn wait(&mut self, timeout: Duration, interrupt: Option<&dyn Fn() -> bool>) {
        let Some(interrupted) = interrupt else {
            self.progress.wait_for_change(self.seen, timeout);
            return;
        };
        let start = std::time::Instant::now();
        while !interrupted() {
            let left = timeout.saturating_sub(start.elapsed());
            if left.is_zero()
                || self
                    .progress
                    .wait_for_change(self.seen, left.min(WAIT_SLICE))
            {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Heap staging that counts the buffers it lends.
    struct Counted {
        pool: Arc<HeapStaging>,
        lent: AtomicUsize,
    }

    impl StagingAllocator for Counted {
        fn take(&self, len: usize) -> Option<HostBytes> {
            self.lent.fetch_add(1, Ordering::Relaxed);
            self.pool.take(len)
        }
    }

    /// A cpu device with one stream and an allocation of `size` bytes: the region from
    /// `offset` to its end.
    fn one_stream_and_region(size: u64, offset: u64) -> (CpuBackend, DeviceStream, Region) {
        let mut cpu = CpuBackend::new();
        let stream = cpu.create_stream(StreamId { value: 0 });
        let storage = cpu.allocate(size).expect("host memory");
        let region = Region {
            storage,
            offset,
            size: size - offset,
        };
        (cpu, stream, region)
    }

    fn finish(cpu: &mut CpuBackend, stream: DeviceStream, ticket: ReadTicket) -> HostBytes {
        let event = cpu.flush(stream);
        while !cpu.event_done(event) {
            cpu.wait_for_progress(Duration::from_millis(10), None);
        }
        cpu.take_read(ticket).expect("a finished read")
    }

    #[test]
    fn copies_within_and_between_buffers_run_in_stream_order_and_overlap_faults() {
        let (mut cpu, stream, a) = one_stream_and_region(1024, 0);
        let b = Region {
            storage: cpu.allocate(1024).expect("host memory"),
            ..a
        };
        let part = |region: Region, offset| Region {
            offset,
            size: 300,
            ..region
        };
        let (src, within, between) = (part(a, 260), part(a, 580), part(b, 36));
        let first: Vec<u8> = (0..300).map(|i| (i * 7 + 1) as u8).collect();
        let second: Vec<u8> = (0..300).map(|i| (i * 13 + 5) as u8).collect();
        cpu.write(stream, src, HostBytes::from_vec(first.clone()));
        cpu.copy(stream, src, within);
        cpu.copy(stream, within, between);
        cpu.write(stream, src, HostBytes::from_vec(second.clone()));
        let read_b = cpu.read(stream, b);
        let ticket = cpu.read(stream, a);
        let mut expected_a = vec![0; 1024];
        expected_a[260..560].copy_from_slice(&second);
        expected_a[580..880].copy_from_slice(&first);
        assert_eq!(finish(&mut cpu, stream, ticket), expected_a);
        let mut expected_b = vec![0; 1024];
        expected_b[36..336].copy_from_slice(&first);
        assert_eq!(cpu.take_read(read_b).expect("a finished read"), expected_b);
        assert!(cpu.take_fault(stream).is_none());

        cpu.copy(stream, src, part(a, 264));
        let ticket = cpu.read(stream, a);
        assert_eq!(
            finish(&mut cpu, stream, ticket),
            expected_a,
            "nothing copied"
        );
        let fault = cpu.take_fault(stream).map(|error| error.to_string());
        assert!(
            fault.as_deref().is_some_and(|f| f.contains("overlapping")),
            "{fault:?}"
        );
    }

    #[test]
    #[cfg(unix)]
    fn work_on_mapped_pages_runs_and_work_reaching_an_unmapped_page_faults_the_stream() {
        let page = HostMemory::page_mapping().expect("unix maps host pages");
        let mut cpu = CpuBackend::with_capacity(Some(3 * page));
        assert_eq!(cpu.properties().page_mapping, Some(page));
        let stream = cpu.create_stream(StreamId { value: 0 });
        let storage = cpu.reserve_addresses(4 * page).expect("addresses");
        cpu.map_pages(storage, page, 2 * page).expect("room");
        assert_eq!(cpu.allocated(), 2 * page);
        let mapped = Region {
            storage,
            offset: page + 3,
            size: 2 * page - 3,
        };
        let data: Vec<u8> = (0..mapped.size).map(|i| (i % 253) as u8).collect();
        cpu.write(stream, mapped, HostBytes::from_vec(data.clone()));
        let ticket = cpu.read(stream, mapped);
        assert_eq!(&*finish(&mut cpu, stream, ticket), &data[..]);
        assert!(cpu.take_fault(stream).is_none());
        let reaching = Region {
            size: mapped.size + 1,
            ..mapped
        };
        let ticket = cpu.read(stream, reaching);
        assert!(finish(&mut cpu, stream, ticket).is_empty());
        let fault = cpu.take_fault(stream).map(|error| error.to_string());
        assert!(
            fault.as_deref().is_some_and(|f| f.contains("freed memory")),
            "{fault:?}"
        );
        // SAFETY: mapped by the call above; the finished read was the last work on them.
        unsafe { cpu.unmap_pages(storage, page, 2 * page) };
        cpu.trim_pages();
        assert_eq!(cpu.allocated(), 0);
        assert_eq!(
            cpu.map_pages(storage, 0, 4 * page),
            Err(AllocError::OutOfMemory),
            "over the capacity"
        );
        // SAFETY: no page is mapped any more.
        unsafe { cpu.free_addresses(storage) };
    }

    #[test]
    fn a_wait_for_progress_that_is_interrupted_does_not_block() {
        let mut cpu = CpuBackend::new();
        cpu.poll(1);
        // Nothing changes on the workers: only the interrupt can end the wait early.
        let start = std::time::Instant::now();
        assert!(cpu.wait_for_progress(Duration::from_secs(30), Some(&|| true)));
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the wait blocked"
        );
    }

    #[test]
    fn a_read_for_another_runtime_lands_in_its_staging_and_a_plain_read_in_the_backends() {
        let (mut cpu, stream, region) = one_stream_and_region(4099, 1);
        let data: Vec<u8> = (0..4098).map(|i| (i * 13 + 1) as u8).collect();
        cpu.write(stream, region, HostBytes::from_vec(data.clone()));
        let counted = Arc::new(Counted {
            pool: HeapStaging::new(1 << 20),
            lent: AtomicUsize::new(0),
        });
        let staging: Arc<dyn StagingAllocator> = counted.clone();
        let ticket = cpu.read_for(stream, region, &staging);
        assert_eq!(finish(&mut cpu, stream, ticket), data);
        assert_eq!(counted.lent.load(Ordering::Relaxed), 1);
        let ticket = cpu.read(stream, region);
        assert_eq!(finish(&mut cpu, stream, ticket), data);
        assert_eq!(counted.lent.load(Ordering::Relaxed), 1, "a plain read");
    }

    #[test]
    fn work_sent_in_a_tick_waits_for_its_poll_or_end_and_then_runs() {
        let (mut cpu, stream, region) = one_stream_and_region(4, 0);
        // Outside a tick work starts as it is sent; then the worker falls asleep (a worker still
        // awake takes what is queued without being woken).
        let ticket = cpu.read(stream, region);
        finish(&mut cpu, stream, ticket);
        let asleep = |cpu: &CpuBackend| {
            let start = std::time::Instant::now();
            while !cpu.workers[0].asleep() {
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "the worker stayed awake"
                );
                std::thread::yield_now();
            }
        };
        asleep(&cpu);

        cpu.begin_tick(1);
        cpu.write(stream, region, HostBytes::from_vec(vec![1, 2, 3, 4]));
        let ticket = cpu.read(stream, region);
        let event = cpu.flush(stream);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            cpu.progress.completed(0),
            1,
            "the worker was woken before the tick looked at it"
        );
        // The tick's poll starts the worker; its end would have.
        cpu.poll(1);
        assert_eq!(finish(&mut cpu, stream, ticket), vec![1, 2, 3, 4]);
        assert!(cpu.event_done(event));
        cpu.end_tick();

        // The 32nd operation held for a sleeping worker wakes it without a poll.
        asleep(&cpu);
        cpu.begin_tick(2);
        for _ in 0..worker::WAKE_AT {
            cpu.write(stream, region, HostBytes::from_vec(vec![5, 6, 7, 8]));
        }
        let event = cpu.flush(stream);
        let start = std::time::Instant::now();
        while cpu.progress.completed(0) < event.stream_and_ops().1 {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the worker slept on"
            );
            std::thread::yield_now();
        }
        cpu.end_tick();
    }
}
