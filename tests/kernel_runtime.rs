//! The runtime side of kernels on every backend: a launch over the device's limits is refused by
//! `launch` itself, typed, with nothing queued; an error a CPU kernel's launch returns typed
//! prints no panic message; hand-written atomics give exact counts everywhere; the cpu and sim
//! backends find races of checked launches.

mod common;

use common::Skip;
use gpuworld::error::{ExecutionError, LaunchError};
use gpuworld::testing::{BackendTest, TestBackend};
use gpuworld::{
    Backend, Bindings, ComputeClient, CpuSource, CubeCount, Error, KernelDef, Param, Signature,
};

test_main![
    limits::on_cpu,
    limits::on_sim,
    limits::on_wgpu,
    limits::on_cuda,
    a_dynamic_count_over_the_limit_is_the_streams_fault_on_cpu_and_sim,
    a_dynamic_count_over_the_limit_runs_no_cube_on_wgpu,
    a_store_to_a_read_only_buffer_prints_no_panic_message,
    read_only_store_in_a_child,
    histogram::on_cpu,
    histogram::on_sim,
    histogram::on_wgpu,
    histogram::on_cuda,
    a_histogram_without_atomics_is_a_race_named_with_its_element_and_units_on_sim,
    a_histogram_without_atomics_is_a_race_on_cpu,
    kernels_that_share_nothing_or_only_atomics_and_shared_memory_are_no_race,
    exact_division::on_cpu,
    exact_division::on_sim,
    exact_division::on_wgpu,
    exact_division::on_cuda,
    the_wgsl_of_division_and_square_root_is_the_exact_one,
    transcendentals::on_cpu,
    transcendentals::on_sim,
    transcendentals::on_wgpu,
    transcendentals::on_cuda,
    the_cuda_text_of_the_transcendentals_gives_the_reference_bits_as_host_cpp,
];

/// `out[i] = i`, 64 units per cube, with a source for every backend this build has.
macro_rules! kernel_with_sources {
    ($name:literal, $dim:expr, $($source:expr),*) => {
        KernelDef {
            id: concat!("kernel_runtime.", $name),
            name: $name,
            signature: Signature {
                buffers: &[Param::u32("out")],
                scalars: &[],
                cube_dim: $dim,
            },
            sources: &[$($source),*],
        }
    };
}

const INDEX_CPU: CpuSource = CpuSource(|cube, io| {
    for i in cube.units_1d(io.len32(0)) {
        io.store_u32(0, i, i as u32);
    }
});

#[cfg(feature = "wgpu")]
const INDEX_WGSL: gpuworld::WgslSource = gpuworld::WgslSource(
    "@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < arrayLength(&out) { out[id.x] = id.x; }
}",
);

#[cfg(feature = "cuda")]
const INDEX_CUDA: gpuworld::CudaSource = gpuworld::CudaSource(
    r#"
extern "C" __global__ void index(GW_PARAMS) {
    GW_FOR_EACH_CUBE {
        unsigned int i = GW_FIRST_UNIT_1D + threadIdx.x;
        if (GW_IN_BOUNDS(i, out_len)) out[i] = i;
    }
}
"#,
);

/// The WGSL of a cube of 4,096 units: over every device's limit, so never compiled.
#[cfg(feature = "wgpu")]
const HUGE_WGSL: gpuworld::WgslSource =
    gpuworld::WgslSource("@compute @workgroup_size(4096)\nfn main() {}\n");

#[cfg(feature = "cuda")]
const HUGE_CUDA: gpuworld::CudaSource =
    gpuworld::CudaSource("extern \"C\" __global__ void huge(GW_PARAMS) {}\n");

#[cfg(all(feature = "wgpu", feature = "cuda"))]
mod kernels {
    use super::*;
    pub static INDEX: KernelDef =
        kernel_with_sources!("index", [64, 1, 1], &INDEX_CPU, &INDEX_WGSL, &INDEX_CUDA);
    pub static HUGE: KernelDef =
        kernel_with_sources!("huge", [4096, 1, 1], &INDEX_CPU, &HUGE_WGSL, &HUGE_CUDA);
}
#[cfg(all(feature = "wgpu", not(feature = "cuda")))]
mod kernels {
    use super::*;
    pub static INDEX: KernelDef =
        kernel_with_sources!("index", [64, 1, 1], &INDEX_CPU, &INDEX_WGSL);
    pub static HUGE: KernelDef = kernel_with_sources!("huge", [4096, 1, 1], &INDEX_CPU, &HUGE_WGSL);
}
#[cfg(all(not(feature = "wgpu"), feature = "cuda"))]
mod kernels {
    use super::*;
    pub static INDEX: KernelDef =
        kernel_with_sources!("index", [64, 1, 1], &INDEX_CPU, &INDEX_CUDA);
    pub static HUGE: KernelDef = kernel_with_sources!("huge", [4096, 1, 1], &INDEX_CPU, &HUGE_CUDA);
}
#[cfg(not(any(feature = "wgpu", feature = "cuda")))]
mod kernels {
    use super::*;
    pub static INDEX: KernelDef = kernel_with_sources!("index", [64, 1, 1], &INDEX_CPU);
    pub static HUGE: KernelDef = kernel_with_sources!("huge", [4096, 1, 1], &INDEX_CPU);
}
use kernels::{HUGE, INDEX};

