//! Tensor layouts: the strides a tensor gets (contiguous, or pitched rows padded to an
//! alignment), how several tensors pack into one allocation at aligned offsets, and how strided
//! device bytes become contiguous host bytes.

use crate::error::LayoutError;

/// How tensors of rank two or more are laid out; lower ranks are always contiguous.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum TensorLayout {
    /// Rows follow each other with no gap.
    #[default]
    Contiguous,
    /// Every row starts at a multiple of `row_alignment` bytes (CUDA's "pitched" memory), so
    /// row loads are aligned; the strides say where rows start.
    Pitched {
        /// Byte alignment of every row.
        row_alignment: u64,
    },
}

/// Where a tensor lives in an allocation: strides in elements and the bytes it spans.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorPlacement {
    /// Elements between neighbours along each dimension.
    pub strides: Vec<usize>,
    /// Bytes from the first element to the end of the last row.
    pub size: u64,
}

/// The placement of a tensor of `shape` with `elem_size`-byte elements under `layout`.
pub fn place_tensor(
    shape: &[usize],
    elem_size: usize,
    layout: TensorLayout,
) -> Result<TensorPlacement, LayoutError> {
    if elem_size == 0 {
        return Err(invalid(
            shape,
            &[],
            elem_size,
            "elements must be at least one byte",
        ));
    }
    let mut strides = vec![0usize; shape.len()];
    let mut next = 1usize;
    for (axis, &extent) in shape.iter().enumerate().rev() {
        strides[axis] = next;
        let mut extent_elems = extent;
        if let TensorLayout::Pitched { row_alignment } = layout
            && shape.len() >= 2
            && axis == shape.len() - 1
        {
            let unit = lcm(row_alignment.max(1), elem_size as u64);
            let row_bytes = (extent as u64).saturating_mul(elem_size as u64);
            extent_elems = usize::try_from(row_bytes.next_multiple_of(unit) / elem_size as u64)
                .map_err(|_| invalid(shape, &[], elem_size, "the tensor is too large"))?;
        }
        next = next
            .checked_mul(extent_elems)
            .ok_or_else(|| invalid(shape, &[], elem_size, "the tensor is too large"))?;
    }
    let size = (next as u64)
        .checked_mul(elem_size as u64)
        .ok_or_else(|| invalid(shape, &[], elem_size, "the tensor is too large"))?;
    Ok(TensorPlacement { strides, size })
}

/// Offsets of tensors of `sizes` bytes packed in one allocation, each at a multiple of
/// `alignment`, and the allocation's total size.
pub fn pack_offsets(sizes: &[u64], alignment: u64) -> (Vec<u64>, u64) {
    let alignment = alignment.max(1);
    let mut offsets = Vec::with_capacity(sizes.len());
    let mut end = 0u64;
    for &size in sizes {
        let offset = end.next_multiple_of(alignment);
        offsets.push(offset);
        end = offset + size;
    }
    (offsets, end)
}

/// Bytes from the first element to one past the last element reachable with `strides`.
pub fn strided_span(
    shape: &[usize],
    strides: &[usize],
    elem_size: usize,
) -> Result<u64, LayoutError> {
    if shape.len() != strides.len() {
        return Err(invalid(
            shape,
            strides,
            elem_size,
            "shape and strides have different lengths",
        ));
    }
    if elem_size == 0 {
        return Err(invalid(
            shape,
            strides,
            elem_size,
            "elements must be at least one byte",
        ));
    }
    if shape.contains(&0) {
        return Ok(0);
    }
    let last: Option<u64> = shape.iter().zip(strides).try_fold(0u64, |acc, (&n, &s)| {
        acc.checked_add((n as u64 - 1).checked_mul(s as u64)?)
    });
    last.and_then(|l| l.checked_add(1)?.checked_mul(elem_size as u64))
        .ok_or_else(|| invalid(shape, strides, elem_size, "the tensor is too large"))
}

