//! Atomic read-modify-writes of CPU kernels, on `u32` and `i32` elements: the operations WGSL's
//! `atomicAdd`.. and CUDA's `atomicAdd`.. have, with the same results.
//!
//! # Memory order
//! Every operation is relaxed, on every backend (WGSL has only relaxed atomics; CUDA's
//! `atomicAdd`.. are relaxed; the CPU uses `Ordering::Relaxed`): an atomic orders nothing but
//! itself. What orders the rest is the launch boundary: everything a launch wrote is visible to
//! work the runtime orders after it (the stream's order, events between streams).
//!
//! # What is deterministic
//! The final value of an element that a launch changes only with one commutative operation
//! (add/sub, min, max, and, or, xor) is the same on every backend whatever the order the units
//! ran in. The values an operation returns (the element before it), and anything built from
//! them (an append position, an exchange's winner, a compare-exchange loop's order), depend on
//! the order units ran in: they differ between runs and backends.
//!
//! A buffer's atomic accesses are declared with [`Param::atomic`](crate::kernel::Param::atomic)
//! (`array<atomic<u32>>` in WGSL); the CPU accepts them on any writable binding. In checked
//! launches on the cpu and sim backends, atomics of two units on one element are not a race;
//! a plain load or store of an element that another unit accesses atomically is.

use std::sync::atomic::{AtomicU32, Ordering};

/// One atomic read-modify-write on a 32-bit element, its operands as the element's bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicOp {
    /// `x + v`, wrapping (the same bits for `u32` and `i32`).
    Add(u32),
    /// `x - v`, wrapping.
    Sub(u32),
    /// The smaller of `x` and `v` as `u32`.
    MinU32(u32),
    /// The larger of `x` and `v` as `u32`.
    MaxU32(u32),
    /// The smaller of `x` and `v` as `i32`.
    MinI32(u32),
    /// The larger of `x` and `v` as `i32`.
    MaxI32(u32),
    /// `x & v`.
    And(u32),
    /// `x | v`.
    Or(u32),
    /// `x ^ v`.
    Xor(u32),
    /// `v`.
    Exchange(u32),
    /// `new` if `x == current`, else `x` unchanged.
    CompareExchange {
        /// The value the element must hold.
        current: u32,
        /// What it becomes if it does.
        new: u32,
    },
}

