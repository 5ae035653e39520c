//! The WGSL text of the exact `f32` division and square root of
//! `gpuworld_systems::kernel::exact_math`: the same algorithm, line for line, on `u32`/`i32`
//! (a long division and a digit-by-digit square root, rounded to nearest even, subnormals
//! included), so that wgpu computes IEEE 754's bits whatever the driver's `/` and `sqrt` do
//! (WGSL allows them 2.5 ULP, and lets a driver flush subnormals). CUDA needs none: NVRTC's
//! `__fdiv_rn` and `__fsqrt_rn` are IEEE 754's, and gpuworld compiles without `-ftz`.
//!
//! The results are returned as bits and only then read as `f32`, so that neither naga's
//! constant evaluation (which refuses a NaN or an infinity) nor a driver sees a float it could
//! simplify before it is stored.

/// The WGSL helpers `gw_exact_div(a, b)` and `gw_exact_sqrt(x)`.
pub const WGSL: &str = "
// Correctly rounded f32 division and square root from integer operations on the bits
// (gpuworld_systems::kernel::exact_math): WGSL allows `/` and `sqrt` 2.5 ULP.
fn gw_exact_unpack(bits: u32) -> vec2<i32> {
    let e = i32((bits & 0x7f800000u) >> 23u);
    let f = bits & 0x007fffffu;
    if e == 0 {
        let s = i32(countLeadingZeros(f)) - 8;
        return vec2<i32>(i32(f << u32(s)), 1 - s);
    }
    return vec2<i32>(i32(f | 0x00800000u), e);
}

fn gw_exact_round_pack(sign: u32, exp_in: i32, q_in: u32, sticky_in: bool) -> u32 {
    if exp_in >= 255 {
        return sign | 0x7f800000u;
    }
    var q = q_in;
    var sticky = sticky_in;
    var e = exp_in;
    if e <= 0 {
        let s = 1 - e;
        if s > 26 {
            sticky = sticky || q != 0u;
            q = 0u;
        } else {
            let su = u32(s);
            sticky = sticky || (q & ((1u << su) - 1u)) != 0u;
            q = q >> su;
        }
        e = 0;
    }
    var mant = q >> 2u;
    let rest = q & 3u;
    if rest == 3u || (rest == 2u && (sticky || (mant & 1u) == 1u)) {
        mant = mant + 1u;
    }
    if e == 0 {
        return sign | mant;
    }
    if mant == 0x01000000u {
        mant = mant >> 1u;
        e = e + 1;
        if e >= 255 {
            return sign | 0x7f800000u;
        }
    }
    return sign | (u32(e) << 23u) | (mant & 0x007fffffu);
}

fn gw_exact_div_bits(a: u32, b: u32) -> u32 {
    let sign = (a ^ b) & 0x80000000u;
    let abs_a = a & 0x7fffffffu;
    let abs_b = b & 0x7fffffffu;
    if abs_a > 0x7f800000u || abs_b > 0x7f800000u {
        return 0x7fc00000u;
    }
    if abs_a == 0x7f800000u {
        if abs_b == 0x7f800000u {
            return 0x7fc00000u;
        }
        return sign | 0x7f800000u;
    }
    if abs_b == 0x7f800000u {
        return sign;
    }
    if abs_b == 0u {
        if abs_a == 0u {
            return 0x7fc00000u;
        }
        return sign | 0x7f800000u;
    }
    if abs_a == 0u {
        return sign;
    }
    let ua = gw_exact_unpack(abs_a);
    let ub = gw_exact_unpack(abs_b);
    var ma = u32(ua.x);
    let mb = u32(ub.x);
    var e = ua.y - ub.y + 127;
    if ma < mb {
        ma = ma << 1u;
        e = e - 1;
    }
    var rem = ma;
    var q = 0u;
    for (var i = 0u; i < 26u; i = i + 1u) {
        q = q << 1u;
        if rem >= mb {
            rem = rem - mb;
            q = q | 1u;
        }
        rem = rem << 1u;
    }
    return gw_exact_round_pack(sign, e, q, rem != 0u);
}

