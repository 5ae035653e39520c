//! `#[gpuworld::kernel]` on every backend: each kernel here is one Rust source, compiled by the
//! macro to the CPU function (cpu and sim), WGSL (wgpu) and CUDA C (cuda), and each case checks
//! every backend's output bit for bit against the same computation written as plain Rust on the
//! host (NaN compared as NaN; transcendentals within their documented tolerance). A backend this
//! machine lacks is reported ignored.

mod common;

use common::Skip;
use gpuworld::kernel::ops;
use gpuworld::testing::{BackendTest, TestBackend};
use gpuworld::{Backend, Bindings, ComputeClient, CubeCount, Handle};

test_main![
    cases::native_functions_are_the_devices_own_on_cpu,
    cases::native_functions_are_the_devices_own_on_sim,
    cases::native_functions_are_the_devices_own_on_wgpu,
    cases::native_functions_are_the_devices_own_on_cuda,
    cases::axpb_rounds_twice_on_cpu,
    cases::axpb_rounds_twice_on_sim,
    cases::axpb_rounds_twice_on_wgpu,
    cases::axpb_rounds_twice_on_cuda,
    cases::integer_and_conversion_edges_on_cpu,
    cases::integer_and_conversion_edges_on_sim,
    cases::integer_and_conversion_edges_on_wgpu,
    cases::integer_and_conversion_edges_on_cuda,
    cases::signed_integers_wrap_and_convert_on_cpu,
    cases::signed_integers_wrap_and_convert_on_sim,
    cases::signed_integers_wrap_and_convert_on_wgpu,
    cases::signed_integers_wrap_and_convert_on_cuda,
    cases::a_histogram_with_atomics_counts_exactly_on_cpu,
    cases::a_histogram_with_atomics_counts_exactly_on_sim,
    cases::a_histogram_with_atomics_counts_exactly_on_wgpu,
    cases::a_histogram_with_atomics_counts_exactly_on_cuda,
    cases::atomic_operations_give_their_final_values_on_cpu,
    cases::atomic_operations_give_their_final_values_on_sim,
    cases::atomic_operations_give_their_final_values_on_wgpu,
    cases::atomic_operations_give_their_final_values_on_cuda,
    cases::vectors_compute_component_by_component_on_cpu,
    cases::vectors_compute_component_by_component_on_sim,
    cases::vectors_compute_component_by_component_on_wgpu,
    cases::vectors_compute_component_by_component_on_cuda,
    cases::module_constants_and_functions_inline_on_cpu,
    cases::module_constants_and_functions_inline_on_sim,
    cases::module_constants_and_functions_inline_on_wgpu,
    cases::module_constants_and_functions_inline_on_cuda,
    cases::struct_buffers_move_their_fields_bits_on_cpu,
    cases::struct_buffers_move_their_fields_bits_on_sim,
    cases::struct_buffers_move_their_fields_bits_on_wgpu,
    cases::struct_buffers_move_their_fields_bits_on_cuda,
    cases::a_generic_kernel_has_one_static_per_instance_on_cpu,
    cases::a_generic_kernel_has_one_static_per_instance_on_sim,
    cases::a_generic_kernel_has_one_static_per_instance_on_wgpu,
    cases::a_generic_kernel_has_one_static_per_instance_on_cuda,
    cases::tree_sum_with_barriers_on_cpu,
    cases::tree_sum_with_barriers_on_sim,
    cases::tree_sum_with_barriers_on_wgpu,
    cases::tree_sum_with_barriers_on_cuda,
    cases::stencil_in_tiles_on_cpu,
    cases::stencil_in_tiles_on_sim,
    cases::stencil_in_tiles_on_wgpu,
    cases::stencil_in_tiles_on_cuda,
    cases::bounds_returns_and_dynamic_counts_on_cpu,
    cases::bounds_returns_and_dynamic_counts_on_sim,
    cases::bounds_returns_and_dynamic_counts_on_wgpu,
    cases::bounds_returns_and_dynamic_counts_on_cuda,
    cases::transcendentals_within_tolerance_on_cpu,
    cases::transcendentals_within_tolerance_on_sim,
    cases::transcendentals_within_tolerance_on_wgpu,
    cases::transcendentals_within_tolerance_on_cuda,
    cases::subnormals_are_flushed_on_cpu,
    cases::subnormals_are_flushed_on_sim,
    cases::subnormals_are_flushed_on_wgpu,
    cases::subnormals_are_flushed_on_cuda,
    cases::nan_bits_are_the_devices_on_cpu,
    cases::nan_bits_are_the_devices_on_sim,
    cases::nan_bits_are_the_devices_on_wgpu,
    cases::nan_bits_are_the_devices_on_cuda,
    the_generated_sources_declare_the_signature,
    the_generated_sources_are_as_recorded,
    an_atomic_buffer_is_declared_atomic_and_reached_through_atomic_functions,
];

/// `y[i] = a * x[i] + b`: a multiply and an add, each rounded (no contraction into a fused
/// multiply-add), and `fused[i]` with the one rounding of `mul_add`.
#[gpuworld::kernel(cube_dim = 64)]
fn axpb(x: &[f32], y: &mut [f32], #[write_only] fused: &mut [f32], a: f32, b: f32) {
    let i = global_index();
    if i < y.len() {
        y[i] = a * x[i] + b;
        fused[i] = x[i].mul_add(a, b);
    }
}

/// Integer arithmetic and conversions at their edges, one result per word of `out` (16 per
/// input).
#[gpuworld::kernel(cube_dim = 32)]
fn edges(xs: &[u32], fs: &[f32], out: &mut [u32]) {
    let i = global_index();
    if i < xs.len() {
        let x = xs[i];
        let f = fs[i];
        let k = 16 * i;
        out[k] = x / (x % 5);
        out[k + 1] = x % (x & 3);
        out[k + 2] = x << (x % 40);
        out[k + 3] = x >> (x % 40);
        out[k + 4] = x * 2654435761 + 7 - (x ^ 0xdeadbeef);
        out[k + 5] = f as u32;
        out[k + 6] = (x as f32).to_bits();
        out[k + 7] = f.min(1.5).to_bits();
        out[k + 8] = f.max(-1.5).to_bits();
        out[k + 9] = (-f).abs().to_bits();
        out[k + 10] = f.floor().to_bits() ^ f.ceil().to_bits() ^ f.trunc().to_bits();
        out[k + 11] = (f / 3.0).to_bits();
        out[k + 12] = (f * f).sqrt().to_bits();
        out[k + 13] = if f < 0.5 && x > 3 {
            x.min(9)
        } else {
            !x.max(4)
        };
        out[k + 14] = (f != f) as u32 + 2 * ((x == 0) as u32);
        out[k + 15] = f32::from_bits(x | 0x3f800000).to_bits() + (f as u32 % 7);
    }
}

/// i32 at its edges, 16 results per input: wrapping arithmetic, division and remainder by zero
/// and of `i32::MIN` by -1, arithmetic shifts, conversions, comparisons, typed literals.
#[gpuworld::kernel(cube_dim = 32)]
fn signed_ops(xs: &[i32], ys: &[i32], fs: &[f32], out: &mut [i32], bias: i32) {
    let i = global_index();
    if i < xs.len() {
        let x = xs[i];
        let y = ys[i];
        let f = fs[i];
        let k = 16 * i;
        let d: i32 = -3;
        out[k] = x + y * bias;
        out[k + 1] = x - y;
        out[k + 2] = x * y;
        out[k + 3] = x / y;
        out[k + 4] = x % y;
        out[k + 5] = x >> (y as u32);
        out[k + 6] = x << ((y as u32) % 40);
        out[k + 7] = -x;
        out[k + 8] = f as i32;
        out[k + 9] = (x as f32).to_bits() as i32;
        out[k + 10] = ((x as u32) >> 3) as i32;
        out[k + 11] = if x < y { x.min(d) } else { y.max(-100) };
        out[k + 12] = (x == y) as i32 + 2 * ((x > 0) as i32) + 4 * ((x <= d) as i32);
        out[k + 13] = !x ^ (x & y | 7);
        out[k + 14] = x / d + -2147483648 / (d + 2);
        out[k + 15] = (f * 1000.0) as i32 % 7 - d;
    }
}

