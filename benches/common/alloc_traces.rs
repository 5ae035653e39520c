//! Allocation traces of several shapes made from a seed (issue 25): training steps whose batch
//! size shifts, sizes spread log-uniformly over six orders of magnitude, a KV cache grown by
//! reallocation, game frames, and mixes of these on several streams. A trace is the same for the
//! same (seed, scale) on every platform (integer arithmetic only); `scale` divides every size, so
//! a device whose memory is host memory runs the same pattern smaller. The text form
//! ([`trace_text`]) is the one of `benches/data/training_trace.txt` with an optional stream,
//! replayed by `benches/alloc_traces_torch.py`. Included by `benches/alloc_traces.rs` and
//! `tests/alloc_traces.rs`.

#![allow(dead_code)] // each includer uses the parts it needs

use std::collections::HashMap;

/// One kibibyte.
pub const KIB: u64 = 1 << 10;
/// One mebibyte.
pub const MIB: u64 = 1 << 20;

/// Events a single-stream trace runs to; it stops at the first step, frame or decode step that
/// ends past it.
const EVENTS: usize = 20_000;

/// One step of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// Allocate `bytes` (at least 1) for buffer `id` on stream `stream`.
    Alloc { id: u32, bytes: u64, stream: u32 },
    /// Free buffer `id`, allocated earlier and not freed since.
    Free { id: u32 },
}

/// The kinds of trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// See [`training_shifting_batch`].
    TrainingShiftingBatch,
    /// See [`log_uniform`].
    LogUniform,
    /// See [`kv_cache`].
    KvCache,
    /// See [`game_frames`].
    GameFrames,
    /// See [`multi_stream`].
    MultiStream,
}

impl Shape {
    /// Every shape, in the order the bench reports them.
    pub const ALL: [Shape; 5] = [
        Shape::TrainingShiftingBatch,
        Shape::LogUniform,
        Shape::KvCache,
        Shape::GameFrames,
        Shape::MultiStream,
    ];

    /// The shape's name, as in its generator's and in `GPUWORLD_TRACES_SHAPES`.
    pub fn name(self) -> &'static str {
        match self {
            Shape::TrainingShiftingBatch => "training_shifting_batch",
            Shape::LogUniform => "log_uniform",
            Shape::KvCache => "kv_cache",
            Shape::GameFrames => "game_frames",
            Shape::MultiStream => "multi_stream",
        }
    }

    /// The shape named `name`.
    pub fn from_name(name: &str) -> Option<Shape> {
        Shape::ALL.into_iter().find(|shape| shape.name() == name)
    }

    /// This shape's trace for `seed`, every size divided by `scale`.
    pub fn generate(self, seed: u64, scale: u64) -> Trace {
        match self {
            Shape::TrainingShiftingBatch => training_shifting_batch(seed, scale),
            Shape::LogUniform => log_uniform(seed, scale),
            Shape::KvCache => kv_cache(seed, scale),
            Shape::GameFrames => game_frames(seed, scale),
            Shape::MultiStream => multi_stream(seed, scale),
        }
    }

    /// Mixed into the seed, so that one seed gives unrelated numbers to different shapes.
    fn salt(self) -> u64 {
        Shape::ALL
            .iter()
            .position(|&shape| shape == self)
            .unwrap_or(0) as u64
            + 1
    }
}

/// A generated trace and what it claims about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    /// What made it.
    pub shape: Shape,
    /// The seed it was made from.
    pub seed: u64,
    /// The divisor asked for (a mix divides its sizes further by its stream count).
    pub scale: u64,
    /// Streams its events name: 0 to `streams - 1`.
    pub streams: u32,
    /// The events, in order.
    pub events: Vec<Event>,
    /// The most bytes live at once: the floor an allocator's reserved memory is measured against.
    pub peak_live_bytes: u64,
    /// The most buffers live at once.
    pub peak_live_buffers: usize,
}

impl Trace {
    /// The largest single allocation.
    pub fn largest_alloc(&self) -> u64 {
        self.events
            .iter()
            .map(|event| match *event {
                Event::Alloc { bytes, .. } => bytes,
                Event::Free { .. } => 0,
            })
            .max()
            .unwrap_or(0)
    }

    /// The name of its dump file: `<shape>-seed<seed>-scale<scale>.trace`.
    pub fn file_name(&self) -> String {
        format!(
            "{}-seed{}-scale{}.trace",
            self.shape.name(),
            self.seed,
            self.scale
        )
    }
}

