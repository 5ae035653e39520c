//! The fuzzer's host model of device memory: what every live allocation must hold, byte by byte,
//! and the library kernels applied to it as the device computes them (`f32`, same operations in
//! the same order, out-of-range loads reading zero). A byte is known exactly, unknown (never
//! written, or computed where a GPU may round differently), or part of a word known only to be a
//! NaN: IEEE 754 leaves an arithmetic NaN's payload open, and GPUs canonicalize it.

/// What the model knows about one byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ByteState {
    /// The byte's value is known.
    Exact,
    /// Anything may be there.
    Unknown,
    /// The byte belongs to a whole word that holds some NaN.
    InNan,
}

/// Whose floating-point arithmetic the device follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arithmetic {
    /// Rust's `f32` (the cpu and sim backends): every result is reproduced bit for bit.
    Host,
    /// A GPU's: results next to the subnormal range may round differently before they are
    /// flushed (whether tininess is seen before rounding), so such words become unknown; and a multiply feeding an add may be fused into one rounding, so the
    /// stencil, which does both, is not run (the conformance suite checks it with a tolerance).
    Gpu,
}

/// The byte range `start..end` of an allocation that a binding names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct View {
    pub start: usize,
    pub end: usize,
}

impl View {
    /// The whole of an allocation of `size` bytes.
    pub fn whole(size: usize) -> View {
        View {
            start: 0,
            end: size,
        }
    }

    pub fn len(&self) -> usize {
        self.end - self.start
    }

    /// The 32-bit words a kernel sees: a trailing partial word is not visible.
    pub fn words(&self) -> usize {
        self.len() / 4
    }

    /// Whether the words a kernel sees of the two views overlap.
    pub fn overlaps(&self, other: &View) -> bool {
        let ends = (
            self.start + 4 * self.words(),
            other.start + 4 * other.words(),
        );
        self.start < ends.1 && other.start < ends.0
    }

    /// Whether an elementwise kernel writing one view while reading the other races: their words
    /// overlap, unless both start together (then unit `i` reads and writes the same word, as an
    /// in-place `scale(x, x)` does).
    pub fn races_with(&self, other: &View) -> bool {
        self.start != other.start && self.overlaps(other)
    }
}

/// One 32-bit word as a kernel sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Word {
    Bits(u32),
    Nan,
    Unknown,
}

impl Word {
    fn f32(value: f32) -> Word {
        Word::Bits(value.to_bits())
    }
}

/// The expected contents of one allocation.
pub struct ModelBuffer {
    bytes: Vec<u8>,
    state: Vec<ByteState>,
}

impl ModelBuffer {
    /// An allocation created from `data`.
    pub fn with_bytes(data: &[u8]) -> ModelBuffer {
        ModelBuffer {
            bytes: data.to_vec(),
            state: vec![ByteState::Exact; data.len()],
        }
    }