/// A cube count one past the device's limit along each axis in turn, and a cube dim over it,
/// are refused by `launch` with the limit and the value; the runtime then runs a launch within
/// them.
struct LaunchesOverTheLimitsAreRefused;

impl BackendTest for LaunchesOverTheLimitsAreRefused {
    fn run<B: Backend>(&self, client: &ComputeClient<B>) {
        let properties = client.properties().clone();
        let out = client.empty(256 * 4);
        for axis in 0..3 {
            let mut count = [1u32; 3];
            let Some(over) = properties.max_cube_count[axis].checked_add(1) else {
                continue;
            };
            count[axis] = over;
            let [x, y, z] = count;
            let refused = client.launch(
                &INDEX,
                CubeCount::Static(x, y, z),
                Bindings::new().buffer(&out),
            );
            let Err(Error::Launch(LaunchError::CubeCountOverLimit {
                kernel,
                count: named,
                axis: along,
                limit,
                dynamic: false,
            })) = refused
            else {
                panic!("{} cubes along axis {axis}: {refused:?}", count[axis]);
            };
            assert_eq!(
                (kernel, named, along, limit),
                ("index", count, ["x", "y", "z"][axis], over - 1)
            );
        }
        let refused = client.launch(&HUGE, CubeCount::new_1d(1), Bindings::new().buffer(&out));
        let Err(Error::Launch(LaunchError::CubeDimOverLimit {
            kernel: "huge",
            cube_dim: [4096, 1, 1],
            value,
            limit,
            ..
        })) = refused
        else {
            panic!("a cube of 4,096 units: {refused:?}");
        };
        assert!(value > limit, "{value} over {limit}");
        assert!(
            limit == u64::from(properties.max_cube_dim[0])
                || limit == u64::from(properties.max_units_per_cube),
            "{limit}"
        );
        // Nothing was queued: the stream has no fault, and the next launch runs.
        client
            .launch(&INDEX, CubeCount::new_1d(4), Bindings::new().buffer(&out))
            .unwrap();
        let got: Vec<u32> = client.read_one_as(&out).unwrap();
        assert_eq!(got, (0..256).collect::<Vec<u32>>());
    }
}

mod limits {
    use super::*;

    pub fn on_cpu() -> Result<(), Skip> {
        Ok(TestBackend::Cpu.run(&LaunchesOverTheLimitsAreRefused)?)
    }

    pub fn on_sim() -> Result<(), Skip> {
        Ok(TestBackend::Sim.run(&LaunchesOverTheLimitsAreRefused)?)
    }

    pub fn on_wgpu() -> Result<(), Skip> {
        Ok(TestBackend::Wgpu.run(&LaunchesOverTheLimitsAreRefused)?)
    }

    pub fn on_cuda() -> Result<(), Skip> {
        Ok(TestBackend::Cuda.run(&LaunchesOverTheLimitsAreRefused)?)
    }
}

/// A count read from a buffer is known only when the launch runs: the cpu and sim backends run
/// no cube of it and report it at the stream's next sync, then go on.
fn a_dynamic_count_over_the_limit_is_the_streams_fault_on_cpu_and_sim() {
    struct Dynamic;
    impl BackendTest for Dynamic {
        fn run<B: Backend>(&self, client: &ComputeClient<B>) {
            let limit = client.properties().max_cube_count[1];
            let out = client.create_from_slice(bytemuck::cast_slice(&[7u32; 64]));
            let count = client.create_from_slice(bytemuck::cast_slice(&[1u32, limit + 1, 1]));
            client
                .launch(
                    &INDEX,
                    CubeCount::Dynamic(count.binding()),
                    Bindings::new().buffer(&out),
                )
                .unwrap();
            let fault = client.sync();
            let Err(Error::Launch(LaunchError::CubeCountOverLimit {
                count,
                axis: "y",
                dynamic: true,
                ..
            })) = &fault
            else {
                panic!("{fault:?}");
            };
            assert_eq!(*count, [1, limit + 1, 1]);
            let message = fault.unwrap_err().to_string();
            assert!(message.contains("it ran no cube"), "{message}");
            let untouched: Vec<u32> = client.read_one_as(&out).unwrap();
            assert_eq!(untouched, [7; 64]);
        }
    }
    TestBackend::Cpu.run(&Dynamic).unwrap();
    TestBackend::Sim.run(&Dynamic).unwrap();
}

