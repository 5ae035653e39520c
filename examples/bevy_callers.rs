//! Many systems calling one client in the same frame (issue 31): a headless Bevy app whose
//! `PostUpdate` schedule runs `--systems` independent systems in `GpuworldSet::Submit`, each
//! with buffers of its own: every frame each one writes its input, launches two kernels and reads
//! the result back (blocking), checking every value. The same app runs twice, with Bevy's
//! single-threaded executor and with its multi-threaded one (the systems then call the client
//! from the task pool's threads at once), and reports the frame time of each: median, 99th
//! percentile and mean. The frame count is bounded, so CI runs it.
//!
//! ```sh
//! cargo run --release --example bevy_callers --features bevy                  # cpu
//! cargo run --release --example bevy_callers --features bevy,cuda -- --backend cuda
//! ```
//! Options: `--frames N` (300), `--systems N` (1 to 8; 6), `--elements N` per buffer (4096),
//! `--backend cpu|wgpu|cuda` (by default the first of cuda, wgpu, cpu compiled in with a device).

use bevy_app::{App, AppExit, First, Last, PostUpdate, ScheduleRunnerPlugin, TaskPoolPlugin};
use bevy_ecs::prelude::*;
use bevy_ecs::schedule::{MultiThreadedExecutor, SingleThreadedExecutor};
use gpuworld::bevy::{Gpu, GpuworldPlugin, GpuworldSet};
use gpuworld::{Backend, Bindings, ComputeClient, CubeCount, Driver, Handle, library};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The most systems the example defines (one per `Lane` index).
const MAX_SYSTEMS: usize = 8;

struct Options {
    frames: usize,
    systems: usize,
    elements: usize,
    backend: Option<String>,
}