/// Training steps of a transformer-like model (12 layers, hidden size 768, 12 heads, sequence
/// 256): weights and two optimizer moments allocated once, then per step a forward pass keeping
/// activations layer by layer, a backward pass allocating gradients and freeing activations in
/// reverse, and an optimizer pass freeing the gradients. The batch size is drawn again (2 to 16)
/// every 2 to 4 steps, so every activation size shifts.
pub fn training_shifting_batch(seed: u64, scale: u64) -> Trace {
    single_stream(Shape::TrainingShiftingBatch, training_steps, seed, scale)
}

/// Sizes log-uniform from 256 B to 512 MiB (every octave equally likely, uniform within it),
/// each event the allocation of one or the free of a random live buffer, drawn so that about 140
/// buffers stay live (about 150 at the peak): the trace of 20,000 events.
pub fn log_uniform(seed: u64, scale: u64) -> Trace {
    single_stream(Shape::LogUniform, log_uniform_events, seed, scale)
}

/// LLM decoding with 4 sequences in flight: each sequence's KV cache (128 KiB a token) grows by
/// reallocation, 1.25x to 2x at a time (allocate the larger, free the old), while every decode
/// step allocates and frees small per-token buffers; a finished sequence frees its cache and a
/// new one starts with a prompt of 64 to 1,024 tokens.
pub fn kv_cache(seed: u64, scale: u64) -> Trace {
    single_stream(Shape::KvCache, kv_cache_events, seed, scale)
}

/// A game: 200 assets loaded once (4 KiB to 16 MiB), then per frame 30 to 80 transient buffers
/// of six sizes, some freed within the frame and the rest at its end, and in one frame of 40 a
/// large buffer (64 to 512 MiB: a streamed level chunk, a capture) that lives 1 to 120 frames.
pub fn game_frames(seed: u64, scale: u64) -> Trace {
    single_stream(Shape::GameFrames, game_frame_events, seed, scale)
}

/// Two to four streams, each running one of the shapes above (different ones, from a random
/// first) with a seed of its own, their events interleaved at random with each stream's order
/// kept. Each stream runs its share of the events and its sizes are further divided by the number
/// of streams, so that the mix is about as long and as large as one shape.
pub fn multi_stream(seed: u64, scale: u64) -> Trace {
    let mut rng = Rng::new(seed, Shape::MultiStream.salt());
    let streams = rng.between(2, 4) as u32;
    let first = rng.below(SINGLE_STREAM.len() as u64) as usize;
    let parts: Vec<Vec<Event>> = (0..streams)
        .map(|stream| {
            let (shape, events) = SINGLE_STREAM[(first + stream as usize) % SINGLE_STREAM.len()];
            // Unscaled here: the merge divides once, by scale and stream count together.
            let mut part = Builder::new(1, stream);
            let mut part_rng = Rng::new(rng.next(), shape.salt());
            events(&mut part_rng, &mut part, EVENTS / streams as usize);
            part.events
        })
        .collect();

    let mut trace = Builder::new(scale.max(1) * u64::from(streams), 0);
    let mut next = vec![0; parts.len()];
    let mut left: u64 = parts.iter().map(|part| part.len() as u64).sum();
    // Each part numbers its buffers from 1; the merge numbers them again.
    let mut ids: HashMap<(usize, u32), u32> = HashMap::new();
    while left > 0 {
        // A stream drawn with odds in proportion to its events left: a uniform interleaving.
        let mut draw = rng.below(left);
        let mut part = 0;
        while draw >= (parts[part].len() - next[part]) as u64 {
            draw -= (parts[part].len() - next[part]) as u64;
            part += 1;
        }
        let event = parts[part][next[part]];
        next[part] += 1;
        left -= 1;
        match event {
            Event::Alloc { id, bytes, stream } => {
                let merged = trace.alloc_on(stream, bytes);
                ids.insert((part, id), merged);
            }
            Event::Free { id } => match ids.remove(&(part, id)) {
                Some(merged) => trace.free(merged),
                None => panic!("stream {part}'s trace frees {id}, which is not live"),
            },
        }
    }
    trace.finish(Shape::MultiStream, seed, scale.max(1), streams)
}