fn gw_exact_div(a: f32, b: f32) -> f32 {
    return bitcast<f32>(gw_exact_div_bits(bitcast<u32>(a), bitcast<u32>(b)));
}

fn gw_exact_sqrt_bits(x: u32) -> u32 {
    let abs_x = x & 0x7fffffffu;
    if abs_x > 0x7f800000u {
        return 0x7fc00000u;
    }
    if abs_x == 0u {
        return x;
    }
    if (x & 0x80000000u) != 0u {
        return 0x7fc00000u;
    }
    if abs_x == 0x7f800000u {
        return x;
    }
    let u = gw_exact_unpack(abs_x);
    let m = u32(u.x);
    let e = u.y - 127;
    var v = m << 1u;
    if (e & 1) != 0 {
        v = m << 2u;
    }
    var rem = 0u;
    var q = 0u;
    for (var i = 0u; i < 26u; i = i + 1u) {
        var pair = 0u;
        if i < 13u {
            pair = (v >> (24u - 2u * i)) & 3u;
        }
        rem = (rem << 2u) | pair;
        let trial = (q << 2u) | 1u;
        q = q << 1u;
        if rem >= trial {
            rem = rem - trial;
            q = q | 1u;
        }
    }
    return gw_exact_round_pack(0u, (e >> 1u) + 127, q, rem != 0u);
}

fn gw_exact_sqrt(x: f32) -> f32 {
    return bitcast<f32>(gw_exact_sqrt_bits(bitcast<u32>(x)));
}
";

/// The constants of the deterministic transcendentals, by the names the texts use, with the
/// same values as `gpuworld_systems::kernel::transcendental` (the same Rust expressions, so
/// the same bits); the texts write each as its bits.
fn constants() -> Vec<(&'static str, f32)> {
    vec![
        ("LOG2E", std::f32::consts::LOG2_E),
        ("LN2HI", 0.693_145_75),
        ("LN2LO", 1.428_606_8e-6),
        ("EXP_HI", 88.722_83),
        ("EXP_LO", -87.336_55),
        ("TINY", 1.0 / 4096.0),
        ("E7", 1.0 / 5040.0),
        ("E6", 1.0 / 720.0),
        ("E5", 1.0 / 120.0),
        ("E4", 1.0 / 24.0),
        ("E3", 1.0 / 6.0),
        ("SQRT2", std::f32::consts::SQRT_2),
        ("L9", 1.0 / 9.0),
        ("L7", 1.0 / 7.0),
        ("L5", 1.0 / 5.0),
        ("L3", 1.0 / 3.0),
        ("S9", 1.0 / 362_880.0),
        ("C10", -1.0 / 3_628_800.0),
        ("C8", 1.0 / 40_320.0),
        ("TWO_OVER_PI", std::f32::consts::FRAC_2_PI),
        ("P1", 1.570_312_5),
        ("P2", 4.837_513e-4),
        ("P3", 7.549_79e-8),
        ("T11", -1382.0 / 155_925.0),
        ("T9", 62.0 / 2835.0),
        ("T7", 17.0 / 315.0),
        ("T5", 2.0 / 15.0),
        ("TANH_SERIES", 0.3),
        ("TANH_ONE", 10.0),
    ]
}

/// `template` with each `{NAME}` of [`constants`] written as `cast(bits)`.
fn with_constants(template: &str, cast: impl Fn(u32) -> String) -> String {
    let mut text = template.to_string();
    // Longest names first, so that no name is replaced inside a longer one.
    let mut names = constants();
    names.sort_by_key(|(name, _)| std::cmp::Reverse(name.len()));
    for (name, value) in names {
        text = text.replace(&format!("{{{name}}}"), &cast(value.to_bits()));
    }
    text
}

