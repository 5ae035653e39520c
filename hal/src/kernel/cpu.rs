//! The CPU side of kernels: the source type the cpu and sim backends run, and the interface it is
//! written against (one call per cube, buffers read and written by element, or a cube's range of
//! elements at once, bounds checked once for the range rather than at every element).

use super::KernelSource;
use super::atomic::AtomicOp;
use super::race::{AccessKind, RaceShadow};
use std::ops::Range;
use std::sync::atomic::{AtomicU32, Ordering};

/// A CPU kernel: called once per cube with the cube's position and the launch's buffers.
pub type CpuKernelFn = fn(&CubeContext, &KernelIo<'_>);

/// A kernel's source for the cpu and sim backends: a Rust function called once per cube.
#[derive(Clone, Copy, Debug)]
pub struct CpuSource(pub CpuKernelFn);

impl KernelSource for CpuSource {}

/// Where one cube sits in its launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CubeContext {
    /// This cube's position.
    pub cube_pos: [u32; 3],
    /// The launch's cube count.
    pub cube_count: [u32; 3],
    /// Units per cube.
    pub cube_dim: [u32; 3],
}

impl CubeContext {
    /// The cube's position flattened to one index.
    pub fn cube_index(&self) -> u64 {
        let [x, y, z] = self.cube_pos.map(u64::from);
        let [cx, cy, _] = self.cube_count.map(u64::from);
        x + cx * (y + cy * z)
    }

    /// The global index of the first unit of this cube along x, for 1-D kernels.
    pub fn first_unit_1d(&self) -> u64 {
        self.cube_index() * self.units()
    }

    /// Units per cube.
    pub fn units(&self) -> u64 {
        u64::from(self.cube_dim[0] * self.cube_dim[1] * self.cube_dim[2])
    }

    /// The global indices of this cube's units below `len`, for 1-D kernels.
    pub fn units_1d(&self, len: usize) -> Range<usize> {
        let start = self.first_unit_1d().min(len as u64);
        let end = (start + self.units()).min(len as u64);
        start as usize..end as usize
    }
}

/// A buffer binding as a CPU kernel sees it: the whole 4-byte words of a range of host memory,
/// borrowed from the memory that holds them (`HostMemory::view`), so it cannot outlive them.
#[derive(Clone, Copy, Debug)]
pub struct CpuBuffer<'a> {
    words: &'a [AtomicU32],
    read_only: bool,
}

impl<'a> CpuBuffer<'a> {
    /// A view of `words` that kernels may read and write.
    pub fn new(words: &'a [AtomicU32]) -> CpuBuffer<'a> {
        CpuBuffer {
            words,
            read_only: false,
        }
    }

    /// This view, refusing every store of a kernel ([`ReadOnlyStore`]).
    pub fn read_only(self) -> CpuBuffer<'a> {
        CpuBuffer {
            read_only: true,
            ..self
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.words.len() * 4
    }

    /// Whether the view is empty.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// The words viewed, for host code sharing the memory with kernels (interop).
    pub fn words(&self) -> &'a [AtomicU32] {
        self.words
    }
}

/// Elements [`KernelIo::map_u32`] handles per step of its loop.
const MAP_BLOCK: usize = 8;

/// The buffers and scalars of one launch, as CPU kernels access them.
///
/// Element by element ([`load_f32`](Self::load_f32), [`store_f32`](Self::store_f32)), through a
/// binding resolved once ([`buffer`](Self::buffer)), or a whole range of units at once
/// ([`map_f32`](Self::map_f32)): all three give the same values and the same out-of-bounds
/// behaviour; the later ones cost less per element.
#[derive(Debug)]
pub struct KernelIo<'a> {
    buffers: &'a [CpuBuffer<'a>],
    scalars: &'a [u32],
    mode: super::ExecutionMode,
    /// The race detector's shadow, in a tracked launch, and the units of one cube.
    races: Option<(&'a RaceShadow, u64)>,
}

