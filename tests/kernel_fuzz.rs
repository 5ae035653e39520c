//! Generated kernels, checked bit for bit across backends, in two seeded families written by
//! `examples/gen_fuzz_kernels.rs`:
//! - `tests/fuzz_kernels/seed_1.rs`, the scalar family: random statements and expressions over
//!   the subset's f32, u32, i32 and bool (loops, loads at random indices, some out of bounds);
//!   operands `fa`, `ua`, `out_f`, `out_u`, `s`, `t`;
//! - `tests/fuzz_kernels/rich_1.rs`, the rich family: a `#[gpuworld::kernels]` module with a
//!   `#[repr(C)] struct Rec { a: f32, b: u32, c: i32, d: f32 }`, random `#[gpuworld::func]`
//!   helpers, and kernels that add vectors, struct loads, literals, fields and stores, the
//!   exact math (`/`, `sqrt`, `sin cos exp ln tanh powf`) and commutative atomics on `acc`
//!   (u32) and `iacc` (i32), each operation in its own region of 64 elements so that every
//!   element's final value is the same whatever order the units ran in; operands `fa`, `ua`,
//!   `ia`, `ps`, `out_f`, `out_u`, `out_p`, `acc`, `iacc`, `s`, `t`, `k`.
//!
//! Each kernel runs on seeded inputs (floats of many magnitudes with NaN, infinities, ±0,
//! subnormals and values past u32's range; words with 0, `u32::MAX` and random bits; i32 edges;
//! random scalars), and every output must equal the CPU backend's for the same launch: integer
//! words equal, f32 words of equal bits or both NaN (a NaN's sign and payload are the
//! device's). Subnormals compare by their bits everywhere: every backend flushes them alike.
//! On wgpu the inputs hold no NaN or infinity, and an f32 output that is infinite or NaN on
//! either side, or a zero of either sign on both, counts as equal: WGSL lets its compiler
//! assume no infinity or NaN occurs (lavapipe turns `x - x` into 0 for an infinite `x`) and
//! ignore a zero's sign (NVIDIA's Vulkan driver gave `+0.0` for `(u as f32) * y`, `u = 0`,
//! `y < 0`: `fuzz_1_15` on the H100 host, 2026-12-06), the exceptions `ops` documents. Where
//! such a value flows into an integer output, the campaign still reports it: seeds 2 and 3 of
//! the scalar family (100 kernels each) gave 2 such kernels on lavapipe (`(x - x).to_bits()` of
//! an infinite `x`; a division by `(u & 0) as f32`, which the compiler sees is 0), and no other
//! difference; rich seed 2 (80 kernels, 2 rounds) gave none once WGSL's flush went through the
//! opaque zero. A backend this machine lacks is reported ignored.
//!
//! A longer campaign: `GPUWORLD_FUZZ_KERNEL_ROUNDS=N` runs each kernel on N input sets (default
//! 1). Kernels are compiled in, so other kernel seeds are generated into `tests/fuzz_kernels/`
//! and included in place of `seed_1.rs` or `rich_1.rs` (each file defines its own `KERNELS`):
//!
//! ```sh
//! cargo run --example gen_fuzz_kernels -- --seed 2 --count 200 > tests/fuzz_kernels/seed_2.rs
//! cargo run --example gen_fuzz_kernels -- --family rich --seed 2 --count 80 \
//!     > tests/fuzz_kernels/rich_2.rs
//! # include!("fuzz_kernels/rich_2.rs") in `mod fuzz_rich` below
//! GPUWORLD_FUZZ_KERNEL_ROUNDS=4 cargo test --release --all-features --test kernel_fuzz
//! ```
//!
//! A failure names the kernel (`fuzz_<seed>_<k>` or `fuzz_rich_<seed>_<k>`), the output, the
//! element, both values and the round; the kernel's WGSL is
//! `KERNEL.source::<gpuworld::kernel::WgslSource>()`.

mod common;

mod fuzz_kernels {
    include!("fuzz_kernels/seed_1.rs");
}

