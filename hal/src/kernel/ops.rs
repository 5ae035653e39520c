//! The semantics of the `#[gpuworld::kernel]` subset where Rust, C and WGSL differ or leave a
//! choice, defined once: the CPU source a kernel compiles to calls these functions, and the WGSL
//! and CUDA C it compiles to carry helpers that compute the same bits.
//!
//! What is the same on every backend, bit for bit: `+ - * /` of `u32` and `i32` (wrapping;
//! division by zero and `i32::MIN / -1` below; `>>` of i32 is arithmetic), `+ - *` of `f32` (IEEE, round to nearest, never contracted into a fused
//! multiply-add: `a * b + c` rounds twice everywhere), comparisons, conversions, bit operations,
//! and every function of this module that does not say otherwise; `f32` division and square root
//! are IEEE 754's everywhere (on wgpu computed from integer operations, see
//! [`exact_math`](super::exact_math)). The transcendental functions are
//! deterministic too ([`transcendental`](super::transcendental)). Exceptions, each documented on
//! its function: `mul_add` on wgpu (it may round twice),
//! and the bits of a NaN result (its sign and payload are the device's: compare NaN as NaN).
//! Float comparisons follow IEEE 754 everywhere (a NaN compares unequal to everything); the WGSL
//! tests NaN by its bits, since WGSL lets a compiler assume no NaN reaches a comparison. On wgpu,
//! infinities, NaN and the sign of zero are the device's where its compiler simplifies
//! (lavapipe turns `x - x` into 0 for an infinite `x`): WGSL lets it assume none occur, and
//! gives no way to mark arithmetic exact. Subnormals are flushed everywhere ([`ftz_f32`]:
//! NVIDIA's Vulkan driver flushes them and cannot be told not to, so every backend does). Products pass through the same opaque zero as literals, so that no
//! driver fuses them with an add (NVIDIA's contracted `a * x + b`). Literals reach WGSL through an opaque zero, so that
//! constants are neither folded nor reassociated (`(x + 0.1) + 1.0` is not `x + 1.1`).

/// A subnormal `x` flushed to a zero of its sign; any other `x` unchanged. The generated code
/// applies it to the operands and results of every float operation (`+ - * /`, comparisons,
/// `min`, `max`, `floor`, `ceil`, `trunc`, `sqrt`, `mul_add`), so that every backend computes
/// what NVIDIA's Vulkan driver, which flushes subnormals and cannot be told not to, computes.
#[inline]
pub fn ftz_f32(x: f32) -> f32 {
    let bits = x.to_bits();
    if bits & 0x7f80_0000 == 0 {
        f32::from_bits(bits & 0x8000_0000)
    } else {
        x
    }
}

/// `a / b` of u32; division by zero gives 0 (it panics in Rust, is undefined in C, and gives
/// `a` in WGSL).
#[inline]
pub fn div_u32(a: u32, b: u32) -> u32 {
    a.checked_div(b).unwrap_or(0)
}

/// `a % b` of u32; by zero gives 0.
#[inline]
pub fn rem_u32(a: u32, b: u32) -> u32 {
    a.checked_rem(b).unwrap_or(0)
}

/// `a / b` of i32, truncated toward zero; division by zero gives 0 and `i32::MIN / -1` gives
/// `i32::MIN` (wrapping), where Rust panics, C is undefined and SPIR-V's `OpSDiv` is undefined.
#[inline]
pub fn div_i32(a: i32, b: i32) -> i32 {
    if b == 0 { 0 } else { a.wrapping_div(b) }
}

/// `a % b` of i32, with the sign of `a`; by zero gives 0 and `i32::MIN % -1` gives 0.
#[inline]
pub fn rem_i32(a: i32, b: i32) -> i32 {
    if b == 0 { 0 } else { a.wrapping_rem(b) }
}

/// `x as i32`: truncated toward zero, saturating (NaN gives 0, at or below -2^31 gives
/// `i32::MIN`, at or above 2^31 gives `i32::MAX`): Rust's `as`.
#[inline]
pub fn f32_to_i32(x: f32) -> i32 {
    x as i32
}

/// The smaller of two u32.
#[inline]
pub fn min_u32(a: u32, b: u32) -> u32 {
    a.min(b)
}

/// The larger of two u32.
#[inline]
pub fn max_u32(a: u32, b: u32) -> u32 {
    a.max(b)
}

/// `a.min(b)` of f32: `a` when `a < b` or `b` is NaN, else `b` (so a NaN operand gives the other
/// one, and `min(-0.0, 0.0)` is `0.0`: the second operand when they compare equal).
#[inline]
pub fn min_f32(a: f32, b: f32) -> f32 {
    if a < b || b.is_nan() { a } else { b }
}

/// `a.max(b)` of f32: `a` when `a > b` or `b` is NaN, else `b`.
#[inline]
pub fn max_f32(a: f32, b: f32) -> f32 {
    if a > b || b.is_nan() { a } else { b }
}

/// `x.abs()`: `x` with its sign bit cleared (NaN payloads kept).
#[inline]
pub fn abs_f32(x: f32) -> f32 {
    f32::from_bits(x.to_bits() & 0x7fff_ffff)
}