/// Counts the items of each cell: the histogram that `counts[cell[i]] += 1` would race on.
#[gpuworld::kernel(cube_dim = 256)]
fn histogram(cell: &[u32], #[atomic] counts: &mut [u32]) {
    let i = global_index();
    if i < cell.len() {
        counts.atomic_add(cell[i], 1);
    }
}

/// Every atomic operation: the commutative ones from every unit into one element each (their
/// final values are deterministic), exchange and compare-exchange on an element of each unit's
/// own (their old values too), and one out of bounds (nothing, 0).
#[gpuworld::kernel(cube_dim = 64)]
fn atomics(
    values: &[i32],
    #[atomic] words: &mut [u32],
    #[atomic] ints: &mut [i32],
    #[write_only] olds: &mut [u32],
) {
    let i = global_index();
    if i < values.len() {
        let v = values[i];
        let u = v as u32;
        words.atomic_add(0, u);
        words.atomic_sub(1, u);
        words.atomic_min(2, u);
        words.atomic_max(3, u);
        words.atomic_and(4, u | 0xff00ff00);
        words.atomic_or(5, u & 0x00ff00ff);
        words.atomic_xor(6, u);
        ints.atomic_add(0, v);
        ints.atomic_sub(1, v);
        ints.atomic_min(2, v);
        ints.atomic_max(3, v);
        ints.atomic_and(4, v | -256);
        ints.atomic_or(5, v & 0xff);
        ints.atomic_xor(6, v);
        let old = words.atomic_exchange(8 + i, u);
        let seen = ints.atomic_compare_exchange(8 + i, 7, v);
        let now = ints.atomic_load(8 + i);
        let mut far = 5;
        far = words.atomic_add(words.len() + i, 1);
        olds[4 * i] = old;
        olds[4 * i + 1] = seen as u32;
        olds[4 * i + 2] = now as u32;
        olds[4 * i + 3] = far;
    }
}

/// Vectors of f32, u32 and i32: construction, components, `+ - *`, scalar `*`, `dot`,
/// `length`, `normalize`, `if` of vectors, assignment to a vector and to a component; 8 f32, 2
/// u32 and 2 i32 results per unit.
#[gpuworld::kernel(cube_dim = 64)]
fn vectors(
    xs: &[f32],
    us: &[u32],
    is: &[i32],
    out_f: &mut [f32],
    out_u: &mut [u32],
    out_i: &mut [i32],
) {
    let i = global_index();
    if i < us.len() {
        let p = vec3(xs[3 * i], xs[3 * i + 1], xs[3 * i + 2]);
        let mut v = vec3(xs[3 * i + 2], -1.5, 0.25);
        v = v * 0.5 + p;
        v -= vec3(0.125, 0.0, 1.0);
        v.y = v.y * 3.0;
        let n = normalize(p);
        let q = if p.x < 0.0 { -n } else { n * 2.0 };
        let w = 2.0 * vec4(1.0, 2.0, 3.0, 4.0) * q.z;
        let mut s = vec2(v.x, v.y);
        s = vec2(s.y, s.x);
        let k = 8 * i;
        out_f[k] = v.x;
        out_f[k + 1] = v.y;
        out_f[k + 2] = v.z;
        out_f[k + 3] = dot(p, v);
        out_f[k + 4] = length(v);
        out_f[k + 5] = n.x + n.y + n.z;
        out_f[k + 6] = q.y + w.w;
        out_f[k + 7] = s.x - s.y;
        let a = vec2(us[i], 7) * 3 + vec2(1, us[i]);
        out_u[2 * i] = a.x;
        out_u[2 * i + 1] = dot(a, a);
        let b = vec2(is[i], -4) * vec2(2, -3) - vec2(is[i], 1);
        out_i[2 * i] = b.y;
        out_i[2 * i + 1] = dot(b, b);
    }
}

/// A kernel that uses its module's constants and `#[gpuworld::func]` helpers, which stay plain
/// Rust for the host (the test computes the expected values with the very same functions).
#[gpuworld::kernels]
mod shaping {
    /// Values per unit.
    pub const PER_UNIT: u32 = 3;
    pub const SCALE: f32 = 0.75;
    pub const OFFSET: i32 = -40;

    /// `a` moved toward `b` by `t`.
    #[gpuworld::func]
    pub fn lerp(a: f32, b: f32, t: f32) -> f32 {
        let d = b - a;
        a + d * t
    }

    /// `x` clamped to `[lo, hi]`, through `lerp`'s neighbour `pick`.
    #[gpuworld::func]
    pub fn clamp_i(x: i32, lo: i32, hi: i32) -> i32 {
        pick(x < lo, lo, pick(x > hi, hi, x))
    }

    #[gpuworld::func]
    pub fn pick(c: bool, a: i32, b: i32) -> i32 {
        if c { a } else { b }
    }

    /// Units per cube, and the length of `reverse_tiles`' shared array.
    pub const TILE: u32 = 32;

    /// Each cube's inputs in reverse order, through a shared array of the module's length.
    #[gpuworld::kernel(cube_dim = 32)]
    pub fn reverse_tiles(xs: &[f32], out: &mut [f32]) {
        let tile = shared::<f32, TILE>();
        let i = global_index();
        tile[unit()] = xs[i];
        sync_cube();
        out[i] = tile[TILE - 1 - unit()];
    }

    #[gpuworld::kernel(cube_dim = 32)]
    pub fn shape(xs: &[f32], is: &[i32], out: &mut [u32]) {
        let i = global_index();
        if i < is.len() {
            let k = PER_UNIT * i;
            out[k] = lerp(xs[i], SCALE, xs[i] * SCALE).to_bits();
            out[k + 1] = clamp_i(is[i] / 1000, OFFSET, 40) as u32;
            out[k + 2] = (lerp(1.0, 2.0, SCALE) + OFFSET as f32).to_bits();
        }
    }
}

/// A particle step over a buffer of `#[repr(C)]` structs: whole elements loaded into a struct
/// local and stored back, single fields read, written and updated in place, a struct literal.
#[gpuworld::kernels]
mod particles {
    /// One particle, as host code and the kernel both see it.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
    pub struct Particle {
        pub x: f32,
        pub y: f32,
        pub vx: f32,
        pub vy: f32,
        pub cell: u32,
        pub bounces: i32,
    }

    pub const WIDTH: f32 = 10.0;

    #[gpuworld::kernel(cube_dim = 64)]
    pub fn step(ps: &mut [Particle], #[write_only] moved: &mut [Particle], dt: f32) {
        let i = global_index();
        if i < ps.len() {
            let mut p = ps[i];
            let v = vec2(p.vx, p.vy) * dt;
            p.x = p.x + v.x;
            p.y += v.y;
            if p.x > WIDTH {
                p.x = WIDTH - (p.x - WIDTH);
                p.vx = -p.vx;
                p.bounces += 1;
            }
            p.cell = (p.x as u32) + 16 * (p.y as u32);
            moved[i] = p;
            ps[i].bounces -= 2;
            ps[i].vy = ps[i].vy * 0.5;
            if i == 0 {
                moved[i] = Particle {
                    x: 1.0,
                    y: 2.0,
                    vx: 3.0,
                    vy: 4.0,
                    cell: ps.len(),
                    bounces: -7,
                };
            }
        }
    }
}

/// One generic kernel, three instances: `x[i]` added to itself `N` times, in each element type.
#[gpuworld::kernel(
    cube_dim = 64,
    instances(times_f32 = (f32, 3), times_u32 = (u32, 5), times_i32 = (i32, 7))
)]
fn times<T, const N: u32>(x: &[T], out: &mut [T]) {
    let i = global_index();
    if i < x.len() {
        let mut total = x[i];
        for _k in 0..N {
            total = total + x[i];
        }
        out[i] = total;
    }
}

/// Sums each cube's 256 inputs with a tree in shared memory: 8 halvings, a barrier after each.
#[gpuworld::kernel(cube_dim = 256)]
fn tree_sum(input: &[f32], output: &mut [f32]) {
    let partial = shared::<f32, 256>();
    let i = global_index();
    partial[unit()] = if i < input.len() { input[i] } else { 0.0 };
    sync_cube();
    for step in 0..8 {
        let stride = 128 >> step;
        if unit() < stride {
            partial[unit()] = partial[unit()] + partial[unit() + stride];
        }
        sync_cube();
    }
    if unit() == 0 {
        output[cube()] = partial[0];
    }
}

