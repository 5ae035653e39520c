//! Output checks (feature `autotune-checks`): every successful candidate's output is compared
//! with the first successful candidate's, and a mismatch makes that candidate a failure rather
//! than a possible winner. Also the comparison the library's sets use: `f32` buffers within a
//! relative tolerance.

use super::tunable::OutputCheckFn;
use crate::ComputeClient;
use gpuworld_systems::{Backend, Handle};

/// Whether this build checks candidates' outputs.
pub const OUTPUT_CHECKS_ENABLED: bool = cfg!(feature = "autotune-checks");

/// Compares two `f32` buffers element by element: equal when every
/// `|a - b| <= tolerance * max(1, |a|, |b|)`.
pub fn compare_f32_outputs<B: Backend>(
    client: &ComputeClient<B>,
    reference: &Handle,
    other: &Handle,
    tolerance: f32,
) -> Result<(), String> {
    let expected: Vec<f32> = client.read_one_as(reference).map_err(|e| e.to_string())?;
    let got: Vec<f32> = client.read_one_as(other).map_err(|e| e.to_string())?;
    if expected.len() != got.len() {
        return Err(format!(
            "output has {} elements, the first candidate's has {}",
            got.len(),
            expected.len()
        ));
    }
    let mismatch = expected.iter().zip(&got).enumerate().find(|(_, (a, b))| {
        let scale = 1.0f32.max(a.abs()).max(b.abs());
        // NaN compares unequal, so a NaN output is a mismatch.
        (*a - *b).abs() > tolerance * scale || a.is_nan() != b.is_nan()
    });
    match mismatch {
        None => Ok(()),
        Some((index, (a, b))) => Err(format!(
            "output differs from the first candidate's at element {index}: {b} instead of {a}"
        )),
    }
}

/// Checks each output against the first one present; returns the mismatch per output (`None`
/// where it matched, was the reference, or is missing).
pub(crate) fn check_outputs<B: Backend, O>(
    client: &ComputeClient<B>,
    check: &OutputCheckFn<B, O>,
    outputs: &[Option<&O>],
) -> Vec<Option<String>> {
    let reference = outputs.iter().flatten().next().copied();
    outputs
        .iter()
        .map(|output| match (reference, output) {
            (Some(reference), Some(output)) if !std::ptr::eq(reference, *output) => {
                check(client, reference, output).err()
            }
            _ => None,
        })
        .collect()
}
