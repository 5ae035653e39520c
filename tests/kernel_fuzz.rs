//! Generated kernels, checked bit for bit across backends: each kernel of
//! `tests/fuzz_kernels/seed_1.rs` (random statements and expressions over the
//! `#[gpuworld::kernel]` subset, written by `examples/gen_fuzz_kernels.rs`) runs on seeded inputs
//! (floats of many magnitudes with NaN, infinities, ±0 and values past u32's range; words with 0,
//! `u32::MAX` and random bits; random scalars), and both outputs must equal the CPU backend's
//! outputs for the same launch: u32 words equal, f32 words of equal bits or both NaN (a NaN's
//! sign and payload are the device's). A backend this machine lacks is reported ignored.
//!
//! The kernels use only what the subset defines bit for bit (`gpuworld::kernel::ops`): no
//! `mul_add`, no transcendentals, no f32 `/` or `sqrt` (WGSL allows them 2.5 ULP), and `to_bits`
//! only of a value that is not NaN. On wgpu the inputs hold no NaN or infinity, and an f32 output
//! that is infinite or NaN on either side, or zero or subnormal on both, counts as equal: WGSL
//! lets its compiler assume no infinity or NaN occurs (lavapipe turns `x - x` into 0 for an
//! infinite `x`) and NVIDIA's Vulkan driver flushes subnormals, the exceptions `ops` documents. Where such a value flows into a u32
//! output, the campaign still reports it: seeds 2 and 3 (100 kernels each) gave 2 such kernels
//! on lavapipe (`(x - x).to_bits()` of an infinite `x`; a division by `(u & 0) as f32`, which the
//! compiler sees is 0), and no other difference. Since the generator draws i32 too, seed 2 (150
//! kernels) gave no difference on lavapipe.
//!
//! A longer campaign: nothing loads kernels at run time (`GPUWORLD_FUZZ_KERNEL_SEEDS` is not
//! read). Generate other seeds into `tests/fuzz_kernels/`, include one in place of `seed_1.rs`
//! (the one `include!` line below: each file defines its own `KERNELS`), run the test, repeat:
//!
//! ```sh
//! cargo run --example gen_fuzz_kernels -- --seed 2 --count 200 > tests/fuzz_kernels/seed_2.rs
//! # mod fuzz_kernels { include!("fuzz_kernels/seed_1.rs"); }
//! cargo test --features wgpu --test kernel_fuzz
//! ```
//!
//! A failure names the kernel (`fuzz_<seed>_<k>`: the generator's seed and the kernel's index),
//! the output, the element and both values; the kernel's WGSL is
//! `KERNEL.source::<gpuworld::kernel::WgslSource>()`.

mod common;

mod fuzz_kernels {
    include!("fuzz_kernels/seed_1.rs");
}

use common::Skip;
use gpuworld::testing::{BackendTest, TestBackend};
use gpuworld::{
    Backend, Bindings, ComputeClient, CpuBackend, CubeCount, Driver, Handle, KernelDef,
};

test_main![
    generated_kernels_match_the_cpu_on_cpu,
    generated_kernels_match_the_cpu_on_sim,
    generated_kernels_match_the_cpu_on_wgpu,
    generated_kernels_match_the_cpu_on_cuda,
];

/// Elements of each input buffer.
const ELEMENTS: usize = 1000;

/// Words of each output buffer: two per element.
const OUTPUT_WORDS: usize = 2 * ELEMENTS;

fn generated_kernels_match_the_cpu_on_cpu() -> Result<(), Skip> {
    Ok(TestBackend::Cpu.run(&GeneratedKernels(fuzz_kernels::KERNELS))?)
}

fn generated_kernels_match_the_cpu_on_sim() -> Result<(), Skip> {
    Ok(TestBackend::Sim.run(&GeneratedKernels(fuzz_kernels::KERNELS))?)
}

fn generated_kernels_match_the_cpu_on_wgpu() -> Result<(), Skip> {
    Ok(TestBackend::Wgpu.run(&GeneratedKernels(fuzz_kernels::KERNELS))?)
}

fn generated_kernels_match_the_cpu_on_cuda() -> Result<(), Skip> {
    Ok(TestBackend::Cuda.run(&GeneratedKernels(fuzz_kernels::KERNELS))?)
}

/// A xorshift64* generator for the inputs.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn word(&mut self) -> u32 {
        (self.next() >> 32) as u32
    }

    /// A float of random sign and mantissa, its magnitude between 2^-20 and 2^20.
    fn float(&mut self) -> f32 {
        let bits = self.next();
        let mantissa = (bits >> 40) as f32 / (1u64 << 24) as f32;
        let exponent = (bits % 41) as i32 - 20;
        let sign = if bits & (1 << 20) == 0 { 1.0 } else { -1.0 };
        sign * (1.0 + mantissa) * 2f32.powi(exponent)
    }
}

/// One launch's inputs: the two input buffers and the two scalars.
struct Inputs {
    fa: Vec<f32>,
    ua: Vec<u32>,
    s: f32,
    t: u32,
}

