//! Particles simulated by gpuworld on the renderer's own wgpu device and drawn straight from
//! gpuworld's buffers through render leases: no byte crosses the host per frame after start-up.
//!
//! ```text
//! cargo run --release --features wgpu --example render_particles                  # a window
//! cargo run --release --features wgpu --example render_particles -- \
//!     --frames 120 --screenshot out.png                                            # offscreen
//! ```
//!
//! Options: `--particles N` (default 1,000,000), `--frames N` (the window closes after N frames;
//! offscreen renders N), `--screenshot PATH` (offscreen, writes a PNG), `--seed N`,
//! `--backend wgpu|cpu`, `--readback` (the comparison path: `read` the positions to the host and
//! upload them to the renderer's own vertex buffers every frame, as a renderer does without
//! leases). `--backend cpu` computes on the host and must upload every frame: it implies
//! `--readback`. At the end it prints the mean frame time (step and draw, the device finished),
//! the CPU time of gpuworld's calls on the render thread per frame, and
//! `host bytes per frame: N` from the wgpu backend's traffic counters plus the renderer's uploads.

mod scene;

use gpuworld::{
    Backend, ComputeClient, CpuConfig, Driver, RenderLease, WgpuBackend, WgpuConfig, wgpu,
};
use scene::{OFFSCREEN_FORMAT, Offscreen, Particles, PointPipeline};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The command line.
struct Options {
    particles: usize,
    frames: Option<u64>,
    screenshot: Option<std::path::PathBuf>,
    seed: u32,
    backend: String,
    readback: bool,
}

fn options() -> Result<Options, String> {
    let mut options = Options {
        particles: 1_000_000,
        frames: None,
        screenshot: None,
        seed: 7,
        backend: "wgpu".into(),
        readback: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--particles" => {
                options.particles = value()?.parse().map_err(|e| format!("--particles: {e}"))?
            }
            "--frames" => {
                options.frames = Some(value()?.parse().map_err(|e| format!("--frames: {e}"))?)
            }
            "--seed" => options.seed = value()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--screenshot" => options.screenshot = Some(value()?.into()),
            "--backend" => options.backend = value()?,
            "--readback" => options.readback = true,
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    match options.backend.as_str() {
        "wgpu" => {}
        "cpu" => options.readback = true,
        other => {
            return Err(format!(
                "--backend {other}: this example draws with wgpu; `wgpu` simulates on the \
                 renderer's device and draws through leases, `cpu` simulates on the host and \
                 uploads the positions every frame (cuda would need a copy through the host too)"
            ));
        }
    }
    if options.particles == 0 || options.particles > u32::MAX as usize {
        return Err("--particles must be between 1 and 2^32 - 1".into());
    }
    Ok(options)
}

/// The renderer's device: what a wgpu application (or Bevy's `RenderDevice`) already has.
struct Renderer {
    adapter: wgpu::Adapter,
    device: wgpu::Device,
    queue: wgpu::Queue,
}

impl Renderer {
    fn new(
        instance: &wgpu::Instance,
        surface: Option<&wgpu::Surface<'_>>,
    ) -> Result<Renderer, String> {
        let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            compatible_surface: surface,
            ..Default::default()
        }))
        .map_err(|e| format!("no wgpu adapter: {e}"))?;
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("renderer"),
            required_limits: adapter.limits(),
            ..Default::default()
        }))
        .map_err(|e| format!("the adapter refused a device: {e}"))?;
        Ok(Renderer {
            adapter,
            device,
            queue,
        })
    }
}

/// Where a frame's positions come from.
trait Feed {
    /// Steps the simulation and records the draw of its positions into `view`; returns what
    /// must live until the frame is submitted (the leases).
    fn frame(
        &mut self,
        renderer: &Renderer,
        pipeline: &PointPipeline,
        encoder: &mut wgpu::CommandEncoder,
        view: &wgpu::TextureView,
    ) -> Result<Vec<RenderLease>, String>;

    /// Bytes that crossed the host so far.
    fn host_bytes(&self) -> u64;

    /// Time spent in gpuworld's calls on this thread so far.
    fn gpuworld_time(&self) -> Duration;
}

/// Leases: the wgpu backend on the renderer's device, drawn from its buffers.
struct Leases {
    client: ComputeClient<WgpuBackend>,
    particles: Particles,
    in_gpuworld: Duration,
}

