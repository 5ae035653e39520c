//! Generated kernels against the hand-written ones they replaced, side by side in one run on
//! every backend this build and machine have, through the public client (a device-thread cpu
//! client; `launch` × N, then one `sync`), alternated over 7 rounds: the median per launch of
//! each, their ratio, and the client's memory in use and reserved after the rounds.
//! - The stencil, steps of a heat-diffusion grid (2048², cpu 1024²) ping-pong between two
//!   buffers: a fully generated copy of `library::STENCIL`'s source against the hand-written WGSL
//!   and CUDA C kept here, and on cpu against `library::STENCIL`, which keeps its hand-written CPU
//!   source (the generated one took 2x on 16 cores).
//! - On cpu, `library::ADD` (generated) against the hand-written `map_f32` add, 4M elements.
//! - The ports of 2026-12-06 (`common/hand_kernels.rs` keeps the hand-written sources they
//!   replaced): the library's `REDUCE_SUM_TREE4` and `REDUCE_SUM_STRIDED` (16M elements, one
//!   pass), `MATMUL_NAIVE`, `MATMUL_4X4` and `MATMUL_TILED16` (1024³), and
//!   `examples/bevy_particles.rs`'s integrator (4M particles), on wgpu and CUDA; the reduce
//!   variants also on cpu, against the plain-loop CPU sources they had.
//! - The boids showcase (`examples/boids`) at 1M boids, time per tick (enqueue and `sync`): on
//!   CUDA against the same algorithm written by hand in CUDA C (`common/boids_cuda.rs`),
//!   through the same `Flock::tick_with`; on wgpu the generated code alone.
//! - The exact math against the hardware's (`common/math_kernels.rs`): per function, 4M
//!   elements × 16 calls, on wgpu and CUDA.
//!
//! Each line gives the median per launch (or tick) of 7 rounds and, in brackets, the rounds'
//! fastest and slowest. `cargo bench --bench kernels [--features wgpu,cuda]`; on the GPU machine
//! run the built binary; `GPUWORLD_KERNELS_BENCH=ports,variants,boids,math` picks parts
//! (default all).

#[path = "common/boids_cuda.rs"]
mod boids_cuda;
#[path = "common/hand_kernels.rs"]
mod hand;
#[path = "common/math_kernels.rs"]
mod math;
#[path = "common/port_variants.rs"]
mod variants;

use boids_cuda::world::{Flock, Kernels};
use gpuworld::kernel::{CpuSource, CudaSource, KernelDef, Param, Signature, WgslSource};
use gpuworld::library::STENCIL_TILE;
use gpuworld::{Backend, Bindings, ComputeClient, CubeCount, Driver};
use std::time::{Duration, Instant};

const STENCIL_WGSL: WgslSource = WgslSource(concat!(
    "fn load(i: u32) -> f32 {
    if i < arrayLength(&u) {
        return u[i];
    }
    return 0.0;
}

",
    "@compute @workgroup_size(16, 16, 1)
fn main(
    @builtin(workgroup_id) cube: vec3<u32>,
    @builtin(local_invocation_id) unit: vec3<u32>,
) {
",
    "    let width = scalars.width;
    let height = scalars.height;
    let x = cube.x * 16u + unit.x;
    let y = cube.y * 16u + unit.y;
    if x >= width || y >= height {
        return;
    }
    let i = y * width + x;
    let center = load(i);
    var value = center;
    let border = x == 0u || y == 0u || x + 1u == width || y + 1u == height;
    if !border {
        let sum = load(i - 1u) + load(i + 1u) + load(i - width) + load(i + width);
        value = center + scalars.alpha * (sum - 4.0 * center);
    }
    if i < arrayLength(&out) {
        out[i] = value;
    }
}
"
));

const STENCIL_CUDA: CudaSource = CudaSource(
    r#"
__device__ __forceinline__ float gw_load(const float* b, unsigned int n, unsigned long long i) {
    return GW_IN_BOUNDS(i, n) ? b[i] : 0.0f;
}

extern "C" __global__ void stencil2d(GW_PARAMS) {
    GW_FOR_EACH_CUBE {
        const unsigned long long x = (unsigned long long)GW_CUBE_X * blockDim.x + threadIdx.x;
        const unsigned long long y = (unsigned long long)GW_CUBE_Y * blockDim.y + threadIdx.y;
        if (x >= width || y >= height) continue;
        const unsigned long long i = y * width + x;
        const float center = gw_load(u, u_len, i);
        const bool border = x == 0 || y == 0 || x + 1 == width || y + 1 == height;
        float value = center;
        if (!border) {
            const float sum = gw_load(u, u_len, i - 1) + gw_load(u, u_len, i + 1)
                + gw_load(u, u_len, i - width) + gw_load(u, u_len, i + width);
            value = center + alpha * (sum - 4.0f * center);
        }
        if (GW_IN_BOUNDS(i, out_len)) out[i] = value;
    }
}
"#,
);