    /// An allocation whose contents are undefined until written (`empty`).
    pub fn undefined(size: usize) -> ModelBuffer {
        ModelBuffer {
            bytes: vec![0; size],
            state: vec![ByteState::Unknown; size],
        }
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// A write of `data` at byte `at`.
    pub fn write(&mut self, at: usize, data: &[u8]) {
        let end = at + data.len();
        self.bytes[at..end].copy_from_slice(data);
        self.state[at..end].fill(ByteState::Exact);
        // The rest of a NaN word written in part is no longer known to be part of a NaN.
        for word in [at / 4, end.saturating_sub(1) / 4] {
            let range = 4 * word..(4 * word + 4).min(self.len());
            for state in &mut self.state[range] {
                if *state == ByteState::InNan {
                    *state = ByteState::Unknown;
                }
            }
        }
    }

    /// What a read of `view` must return.
    pub fn expected(&self, view: View) -> Expected {
        Expected {
            start: view.start,
            bytes: self.bytes[view.start..view.end].to_vec(),
            state: self.state[view.start..view.end].to_vec(),
        }
    }

    /// The visible words of `view` (whose start is a multiple of 4).
    pub fn words(&self, view: View) -> Vec<Word> {
        (0..view.words())
            .map(|i| self.word(view.start + 4 * i))
            .collect()
    }

    fn word(&self, at: usize) -> Word {
        let state = &self.state[at..at + 4];
        if state.iter().all(|s| *s == ByteState::Exact) {
            let bytes = [
                self.bytes[at],
                self.bytes[at + 1],
                self.bytes[at + 2],
                self.bytes[at + 3],
            ];
            Word::Bits(u32::from_le_bytes(bytes))
        } else if state.iter().all(|s| *s == ByteState::InNan) {
            Word::Nan
        } else {
            Word::Unknown
        }
    }

    /// Stores `words` from byte `start` (a multiple of 4) on.
    pub fn store(&mut self, start: usize, words: &[Word]) {
        for (i, word) in words.iter().enumerate() {
            let at = start + 4 * i;
            let (bytes, state) = match *word {
                Word::Bits(bits) => (bits, ByteState::Exact),
                Word::Nan => (f32::NAN.to_bits(), ByteState::InNan),
                Word::Unknown => (0, ByteState::Unknown),
            };
            self.bytes[at..at + 4].copy_from_slice(&bytes.to_le_bytes());
            self.state[at..at + 4].fill(state);
        }
    }

    /// The library's `copy`: the first `count` words of `dst` take `src`'s (zero past its end),
    /// byte for byte, since the kernel moves `u32`s.
    pub fn copied(&self, src: View, dst_words: usize, count: usize) -> (Vec<u8>, Vec<ByteState>) {
        let n = dst_words.min(count);
        let visible = 4 * src.words().min(n);
        let mut bytes = vec![0; 4 * n];
        let mut state = vec![ByteState::Exact; 4 * n];
        bytes[..visible].copy_from_slice(&self.bytes[src.start..src.start + visible]);
        state[..visible].copy_from_slice(&self.state[src.start..src.start + visible]);
        (bytes, state)
    }

    /// Stores what [`ModelBuffer::copied`] returned at byte `start`.
    pub fn store_copied(&mut self, start: usize, (bytes, state): (Vec<u8>, Vec<ByteState>)) {
        self.bytes[start..start + bytes.len()].copy_from_slice(&bytes);
        self.state[start..start + state.len()].copy_from_slice(&state);
    }
}

/// The library's 1-D `f32` kernels over `words` words of output, of which a launch of `units`
/// units writes the first `units`.
pub struct Elementwise {
    pub arithmetic: Arithmetic,
    pub out_words: usize,
    pub units: u64,
}

impl Elementwise {
    /// Words of output the launch writes.
    pub fn written(&self) -> usize {
        self.out_words
            .min(usize::try_from(self.units).unwrap_or(usize::MAX))
    }

    /// `fill`: every written word holds `value`.
    pub fn fill(&self, value: f32) -> Vec<Word> {
        vec![Word::f32(value); self.written()]
    }

    /// `add`: `out[i] = a[i] + b[i]`.
    pub fn add(&self, a: &[Word], b: &[Word]) -> Vec<Word> {
        (0..self.written())
            .map(|i| binary(self.arithmetic, load(a, i), load(b, i), |x, y| x + y))
            .collect()
    }

