//! The tuner's clock when a backend's device timing answers only some of the time: a candidate
//! whose samples are not all timed on the device is timed by the host clock for all of them, so
//! a median never mixes device and host durations.

mod common;

use gpuworld::kernel::{CpuSource, ExecutionMode, Kernel};
use gpuworld::tune::{CacheLocation, TunableSet, TuneEntry, TuneKey};
use gpuworld::{
    Backend, Bindings, ComputeClient, CubeCount, DeviceProperties, Driver, Error, RuntimeConfig,
    SimBackend, SimConfig, StreamId, library,
};
use gpuworld_systems::backend::{
    AllocError, Capabilities, Completion, CrossDevice, DeviceEvent, DeviceStream, DeviceTiming,
    HostBytes, Kernels, LaunchCount, Memory, Queue, ReadTicket, Region, StorageId,
};
use std::sync::Arc;
use std::time::Duration;

/// What the flaky clock reports when it answers: far longer than any host measurement here.
const DEVICE_ANSWER: Duration = Duration::from_secs(100);

/// The sim backend, whose `device_elapsed` answers only its first `answers` calls.
struct FlakyClock {
    sim: SimBackend,
    answers: usize,
}

impl Kernels for FlakyClock {
    const NAME: &'static str = "flaky-clock";
    type Source = CpuSource;
}

impl Memory for FlakyClock {
    fn allocate(&mut self, size: u64) -> Result<StorageId, AllocError> {
        self.sim.allocate(size)
    }

    unsafe fn deallocate(&mut self, storage: StorageId) {
        // SAFETY: this backend's caller keeps `deallocate`'s contract, which is the sim's.
        unsafe { self.sim.deallocate(storage) };
    }
}

impl Queue for FlakyClock {
    fn create_stream(&mut self, id: StreamId) -> DeviceStream {
        self.sim.create_stream(id)
    }

    fn write(&mut self, stream: DeviceStream, dst: Region, data: HostBytes) {
        self.sim.write(stream, dst, data);
    }

    fn copy(&mut self, stream: DeviceStream, src: Region, dst: Region) {
        self.sim.copy(stream, src, dst);
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
        // SAFETY: this backend's caller keeps `launch`'s contract, which is the sim's.
        unsafe {
            self.sim
                .launch(stream, kernel, count, buffers, scalars, mode);
        }
    }

    fn read(&mut self, stream: DeviceStream, src: Region) -> ReadTicket {
        self.sim.read(stream, src)
    }

    fn flush(&mut self, stream: DeviceStream) -> DeviceEvent {
        self.sim.flush(stream)
    }

    fn wait_event(&mut self, stream: DeviceStream, event: DeviceEvent) {
        self.sim.wait_event(stream, event);
    }
}

impl Completion for FlakyClock {
    fn poll(&mut self, tick: u64) {
        self.sim.poll(tick);
    }

    fn event_done(&mut self, event: DeviceEvent) -> bool {
        self.sim.event_done(event)
    }

    fn take_read(&mut self, ticket: ReadTicket) -> Option<HostBytes> {
        self.sim.take_read(ticket)
    }

    fn take_fault(&mut self, stream: DeviceStream) -> Option<Error> {
        self.sim.take_fault(stream)
    }
}

impl DeviceTiming for FlakyClock {
    fn device_elapsed(&mut self, _start: DeviceEvent, _end: DeviceEvent) -> Option<Duration> {
        let answered = self.answers > 0;
        self.answers = self.answers.saturating_sub(1);
        answered.then_some(DEVICE_ANSWER)
    }
}

impl CrossDevice for FlakyClock {}

impl Backend for FlakyClock {
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }

    fn properties(&self) -> DeviceProperties {
        self.sim.properties()
    }

    fn begin_tick(&mut self, tick: u64) {
        self.sim.begin_tick(tick);
    }

    fn end_tick(&mut self) {
        self.sim.end_tick();
    }
}

fn client(answers: usize) -> ComputeClient<FlakyClock> {
    let sim = SimBackend::new(SimConfig::default().with_latency_ticks(0));
    ComputeClient::new(
        FlakyClock { sim, answers },
        RuntimeConfig::default(),
        Driver::Manual,
    )
}

fn fill(client: &ComputeClient<FlakyClock>, value: f32) -> gpuworld::Result<()> {
    let out = client.empty(1024);
    client.launch(
        &library::FILL,
        CubeCount::new_1d(1),
        Bindings::new().buffer(&out).scalar_f32(value),
    )
}

/// Tunes a two-candidate set once and returns each candidate's median.
fn tuned_medians(client: &ComputeClient<FlakyClock>, test: &str) -> Vec<Duration> {
    let dir = std::env::temp_dir().join(format!("gpuworld-{test}-{}", std::process::id()));
    let tuner = common::quick_tuner(client, CacheLocation::Dir(dir.clone()));
    let set = Arc::new(
        TunableSet::new(
            "test.flaky_clock",
            |_: &u32| TuneKey::new([1]),
            |_, _, input: &u32| Ok(*input),
        )
        .candidate("one", |c, _: &u32| fill(c, 1.0))
        .candidate("two", |c, _: &u32| fill(c, 2.0)),
    );
    tuner.execute(&set, &0).expect("tuning runs");
    client.tick();
    let _ = std::fs::remove_dir_all(dir);
    match client.with_tune_cache(|cache| cache.entry("test.flaky_clock", "1")) {
        Some(TuneEntry::Tuned { outcomes, .. }) => outcomes
            .into_iter()
            .map(|o| o.result.expect("the candidate ran"))
            .collect(),
        other => panic!("expected a tuned entry, found {other:?}"),
    }
}

#[test]
fn a_candidate_whose_device_time_goes_missing_is_timed_by_the_host_clock_throughout() {
    // The warm-up mark pair and the first two samples of the first candidate are answered,
    // the third sample is not: a mixed median would be the device's 100 s.
    let client = client(3);
    let medians = tuned_medians(&client, "missing-device-time");
    assert!(
        medians.iter().all(|m| *m < Duration::from_secs(10)),
        "every median is host time: {medians:?}"
    );
}

#[test]
fn a_candidate_timed_on_the_device_throughout_keeps_the_device_time() {
    // Enough answers for both candidates' warm-up pairs and samples.
    let client = client(8);
    let medians = tuned_medians(&client, "device-time");
    assert_eq!(medians, vec![DEVICE_ANSWER; 2]);
}