/// Stores to its read-only `x`: the launch stops there.
static STORES_TO_INPUT: KernelDef = KernelDef {
    id: "kernel_runtime.stores_to_input",
    name: "stores_to_input",
    signature: Signature {
        buffers: &[Param::u32("x").read_only()],
        scalars: &[],
        cube_dim: [64, 1, 1],
    },
    sources: &[&CpuSource(|_, io| io.store_u32(0, 0, 1))],
};

const CHILD: &str = "GPUWORLD_KERNEL_RUNTIME_CHILD";

/// Runs [`read_only_store_in_a_child`] in a process of its own and reads what it printed: the
/// error comes back typed, and no thread printed a panic message for it.
fn a_store_to_a_read_only_buffer_prints_no_panic_message() {
    let exe = std::env::current_exe().unwrap();
    let child = std::process::Command::new(exe)
        .args(["read_only_store_in_a_child", "--exact", "--test-threads=1"])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&child.stdout);
    let stderr = String::from_utf8_lossy(&child.stderr);
    assert!(child.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("1 passed"), "{stdout}");
    for printed in [&stdout, &stderr] {
        assert!(!printed.contains("panicked"), "{printed}");
    }
}

/// The case [`a_store_to_a_read_only_buffer_prints_no_panic_message`] runs: on the cpu backend
/// (its worker thread) and the sim (the ticking thread), the store is `ReadOnlyStore` at sync.
/// Passes at once outside that child.
fn read_only_store_in_a_child() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    struct ReadOnly;
    impl BackendTest for ReadOnly {
        fn run<B: Backend>(&self, client: &ComputeClient<B>) {
            let x = client.create_from_slice(&[0u8; 256]);
            client
                .launch(
                    &STORES_TO_INPUT,
                    CubeCount::new_1d(2),
                    Bindings::new().buffer(&x),
                )
                .unwrap();
            let fault = client.sync();
            assert!(
                matches!(
                    fault,
                    Err(Error::Execution(ExecutionError::ReadOnlyStore {
                        param: "x",
                        ..
                    }))
                ),
                "{fault:?}"
            );
        }
    }
    TestBackend::Cpu.run(&ReadOnly).unwrap();
    TestBackend::Sim.run(&ReadOnly).unwrap();
}

/// A histogram of `values` into `bins` counts with `atomicAdd`, and with every other commutative
/// atomic: the signed extremes of `value - 5000` (`atomicMin`/`atomicMax` on i32), and of the
/// values as u32, the `or` of `1 << value % 32` and the `xor` of all values.
macro_rules! histogram_with_sources {
    ($($source:expr),*) => {
        KernelDef {
            id: "kernel_runtime.histogram",
            name: "histogram",
            signature: Signature {
                buffers: &[
                    Param::u32("values").read_only(),
                    Param::u32("counts").atomic(),
                    Param::i32("extremes").atomic(),
                    Param::u32("bits").atomic(),
                ],
                scalars: &[Param::u32("bins")],
                cube_dim: [64, 1, 1],
            },
            sources: &[$($source),*],
        }
    };
}

const HISTOGRAM_CPU: CpuSource = CpuSource(|cube, io| {
    let bins = io.scalar_u32(0);
    for i in cube.units_1d(io.len32(0)) {
        let v = io.load_u32(0, i);
        io.atomic_add_u32(1, (v % bins) as usize, 1);
        let s = v as i32 - 5000;
        io.atomic_min_i32(2, 0, s);
        io.atomic_max_i32(2, 1, s);
        io.atomic_or_u32(3, 0, 1 << (v % 32));
        io.atomic_xor_u32(3, 1, v);
        io.atomic_min_u32(3, 2, v);
        io.atomic_max_u32(3, 3, v);
    }
});

#[cfg(feature = "wgpu")]
const HISTOGRAM_WGSL: gpuworld::WgslSource = gpuworld::WgslSource(
    "@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if i >= arrayLength(&values) { return; }
    let v = values[i];
    atomicAdd(&counts[v % scalars.bins], 1u);
    let s = i32(v) - 5000;
    atomicMin(&extremes[0], s);
    atomicMax(&extremes[1], s);
    atomicOr(&bits[0], 1u << (v % 32u));
    atomicXor(&bits[1], v);
    atomicMin(&bits[2], v);
    atomicMax(&bits[3], v);
}",
);

#[cfg(feature = "cuda")]
const HISTOGRAM_CUDA: gpuworld::CudaSource = gpuworld::CudaSource(
    r#"
extern "C" __global__ void histogram(GW_PARAMS) {
    GW_FOR_EACH_CUBE {
        unsigned long long i = GW_FIRST_UNIT_1D + threadIdx.x;
        if (i >= values_len) continue;
        unsigned int v = values[i];
        atomicAdd(&counts[v % bins], 1u);
        int s = (int)v - 5000;
        atomicMin(&extremes[0], s);
        atomicMax(&extremes[1], s);
        atomicOr(&bits[0], 1u << (v % 32u));
        atomicXor(&bits[1], v);
        atomicMin(&bits[2], v);
        atomicMax(&bits[3], v);
    }
}
"#,
);