mod fuzz_rich {
    include!("fuzz_kernels/rich_1.rs");
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

/// Both families: the scalar one, then the rich one.
fn families() -> GeneratedKernels {
    GeneratedKernels(vec![fuzz_kernels::KERNELS, fuzz_rich::KERNELS])
}

fn generated_kernels_match_the_cpu_on_cpu() -> Result<(), Skip> {
    Ok(TestBackend::Cpu.run(&families())?)
}

fn generated_kernels_match_the_cpu_on_sim() -> Result<(), Skip> {
    Ok(TestBackend::Sim.run(&families())?)
}

fn generated_kernels_match_the_cpu_on_wgpu() -> Result<(), Skip> {
    Ok(TestBackend::Wgpu.run(&families())?)
}

fn generated_kernels_match_the_cpu_on_cuda() -> Result<(), Skip> {
    Ok(TestBackend::Cuda.run(&families())?)
}

/// Input sets each kernel runs on: `GPUWORLD_FUZZ_KERNEL_ROUNDS` (default 1; the long campaign
/// sets more).
fn rounds() -> usize {
    std::env::var("GPUWORLD_FUZZ_KERNEL_ROUNDS")
        .ok()
        .and_then(|value| value.parse().ok())
        .filter(|&rounds| rounds > 0)
        .unwrap_or(1)
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

/// Words of each record buffer (`ps`, `out_p`): four per element (`Rec { a, b, c, d }`).
const RECORD_WORDS: usize = 4 * ELEMENTS;

/// Words of each atomic buffer (`acc`, `iacc`): six regions of 64, one per commutative
/// operation (add and sub share one), and some past them that no operation reaches.
const ATOMIC_WORDS: usize = 400;

/// One launch's inputs: the input buffers and the scalars (the rich family's `ia`, `ps`, `k`
/// too).
struct Inputs {
    fa: Vec<f32>,
    ua: Vec<u32>,
    ia: Vec<i32>,
    ps: Vec<u32>,
    s: f32,
    t: u32,
    k: i32,
}

impl Inputs {
    /// The inputs of the kernel at `index` of the list in `round` (each kernel gets its own);
    /// with `finite`, no NaN or infinity among them (for wgpu, whose compiler may assume none).
    fn new(index: usize, round: usize, finite: bool) -> Inputs {
        let mut rng = Rng::new((round as u64) << 32 | (index as u64 + 1));
        const SPECIAL: [f32; 12] = [
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            0.0,
            -0.0,
            5e9,
            -3.75,
            0.5,
            1.0,
            // Subnormals: flushed to a zero of their sign by every float operation, on every
            // backend.
            1.0e-40,
            -3.0e-42,
            f32::MIN_POSITIVE,
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
        let int = |rng: &mut Rng, i: usize| match i % 7 {
            0 => 0,
            1 => i32::MIN,
            2 => i32::MAX,
            3 => (rng.word() % 2000) as i32 - 1000,
            _ => rng.word() as i32,
        };
        let ia = (0..ELEMENTS).map(|i| int(&mut rng, i)).collect();
        // Each record: a float, a word, an int and a float, as their bits.
        let ps = (0..RECORD_WORDS)
            .map(|w| match w % 4 {
                1 => match (w / 4) % 5 {
                    0 => rng.word() % 1100,
                    _ => rng.word(),
                },
                2 => int(&mut rng, w / 4) as u32,
                _ if (w / 4) % 11 == 0 => special(w / 44).to_bits(),
                _ => rng.float().to_bits(),
            })
            .collect();
        let which = rng.word() as usize;
        let k = int(&mut rng, which);
        Inputs {
            fa,
            ua,
            ia,
            ps,
            s,
            t,
            k,
        }
    }
}

/// The initial words of an output buffer, so a slot no store reaches is known: `0xa5a5_0000`
/// plus the slot (as an f32, a small negative normal number).
fn pattern() -> Vec<u32> {
    (0..OUTPUT_WORDS as u32).map(|i| 0xa5a5_0000 | i).collect()
}

/// The outputs of one launch, as words: `out_f`, `out_u`, and the rich family's `out_p`, `acc`
/// and `iacc` (empty for the scalar family).
type Outputs = [Vec<u32>; 5];

/// The outputs' names and how each word compares: a float (`Some(true)`), an integer, or in
/// `out_p` by the word's field (`a` and `d` floats).
const OUTPUTS: [&str; 5] = ["out_f", "out_u", "out_p", "acc", "iacc"];

/// Runs `kernel` on `client` over `inputs`: its outputs as words. A kernel of the rich family
/// (nine buffers) binds `ia`, `ps`, `out_p`, `acc`, `iacc` and `k` too.
fn launch<B: Backend>(
    client: &ComputeClient<B>,
    kernel: &'static KernelDef,
    inputs: &Inputs,
) -> Result<Outputs, String> {
    let rich = kernel.signature.buffers.len() == 9;
    let upload = |words: &[u8]| client.create(words.to_vec());
    let fa = upload(bytemuck::cast_slice(&inputs.fa));
    let ua = upload(bytemuck::cast_slice(&inputs.ua));
    let out_f = upload(bytemuck::cast_slice(&pattern()));
    let out_u = upload(bytemuck::cast_slice(&pattern()));
    let mut bindings = Bindings::new().buffer(&fa).buffer(&ua);
    let mut outputs = vec![&out_f, &out_u];
    let rich_buffers;
    if rich {
        // The atomics' initial words: a pattern of small and large values, so that min, max,
        // and, or all change some.
        let atomic: Vec<u32> = (0..ATOMIC_WORDS as u32)
            .map(|w| (w.wrapping_mul(0x9e37_79b9) >> (w % 29)) ^ (w << 3))
            .collect();
        rich_buffers = [
            upload(bytemuck::cast_slice(&inputs.ia)),
            upload(bytemuck::cast_slice(&inputs.ps)),
            upload(bytemuck::cast_slice(&pattern()[..].repeat(2))),
            upload(bytemuck::cast_slice(&atomic)),
            upload(bytemuck::cast_slice(&atomic)),
        ];
        let [ia, ps, out_p, acc, iacc] = &rich_buffers;
        bindings = bindings
            .buffer(ia)
            .buffer(ps)
            .buffer(&out_f)
            .buffer(&out_u)
            .buffer(out_p)
            .buffer(acc)
            .buffer(iacc);
        outputs.extend([out_p, acc, iacc]);
    } else {
        bindings = bindings.buffer(&out_f).buffer(&out_u);
    }
    bindings = bindings.scalar_f32(inputs.s).scalar_u32(inputs.t);
    if rich {
        bindings = bindings.scalar_i32(inputs.k);
    }
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
    let mut words: Outputs = Default::default();
    for (slot, handle) in words.iter_mut().zip(outputs) {
        *slot = read(handle)?;
    }
    Ok(words)
}

/// Whether word `w` of output `output` holds an f32.
fn is_float(output: usize, w: usize) -> bool {
    match output {
        0 => true,
        2 => w.is_multiple_of(4) || w % 4 == 3,
        _ => false,
    }
}

/// Whether two f32 bit patterns are the same value: equal bits, or both NaN. With `specials`
/// loose (wgpu: WGSL lets its compiler assume no NaN or infinity, simplify `x - x` to 0, and
/// ignore the sign of zero), a NaN or infinity on either side, or zeros of either sign on both,
/// also count as the same (the documented exceptions of `gpuworld::kernel::ops`: NVIDIA's
/// Vulkan driver gave `+0.0` for `(u as f32) * y` with `u = 0` and a negative `y`). Subnormals
/// compare by their bits on every backend: each flushes them alike.
fn same_f32(a: u32, b: u32, specials: bool) -> bool {
    let (x, y) = (f32::from_bits(a), f32::from_bits(b));
    a == b
        || (x.is_nan() && y.is_nan())
        || (specials && (!x.is_finite() || !y.is_finite() || (x == 0.0 && y == 0.0)))
}

/// The first element where output `output`'s `got` differs from `expected`, described.
fn first_difference(
    kernel: &str,
    output: usize,
    specials: bool,
    got: &[u32],
    expected: &[u32],
) -> Option<String> {
    if got.len() != expected.len() {
        return Some(format!(
            "{kernel}: {} has {} words, the cpu's {}",
            OUTPUTS[output],
            got.len(),
            expected.len()
        ));
    }
    let (i, (g, e)) = got.iter().zip(expected).enumerate().find(|(i, (g, e))| {
        if is_float(output, *i) {
            !same_f32(**g, **e, specials)
        } else {
            g != e
        }
    })?;
    let float = is_float(output, i);
    let output = OUTPUTS[output];
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

/// Every kernel of the families on the backend under test, against the same launch on a CPU
/// client, on `rounds()` input sets each.
struct GeneratedKernels(Vec<&'static [&'static KernelDef]>);

impl BackendTest for GeneratedKernels {
    fn run<B: Backend>(&self, client: &ComputeClient<B>) {
        let reference: ComputeClient<CpuBackend> =
            gpuworld::cpu_client(Driver::Manual).expect("a cpu client opens");
        let mut failures = Vec::new();
        let specials = B::NAME == "wgpu";
        let kernels: Vec<&'static KernelDef> = self
            .0
            .iter()
            .flat_map(|family| family.iter().copied())
            .collect();
        for round in 0..rounds() {
            for (index, kernel) in kernels.iter().enumerate() {
                let inputs = Inputs::new(index, round, specials);
                let expected = launch(&reference, kernel, &inputs).unwrap_or_else(|error| {
                    panic!("{} on the reference cpu: {error}", kernel.name)
                });
                let got = match launch(client, kernel, &inputs) {
                    Ok(outputs) => outputs,
                    Err(error) => {
                        failures.push(format!("{}: {error}", kernel.name));
                        continue;
                    }
                };
                failures.extend(
                    (0..OUTPUTS.len())
                        .filter_map(|output| {
                            first_difference(
                                kernel.name,
                                output,
                                specials,
                                &got[output],
                                &expected[output],
                            )
                        })
                        .map(|line| {
                            format!(
                                "{line} (round {round}, s {:e}, t {}, k {})",
                                inputs.s, inputs.t, inputs.k
                            )
                        }),
                );
            }
        }
        assert!(
            failures.is_empty(),
            "{} differences in {} generated kernels × {} rounds on {}:\n{}",
            failures.len(),
            kernels.len(),
            rounds(),
            B::NAME,
            failures.join("\n")
        );
    }
}
