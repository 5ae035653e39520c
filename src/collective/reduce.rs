//! Element types and reduction operators of collectives, and their host implementation: the
//! reduction of the cpu, sim and wgpu backends, and the reference the tests hold NCCL to.

use gpuworld_systems::error::CollectiveError;
use gpuworld_systems::{Error, Result};
use half::{bf16, f16};

pub use gpuworld_systems::cross_device::{ElemType, ReduceOp};

/// Reduces `inputs` (equal lengths, whole elements) element by element in rank order:
/// `((x0 op x1) op x2) ...`, rounding to the element type after each step, as a ring of ranks
/// accumulating in that type would.
pub fn reduce_host(inputs: &[&[u8]], elem: ElemType, op: ReduceOp) -> Result<Vec<u8>> {
    let Some((first, rest)) = inputs.split_first() else {
        return Ok(Vec::new());
    };
    let mut acc = first.to_vec();
    for input in rest {
        if input.len() != acc.len() {
            return Err(Error::Collective(CollectiveError::MismatchedBuffers {
                op: "reduce",
                reason: format!("inputs of {} and {} bytes", acc.len(), input.len()).into(),
            }));
        }
        match elem {
            ElemType::F32 => combine::<4>(&mut acc, input, |a, b| {
                let (a, b) = (f32::from_le_bytes(a), f32::from_le_bytes(b));
                float_op(op, a, b).to_le_bytes()
            }),
            ElemType::F16 => combine::<2>(&mut acc, input, |a, b| {
                let (a, b) = (
                    f16::from_le_bytes(a).to_f32(),
                    f16::from_le_bytes(b).to_f32(),
                );
                f16::from_f32(float_op(op, a, b)).to_le_bytes()
            }),
            ElemType::BF16 => combine::<2>(&mut acc, input, |a, b| {
                let (a, b) = (
                    bf16::from_le_bytes(a).to_f32(),
                    bf16::from_le_bytes(b).to_f32(),
                );
                bf16::from_f32(float_op(op, a, b)).to_le_bytes()
            }),
            ElemType::I32 => combine::<4>(&mut acc, input, |a, b| {
                let (a, b) = (i32::from_le_bytes(a), i32::from_le_bytes(b));
                match op {
                    ReduceOp::Sum => a.wrapping_add(b),
                    ReduceOp::Prod => a.wrapping_mul(b),
                    ReduceOp::Min => a.min(b),
                    ReduceOp::Max => a.max(b),
                }
                .to_le_bytes()
            }),
        }
    }
    Ok(acc)
}

fn float_op(op: ReduceOp, a: f32, b: f32) -> f32 {
    match op {
        ReduceOp::Sum => a + b,
        ReduceOp::Prod => a * b,
        ReduceOp::Min => a.min(b),
        ReduceOp::Max => a.max(b),
    }
}

/// `acc[i] = f(acc[i], input[i])` over elements of `N` bytes.
fn combine<const N: usize>(acc: &mut [u8], input: &[u8], f: impl Fn([u8; N], [u8; N]) -> [u8; N]) {
    for (a, b) in acc.chunks_exact_mut(N).zip(input.chunks_exact(N)) {
        let mut left = [0u8; N];
        let mut right = [0u8; N];
        left.copy_from_slice(a);
        right.copy_from_slice(b);
        a.copy_from_slice(&f(left, right));
    }
}