#[cfg(all(feature = "wgpu", feature = "cuda"))]
static HISTOGRAM: KernelDef =
    histogram_with_sources!(&HISTOGRAM_CPU, &HISTOGRAM_WGSL, &HISTOGRAM_CUDA);
#[cfg(all(feature = "wgpu", not(feature = "cuda")))]
static HISTOGRAM: KernelDef = histogram_with_sources!(&HISTOGRAM_CPU, &HISTOGRAM_WGSL);
#[cfg(all(not(feature = "wgpu"), feature = "cuda"))]
static HISTOGRAM: KernelDef = histogram_with_sources!(&HISTOGRAM_CPU, &HISTOGRAM_CUDA);
#[cfg(not(any(feature = "wgpu", feature = "cuda")))]
static HISTOGRAM: KernelDef = histogram_with_sources!(&HISTOGRAM_CPU);

/// 100,000 values spread unevenly over 0..10,007.
fn histogram_values() -> Vec<u32> {
    (0..100_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 7) % 10_007)
        .collect()
}

/// [`HISTOGRAM`] over [`histogram_values`] into 10 bins gives exactly the counts and extremes
/// the host computes, on every backend.
struct AtomicsCountExactly;

impl BackendTest for AtomicsCountExactly {
    fn run<B: Backend>(&self, client: &ComputeClient<B>) {
        let values = histogram_values();
        let bins = 10u32;
        let mut expected_counts = vec![0u32; bins as usize];
        for v in &values {
            expected_counts[(v % bins) as usize] += 1;
        }
        let signed = values.iter().map(|&v| v as i32 - 5000);
        let expected_extremes = [signed.clone().min().unwrap(), signed.max().unwrap()];
        let expected_bits = [
            values.iter().fold(0, |acc, v| acc | 1 << (v % 32)),
            values.iter().fold(0, |acc, v| acc ^ v),
            *values.iter().min().unwrap(),
            *values.iter().max().unwrap(),
        ];

        let input = client.create_from_slice(bytemuck::cast_slice(&values));
        let counts = client.create_from_slice(bytemuck::cast_slice(&vec![0u32; bins as usize]));
        let extremes = client.create_from_slice(bytemuck::cast_slice(&[i32::MAX, i32::MIN]));
        let bits = client.create_from_slice(bytemuck::cast_slice(&[0, 0, u32::MAX, 0]));
        let bindings = Bindings::new()
            .buffer(&input)
            .buffer(&counts)
            .buffer(&extremes)
            .buffer(&bits)
            .scalar_u32(bins);
        client
            .launch(
                &HISTOGRAM,
                CubeCount::covering(values.len() as u64, 64),
                bindings,
            )
            .unwrap();
        let got_counts: Vec<u32> = client.read_one_as(&counts).unwrap();
        assert_eq!(got_counts, expected_counts);
        assert_eq!(got_counts.iter().sum::<u32>(), 100_000);
        let got_extremes: Vec<i32> = client.read_one_as(&extremes).unwrap();
        assert_eq!(got_extremes, expected_extremes);
        let got_bits: Vec<u32> = client.read_one_as(&bits).unwrap();
        assert_eq!(got_bits, expected_bits);
    }
}

mod histogram {
    use super::*;

    pub fn on_cpu() -> Result<(), Skip> {
        Ok(TestBackend::Cpu.run(&AtomicsCountExactly)?)
    }

    pub fn on_sim() -> Result<(), Skip> {
        Ok(TestBackend::Sim.run(&AtomicsCountExactly)?)
    }

    pub fn on_wgpu() -> Result<(), Skip> {
        Ok(TestBackend::Wgpu.run(&AtomicsCountExactly)?)
    }

    pub fn on_cuda() -> Result<(), Skip> {
        Ok(TestBackend::Cuda.run(&AtomicsCountExactly)?)
    }
}

/// wgpu checks an indirect dispatch on the device and skips one over the limit: no cube runs,
/// and nothing reports it (what `docs/kernels.md` says of dynamic counts there).
fn a_dynamic_count_over_the_limit_runs_no_cube_on_wgpu() -> Result<(), Skip> {
    struct Dynamic;
    impl BackendTest for Dynamic {
        fn run<B: Backend>(&self, client: &ComputeClient<B>) {
            let limit = client.properties().max_cube_count[1];
            let out = client.create_from_slice(bytemuck::cast_slice(&[7u32; 64]));
            let count = client.create_from_slice(bytemuck::cast_slice(&[1u32, limit + 1, 1]));
            client
                .launch(
                    &INDEX,
                    CubeCount::Dynamic(count.binding()),
                    Bindings::new().buffer(&out),
                )
                .unwrap();
            let synced = client.sync();
            let got: Vec<u32> = client.read_one_as(&out).unwrap();
            assert_eq!((synced, got), (Ok(()), vec![7; 64]));
        }
    }
    Ok(TestBackend::Wgpu.run(&Dynamic)?)
}