/// One heat-diffusion step on a `width x height` grid, 16×16 units per cube, fixed borders.
#[gpuworld::kernel(cube_dim = [16, 16, 1])]
fn heat(u: &[f32], out: &mut [f32], width: u32, height: u32, alpha: f32) {
    let x = cube_x() * 16 + unit_x();
    let y = cube_y() * 16 + unit_y();
    if x >= width || y >= height {
        return;
    }
    let i = y * width + x;
    let center = u[i];
    let mut value = center;
    if x > 0 && y > 0 && x + 1 < width && y + 1 < height {
        let sum = u[i - 1] + u[i + 1] + u[i - width] + u[i + width];
        value = center + alpha * (sum - 4.0 * center);
    }
    out[i] = value;
}

/// Loads and stores past the ends (read 0, dropped), a unit that returns early, a `while` loop.
#[gpuworld::kernel(cube_dim = 8)]
fn bounds(src: &[u32], dst: &mut [u32], reach: u32) {
    let i = global_index();
    if i % 3 == 2 {
        return;
    }
    let mut steps = 0;
    let mut j = i;
    while j < i + reach {
        j += 1;
        steps += 1;
    }
    dst[i + reach] = src[i + reach] + steps * 1000 + cube_count_x() * 100;
}

/// Transcendentals, which agree within a tolerance rather than bit for bit.
#[gpuworld::kernel(cube_dim = 64)]
fn curves(x: &[f32], out: &mut [f32]) {
    let i = global_index();
    if i < x.len() {
        let v = x[i];
        out[6 * i] = v.exp();
        out[6 * i + 1] = (v + 4.0).ln();
        out[6 * i + 2] = v.sin();
        out[6 * i + 3] = v.cos();
        out[6 * i + 4] = v.tanh();
        out[6 * i + 5] = (v + 4.0).powf(1.5);
    }
}

/// Values spread over magnitudes and signs, with a few exact edges, from a fixed seed.
/// Each float operation of `a[i]` and `b[i]` (subnormal operands and results among them):
/// thirteen floats per element in `out`, four comparisons in `flags`.
#[gpuworld::kernel(cube_dim = 64)]
fn subnormal_ops(
    a: &[f32],
    b: &[f32],
    #[write_only] out: &mut [f32],
    #[write_only] flags: &mut [u32],
) {
    let i = global_index();
    if i < a.len() {
        let x = a[i];
        let y = b[i];
        let k = 13 * i;
        out[k] = x + y;
        out[k + 1] = x - y;
        out[k + 2] = x * y;
        out[k + 3] = x / y;
        out[k + 4] = x.sqrt();
        out[k + 5] = x.min(y);
        out[k + 6] = x.max(y);
        out[k + 7] = x.floor();
        out[k + 8] = x.ceil();
        out[k + 9] = x.trunc();
        // Moves of bits: a subnormal stays as it is.
        out[k + 10] = x;
        out[k + 11] = -x;
        out[k + 12] = x.abs();
        let c = 4 * i;
        flags[c] = (x < y) as u32;
        flags[c + 1] = (x == y) as u32;
        flags[c + 2] = (x <= y) as u32;
        flags[c + 3] = (x > 0.0) as u32;
    }
}

/// NaN made four ways (`a` and `b` as the test binds them), as bits: the device's sign and
/// payload, which no backend is asked to agree on.
#[gpuworld::kernel(cube_dim = 1)]
fn nan_ops(a: &[f32], b: &[f32], #[write_only] out: &mut [u32]) {
    let i = global_index();
    if i == 0 {
        out[i] = (a[0] - b[0]).to_bits();
        out[i + 1] = (a[1] * b[1]).to_bits();
        out[i + 2] = (a[2] / b[2]).to_bits();
        out[i + 3] = a[3].sqrt().to_bits();
    }
}

/// A subnormal flushed to a zero of its sign: the subset's rule, written apart from
/// `gpuworld::kernel::ops::ftz_f32`.
fn flush(x: f32) -> f32 {
    if x.is_subnormal() {
        0.0f32.copysign(x)
    } else {
        x
    }
}

/// Operand pairs whose operands, sums, differences, products or quotients are subnormal, and
/// normal ones beside them.
fn subnormal_operands() -> (Vec<f32>, Vec<f32>) {
    let tiny = f32::MIN_POSITIVE;
    let pairs = [
        (1.0e-40, 0.0),
        (-1.0e-40, 0.0),
        (1.0e-40, 2.0e-40),
        (-3.0e-42, 1.0e-45),
        (1.0e-40, 1.0),
        (1.0e-40, -1.0e-40),
        (tiny, 0.5),
        (tiny, 2.0),
        (1.5 * tiny, -1.25 * tiny),
        (-1.5 * tiny, 1.25 * tiny),
        (1.0e-20, 1.0e-20),
        (1.0e-20, -3.0e-19),
        (tiny, 3.0),
        (3.0 * tiny, 4.0),
        (0.0, 1.0e-40),
        (1.0, 1.0e-40),
        (2.0, 3.0),
        (-0.0, -1.0e-41),
        (f32::from_bits(0x007f_ffff), f32::from_bits(0x0000_0001)),
        (-f32::from_bits(0x007f_ffff), 1.0),
    ];
    pairs.into_iter().unzip()
}

fn floats(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..n)
        .map(|i| match i % 11 {
            0 => 0.5,
            1 => -0.0,
            2 => 1e-3 * (next() % 1000) as f32,
            _ => {
                let bits = next();
                let mantissa = (bits >> 40) as f32 / (1u64 << 24) as f32;
                let exponent = (bits % 16) as i32 - 8;
                let sign = if bits & (1 << 20) == 0 { 1.0 } else { -1.0 };
                sign * (1.0 + mantissa) * 2f32.powi(exponent)
            }
        })
        .collect()
}

fn words(n: usize, seed: u64) -> Vec<u32> {
    let mut state = seed.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1;
    (0..n)
        .map(|i| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            match i % 9 {
                0 => 0,
                1 => u32::MAX,
                _ => (state >> 16) as u32,
            }
        })
        .collect()
}

fn upload<B: Backend, T: bytemuck::Pod>(client: &ComputeClient<B>, values: &[T]) -> Handle {
    client.create_from_slice(bytemuck::cast_slice(values))
}

fn read_words<B: Backend>(client: &ComputeClient<B>, handle: &Handle) -> Vec<u32> {
    client.read_one_as(handle).expect("the read succeeds")
}

/// Whether two f32 bit patterns are the same value: equal bits, or both NaN (a NaN's sign and
/// payload are the device's).
fn same_f32(a: u32, b: u32) -> bool {
    a == b || (f32::from_bits(a).is_nan() && f32::from_bits(b).is_nan())
}

fn assert_same_f32(backend: &str, what: &str, got: &[u32], expected: &[u32]) {
    assert_eq!(got.len(), expected.len(), "{backend} {what}: lengths");
    for (i, (g, e)) in got.iter().zip(expected).enumerate() {
        assert!(
            same_f32(*g, *e),
            "{backend} {what}[{i}]: got {} ({g:#010x}), expected {} ({e:#010x})",
            f32::from_bits(*g),
            f32::from_bits(*e)
        );
    }
}

/// Each case: a [`BackendTest`] run on one backend by a test of its own.
/// The device's own transcendentals and square root, seven results per input: fast, and not
/// the same bits on every backend (their names say so).
#[gpuworld::kernel(cube_dim = 64)]
fn natives(x: &[f32], out: &mut [f32]) {
    let i = global_index();
    if i < x.len() {
        let v = x[i];
        let k = i * 7;
        out[k] = v.native_sqrt();
        out[k + 1] = v.native_exp();
        out[k + 2] = v.native_ln();
        out[k + 3] = v.native_sin();
        out[k + 4] = v.native_cos();
        out[k + 5] = v.native_tanh();
        out[k + 6] = v.native_powf(1.5);
    }
}

mod cases {
    use super::*;