/// The trace as text: `#` lines naming it, then one line per event: `a <id> <bytes>` allocates
/// on stream 0, `a <id> <bytes> <stream>` on another, `f <id>` frees.
pub fn trace_text(trace: &Trace) -> String {
    let mut text = format!(
        "# gpuworld allocation trace {}, seed {}, scale {}: {} events, streams {}, peak live {} bytes in {} buffers.\n\
         # `a <id> <bytes> [<stream>]` allocates (on stream 0 without one), `f <id>` frees. Made by benches/common/alloc_traces.rs.\n",
        trace.shape.name(),
        trace.seed,
        trace.scale,
        trace.events.len(),
        trace.streams,
        trace.peak_live_bytes,
        trace.peak_live_buffers,
    );
    for event in &trace.events {
        let line = match *event {
            Event::Alloc {
                id,
                bytes,
                stream: 0,
            } => format!("a {id} {bytes}\n"),
            Event::Alloc { id, bytes, stream } => format!("a {id} {bytes} {stream}\n"),
            Event::Free { id } => format!("f {id}\n"),
        };
        text.push_str(&line);
    }
    text
}

/// The events of [`trace_text`]'s text; `Err` names the first line that is not an event.
pub fn parse_trace_text(text: &str) -> Result<Vec<Event>, String> {
    text.lines()
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| parse_event(line).ok_or_else(|| format!("not a trace event: `{line}`")))
        .collect()
}

fn parse_event(line: &str) -> Option<Event> {
    let fields: Vec<&str> = line.split(' ').collect();
    let number = |i: usize| fields.get(i)?.parse::<u64>().ok();
    let id = u32::try_from(number(1)?).ok()?;
    match (fields[0], fields.len()) {
        ("a", 3) => Some(Event::Alloc {
            id,
            bytes: number(2)?,
            stream: 0,
        }),
        ("a", 4) => Some(Event::Alloc {
            id,
            bytes: number(2)?,
            stream: u32::try_from(number(3)?).ok()?,
        }),
        ("f", 2) => Some(Event::Free { id }),
        _ => None,
    }
}

/// A single-stream shape: emits events into the builder until it holds about `events`.
type Emit = fn(&mut Rng, &mut Builder, usize);

/// The shapes that run on one stream, which [`multi_stream`] mixes.
const SINGLE_STREAM: [(Shape, Emit); 4] = [
    (Shape::TrainingShiftingBatch, training_steps),
    (Shape::LogUniform, log_uniform_events),
    (Shape::KvCache, kv_cache_events),
    (Shape::GameFrames, game_frame_events),
];

fn single_stream(shape: Shape, events: Emit, seed: u64, scale: u64) -> Trace {
    let mut trace = Builder::new(scale, 0);
    events(&mut Rng::new(seed, shape.salt()), &mut trace, EVENTS);
    trace.finish(shape, seed, scale.max(1), 1)
}

fn training_steps(rng: &mut Rng, trace: &mut Builder, events: usize) {
    const LAYERS: usize = 12;
    const HIDDEN: u64 = 768;
    const HEADS: u64 = 12;
    const SEQUENCE: u64 = 256;
    let f32s = |n: u64| 4 * n;
    // Per layer: q, k, v, o (H x H), MLP up and down (H x 4H), two norms (H).
    let layer_weights: Vec<u64> = [HIDDEN * HIDDEN; 4]
        .into_iter()
        .chain([HIDDEN * 4 * HIDDEN; 2])
        .chain([HIDDEN; 2])
        .map(f32s)
        .collect();
    // Each weight with Adam's two moments.
    for _ in 0..LAYERS {
        for &bytes in &layer_weights {
            for _ in 0..3 {
                trace.alloc(bytes);
            }
        }
    }
    let (mut batch, mut steps_left) = (0, 0);
    while trace.len() < events {
        if steps_left == 0 {
            batch = rng.between(2, 16);
            steps_left = rng.between(2, 4);
        }
        steps_left -= 1;
        let tokens = batch * SEQUENCE;
        let act = f32s(tokens * HIDDEN);
        let wide = f32s(tokens * 4 * HIDDEN);
        let scores = f32s(batch * HEADS * SEQUENCE * SEQUENCE);
        // Forward: each layer keeps what backward needs.
        let mut saved = Vec::with_capacity(LAYERS);
        for _ in 0..LAYERS {
            let norm = trace.alloc(act);
            let qkv = trace.alloc(3 * act);
            let logits = trace.alloc(scores);
            temporaries(rng, trace);
            let probabilities = trace.alloc(scores);
            trace.free(logits);
            let attention = trace.alloc(act);
            let hidden = trace.alloc(wide);
            let activated = trace.alloc(wide);
            temporaries(rng, trace);
            let residual = trace.alloc(act);
            saved.push([
                norm,
                qkv,
                probabilities,
                attention,
                hidden,
                activated,
                residual,
            ]);
        }
        let loss = trace.alloc(f32s(tokens));
        // Backward: a gradient per weight, kept for the optimizer; activations freed in reverse.
        let mut gradients = Vec::with_capacity(LAYERS * layer_weights.len());
        let mut upstream = trace.alloc(act);
        for kept in saved.into_iter().rev() {
            let wide_gradient = trace.alloc(wide);
            for &bytes in &layer_weights {
                gradients.push(trace.alloc(bytes));
            }
            let scores_gradient = trace.alloc(scores);
            temporaries(rng, trace);
            trace.free(scores_gradient);
            trace.free(wide_gradient);
            let next = trace.alloc(act);
            trace.free(upstream);
            upstream = next;
            for id in kept.into_iter().rev() {
                trace.free(id);
            }
        }
        trace.free(upstream);
        trace.free(loss);
        // Optimizer: a temporary or two per gradient, then the gradient goes.
        for id in gradients {
            temporaries(rng, trace);
            trace.free(id);
        }
    }
}

