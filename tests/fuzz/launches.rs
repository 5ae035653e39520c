//! The fuzzer's launches of library kernels: random views as bindings (an output never races an
//! input: they share no word unless they start together, as in place), random cube counts
//! (covering, short, long, 2-D, zero, or read from device memory), checked and unchecked
//! launches, and the model updated as the kernel computes. The library's inputs are read-only
//! bindings, so readers of one buffer on different streams run unordered; the model checks that
//! no write is missed.

use super::model::{Arithmetic, Elementwise, ModelBuffer, Stencil, View, Word};
use super::session::Fuzzer;
use gpuworld::kernel::Elem;
use gpuworld::{Backend, Bindings, CubeCount, HandleId, KernelDef, library};

/// Where a launch's cubes come from, and how many units they run.
struct Count {
    count: CubeCount,
    units: u64,
    text: String,
}

impl<B: Backend> Fuzzer<'_, B> {
    pub fn launch(&mut self) -> Result<(), String> {
        match self.rng.below(100) {
            0..20 => self.launch_fill(),
            20..42 => self.launch_copy(),
            42..64 => self.launch_add(),
            64..86 => self.launch_scale(),
            86..90 => self.launch_noop(),
            _ if self.arithmetic == Arithmetic::Host => self.launch_stencil(),
            _ => self.launch_scale(),
        }
    }

    /// A random live handle and an aligned view of it.
    fn random_binding(&mut self) -> (usize, View) {
        let index = self.pick_handle();
        let view = self.random_aligned_view(self.handles[index].capacity() as usize);
        (index, view)
    }

    /// An input for a kernel writing `out`: a random binding that does not race it (`disjoint`:
    /// that shares no word with it at all), else `out` itself.
    fn input_for(&mut self, out: (usize, View), disjoint: bool) -> (usize, View) {
        let out_id = self.handles[out.0].id();
        for _ in 0..4 {
            let (index, view) = self.random_binding();
            let clash = if disjoint {
                view.overlaps(&out.1)
            } else {
                view.races_with(&out.1)
            };
            if self.handles[index].id() != out_id || !clash {
                return (index, view);
            }
        }
        if disjoint {
            // A fresh small allocation never shares a word with `out`.
            let handle = self.stream().create(vec![0; 64]);
            self.log(format!("{} = create(64 zero bytes)", handle.id()));
            self.adopt(handle, ModelBuffer::with_bytes(&[0; 64]));
            return (self.handles.len() - 1, View::whole(64));
        }
        out
    }

    /// A random finite value for `fill` and `scale`: specials, simple values, any normal.
    fn random_scalar(&mut self) -> f32 {
        match self.rng.below(12) {
            0 => 0.0,
            1 => -0.0,
            2 => 1.0,
            3 => -1.0,
            4 => 0.5,
            5 => f32::INFINITY,
            6 => f32::MAX,
            _ => self.rng.normal_f32(),
        }
    }

    /// A cube count for a 1-D kernel over `words` output words; a count read from device memory
    /// is written first, to an allocation other than `outputs`.
    fn random_count(&mut self, words: usize, outputs: &[HandleId]) -> Result<Count, String> {
        let covering = words.div_ceil(library::LINEAR_CUBE as usize) as u32;
        let (x, y, z) = match self.rng.below(100) {
            0..70 => (covering, 1, 1),
            70..80 => (self.rng.between(1, u64::from(covering.max(1))) as u32, 1, 1),
            80..88 => (covering + self.rng.below(3) as u32, 1, 1),
            88..93 => {
                let x = self.rng.between(1, u64::from(covering.max(1))) as u32;
                let y = covering.div_ceil(x) + self.rng.below(2) as u32;
                if self.rng.chance(500) {
                    (x, y, 1)
                } else {
                    (x, 1, y)
                }
            }
            93..96 => match self.rng.below(3) {
                0 => (0, 1, 1),
                1 => (covering.max(1), 0, 1),
                _ => (covering.max(1), 1, 0),
            },
            _ => return self.count_from_memory(covering, outputs),
        };
        let units = u64::from(x) * u64::from(y) * u64::from(z) * u64::from(library::LINEAR_CUBE);
        Ok(Count {
            count: CubeCount::Static(x, y, z),
            units,
            text: format!("{x}x{y}x{z} cubes"),
        })
    }

    /// A `CubeCount::Dynamic` over 12 bytes just written to a live allocation other than
    /// `outputs`; a static covering count when there is none.
    fn count_from_memory(&mut self, covering: u32, outputs: &[HandleId]) -> Result<Count, String> {
        let candidates: Vec<usize> = (0..self.handles.len())
            .filter(|&i| {
                self.handles[i].capacity() >= 12 && !outputs.contains(&self.handles[i].id())
            })
            .collect();
        if candidates.is_empty() {
            let units = u64::from(covering) * u64::from(library::LINEAR_CUBE);
            return Ok(Count {
                count: CubeCount::new_1d(covering),
                units,
                text: format!("{covering} cubes"),
            });
        }
        let index = candidates[self.rng.index(candidates.len())];
        let capacity = self.handles[index].capacity() as usize;
        let start = self.rng.below((capacity - 12) as u64 / 4 + 1) as usize * 4;
        let end = self.rng.between(start as u64 + 12, capacity as u64) as usize;
        let view = View { start, end };
        let x = self.rng.below(u64::from(covering) + 2) as u32;
        let y = if self.rng.chance(200) { 2 } else { 1 };
        let bytes: Vec<u8> = [x, y, 1].iter().flat_map(|v| v.to_le_bytes()).collect();
        let name = self.name(index, view);
        let count_handle = self.view_handle(index, view);
        self.log(format!("write({name}, cube count [{x}, {y}, 1])"));
        self.stream()
            .write(&count_handle, &bytes)
            .map_err(|error| format!("writing a cube count failed: {error}"))?;
        self.model_mut(count_handle.id()).write(start, &bytes);
        Ok(Count {
            count: CubeCount::Dynamic(count_handle.binding()),
            units: u64::from(x) * u64::from(y) * u64::from(library::LINEAR_CUBE),
            text: format!("the cube count in {name}"),
        })
    }

    /// Launches `kernel` on the current stream, unchecked when `unchecked` (the caller knows
    /// every access is in bounds).
    fn submit(
        &mut self,
        kernel: &'static KernelDef,
        count: &Count,
        buffers: &[(usize, View)],
        scalars: &[u32],
        unchecked: bool,
        arguments: String,
    ) -> Result<(), String> {
        let names: Vec<String> = buffers.iter().map(|&(i, v)| self.name(i, v)).collect();
        let mode = if unchecked {
            "launch_unchecked"
        } else {
            "launch"
        };
        self.log(format!(
            "{mode} {}({}{arguments}) over {}",
            kernel.name,
            names.join(", "),
            count.text
        ));
        let mut bindings = Bindings::new();
        for &(index, view) in buffers {
            bindings = bindings.buffer(&self.view_handle(index, view));
        }
        for (param, &scalar) in kernel.signature.scalars.iter().zip(scalars) {
            bindings = match param.elem {
                Elem::F32 => bindings.scalar_f32(f32::from_bits(scalar)),
                Elem::U32 => bindings.scalar_u32(scalar),
                Elem::I32 => bindings.scalar_i32(scalar as i32),
            };
        }
        let client = self.stream();
        let result = if unchecked {
            // SAFETY: every input holds at least as many words as the launch writes, and the
            // 1-D kernels write no word past their output's end, so every access is in bounds.
            unsafe { client.launch_unchecked(kernel, count.count, bindings) }
        } else {
            client.launch(kernel, count.count, bindings)
        };
        self.tally.launches += 1;
        result.map_err(|error| format!("a valid launch failed: {error}"))
    }

    /// Submits an elementwise launch whose output is the last of `buffers` and whose one scalar,
    /// if any, is `scalar`; once submitted, stores `words` into that output's model.
    fn submit_and_store(
        &mut self,
        kernel: &'static KernelDef,
        count: &Count,
        buffers: &[(usize, View)],
        scalar: Option<f32>,
        unchecked: bool,
        words: &[Word],
    ) -> Result<(), String> {
        let out = *buffers.last().expect("an elementwise launch has an output");
        let (scalars, arguments) = match scalar {
            Some(value) => (vec![value.to_bits()], format!(", {value:?}")),
            None => (Vec::new(), String::new()),
        };
        self.submit(kernel, count, buffers, &scalars, unchecked, arguments)?;
        let out_id = self.handles[out.0].id();
        self.model_mut(out_id).store(out.1.start, words);
        Ok(())
    }

    fn launch_fill(&mut self) -> Result<(), String> {
        let out = self.random_binding();
        let out_id = self.handles[out.0].id();
        let value = self.random_scalar();
        let count = self.random_count(out.1.words(), &[out_id])?;
        let words = self.elementwise(out.1, &count).fill(value);
        let unchecked = self.rng.chance(100);
        self.submit_and_store(
            &library::FILL,
            &count,
            &[out],
            Some(value),
            unchecked,
            &words,
        )
    }

    fn launch_copy(&mut self) -> Result<(), String> {
        let dst = self.random_binding();
        let src = self.input_for(dst, false);
        let dst_id = self.handles[dst.0].id();
        let count = self.random_count(dst.1.words(), &[dst_id])?;
        let written = self.elementwise(dst.1, &count);
        let copied = self
            .model(src.0)
            .copied(src.1, dst.1.words(), written.written());
        let unchecked = self.rng.chance(100) && src.1.words() >= written.written();
        self.submit(
            &library::COPY,
            &count,
            &[src, dst],
            &[],
            unchecked,
            String::new(),
        )?;
        self.model_mut(dst_id).store_copied(dst.1.start, copied);
        Ok(())
    }

    fn launch_add(&mut self) -> Result<(), String> {
        let out = self.random_binding();
        let a = self.input_for(out, false);
        let b = self.input_for(out, false);
        let out_id = self.handles[out.0].id();
        let count = self.random_count(out.1.words(), &[out_id])?;
        let kernel = self.elementwise(out.1, &count);
        let words = kernel.add(&self.model(a.0).words(a.1), &self.model(b.0).words(b.1));
        let n = kernel.written();
        let unchecked = self.rng.chance(100) && a.1.words() >= n && b.1.words() >= n;
        self.submit_and_store(&library::ADD, &count, &[a, b, out], None, unchecked, &words)
    }

    fn launch_scale(&mut self) -> Result<(), String> {
        let out = self.random_binding();
        let x = self.input_for(out, false);
        let out_id = self.handles[out.0].id();
        let factor = self.random_scalar();
        let count = self.random_count(out.1.words(), &[out_id])?;
        let kernel = self.elementwise(out.1, &count);
        let words = kernel.scale(&self.model(x.0).words(x.1), factor);
        let unchecked = self.rng.chance(100) && x.1.words() >= kernel.written();
        self.submit_and_store(
            &library::SCALE,
            &count,
            &[x, out],
            Some(factor),
            unchecked,
            &words,
        )
    }

    fn launch_noop(&mut self) -> Result<(), String> {
        let cubes = self.rng.below(3) as u32;
        let count = Count {
            count: CubeCount::new_1d(cubes),
            units: u64::from(cubes),
            text: format!("{cubes} cubes"),
        };
        self.submit(&library::NOOP, &count, &[], &[], false, String::new())
    }

    /// The heat stencil from `u` into `out`, which share no word (a unit reads its neighbours).
    fn launch_stencil(&mut self) -> Result<(), String> {
        let out = self.random_binding();
        let u = self.input_for(out, true);
        let out_id = self.handles[out.0].id();
        let width = self.rng.between(1, 48) as u32;
        let height = self.rng.between(1, 48) as u32;
        let alpha = self.rng.normal_f32();
        let tile = library::STENCIL_TILE;
        let (mut tiles_x, mut tiles_y) = (width.div_ceil(tile), height.div_ceil(tile));
        if self.rng.chance(200) {
            tiles_x = self.rng.below(u64::from(tiles_x) + 1) as u32;
            tiles_y = self.rng.below(u64::from(tiles_y) + 1) as u32;
        }
        let stencil = Stencil {
            width: width as usize,
            height: height as usize,
            alpha,
            tiles: (tiles_x as usize, tiles_y as usize),
        };
        let written = stencil.apply(&self.model(u.0).words(u.1), out.1.words());
        let count = Count {
            count: CubeCount::new_2d(tiles_x, tiles_y),
            units: 0,
            text: format!("{tiles_x}x{tiles_y} tiles"),
        };
        let arguments = format!(", {width}, {height}, {alpha:?}");
        let scalars = [width, height, alpha.to_bits()];
        self.submit(
            &library::STENCIL,
            &count,
            &[u, out],
            &scalars,
            false,
            arguments,
        )?;
        let model = self.model_mut(out_id);
        for (i, word) in written {
            model.store(out.1.start + 4 * i, &[word]);
        }
        Ok(())
    }

    fn elementwise(&self, out: View, count: &Count) -> Elementwise {
        Elementwise {
            arithmetic: self.arithmetic,
            out_words: out.words(),
            units: count.units,
        }
    }
}
