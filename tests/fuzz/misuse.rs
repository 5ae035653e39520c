//! The fuzzer's misuse of the client. Calls refused at once with the documented typed error:
//! out-of-range views, writes larger than their range, wrong buffer or scalar counts, bindings
//! not on a 4-byte boundary, a dynamic cube count under 12 bytes. And uses of released handles:
//! a read replies `ReleasedHandle`; a launch or write becomes the stream's fault, reported by the
//! next read or sync on that stream (any id sharing its slot), and only once. None changes the
//! model: later reads prove the data intact and the runtime usable.

use super::model::View;
use super::session::{Fuzzer, STREAMS};
use crate::common::Pending;
use gpuworld::error::{BindingError, LaunchError};
use gpuworld::{Backend, Binding, Bindings, CubeCount, Error, HandleId, KernelDef, library};

/// Every kernel of the library, for launches with the wrong arity.
const KERNELS: [&KernelDef; 6] = [
    &library::NOOP,
    &library::FILL,
    &library::COPY,
    &library::ADD,
    &library::SCALE,
    &library::STENCIL,
];

/// Fails unless `got` is exactly the `expected` error.
fn expect_error<T>(call: &str, got: gpuworld::Result<T>, expected: &Error) -> Result<(), String> {
    match got {
        Err(error) if error == *expected => Ok(()),
        Err(error) => Err(format!("{call}: expected {expected:?}, got {error:?}")),
        Ok(_) => Err(format!("{call}: expected {expected:?}, got success")),
    }
}