/// The WGSL of `exp ln sin cos tanh powf` (`gw_exp(x, gw_z)`, ...): the algorithms of
/// `gpuworld_systems::kernel::transcendental`, every product through `gw_m` (a value the
/// compiler cannot fuse with the add that uses it), divisions through `gw_exact_div`, results
/// that are not finite built at run time (naga refuses them as constants).
pub fn wgsl_transcendentals() -> String {
    with_constants(WGSL_TRANSCENDENTALS, |bits| {
        format!("bitcast<f32>({bits:#x}u)")
    })
}

const WGSL_TRANSCENDENTALS: &str = "
// exp ln sin cos tanh powf from f32 add and mul rounded one by one (gpuworld_systems::kernel::
// transcendental): the same bits on every backend.
fn gw_m(a: f32, b: f32, gz: u32) -> f32 {
    return bitcast<f32>(bitcast<u32>(a * b) + gz);
}

fn gw_t_bits(bits: u32, gz: u32) -> f32 {
    return bitcast<f32>(bits + gz);
}

fn gw_t_is_zero(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7f800000u) == 0u;
}

fn gw_t_scale(p: f32, k: f32, gz: u32) -> f32 {
    let a = floor(gw_m(k, 0.5, gz));
    let b = k - a;
    let pa = bitcast<f32>(u32(i32(a) + 127) << 23u);
    let pb = bitcast<f32>(u32(i32(b) + 127) << 23u);
    let y = gw_m(gw_m(p, pa, gz), pb, gz);
    if gw_t_is_zero(y) {
        return gw_t_bits(0u, gz);
    }
    return y;
}

fn gw_exp(x: f32, gz: u32) -> f32 {
    let bits = bitcast<u32>(x);
    if (bits & 0x7fffffffu) > 0x7f800000u {
        return gw_t_bits(0x7fc00000u, gz);
    }
    if gw_t_is_zero(x) {
        return gw_t_bits(0x3f800000u, gz);
    }
    if bits == 0x7f800000u || (bits < 0x80000000u && x > {EXP_HI}) {
        return gw_t_bits(0x7f800000u, gz);
    }
    if bits == 0xff800000u || (bits >= 0x80000000u && x < {EXP_LO}) {
        return gw_t_bits(0u, gz);
    }
    let k = floor(gw_m(x, {LOG2E}, gz) + 0.5);
    let r = (x - gw_m(k, {LN2HI}, gz)) - gw_m(k, {LN2LO}, gz);
    if abs(r) < {TINY} {
        return gw_t_scale(1.0 + r, k, gz);
    }
    var t = gw_m(r, {E7}, gz) + {E6};
    t = gw_m(t, r, gz) + {E5};
    t = gw_m(t, r, gz) + {E4};
    t = gw_m(t, r, gz) + {E3};
    t = gw_m(t, r, gz) + 0.5;
    t = gw_m(t, r, gz) + 1.0;
    t = gw_m(t, r, gz) + 1.0;
    return gw_t_scale(t, k, gz);
}

fn gw_ln(x: f32, gz: u32) -> f32 {
    let bits = bitcast<u32>(x);
    if (bits & 0x7fffffffu) > 0x7f800000u {
        return gw_t_bits(0x7fc00000u, gz);
    }
    if gw_t_is_zero(x) {
        return gw_t_bits(0xff800000u, gz);
    }
    if (bits & 0x80000000u) != 0u {
        return gw_t_bits(0x7fc00000u, gz);
    }
    if bits == 0x7f800000u {
        return x;
    }
    var e = f32(i32(bits >> 23u) - 127);
    var m = bitcast<f32>((bits & 0x007fffffu) | 0x3f800000u);
    if m > {SQRT2} {
        m = gw_m(m, 0.5, gz);
        e = e + 1.0;
    }
    let f = m - 1.0;
    let s = gw_exact_div(f, 2.0 + f);
    let zz = gw_m(s, s, gz);
    let two_s = s + s;
    var t = gw_m(zz, {L9}, gz) + {L7};
    t = gw_m(t, zz, gz) + {L5};
    t = gw_m(t, zz, gz) + {L3};
    t = gw_m(t, zz, gz);
    let y = gw_m(two_s, t, gz) + two_s;
    return gw_m(e, {LN2HI}, gz) + (gw_m(e, {LN2LO}, gz) + y);
}