    macro_rules! on_each_backend {
        ($test:expr, $cpu:ident, $sim:ident, $wgpu:ident, $cuda:ident) => {
            pub fn $cpu() -> Result<(), Skip> {
                Ok(TestBackend::Cpu.run(&$test)?)
            }
            pub fn $sim() -> Result<(), Skip> {
                Ok(TestBackend::Sim.run(&$test)?)
            }
            pub fn $wgpu() -> Result<(), Skip> {
                Ok(TestBackend::Wgpu.run(&$test)?)
            }
            pub fn $cuda() -> Result<(), Skip> {
                Ok(TestBackend::Cuda.run(&$test)?)
            }
        };
    }

    pub struct Natives;
    impl BackendTest for Natives {
        fn run<B: Backend>(&self, client: &ComputeClient<B>) {
            let n = 1000usize;
            // Positive inputs in [0.01, 10]: every function is defined there.
            let x: Vec<f32> = (0..n).map(|i| 0.01 + i as f32 * 0.01).collect();
            let input = upload(client, &x);
            let out = client.empty(4 * 7 * n as u64);
            let bindings = Bindings::new().buffer(&input).buffer(&out);
            client
                .launch(&natives, CubeCount::covering(n as u64, 64), bindings)
                .unwrap();
            let got = read_words(client, &out);
            for (i, &v) in x.iter().enumerate() {
                let v = f64::from(v);
                let want = [
                    v.sqrt(),
                    v.exp(),
                    v.ln(),
                    v.sin(),
                    v.cos(),
                    v.tanh(),
                    v.powf(1.5),
                ];
                for (j, want) in want.iter().enumerate() {
                    let got = f64::from(f32::from_bits(got[i * 7 + j]));
                    // The device's own: within 1e-5 relative, or 2^-11 absolute (WGSL's bound
                    // for `sin` and `cos` near their zeros).
                    let tolerance = (want.abs() * 1e-5).max(1.0 / 2048.0);
                    assert!(
                        (got - want).abs() <= tolerance,
                        "{} native function {j} of {v}: {got}, want {want}",
                        B::NAME
                    );
                }
            }
        }
    }
    on_each_backend!(
        Natives,
        native_functions_are_the_devices_own_on_cpu,
        native_functions_are_the_devices_own_on_sim,
        native_functions_are_the_devices_own_on_wgpu,
        native_functions_are_the_devices_own_on_cuda
    );

    pub struct Subnormals;
    impl BackendTest for Subnormals {
        fn run<B: Backend>(&self, client: &ComputeClient<B>) {
            let (a, b) = subnormal_operands();
            let n = a.len();
            let (ha, hb) = (upload(client, &a), upload(client, &b));
            let (out, flags) = (
                client.empty(4 * 13 * n as u64),
                client.empty(4 * 4 * n as u64),
            );
            let bindings = Bindings::new()
                .buffer(&ha)
                .buffer(&hb)
                .buffer(&out)
                .buffer(&flags);
            client
                .launch(&subnormal_ops, CubeCount::covering(n as u64, 64), bindings)
                .unwrap();
            let mut expected = Vec::new();
            let mut expected_flags = Vec::new();
            for (&x, &y) in a.iter().zip(&b) {
                let (fx, fy) = (flush(x), flush(y));
                expected.extend([
                    flush(fx + fy),
                    flush(fx - fy),
                    flush(fx * fy),
                    flush(fx / fy),
                    fx.sqrt(),
                    ops::min_f32(fx, fy),
                    ops::max_f32(fx, fy),
                    fx.floor(),
                    fx.ceil(),
                    fx.trunc(),
                    x,
                    -x,
                    x.abs(),
                ]);
                expected_flags.extend([fx < fy, fx == fy, fx <= fy, fx > 0.0].map(u32::from));
            }
            let expected: Vec<u32> = expected.iter().map(|v| v.to_bits()).collect();
            assert_same_f32(
                B::NAME,
                "subnormal operations",
                &read_words(client, &out),
                &expected,
            );
            assert_eq!(
                read_words(client, &flags),
                expected_flags,
                "{} comparisons",
                B::NAME
            );
            // The rule in examples: a subnormal sum is a zero of its sign, a subnormal operand
            // compares as zero, and a copy keeps it.
            let got = read_words(client, &out);
            assert_eq!(got[0], 0.0f32.to_bits(), "{}: 1e-40 + 0.0", B::NAME);
            assert_eq!(
                got[13 + 1],
                (-0.0f32).to_bits(),
                "{}: -1e-40 - 0.0",
                B::NAME
            );
            assert_eq!(
                got[6 * 13 + 2],
                0.0f32.to_bits(),
                "{}: MIN_POSITIVE * 0.5",
                B::NAME
            );
            assert_eq!(
                got[10],
                1.0e-40f32.to_bits(),
                "{}: a copy of 1e-40",
                B::NAME
            );
            assert_eq!(
                read_words(client, &flags)[2 * 4],
                0,
                "{}: 1e-40 < 2e-40",
                B::NAME
            );
        }
    }
    on_each_backend!(
        Subnormals,
        subnormals_are_flushed_on_cpu,
        subnormals_are_flushed_on_sim,
        subnormals_are_flushed_on_wgpu,
        subnormals_are_flushed_on_cuda
    );

    pub struct NanBits;
    impl BackendTest for NanBits {
        fn run<B: Backend>(&self, client: &ComputeClient<B>) {
            // inf - inf, 0 * inf, 0 / 0 and sqrt(-1): a NaN each, of the device's bits.
            let a = [f32::INFINITY, 0.0, 0.0, -1.0];
            let b = [f32::INFINITY, f32::INFINITY, 0.0, 1.0];
            let (ha, hb) = (upload(client, &a), upload(client, &b));
            let out = client.empty(4 * 4);
            client
                .launch(
                    &nan_ops,
                    CubeCount::covering(1, 1),
                    Bindings::new().buffer(&ha).buffer(&hb).buffer(&out),
                )
                .unwrap();
            let got = read_words(client, &out);
            let shown: Vec<String> = got.iter().map(|bits| format!("{bits:#010x}")).collect();
            eprintln!(
                "{}: NaN bits of inf - inf, 0 * inf, 0 / 0, sqrt(-1): {}",
                B::NAME,
                shown.join(" ")
            );
            for (what, bits) in ["inf - inf", "0 * inf", "0 / 0", "sqrt(-1)"]
                .iter()
                .zip(&got)
            {
                assert!(
                    f32::from_bits(*bits).is_nan(),
                    "{}: {what} gave {bits:#010x}, not a NaN",
                    B::NAME
                );
            }
        }
    }
    on_each_backend!(
        NanBits,
        nan_bits_are_the_devices_on_cpu,
        nan_bits_are_the_devices_on_sim,
        nan_bits_are_the_devices_on_wgpu,
        nan_bits_are_the_devices_on_cuda
    );

    pub struct Axpb;
    impl BackendTest for Axpb {
        fn run<B: Backend>(&self, client: &ComputeClient<B>) {
            let n = 1000;
            let x = floats(n, 1);
            let (a, b) = (1.1f32, -0.7f32);
            let input = upload(client, &x);
            let (y, fused) = (client.empty(4 * n as u64), client.empty(4 * n as u64));
            let bindings = Bindings::new()
                .buffer(&input)
                .buffer(&y)
                .buffer(&fused)
                .scalar_f32(a)
                .scalar_f32(b);
            client
                .launch(&axpb, CubeCount::covering(n as u64, 64), bindings)
                .unwrap();
            let plain: Vec<u32> = x.iter().map(|x| (a * x + b).to_bits()).collect();
            let one_rounding: Vec<u32> = x.iter().map(|x| x.mul_add(a, b).to_bits()).collect();
            assert_ne!(
                plain, one_rounding,
                "the inputs tell the two roundings apart"
            );
            assert_same_f32(B::NAME, "a * x + b", &read_words(client, &y), &plain);
            let fused = read_words(client, &fused);
            if B::NAME == "wgpu" {
                // WGSL's `fma` may round twice (SPIR-V's `Fma` promises only the precision of
                // `a * b + c`; lavapipe rounds twice): either rounding, element by element.
                for (i, got) in fused.iter().enumerate() {
                    assert!(
                        same_f32(*got, one_rounding[i]) || same_f32(*got, plain[i]),
                        "wgpu mul_add[{i}]: {got:#x}"
                    );
                }
            } else {
                assert_same_f32(B::NAME, "mul_add", &fused, &one_rounding);
            }
        }
    }
    on_each_backend!(
        Axpb,
        axpb_rounds_twice_on_cpu,
        axpb_rounds_twice_on_sim,
        axpb_rounds_twice_on_wgpu,
        axpb_rounds_twice_on_cuda
    );

