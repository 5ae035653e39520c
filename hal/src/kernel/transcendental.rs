//! `exp ln sin cos tanh powf` of `f32` computed as the same sequence of exact operations on
//! every backend: range reduction and polynomials made of `f32` additions, subtractions and
//! products each rounded on its own (never contracted into a fused multiply-add), correctly
//! rounded divisions, `floor`, comparisons and bit operations — each of which every backend
//! computes to the same bits. So the results are deterministic (the same bits on cpu, sim, wgpu
//! and CUDA), not correctly rounded: `tests` measures each one's largest error against `f64`.
//!
//! The WGSL and CUDA C texts of these functions are in the kernel macro (`gpuworld-macros`'
//! `exact_math` module) and follow this file line by line.
//!
//! Subnormals are flushed, the same everywhere (NVIDIA's Vulkan driver flushes them in float
//! arithmetic, so no other choice can be made identical): a subnormal argument counts as a zero
//! of its sign, and a result below the smallest normal is a zero. No intermediate value is
//! subnormal (tiny arguments return early), so a flushing device computes the same bits. A NaN
//! result is `0x7fc0_0000`.

/// The NaN these functions return.
const NAN: f32 = f32::from_bits(0x7fc0_0000);

/// Whether `x` is zero or subnormal: a zero here.
fn is_zero(x: f32) -> bool {
    x.to_bits() & 0x7f80_0000 == 0
}

/// `x` rounded to the nearest integer, halves up (`floor(x + 0.5)`).
fn round(x: f32) -> f32 {
    (x + 0.5).floor()
}

/// `e^x`, deterministic; within 2 ULP of `f64`'s on the tested range.
pub fn exp_f32(x: f32) -> f32 {
    if x.is_nan() {
        return NAN;
    }
    if is_zero(x) {
        return 1.0;
    }
    if x > 88.722_83 {
        return f32::INFINITY;
    }
    if x < -87.336_55 {
        return 0.0;
    }
    let k = round(x * std::f32::consts::LOG2_E);
    // Cody and Waite: `k * LN2_HI` is exact for |k| < 2^9, so is `x - k * LN2_HI`.
    let r = (x - k * 0.693_145_75) - k * 1.428_606_8e-6;
    if r.abs() < 1.0 / 4096.0 {
        return scale(1.0 + r, k);
    }
    let p = ((((((r * (1.0 / 5040.0) + 1.0 / 720.0) * r + 1.0 / 120.0) * r + 1.0 / 24.0) * r
        + 1.0 / 6.0)
        * r
        + 0.5)
        * r
        + 1.0)
        * r
        + 1.0;
    scale(p, k)
}

/// `p * 2^k` for `p` in [0.5, 2] and integral `k` in [-126, 128], as two exact scalings by
/// normal powers of two; a subnormal result is zero.
fn scale(p: f32, k: f32) -> f32 {
    let a = (k * 0.5).floor();
    let b = k - a;
    let power = |e: f32| f32::from_bits(((e as i32 + 127) as u32) << 23);
    let y = p * power(a) * power(b);
    if is_zero(y) { 0.0 } else { y }
}

/// `ln(x)`, deterministic; within 2 ULP of `f64`'s on the tested range.
pub fn ln_f32(x: f32) -> f32 {
    if x.is_nan() {
        return NAN;
    }
    if is_zero(x) {
        return f32::NEG_INFINITY;
    }
    if x < 0.0 {
        return NAN;
    }
    if x == f32::INFINITY {
        return x;
    }
    let bits = x.to_bits();
    let mut e = ((bits >> 23) as i32 - 127) as f32;
    let mut m = f32::from_bits((bits & 0x007f_ffff) | 0x3f80_0000);
    if m > std::f32::consts::SQRT_2 {
        m *= 0.5;
        e += 1.0;
    }
    // ln(m) = 2 atanh(s), s = f / (2 + f): |s| < 0.172.
    let f = m - 1.0;
    let s = f / (2.0 + f);
    let z = s * s;
    let two_s = s + s;
    let series = (((z * (1.0 / 9.0) + 1.0 / 7.0) * z + 1.0 / 5.0) * z + 1.0 / 3.0) * z;
    let y = two_s * series + two_s;
    e * 0.693_145_75 + (e * 1.428_606_8e-6 + y)
}