/// `counts[values[i] % 10] += 1` with a plain load and store: the histogram a first kernel is,
/// which races. Names its units (`at_unit`) as the generated sources do.
static RACY_HISTOGRAM: KernelDef = KernelDef {
    id: "kernel_runtime.racy_histogram",
    name: "racy_histogram",
    signature: Signature {
        buffers: &[Param::u32("values").read_only(), Param::u32("counts")],
        scalars: &[],
        cube_dim: [64, 1, 1],
    },
    sources: &[&CpuSource(|cube, io| {
        let first = cube.first_unit_1d() as usize;
        for unit in 0..cube.units() as u32 {
            io.at_unit(unit);
            let i = first + unit as usize;
            if i >= io.len32(0) {
                continue;
            }
            let bin = (io.load_u32(0, i) % 10) as usize;
            io.store_u32(1, bin, io.load_u32(1, bin) + 1);
        }
    })],
};

/// Launches [`RACY_HISTOGRAM`] over `0..100_000`; the stream's fault at sync.
fn racy_histogram<B: Backend>(client: &ComputeClient<B>) -> Error {
    let values: Vec<u32> = (0..100_000).collect();
    let input = client.create_from_slice(bytemuck::cast_slice(&values));
    let counts = client.create_from_slice(&[0u8; 40]);
    client
        .launch(
            &RACY_HISTOGRAM,
            CubeCount::covering(100_000, 64),
            Bindings::new().buffer(&input).buffer(&counts),
        )
        .unwrap();
    let fault = client
        .sync()
        .expect_err("a histogram without atomics races");
    // The runtime goes on.
    client.sync().unwrap();
    fault
}

/// The sim runs units in order: unit 0 stores to `counts[0]`, and unit 10 is the first to
/// load it after.
fn a_histogram_without_atomics_is_a_race_named_with_its_element_and_units_on_sim() {
    let client = gpuworld::sim_client(Default::default()).unwrap();
    let fault = racy_histogram(&client);
    let message = fault.to_string();
    assert!(
        message.starts_with("kernel `racy_histogram` raced on "),
        "{message}"
    );
    assert!(
        message.contains(
            ": element 0 of buffer `counts` — unit (0, 0, 0) of cube (0, 0, 0) stored to it, and \
             unit (10, 0, 0) of cube (0, 0, 0) loaded it, in one launch, so the result depends \
             on the order units run in"
        ),
        "{message}"
    );
    assert!(message.ends_with("declare the buffer `.atomic()` and change it with atomics"));
}

/// On the cpu backend cubes run on several threads: which two units meet first varies, but the
/// race is found, on one of the ten counts, between two units.
fn a_histogram_without_atomics_is_a_race_on_cpu() {
    if !cfg!(debug_assertions) {
        // The cpu backend tracks races in builds with debug assertions only (docs/kernels.md,
        // as Rust checks overflow); the sim always does (the test below).
        return;
    }
    let client = gpuworld::cpu_client(gpuworld::Driver::Manual).unwrap();
    let fault = racy_histogram(&client);
    let Error::Execution(ExecutionError::DataRace {
        kernel: "racy_histogram",
        param: "counts",
        element,
        first,
        second,
        ..
    }) = fault
    else {
        panic!("{fault:?}");
    };
    assert!(element < 10, "{element}");
    assert_ne!((first.cube, first.unit), (second.cube, second.unit));
    assert!(first.unit.is_some() && second.unit.is_some());
}

/// Checked launches on cpu and sim of kernels that race on nothing: each unit storing its own
/// element while reading its neighbours (`STENCIL`), a tree reduction through shared memory
/// across barriers (`REDUCE_SUM_TREE`, generated), and the atomic histogram.
fn kernels_that_share_nothing_or_only_atomics_and_shared_memory_are_no_race() {
    struct NoRace;
    impl BackendTest for NoRace {
        fn run<B: Backend>(&self, client: &ComputeClient<B>) {
            use gpuworld::library::{self, reduce};
            let values: Vec<f32> = (0..10_000).map(|i| (i % 7) as f32).collect();
            let input = client.create_from_slice(bytemuck::cast_slice(&values));
            let partial = client.empty(40 * 4);
            client
                .launch(
                    &reduce::REDUCE_SUM_TREE,
                    CubeCount::new_1d(40),
                    Bindings::new()
                        .buffer(&input)
                        .buffer(&partial)
                        .scalar_u32(10_000),
                )
                .unwrap();
            let sums: Vec<f32> = client.read_one_as(&partial).unwrap();
            assert_eq!(sums.iter().sum::<f32>(), values.iter().sum::<f32>());

            let (width, height) = (64u32, 48u32);
            let grid = client.create_from_slice(bytemuck::cast_slice(
                &(0..width * height).map(|i| i as f32).collect::<Vec<_>>(),
            ));
            let out = client.empty(u64::from(width * height) * 4);
            client
                .launch(
                    &library::STENCIL,
                    CubeCount::covering_2d(width, height, library::STENCIL_TILE),
                    Bindings::new()
                        .buffer(&grid)
                        .buffer(&out)
                        .scalar_u32(width)
                        .scalar_u32(height)
                        .scalar_f32(0.1),
                )
                .unwrap();
            client.sync().unwrap();
            AtomicsCountExactly.run(client);
        }
    }
    TestBackend::Cpu.run(&NoRace).unwrap();
    TestBackend::Sim.run(&NoRace).unwrap();
}