impl<'a> KernelIo<'a> {
    /// Bundles a launch's arguments.
    pub fn new(
        buffers: &'a [CpuBuffer<'a>],
        scalars: &'a [u32],
        mode: super::ExecutionMode,
    ) -> Self {
        KernelIo {
            buffers,
            scalars,
            mode,
            races: None,
        }
    }

    /// These arguments, every access to a writable binding recorded in `shadow` (the race
    /// detector, see [`race`](super::race)) for a launch of cubes of `units_per_cube` units.
    /// Only the host backends' launches (`host_launch`, hal's `internals`) track races.
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub(crate) fn with_races(self, shadow: &'a RaceShadow, units_per_cube: u64) -> Self {
        KernelIo {
            races: Some((shadow, units_per_cube)),
            ..self
        }
    }

    /// The race detector's shadow, in a tracked launch.
    #[inline]
    pub(crate) fn races(&self) -> Option<&'a RaceShadow> {
        self.races.map(|(shadow, _)| shadow)
    }

    /// Binding `buffer`, resolved once for many accesses.
    #[inline]
    pub fn buffer(&self, buffer: usize) -> BufferIo<'a> {
        let view = &self.buffers[buffer];
        BufferIo {
            words: view.words,
            buffer,
            mode: self.mode,
            read_only: view.read_only,
            // Nothing stores to a read-only binding: its loads cannot race.
            races: self.races().filter(|_| !view.read_only),
        }
    }

    /// Number of 32-bit elements in buffer `buffer`.
    #[inline]
    pub fn len32(&self, buffer: usize) -> usize {
        self.buffers[buffer].words.len()
    }

    /// Reads element `index` of `buffer` as `u32`; out of bounds reads 0 in checked mode and
    /// panics in unchecked mode.
    #[inline]
    pub fn load_u32(&self, buffer: usize, index: usize) -> u32 {
        self.buffer(buffer).load_u32(index)
    }

    /// Writes element `index` of `buffer`; out of bounds is dropped in checked mode and panics
    /// in unchecked mode.
    #[inline]
    pub fn store_u32(&self, buffer: usize, index: usize, value: u32) {
        self.buffer(buffer).store_u32(index, value);
    }

    /// Reads element `index` of `buffer` as `f32`.
    #[inline]
    pub fn load_f32(&self, buffer: usize, index: usize) -> f32 {
        f32::from_bits(self.load_u32(buffer, index))
    }

    /// Writes element `index` of `buffer` as `f32`.
    #[inline]
    pub fn store_f32(&self, buffer: usize, index: usize, value: f32) {
        self.store_u32(buffer, index, value.to_bits());
    }

    /// For every unit `i` of `units` in order, `out[i] = f([inputs[0][i], inputs[1][i], ..])`
    /// as `f32`: the same values, and the same out-of-bounds behaviour, as loading each input
    /// in order and storing the result one element at a time.
    #[inline]
    pub fn map_f32<const N: usize>(
        &self,
        units: Range<usize>,
        inputs: [usize; N],
        out: usize,
        f: impl Fn([f32; N]) -> f32,
    ) {
        self.map_u32(units, inputs, out, |words| {
            f(words.map(f32::from_bits)).to_bits()
        });
    }

    /// [`map_f32`](Self::map_f32) on `u32` elements.
    #[inline]
    pub fn map_u32<const N: usize>(
        &self,
        units: Range<usize>,
        inputs: [usize; N],
        out: usize,
        f: impl Fn([u32; N]) -> u32,
    ) {
        let inputs = inputs.map(|buffer| self.buffer(buffer));
        let out = self.buffer(out);
        if out.read_only && !units.is_empty() {
            out.refuse_store();
        }
        if let Some((_, units_per_cube)) = self.races {
            // Element by element, each as its unit's, for the race detector.
            for i in units {
                self.at_global(i, units_per_cube);
                out.store_u32(i, f(inputs.map(|input| input.load_u32(i))));
            }
            return;
        }
        // The units every binding holds need no check per element; the others, if any, come
        // after them, so taking them one by one keeps the order of any panic or dropped store.
        let held = inputs
            .iter()
            .map(BufferIo::len32)
            .fold(out.len32().min(units.end), usize::min);
        let in_bounds = units.start.min(held)..held;
        let dst = &out.words[in_bounds.clone()];
        let srcs = inputs.map(|input| &input.words[in_bounds.clone()]);
        // Blocks of a fixed size unroll: the loop's own bookkeeping is paid once per block.
        let (dst_blocks, dst_rest) = dst.as_chunks::<MAP_BLOCK>();
        let src_blocks = srcs.map(|src| src.as_chunks::<MAP_BLOCK>());
        for block in 0..dst_blocks.len() {
            for i in 0..MAP_BLOCK {
                let value = f(src_blocks.map(|(src, _)| src[block][i].load(Ordering::Relaxed)));
                dst_blocks[block][i].store(value, Ordering::Relaxed);
            }
        }
        for i in 0..dst_rest.len() {
            let value = f(src_blocks.map(|(_, src)| src[i].load(Ordering::Relaxed)));
            dst_rest[i].store(value, Ordering::Relaxed);
        }
        for i in held.max(units.start)..units.end {
            out.store_u32(i, f(inputs.map(|input| input.load_u32(i))));
        }
    }

    /// Scalar `index` as `u32`.
    #[inline]
    pub fn scalar_u32(&self, index: usize) -> u32 {
        self.scalars.get(index).copied().unwrap_or(0)
    }

    /// Scalar `index` as `f32`.
    #[inline]
    pub fn scalar_f32(&self, index: usize) -> f32 {
        f32::from_bits(self.scalar_u32(index))
    }
}