/// sin(r) for |r| <= π/4 (and not tiny).
fn sin_poly(r: f32) -> f32 {
    let z = r * r;
    let p = ((z * (1.0 / 362_880.0) - 1.0 / 5040.0) * z + 1.0 / 120.0) * z - 1.0 / 6.0;
    r * z * p + r
}

/// cos(r) for |r| <= π/4 (and not tiny).
fn cos_poly(r: f32) -> f32 {
    let z = r * r;
    let p = (((z * (-1.0 / 3_628_800.0) + 1.0 / 40_320.0) * z - 1.0 / 720.0) * z + 1.0 / 24.0) * z
        - 0.5;
    z * p + 1.0
}

/// `x` reduced by multiples of π/2: `r` in about [-π/4, π/4] and the quadrant `k mod 4`.
fn reduce(x: f32) -> (f32, u32) {
    let k = round(x * std::f32::consts::FRAC_2_PI);
    // Cody and Waite, three parts of π/2.
    let r = ((x - k * 1.570_312_5) - k * 4.837_513e-4) - k * 7.549_79e-8;
    // `k - 4 floor(k / 4)` is exact for every float `k`.
    let quadrant = k - 4.0 * (k * 0.25).floor();
    (r, quadrant as u32)
}

/// sin(r) or cos(r) for a reduced `r`, from the polynomials or, for a tiny `r`, its leading
/// term (so no intermediate is subnormal).
fn sin_or_cos(r: f32, quadrant: u32) -> f32 {
    let tiny = r.abs() < 1.0 / 4096.0;
    let value = match (quadrant & 1, tiny) {
        (0, true) => r,
        (0, false) => sin_poly(r),
        (_, true) => 1.0,
        (_, false) => cos_poly(r),
    };
    if quadrant & 2 != 0 { -value } else { value }
}

/// `sin(x)`, deterministic; within a few ULP of `f64`'s for |x| up to 10^4 (the reduction's
/// error grows with |x|).
pub fn sin_f32(x: f32) -> f32 {
    if !x.is_finite() {
        return NAN;
    }
    if is_zero(x) || x.abs() < 1.0 / 4096.0 {
        return if is_zero(x) {
            f32::from_bits(x.to_bits() & 0x8000_0000)
        } else {
            x
        };
    }
    let (r, quadrant) = reduce(x);
    sin_or_cos(r, quadrant)
}

/// `cos(x)`, deterministic; see [`sin_f32`].
pub fn cos_f32(x: f32) -> f32 {
    if !x.is_finite() {
        return NAN;
    }
    if is_zero(x) || x.abs() < 1.0 / 4096.0 {
        return 1.0;
    }
    let (r, quadrant) = reduce(x);
    sin_or_cos(r, (quadrant + 1) & 3)
}

/// `tanh(x)`, deterministic: a series near 0, `1 - 2 / (e^2|x| + 1)` beyond.
pub fn tanh_f32(x: f32) -> f32 {
    if x.is_nan() {
        return NAN;
    }
    if is_zero(x) {
        return f32::from_bits(x.to_bits() & 0x8000_0000);
    }
    let a = x.abs();
    let t = if a < 1.0 / 4096.0 {
        a
    } else if a < 0.3 {
        let z = a * a;
        let p = ((((z * (-1382.0 / 155_925.0) + 62.0 / 2835.0) * z - 17.0 / 315.0) * z
            + 2.0 / 15.0)
            * z
            - 1.0 / 3.0)
            * z;
        a * p + a
    } else if a < 10.0 {
        let e = exp_f32(a + a);
        1.0 - 2.0 / (e + 1.0)
    } else {
        1.0
    };
    if x < 0.0 { -t } else { t }
}

/// Whether `y` is an odd integer.
fn is_odd_integer(y: f32) -> bool {
    y.floor() == y && (y - 2.0 * (y * 0.5).floor()) == 1.0
}