/// The hand-written stencil's WGSL and CUDA C, as the library had them: one explicit
/// heat-diffusion step on a `width x height` grid with fixed borders. Its hand-written CPU source
/// is still the library's (`library::STENCIL` on the cpu backend).
static HAND_STENCIL: KernelDef = KernelDef {
    id: "bench.hand_stencil2d",
    name: "stencil2d",
    signature: Signature {
        buffers: &[Param::f32("u").read_only(), Param::f32("out")],
        scalars: &[
            Param::u32("width"),
            Param::u32("height"),
            Param::f32("alpha"),
        ],
        cube_dim: [STENCIL_TILE, STENCIL_TILE, 1],
    },
    sources: &[&STENCIL_WGSL, &STENCIL_CUDA],
};

/// The hand-written `ADD` the generated one replaced: a CPU source only (its WGSL and CUDA C were
/// one bounds check and one add per element, like the generated ones).
static HAND_ADD: KernelDef = KernelDef {
    id: "bench.hand_add",
    name: "add",
    signature: Signature {
        buffers: &[
            Param::f32("a").read_only(),
            Param::f32("b").read_only(),
            Param::f32("out"),
        ],
        scalars: &[],
        cube_dim: [256, 1, 1],
    },
    sources: &[&CpuSource(|cube, io| {
        io.map_f32(cube.units_1d(io.len32(2)), [0, 1], 2, |[a, b]| a + b);
    })],
};

gpuworld::library::stencil2d_kernel! {
    /// `library::STENCIL`'s source, every backend's generated (the library's keeps a
    /// hand-written CPU source).
    #[gpuworld::kernel(id = "bench.generated_stencil2d", cube_dim = [16, 16, 1])]
    fn generated_stencil2d
}