/// One binding of a launch as a kernel accesses it ([`KernelIo::buffer`]): its words and the
/// launch's execution mode, looked up once instead of at every access.
#[derive(Clone, Copy, Debug)]
pub struct BufferIo<'a> {
    words: &'a [AtomicU32],
    buffer: usize,
    mode: super::ExecutionMode,
    read_only: bool,
    races: Option<&'a RaceShadow>,
}

impl<'a> BufferIo<'a> {
    /// Number of 32-bit elements.
    #[inline]
    pub fn len32(&self) -> usize {
        self.words.len()
    }

    /// The words of elements `range`, if the binding holds all of them: for kernels that check
    /// a range once instead of each access (a range it does not hold is theirs to handle, as
    /// single accesses would). Stores through them skip the read-only check: check
    /// [`is_read_only`](Self::is_read_only) before storing; accesses through them are not seen
    /// by the race detector (the generated sources use them only for elements each unit owns:
    /// at its own `global_index()`).
    #[inline]
    pub fn words(&self, range: Range<usize>) -> Option<&'a [AtomicU32]> {
        self.words.get(range)
    }

    #[inline]
    fn word(&self, index: usize, kind: AccessKind) -> Option<&AtomicU32> {
        let word = self.words.get(index);
        match (word, self.races) {
            (None, _) => self.out_of_bounds(index),
            (Some(_), Some(shadow)) => shadow.access(self.buffer, index, kind),
            (Some(_), None) => {}
        }
        word
    }

    /// Unchecked launches promised to stay in bounds; on the host, breaking that promise is a
    /// kernel panic (`ExecutionError::KernelPanic`) rather than an access outside the buffer.
    #[cold]
    #[inline(never)]
    fn out_of_bounds(&self, index: usize) {
        if self.mode == super::ExecutionMode::Unchecked {
            stop_launch(format!(
                "element {index} of buffer {} is out of bounds in an unchecked launch",
                self.buffer
            ));
        }
    }

    /// A store to a binding the signature declares read-only stops the launch; the backend
    /// reports it as `ExecutionError::ReadOnlyStore`, naming the buffer.
    #[cold]
    #[inline(never)]
    fn refuse_store(&self) -> ! {
        stop_launch(ReadOnlyStore {
            buffer: self.buffer,
        })
    }

    /// Whether the signature declares this binding read-only (a store stops the launch).
    #[inline]
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Reads element `index` as `u32`; out of bounds reads 0 in checked mode and panics in
    /// unchecked mode.
    #[inline]
    pub fn load_u32(&self, index: usize) -> u32 {
        self.word(index, AccessKind::Load)
            .map_or(0, |w| w.load(Ordering::Relaxed))
    }

    /// Writes element `index`; out of bounds is dropped in checked mode and panics in unchecked
    /// mode; a store to a read-only binding stops the launch (`ExecutionError::ReadOnlyStore`).
    #[inline]
    pub fn store_u32(&self, index: usize, value: u32) {
        if self.read_only {
            self.refuse_store();
        }
        if let Some(w) = self.word(index, AccessKind::Store) {
            w.store(value, Ordering::Relaxed);
        }
    }

    /// Reads element `index` as `f32`.
    #[inline]
    pub fn load_f32(&self, index: usize) -> f32 {
        f32::from_bits(self.load_u32(index))
    }

    /// Applies `op` to element `index` atomically (relaxed) and returns the element's value
    /// before it; out of bounds has no effect and returns 0 in checked mode and stops an
    /// unchecked launch, as a store would; on a read-only binding it stops the launch
    /// (`ExecutionError::ReadOnlyStore`).
    #[inline]
    pub fn atomic(&self, index: usize, op: AtomicOp) -> u32 {
        if self.read_only {
            self.refuse_store();
        }
        self.word(index, AccessKind::Atomic)
            .map_or(0, |w| op.apply(w))
    }

    /// Writes element `index` as `f32`.
    #[inline]
    pub fn store_f32(&self, index: usize, value: f32) {
        self.store_u32(index, value.to_bits());
    }
}

