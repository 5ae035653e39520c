//! Correctly rounded `f32` division and square root computed from integer operations on the bit
//! patterns, so that every backend computes them identically whatever its float hardware: WGSL
//! allows its `/` and `sqrt` 2.5 ULP, and a driver may flush subnormals or use an approximate
//! reciprocal. The WGSL and CUDA C texts of the same algorithms live in the kernel macro
//! (`gpuworld-macros`' `exact_math` module); the wgpu code of `#[gpuworld::kernel]` calls them
//! for `/` and `sqrt` of `f32`, while the CPU (Rust's `/` and `sqrt`) and CUDA (`__fdiv_rn`,
//! `__fsqrt_rn`) are IEEE 754 already.
//!
//! The results are IEEE 754's, round to nearest even, subnormal inputs and results included
//! (`tests` compares them with Rust's over many inputs, bit for bit). A NaN result is the quiet
//! NaN `0x7fc0_0000` (the CPU's own may carry another sign or payload: compare NaN as NaN).
//!
//! Each function below is the reference the WGSL and CUDA texts follow line by line: only `u32`
//! and `i32` additions, shifts, comparisons and a count of leading zeros.

/// The quiet NaN the exact functions return.
pub const NAN_BITS: u32 = 0x7fc0_0000;

const SIGN: u32 = 0x8000_0000;
const EXP_MASK: u32 = 0x7f80_0000;
const FRAC_MASK: u32 = 0x007f_ffff;
const HIDDEN: u32 = 0x0080_0000;

/// The significand of a finite non-zero `bits` with its leading one at bit 23, and its biased
/// exponent (below 1 for a subnormal, normalised).
fn unpack(bits: u32) -> (u32, i32) {
    let exp = ((bits & EXP_MASK) >> 23) as i32;
    let frac = bits & FRAC_MASK;
    if exp == 0 {
        let shift = frac.leading_zeros() as i32 - 8;
        (frac << shift, 1 - shift)
    } else {
        (frac | HIDDEN, exp)
    }
}

/// Rounds `q` (26 bits, its leading one at bit 25: the significand and two more bits), with
/// `sticky` for anything below them, at biased exponent `exp`, to nearest even; packs it with
/// `sign`. Below the normal range the significand is shifted down first (a subnormal result),
/// above it the result is infinite.
fn round_pack(sign: u32, exp: i32, q: u32, sticky: bool) -> u32 {
    if exp >= 255 {
        return sign | EXP_MASK;
    }
    let mut q = q;
    let mut sticky = sticky;
    let mut exp = exp;
    if exp <= 0 {
        let shift = 1 - exp;
        if shift > 26 {
            sticky = sticky || q != 0;
            q = 0;
        } else {
            sticky = sticky || (q & ((1u32 << shift) - 1)) != 0;
            q >>= shift;
        }
        exp = 0;
    }
    let mut mant = q >> 2;
    let rest = q & 3;
    if rest == 3 || (rest == 2 && (sticky || (mant & 1) == 1)) {
        mant += 1;
    }
    if exp == 0 {
        // A subnormal that rounds up to 2^23 is the smallest normal: the bits say so already.
        return sign | mant;
    }
    if mant == HIDDEN << 1 {
        mant >>= 1;
        exp += 1;
        if exp >= 255 {
            return sign | EXP_MASK;
        }
    }
    sign | ((exp as u32) << 23) | (mant & FRAC_MASK)
}

/// `a / b`, correctly rounded (IEEE 754), from integer operations.
pub fn div_f32(a: f32, b: f32) -> f32 {
    f32::from_bits(div_bits(a.to_bits(), b.to_bits()))
}

/// [`div_f32`] on bit patterns.
pub fn div_bits(a: u32, b: u32) -> u32 {
    let sign = (a ^ b) & SIGN;
    let (abs_a, abs_b) = (a & !SIGN, b & !SIGN);
    if abs_a > EXP_MASK || abs_b > EXP_MASK {
        return NAN_BITS;
    }
    if abs_a == EXP_MASK {
        return if abs_b == EXP_MASK {
            NAN_BITS
        } else {
            sign | EXP_MASK
        };
    }
    if abs_b == EXP_MASK {
        return sign;
    }
    if abs_b == 0 {
        return if abs_a == 0 {
            NAN_BITS
        } else {
            sign | EXP_MASK
        };
    }
    if abs_a == 0 {
        return sign;
    }
    let (mut ma, ea) = unpack(abs_a);
    let (mb, eb) = unpack(abs_b);
    let mut exp = ea - eb + 127;
    if ma < mb {
        ma <<= 1;
        exp -= 1;
    }
    // Long division: 26 bits of `ma / mb` (in [1, 2)), the remainder's bits as sticky.
    let mut rem = ma;
    let mut q = 0u32;
    for _ in 0..26 {
        q <<= 1;
        if rem >= mb {
            rem -= mb;
            q |= 1;
        }
        rem <<= 1;
    }
    round_pack(sign, exp, q, rem != 0)
}