fn options() -> Result<Options, String> {
    let mut options = Options {
        frames: 300,
        systems: 6,
        elements: 4096,
        backend: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        let number = |text: String| text.parse::<usize>().map_err(|e| format!("{arg}: {e}"));
        match arg.as_str() {
            "--frames" => options.frames = number(value()?)?,
            "--systems" => options.systems = number(value()?)?,
            "--elements" => options.elements = number(value()?)?,
            "--backend" => options.backend = Some(value()?),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    if !(1..=MAX_SYSTEMS).contains(&options.systems) {
        return Err(format!("--systems must be 1 to {MAX_SYSTEMS}"));
    }
    if options.frames < 2 || options.elements == 0 {
        return Err("--frames must be at least 2 and --elements at least 1".into());
    }
    Ok(options)
}

/// The buffers of system `I`.
#[derive(Resource)]
struct Lane<const I: usize> {
    input: Handle,
    scaled: Handle,
    output: Handle,
    elements: usize,
}

/// Frame times so far (shared with `run_app`, which reads them once the app exits: `App::run`
/// takes the world with it), and when the current frame began.
#[derive(Resource)]
struct Frames {
    limit: usize,
    began: Instant,
    times: Arc<Mutex<Vec<Duration>>>,
    count: usize,
}

fn begin_frame(mut frames: ResMut<Frames>) {
    frames.began = Instant::now();
}

fn end_frame(mut frames: ResMut<Frames>, mut exit: MessageWriter<AppExit>) {
    let time = frames.began.elapsed();
    frames.times.lock().push(time);
    frames.count += 1;
    if frames.count >= frames.limit {
        exit.write(AppExit::Success);
    }
}

/// One system's frame: write, scale twice, read back and check.
fn lane<B: Backend, const I: usize>(
    gpu: Res<Gpu<B>>,
    lane: Res<Lane<I>>,
    frames: Res<Frames>,
) -> Result<(), BevyError> {
    let frame = frames.count;
    let value = (frame * MAX_SYSTEMS + I) as f32;
    let count = CubeCount::covering(lane.elements as u64, library::LINEAR_CUBE);
    gpu.write(
        &lane.input,
        bytemuck::cast_slice(&vec![value; lane.elements]),
    )?;
    gpu.launch(
        &library::SCALE,
        count,
        Bindings::new()
            .buffer(&lane.input)
            .buffer(&lane.scaled)
            .scalar_f32(2.0),
    )?;
    gpu.launch(
        &library::SCALE,
        count,
        Bindings::new()
            .buffer(&lane.scaled)
            .buffer(&lane.output)
            .scalar_f32(0.5),
    )?;
    let values: Vec<f32> = gpu.read_one_as(&lane.output)?;
    if let Some((index, wrong)) = values.iter().enumerate().find(|(_, v)| **v != value) {
        return Err(
            format!("system {I}, frame {frame}: element {index} is {wrong}, not {value}").into(),
        );
    }
    Ok(())
}

fn add_lane<B: Backend, const I: usize>(app: &mut App, client: &ComputeClient<B>, elements: usize) {
    let bytes = (elements * 4) as u64;
    app.insert_resource(Lane::<I> {
        input: client.empty(bytes),
        scaled: client.empty(bytes),
        output: client.empty(bytes),
        elements,
    })
    .add_systems(PostUpdate, lane::<B, I>.in_set(GpuworldSet::Submit));
}

/// Median, 99th percentile and mean of `times`, in milliseconds, without the first frame.
fn summary(times: &[Duration]) -> (f64, f64, f64) {
    let mut ms: Vec<f64> = times
        .iter()
        .skip(1)
        .map(|t| t.as_secs_f64() * 1e3)
        .collect();
    ms.sort_by(f64::total_cmp);
    let at = |p: f64| ms[((ms.len() - 1) as f64 * p).round() as usize];
    let mean = ms.iter().sum::<f64>() / ms.len() as f64;
    (at(0.5), at(0.99), mean)
}

fn run_app<B: Backend>(
    client: &ComputeClient<B>,
    options: &Options,
    multi_threaded: bool,
) -> Result<Vec<Duration>, String> {
    let times = Arc::new(Mutex::new(Vec::with_capacity(options.frames)));
    let mut app = App::new();
    app.add_plugins((
        TaskPoolPlugin::default(),
        ScheduleRunnerPlugin::run_loop(Duration::ZERO),
    ))
    .add_plugins(GpuworldPlugin::new(client.clone()))
    .insert_resource(Frames {
        limit: options.frames,
        began: Instant::now(),
        times: times.clone(),
        count: 0,
    })
    .add_systems(First, begin_frame)
    .add_systems(Last, end_frame);
    let adders: [fn(&mut App, &ComputeClient<B>, usize); MAX_SYSTEMS] = [
        add_lane::<B, 0>,
        add_lane::<B, 1>,
        add_lane::<B, 2>,
        add_lane::<B, 3>,
        add_lane::<B, 4>,
        add_lane::<B, 5>,
        add_lane::<B, 6>,
        add_lane::<B, 7>,
    ];
    for add in &adders[..options.systems] {
        add(&mut app, client, options.elements);
    }
    app.edit_schedule(PostUpdate, |schedule| {
        if multi_threaded {
            schedule.set_executor(MultiThreadedExecutor::new());
        } else {
            schedule.set_executor(SingleThreadedExecutor::new());
        }
    });
    match app.run() {
        AppExit::Success => {}
        AppExit::Error(code) => return Err(format!("the app exited with error {code}")),
    }
    let times = std::mem::take(&mut *times.lock());
    Ok(times)
}

fn run<B: Backend>(client: ComputeClient<B>, options: &Options) -> AppExit {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "{} systems calling one {} client each frame ({} elements each: write, 2 launches, a blocking read), {} frames, {threads} cores",
        options.systems,
        B::NAME,
        options.elements,
        options.frames
    );
    for (name, multi_threaded) in [("single-threaded", false), ("multi-threaded", true)] {
        match run_app(&client, options, multi_threaded) {
            Ok(times) => {
                let (median, p99, mean) = summary(&times);
                println!(
                    "{name:>15} executor: frame time median {median:.3} ms, p99 {p99:.3} ms, mean {mean:.3} ms"
                );
            }
            Err(error) => {
                eprintln!("error: {name} executor: {error}");
                return AppExit::error();
            }
        }
    }
    AppExit::Success
}

fn main() -> AppExit {
    let options = match options() {
        Ok(options) => options,
        Err(error) => {
            eprintln!("error: {error}");
            return AppExit::error();
        }
    };
    let wanted = options.backend.as_deref();
    #[cfg(feature = "cuda")]
    if wanted.is_none() || wanted == Some("cuda") {
        match gpuworld::cuda_client_with(gpuworld::CudaConfig::default(), Driver::Manual) {
            Ok(client) => return run(client, &options),
            Err(error) if wanted.is_some() => {
                eprintln!("error: {error}");
                return AppExit::error();
            }
            Err(error) => eprintln!("no CUDA device ({error}); trying the next backend"),
        }
    }
    #[cfg(feature = "wgpu")]
    if wanted.is_none() || wanted == Some("wgpu") {
        match gpuworld::wgpu_client_with(gpuworld::WgpuConfig::default(), Driver::Manual) {
            Ok(client) => return run(client, &options),
            Err(error) if wanted.is_some() => {
                eprintln!("error: {error}");
                return AppExit::error();
            }
            Err(error) => eprintln!("no wgpu adapter ({error}); trying the next backend"),
        }
    }
    match wanted {
        None | Some("cpu") => match gpuworld::cpu_client(Driver::Manual) {
            Ok(client) => run(client, &options),
            Err(error) => {
                eprintln!("error: {error}");
                AppExit::error()
            }
        },
        Some(other) => {
            eprintln!("error: backend `{other}` is not compiled in or unknown");
            AppExit::error()
        }
    }
}