/// What a CPU kernel's launch unwinds with when it stores to a read-only binding: the binding's
/// position, which the backend turns into `ExecutionError::ReadOnlyStore` naming the buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadOnlyStore {
    /// The binding's position in the launch.
    pub buffer: usize,
}

/// Stops the running launch with `why`, which the backend catches and returns as the stream's
/// typed error: an unwind that skips the panic hook (`resume_unwind`), so that no thread prints
/// a panic message for an error the caller gets as a value.
#[cold]
pub(crate) fn stop_launch<T: std::any::Any + Send>(why: T) -> ! {
    std::panic::resume_unwind(Box::new(why))
}

/// The text of a caught panic.
pub fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "kernel panicked with a non-string payload".to_string()
    }
}

/// Runs `kernel`'s CPU source on every cube of a 2D `cube_count`, row by row, as a host backend
/// walks a launch in order: how the library's tests run a kernel without a runtime.
#[cfg(test)]
pub(crate) fn run_every_cube(kernel: &super::KernelDef, cube_count: [u32; 3], io: &KernelIo<'_>) {
    let CpuSource(source) = *kernel.source::<CpuSource>().expect("a CPU source");
    for y in 0..cube_count[1] {
        for x in 0..cube_count[0] {
            let ctx = CubeContext {
                cube_pos: [x, y, 0],
                cube_count,
                cube_dim: kernel.signature.cube_dim,
            };
            source(&ctx, io);
        }
    }
}

// The atomics and the race detector's unit marks, beside the type they are methods of (the
// operations in `atomic.rs`, the shadow in `race.rs`).