/// `q = a / b` and `r = sqrt(a)`, element by element.
#[gpuworld::kernel(cube_dim = 64)]
fn divide_and_root(a: &[f32], b: &[f32], q: &mut [f32], r: &mut [f32]) {
    let i = global_index();
    if i < a.len() {
        q[i] = a[i] / b[i];
        r[i] = a[i].sqrt();
    }
}

/// 65,536 operand pairs: random bits over every exponent, subnormals, zeros, infinities, NaN,
/// and pairs of nearby magnitudes (normal quotients).
fn division_operands() -> (Vec<f32>, Vec<f32>) {
    let mut state = 0x2545_f491u32;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        state
    };
    let specials = [
        0u32,
        0x8000_0000,
        1,
        0x8000_0001,
        0x7f_ffff,
        0x80_0000,
        0x7f80_0000,
        0xff80_0000,
        0x7fc0_0000,
        0x3f80_0000,
        0x7f7f_ffff,
        0x0040_0000,
    ];
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for i in 0..65_536u32 {
        let (x, y) = match i % 4 {
            0 => (next(), next()),
            // Nearby exponents: a normal quotient.
            1 | 2 => {
                let x = next() & 0x3fff_ffff | 0x2000_0000;
                (x, (x & 0xff80_0000) ^ (next() & 0x017f_ffff))
            }
            _ => (
                specials[(i / 4) as usize % specials.len()],
                specials[(i / 48) as usize % specials.len()] ^ (next() & 0x7),
            ),
        };
        a.push(f32::from_bits(x));
        b.push(f32::from_bits(y));
    }
    (a, b)
}

/// Whether `got` is `want`, bit for bit, or both are NaN (a NaN's sign and payload are the
/// device's).
fn same_bits(got: f32, want: f32) -> bool {
    got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan())
}

/// `/` and `sqrt` give IEEE 754's bits (Rust's) on every backend, with the subset's flush of
/// subnormal operands and results (`ops::ftz_f32`) around them.
struct DivisionIsExact;

impl BackendTest for DivisionIsExact {
    fn run<B: Backend>(&self, client: &ComputeClient<B>) {
        let (a, b) = division_operands();
        let n = a.len();
        let ha = client.create_from_slice(bytemuck::cast_slice(&a));
        let hb = client.create_from_slice(bytemuck::cast_slice(&b));
        let q = client.empty(n as u64 * 4);
        let r = client.empty(n as u64 * 4);
        client
            .launch(
                &divide_and_root,
                CubeCount::covering(n as u64, 64),
                Bindings::new()
                    .buffer(&ha)
                    .buffer(&hb)
                    .buffer(&q)
                    .buffer(&r),
            )
            .unwrap();
        let got_q: Vec<f32> = client.read_one_as(&q).unwrap();
        let got_r: Vec<f32> = client.read_one_as(&r).unwrap();
        let mut wrong = Vec::new();
        for i in 0..n {
            let ftz = gpuworld::kernel::ops::ftz_f32;
            let (want_q, want_r) = (ftz(ftz(a[i]) / ftz(b[i])), ftz(a[i]).sqrt());
            if !same_bits(got_q[i], want_q) {
                wrong.push(format!(
                    "{:e} / {:e} = {:e}, not {want_q:e}",
                    a[i], b[i], got_q[i]
                ));
            }
            if !same_bits(got_r[i], want_r) {
                wrong.push(format!("sqrt({:e}) = {:e}, not {want_r:e}", a[i], got_r[i]));
            }
        }
        assert!(
            wrong.is_empty(),
            "{} wrong: {:?}",
            wrong.len(),
            &wrong[..wrong.len().min(8)]
        );
    }
}

mod exact_division {
    use super::*;

    pub fn on_cpu() -> Result<(), Skip> {
        Ok(TestBackend::Cpu.run(&DivisionIsExact)?)
    }

    pub fn on_sim() -> Result<(), Skip> {
        Ok(TestBackend::Sim.run(&DivisionIsExact)?)
    }

    pub fn on_wgpu() -> Result<(), Skip> {
        Ok(TestBackend::Wgpu.run(&DivisionIsExact)?)
    }

