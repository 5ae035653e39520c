//! Tensors and memory modes on `ComputeClient`: tensors with the runtime's layout (contiguous or
//! pitched) and their strides, several tensors packed in one allocation, strided readback, and
//! allocation-mode windows such as `memory_persistent_allocation`.

use super::ComputeClient;
use gpuworld_systems::backend::MemoryLayout;
use gpuworld_systems::error::LayoutError;
use gpuworld_systems::inbox::{Command, Inbox, Op};
use gpuworld_systems::memory::layout::{
    gather_contiguous, pack_offsets, place_tensor, scatter_strided, strided_span,
};
use gpuworld_systems::memory::{AllocationMode, PoolReport, TensorLayout};
use gpuworld_systems::{Backend, Binding, Error, Handle, HostBytes, Result, StreamId};
use std::sync::Arc;

/// The shape and element size of one tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorDesc<'a> {
    /// Extent of each dimension, outermost first.
    pub shape: &'a [usize],
    /// Bytes per element.
    pub elem_size: usize,
}

/// A handle and the strides (in elements) to index it with.
pub type TensorHandle = (Handle, Vec<usize>);

/// Closes an allocation-mode window when dropped, so a panicking task cannot leave it open.
struct CloseWindow {
    inbox: Arc<Inbox>,
    stream: StreamId,
}

impl Drop for CloseWindow {
    fn drop(&mut self) {
        self.inbox.push(Command::Op(Op::CloseAllocationMode {
            stream: self.stream,
        }));
    }
}

impl<B: Backend> ComputeClient<B> {
    /// Runs `task(input)` with this stream's allocations in the persistent pool: exact-size
    /// buffers kept until `memory_cleanup`, for weights and other long-lived data. Windows nest.
    /// Never ticks (ticks only if `task` does).
    pub fn memory_persistent_allocation<I, R>(&self, input: I, task: impl FnOnce(I) -> R) -> R {
        self.with_allocation_mode(AllocationMode::Persistent, input, task)
    }

    /// Runs `task(input)` with this stream's allocations in `mode`; windows nest, innermost wins.
    /// Never ticks (ticks only if `task` does).
    pub fn with_allocation_mode<I, R>(
        &self,
        mode: AllocationMode,
        input: I,
        task: impl FnOnce(I) -> R,
    ) -> R {
        let stream = self.stream_id();
        let inbox = self.shared.inbox.clone();
        inbox.push(Command::Op(Op::OpenAllocationMode { stream, mode }));
        let _close = CloseWindow { inbox, stream };
        task(input)
    }

    /// Each memory pool's counts (pages, peak pages, largest allocation) as the last tick left
    /// them, without ticking: the ladder in routing order, then the persistent pool. To count
    /// every command sent so far, [`ComputeClient::sync`] first. Never ticks.
    pub fn memory_report(&self) -> Vec<PoolReport> {
        self.with_runtime(|runtime| runtime.memory_report())
    }

    /// A new tensor holding `data` (row-major, contiguous) in the runtime's tensor layout;
    /// returns its handle and the strides, in elements, to index it with. Never ticks.
    pub fn create_tensor(
        &self,
        data: &[u8],
        shape: &[usize],
        elem_size: usize,
    ) -> Result<TensorHandle> {
        let mut created = self.create_tensors(&[(TensorDesc { shape, elem_size }, data)])?;
        created.pop().ok_or(Error::Disconnected)
    }

    /// A new tensor of undefined contents in the runtime's tensor layout, with its strides. Never
    /// ticks.
    pub fn empty_tensor(&self, shape: &[usize], elem_size: usize) -> Result<TensorHandle> {
        let mut created = self.empty_tensors(&[TensorDesc { shape, elem_size }])?;
        created.pop().ok_or(Error::Disconnected)
    }