    /// `scale`: `out[i] = x[i] * factor`.
    pub fn scale(&self, x: &[Word], factor: f32) -> Vec<Word> {
        (0..self.written())
            .map(|i| binary(self.arithmetic, load(x, i), Word::f32(factor), |x, f| x * f))
            .collect()
    }
}

/// Element `i` as a checked launch loads it: zero past the end.
fn load(words: &[Word], i: usize) -> Word {
    words.get(i).copied().unwrap_or(Word::Bits(0))
}

/// `op(a, b)` in `f32`: a NaN operand gives a NaN whatever the other; an unknown one, an unknown.
fn binary(arithmetic: Arithmetic, a: Word, b: Word, op: impl Fn(f32, f32) -> f32) -> Word {
    match (a, b) {
        (Word::Nan, _) | (_, Word::Nan) => Word::Nan,
        (Word::Unknown, _) | (_, Word::Unknown) => Word::Unknown,
        (Word::Bits(a), Word::Bits(b)) => {
            let (a, b) = (f32::from_bits(a), f32::from_bits(b));
            // Every backend flushes a subnormal operand and result of `+ - * /` to a zero of its
            // sign (docs/kernels.md, the determinism contract).
            let result = flush(op(flush(a), flush(b)));
            let near_subnormal = |x: f32| x != 0.0 && x.abs() < 2.0 * f32::MIN_POSITIVE;
            if result.is_nan() {
                Word::Nan
            } else if arithmetic == Arithmetic::Gpu
                && (a.is_subnormal() || b.is_subnormal() || near_subnormal(result))
            {
                // Flush-to-zero decides, and whether tininess is seen before rounding.
                Word::Unknown
            } else {
                Word::f32(result)
            }
        }
    }
}

/// `x`, or a zero of its sign where `x` is subnormal, as a kernel's arithmetic sees it.
fn flush(x: f32) -> f32 {
    if x.is_subnormal() {
        f32::from_bits(x.to_bits() & 0x8000_0000)
    } else {
        x
    }
}

/// The library's `stencil2d` on a `width x height` grid (host arithmetic only), over the tiles
/// `0..tiles_x` by `0..tiles_y`: the words of `out` it writes, as `(index, word)`.
pub struct Stencil {
    pub width: usize,
    pub height: usize,
    pub alpha: f32,
    pub tiles: (usize, usize),
}

impl Stencil {
    pub fn apply(&self, u: &[Word], out_words: usize) -> Vec<(usize, Word)> {
        let tile = gpuworld::library::STENCIL_TILE as usize;
        let arithmetic = Arithmetic::Host;
        let add = |a, b| binary(arithmetic, a, b, |x, y| x + y);
        let sub = |a, b| binary(arithmetic, a, b, |x, y| x - y);
        let mul = |a, b| binary(arithmetic, a, b, |x, y| x * y);
        let mut written = Vec::new();
        for y in 0..(self.tiles.1 * tile).min(self.height) {
            for x in 0..(self.tiles.0 * tile).min(self.width) {
                let i = y * self.width + x;
                let center = load(u, i);
                let border = x == 0 || y == 0 || x + 1 == self.width || y + 1 == self.height;
                let value = if border {
                    center
                } else {
                    let sum = add(
                        add(add(load(u, i - 1), load(u, i + 1)), load(u, i - self.width)),
                        load(u, i + self.width),
                    );
                    let laplacian = sub(sum, mul(Word::f32(4.0), center));
                    add(center, mul(Word::f32(self.alpha), laplacian))
                };
                if i < out_words {
                    written.push((i, value));
                }
            }
        }
        written
    }
}

/// What a read must return: the model's bytes of a range, with what is known about each.
pub struct Expected {
    /// Where the range starts in its allocation (words are aligned to the allocation).
    start: usize,
    bytes: Vec<u8>,
    state: Vec<ByteState>,
}

impl Expected {
    /// Whether `got` is what the model allows: exact bytes equal, a whole NaN word a NaN, unknown
    /// bytes anything; otherwise a description of the first difference.
    pub fn check(&self, got: &[u8]) -> Result<(), String> {
        if got.len() != self.bytes.len() {
            return Err(format!(
                "read returned {} bytes, expected {}",
                got.len(),
                self.bytes.len()
            ));
        }
        if got == self.bytes.as_slice() {
            return Ok(());
        }
        let end = self.start + self.bytes.len();
        let mut wrong = Vec::new();
        for (j, state) in self.state.iter().enumerate() {
            let ok = match state {
                ByteState::Exact => got[j] == self.bytes[j],
                ByteState::Unknown => true,
                ByteState::InNan => {
                    let word = (self.start + j) / 4 * 4;
                    if word < self.start || word + 4 > end {
                        true
                    } else {
                        let at = word - self.start;
                        let bits = [got[at], got[at + 1], got[at + 2], got[at + 3]];
                        f32::from_le_bytes(bits).is_nan()
                    }
                }
            };
            if !ok {
                wrong.push(j);
            }
        }
        let Some(&first) = wrong.first() else {
            return Ok(());
        };
        let window = first.saturating_sub(4)..(first + 12).min(got.len());
        Err(format!(
            "{} of {} bytes differ; first at byte {} of the allocation\n  \
             got      {:02x?}\n  expected {:02x?}\n  known    {}",
            wrong.len(),
            got.len(),
            self.start + first,
            &got[window.clone()],
            &self.bytes[window.clone()],
            self.state[window]
                .iter()
                .map(|s| match s {
                    ByteState::Exact => " ==",
                    ByteState::Unknown => " ??",
                    ByteState::InNan => " NaN",
                })
                .collect::<String>(),
        ))
    }
}