    pub fn on_cuda() -> Result<(), Skip> {
        Ok(TestBackend::Cuda.run(&DivisionIsExact)?)
    }
}

/// lavapipe's own `/` and `sqrt` are exact, so the test above would pass with them: the WGSL
/// shows that wgpu runs the integer versions, not the driver's.
fn the_wgsl_of_division_and_square_root_is_the_exact_one() {
    let wgsl = gpuworld::kernel::WgslSource::clone(
        divide_and_root
            .source::<gpuworld::kernel::WgslSource>()
            .expect("the macro emits WGSL"),
    );
    assert!(
        wgsl.0.contains("= gw_ftz(gw_exact_div(gw_ftz(gw_load_a(gw_i_0), gw_z), gw_ftz(gw_load_b(gw_i_0), gw_z)), gw_z)"),
        "{}",
        wgsl.0
    );
    assert!(
        wgsl.0
            .contains("= gw_exact_sqrt(gw_ftz(gw_load_a(gw_i_0), gw_z))"),
        "{}",
        wgsl.0
    );
    assert!(!wgsl.0.contains(") / gw_ftz(gw_load_b("), "{}", wgsl.0);
}

/// Each deterministic transcendental of `x` (and `x.powf(y)`), element by element.
#[gpuworld::kernel(cube_dim = 64)]
fn transcendentals(
    x: &[f32],
    y: &[f32],
    exp: &mut [f32],
    ln: &mut [f32],
    sin: &mut [f32],
    cos: &mut [f32],
    tanh: &mut [f32],
    pow: &mut [f32],
) {
    let i = global_index();
    if i < x.len() {
        let v = x[i];
        exp[i] = v.exp();
        ln[i] = v.ln();
        sin[i] = v.sin();
        cos[i] = v.cos();
        tanh[i] = v.tanh();
        pow[i] = v.powf(y[i]);
    }
}

/// 65,536 arguments: evenly over [-100, 100], over [-2^14, 2^14], random bits of every
/// exponent (subnormals, infinities and NaN among them), and exponents for `powf`.
fn transcendental_arguments() -> (Vec<f32>, Vec<f32>) {
    let mut state = 0x1234_5679u32;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        state
    };
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for i in 0..65_536u32 {
        x.push(match i % 4 {
            0 => -100.0 + 200.0 * (i as f32 / 65_536.0),
            1 => (next() as f32 / u32::MAX as f32 - 0.5) * 32_768.0,
            2 => f32::from_bits(next()),
            _ => (next() as f32 / u32::MAX as f32) * 20.0,
        });
        y.push(match i % 3 {
            0 => (next() as f32 / u32::MAX as f32 - 0.5) * 20.0,
            1 => (next() % 9) as f32 - 4.0,
            _ => f32::from_bits(next()),
        });
    }
    (x, y)
}

/// The deterministic transcendentals give the CPU reference's bits on every backend.
struct TranscendentalsAreTheSameEverywhere;

impl BackendTest for TranscendentalsAreTheSameEverywhere {
    fn run<B: Backend>(&self, client: &ComputeClient<B>) {
        use gpuworld::kernel::transcendental as t;
        let (x, y) = transcendental_arguments();
        let n = x.len();
        let hx = client.create_from_slice(bytemuck::cast_slice(&x));
        let hy = client.create_from_slice(bytemuck::cast_slice(&y));
        let outs: Vec<_> = (0..6).map(|_| client.empty(n as u64 * 4)).collect();
        let mut bindings = Bindings::new().buffer(&hx).buffer(&hy);
        for out in &outs {
            bindings = bindings.buffer(out);
        }
        client
            .launch(
                &transcendentals,
                CubeCount::covering(n as u64, 64),
                bindings,
            )
            .unwrap();
        let functions: [(&str, &dyn Fn(usize) -> f32); 6] = [
            ("exp", &|i| t::exp_f32(x[i])),
            ("ln", &|i| t::ln_f32(x[i])),
            ("sin", &|i| t::sin_f32(x[i])),
            ("cos", &|i| t::cos_f32(x[i])),
            ("tanh", &|i| t::tanh_f32(x[i])),
            ("powf", &|i| t::powf_f32(x[i], y[i])),
        ];
        let mut wrong = Vec::new();
        for ((name, reference), out) in functions.iter().zip(&outs) {
            let got: Vec<f32> = client.read_one_as(out).unwrap();
            for i in 0..n {
                let want = reference(i);
                if got[i].to_bits() != want.to_bits() {
                    wrong.push(format!(
                        "{name}({:e}, {:e}) = {:e} ({:#x}), not {want:e} ({:#x})",
                        x[i],
                        y[i],
                        got[i],
                        got[i].to_bits(),
                        want.to_bits()
                    ));
                }
            }
        }
        assert!(
            wrong.is_empty(),
            "{} wrong: {:#?}",
            wrong.len(),
            &wrong[..wrong.len().min(10)]
        );
    }
}