impl Feed for Leases {
    fn frame(
        &mut self,
        _renderer: &Renderer,
        pipeline: &PointPipeline,
        encoder: &mut wgpu::CommandEncoder,
        view: &wgpu::TextureView,
    ) -> Result<Vec<RenderLease>, String> {
        let started = Instant::now();
        self.particles
            .step(&self.client)
            .map_err(|e| e.to_string())?;
        // One submit of the stream for both leases.
        let leases = self
            .client
            .leases([&self.particles.px, &self.particles.py])
            .map_err(|e| e.to_string())?;
        self.in_gpuworld += started.elapsed();
        let [xs, ys] = leases.as_slice() else {
            return Err("two bindings gave other than two leases".into());
        };
        pipeline.draw(
            encoder,
            view,
            xs.slice(),
            ys.slice(),
            self.particles.count as u32,
        );
        Ok(leases)
    }

    fn host_bytes(&self) -> u64 {
        self.client.wgpu_host_traffic().total()
    }

    fn gpuworld_time(&self) -> Duration {
        self.in_gpuworld
    }
}

/// The copy through the host: `read` the positions, upload them to the renderer's buffers.
struct Readback<B: Backend> {
    client: ComputeClient<B>,
    particles: Particles,
    xs: wgpu::Buffer,
    ys: wgpu::Buffer,
    uploaded: u64,
    /// The bytes the backend itself moved between host and device.
    backend_traffic: fn(&ComputeClient<B>) -> u64,
    in_gpuworld: Duration,
}

impl<B: Backend> Readback<B> {
    fn new(
        client: ComputeClient<B>,
        particles: Particles,
        renderer: &Renderer,
        backend_traffic: fn(&ComputeClient<B>) -> u64,
    ) -> Readback<B> {
        let vertices = || {
            renderer.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("renderer positions"),
                size: particles.count as u64 * 4,
                usage: wgpu::BufferUsages::VERTEX | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        };
        Readback {
            xs: vertices(),
            ys: vertices(),
            client,
            particles,
            uploaded: 0,
            backend_traffic,
            in_gpuworld: Duration::ZERO,
        }
    }
}

impl<B: Backend> Feed for Readback<B> {
    fn frame(
        &mut self,
        renderer: &Renderer,
        pipeline: &PointPipeline,
        encoder: &mut wgpu::CommandEncoder,
        view: &wgpu::TextureView,
    ) -> Result<Vec<RenderLease>, String> {
        let started = Instant::now();
        self.particles
            .step(&self.client)
            .map_err(|e| e.to_string())?;
        let xs = self
            .client
            .read_one(&self.particles.px)
            .map_err(|e| e.to_string())?;
        let ys = self
            .client
            .read_one(&self.particles.py)
            .map_err(|e| e.to_string())?;
        self.in_gpuworld += started.elapsed();
        renderer.queue.write_buffer(&self.xs, 0, &xs);
        renderer.queue.write_buffer(&self.ys, 0, &ys);
        self.uploaded += (xs.len() + ys.len()) as u64;
        let count = self.particles.count as u32;
        pipeline.draw(encoder, view, self.xs.slice(..), self.ys.slice(..), count);
        Ok(Vec::new())
    }

    fn host_bytes(&self) -> u64 {
        self.uploaded + (self.backend_traffic)(&self.client)
    }

    fn gpuworld_time(&self) -> Duration {
        self.in_gpuworld
    }
}

/// The feed `options` ask for, its particles created and uploaded (start-up).
fn feed(options: &Options, renderer: &Renderer) -> Result<Box<dyn Feed>, String> {
    let wgpu_traffic = |client: &ComputeClient<WgpuBackend>| client.wgpu_host_traffic().total();
    if options.backend == "cpu" {
        let client =
            ComputeClient::<gpuworld::CpuBackend>::open(CpuConfig::default(), Driver::DeviceThread)
                .map_err(|e| e.to_string())?;
        let particles = Particles::new(&client, options.particles, options.seed);
        client.sync().map_err(|e| e.to_string())?;
        return Ok(Box::new(Readback::new(client, particles, renderer, |_| 0)));
    }
    // Marks' timestamp queries read back a few bytes each: off, so the counters show only data.
    let config = WgpuConfig::default().with_mark_timestamps(false);
    let client = gpuworld::wgpu_client_on_device(
        &renderer.adapter,
        renderer.device.clone(),
        renderer.queue.clone(),
        config,
        Driver::DeviceThread,
    )
    .map_err(|e| e.to_string())?;
    client
        .warm_up(&scene::integrate)
        .map_err(|e| e.to_string())?;
    let particles = Particles::new(&client, options.particles, options.seed);
    client.sync().map_err(|e| e.to_string())?;
    Ok(if options.readback {
        Box::new(Readback::new(client, particles, renderer, wgpu_traffic))
    } else {
        Box::new(Leases {
            client,
            particles,
            in_gpuworld: Duration::ZERO,
        })
    })
}