fn gw_sin_poly(r: f32, gz: u32) -> f32 {
    let zz = gw_m(r, r, gz);
    var p = gw_m(zz, {S9}, gz) - {E7};
    p = gw_m(p, zz, gz) + {E5};
    p = gw_m(p, zz, gz) - {E3};
    return gw_m(gw_m(r, zz, gz), p, gz) + r;
}

fn gw_cos_poly(r: f32, gz: u32) -> f32 {
    let zz = gw_m(r, r, gz);
    var p = gw_m(zz, {C10}, gz) + {C8};
    p = gw_m(p, zz, gz) - {E6};
    p = gw_m(p, zz, gz) + {E4};
    p = gw_m(p, zz, gz) - 0.5;
    return gw_m(zz, p, gz) + 1.0;
}

fn gw_reduce(x: f32, gz: u32) -> vec2<f32> {
    let k = floor(gw_m(x, {TWO_OVER_PI}, gz) + 0.5);
    let r = ((x - gw_m(k, {P1}, gz)) - gw_m(k, {P2}, gz)) - gw_m(k, {P3}, gz);
    let q = k - gw_m(4.0, floor(gw_m(k, 0.25, gz)), gz);
    return vec2<f32>(r, q);
}

fn gw_sin_or_cos(r: f32, quadrant: u32, gz: u32) -> f32 {
    let tiny = abs(r) < {TINY};
    var v = r;
    if (quadrant & 1u) == 0u {
        if !tiny {
            v = gw_sin_poly(r, gz);
        }
    } else {
        if tiny {
            v = 1.0;
        } else {
            v = gw_cos_poly(r, gz);
        }
    }
    if (quadrant & 2u) != 0u {
        return bitcast<f32>(bitcast<u32>(v) ^ 0x80000000u);
    }
    return v;
}

fn gw_sin(x: f32, gz: u32) -> f32 {
    let bits = bitcast<u32>(x);
    if (bits & 0x7fffffffu) >= 0x7f800000u {
        return gw_t_bits(0x7fc00000u, gz);
    }
    if gw_t_is_zero(x) {
        return bitcast<f32>(bits & 0x80000000u);
    }
    if abs(x) < {TINY} {
        return x;
    }
    let rq = gw_reduce(x, gz);
    return gw_sin_or_cos(rq.x, u32(rq.y), gz);
}

fn gw_cos(x: f32, gz: u32) -> f32 {
    let bits = bitcast<u32>(x);
    if (bits & 0x7fffffffu) >= 0x7f800000u {
        return gw_t_bits(0x7fc00000u, gz);
    }
    if gw_t_is_zero(x) || abs(x) < {TINY} {
        return gw_t_bits(0x3f800000u, gz);
    }
    let rq = gw_reduce(x, gz);
    return gw_sin_or_cos(rq.x, (u32(rq.y) + 1u) & 3u, gz);
}

fn gw_tanh(x: f32, gz: u32) -> f32 {
    let bits = bitcast<u32>(x);
    if (bits & 0x7fffffffu) > 0x7f800000u {
        return gw_t_bits(0x7fc00000u, gz);
    }
    if gw_t_is_zero(x) {
        return bitcast<f32>(bits & 0x80000000u);
    }
    let a = bitcast<f32>(bits & 0x7fffffffu);
    var t = gw_t_bits(0x3f800000u, gz);
    if (bits & 0x7fffffffu) == 0x7f800000u {
        t = gw_t_bits(0x3f800000u, gz);
    } else if a < {TINY} {
        t = a;
    } else if a < {TANH_SERIES} {
        let zz = gw_m(a, a, gz);
        var p = gw_m(zz, {T11}, gz) + {T9};
        p = gw_m(p, zz, gz) - {T7};
        p = gw_m(p, zz, gz) + {T5};
        p = gw_m(p, zz, gz) - {L3};
        p = gw_m(p, zz, gz);
        t = gw_m(a, p, gz) + a;
    } else if a < {TANH_ONE} {
        let e = gw_exp(a + a, gz);
        t = 1.0 - gw_exact_div(2.0, e + 1.0);
    }
    if (bits & 0x80000000u) != 0u {
        return bitcast<f32>(bitcast<u32>(t) ^ 0x80000000u);
    }
    return t;
}