/// The time per launch of `launches` launches of `kernel`, launch `i` with `shape(i)`'s cube count
/// and bindings, then one `sync`.
fn time_launches<B: Backend>(
    client: &ComputeClient<B>,
    kernel: &'static KernelDef,
    launches: u32,
    shape: &dyn Fn(u32) -> (CubeCount, Bindings),
) -> Duration {
    let start = Instant::now();
    for i in 0..launches {
        let (cubes, bindings) = shape(i);
        client
            .launch(kernel, cubes, bindings)
            .expect("the kernel launches");
    }
    client.sync().expect("the launches run");
    start.elapsed() / launches
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// `median [fastest–slowest]` of `times`, in microseconds.
fn spread(times: &[Duration]) -> String {
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let fastest = times.iter().min().copied().unwrap_or_default();
    let slowest = times.iter().max().copied().unwrap_or_default();
    format!(
        "{:.1} us [{:.1}–{:.1}]",
        us(median(times.to_vec())),
        us(fastest),
        us(slowest)
    )
}

/// `generated` and `hand_written` alternated over 7 rounds of `launches` each (after a warm-up
/// that compiles both); prints their medians per launch, their ratio and the client's memory.
fn compare<B: Backend>(
    what: &str,
    client: &ComputeClient<B>,
    [generated, hand_written]: [&'static KernelDef; 2],
    launches: u32,
    shape: &dyn Fn(u32) -> (CubeCount, Bindings),
) {
    time_launches(client, generated, 2, shape);
    time_launches(client, hand_written, 2, shape);
    let (mut times_generated, mut times_hand) = (Vec::new(), Vec::new());
    for round in 0..7 {
        let measure = |kernel, times: &mut Vec<Duration>| {
            times.push(time_launches(client, kernel, launches, shape));
        };
        if round % 2 == 0 {
            measure(generated, &mut times_generated);
            measure(hand_written, &mut times_hand);
        } else {
            measure(hand_written, &mut times_hand);
            measure(generated, &mut times_generated);
        }
    }
    let (generated, hand) = (median(times_generated.clone()), median(times_hand.clone()));
    let memory = client.memory_usage();
    println!(
        "{}: {what}, per launch: generated {}, hand-written {}, generated / hand-written {:.3}; in use {:.1} MiB, reserved {:.1} MiB",
        B::NAME,
        spread(&times_generated),
        spread(&times_hand),
        generated.as_secs_f64() / hand.as_secs_f64(),
        memory.bytes_in_use as f64 / (1 << 20) as f64,
        memory.bytes_reserved as f64 / (1 << 20) as f64,
    );
}

/// Steps of the stencil on a `side x side` grid, ping-pong between two buffers.
fn compare_stencils<B: Backend>(
    client: &ComputeClient<B>,
    hand_written: &'static KernelDef,
    side: u32,
    steps: u32,
) {
    let initial: Vec<f32> = (0..side * side)
        .map(|i| ((i * 7919) % 1000) as f32 / 1000.0)
        .collect();
    let grids = [
        client.create_from_pod(&initial),
        client.create_from_pod(&initial),
    ];
    let shape = |step: u32| {
        let (from, to) = (&grids[(step % 2) as usize], &grids[(1 - step % 2) as usize]);
        let bindings = Bindings::new()
            .buffer(from)
            .buffer(to)
            .scalar_u32(side)
            .scalar_u32(side)
            .scalar_f32(0.2);
        (CubeCount::covering_2d(side, side, STENCIL_TILE), bindings)
    };
    let what = format!("stencil {side}x{side}");
    compare(
        &what,
        client,
        [&generated_stencil2d, hand_written],
        steps,
        &shape,
    );
}

/// `out = a + b` over `n` elements: `library::ADD` against [`HAND_ADD`].
fn compare_adds<B: Backend>(client: &ComputeClient<B>, n: u32) {
    let values: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let (a, b) = (
        client.create_from_pod(&values),
        client.create_from_pod(&values),
    );
    let out = client.empty(4 * u64::from(n));
    let shape = |_| {
        let bindings = Bindings::new().buffer(&a).buffer(&b).buffer(&out);
        (CubeCount::covering(u64::from(n), 256), bindings)
    };
    let what = format!("add {n} elements");
    compare(
        &what,
        client,
        [&gpuworld::library::ADD, &HAND_ADD],
        10,
        &shape,
    );
}

/// One pass of a reduce variant over `n` elements in `cubes` cubes: `generated` against
/// `hand_written`.
fn compare_reduce<B: Backend>(
    client: &ComputeClient<B>,
    [generated, hand_written]: [&'static KernelDef; 2],
    n: u32,
    cubes: u32,
    launches: u32,
) {
    let values: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 * 0.001).collect();
    let input = client.create_from_pod(&values);
    let output = client.empty(4 * u64::from(cubes));
    let shape = |_| {
        let bindings = Bindings::new().buffer(&input).buffer(&output).scalar_u32(n);
        (CubeCount::new_1d(cubes), bindings)
    };
    let what = format!("{} {n} elements, {cubes} cubes", generated.name);
    compare(&what, client, [generated, hand_written], launches, &shape);
}

/// `c = a · b` for `side × side` matrices: `generated` against `hand_written`, `tile` outputs
/// per cube side.
fn compare_matmul<B: Backend>(
    client: &ComputeClient<B>,
    [generated, hand_written]: [&'static KernelDef; 2],
    side: u32,
    tile: u32,
    launches: u32,
) {
    let values: Vec<f32> = (0..side * side)
        .map(|i| ((i * 37) % 101) as f32 * 0.01 - 0.5)
        .collect();
    let (a, b) = (
        client.create_from_pod(&values),
        client.create_from_pod(&values),
    );
    let c = client.empty(4 * u64::from(side * side));
    let shape = |_| {
        let bindings = Bindings::new()
            .buffer(&a)
            .buffer(&b)
            .buffer(&c)
            .scalar_u32(side)
            .scalar_u32(side)
            .scalar_u32(side);
        (CubeCount::covering_2d(side, side, tile), bindings)
    };
    let what = format!("{} {side}x{side}x{side}", generated.name);
    compare(&what, client, [generated, hand_written], launches, &shape);
}

/// `examples/bevy_particles.rs`'s integrator over `n` particles: generated against hand-written.
fn compare_integrate<B: Backend>(client: &ComputeClient<B>, n: u32) {
    let start: Vec<f32> = (0..n).map(|i| (i % 997) as f32 / 997.0).collect();
    let buffers: Vec<_> = (0..4).map(|_| client.create_from_pod(&start)).collect();
    let shape = |_| {
        let bindings = buffers
            .iter()
            .fold(Bindings::new(), |b, h| b.buffer(h))
            .scalar_f32(1.0 / 60.0)
            .scalar_f32(9.81);
        (CubeCount::covering(u64::from(n), 256), bindings)
    };
    let what = format!("particles integrate {n}");
    compare(&what, client, [&integrate, &hand::INTEGRATE], 50, &shape);
}

/// The second versions of the matmul ports still over 1.1x (`common/port_variants.rs`) against
/// the hand-written kernels.
fn compare_variants<B: Backend>(client: &ComputeClient<B>) {
    compare_matmul(
        client,
        [&variants::matmul_4x4_v2, &hand::MATMUL_4X4],
        1024,
        64,
        10,
    );
    compare_matmul(
        client,
        [&variants::matmul_tiled16_v2, &hand::MATMUL_TILED16],
        1024,
        16,
        10,
    );
}

/// The ports on a GPU backend: reduce, matmul, the particle integrator.
fn compare_ports<B: Backend>(client: &ComputeClient<B>) {
    use gpuworld::library::{matmul as mm, reduce as rd};
    let n = 1 << 24;
    compare_reduce(
        client,
        [&rd::REDUCE_SUM_TREE4, &hand::REDUCE_SUM_TREE4],
        n,
        n.div_ceil(rd::TREE4_ELEMENTS_PER_CUBE),
        50,
    );
    compare_reduce(
        client,
        [&rd::REDUCE_SUM_STRIDED, &hand::REDUCE_SUM_STRIDED],
        n,
        1024,
        50,
    );
    compare_matmul(
        client,
        [&mm::MATMUL_NAIVE, &hand::MATMUL_NAIVE],
        1024,
        16,
        10,
    );
    compare_matmul(client, [&mm::MATMUL_4X4, &hand::MATMUL_4X4], 1024, 64, 10);
    compare_matmul(
        client,
        [&mm::MATMUL_TILED16, &hand::MATMUL_TILED16],
        1024,
        16,
        10,
    );
    compare_integrate(client, 1 << 22);
}

/// The time per tick of `ticks` ticks of `flock` with `kernels`, each tick enqueued, then one
/// `sync`.
fn time_ticks<B: Backend>(
    client: &ComputeClient<B>,
    flock: &mut Flock,
    kernels: &Kernels,
    ticks: u32,
) -> Duration {
    let start = Instant::now();
    for _ in 0..ticks {
        flock.tick_with(client, kernels).expect("a tick enqueues");
    }
    client.sync().expect("the ticks run");
    start.elapsed() / ticks
}

/// Boids at `count`: the generated kernels, and where given the hand-written ones, each on a
/// flock of its own from the same start, alternated over 7 rounds of `ticks` ticks.
fn compare_boids<B: Backend>(
    client: &ComputeClient<B>,
    hand_written: Option<&Kernels>,
    count: u32,
    ticks: u32,
) {
    let mut generated_flock = Flock::new(client, count);
    let mut hand_flock = hand_written.map(|_| Flock::new(client, count));
    // The first tick compiles the kernels.
    time_ticks(client, &mut generated_flock, &Kernels::FLOCK, 1);
    if let (Some(flock), Some(kernels)) = (hand_flock.as_mut(), hand_written) {
        time_ticks(client, flock, kernels, 1);
    }
    let (mut generated, mut hand) = (Vec::new(), Vec::new());
    for round in 0..7 {
        let mut run_hand = |hand: &mut Vec<Duration>| {
            if let (Some(flock), Some(kernels)) = (hand_flock.as_mut(), hand_written) {
                hand.push(time_ticks(client, flock, kernels, ticks));
            }
        };
        if round % 2 == 1 {
            run_hand(&mut hand);
        }
        generated.push(time_ticks(
            client,
            &mut generated_flock,
            &Kernels::FLOCK,
            ticks,
        ));
        if round % 2 == 0 {
            run_hand(&mut hand);
        }
    }
    let memory = client.memory_usage();
    let mib = |bytes: u64| bytes as f64 / (1 << 20) as f64;
    let hand_text = if hand.is_empty() {
        "no hand-written version on this backend".to_string()
    } else {
        format!(
            "hand-written CUDA C {}, generated / hand-written {:.3}",
            spread(&hand),
            median(generated.clone()).as_secs_f64() / median(hand.clone()).as_secs_f64()
        )
    };
    println!(
        "{}: boids {count} ({} ticks per round, after {} ticks), per tick: generated {}, {hand_text}; in use {:.1} MiB, reserved {:.1} MiB",
        B::NAME,
        ticks,
        1 + 7 * ticks,
        spread(&generated),
        mib(memory.bytes_in_use),
        mib(memory.bytes_reserved),
    );
}

/// Each function's exact kernel against its hardware one over `n` elements.
fn compare_math<B: Backend>(client: &ComputeClient<B>, n: u32) {
    let values: Vec<f32> = (0..n).map(|i| 0.1 + (i % 2048) as f32 / 1024.0).collect();
    let x = client.create_from_pod(&values);
    let out = client.empty(4 * u64::from(n));
    let shape = |_| {
        let bindings = Bindings::new().buffer(&x).buffer(&out);
        (CubeCount::covering(u64::from(n), 256), bindings)
    };
    for (function, exact, native) in math::PAIRS {
        let what = format!(
            "math {function} ({n} elements x 16; 'generated' = exact, 'hand-written' = native)"
        );
        compare(&what, client, [exact, native], 20, &shape);
    }
}

/// Whether the part `name` of the bench runs (`GPUWORLD_KERNELS_BENCH`, default all).
fn part(name: &str) -> bool {
    match std::env::var("GPUWORLD_KERNELS_BENCH") {
        Ok(parts) => parts.split(',').any(|p| p == name),
        Err(_) => true,
    }
}

/// The boids per tick, at 1M unless `GPUWORLD_BOIDS` says otherwise.
fn boids_count() -> u32 {
    std::env::var("GPUWORLD_BOIDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000)
}

/// `examples/bevy_particles.rs`'s integrator (a copy: an example cannot be a dependency).
#[gpuworld::kernel(id = "bench.generated_integrate", cube_dim = 256)]
fn integrate(
    px: &mut [f32],
    py: &mut [f32],
    vx: &mut [f32],
    vy: &mut [f32],
    dt: f32,
    gravity: f32,
) {
    let i = global_index();
    if i < px.len() {
        let mut u = vx[i];
        let mut w = vy[i] - gravity * dt;
        let mut x = px[i] + u * dt;
        let mut y = py[i] + w * dt;
        if x < 0.0 {
            x = -x;
            u = -u;
        } else if x > 1.0 {
            x = 2.0 - x;
            u = -u;
        }
        if y < 0.0 {
            y = -y;
            w = -w;
        } else if y > 1.0 {
            y = 2.0 - y;
            w = -w;
        }
        px[i] = x;
        py[i] = y;
        vx[i] = u;
        vy[i] = w;
    }
}

fn main() {
    let client = gpuworld::cpu_client(Driver::DeviceThread).expect("the cpu client opens");
    if part("ports") {
        // The library's stencil keeps its hand-written CPU source: it is the hand-written one here.
        compare_stencils(&client, &gpuworld::library::STENCIL, 1024, 10);
        compare_adds(&client, 1 << 22);
        use gpuworld::library::reduce as rd;
        let n = 1 << 22;
        compare_reduce(
            &client,
            [&rd::REDUCE_SUM_TREE4, &hand::REDUCE_SUM_TREE4],
            n,
            n.div_ceil(rd::TREE4_ELEMENTS_PER_CUBE),
            5,
        );
        compare_reduce(
            &client,
            [&rd::REDUCE_SUM_STRIDED, &hand::REDUCE_SUM_STRIDED],
            n,
            64,
            5,
        );
    }
    drop(client);
    #[cfg(feature = "wgpu")]
    match gpuworld::wgpu_client(gpuworld::WgpuConfig::default()) {
        Ok(client) => {
            println!("wgpu adapter: {:?}", client.properties().name);
            if part("ports") {
                compare_stencils(&client, &HAND_STENCIL, 2048, 50);
                compare_ports(&client);
            }
            if part("variants") {
                compare_variants(&client);
            }
            if part("boids") {
                compare_boids(&client, None, boids_count(), 20);
            }
            if part("math") {
                compare_math(&client, 1 << 22);
            }
        }
        Err(error) => eprintln!("SKIPPED wgpu: {error}"),
    }
    #[cfg(feature = "cuda")]
    match gpuworld::cuda_client(gpuworld::CudaConfig::default()) {
        Ok(client) => {
            println!("cuda device: {:?}", client.properties().name);
            if part("ports") {
                compare_stencils(&client, &HAND_STENCIL, 2048, 50);
                compare_ports(&client);
            }
            if part("variants") {
                compare_variants(&client);
            }
            if part("boids") {
                compare_boids(&client, Some(&boids_cuda::KERNELS), boids_count(), 20);
            }
            if part("math") {
                compare_math(&client, 1 << 22);
            }
        }
        Err(error) => eprintln!("SKIPPED cuda: {error}"),
    }
}