impl Inputs {
    /// The inputs of the kernel at `index` of the list (each kernel gets its own); with
    /// `finite`, no NaN or infinity among them (for wgpu, whose compiler may assume none).
    fn new(index: usize, finite: bool) -> Inputs {
        let mut rng = Rng::new(index as u64 + 1);
        const SPECIAL: [f32; 9] = [
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            0.0,
            -0.0,
            5e9,
            -3.75,
            0.5,
            1.0,
        ];
        let special = |k: usize| match SPECIAL[k % SPECIAL.len()] {
            v if finite && v.is_nan() => 0.75,
            v if finite && v.is_infinite() => v.signum() * 1e6,
            v => v,
        };
        let fa = (0..ELEMENTS)
            .map(|i| match i % 13 {
                0 => special(i / 13),
                1 => (rng.word() % 2000) as f32 * 0.25,
                _ => rng.float(),
            })
            .collect();
        let ua = (0..ELEMENTS)
            .map(|i| match i % 9 {
                0 => 0,
                1 => u32::MAX,
                2 => rng.word() % 1100,
                3 => rng.word() % 40,
                _ => rng.word(),
            })
            .collect();
        let s = match rng.word() % 4 {
            0 => special(rng.word() as usize),
            _ => rng.float(),
        };
        let t = match rng.word() % 3 {
            0 => rng.word(),
            _ => rng.word() % 1100,
        };
        Inputs { fa, ua, s, t }
    }
}

/// The initial words of an output buffer, so a slot no store reaches is known: `0xa5a5_0000`
/// plus the slot (as an f32, a small negative normal number).
fn pattern() -> Vec<u32> {
    (0..OUTPUT_WORDS as u32).map(|i| 0xa5a5_0000 | i).collect()
}

/// Runs `kernel` on `client` over `inputs`: its `out_f` and `out_u` as words.
fn launch<B: Backend>(
    client: &ComputeClient<B>,
    kernel: &'static KernelDef,
    inputs: &Inputs,
) -> Result<(Vec<u32>, Vec<u32>), String> {
    let upload = |words: &[u8]| client.create(words.to_vec());
    let fa = upload(bytemuck::cast_slice(&inputs.fa));
    let ua = upload(bytemuck::cast_slice(&inputs.ua));
    let out_f = upload(bytemuck::cast_slice(&pattern()));
    let out_u = upload(bytemuck::cast_slice(&pattern()));
    let bindings = Bindings::new()
        .buffer(&fa)
        .buffer(&ua)
        .buffer(&out_f)
        .buffer(&out_u)
        .scalar_f32(inputs.s)
        .scalar_u32(inputs.t);
    let units = kernel.signature.cube_dim[0];
    client
        .launch(
            kernel,
            CubeCount::covering(ELEMENTS as u64, units),
            bindings,
        )
        .map_err(|error| format!("launch: {error}"))?;
    let read = |handle: &Handle| {
        client
            .read_one_as::<u32>(handle)
            .map_err(|error| format!("read: {error}"))
    };
    Ok((read(&out_f)?, read(&out_u)?))
}

/// Whether two f32 bit patterns are the same value: equal bits, or both NaN. With `specials`
/// loose (wgpu: WGSL lets its compiler assume no NaN or infinity, and simplify `x - x` to 0;
/// NVIDIA's Vulkan driver flushes subnormals), a NaN or infinity on either side, or zeros and
/// subnormals of either sign on both, also count as the same (the documented exceptions of
/// `gpuworld::kernel::ops`).
fn same_f32(a: u32, b: u32, specials: bool) -> bool {
    let (x, y) = (f32::from_bits(a), f32::from_bits(b));
    let tiny = |v: f32| v == 0.0 || v.is_subnormal();
    a == b
        || (x.is_nan() && y.is_nan())
        || (specials && (!x.is_finite() || !y.is_finite() || (tiny(x) && tiny(y))))
}

/// The first element where `got` differs from `expected`, described.
fn first_difference(
    kernel: &str,
    output: &str,
    float: bool,
    specials: bool,
    got: &[u32],
    expected: &[u32],
) -> Option<String> {
    let (i, (g, e)) = got.iter().zip(expected).enumerate().find(|(_, (g, e))| {
        if float {
            !same_f32(**g, **e, specials)
        } else {
            g != e
        }
    })?;
    let shown = |w: u32| {
        if float {
            format!("{:e} ({w:#010x})", f32::from_bits(w))
        } else {
            format!("{w} ({w:#010x})")
        }
    };
    Some(format!(
        "{kernel}: {output}[{i}] is {}, the cpu's {}",
        shown(*g),
        shown(*e)
    ))
}

/// Every kernel of the list on the backend under test, against the same launch on a CPU client.
struct GeneratedKernels(&'static [&'static KernelDef]);

impl BackendTest for GeneratedKernels {
    fn run<B: Backend>(&self, client: &ComputeClient<B>) {
        let reference: ComputeClient<CpuBackend> =
            gpuworld::cpu_client(Driver::Manual).expect("a cpu client opens");
        let mut failures = Vec::new();
        let specials = B::NAME == "wgpu";
        for (index, kernel) in self.0.iter().enumerate() {
            let inputs = Inputs::new(index, specials);
            let (expected_f, expected_u) = launch(&reference, kernel, &inputs)
                .unwrap_or_else(|error| panic!("{} on the reference cpu: {error}", kernel.name));
            let (got_f, got_u) = match launch(client, kernel, &inputs) {
                Ok(outputs) => outputs,
                Err(error) => {
                    failures.push(format!("{}: {error}", kernel.name));
                    continue;
                }
            };
            let differences = [
                first_difference(kernel.name, "out_f", true, specials, &got_f, &expected_f),
                first_difference(kernel.name, "out_u", false, specials, &got_u, &expected_u),
            ];
            failures.extend(
                differences
                    .into_iter()
                    .flatten()
                    .map(|line| format!("{line} (s {:e}, t {})", inputs.s, inputs.t)),
            );
        }
        assert!(
            failures.is_empty(),
            "{} differences in {} generated kernels on {}:\n{}",
            failures.len(),
            self.0.len(),
            B::NAME,
            failures.join("\n")
        );
    }
}