/// `x.powf(y)` as `e^(y ln x)`, deterministic, with IEEE 754's special cases (a negative `x`
/// with an integral `y`, zeros, infinities, `x = 1`, `y = 0`); its error grows with `|y ln x|`.
pub fn powf_f32(x: f32, y: f32) -> f32 {
    let x = if is_zero(x) {
        f32::from_bits(x.to_bits() & 0x8000_0000)
    } else {
        x
    };
    let y = if is_zero(y) { 0.0 } else { y };
    if y == 0.0 || x == 1.0 {
        return 1.0;
    }
    if x.is_nan() || y.is_nan() {
        return NAN;
    }
    let odd = is_odd_integer(y);
    let negative = x < 0.0 || x.to_bits() == 0x8000_0000;
    if x < 0.0 && y.floor() != y && y.is_finite() {
        return NAN;
    }
    let magnitude = if x == 0.0 {
        if y > 0.0 { 0.0 } else { f32::INFINITY }
    } else {
        let a = x.abs();
        if a == 1.0 {
            // (-1)^±inf is 1; (-1)^y for an integral y is ±1.
            1.0
        } else {
            exp_f32(y * ln_f32(a))
        }
    };
    if negative && odd {
        -magnitude
    } else {
        magnitude
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The largest error of `f` against `reference` in ULP of the reference (as f32), over
    /// `inputs`, with the input where it happens.
    fn max_ulp(
        inputs: impl Iterator<Item = f32>,
        f: impl Fn(f32) -> f32,
        reference: impl Fn(f64) -> f64,
    ) -> (f64, f32) {
        let mut worst = (0.0, 0.0);
        for x in inputs {
            let want = reference(f64::from(x));
            let got = f64::from(f(x));
            if !want.is_finite() || want.abs() < f64::from(f32::MIN_POSITIVE) {
                continue;
            }
            let ulp = f64::from(f32::from_bits((want as f32).abs().to_bits() + 1))
                - f64::from((want as f32).abs());
            let error = (got - want).abs() / ulp;
            if error > worst.0 {
                worst = (error, x);
            }
        }
        worst
    }

    /// `n` inputs spread evenly over `lo..hi`.
    fn spread(lo: f32, hi: f32, n: u32) -> impl Iterator<Item = f32> {
        (0..n).map(move |i| lo + (hi - lo) * (i as f32 / n as f32))
    }

    #[test]
    fn each_function_is_within_its_stated_error_of_f64() {
        let n = 200_000;
        let cases: [(&str, (f64, f32), f64); 7] = [
            (
                "exp",
                max_ulp(spread(-87.0, 88.0, n), exp_f32, f64::exp),
                2.0,
            ),
            (
                "ln",
                max_ulp(
                    spread(1e-30, 1e30, n).chain(spread(0.5, 2.0, n)),
                    ln_f32,
                    f64::ln,
                ),
                2.0,
            ),
            (
                "sin",
                max_ulp(spread(-100.0, 100.0, n), sin_f32, f64::sin),
                2.0,
            ),
            (
                "cos",
                max_ulp(spread(-100.0, 100.0, n), cos_f32, f64::cos),
                2.0,
            ),
            (
                "sin far",
                max_ulp(spread(-1e4, 1e4, n), sin_f32, f64::sin),
                64.0,
            ),
            (
                "tanh",
                max_ulp(spread(-12.0, 12.0, n), tanh_f32, f64::tanh),
                4.0,
            ),
            (
                "powf",
                max_ulp(spread(0.01, 20.0, n), |x| powf_f32(x, 2.7), |x| x.powf(2.7)),
                32.0,
            ),
        ];
        for (name, (ulp, at), bound) in cases {
            eprintln!("{name}: at most {ulp:.2} ULP (at {at:e})");
            assert!(ulp <= bound, "{name}: {ulp} ULP at {at:e}, over {bound}");
        }
    }

    #[test]
    fn the_special_cases_are_ieee_754s_and_subnormals_count_as_zero() {
        let tiny = f32::from_bits(5);
        assert_eq!(exp_f32(0.0), 1.0);
        assert_eq!(exp_f32(tiny), 1.0);
        assert_eq!(exp_f32(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_f32(-100.0), 0.0);
        assert_eq!(ln_f32(1.0), 0.0);
        assert_eq!(ln_f32(tiny), f32::NEG_INFINITY);
        assert!(ln_f32(-1.0).is_nan());
        assert_eq!(sin_f32(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(cos_f32(0.0), 1.0);
        assert!(sin_f32(f32::INFINITY).is_nan());
        assert_eq!(tanh_f32(20.0), 1.0);
        assert_eq!(tanh_f32(-20.0), -1.0);
        assert_eq!(powf_f32(-2.0, 3.0), -8.0);
        assert!(powf_f32(-2.0, 0.5).is_nan());
        assert_eq!(powf_f32(0.0, -1.0), f32::INFINITY);
        assert_eq!(powf_f32(-0.0, 3.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(powf_f32(f32::NAN, 0.0), 1.0);
        assert_eq!(powf_f32(2.0, 10.0), 1024.0);
    }
}
