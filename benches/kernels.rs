//! Generated kernels against the hand-written ones they replaced, side by side in one run on
//! every backend this build and machine have, through the public client (a device-thread cpu
//! client; `launch` × N, then one `sync`), alternated over 7 rounds: the median per launch of
//! each, their ratio, and the client's memory in use and reserved after the rounds.
//! - The stencil, steps of a heat-diffusion grid (2048², cpu 1024²) ping-pong between two
//!   buffers: a fully generated copy of `library::STENCIL`'s source against the hand-written WGSL
//!   and CUDA C kept here, and on cpu against `library::STENCIL`, which keeps its hand-written CPU
//!   source (the generated one took 2x on 16 cores).
//! - On cpu, `library::ADD` (generated) against the hand-written `map_f32` add, 4M elements.
//!
//! `cargo bench --bench kernels [--features wgpu,cuda]`; on the GPU machine run the built binary.

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
    let (generated, hand) = (median(times_generated), median(times_hand));
    let memory = client.memory_usage();
    println!(
        "{}: {what}, per launch: generated {:.1} us, hand-written {:.1} us, generated / hand-written {:.3}; in use {:.1} MiB, reserved {:.1} MiB",
        B::NAME,
        generated.as_secs_f64() * 1e6,
        hand.as_secs_f64() * 1e6,
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

fn main() {
    let client = gpuworld::cpu_client(Driver::DeviceThread).expect("the cpu client opens");
    // The library's stencil keeps its hand-written CPU source: it is the hand-written one here.
    compare_stencils(&client, &gpuworld::library::STENCIL, 1024, 10);
    compare_adds(&client, 1 << 22);
    drop(client);
    #[cfg(feature = "wgpu")]
    match gpuworld::wgpu_client(gpuworld::WgpuConfig::default()) {
        Ok(client) => compare_stencils(&client, &HAND_STENCIL, 2048, 50),
        Err(error) => eprintln!("SKIPPED wgpu: {error}"),
    }
    #[cfg(feature = "cuda")]
    match gpuworld::cuda_client(gpuworld::CudaConfig::default()) {
        Ok(client) => compare_stencils(&client, &HAND_STENCIL, 2048, 50),
        Err(error) => eprintln!("SKIPPED cuda: {error}"),
    }
}
