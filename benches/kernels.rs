//! The generated stencil (the source of `library::STENCIL`, as one `#[gpuworld::kernel]` with
//! every backend's source generated) against the hand-written one it replaced (its CPU, WGSL and
//! CUDA C sources, kept here), side by side in one run on every backend this build and machine
//! have (`library::STENCIL` itself keeps the hand-written CPU source, 2x faster on 16 cores): steps of a 2048 x 2048 heat-diffusion grid,
//! ping-pong between two buffers, through the public client (`launch` × 50, then `sync`), the two
//! kernels alternated over 7 rounds; the median per step of each, and their ratio.
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

/// The median time of `rounds` launches of `kernel` over `n` elements, then `sync`.
fn time_adds<B: Backend>(
    client: &ComputeClient<B>,
    kernel: &'static KernelDef,
    buffers: &[gpuworld::Handle; 3],
    n: u64,
) -> Duration {
    let start = Instant::now();
    for _ in 0..10 {
        client
            .launch(
                kernel,
                CubeCount::covering(n, 256),
                Bindings::new()
                    .buffer(&buffers[0])
                    .buffer(&buffers[1])
                    .buffer(&buffers[2]),
            )
            .expect("add launches");
    }
    client.sync().expect("the adds run");
    start.elapsed() / 10
}

/// `library::ADD` against [`HAND_ADD`] on the cpu backend.
fn compare_add<B: Backend>(name: &str, client: &ComputeClient<B>, n: u64) {
    let values: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let buffers = [
        client.create_from_pod(&values),
        client.create_from_pod(&values),
        client.empty(4 * n),
    ];
    let (mut generated, mut hand) = (Vec::new(), Vec::new());
    for _ in 0..7 {
        generated.push(time_adds(client, &gpuworld::library::ADD, &buffers, n));
        hand.push(time_adds(client, &HAND_ADD, &buffers, n));
    }
    let (generated, hand) = (median(generated), median(hand));
    println!(
        "{name}: add {n} elements: generated {:.1} us, hand-written {:.1} us, generated / hand-written {:.3}",
        generated.as_secs_f64() * 1e6,
        hand.as_secs_f64() * 1e6,
        generated.as_secs_f64() / hand.as_secs_f64()
    );
}

/// `library::STENCIL`'s source, every backend's generated (the library's keeps a hand-written CPU
/// source).
#[gpuworld::kernel(id = "bench.generated_stencil2d", cube_dim = [16, 16, 1])]
fn generated_stencil2d(u: &[f32], out: &mut [f32], width: u32, height: u32, alpha: f32) {
    let x = cube_x() * 16 + unit_x();
    let y = cube_y() * 16 + unit_y();
    if x < width && y < height {
        let i = y * width + x;
        let center = u[i];
        let mut value = center;
        if x > 0 && y > 0 && x + 1 < width && y + 1 < height {
            let sum = u[i - 1] + u[i + 1] + u[i - width] + u[i + width];
            value = center + alpha * (sum - 4.0 * center);
        }
        out[i] = value;
    }
}

/// The median per step of `kernel`: `steps` launches between two grids, then `sync`.
fn time_steps<B: Backend>(
    client: &ComputeClient<B>,
    kernel: &'static KernelDef,
    grids: &[gpuworld::Handle; 2],
    side: u32,
    steps: u32,
) -> Duration {
    let start = Instant::now();
    for step in 0..steps {
        let (from, to) = (&grids[(step % 2) as usize], &grids[(1 - step % 2) as usize]);
        client
            .launch(
                kernel,
                CubeCount::covering_2d(side, side, STENCIL_TILE),
                Bindings::new()
                    .buffer(from)
                    .buffer(to)
                    .scalar_u32(side)
                    .scalar_u32(side)
                    .scalar_f32(0.2),
            )
            .expect("the stencil launches");
    }
    client.sync().expect("the steps run");
    start.elapsed() / steps
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// Both kernels on `client`, alternated; prints one line.
fn compare<B: Backend>(
    name: &str,
    client: &ComputeClient<B>,
    hand_written: &'static KernelDef,
    side: u32,
    steps: u32,
) {
    let cells = (side * side) as usize;
    let initial: Vec<f32> = (0..cells)
        .map(|i| ((i * 7919) % 1000) as f32 / 1000.0)
        .collect();
    let grids = [
        client.create_from_pod(&initial),
        client.create_from_pod(&initial),
    ];
    // Warm up: compile both and touch the memory.
    time_steps(client, &generated_stencil2d, &grids, side, 2);
    time_steps(client, hand_written, &grids, side, 2);
    let (mut generated, mut hand) = (Vec::new(), Vec::new());
    for round in 0..7 {
        if round % 2 == 0 {
            generated.push(time_steps(
                client,
                &generated_stencil2d,
                &grids,
                side,
                steps,
            ));
            hand.push(time_steps(client, hand_written, &grids, side, steps));
        } else {
            hand.push(time_steps(client, hand_written, &grids, side, steps));
            generated.push(time_steps(
                client,
                &generated_stencil2d,
                &grids,
                side,
                steps,
            ));
        }
    }
    let (generated, hand) = (median(generated), median(hand));
    println!(
        "{name}: stencil {side}x{side}, per step: generated {:.1} us, hand-written {:.1} us, generated / hand-written {:.3}",
        generated.as_secs_f64() * 1e6,
        hand.as_secs_f64() * 1e6,
        generated.as_secs_f64() / hand.as_secs_f64()
    );
}

fn main() {
    // The same values from both, on this backend, before timing them.
    let client = gpuworld::cpu_client(Driver::DeviceThread).expect("the cpu client opens");
    compare("cpu", &client, &gpuworld::library::STENCIL, 1024, 10);
    compare_add("cpu", &client, 1 << 22);
    drop(client);
    #[cfg(feature = "wgpu")]
    match gpuworld::wgpu_client(gpuworld::WgpuConfig::default()) {
        Ok(client) => compare("wgpu", &client, &HAND_STENCIL, 2048, 50),
        Err(error) => eprintln!("SKIPPED wgpu: {error}"),
    }
    #[cfg(feature = "cuda")]
    match gpuworld::cuda_client(gpuworld::CudaConfig::default()) {
        Ok(client) => compare("cuda", &client, &HAND_STENCIL, 2048, 50),
        Err(error) => eprintln!("SKIPPED cuda: {error}"),
    }
}
