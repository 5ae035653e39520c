//! The `render_particles` example's offscreen frame against a reference rasterised on the host
//! from the cpu backend's positions for the same seed and step count. The integrator is one
//! `#[gpuworld::kernel]`, so wgpu's positions are the cpu's bit for bit (asserted first); what
//! may differ is only where the rasteriser puts a point that lies within a rounding error of a
//! pixel edge: the GPU maps a position to the viewport in `f32` (`x * 2 - 1`, then the viewport
//! transform, snapped to its sub-pixel grid), the host directly (`x * side`). Such a point lands
//! in the neighbouring pixel, so the tolerance is: every pixel whose point count differs has a
//! pixel within one pixel whose count differs the other way (the point moved by at most one
//! pixel), and such pixels are at most 3% of those lit. The rasteriser snaps window positions
//! to its sub-pixel grid (lavapipe: 1/256 pixel), which moves a point lying within half a grid
//! step of a pixel edge: about 0.4% of the points here, 0.85% of the lit pixels (two pixels per
//! moved point) on lavapipe; 3% leaves room for coarser grids. Reported ignored without an
//! adapter.

mod common;

#[path = "../examples/render_particles/scene.rs"]
#[allow(dead_code)]
mod scene;

use common::{Skip, no_wgpu_adapter, wgpu_required};
use gpuworld::{ComputeClient, CpuConfig, Driver, WgpuConfig, wgpu};
use scene::{OFFSCREEN_FORMAT, Offscreen, POINT_COLOR, Particles, PointPipeline, SIDE};

test_main![the_offscreen_frame_matches_the_cpu_backends_positions_rasterised_on_the_host];

const PARTICLES: usize = 60_000;
const FRAMES: u32 = 90;
const SEED: u32 = 11;

/// Per pixel, how many points the host puts there: each point in the pixel its window position
/// falls in (x right, y up, as the vertex shader maps the unit box onto the viewport).
fn rasterise(xs: &[f32], ys: &[f32]) -> Vec<u32> {
    let side = SIDE as f32;
    let mut counts = vec![0u32; (SIDE * SIDE) as usize];
    for (&x, &y) in xs.iter().zip(ys) {
        let (column, row) = (x * side, (1.0 - y) * side);
        if (0.0..side).contains(&column) && (0.0..side).contains(&row) {
            counts[row as usize * SIDE as usize + column as usize] += 1;
        }
    }
    counts
}

/// Per pixel, the point count the frame shows: red adds `POINT_COLOR[0]` per point, saturating
/// past 255 / 8 = 31 points (no test pixel comes near: asserted).
fn counts_in(rgba: &[u8]) -> Vec<u32> {
    rgba.chunks_exact(4)
        .map(|pixel| {
            assert_eq!(
                u32::from(pixel[0]) % u32::from(POINT_COLOR[0]),
                0,
                "{pixel:?}"
            );
            u32::from(pixel[0]) / u32::from(POINT_COLOR[0])
        })
        .collect()
}

fn positions<B: gpuworld::Backend>(
    client: &ComputeClient<B>,
    particles: &Particles,
) -> (Vec<f32>, Vec<f32>) {
    let read = |h| bytemuck::cast_slice::<u8, f32>(&client.read_one(h).unwrap()).to_vec();
    (read(&particles.px), read(&particles.py))
}

fn the_offscreen_frame_matches_the_cpu_backends_positions_rasterised_on_the_host()
-> Result<(), Skip> {
    // The renderer's device, and gpuworld's wgpu backend on it.
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter = match pollster::block_on(instance.request_adapter(&Default::default())) {
        Ok(adapter) => adapter,
        Err(error) if wgpu_required() => panic!("GPUWORLD_REQUIRE_WGPU=1 but no adapter: {error}"),
        Err(error) => return Err(no_wgpu_adapter(error)),
    };
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        required_limits: adapter.limits(),
        ..Default::default()
    }))
    .map_err(no_wgpu_adapter)?;
    let gpu = gpuworld::wgpu_client_on_device(
        &adapter,
        device.clone(),
        queue.clone(),
        WgpuConfig::default(),
        Driver::Manual,
    )
    .unwrap();
    let cpu =
        ComputeClient::<gpuworld::CpuBackend>::open(CpuConfig::default(), Driver::Manual).unwrap();

    // The example's offscreen loop: step, lease, draw, submit, let go.
    let particles = Particles::new(&gpu, PARTICLES, SEED);
    let pipeline = PointPipeline::new(&device, OFFSCREEN_FORMAT);
    let target = Offscreen::new(&device);
    for _ in 0..FRAMES {
        particles.step(&gpu).unwrap();
        let xs = gpu.lease(&particles.px).unwrap();
        let ys = gpu.lease(&particles.py).unwrap();
        let mut encoder = device.create_command_encoder(&Default::default());
        pipeline.draw(
            &mut encoder,
            &target.view,
            xs.slice(),
            ys.slice(),
            PARTICLES as u32,
        );
        queue.submit([encoder.finish()]);
    }
    let mut encoder = device.create_command_encoder(&Default::default());
    target.copy_out(&mut encoder);
    queue.submit([encoder.finish()]);
    let frame = counts_in(&target.pixels(&device).unwrap());

    let on_cpu = Particles::new(&cpu, PARTICLES, SEED);
    for _ in 0..FRAMES {
        on_cpu.step(&cpu).unwrap();
    }
    let (xs, ys) = positions(&cpu, &on_cpu);
    let (gpu_xs, gpu_ys) = positions(&gpu, &particles);
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    assert!(
        bits(&xs) == bits(&gpu_xs) && bits(&ys) == bits(&gpu_ys),
        "the integrator's bits differ"
    );

    let reference = rasterise(&xs, &ys);
    assert!(
        reference.iter().all(|&n| n < 31),
        "a pixel saturates: fewer particles"
    );
    let lit = reference.iter().filter(|&&n| n > 0).count();
    assert!(lit > PARTICLES / 2, "only {lit} pixels lit");
    let side = SIDE as i64;
    let at = |x: i64, y: i64| (y * side + x) as usize;
    let mut differing = 0;
    for y in 0..side {
        for x in 0..side {
            let diff = i64::from(frame[at(x, y)]) - i64::from(reference[at(x, y)]);
            if diff == 0 {
                continue;
            }
            differing += 1;
            let compensated = (-1..=1)
                .flat_map(|dy| (-1..=1).map(move |dx| (x + dx, y + dy)))
                .any(|(nx, ny)| {
                    (0..side).contains(&nx)
                        && (0..side).contains(&ny)
                        && (i64::from(frame[at(nx, ny)]) - i64::from(reference[at(nx, ny)]))
                            .signum()
                            == -diff.signum()
                });
            assert!(
                compensated,
                "pixel ({x}, {y}) has {} points, the host puts {} and no neighbour makes up for it",
                frame[at(x, y)],
                reference[at(x, y)]
            );
        }
    }
    assert!(
        differing * 100 <= 3 * lit,
        "{differing} of {lit} lit pixels differ"
    );
    eprintln!("{differing} of {lit} lit pixels differ by a point moved to a neighbour");
    Ok(())
}