    /// The host's `edges`, word by word, through the semantics of `gpuworld::kernel::ops`.
    fn edges_on_host(xs: &[u32], fs: &[f32]) -> Vec<u32> {
        let mut out = Vec::new();
        for (&x, &f) in xs.iter().zip(fs) {
            out.extend([
                ops::div_u32(x, ops::rem_u32(x, 5)),
                ops::rem_u32(x, x & 3),
                x.wrapping_shl(x % 40),
                x.wrapping_shr(x % 40),
                x.wrapping_mul(2654435761)
                    .wrapping_add(7)
                    .wrapping_sub(x ^ 0xdeadbeef),
                ops::f32_to_u32(f),
                (x as f32).to_bits(),
                ops::min_f32(f, 1.5).to_bits(),
                ops::max_f32(f, -1.5).to_bits(),
                ops::abs_f32(-f).to_bits(),
                f.floor().to_bits() ^ f.ceil().to_bits() ^ f.trunc().to_bits(),
                (f / 3.0).to_bits(),
                (f * f).sqrt().to_bits(),
                if f < 0.5 && x > 3 {
                    x.min(9)
                } else {
                    !x.max(4)
                },
                u32::from(f.is_nan()) + 2 * u32::from(x == 0),
                f32::from_bits(x | 0x3f80_0000)
                    .to_bits()
                    .wrapping_add(ops::f32_to_u32(f) % 7),
            ]);
        }
        out
    }

    /// The host's `signed`, word by word, through the semantics of `gpuworld::kernel::ops`.
    fn signed_on_host(xs: &[i32], ys: &[i32], fs: &[f32], bias: i32) -> Vec<u32> {
        let mut out = Vec::new();
        for ((&x, &y), &f) in xs.iter().zip(ys).zip(fs) {
            let d = -3i32;
            out.extend(
                [
                    x.wrapping_add(y.wrapping_mul(bias)),
                    x.wrapping_sub(y),
                    x.wrapping_mul(y),
                    ops::div_i32(x, y),
                    ops::rem_i32(x, y),
                    x.wrapping_shr(y as u32),
                    x.wrapping_shl((y as u32) % 40),
                    x.wrapping_neg(),
                    ops::f32_to_i32(f),
                    (x as f32).to_bits() as i32,
                    ((x as u32) >> 3) as i32,
                    if x < y { x.min(d) } else { y.max(-100) },
                    i32::from(x == y) + 2 * i32::from(x > 0) + 4 * i32::from(x <= d),
                    !x ^ (x & y | 7),
                    ops::div_i32(x, d).wrapping_add(ops::div_i32(i32::MIN, d + 2)),
                    ops::rem_i32(ops::f32_to_i32(f * 1000.0), 7).wrapping_sub(d),
                ]
                .map(|v| v as u32),
            );
        }
        out
    }

    pub struct Signed;
    impl BackendTest for Signed {
        fn run<B: Backend>(&self, client: &ComputeClient<B>) {
            let n = 300;
            let mut xs: Vec<i32> = words(n, 5).into_iter().map(|w| w as i32).collect();
            let mut ys: Vec<i32> = words(n, 6)
                .into_iter()
                .map(|w| (w as i32) >> (w % 31))
                .collect();
            let mut fs = floats(n, 7);
            // The edges: `i32::MIN / -1`, by zero, past i32's range, NaN.
            let corners = [
                (i32::MIN, -1, f32::NAN),
                (i32::MIN, 0, f32::INFINITY),
                (i32::MAX, -1, -3e9),
                (-7, 2, 3e9),
                (7, -2, -2.9),
                (-1, 31, -2147483648.0),
                (0, -31, 2147483648.0),
            ];
            for (k, (x, y, f)) in corners.into_iter().enumerate() {
                (xs[k], ys[k], fs[k]) = (x, y, f);
            }
            let bias = -7;
            let inputs = [
                upload(client, &xs),
                upload(client, &ys),
                upload(client, &fs),
            ];
            let out = client.empty(4 * 16 * n as u64);
            let bindings = Bindings::new()
                .buffer(&inputs[0])
                .buffer(&inputs[1])
                .buffer(&inputs[2])
                .buffer(&out)
                .scalar_i32(bias);
            client
                .launch(&signed_ops, CubeCount::covering(n as u64, 32), bindings)
                .unwrap();
            let got = read_words(client, &out);
            let expected = signed_on_host(&xs, &ys, &fs, bias);
            for (k, (g, e)) in got.iter().zip(&expected).enumerate() {
                assert_eq!(
                    g,
                    e,
                    "{} signed: result {} of input {} (x {}, y {}, f {})",
                    B::NAME,
                    k % 16,
                    k / 16,
                    xs[k / 16],
                    ys[k / 16],
                    fs[k / 16]
                );
            }
        }
    }
    on_each_backend!(
        Signed,
        signed_integers_wrap_and_convert_on_cpu,
        signed_integers_wrap_and_convert_on_sim,
        signed_integers_wrap_and_convert_on_wgpu,
        signed_integers_wrap_and_convert_on_cuda
    );

    pub struct Histogram;
    impl BackendTest for Histogram {
        fn run<B: Backend>(&self, client: &ComputeClient<B>) {
            let n = 100_000;
            let cells: Vec<u32> = words(n, 8).into_iter().map(|w| w % 10).collect();
            let mut expected = [0u32; 10];
            for &cell in &cells {
                expected[cell as usize] += 1;
            }
            let input = upload(client, &cells);
            let counts = upload(client, &[0u32; 10]);
            let bindings = Bindings::new().buffer(&input).buffer(&counts);
            client
                .launch(&histogram, CubeCount::covering(n as u64, 256), bindings)
                .unwrap();
            assert_eq!(
                read_words(client, &counts),
                expected,
                "{} histogram",
                B::NAME
            );
        }
    }
    on_each_backend!(
        Histogram,
        a_histogram_with_atomics_counts_exactly_on_cpu,
        a_histogram_with_atomics_counts_exactly_on_sim,
        a_histogram_with_atomics_counts_exactly_on_wgpu,
        a_histogram_with_atomics_counts_exactly_on_cuda
    );

    pub struct Atomics;
    impl BackendTest for Atomics {
        fn run<B: Backend>(&self, client: &ComputeClient<B>) {
            let n = 1000;
            let values: Vec<i32> = words(n, 9).into_iter().map(|w| w as i32).collect();
            let mut unsigned = vec![5, 1000, u32::MAX, 0, u32::MAX, 0, 0, 0];
            unsigned.extend((0..n as u32).map(|i| i * 3));
            let mut ints = vec![5, 1000, i32::MAX, i32::MIN, -1, 0, 0, 0];
            ints.extend((0..n).map(|i| if i % 2 == 0 { 7 } else { 0 }));
            let buffers = [
                upload(client, &values),
                upload(client, &unsigned),
                upload(client, &ints),
            ];
            let olds = client.empty(4 * 4 * n as u64);
            let bindings = Bindings::new()
                .buffer(&buffers[0])
                .buffer(&buffers[1])
                .buffer(&buffers[2])
                .buffer(&olds);
            client
                .launch(&atomics, CubeCount::covering(n as u64, 64), bindings)
                .unwrap();
            let mut want_unsigned = unsigned.clone();
            let mut want_signed = ints.clone();
            let mut want_olds = Vec::new();
            for (i, &v) in values.iter().enumerate() {
                let u = v as u32;
                want_unsigned[0] = want_unsigned[0].wrapping_add(u);
                want_unsigned[1] = want_unsigned[1].wrapping_sub(u);
                want_unsigned[2] = want_unsigned[2].min(u);
                want_unsigned[3] = want_unsigned[3].max(u);
                want_unsigned[4] &= u | 0xff00_ff00;
                want_unsigned[5] |= u & 0x00ff_00ff;
                want_unsigned[6] ^= u;
                want_signed[0] = want_signed[0].wrapping_add(v);
                want_signed[1] = want_signed[1].wrapping_sub(v);
                want_signed[2] = want_signed[2].min(v);
                want_signed[3] = want_signed[3].max(v);
                want_signed[4] &= v | -256;
                want_signed[5] |= v & 0xff;
                want_signed[6] ^= v;
                let old = want_unsigned[8 + i];
                want_unsigned[8 + i] = u;
                let seen = want_signed[8 + i];
                if seen == 7 {
                    want_signed[8 + i] = v;
                }
                want_olds.extend([old, seen as u32, want_signed[8 + i] as u32, 0]);
            }
            assert_eq!(
                read_words(client, &buffers[1]),
                want_unsigned,
                "{} u32",
                B::NAME
            );
            let got_signed: Vec<u32> = read_words(client, &buffers[2]);
            let want_signed: Vec<u32> = want_signed.iter().map(|&v| v as u32).collect();
            assert_eq!(got_signed, want_signed, "{} i32", B::NAME);
            assert_eq!(
                read_words(client, &olds),
                want_olds,
                "{} old values",
                B::NAME
            );
        }
    }
    on_each_backend!(
        Atomics,
        atomic_operations_give_their_final_values_on_cpu,
        atomic_operations_give_their_final_values_on_sim,
        atomic_operations_give_their_final_values_on_wgpu,
        atomic_operations_give_their_final_values_on_cuda
    );