/// `KernelIo`'s named atomics: `$name(buffer, index, value)` applies `$op` to element `index`
/// of binding `buffer` and returns the element before it.
macro_rules! named_atomics {
    ($($(#[$doc:meta])* $name:ident: $ty:ty => $op:ident;)*) => {
        impl KernelIo<'_> {
            $(
                $(#[$doc])*
                #[inline]
                pub fn $name(&self, buffer: usize, index: usize, value: $ty) -> $ty {
                    self.buffer(buffer).atomic(index, AtomicOp::$op(value as u32)) as $ty
                }
            )*
        }
    };
}

named_atomics! {
    /// `atomicAdd` on a `u32` element (wrapping); the element before it.
    atomic_add_u32: u32 => Add;
    /// `atomicSub` on a `u32` element (wrapping); the element before it.
    atomic_sub_u32: u32 => Sub;
    /// `atomicMin` on a `u32` element; the element before it.
    atomic_min_u32: u32 => MinU32;
    /// `atomicMax` on a `u32` element; the element before it.
    atomic_max_u32: u32 => MaxU32;
    /// `atomicAnd` on a `u32` element; the element before it.
    atomic_and_u32: u32 => And;
    /// `atomicOr` on a `u32` element; the element before it.
    atomic_or_u32: u32 => Or;
    /// `atomicXor` on a `u32` element; the element before it.
    atomic_xor_u32: u32 => Xor;
    /// `atomicExchange` on a `u32` element; the element before it.
    atomic_exchange_u32: u32 => Exchange;
    /// `atomicAdd` on an `i32` element (wrapping); the element before it.
    atomic_add_i32: i32 => Add;
    /// `atomicSub` on an `i32` element (wrapping); the element before it.
    atomic_sub_i32: i32 => Sub;
    /// `atomicMin` on an `i32` element (signed); the element before it.
    atomic_min_i32: i32 => MinI32;
    /// `atomicMax` on an `i32` element (signed); the element before it.
    atomic_max_i32: i32 => MaxI32;
    /// `atomicAnd` on an `i32` element; the element before it.
    atomic_and_i32: i32 => And;
    /// `atomicOr` on an `i32` element; the element before it.
    atomic_or_i32: i32 => Or;
    /// `atomicXor` on an `i32` element; the element before it.
    atomic_xor_i32: i32 => Xor;
    /// `atomicExchange` on an `i32` element; the element before it.
    atomic_exchange_i32: i32 => Exchange;
}

impl KernelIo<'_> {
    /// `atomicCompareExchangeWeak` / `atomicCAS` on a `u32` element: it becomes `new` if it
    /// holds `current`; the element before it (it was exchanged when that equals `current`:
    /// this never fails spuriously, as WGSL's weak form may).
    #[inline]
    pub fn atomic_compare_exchange_u32(
        &self,
        buffer: usize,
        index: usize,
        current: u32,
        new: u32,
    ) -> u32 {
        self.buffer(buffer)
            .atomic(index, AtomicOp::CompareExchange { current, new })
    }

    /// [`atomic_compare_exchange_u32`](Self::atomic_compare_exchange_u32) on an `i32` element.
    #[inline]
    pub fn atomic_compare_exchange_i32(
        &self,
        buffer: usize,
        index: usize,
        current: i32,
        new: i32,
    ) -> i32 {
        self.atomic_compare_exchange_u32(buffer, index, current as u32, new as u32) as i32
    }
}

impl KernelIo<'_> {
    /// The accesses that follow are unit `unit`'s (its flattened index in the cube) of the cube
    /// running: for the race detector of checked launches on the cpu and sim backends. A CPU
    /// source that runs its cube's units one after the other calls it as each unit starts
    /// (the generated sources do); without it, a cube is seen as one unit. Costs a branch
    /// when the launch is not tracked.
    #[inline]
    pub fn at_unit(&self, unit: u32) {
        if self.races().is_some() {
            RaceShadow::enter_unit(unit);
        }
    }

    /// For `map_f32`/`map_u32`: the unit of global 1-D index `global` runs, in cubes of
    /// `units`.
    #[inline]
    pub(crate) fn at_global(&self, global: usize, units: u64) {
        if self.races().is_some() {
            RaceShadow::enter_global(global as u64, units);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::ExecutionMode;

    fn words(values: impl IntoIterator<Item = u32>) -> Vec<AtomicU32> {
        values.into_iter().map(AtomicU32::new).collect()
    }

    fn values(words: &[AtomicU32]) -> Vec<u32> {
        words.iter().map(|w| w.load(Ordering::Relaxed)).collect()
    }

    /// Runs `out[i] = a[i] * 3 + b[i]` for `units`, once with `map_u32` and once element by
    /// element, on buffers of the given lengths; returns both results (or both panics).
    fn both_ways(
        lens: [usize; 3],
        units: Range<usize>,
        mode: ExecutionMode,
    ) -> [Result<Vec<u32>, String>; 2] {
        let run = |mapped: bool| {
            let [a, b, out] = [
                words((0..lens[0] as u32).map(|i| i + 1)),
                words((0..lens[1] as u32).map(|i| 100 * i)),
                words((0..lens[2]).map(|_| 7)),
            ];
            let views = [CpuBuffer::new(&a), CpuBuffer::new(&b), CpuBuffer::new(&out)];
            let io = KernelIo::new(&views, &[], mode);
            let units = units.clone();
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                if mapped {
                    io.map_u32(units, [0, 1], 2, |[a, b]| a * 3 + b);
                } else {
                    for i in units {
                        io.store_u32(2, i, io.load_u32(0, i) * 3 + io.load_u32(1, i));
                    }
                }
            }));
            // What was stored before a panic counts as much as the panic's message.
            ran.map(|()| values(&out))
                .map_err(|payload| format!("{} after {:?}", panic_message(payload), values(&out)))
        };
        [run(true), run(false)]
    }

    #[test]
    fn a_map_over_bindings_that_hold_every_unit_computes_each_element() {
        let [mapped, by_element] = both_ways([20, 20, 20], 3..19, ExecutionMode::Checked);
        let expected: Vec<u32> = (0..20)
            .map(|i| {
                if (3..19).contains(&i) {
                    (i + 1) * 3 + 100 * i
                } else {
                    7
                }
            })
            .collect();
        assert_eq!(mapped, Ok(expected));
        assert_eq!(mapped, by_element);
    }

    #[test]
    fn a_checked_map_reads_zero_past_an_input_and_drops_stores_past_its_output() {
        let [mapped, by_element] = both_ways([5, 12, 9], 0..16, ExecutionMode::Checked);
        let expected: Vec<u32> = (0..9)
            .map(|i| {
                if i < 5 {
                    (i + 1) * 3 + 100 * i
                } else {
                    100 * i
                }
            })
            .collect();
        assert_eq!(mapped, Ok(expected));
        assert_eq!(mapped, by_element);
    }

    #[test]
    fn an_unchecked_map_panics_at_the_first_element_out_of_bounds_after_storing_the_ones_before() {
        let [mapped, by_element] = both_ways([30, 11, 40], 2..30, ExecutionMode::Unchecked);
        let message = mapped.expect_err("b holds 11 elements");
        assert!(
            message.starts_with("element 11 of buffer 1 is out of bounds in an unchecked launch"),
            "{message}"
        );
        assert_eq!(Err(message), by_element);
    }

    #[test]
    fn a_map_agrees_with_single_accesses_for_every_length_and_range() {
        for mode in [ExecutionMode::Checked, ExecutionMode::Unchecked] {
            for lens in [
                [0, 0, 0],
                [3, 17, 17],
                [17, 3, 17],
                [17, 17, 3],
                [24, 24, 24],
            ] {
                for start in 0..20 {
                    for end in start..26 {
                        let [mapped, by_element] = both_ways(lens, start..end, mode);
                        assert_eq!(mapped, by_element, "{mode:?} {lens:?} {start}..{end}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_map_may_write_over_its_own_input() {
        let x = words((0..10).map(|i| (i as f32 + 0.5).to_bits()));
        let views = [CpuBuffer::new(&x)];
        let io = KernelIo::new(&views, &[], ExecutionMode::Checked);
        io.map_f32(0..10, [0], 0, |[x]| x * 2.0);
        let doubled: Vec<u32> = (0..10).map(|i| (2.0 * i as f32 + 1.0).to_bits()).collect();
        assert_eq!(values(&x), doubled);
    }

    #[test]
    fn a_store_to_a_read_only_binding_unwinds_with_its_position_and_writes_nothing() {
        let x = words([5, 6]);
        let out = words([0, 0]);
        let views = [CpuBuffer::new(&x).read_only(), CpuBuffer::new(&out)];
        let io = KernelIo::new(&views, &[], ExecutionMode::Checked);
        assert_eq!(io.load_u32(0, 1), 6);
        io.map_u32(0..2, [0], 1, |[x]| x + 1);
        assert_eq!(values(&out), [6, 7]);
        let stores: [&dyn Fn(&KernelIo<'_>); 2] = [&|io| io.store_u32(0, 0, 9), &|io| {
            io.map_u32(0..2, [1], 0, |[o]| o)
        }];
        for store in stores {
            let payload = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| store(&io)))
                .expect_err("a store to a read-only binding stops the launch");
            assert_eq!(
                payload.downcast_ref::<ReadOnlyStore>(),
                Some(&ReadOnlyStore { buffer: 0 })
            );
        }
        assert_eq!(values(&x), [5, 6]);
    }

    #[test]
    fn a_resolved_binding_reads_and_writes_as_the_launch_does() {
        let x = words([5, 6]);
        let views = [CpuBuffer::new(&x)];
        let checked = KernelIo::new(&views, &[], ExecutionMode::Checked);
        let buffer = checked.buffer(0);
        assert_eq!(
            (buffer.len32(), buffer.load_u32(1), buffer.load_u32(2)),
            (2, 6, 0)
        );
        buffer.store_f32(0, 1.5);
        buffer.store_u32(2, 9);
        assert_eq!(values(&x), [1.5f32.to_bits(), 6]);
        assert_eq!(checked.load_f32(0, 0), 1.5);

        let unchecked = KernelIo::new(&views, &[], ExecutionMode::Unchecked);
        let payload = std::panic::catch_unwind(|| unchecked.buffer(0).load_u32(2))
            .expect_err("an unchecked read past the end panics");
        assert_eq!(
            panic_message(payload),
            "element 2 of buffer 0 is out of bounds in an unchecked launch"
        );
    }
}