impl AtomicOp {
    /// Applies the operation to `word`, relaxed; the word's value before it.
    #[inline]
    pub fn apply(self, word: &AtomicU32) -> u32 {
        let relaxed = Ordering::Relaxed;
        let signed = |f: fn(i32, i32) -> i32, v: u32| {
            let update = |x: u32| Some(f(x as i32, v as i32) as u32);
            // `fetch_update` with a closure that always returns `Some` cannot fail.
            word.fetch_update(relaxed, relaxed, update)
                .unwrap_or_else(|x| x)
        };
        match self {
            AtomicOp::Add(v) => word.fetch_add(v, relaxed),
            AtomicOp::Sub(v) => word.fetch_sub(v, relaxed),
            AtomicOp::MinU32(v) => word.fetch_min(v, relaxed),
            AtomicOp::MaxU32(v) => word.fetch_max(v, relaxed),
            AtomicOp::MinI32(v) => signed(i32::min, v),
            AtomicOp::MaxI32(v) => signed(i32::max, v),
            AtomicOp::And(v) => word.fetch_and(v, relaxed),
            AtomicOp::Or(v) => word.fetch_or(v, relaxed),
            AtomicOp::Xor(v) => word.fetch_xor(v, relaxed),
            AtomicOp::Exchange(v) => word.swap(v, relaxed),
            AtomicOp::CompareExchange { current, new } => word
                .compare_exchange(current, new, relaxed, relaxed)
                .unwrap_or_else(|x| x),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{CpuBuffer, ExecutionMode, KernelIo, ReadOnlyStore};

    /// Runs `f` on a one-binding launch over `start`; the element after it and what `f` returned.
    fn on<T>(start: u32, f: impl FnOnce(&KernelIo<'_>) -> T) -> (u32, T) {
        let words = [AtomicU32::new(start)];
        let views = [CpuBuffer::new(&words)];
        let io = KernelIo::new(&views, &[], ExecutionMode::Checked);
        let returned = f(&io);
        (words[0].load(Ordering::Relaxed), returned)
    }

    #[test]
    fn each_operation_gives_the_new_value_and_returns_the_old_one() {
        assert_eq!(on(u32::MAX, |io| io.atomic_add_u32(0, 0, 2)), (1, u32::MAX));
        assert_eq!(on(1, |io| io.atomic_sub_u32(0, 0, 2)), (u32::MAX, 1));
        assert_eq!(on(7, |io| io.atomic_min_u32(0, 0, 3)), (3, 7));
        assert_eq!(on(7, |io| io.atomic_max_u32(0, 0, u32::MAX)), (u32::MAX, 7));
        assert_eq!(
            on(0b1100, |io| io.atomic_and_u32(0, 0, 0b1010)),
            (0b1000, 0b1100)
        );
        assert_eq!(
            on(0b1100, |io| io.atomic_or_u32(0, 0, 0b1010)),
            (0b1110, 0b1100)
        );
        assert_eq!(
            on(0b1100, |io| io.atomic_xor_u32(0, 0, 0b1010)),
            (0b0110, 0b1100)
        );
        assert_eq!(on(5, |io| io.atomic_exchange_u32(0, 0, 9)), (9, 5));
        assert_eq!(
            on(5, |io| io.atomic_compare_exchange_u32(0, 0, 5, 9)),
            (9, 5)
        );
        assert_eq!(
            on(5, |io| io.atomic_compare_exchange_u32(0, 0, 4, 9)),
            (5, 5)
        );
        let bits = |v: i32| v as u32;
        assert_eq!(on(bits(-3), |io| io.atomic_add_i32(0, 0, 5)), (2, -3));
        assert_eq!(
            on(bits(i32::MIN), |io| io.atomic_sub_i32(0, 0, 1)),
            (bits(i32::MAX), i32::MIN)
        );
        assert_eq!(on(bits(3), |io| io.atomic_min_i32(0, 0, -4)), (bits(-4), 3));
        assert_eq!(on(bits(-4), |io| io.atomic_max_i32(0, 0, 3)), (3, -4));
        assert_eq!(
            on(bits(-4), |io| io.atomic_max_i32(0, 0, -5)),
            (bits(-4), -4)
        );
        assert_eq!(on(bits(-1), |io| io.atomic_and_i32(0, 0, 6)), (6, -1));
        assert_eq!(on(0, |io| io.atomic_or_i32(0, 0, -8)), (bits(-8), 0));
        assert_eq!(on(bits(-1), |io| io.atomic_xor_i32(0, 0, -1)), (0, -1));
        assert_eq!(on(0, |io| io.atomic_exchange_i32(0, 0, -2)), (bits(-2), 0));
        assert_eq!(
            on(bits(-2), |io| io.atomic_compare_exchange_i32(0, 0, -2, 7)),
            (7, -2)
        );
    }

    #[test]
    fn out_of_bounds_does_nothing_in_checked_launches_and_a_read_only_binding_stops_the_launch() {
        assert_eq!(on(5, |io| io.atomic_add_u32(0, 1, 2)), (5, 0));
        let words = [AtomicU32::new(5)];
        let views = [CpuBuffer::new(&words).read_only()];
        let io = KernelIo::new(&views, &[], ExecutionMode::Checked);
        let payload =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| io.atomic_add_u32(0, 0, 1)))
                .expect_err("an atomic on a read-only binding stops the launch");
        assert_eq!(
            payload.downcast_ref::<ReadOnlyStore>(),
            Some(&ReadOnlyStore { buffer: 0 })
        );
        assert_eq!(words[0].load(Ordering::Relaxed), 5);
    }

    #[test]
    fn units_adding_on_many_threads_count_exactly() {
        let words: Vec<AtomicU32> = (0..10).map(|_| AtomicU32::new(0)).collect();
        let views = [CpuBuffer::new(&words)];
        let io = KernelIo::new(&views, &[], ExecutionMode::Checked);
        std::thread::scope(|scope| {
            for t in 0..4 {
                let io = &io;
                scope.spawn(move || {
                    for i in 0..10_000 {
                        io.atomic_add_u32(0, (i * 7 + t) % 10, 1);
                    }
                });
            }
        });
        let counts: Vec<u32> = words.iter().map(|w| w.load(Ordering::Relaxed)).collect();
        assert_eq!(counts, [4_000; 10]);
    }
}