    /// The host's `vectors`: each component as the kernel's subset defines it.
    fn vectors_on_host(xs: &[f32], us: &[u32], is: &[i32]) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
        let (mut f, mut u, mut s) = (Vec::new(), Vec::new(), Vec::new());
        let dot3 = |a: [f32; 3], b: [f32; 3]| (a[0] * b[0] + a[1] * b[1]) + a[2] * b[2];
        for i in 0..us.len() {
            let p = [xs[3 * i], xs[3 * i + 1], xs[3 * i + 2]];
            let mut v = [xs[3 * i + 2], -1.5, 0.25];
            v = [0, 1, 2].map(|c| v[c] * 0.5 + p[c]);
            v = [0, 1, 2].map(|c| v[c] - [0.125, 0.0, 1.0][c]);
            v[1] *= 3.0;
            let len = dot3(p, p).sqrt();
            let n = p.map(|c| c / len);
            let q = if p[0] < 0.0 {
                n.map(|c| -c)
            } else {
                n.map(|c| c * 2.0)
            };
            let w = [1.0f32, 2.0, 3.0, 4.0].map(|c| 2.0 * c * q[2]);
            let sw = [v[1], v[0]];
            f.extend(
                [
                    v[0],
                    v[1],
                    v[2],
                    dot3(p, v),
                    dot3(v, v).sqrt(),
                    n[0] + n[1] + n[2],
                    q[1] + w[3],
                    sw[0] - sw[1],
                ]
                .map(f32::to_bits),
            );
            let a = [
                us[i].wrapping_mul(3).wrapping_add(1),
                7u32.wrapping_mul(3).wrapping_add(us[i]),
            ];
            u.extend([
                a[0],
                a[0].wrapping_mul(a[0])
                    .wrapping_add(a[1].wrapping_mul(a[1])),
            ]);
            let b = [
                is[i].wrapping_mul(2).wrapping_sub(is[i]),
                (-4i32).wrapping_mul(-3).wrapping_sub(1),
            ];
            s.extend([
                b[1] as u32,
                b[0].wrapping_mul(b[0])
                    .wrapping_add(b[1].wrapping_mul(b[1])) as u32,
            ]);
        }
        (f, u, s)
    }

    pub struct Vectors;
    impl BackendTest for Vectors {
        fn run<B: Backend>(&self, client: &ComputeClient<B>) {
            let n = 500;
            let xs = floats(3 * n, 10);
            let us = words(n, 11);
            let is: Vec<i32> = words(n, 12).into_iter().map(|w| w as i32).collect();
            let inputs = [
                upload(client, &xs),
                upload(client, &us),
                upload(client, &is),
            ];
            let outs = [
                client.empty(4 * 8 * n as u64),
                client.empty(4 * 2 * n as u64),
                client.empty(4 * 2 * n as u64),
            ];
            let bindings = (inputs.iter().chain(&outs)).fold(Bindings::new(), Bindings::buffer);
            client
                .launch(&vectors, CubeCount::covering(n as u64, 64), bindings)
                .unwrap();
            let (f, u, s) = vectors_on_host(&xs, &us, &is);
            assert_same_f32(B::NAME, "f32 vectors", &read_words(client, &outs[0]), &f);
            assert_eq!(read_words(client, &outs[1]), u, "{} u32 vectors", B::NAME);
            assert_eq!(read_words(client, &outs[2]), s, "{} i32 vectors", B::NAME);
        }
    }
    on_each_backend!(
        Vectors,
        vectors_compute_component_by_component_on_cpu,
        vectors_compute_component_by_component_on_sim,
        vectors_compute_component_by_component_on_wgpu,
        vectors_compute_component_by_component_on_cuda
    );

    pub struct Shaping;
    impl BackendTest for Shaping {
        fn run<B: Backend>(&self, client: &ComputeClient<B>) {
            use shaping::*;
            let n = 400;
            let xs = floats(n, 13);
            let is: Vec<i32> = words(n, 14).into_iter().map(|w| (w as i32) >> 8).collect();
            let inputs = [upload(client, &xs), upload(client, &is)];
            let out = client.empty(4 * 3 * n as u64);
            let bindings = Bindings::new()
                .buffer(&inputs[0])
                .buffer(&inputs[1])
                .buffer(&out);
            client
                .launch(&shape, CubeCount::covering(n as u64, 32), bindings)
                .unwrap();
            let expected: Vec<u32> = (0..n)
                .flat_map(|i| {
                    [
                        lerp(xs[i], SCALE, xs[i] * SCALE).to_bits(),
                        clamp_i(is[i] / 1000, OFFSET, 40) as u32,
                        (lerp(1.0, 2.0, SCALE) + OFFSET as f32).to_bits(),
                    ]
                })
                .collect();
            assert_same_f32(B::NAME, "shape", &read_words(client, &out), &expected);
            let reversed = client.empty(4 * n as u64);
            let bindings = Bindings::new().buffer(&inputs[0]).buffer(&reversed);
            client
                .launch(
                    &reverse_tiles,
                    CubeCount::covering(n as u64, TILE),
                    bindings,
                )
                .unwrap();
            let tile = TILE as usize;
            let expected: Vec<u32> = (0..n)
                .map(|i| {
                    let from = i / tile * tile + tile - 1 - i % tile;
                    xs.get(from).map_or(0, |x| x.to_bits())
                })
                .collect();
            assert_same_f32(
                B::NAME,
                "reverse_tiles",
                &read_words(client, &reversed),
                &expected,
            );
        }
    }
    on_each_backend!(
        Shaping,
        module_constants_and_functions_inline_on_cpu,
        module_constants_and_functions_inline_on_sim,
        module_constants_and_functions_inline_on_wgpu,
        module_constants_and_functions_inline_on_cuda
    );

    pub struct Particles;
    impl BackendTest for Particles {
        fn run<B: Backend>(&self, client: &ComputeClient<B>) {
            use particles::*;
            let n = 300;
            let f = floats(4 * n, 15);
            let ps: Vec<Particle> = (0..n)
                .map(|i| Particle {
                    x: f[4 * i].abs() * 8.0 + 5.0,
                    y: f[4 * i + 1].abs(),
                    vx: f[4 * i + 2] * 40.0,
                    vy: f[4 * i + 3],
                    cell: 0,
                    bounces: i as i32 - 100,
                })
                .collect();
            let dt = 0.0625f32;
            let input = upload(client, &ps);
            let moved = client.empty((std::mem::size_of::<Particle>() * n) as u64);
            let bindings = Bindings::new().buffer(&input).buffer(&moved).scalar_f32(dt);
            client
                .launch(&step, CubeCount::covering(n as u64, 64), bindings)
                .unwrap();
            let mut want_ps = ps.clone();
            let mut want_moved = Vec::new();
            for (i, q) in want_ps.iter_mut().enumerate() {
                let mut p = *q;
                let v = [p.vx * dt, p.vy * dt];
                p.x += v[0];
                p.y += v[1];
                if p.x > WIDTH {
                    p.x = WIDTH - (p.x - WIDTH);
                    p.vx = -p.vx;
                    p.bounces += 1;
                }
                p.cell = (p.x as u32).wrapping_add(16u32.wrapping_mul(p.y as u32));
                want_moved.push(if i == 0 {
                    Particle {
                        x: 1.0,
                        y: 2.0,
                        vx: 3.0,
                        vy: 4.0,
                        cell: n as u32,
                        bounces: -7,
                    }
                } else {
                    p
                });
                q.bounces -= 2;
                q.vy *= 0.5;
            }
            let words = |values: &[Particle]| -> Vec<u32> { bytemuck::cast_slice(values).to_vec() };
            assert_same_f32(B::NAME, "ps", &read_words(client, &input), &words(&want_ps));
            assert_same_f32(
                B::NAME,
                "moved",
                &read_words(client, &moved),
                &words(&want_moved),
            );
        }
    }
    on_each_backend!(
        Particles,
        struct_buffers_move_their_fields_bits_on_cpu,
        struct_buffers_move_their_fields_bits_on_sim,
        struct_buffers_move_their_fields_bits_on_wgpu,
        struct_buffers_move_their_fields_bits_on_cuda
    );

    pub struct Generic;
    impl BackendTest for Generic {
        fn run<B: Backend>(&self, client: &ComputeClient<B>) {
            let n = 200;
            let launch = |kernel: &'static gpuworld::KernelDef, words: &[u32]| {
                let input = upload(client, words);
                let out = client.empty(4 * n as u64);
                let bindings = Bindings::new().buffer(&input).buffer(&out);
                client
                    .launch(kernel, CubeCount::covering(n as u64, 64), bindings)
                    .unwrap();
                read_words(client, &out)
            };
            let fs = floats(n, 16);
            let us = words(n, 17);
            let want_f: Vec<u32> = (fs.iter())
                .map(|&x| (0..3).fold(x, |total, _| total + x).to_bits())
                .collect();
            let f_words: Vec<u32> = fs.iter().map(|x| x.to_bits()).collect();
            assert_same_f32(B::NAME, "times_f32", &launch(&times_f32, &f_words), &want_f);
            let want_u: Vec<u32> = (us.iter())
                .map(|&x| (0..5).fold(x, |total, _| total.wrapping_add(x)))
                .collect();
            assert_eq!(launch(&times_u32, &us), want_u, "{} times_u32", B::NAME);
            let want_i: Vec<u32> = (us.iter())
                .map(|&x| (0..7).fold(x as i32, |total, _| total.wrapping_add(x as i32)) as u32)
                .collect();
            assert_eq!(launch(&times_i32, &us), want_i, "{} times_i32", B::NAME);
            assert_eq!(
                times_i32.signature.buffers[0].elem,
                gpuworld::kernel::Elem::I32
            );
            assert_eq!(times_f32.id, "kernel_macro::times_f32");
        }
    }
    on_each_backend!(
        Generic,
        a_generic_kernel_has_one_static_per_instance_on_cpu,
        a_generic_kernel_has_one_static_per_instance_on_sim,
        a_generic_kernel_has_one_static_per_instance_on_wgpu,
        a_generic_kernel_has_one_static_per_instance_on_cuda
    );

    pub struct Edges;
    impl BackendTest for Edges {
        fn run<B: Backend>(&self, client: &ComputeClient<B>) {
            let n = 300;
            let xs = words(n, 2);
            let mut fs = floats(n, 3);
            // NaN, infinities and values past u32's range, for the conversions and min/max.
            fs[3] = f32::NAN;
            fs[4] = f32::INFINITY;
            fs[5] = f32::NEG_INFINITY;
            fs[6] = 5e9;
            fs[7] = -3.75;
            fs[8] = 4294967040.0;
            let (xs_h, fs_h) = (upload(client, &xs), upload(client, &fs));
            let out = client.empty(16 * 4 * n as u64);
            client
                .launch(
                    &edges,
                    CubeCount::covering(n as u64, 32),
                    Bindings::new().buffer(&xs_h).buffer(&fs_h).buffer(&out),
                )
                .unwrap();
            let got = read_words(client, &out);
            let expected = edges_on_host(&xs, &fs);
            for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
                // Words 6–12 hold f32 bits; the others integers. WGSL allows `/` and `sqrt`
                // (words 11 and 12) 2.5 ULP, which NVIDIA's Vulkan driver takes.
                let float_word = (6..=12).contains(&(i % 16));
                let ulps = (*g as i64 - *e as i64).unsigned_abs();
                if B::NAME == "wgpu" && (11..=12).contains(&(i % 16)) && ulps <= 3 {
                    continue;
                }
                if float_word {
                    assert!(
                        same_f32(*g, *e),
                        "{} edges word {} of input {}: got {g:#x}, expected {e:#x} (x {:#x}, f {})",
                        B::NAME,
                        i % 16,
                        i / 16,
                        xs[i / 16],
                        fs[i / 16]
                    );
                } else {
                    assert_eq!(
                        g,
                        e,
                        "{} edges word {} of input {} (x {:#x}, f {})",
                        B::NAME,
                        i % 16,
                        i / 16,
                        xs[i / 16],
                        fs[i / 16]
                    );
                }
            }
        }
    }
    on_each_backend!(
        Edges,
        integer_and_conversion_edges_on_cpu,
        integer_and_conversion_edges_on_sim,
        integer_and_conversion_edges_on_wgpu,
        integer_and_conversion_edges_on_cuda
    );

    pub struct TreeSum;
    impl BackendTest for TreeSum {
        fn run<B: Backend>(&self, client: &ComputeClient<B>) {
            let n = 256 * 5 + 77;
            let x = floats(n, 4);
            let cubes = n.div_ceil(256);
            let input = upload(client, &x);
            let output = client.empty(4 * cubes as u64);
            client
                .launch(
                    &tree_sum,
                    CubeCount::new_1d(cubes as u32),
                    Bindings::new().buffer(&input).buffer(&output),
                )
                .unwrap();
            // The tree's order of additions, on the host.
            let expected: Vec<u32> = (0..cubes)
                .map(|c| {
                    let mut partial: Vec<f32> = (0..256)
                        .map(|u| x.get(c * 256 + u).copied().unwrap_or(0.0))
                        .collect();
                    for step in 0..8 {
                        let stride = 128 >> step;
                        for u in 0..stride {
                            partial[u] += partial[u + stride];
                        }
                    }
                    partial[0].to_bits()
                })
                .collect();
            assert_same_f32(
                B::NAME,
                "tree sums",
                &read_words(client, &output),
                &expected,
            );
        }
    }
    on_each_backend!(
        TreeSum,
        tree_sum_with_barriers_on_cpu,
        tree_sum_with_barriers_on_sim,
        tree_sum_with_barriers_on_wgpu,
        tree_sum_with_barriers_on_cuda
    );

    pub struct Stencil;
    impl BackendTest for Stencil {
        fn run<B: Backend>(&self, client: &ComputeClient<B>) {
            let (width, height, alpha) = (37u32, 21u32, 0.2f32);
            let len = (width * height) as usize;
            let grid = floats(len, 5);
            let u = upload(client, &grid);
            let out = client.empty(4 * len as u64);
            client
                .launch(
                    &heat,
                    CubeCount::covering_2d(width, height, 16),
                    Bindings::new()
                        .buffer(&u)
                        .buffer(&out)
                        .scalar_u32(width)
                        .scalar_u32(height)
                        .scalar_f32(alpha),
                )
                .unwrap();
            let (w, h) = (width as usize, height as usize);
            let expected: Vec<u32> = (0..len)
                .map(|i| {
                    let (x, y) = (i % w, i / w);
                    let center = grid[i];
                    if x > 0 && y > 0 && x + 1 < w && y + 1 < h {
                        let sum = grid[i - 1] + grid[i + 1] + grid[i - w] + grid[i + w];
                        (center + alpha * (sum - 4.0 * center)).to_bits()
                    } else {
                        center.to_bits()
                    }
                })
                .collect();
            assert_same_f32(B::NAME, "heat step", &read_words(client, &out), &expected);
        }
    }
    on_each_backend!(
        Stencil,
        stencil_in_tiles_on_cpu,
        stencil_in_tiles_on_sim,
        stencil_in_tiles_on_wgpu,
        stencil_in_tiles_on_cuda
    );

    pub struct Bounds;
    impl BackendTest for Bounds {
        fn run<B: Backend>(&self, client: &ComputeClient<B>) {
            let (n, reach) = (40usize, 3u32);
            let src: Vec<u32> = (0..n as u32 - 5).map(|v| v * 7).collect();
            let src_h = upload(client, &src);
            // Static and dynamic counts of 5 cubes of 8 units each.
            let count = upload(client, &[5u32, 1, 1]);
            for dynamic in [false, true] {
                let dst = upload(client, &vec![1u32; n]);
                let cubes = if dynamic {
                    CubeCount::Dynamic(count.binding())
                } else {
                    CubeCount::new_1d(5)
                };
                client
                    .launch(
                        &bounds,
                        cubes,
                        Bindings::new()
                            .buffer(&src_h)
                            .buffer(&dst)
                            .scalar_u32(reach),
                    )
                    .unwrap();
                let mut expected = vec![1u32; n];
                for i in 0..n as u32 {
                    if i % 3 == 2 {
                        continue;
                    }
                    let at = (i + reach) as usize;
                    let loaded = src.get(at).copied().unwrap_or(0);
                    if at < n {
                        expected[at] = loaded + reach * 1000 + 5 * 100;
                    }
                }
                assert_eq!(
                    read_words(client, &dst),
                    expected,
                    "{} bounds (dynamic count: {dynamic})",
                    B::NAME
                );
            }
        }
    }
    on_each_backend!(
        Bounds,
        bounds_returns_and_dynamic_counts_on_cpu,
        bounds_returns_and_dynamic_counts_on_sim,
        bounds_returns_and_dynamic_counts_on_wgpu,
        bounds_returns_and_dynamic_counts_on_cuda
    );

    pub struct Curves;
    impl BackendTest for Curves {
        fn run<B: Backend>(&self, client: &ComputeClient<B>) {
            let n = 500;
            let x: Vec<f32> = floats(n, 6).iter().map(|v| v.clamp(-3.0, 3.0)).collect();
            let input = upload(client, &x);
            let out = client.empty(6 * 4 * n as u64);
            client
                .launch(
                    &curves,
                    CubeCount::covering(n as u64, 64),
                    Bindings::new().buffer(&input).buffer(&out),
                )
                .unwrap();
            let got: Vec<f32> = client.read_one_as(&out).unwrap();
            for (i, v) in x.iter().enumerate() {
                let expected = [
                    v.exp(),
                    (v + 4.0).ln(),
                    v.sin(),
                    v.cos(),
                    v.tanh(),
                    (v + 4.0).powf(1.5),
                ];
                for (k, e) in expected.iter().enumerate() {
                    let g = got[6 * i + k];
                    // The documented tolerance: 1e-5 relative, or 2^-11 absolute (WGSL's sin
                    // and cos on [-π, π]).
                    let tolerance = (e.abs() * 1e-5).max(1.0 / 2048.0);
                    assert!(
                        (g - e).abs() <= tolerance,
                        "{} curves[{k}] of {v}: got {g}, expected {e}",
                        B::NAME
                    );
                }
            }
        }
    }
    on_each_backend!(
        Curves,
        transcendentals_within_tolerance_on_cpu,
        transcendentals_within_tolerance_on_sim,
        transcendentals_within_tolerance_on_wgpu,
        transcendentals_within_tolerance_on_cuda
    );
}