/// One to three small temporaries (reductions, masks: 256 B to 256 KiB), freed at once.
fn temporaries(rng: &mut Rng, trace: &mut Builder) {
    let count = rng.between(1, 3);
    let ids: Vec<u32> = (0..count)
        .map(|_| trace.alloc(rng.between(256, 256 * KIB)))
        .collect();
    for id in ids {
        trace.free(id);
    }
}

fn log_uniform_events(rng: &mut Rng, trace: &mut Builder, events: usize) {
    const TARGET_LIVE: i64 = 140;
    // The odds of an allocation fall from 1 to 0 as the live count goes from TARGET_LIVE - PULL
    // to TARGET_LIVE + PULL: the count wanders a few buffers around the target.
    const PULL: i64 = 32;
    let mut live: Vec<u32> = Vec::new();
    while trace.len() < events {
        let alloc_per_mille = (500 + (TARGET_LIVE - live.len() as i64) * 500 / PULL).clamp(0, 1000);
        if live.is_empty() || rng.chance(alloc_per_mille as u64) {
            live.push(trace.alloc(rng.octave_uniform(256, 512 * MIB)));
        } else {
            let at = rng.below(live.len() as u64) as usize;
            trace.free(live.swap_remove(at));
        }
    }
}

/// One sequence being decoded.
struct Sequence {
    cache: u32,
    capacity: u64,
    tokens: u64,
    end: u64,
}

fn kv_cache_events(rng: &mut Rng, trace: &mut Builder, events: usize) {
    const SEQUENCES: u64 = 4;
    // 16 layers x (k, v) x 2,048 x fp16.
    const KV_PER_TOKEN: u64 = 128 * KIB;
    const HIDDEN: u64 = 2048;
    const HEADS: u64 = 16;
    const VOCABULARY: u64 = 32_000;
    fn start(rng: &mut Rng, trace: &mut Builder) -> Sequence {
        let prompt = rng.between(64, 1024);
        // Prefill: the prompt's activations, gone once the cache holds its keys and values.
        let activations = trace.alloc(prompt * HIDDEN * 4);
        let capacity = prompt.next_multiple_of(64);
        let cache = trace.alloc(capacity * KV_PER_TOKEN);
        trace.free(activations);
        Sequence {
            cache,
            capacity,
            tokens: prompt,
            end: prompt + rng.between(64, 1536),
        }
    }
    let mut sequences: Vec<Sequence> = (0..SEQUENCES).map(|_| start(rng, trace)).collect();
    while trace.len() < events {
        let context = sequences.iter().map(|s| s.tokens).max().unwrap_or(1);
        let hidden = trace.alloc(SEQUENCES * HIDDEN * 2);
        let scores = trace.alloc(SEQUENCES * HEADS * context * 4);
        let logits = trace.alloc(SEQUENCES * VOCABULARY * 4);
        trace.free(scores);
        let probabilities = trace.alloc(SEQUENCES * VOCABULARY * 4);
        trace.free(logits);
        let sampled = trace.alloc(SEQUENCES * 8);
        trace.free(probabilities);
        trace.free(hidden);
        trace.free(sampled);
        for sequence in &mut sequences {
            sequence.tokens += 1;
            if sequence.tokens > sequence.capacity {
                let capacity = (sequence.capacity * rng.between(5, 8) / 4).next_multiple_of(64);
                let grown = trace.alloc(capacity * KV_PER_TOKEN);
                trace.free(sequence.cache);
                sequence.cache = grown;
                sequence.capacity = capacity;
            }
            if sequence.tokens == sequence.end {
                trace.free(sequence.cache);
                *sequence = start(rng, trace);
            }
        }
    }
}