fn gw_powf(x_in: f32, y_in: f32, gz: u32) -> f32 {
    var xb = bitcast<u32>(x_in);
    if (xb & 0x7f800000u) == 0u {
        xb = xb & 0x80000000u;
    }
    var yb = bitcast<u32>(y_in);
    if (yb & 0x7f800000u) == 0u {
        yb = 0u;
    }
    let y = bitcast<f32>(yb);
    if yb == 0u || xb == 0x3f800000u {
        return gw_t_bits(0x3f800000u, gz);
    }
    if (xb & 0x7fffffffu) > 0x7f800000u || (yb & 0x7fffffffu) > 0x7f800000u {
        return gw_t_bits(0x7fc00000u, gz);
    }
    let y_inf = (yb & 0x7fffffffu) == 0x7f800000u;
    let integral = y_inf || floor(y) == y;
    let odd = !y_inf && integral && (y - gw_m(2.0, floor(gw_m(y, 0.5, gz)), gz)) == 1.0;
    let negative = (xb & 0x80000000u) != 0u;
    let x_zero = (xb & 0x7fffffffu) == 0u;
    if negative && !x_zero && !integral {
        return gw_t_bits(0x7fc00000u, gz);
    }
    var mag = gw_t_bits(0x3f800000u, gz);
    if x_zero {
        if (yb & 0x80000000u) == 0u {
            mag = gw_t_bits(0u, gz);
        } else {
            mag = gw_t_bits(0x7f800000u, gz);
        }
    } else if (xb & 0x7fffffffu) != 0x3f800000u {
        let a = bitcast<f32>(xb & 0x7fffffffu);
        mag = gw_exp(gw_m(y, gw_ln(a, gz), gz), gz);
    }
    if negative && odd {
        return bitcast<f32>(bitcast<u32>(mag) ^ 0x80000000u);
    }
    return mag;
}
";

/// The CUDA C of `exp ln sin cos tanh powf` (`gw_exp(x)`, ...), once per program: the
/// algorithms of `gpuworld_systems::kernel::transcendental`, products and sums through
/// `__fmul_rn`/`__fadd_rn`/`__fsub_rn` (never contracted), divisions through `__fdiv_rn`.
pub fn cuda_transcendentals() -> String {
    with_constants(CUDA_TRANSCENDENTALS, |bits| {
        format!("__uint_as_float({bits:#x}u)")
    })
}