    /// New tensors holding the given row-major data, packed in one allocation at offsets aligned
    /// to the device (one buffer each on devices that need exclusive buffers). Never ticks.
    pub fn create_tensors(&self, tensors: &[(TensorDesc<'_>, &[u8])]) -> Result<Vec<TensorHandle>> {
        if tensors.is_empty() {
            return Ok(Vec::new());
        }
        let layout = self.tensor_layout();
        let mut placed = Vec::with_capacity(tensors.len());
        let mut device_bytes = Vec::with_capacity(tensors.len());
        for (desc, data) in tensors {
            let placement = place_tensor(desc.shape, desc.elem_size, layout)?;
            let contiguous = place_tensor(desc.shape, desc.elem_size, TensorLayout::Contiguous)?;
            if data.len() as u64 != contiguous.size {
                return Err(Error::Layout(LayoutError::InvalidTensor {
                    reason: format!(
                        "shape {:?} of {}-byte elements needs {} bytes of data, got {}",
                        desc.shape,
                        desc.elem_size,
                        contiguous.size,
                        data.len()
                    )
                    .into(),
                }));
            }
            device_bytes.push(scatter_strided(
                data,
                desc.shape,
                &placement.strides,
                desc.elem_size,
                placement.size,
            )?);
            placed.push(placement);
        }
        if self.properties().memory_layout == MemoryLayout::Exclusive {
            return Ok(device_bytes
                .into_iter()
                .zip(placed)
                .map(|(bytes, placement)| (self.create(bytes), placement.strides))
                .collect());
        }
        let sizes: Vec<u64> = placed.iter().map(|p| p.size).collect();
        let (offsets, total) = pack_offsets(&sizes, self.properties().alignment);
        let mut packed = vec![0u8; to_usize(total)?];
        for (bytes, &offset) in device_bytes.iter().zip(&offsets) {
            let start = to_usize(offset)?;
            packed[start..start + bytes.len()].copy_from_slice(bytes);
        }
        let base = self.create(packed);
        Ok(split(&base, placed, &offsets, total))
    }

    /// New tensors of undefined contents, packed like [`ComputeClient::create_tensors`]. Never
    /// ticks.
    pub fn empty_tensors(&self, tensors: &[TensorDesc<'_>]) -> Result<Vec<TensorHandle>> {
        if tensors.is_empty() {
            return Ok(Vec::new());
        }
        let layout = self.tensor_layout();
        let placed = tensors
            .iter()
            .map(|desc| place_tensor(desc.shape, desc.elem_size, layout))
            .collect::<Result<Vec<_>, _>>()?;
        if self.properties().memory_layout == MemoryLayout::Exclusive {
            return Ok(placed
                .into_iter()
                .map(|placement| (self.empty(placement.size), placement.strides))
                .collect());
        }
        let sizes: Vec<u64> = placed.iter().map(|p| p.size).collect();
        let (offsets, total) = pack_offsets(&sizes, self.properties().alignment);
        let base = self.empty(total);
        Ok(split(&base, placed, &offsets, total))
    }

    /// Reads a tensor of `shape` laid out with `strides` (in elements) from the start of `source`,
    /// and returns its elements row-major and contiguous: the bytes the device copied into when the
    /// tensor is contiguous already, a gathered copy otherwise. May tick: a blocking call.
    pub fn read_tensor(
        &self,
        source: impl Into<Binding>,
        shape: &[usize],
        strides: &[usize],
        elem_size: usize,
    ) -> Result<HostBytes> {
        let source = source.into();
        let (start, end) = source.validate(self.runtime_id())?;
        let span = strided_span(shape, strides, elem_size)?;
        if span > end - start {
            return Err(Error::Layout(LayoutError::InvalidTensor {
                reason: format!(
                    "shape {shape:?}, strides {strides:?}, {elem_size}-byte elements span {span} bytes but the binding has {}",
                    end - start
                )
                .into(),
            }));
        }
        let narrowed = source.slice(0..span)?;
        let bytes = self.read_one(narrowed)?;
        let row_major = place_tensor(shape, elem_size, TensorLayout::Contiguous)?;
        if row_major.strides == strides && row_major.size == span {
            return Ok(bytes);
        }
        Ok(HostBytes::from_vec(gather_contiguous(
            &bytes, shape, strides, elem_size,
        )?))
    }

    fn tensor_layout(&self) -> TensorLayout {
        self.with_runtime(|runtime| runtime.config().memory.tensor_layout)
    }
}

/// Views of `base`, one per placement, each covering its tensor's bytes.
fn split(
    base: &Handle,
    placed: Vec<gpuworld_systems::memory::TensorPlacement>,
    offsets: &[u64],
    total: u64,
) -> Vec<TensorHandle> {
    placed
        .into_iter()
        .zip(offsets)
        .map(|(placement, &offset)| {
            let handle = base
                .clone()
                .offset_start(offset)
                .offset_end(total - offset - placement.size);
            (handle, placement.strides)
        })
        .collect()
}

fn to_usize(bytes: u64) -> Result<usize> {
    usize::try_from(bytes).map_err(|_| {
        Error::Layout(LayoutError::InvalidTensor {
            reason: format!("{bytes} bytes do not fit in host memory").into(),
        })
    })
}