mod transcendentals {
    use super::*;

    pub fn on_cpu() -> Result<(), Skip> {
        Ok(TestBackend::Cpu.run(&TranscendentalsAreTheSameEverywhere)?)
    }

    pub fn on_sim() -> Result<(), Skip> {
        Ok(TestBackend::Sim.run(&TranscendentalsAreTheSameEverywhere)?)
    }

    pub fn on_wgpu() -> Result<(), Skip> {
        Ok(TestBackend::Wgpu.run(&TranscendentalsAreTheSameEverywhere)?)
    }

    pub fn on_cuda() -> Result<(), Skip> {
        Ok(TestBackend::Cuda.run(&TranscendentalsAreTheSameEverywhere)?)
    }
}

/// The host's C++ compiler, if it has one (`CXX`, else `g++`).
fn host_cpp() -> Option<String> {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "g++".to_string());
    let found = std::process::Command::new(&cxx).arg("--version").output();
    found.ok().filter(|out| out.status.success()).map(|_| cxx)
}

/// The CUDA C the macro emits for the transcendentals, compiled by the host's C++ compiler with
/// IEEE stand-ins for CUDA's `__f*_rn` intrinsics (what they are on a GPU), gives the CPU
/// reference's bits: the CUDA text follows the algorithm, without a GPU. Skipped without one.
fn the_cuda_text_of_the_transcendentals_gives_the_reference_bits_as_host_cpp() -> Result<(), Skip> {
    use gpuworld::kernel::transcendental as t;
    let Some(cxx) = host_cpp() else {
        return Err(Skip("no host C++ compiler (g++ or CXX)".into()));
    };
    let cuda = transcendentals
        .source::<gpuworld::kernel::CudaSource>()
        .expect("the macro emits CUDA C")
        .0;
    let start = cuda
        .find("#ifndef GW_TRANSCENDENTALS")
        .expect("the helpers");
    let end = start + cuda[start..].find("#endif").expect("their end") + "#endif".len();
    let dir = std::env::temp_dir().join(format!("gw_cuda_text_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let program = format!(
        r#"#include <cmath>
#include <cstdio>
#include <cstring>
#define __device__
#define __forceinline__ inline
static float __fmul_rn(float a, float b) {{ volatile float r = a * b; return r; }}
static float __fadd_rn(float a, float b) {{ volatile float r = a + b; return r; }}
static float __fsub_rn(float a, float b) {{ volatile float r = a - b; return r; }}
static float __fdiv_rn(float a, float b) {{ volatile float r = a / b; return r; }}
static unsigned int __float_as_uint(float x) {{ unsigned int u; std::memcpy(&u, &x, 4); return u; }}
static float __uint_as_float(unsigned int u) {{ float x; std::memcpy(&x, &u, 4); return x; }}
{}
int main() {{
    unsigned int xb, yb;
    while (std::scanf("%x %x", &xb, &yb) == 2) {{
        float x = __uint_as_float(xb), y = __uint_as_float(yb);
        std::printf("%x %x %x %x %x %x\n", __float_as_uint(gw_exp(x)), __float_as_uint(gw_ln(x)),
            __float_as_uint(gw_sin(x)), __float_as_uint(gw_cos(x)), __float_as_uint(gw_tanh(x)),
            __float_as_uint(gw_powf(x, y)));
    }}
}}
"#,
        &cuda[start..end]
    );
    std::fs::write(dir.join("t.cpp"), program).unwrap();
    let built = std::process::Command::new(&cxx)
        .args(["-O1", "-ffp-contract=off", "-o"])
        .arg(dir.join("t"))
        .arg(dir.join("t.cpp"))
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let (x, y) = transcendental_arguments();
    let input: String = x
        .iter()
        .zip(&y)
        .map(|(x, y)| format!("{:x} {:x}\n", x.to_bits(), y.to_bits()))
        .collect();
    let mut child = std::process::Command::new(dir.join("t"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        stdin.write_all(input.as_bytes()).unwrap();
    });
    let output = child.wait_with_output().unwrap();
    writer.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8(output.stdout).unwrap();
    let mut wrong = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let got: Vec<u32> = line
            .split(' ')
            .map(|word| u32::from_str_radix(word, 16).unwrap())
            .collect();
        let want = [
            t::exp_f32(x[i]),
            t::ln_f32(x[i]),
            t::sin_f32(x[i]),
            t::cos_f32(x[i]),
            t::tanh_f32(x[i]),
            t::powf_f32(x[i], y[i]),
        ]
        .map(f32::to_bits);
        if got != want {
            wrong.push(format!("x {:e} y {:e}: {got:x?} vs {want:x?}", x[i], y[i]));
        }
    }
    assert_eq!(text.lines().count(), x.len());
    assert!(
        wrong.is_empty(),
        "{} wrong: {:#?}",
        wrong.len(),
        &wrong[..wrong.len().min(10)]
    );
    Ok(())
}