const CUDA_TRANSCENDENTALS: &str = "#ifndef GW_TRANSCENDENTALS
#define GW_TRANSCENDENTALS
// exp ln sin cos tanh powf from f32 add and mul rounded one by one (gpuworld_systems::kernel::
// transcendental): the same bits on every backend.
#define GW_M(a, b) __fmul_rn((a), (b))
#define GW_A(a, b) __fadd_rn((a), (b))
#define GW_S(a, b) __fsub_rn((a), (b))
__device__ __forceinline__ bool gw_t_is_zero(float x) {
    return (__float_as_uint(x) & 0x7f800000u) == 0u;
}
__device__ float gw_t_scale(float p, float k) {
    float a = floorf(GW_M(k, 0.5f));
    float b = GW_S(k, a);
    float pa = __uint_as_float(((unsigned int)((int)a + 127)) << 23);
    float pb = __uint_as_float(((unsigned int)((int)b + 127)) << 23);
    float y = GW_M(GW_M(p, pa), pb);
    if (gw_t_is_zero(y)) return 0.0f;
    return y;
}
__device__ float gw_exp(float x) {
    unsigned int bits = __float_as_uint(x);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return __uint_as_float(0x7fc00000u);
    if (gw_t_is_zero(x)) return 1.0f;
    if (bits == 0x7f800000u || (bits < 0x80000000u && x > {EXP_HI})) return __uint_as_float(0x7f800000u);
    if (bits == 0xff800000u || (bits >= 0x80000000u && x < {EXP_LO})) return 0.0f;
    float k = floorf(GW_A(GW_M(x, {LOG2E}), 0.5f));
    float r = GW_S(GW_S(x, GW_M(k, {LN2HI})), GW_M(k, {LN2LO}));
    if (fabsf(r) < {TINY}) return gw_t_scale(GW_A(1.0f, r), k);
    float t = GW_A(GW_M(r, {E7}), {E6});
    t = GW_A(GW_M(t, r), {E5});
    t = GW_A(GW_M(t, r), {E4});
    t = GW_A(GW_M(t, r), {E3});
    t = GW_A(GW_M(t, r), 0.5f);
    t = GW_A(GW_M(t, r), 1.0f);
    t = GW_A(GW_M(t, r), 1.0f);
    return gw_t_scale(t, k);
}
__device__ float gw_ln(float x) {
    unsigned int bits = __float_as_uint(x);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return __uint_as_float(0x7fc00000u);
    if (gw_t_is_zero(x)) return __uint_as_float(0xff800000u);
    if ((bits & 0x80000000u) != 0u) return __uint_as_float(0x7fc00000u);
    if (bits == 0x7f800000u) return x;
    float e = (float)((int)(bits >> 23) - 127);
    float m = __uint_as_float((bits & 0x007fffffu) | 0x3f800000u);
    if (m > {SQRT2}) {
        m = GW_M(m, 0.5f);
        e = GW_A(e, 1.0f);
    }
    float f = GW_S(m, 1.0f);
    float s = __fdiv_rn(f, GW_A(2.0f, f));
    float zz = GW_M(s, s);
    float two_s = GW_A(s, s);
    float t = GW_A(GW_M(zz, {L9}), {L7});
    t = GW_A(GW_M(t, zz), {L5});
    t = GW_A(GW_M(t, zz), {L3});
    t = GW_M(t, zz);
    float y = GW_A(GW_M(two_s, t), two_s);
    return GW_A(GW_M(e, {LN2HI}), GW_A(GW_M(e, {LN2LO}), y));
}
__device__ float gw_sin_poly(float r) {
    float zz = GW_M(r, r);
    float p = GW_S(GW_M(zz, {S9}), {E7});
    p = GW_A(GW_M(p, zz), {E5});
    p = GW_S(GW_M(p, zz), {E3});
    return GW_A(GW_M(GW_M(r, zz), p), r);
}
__device__ float gw_cos_poly(float r) {
    float zz = GW_M(r, r);
    float p = GW_A(GW_M(zz, {C10}), {C8});
    p = GW_S(GW_M(p, zz), {E6});
    p = GW_A(GW_M(p, zz), {E4});
    p = GW_S(GW_M(p, zz), 0.5f);
    return GW_A(GW_M(zz, p), 1.0f);
}
__device__ float gw_reduce(float x, unsigned int* quadrant) {
    float k = floorf(GW_A(GW_M(x, {TWO_OVER_PI}), 0.5f));
    float r = GW_S(GW_S(GW_S(x, GW_M(k, {P1})), GW_M(k, {P2})), GW_M(k, {P3}));
    *quadrant = (unsigned int)GW_S(k, GW_M(4.0f, floorf(GW_M(k, 0.25f))));
    return r;
}
__device__ float gw_sin_or_cos(float r, unsigned int quadrant) {
    bool tiny = fabsf(r) < {TINY};
    float v = r;
    if ((quadrant & 1u) == 0u) {
        if (!tiny) v = gw_sin_poly(r);
    } else {
        v = tiny ? 1.0f : gw_cos_poly(r);
    }
    if ((quadrant & 2u) != 0u) return __uint_as_float(__float_as_uint(v) ^ 0x80000000u);
    return v;
}
__device__ float gw_sin(float x) {
    unsigned int bits = __float_as_uint(x);
    if ((bits & 0x7fffffffu) >= 0x7f800000u) return __uint_as_float(0x7fc00000u);
    if (gw_t_is_zero(x)) return __uint_as_float(bits & 0x80000000u);
    if (fabsf(x) < {TINY}) return x;
    unsigned int quadrant;
    float r = gw_reduce(x, &quadrant);
    return gw_sin_or_cos(r, quadrant);
}
__device__ float gw_cos(float x) {
    unsigned int bits = __float_as_uint(x);
    if ((bits & 0x7fffffffu) >= 0x7f800000u) return __uint_as_float(0x7fc00000u);
    if (gw_t_is_zero(x) || fabsf(x) < {TINY}) return 1.0f;
    unsigned int quadrant;
    float r = gw_reduce(x, &quadrant);
    return gw_sin_or_cos(r, (quadrant + 1u) & 3u);
}
__device__ float gw_tanh(float x) {
    unsigned int bits = __float_as_uint(x);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return __uint_as_float(0x7fc00000u);
    if (gw_t_is_zero(x)) return __uint_as_float(bits & 0x80000000u);
    float a = __uint_as_float(bits & 0x7fffffffu);
    float t = 1.0f;
    if ((bits & 0x7fffffffu) == 0x7f800000u) {
        t = 1.0f;
    } else if (a < {TINY}) {
        t = a;
    } else if (a < {TANH_SERIES}) {
        float zz = GW_M(a, a);
        float p = GW_A(GW_M(zz, {T11}), {T9});
        p = GW_S(GW_M(p, zz), {T7});
        p = GW_A(GW_M(p, zz), {T5});
        p = GW_S(GW_M(p, zz), {L3});
        p = GW_M(p, zz);
        t = GW_A(GW_M(a, p), a);
    } else if (a < {TANH_ONE}) {
        float e = gw_exp(GW_A(a, a));
        t = GW_S(1.0f, __fdiv_rn(2.0f, GW_A(e, 1.0f)));
    }
    if ((bits & 0x80000000u) != 0u) return __uint_as_float(__float_as_uint(t) ^ 0x80000000u);
    return t;
}
__device__ float gw_powf(float x_in, float y_in) {
    unsigned int xb = __float_as_uint(x_in);
    if ((xb & 0x7f800000u) == 0u) xb = xb & 0x80000000u;
    unsigned int yb = __float_as_uint(y_in);
    if ((yb & 0x7f800000u) == 0u) yb = 0u;
    float y = __uint_as_float(yb);
    if (yb == 0u || xb == 0x3f800000u) return 1.0f;
    if ((xb & 0x7fffffffu) > 0x7f800000u || (yb & 0x7fffffffu) > 0x7f800000u) {
        return __uint_as_float(0x7fc00000u);
    }
    bool y_inf = (yb & 0x7fffffffu) == 0x7f800000u;
    bool integral = y_inf || floorf(y) == y;
    bool odd = !y_inf && integral && GW_S(y, GW_M(2.0f, floorf(GW_M(y, 0.5f)))) == 1.0f;
    bool negative = (xb & 0x80000000u) != 0u;
    bool x_zero = (xb & 0x7fffffffu) == 0u;
    if (negative && !x_zero && !integral) return __uint_as_float(0x7fc00000u);
    float mag = 1.0f;
    if (x_zero) {
        mag = (yb & 0x80000000u) == 0u ? 0.0f : __uint_as_float(0x7f800000u);
    } else if ((xb & 0x7fffffffu) != 0x3f800000u) {
        float a = __uint_as_float(xb & 0x7fffffffu);
        mag = gw_exp(GW_M(y, gw_ln(a)));
    }
    if (negative && odd) return __uint_as_float(__float_as_uint(mag) ^ 0x80000000u);
    return mag;
}
#endif
";