/// `x as u32`: truncated toward zero, saturating (negative and NaN give 0, 2^32 and above give
/// `u32::MAX`): Rust's `as`.
#[inline]
pub fn f32_to_u32(x: f32) -> u32 {
    x as u32
}

/// `x.floor()`.
#[inline]
pub fn floor_f32(x: f32) -> f32 {
    x.floor()
}

/// `x.ceil()`.
#[inline]
pub fn ceil_f32(x: f32) -> f32 {
    x.ceil()
}

/// `x.trunc()`.
#[inline]
pub fn trunc_f32(x: f32) -> f32 {
    x.trunc()
}

/// `x.sqrt()`: correctly rounded on every backend: Rust's on cpu and sim, `__fsqrt_rn` on CUDA,
/// and on wgpu [`exact_math::sqrt_f32`](super::exact_math::sqrt_f32)'s integer algorithm (WGSL
/// allows its own `sqrt` the accuracy of `1 / inverseSqrt(x)`).
#[inline]
pub fn sqrt_f32(x: f32) -> f32 {
    x.sqrt()
}

/// `a.mul_add(b, c)` or `fma(a, b, c)`: `a * b + c` with one rounding, where the kernel writes it
/// (never introduced by a compiler), on cpu, sim and CUDA (`__fmaf_rn`). WGSL's `fma` promises
/// only the precision of `a * b + c`, so on wgpu it may round twice (lavapipe does).
#[inline]
pub fn fma_f32(a: f32, b: f32, c: f32) -> f32 {
    a.mul_add(b, c)
}

/// `x.exp()`: deterministic (the same bits on every backend), from f32 additions and products
/// rounded one by one ([`transcendental::exp_f32`](super::transcendental::exp_f32), where
/// its accuracy is measured).
#[inline]
pub fn exp_f32(x: f32) -> f32 {
    super::transcendental::exp_f32(x)
}

/// `x.ln()`: deterministic (the same bits on every backend), from f32 additions and products
/// rounded one by one ([`transcendental::ln_f32`](super::transcendental::ln_f32), where
/// its accuracy is measured).
#[inline]
pub fn ln_f32(x: f32) -> f32 {
    super::transcendental::ln_f32(x)
}

/// `x.sin()`: deterministic (the same bits on every backend), from f32 additions and products
/// rounded one by one ([`transcendental::sin_f32`](super::transcendental::sin_f32), where
/// its accuracy is measured).
#[inline]
pub fn sin_f32(x: f32) -> f32 {
    super::transcendental::sin_f32(x)
}

/// `x.cos()`: deterministic (the same bits on every backend), from f32 additions and products
/// rounded one by one ([`transcendental::cos_f32`](super::transcendental::cos_f32), where
/// its accuracy is measured).
#[inline]
pub fn cos_f32(x: f32) -> f32 {
    super::transcendental::cos_f32(x)
}

/// `x.tanh()`: deterministic (the same bits on every backend), from f32 additions and products
/// rounded one by one ([`transcendental::tanh_f32`](super::transcendental::tanh_f32), where
/// its accuracy is measured).
#[inline]
pub fn tanh_f32(x: f32) -> f32 {
    super::transcendental::tanh_f32(x)
}

/// `x.powf(y)`: deterministic, as `e^(y ln x)` with IEEE 754's special cases
/// ([`transcendental::powf_f32`](super::transcendental::powf_f32)).
#[inline]
pub fn powf_f32(x: f32, y: f32) -> f32 {
    super::transcendental::powf_f32(x, y)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defined_cases_give_the_documented_values() {
        assert_eq!(div_u32(7, 0), 0);
        assert_eq!(rem_u32(7, 0), 0);
        assert_eq!(div_u32(7, 2), 3);
        assert_eq!(min_f32(f32::NAN, 1.0), 1.0);
        assert_eq!(min_f32(1.0, f32::NAN), 1.0);
        assert_eq!(max_f32(f32::NAN, 1.0), 1.0);
        assert_eq!(min_f32(-0.0, 0.0).to_bits(), 0.0f32.to_bits());
        assert_eq!(f32_to_u32(-3.5), 0);
        assert_eq!(f32_to_u32(f32::NAN), 0);
        assert_eq!(f32_to_u32(5e9), u32::MAX);
        assert_eq!(abs_f32(-0.0).to_bits(), 0);
        assert_eq!(div_i32(-7, 2), -3);
        assert_eq!(div_i32(-7, 0), 0);
        assert_eq!(div_i32(i32::MIN, -1), i32::MIN);
        assert_eq!(rem_i32(-7, 2), -1);
        assert_eq!(rem_i32(-7, 0), 0);
        assert_eq!(rem_i32(i32::MIN, -1), 0);
        assert_eq!(f32_to_i32(f32::NAN), 0);
        assert_eq!(f32_to_i32(-3e9), i32::MIN);
        assert_eq!(f32_to_i32(3e9), i32::MAX);
        assert_eq!(f32_to_i32(-2.9), -2);
    }
}