fn game_frame_events(rng: &mut Rng, trace: &mut Builder, events: usize) {
    // Uniforms, small and large staging, a 1 MiB texture, a full- and a half-resolution target.
    const TRANSIENT_SIZES: [u64; 6] = [256, 4 * KIB, 64 * KIB, MIB, 1920 * 1080 * 4, 960 * 540 * 4];
    for _ in 0..200 {
        trace.alloc(rng.octave_uniform(4 * KIB, 16 * MIB));
    }
    // Large buffers and the last frame each lives in.
    let mut large: Vec<(u32, u64)> = Vec::new();
    let mut frame = 0;
    while trace.len() < events {
        frame += 1;
        let mut transients = Vec::new();
        for _ in 0..rng.between(30, 80) {
            let size = TRANSIENT_SIZES[rng.below(TRANSIENT_SIZES.len() as u64) as usize];
            transients.push(trace.alloc(size));
            if rng.chance(300) {
                let at = rng.below(transients.len() as u64) as usize;
                trace.free(transients.remove(at));
            }
        }
        if rng.chance(25) {
            let id = trace.alloc(rng.octave_uniform(64 * MIB, 512 * MIB));
            large.push((id, frame + rng.between(1, 120)));
        }
        for id in transients {
            trace.free(id);
        }
        large.retain(|&(id, last)| {
            let ends = last <= frame;
            if ends {
                trace.free(id);
            }
            !ends
        });
    }
}

/// Emits events, dividing sizes by the scale and keeping the live set, so that every trace knows
/// its own peak.
struct Builder {
    scale: u64,
    stream: u32,
    events: Vec<Event>,
    next_id: u32,
    live: HashMap<u32, u64>,
    live_bytes: u64,
    peak_live_bytes: u64,
    peak_live_buffers: usize,
}

impl Builder {
    fn new(scale: u64, stream: u32) -> Builder {
        Builder {
            scale: scale.max(1),
            stream,
            events: Vec::new(),
            next_id: 0,
            live: HashMap::new(),
            live_bytes: 0,
            peak_live_bytes: 0,
            peak_live_buffers: 0,
        }
    }

    fn len(&self) -> usize {
        self.events.len()
    }

    /// Allocates `bytes` (before scaling) on the builder's stream; returns the buffer's id.
    fn alloc(&mut self, bytes: u64) -> u32 {
        self.alloc_on(self.stream, bytes)
    }

    fn alloc_on(&mut self, stream: u32, bytes: u64) -> u32 {
        let bytes = (bytes / self.scale).max(1);
        self.next_id += 1;
        let id = self.next_id;
        self.events.push(Event::Alloc { id, bytes, stream });
        self.live.insert(id, bytes);
        self.live_bytes += bytes;
        self.peak_live_bytes = self.peak_live_bytes.max(self.live_bytes);
        self.peak_live_buffers = self.peak_live_buffers.max(self.live.len());
        id
    }

    fn free(&mut self, id: u32) {
        let Some(bytes) = self.live.remove(&id) else {
            panic!("the generator frees {id}, which is not live");
        };
        self.live_bytes -= bytes;
        self.events.push(Event::Free { id });
    }

    fn finish(self, shape: Shape, seed: u64, scale: u64, streams: u32) -> Trace {
        Trace {
            shape,
            seed,
            scale,
            streams,
            events: self.events,
            peak_live_bytes: self.peak_live_bytes,
            peak_live_buffers: self.peak_live_buffers,
        }
    }
}

/// splitmix64: a few lines, and the same numbers on every platform.
struct Rng(u64);

impl Rng {
    fn new(seed: u64, salt: u64) -> Rng {
        Rng(seed ^ salt.wrapping_mul(0xd1b5_4a32_d192_ed03))
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` ≥ 1; the modulo's bias is below 2^-40 for the n used here).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Uniform in `low..=high`.
    fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.below(high - low + 1)
    }

    /// True with odds `per_mille` in 1,000.
    fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }

    /// Log-uniform in `low..high` (powers of two) by octave: every octave equally likely, uniform
    /// within it.
    fn octave_uniform(&mut self, low: u64, high: u64) -> u64 {
        let octaves = u64::from(high.trailing_zeros() - low.trailing_zeros());
        let base = low << self.below(octaves);
        base + self.below(base)
    }
}