/// `x.sqrt()`, correctly rounded (IEEE 754), from integer operations.
pub fn sqrt_f32(x: f32) -> f32 {
    f32::from_bits(sqrt_bits(x.to_bits()))
}

/// [`sqrt_f32`] on bit patterns.
pub fn sqrt_bits(x: u32) -> u32 {
    let abs = x & !SIGN;
    if abs > EXP_MASK {
        return NAN_BITS;
    }
    if abs == 0 {
        return x;
    }
    if x & SIGN != 0 {
        return NAN_BITS;
    }
    if abs == EXP_MASK {
        return x;
    }
    let (m, biased) = unpack(abs);
    let e = biased - 127;
    // `v` is the value times 2^24 with an even exponent left over: sqrt(value) = sqrt(v) * 2^(e/2 - 12).
    let v = if e & 1 != 0 { m << 2 } else { m << 1 };
    // Digit by digit: 26 bits of sqrt(v * 2^26), the input's 13 pairs of bits from `v`, then
    // zeros; the remainder's bits as sticky.
    let mut rem = 0u32;
    let mut q = 0u32;
    for i in 0..26u32 {
        let pair = if i < 13 { (v >> (24 - 2 * i)) & 3 } else { 0 };
        rem = (rem << 2) | pair;
        let trial = (q << 2) | 1;
        q <<= 1;
        if rem >= trial {
            rem -= trial;
            q |= 1;
        }
    }
    round_pack(0, (e >> 1) + 127, q, rem != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spread of bit patterns: every exponent, subnormals, specials, and their neighbours.
    fn patterns() -> Vec<u32> {
        let mut bits = vec![
            0,
            1,
            2,
            3,
            0x7f_ffff,
            0x80_0000,
            0x80_0001,
            0x3f80_0000,
            0x3f80_0001,
            0x3fff_ffff,
            0x4000_0000,
            0x7f7f_ffff,
            0x7f80_0000,
            0x7fc0_0000,
            0x7f80_0001,
            0x0040_0000,
        ];
        bits.extend(bits.clone().iter().map(|b| b | SIGN));
        let mut state = 0x9e37_79b9u32;
        for _ in 0..400_000 {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            bits.push(state);
        }
        // Every exponent with a few significands.
        for exp in 0..256u32 {
            for frac in [0, 1, 0x40_0000, 0x7f_ffff, 0x12_3457] {
                bits.push((exp << 23) | frac);
            }
        }
        bits
    }

    fn same(got: u32, want: f32, what: &str) {
        if want.is_nan() {
            assert_eq!(got, NAN_BITS, "{what}: want NaN");
        } else {
            assert_eq!(
                got,
                want.to_bits(),
                "{what}: {:e} vs {want:e}",
                f32::from_bits(got)
            );
        }
    }

    #[test]
    fn division_gives_the_bits_of_ieee_division_for_every_kind_of_operand() {
        let all = patterns();
        for (i, &a) in all.iter().enumerate() {
            let b = all[(i * 7919 + 13) % all.len()];
            let want = f32::from_bits(a) / f32::from_bits(b);
            same(div_bits(a, b), want, &format!("{a:#x} / {b:#x}"));
        }
        let special = &all[..32];
        for &a in special {
            for &b in special {
                let want = f32::from_bits(a) / f32::from_bits(b);
                same(div_bits(a, b), want, &format!("{a:#x} / {b:#x}"));
            }
        }
    }

    #[test]
    fn division_rounds_halfway_results_to_even_and_underflows_to_subnormals() {
        // Quotients near the subnormal boundary and at the largest exponent.
        for (a, b) in [
            (f32::MIN_POSITIVE, 3.0f32),
            (f32::MIN_POSITIVE, 2.0),
            (1e-40, 7.0),
            (f32::MAX, 0.5),
            (f32::MAX, 0.999_999_9),
            (1.0, 3.0),
            (2.0, 3.0),
            (f32::from_bits(1), 2.0),
            (f32::from_bits(3), 2.0),
        ] {
            same(
                div_bits(a.to_bits(), b.to_bits()),
                a / b,
                &format!("{a:e} / {b:e}"),
            );
        }
    }

    #[test]
    fn square_roots_give_the_bits_of_ieee_square_roots_for_every_kind_of_operand() {
        for x in patterns() {
            let want = f32::from_bits(x).sqrt();
            same(sqrt_bits(x), want, &format!("sqrt({x:#x})"));
        }
        // Every significand of two exponents (an even and an odd one).
        for x in (0x3f80_0000u32..0x4080_0000).step_by(7) {
            same(
                sqrt_bits(x),
                f32::from_bits(x).sqrt(),
                &format!("sqrt({x:#x})"),
            );
        }
    }
}