/// The macro's `KernelDef`: the signature from the parameters, a source per backend.
fn the_generated_sources_declare_the_signature() {
    use gpuworld::kernel::{Access, CpuSource, CudaSource, Elem, WgslSource};
    let signature = &axpb.signature;
    assert_eq!(axpb.name, "axpb");
    assert_eq!(axpb.id, "kernel_macro::axpb");
    assert_eq!(signature.cube_dim, [64, 1, 1]);
    let buffers: Vec<_> = signature
        .buffers
        .iter()
        .map(|p| (p.name, p.elem, p.access))
        .collect();
    assert_eq!(
        buffers,
        [
            ("x", Elem::F32, Access::Read),
            ("y", Elem::F32, Access::ReadWrite),
            ("fused", Elem::F32, Access::Write)
        ]
    );
    let scalars: Vec<_> = signature.scalars.iter().map(|p| (p.name, p.elem)).collect();
    assert_eq!(scalars, [("a", Elem::F32), ("b", Elem::F32)]);
    assert!(axpb.source::<CpuSource>().is_some());
    let wgsl = axpb.source::<WgslSource>().expect("a WGSL source").0;
    assert!(wgsl.contains("@workgroup_size(64, 1, 1)"), "{wgsl}");
    let cuda = axpb.source::<CudaSource>().expect("a CUDA source").0;
    assert!(
        cuda.contains("extern \"C\" __global__ void axpb(GW_PARAMS)"),
        "{cuda}"
    );
    assert!(cuda.contains("__fmul_rn"), "no contraction: {cuda}");
    assert_eq!(tree_sum.signature.cube_dim, [256, 1, 1]);
    assert_eq!(heat.signature.scalars.len(), 3);
}