/// Copies the elements of a strided tensor out of `bytes` into row-major contiguous order.
pub fn gather_contiguous(
    bytes: &[u8],
    shape: &[usize],
    strides: &[usize],
    elem_size: usize,
) -> Result<Vec<u8>, LayoutError> {
    let span = strided_span(shape, strides, elem_size)?;
    if span > bytes.len() as u64 {
        return Err(invalid(
            shape,
            strides,
            elem_size,
            &format!("it spans {span} bytes but the binding has {}", bytes.len()),
        ));
    }
    let count: usize = shape.iter().product();
    let mut out = Vec::with_capacity(count * elem_size);
    if count == 0 {
        return Ok(out);
    }
    // Copy whole runs when the innermost dimension is contiguous (the common pitched case).
    let (run, outer) = match (shape.last(), strides.last()) {
        (Some(&n), Some(&1)) => (n, shape.len() - 1),
        _ => (1, shape.len()),
    };
    let mut index = vec![0usize; outer];
    loop {
        let start: usize = index.iter().zip(strides).map(|(i, s)| i * s).sum();
        let from = start * elem_size;
        out.extend_from_slice(&bytes[from..from + run * elem_size]);
        // Advance the multi-index over the outer dimensions, last fastest.
        let mut axis = outer;
        loop {
            if axis == 0 {
                return Ok(out);
            }
            axis -= 1;
            index[axis] += 1;
            if index[axis] < shape[axis] {
                break;
            }
            index[axis] = 0;
        }
    }
}

/// Spreads row-major contiguous `data` out to the strided positions of a buffer of `size` bytes;
/// `strides` come from [`place_tensor`] (only the last dimension may be padded).
pub fn scatter_strided(
    data: &[u8],
    shape: &[usize],
    strides: &[usize],
    elem_size: usize,
    size: u64,
) -> Result<Vec<u8>, LayoutError> {
    let contiguous = place_tensor(shape, elem_size, TensorLayout::Contiguous)?;
    if contiguous.strides == strides {
        return Ok(data.to_vec());
    }
    let rows = shape.iter().rev().skip(1).product::<usize>();
    let run = shape.last().copied().unwrap_or(1) * elem_size;
    let size = usize::try_from(size)
        .map_err(|_| invalid(shape, strides, elem_size, "the tensor is too large"))?;
    if data.len() != contiguous.size as usize
        || size < strided_span(shape, strides, elem_size)? as usize
    {
        return Err(invalid(
            shape,
            strides,
            elem_size,
            "the data does not fit the layout",
        ));
    }
    let mut out = vec![0u8; size];
    let pitch = strides.iter().rev().nth(1).copied().unwrap_or(0) * elem_size;
    // Pitched layouts only pad the last dimension: row r starts at r * pitch.
    for row in 0..rows {
        let (src, dst) = (row * run, row * pitch);
        out[dst..dst + run].copy_from_slice(&data[src..src + run]);
    }
    Ok(out)
}

fn lcm(a: u64, b: u64) -> u64 {
    let (mut x, mut y) = (a, b);
    while y != 0 {
        (x, y) = (y, x % y);
    }
    a / x * b
}

fn invalid(shape: &[usize], strides: &[usize], elem_size: usize, why: &str) -> LayoutError {
    LayoutError::InvalidTensor {
        reason: format!("shape {shape:?}, strides {strides:?}, {elem_size}-byte elements: {why}")
            .into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_strides_are_row_major() {
        let placed = place_tensor(&[2, 3, 4], 4, TensorLayout::Contiguous).unwrap();
        assert_eq!(placed.strides, vec![12, 4, 1]);
        assert_eq!(placed.size, 96);
    }

    #[test]
    fn pitched_rows_start_on_the_row_alignment() {
        let placed = place_tensor(&[3, 5], 4, TensorLayout::Pitched { row_alignment: 16 }).unwrap();
        assert_eq!(placed.strides, vec![8, 1], "20-byte rows pad to 32 bytes");
        assert_eq!(placed.size, 96);
        let vector = place_tensor(&[5], 4, TensorLayout::Pitched { row_alignment: 16 }).unwrap();
        assert_eq!(vector.strides, vec![1], "rank one stays contiguous");
    }

    #[test]
    fn packed_offsets_are_aligned() {
        assert_eq!(pack_offsets(&[10, 300, 1], 256), (vec![0, 256, 768], 769));
    }

    #[test]
    fn scatter_then_gather_round_trips_a_pitched_tensor() {
        let data: Vec<u8> = (0..15u8).collect();
        let placed = place_tensor(&[3, 5], 1, TensorLayout::Pitched { row_alignment: 8 }).unwrap();
        let device = scatter_strided(&data, &[3, 5], &placed.strides, 1, placed.size).unwrap();
        assert_eq!(&device[8..13], &[5, 6, 7, 8, 9]);
        let back = gather_contiguous(&device, &[3, 5], &placed.strides, 1).unwrap();
        assert_eq!(back, data);
    }

    #[test]
    fn gathering_past_the_bytes_is_an_error() {
        let error = gather_contiguous(&[0; 8], &[2, 2], &[4, 1], 4).unwrap_err();
        assert!(error.to_string().contains("spans 24 bytes"), "{error}");
    }
}