impl<B: Backend> Fuzzer<'_, B> {
    pub fn misuse_rejected(&mut self) -> Result<(), String> {
        self.tally.refusals += 1;
        match self.rng.below(5) {
            0 => self.out_of_range(),
            1 => self.write_too_large(),
            2 => self.wrong_arity(),
            3 => self.misaligned_binding(),
            _ => self.short_dynamic_count(),
        }
    }

    /// Valid aligned bindings of random live handles, as a kernel's other arguments.
    fn valid_bindings(&mut self, count: usize) -> Vec<Binding> {
        (0..count)
            .map(|_| {
                let index = self.pick_handle();
                let view = self.random_aligned_view(self.handles[index].capacity() as usize);
                self.view_handle(index, view).binding()
            })
            .collect()
    }

    /// Launches `kernel` with `buffers` and `scalars` zero scalars on the current stream.
    fn launch_with(
        &self,
        kernel: &'static KernelDef,
        buffers: &[Binding],
        scalars: usize,
        count: CubeCount,
    ) -> gpuworld::Result<()> {
        let mut bindings = Bindings::new();
        for &binding in buffers {
            bindings = bindings.buffer(binding);
        }
        for i in 0..scalars {
            // Of the declared type: the misuse is elsewhere.
            bindings = match kernel.signature.scalars.get(i).map(|param| param.elem) {
                Some(gpuworld::kernel::Elem::F32) => bindings.scalar_f32(0.0),
                _ => bindings.scalar_u32(0),
            };
        }
        self.stream().launch(kernel, count, bindings)
    }

    /// A view whose offsets leave no range, used by every kind of call.
    fn out_of_range(&mut self) -> Result<(), String> {
        let index = self.pick_handle();
        let handle = self.handles[index].clone();
        let size = handle.capacity();
        let (start, end_offset) = if self.rng.chance(300) {
            (self.rng.below(size + 1), size + 1 + self.rng.below(8))
        } else {
            let end_offset = self.rng.below(size + 1);
            (size - end_offset + 1 + self.rng.below(8), end_offset)
        };
        let bad = handle.clone().offset_start(start).offset_end(end_offset);
        let expected = Error::Binding(BindingError::OutOfRange {
            handle: handle.id(),
            start,
            end: size.saturating_sub(end_offset),
            size,
        });
        let what = format!(
            "{} offset_start({start}) offset_end({end_offset})",
            handle.id()
        );
        let client = self.stream().clone();
        match self.rng.below(6) {
            0 => {
                self.log(format!("read_one({what}): refused"));
                expect_error("read_one", client.read_one(&bad), &expected)
            }
            1 => {
                self.log(format!("read([valid, {what}]): refused"));
                let mut sources = self.valid_bindings(1);
                sources.push(bad.binding());
                expect_error("read", client.read(&sources), &expected)
            }
            2 => {
                self.log(format!("read_async({what}): refused"));
                let mut future = Pending::new(client.read_async(&[bad.binding()]));
                match future.poll() {
                    Some(result) => expect_error("read_async", result, &expected),
                    None => Err("read_async of an out-of-range view did not fail at once".into()),
                }
            }
            3 => {
                self.log(format!("write({what}, 0 bytes): refused"));
                expect_error("write", client.write(&bad, &[]), &expected)
            }
            4 => {
                self.log(format!("write_bytes({what}, 1 byte): refused"));
                expect_error("write_bytes", client.write_bytes(&bad, vec![7]), &expected)
            }
            _ => {
                self.log(format!("launch copy(valid, {what}): refused"));
                let mut buffers = self.valid_bindings(1);
                buffers.push(bad.binding());
                let count = CubeCount::new_1d(1);
                let launched = self.launch_with(&library::COPY, &buffers, 0, count);
                expect_error("launch", launched, &expected)
            }
        }
    }

    fn write_too_large(&mut self) -> Result<(), String> {
        let index = self.pick_handle();
        let view = self.random_view(self.handles[index].capacity() as usize);
        let len = view.len() + 1 + self.rng.below(64) as usize;
        let dst = self.view_handle(index, view);
        let expected = Error::Binding(BindingError::WriteTooLarge {
            handle: dst.id(),
            len: len as u64,
            capacity: view.len() as u64,
        });
        let name = self.name(index, view);
        let data = self.rng.bytes(len);
        if self.rng.chance(500) {
            self.log(format!("write({name}, {len} bytes): refused"));
            expect_error("write", self.stream().write(&dst, &data), &expected)
        } else {
            self.log(format!("write_bytes({name}, {len} bytes): refused"));
            expect_error(
                "write_bytes",
                self.stream().write_bytes(&dst, data),
                &expected,
            )
        }
    }

    fn wrong_arity(&mut self) -> Result<(), String> {
        let kernel = KERNELS[self.rng.index(KERNELS.len())];
        let (buffers, scalars, expected) = if self.rng.chance(500) {
            let mut buffers = self.rng.below(5) as usize;
            if buffers == kernel.signature.buffers.len() {
                buffers += 1;
            }
            let expected = Error::Launch(LaunchError::BindingCount {
                kernel: kernel.name,
                what: "buffer binding",
                expected: kernel.signature.buffers.len(),
                got: buffers,
            });
            (buffers, kernel.signature.scalars.len(), expected)
        } else {
            let mut scalars = self.rng.below(5) as usize;
            if scalars == kernel.signature.scalars.len() {
                scalars += 1;
            }
            let expected = Error::Launch(LaunchError::BindingCount {
                kernel: kernel.name,
                what: "scalar",
                expected: kernel.signature.scalars.len(),
                got: scalars,
            });
            (kernel.signature.buffers.len(), scalars, expected)
        };
        self.log(format!(
            "launch {} with {buffers} buffers and {scalars} scalars: refused",
            kernel.name
        ));
        let bindings = self.valid_bindings(buffers);
        let launched = self.launch_with(kernel, &bindings, scalars, CubeCount::new_1d(1));
        expect_error("launch", launched, &expected)
    }

    fn misaligned_binding(&mut self) -> Result<(), String> {
        let Some(index) = self.handle_of_at_least(4) else {
            return self.out_of_range();
        };
        let kernel = KERNELS[1 + self.rng.index(KERNELS.len() - 1)];
        let position = self.rng.index(kernel.signature.buffers.len());
        let size = self.handles[index].capacity();
        let start = self.rng.below(size / 4) * 4 + self.rng.between(1, 3);
        let end = self.rng.between(start, size);
        let view = View {
            start: start as usize,
            end: end as usize,
        };
        let mut buffers = self.valid_bindings(kernel.signature.buffers.len());
        buffers[position] = self.view_handle(index, view).binding();
        let expected = Error::Launch(LaunchError::MisalignedBinding {
            kernel: kernel.name,
            index: position,
            offset: start,
        });
        self.log(format!(
            "launch {} with binding {position} = {}: refused",
            kernel.name,
            self.name(index, view)
        ));
        let launched = self.launch_with(
            kernel,
            &buffers,
            kernel.signature.scalars.len(),
            CubeCount::new_1d(1),
        );
        expect_error("launch", launched, &expected)
    }

    fn short_dynamic_count(&mut self) -> Result<(), String> {
        let index = self.pick_handle();
        let size = self.handles[index].capacity();
        let start = self.rng.below(size + 1);
        let end = self.rng.between(start, (start + 11).min(size));
        let view = View {
            start: start as usize,
            end: end as usize,
        };
        let count = self.view_handle(index, view).binding();
        let expected = Error::Binding(BindingError::OutOfRange {
            handle: count.handle(),
            start,
            end: start + 12,
            size,
        });
        self.log(format!(
            "launch fill over the cube count in {}: refused",
            self.name(index, view)
        ));
        let buffers = self.valid_bindings(1);
        let launched = self.launch_with(&library::FILL, &buffers, 1, CubeCount::Dynamic(count));
        expect_error("launch", launched, &expected)
    }

    fn handle_of_at_least(&mut self, size: u64) -> Option<usize> {
        let candidates: Vec<usize> = (0..self.handles.len())
            .filter(|&i| self.handles[i].capacity() >= size)
            .collect();
        (!candidates.is_empty()).then(|| candidates[self.rng.index(candidates.len())])
    }

    /// A use of a released handle's binding.
    pub fn misuse_released(&mut self) -> Result<(), String> {
        let Some(stale) = self.pick_released() else {
            return self.misuse_rejected();
        };
        let expected = Error::Binding(BindingError::ReleasedHandle {
            handle: stale.handle(),
        });
        let client = self.stream().clone();
        match self.rng.below(4) {
            0 => {
                self.tally.refusals += 1;
                self.log(format!("read_one(released {}): refused", stale.handle()));
                expect_error("read_one", client.read_one(stale), &expected)
            }
            1 => {
                self.tally.refusals += 1;
                self.log(format!(
                    "read([valid, released {}]): refused",
                    stale.handle()
                ));
                let mut sources = self.valid_bindings(1);
                sources.push(stale);
                expect_error("read", client.read(&sources), &expected)
            }
            _ => self.fault_and_report(stale.handle(), stale),
        }
    }

    /// A launch or write with a released handle: accepted, then reported as the stream's fault
    /// by its next read or sync, once.
    fn fault_and_report(&mut self, handle: HandleId, stale: Binding) -> Result<(), String> {
        let slot = self.slot(self.current);
        self.settle_reads_on(slot)?;
        let client = self.stream().clone();
        let accepted = if self.rng.chance(500) {
            let len = self.rng.below(stale.size() + 1) as usize;
            self.log(format!("write(released {handle}, {len} bytes): a fault"));
            client.write(stale, &self.rng.bytes(len))
        } else {
            let mut buffers = self.valid_bindings(2);
            let position = self.rng.index(3);
            // Whole words, as a launch needs: the released handle is the misuse.
            let words = stale
                .slice(0..stale.size() / 4 * 4)
                .map_err(|error| format!("a binding's own words: {error}"))?;
            buffers.insert(position, words);
            self.log(format!(
                "launch add with released {handle} as binding {position}: a fault"
            ));
            self.launch_with(&library::ADD, &buffers, 0, CubeCount::new_1d(1))
        };
        accepted.map_err(|error| format!("the call itself must succeed, got {error}"))?;
        self.tally.faults += 1;
        let expected = Error::Binding(BindingError::ReleasedHandle { handle });
        let aliases: Vec<usize> = (0..STREAMS.len())
            .filter(|&i| self.slot(i) == slot)
            .collect();
        let reporter = self.streams[aliases[self.rng.index(aliases.len())]].clone();
        let by = reporter.stream_id();
        if self.rng.chance(500) {
            let sources = self.valid_bindings(1);
            self.log(format!("read on {by}: reports the fault"));
            expect_error("read after a fault", reporter.read(&sources), &expected)?;
        } else {
            self.log(format!("sync on {by}: reports the fault"));
            expect_error("sync after a fault", reporter.sync(), &expected)?;
        }
        if self.rng.chance(500) {
            self.log("sync: the fault was reported once");
            self.stream()
                .sync()
                .map_err(|error| format!("a fault was reported twice: {error}"))?;
        }
        Ok(())
    }
}