fn an_atomic_buffer_is_declared_atomic_and_reached_through_atomic_functions() {
    use gpuworld::kernel::{Access, CudaSource, Elem, WgslSource};
    let buffers: Vec<_> = (atomics.signature.buffers.iter())
        .map(|p| (p.name, p.elem, p.access))
        .collect();
    assert_eq!(
        buffers,
        [
            ("values", Elem::I32, Access::Read),
            ("words", Elem::U32, Access::Atomic),
            ("ints", Elem::I32, Access::Atomic),
            ("olds", Elem::U32, Access::Write)
        ]
    );
    let wgsl = atomics.source::<WgslSource>().expect("a WGSL source").0;
    assert!(wgsl.contains("atomicAdd(&words[gw_i], gw_v)"), "{wgsl}");
    assert!(
        wgsl.contains("atomicCompareExchangeWeak(&ints[gw_i]"),
        "{wgsl}"
    );
    let cuda = atomics.source::<CudaSource>().expect("a CUDA source").0;
    for call in [
        "atomicAdd(&words[0u], gw_u_",
        "atomicSub(&ints[1u]",
        "atomicCAS(&ints[(8u + gw_i_",
        "*((volatile int *)&ints[(8u + gw_i_",
    ] {
        assert!(cuda.contains(call), "{call} in {cuda}");
    }
}

/// The WGSL and CUDA C the macro generates for each kernel of this file, recorded
/// (`tests/snapshots/kernel_macro__*.snap`): a change to the generators that changes what a
/// backend compiles shows here. Each snapshot holds the whole text's FNV-1a hash (the shared
/// helpers included) and the kernel's own part, from its first buffer helper (WGSL) or its
/// entry point (CUDA C) on.
fn the_generated_sources_are_as_recorded() {
    use gpuworld::kernel::{CudaSource, KernelDef, WgslSource};
    let kernels: [&KernelDef; 18] = [
        &axpb,
        &edges,
        &signed_ops,
        &histogram,
        &atomics,
        &vectors,
        &shaping::reverse_tiles,
        &shaping::shape,
        &particles::step,
        &times_f32,
        &times_i32,
        &tree_sum,
        &heat,
        &bounds,
        &curves,
        &subnormal_ops,
        &nan_ops,
        &natives,
    ];
    let fnv = |text: &str| {
        text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    };
    for kernel in kernels {
        let wgsl: &str = kernel
            .source::<WgslSource>()
            .expect("the macro emits WGSL")
            .0;
        let cuda: &str = kernel
            .source::<CudaSource>()
            .expect("the macro emits CUDA C")
            .0;
        let wgsl_own = wgsl
            .find("\nfn gw_load_")
            .or_else(|| wgsl.find("\nfn gw_atomic_"))
            .or_else(|| wgsl.find("\n@compute"))
            .map_or(wgsl, |at| &wgsl[at + 1..]);
        let cuda_own = cuda
            .find("extern \"C\" __global__")
            .map_or(cuda, |at| &cuda[at..]);
        insta::assert_snapshot!(
            format!("{}_wgsl", kernel.name),
            format!("whole text: fnv1a {:016x}\n\n{wgsl_own}", fnv(wgsl))
        );
        insta::assert_snapshot!(
            format!("{}_cuda", kernel.name),
            format!("whole text: fnv1a {:016x}\n\n{cuda_own}", fnv(cuda))
        );
    }
}
