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