/// What the frames cost, printed at the end.
struct Tally {
    frames: u64,
    host_bytes_at_start: u64,
    frame_time: Duration,
}

impl Tally {
    fn new(feed: &dyn Feed) -> Tally {
        Tally {
            frames: 0,
            host_bytes_at_start: feed.host_bytes(),
            frame_time: Duration::ZERO,
        }
    }

    fn print(&self, feed: &dyn Feed, options: &Options) {
        let frames = self.frames.max(1);
        let per_frame = |d: Duration| d.as_secs_f64() * 1e3 / frames as f64;
        println!(
            "{} particles, {} frames, {}",
            options.particles,
            self.frames,
            if options.readback {
                "read + upload"
            } else {
                "leases"
            }
        );
        println!(
            "frame time (step + draw, device finished): {:.3} ms",
            per_frame(self.frame_time)
        );
        println!(
            "gpuworld CPU time per frame (its calls on the render thread): {:.3} ms",
            per_frame(feed.gpuworld_time())
        );
        println!(
            "host bytes per frame: {}",
            (feed.host_bytes() - self.host_bytes_at_start) / frames
        );
    }
}

/// Runs one frame into `view` and submits it; waits for the device when `wait` (offscreen and
/// timed frames), so the frame time includes the device's work.
fn run_frame(
    renderer: &Renderer,
    pipeline: &PointPipeline,
    feed: &mut dyn Feed,
    view: &wgpu::TextureView,
    tally: &mut Tally,
) -> Result<(), String> {
    let started = Instant::now();
    let mut encoder = renderer.device.create_command_encoder(&Default::default());
    let leases = feed.frame(renderer, pipeline, &mut encoder, view)?;
    renderer.queue.submit([encoder.finish()]);
    // The frame is on the queue: gpuworld's next writes come after it.
    drop(leases);
    renderer
        .device
        .poll(wgpu::PollType::wait_indefinitely())
        .map_err(|e| format!("waiting for the frame: {e}"))?;
    tally.frame_time += started.elapsed();
    tally.frames += 1;
    Ok(())
}

fn offscreen(options: &Options, path: &std::path::Path) -> Result<(), String> {
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let renderer = Renderer::new(&instance, None)?;
    let mut feed = feed(options, &renderer)?;
    let pipeline = PointPipeline::new(&renderer.device, OFFSCREEN_FORMAT);
    let target = Offscreen::new(&renderer.device);
    let mut tally = Tally::new(feed.as_ref());
    for _ in 0..options.frames.unwrap_or(120) {
        run_frame(
            &renderer,
            &pipeline,
            feed.as_mut(),
            &target.view,
            &mut tally,
        )?;
    }
    let mut encoder = renderer.device.create_command_encoder(&Default::default());
    target.copy_out(&mut encoder);
    renderer.queue.submit([encoder.finish()]);
    let pixels = target.pixels(&renderer.device)?;
    write_png(path, &pixels)?;
    println!("wrote {}", path.display());
    tally.print(feed.as_ref(), options);
    Ok(())
}

fn write_png(path: &std::path::Path, rgba: &[u8]) -> Result<(), String> {
    let file = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut encoder = png::Encoder::new(std::io::BufWriter::new(file), scene::SIDE, scene::SIDE);
    encoder.set_color(png::ColorType::Rgba);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder
        .write_header()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    writer
        .write_image_data(rgba)
        .map_err(|e| format!("{}: {e}", path.display()))
}

mod window;

fn main() -> ExitCode {
    let result = options().and_then(|options| match &options.screenshot {
        Some(path) => offscreen(&options, path),
        None => window::run(&options),
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("render_particles: {message}");
            ExitCode::FAILURE
        }
    }
}
