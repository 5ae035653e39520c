//! The boids of `examples/boids` — kernels and the host code that launches them each tick —
//! shared with `tests/boids.rs`. Every kernel is written with `#[gpuworld::kernel]` alone.
//!
//! A tick:
//! 1. `clear` zeroes the per-cell counters;
//! 2. `assign` gives each boid the index of its cell (`cells`) and counts the boids of each cell
//!    with `atomic_add` (a histogram: its final counts are deterministic);
//! 3. `scan_blocks` / `add_offsets`: an exclusive prefix sum of the counts (`starts`), 256 cells
//!    per cube in shared memory with barriers, then the same over the cubes' sums, level by level
//!    up to one cube, then each level's offsets added back down: the same tree of additions on
//!    every backend;
//! 4. `scatter` puts each boid's index in its cell's range through an atomic counter per cell —
//!    an order within the cell that depends on which unit ran first — and `order` makes it
//!    deterministic: each boid counts the members of its cell with a smaller index (its rank)
//!    and stores itself at `starts[cell] + rank`, so each cell's range holds its boids in
//!    ascending index order on every backend, every run (a stable counting sort);
//! 5. `steer` sums separation, alignment and cohesion over the boids in the 3×3 cells around
//!    each boid, in that order, integrates, and wraps at the borders (a torus).
//!
//! The world is `side × side` cells of size 1 (the perception radius), so the neighbours within
//! the radius are in the 3×3 cells around a boid's own.

#![allow(dead_code)]

use gpuworld::{Backend, Bindings, ComputeClient, CubeCount, Handle, KernelDef};

pub use flock::Boid;

#[gpuworld::kernels]
pub mod flock {
    /// One boid, as the host and the kernels see it.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
    pub struct Boid {
        pub x: f32,
        pub y: f32,
        pub vx: f32,
        pub vy: f32,
    }

    /// Units per cube of every kernel; also the block of the prefix sum.
    pub const CUBE: u32 = 256;
    /// Squared perception radius (the radius is the cell size, 1).
    pub const RADIUS2: f32 = 1.0;
    /// Squared separation radius.
    pub const SEPARATION2: f32 = 0.16;
    /// Weights of the three rules.
    pub const SEPARATION: f32 = 24.0;
    pub const ALIGNMENT: f32 = 0.6;
    pub const COHESION: f32 = 0.5;
    /// Speed bounds, cells per second.
    pub const MIN_SPEED: f32 = 0.5;
    pub const MAX_SPEED: f32 = 2.0;

    /// The cell of a position in a `side × side` world of cells of size 1.
    #[gpuworld::func]
    pub fn cell_of(x: f32, y: f32, side: u32) -> u32 {
        let cx = (x as u32).min(side - 1);
        let cy = (y as u32).min(side - 1);
        cy * side + cx
    }

    /// `d` wrapped into `[-width / 2, width / 2]` (the shorter way round the torus).
    #[gpuworld::func]
    pub fn wrap_delta(d: f32, width: f32) -> f32 {
        let half = width * 0.5;
        if d > half {
            d - width
        } else {
            if d < -half { d + width } else { d }
        }
    }

    /// A coordinate moved back into `[0, width)`.
    #[gpuworld::func]
    pub fn wrap(p: f32, width: f32) -> f32 {
        let q = if p < 0.0 { p + width } else { p };
        if q >= width { q - width } else { q }
    }

    /// Zeroes the per-cell counters.
    #[gpuworld::kernel(cube_dim = 256)]
    pub fn clear(#[write_only] counts: &mut [u32], #[write_only] fill: &mut [u32]) {
        let i = global_index();
        if i < counts.len() {
            counts[i] = 0;
            fill[i] = 0;
        }
    }

    /// Each boid's cell, and the number of boids in each cell.
    #[gpuworld::kernel(cube_dim = 256)]
    pub fn assign(
        boids: &[Boid],
        #[write_only] cells: &mut [u32],
        #[atomic] counts: &mut [u32],
        side: u32,
    ) {
        let i = global_index();
        if i < boids.len() {
            let c = cell_of(boids[i].x, boids[i].y, side);
            cells[i] = c;
            counts.atomic_add(c, 1);
        }
    }

    /// The exclusive prefix sum of each cube's 256 inputs (Hillis–Steele in shared memory), and
    /// each cube's total in `sums[cube()]`.
    #[gpuworld::kernel(cube_dim = 256)]
    pub fn scan_blocks(
        input: &[u32],
        #[write_only] output: &mut [u32],
        #[write_only] sums: &mut [u32],
    ) {
        let tile = shared::<u32, CUBE>();
        let i = global_index();
        let own = if i < input.len() { input[i] } else { 0 };
        tile[unit()] = own;
        sync_cube();
        for step in 0..8 {
            let offset = 1 << step;
            let before = if unit() >= offset {
                tile[unit() - offset]
            } else {
                0
            };
            sync_cube();
            tile[unit()] += before;
            sync_cube();
        }
        if i < output.len() {
            output[i] = tile[unit()] - own;
        }
        if unit() == CUBE - 1 {
            sums[cube()] = tile[CUBE - 1];
        }
    }

    /// Adds to each element the scanned sum of the cubes before its own.
    #[gpuworld::kernel(cube_dim = 256)]
    pub fn add_offsets(data: &mut [u32], offsets: &[u32]) {
        let i = global_index();
        if i < data.len() {
            data[i] += offsets[cube()];
        }
    }

    /// Each boid's index somewhere in its cell's range: the order within a cell is the order in
    /// which units took the cell's counter, which differs between runs and backends.
    #[gpuworld::kernel(cube_dim = 256)]
    pub fn scatter(
        cells: &[u32],
        starts: &[u32],
        #[atomic] fill: &mut [u32],
        #[atomic] unordered: &mut [u32],
    ) {
        let i = global_index();
        if i < cells.len() {
            let c = cells[i];
            let slot = fill.atomic_add(c, 1);
            let at = starts[c] + slot;
            unordered.atomic_exchange(at, i);
        }
    }

    /// Each boid's index at `starts[cell] + rank`, its rank the number of boids of its cell with
    /// a smaller index: each cell's range in ascending index order, whatever `scatter` did.
    /// Every element of `sorted` is stored by exactly one unit, so its final value is
    /// deterministic (an atomic buffer only because the index is loaded, not derived from the
    /// unit's position, which a plain store may not be).
    #[gpuworld::kernel(cube_dim = 256)]
    pub fn order(
        cells: &[u32],
        starts: &[u32],
        counts: &[u32],
        unordered: &[u32],
        #[atomic] sorted: &mut [u32],
    ) {
        let i = global_index();
        if i < cells.len() {
            let c = cells[i];
            let start = starts[c];
            let count = counts[c];
            let mut rank = 0;
            for k in 0..count {
                if unordered[start + k] < i {
                    rank += 1;
                }
            }
            sorted.atomic_exchange(start + rank, i);
        }
    }

    /// One step of each boid from its neighbours within the perception radius, found in the 3×3
    /// cells around its own (in cell order, each cell's boids in index order), then integrated
    /// over `dt` and wrapped around the torus.
    #[gpuworld::kernel(cube_dim = 256)]
    pub fn steer(
        boids: &[Boid],
        #[write_only] next: &mut [Boid],
        sorted: &[u32],
        starts: &[u32],
        counts: &[u32],
        side: u32,
        dt: f32,
    ) {
        let i = global_index();
        if i < boids.len() {
            let me = boids[i];
            let width = side as f32;
            let c = cell_of(me.x, me.y, side);
            let cx = c % side;
            let cy = c / side;
            let mut separation = vec2(0.0, 0.0);
            let mut heading = vec2(0.0, 0.0);
            let mut centre = vec2(0.0, 0.0);
            let mut seen = 0;
            for dy in 0..3 {
                let ny = (cy + side + dy - 1) % side;
                for dx in 0..3 {
                    let nx = (cx + side + dx - 1) % side;
                    let n = ny * side + nx;
                    let start = starts[n];
                    let count = counts[n];
                    for k in 0..count {
                        let j = sorted[start + k];
                        if j != i {
                            let other = boids[j];
                            let d = vec2(
                                wrap_delta(other.x - me.x, width),
                                wrap_delta(other.y - me.y, width),
                            );
                            let d2 = dot(d, d);
                            if d2 < RADIUS2 {
                                seen += 1;
                                heading += vec2(other.vx, other.vy);
                                centre += d;
                                if d2 < SEPARATION2 {
                                    separation += d * (d2 - SEPARATION2);
                                }
                            }
                        }
                    }
                }
            }
            let mut v = vec2(me.vx, me.vy);
            if seen > 0 {
                let inverse = 1.0 / (seen as f32);
                let align = heading * inverse - v;
                let cohere = centre * inverse;
                let push = separation * SEPARATION + align * ALIGNMENT + cohere * COHESION;
                v += push * dt;
            }
            let speed = length(v);
            if speed > MAX_SPEED {
                v = v * (MAX_SPEED / speed);
            }
            if speed < MIN_SPEED && speed > 0.0 {
                v = v * (MIN_SPEED / speed);
            }
            next[i] = Boid {
                x: wrap(me.x + v.x * dt, width),
                y: wrap(me.y + v.y * dt, width),
                vx: v.x,
                vy: v.y,
            };
        }
    }
}

/// Seconds per tick.
pub const DT: f32 = 0.05;

/// Cells per side for `boids` boids: about 4 boids per cell, at least 3 cells.
pub fn side_for(boids: u32) -> u32 {
    let cells = (boids as f64 / 4.0).max(9.0);
    (cells.sqrt().ceil() as u32).max(3)
}

/// A deterministic start: positions spread over the world, velocities of speed up to 1.
pub fn initial(count: u32, side: u32) -> Vec<Boid> {
    let width = side as f32;
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        // splitmix64
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 40) as f32 / (1u64 << 24) as f32
    };
    (0..count)
        .map(|_| Boid {
            x: next() * width,
            y: next() * width,
            vx: next() * 2.0 - 1.0,
            vy: next() * 2.0 - 1.0,
        })
        .collect()
}

/// 64-bit FNV-1a of `bytes`.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The kernels a tick launches, by role: the flock's own (`Kernels::FLOCK`), or another
/// implementation of the same algorithm with the same signatures (`benches/kernels.rs` times a
/// hand-written CUDA C one against them).
#[derive(Clone, Copy, Debug)]
pub struct Kernels {
    pub clear: &'static KernelDef,
    pub assign: &'static KernelDef,
    pub scan_blocks: &'static KernelDef,
    pub add_offsets: &'static KernelDef,
    pub scatter: &'static KernelDef,
    pub order: &'static KernelDef,
    pub steer: &'static KernelDef,
}

impl Kernels {
    /// The `#[gpuworld::kernel]`s of [`flock`].
    pub const FLOCK: Kernels = Kernels {
        clear: &flock::clear,
        assign: &flock::assign,
        scan_blocks: &flock::scan_blocks,
        add_offsets: &flock::add_offsets,
        scatter: &flock::scatter,
        order: &flock::order,
        steer: &flock::steer,
    };
}

/// One level of the prefix sum: `size` inputs in `input`, their block-wise exclusive sums in
/// `output`.
struct Level {
    size: u32,
    input: Handle,
    output: Handle,
}

/// The flock's buffers on one device.
pub struct Flock {
    pub count: u32,
    pub side: u32,
    boids: [Handle; 2],
    current: usize,
    cells: Handle,
    counts: Handle,
    fill: Handle,
    unordered: Handle,
    sorted: Handle,
    levels: Vec<Level>,
    /// The total of the last level (one element).
    total: Handle,
}

/// The grid a tick built: per boid its cell, per cell its start and count, and the boids'
/// indices in cell order.
#[derive(Debug, PartialEq)]
pub struct Grid {
    pub cells: Vec<u32>,
    pub starts: Vec<u32>,
    pub counts: Vec<u32>,
    pub sorted: Vec<u32>,
}

impl Flock {
    /// `count` boids in their deterministic start on `client`'s device.
    pub fn new<B: Backend>(client: &ComputeClient<B>, count: u32) -> Flock {
        let side = side_for(count);
        let start = initial(count, side);
        let bytes = 16 * count as u64;
        let words = |n: u32| client.empty(4 * n.max(1) as u64);
        let cells_total = side * side;
        let counts = words(cells_total);
        let mut levels = Vec::new();
        let mut size = cells_total;
        let mut input = counts.clone();
        loop {
            let blocks = size.div_ceil(flock::CUBE);
            let sums = words(blocks);
            levels.push(Level {
                size,
                input,
                output: words(size),
            });
            input = sums;
            if blocks == 1 {
                break;
            }
            size = blocks;
        }
        Flock {
            count,
            side,
            boids: [
                client.create_from_slice(bytemuck::cast_slice(&start)),
                client.empty(bytes.max(16)),
            ],
            current: 0,
            cells: words(count),
            counts,
            fill: words(cells_total),
            unordered: words(count),
            sorted: words(count),
            levels,
            total: input,
        }
    }

    /// The handle of the boids' current state.
    pub fn state(&self) -> &Handle {
        &self.boids[self.current]
    }

    /// Enqueues one tick: the grid, then the step.
    pub fn tick<B: Backend>(&mut self, client: &ComputeClient<B>) -> gpuworld::Result<()> {
        self.tick_with(client, &Kernels::FLOCK)
    }

    /// Enqueues one tick with `kernels`.
    pub fn tick_with<B: Backend>(
        &mut self,
        client: &ComputeClient<B>,
        kernels: &Kernels,
    ) -> gpuworld::Result<()> {
        let per_boid = CubeCount::covering(self.count as u64, flock::CUBE);
        let cells_total = self.side * self.side;
        let per_cell = CubeCount::covering(cells_total as u64, flock::CUBE);
        let boids = &self.boids[self.current];
        client.launch(
            kernels.clear,
            per_cell,
            Bindings::new().buffer(&self.counts).buffer(&self.fill),
        )?;
        client.launch(
            kernels.assign,
            per_boid,
            Bindings::new()
                .buffer(boids)
                .buffer(&self.cells)
                .buffer(&self.counts)
                .scalar_u32(self.side),
        )?;
        // Up the levels: each level's block sums are the next level's input.
        for (k, level) in self.levels.iter().enumerate() {
            let sums = self
                .levels
                .get(k + 1)
                .map_or(&self.total, |next| &next.input);
            client.launch(
                kernels.scan_blocks,
                CubeCount::covering(level.size as u64, flock::CUBE),
                Bindings::new()
                    .buffer(&level.input)
                    .buffer(&level.output)
                    .buffer(sums),
            )?;
        }
        // Down: each level's output gets the scanned sums of the blocks before its own.
        for k in (0..self.levels.len().saturating_sub(1)).rev() {
            let level = &self.levels[k];
            client.launch(
                kernels.add_offsets,
                CubeCount::covering(level.size as u64, flock::CUBE),
                Bindings::new()
                    .buffer(&level.output)
                    .buffer(&self.levels[k + 1].output),
            )?;
        }
        let starts = &self.levels[0].output;
        client.launch(
            kernels.scatter,
            per_boid,
            Bindings::new()
                .buffer(&self.cells)
                .buffer(starts)
                .buffer(&self.fill)
                .buffer(&self.unordered),
        )?;
        client.launch(
            kernels.order,
            per_boid,
            Bindings::new()
                .buffer(&self.cells)
                .buffer(starts)
                .buffer(&self.counts)
                .buffer(&self.unordered)
                .buffer(&self.sorted),
        )?;
        client.launch(
            kernels.steer,
            per_boid,
            Bindings::new()
                .buffer(boids)
                .buffer(&self.boids[1 - self.current])
                .buffer(&self.sorted)
                .buffer(starts)
                .buffer(&self.counts)
                .scalar_u32(self.side)
                .scalar_f32(DT),
        )?;
        self.current = 1 - self.current;
        Ok(())
    }

    /// The boids' current state, read back.
    pub fn boids<B: Backend>(&self, client: &ComputeClient<B>) -> gpuworld::Result<Vec<Boid>> {
        client.read_one_as(self.state())
    }

    /// The FNV-1a hash of the boids' current state (their bytes, little-endian words).
    pub fn hash<B: Backend>(&self, client: &ComputeClient<B>) -> gpuworld::Result<u64> {
        let words: Vec<u32> = client.read_one_as(self.state())?;
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        Ok(fnv1a(&bytes))
    }

    /// The grid the last tick built.
    pub fn grid<B: Backend>(&self, client: &ComputeClient<B>) -> gpuworld::Result<Grid> {
        Ok(Grid {
            cells: client.read_one_as(&self.cells)?,
            starts: client.read_one_as(&self.levels[0].output)?,
            counts: client.read_one_as(&self.counts)?,
            sorted: client.read_one_as(&self.sorted)?,
        })
    }
}

/// The grid of `boids` computed on the host: what a tick from this state must build.
pub fn host_grid(boids: &[Boid], side: u32) -> Grid {
    let cells: Vec<u32> = boids
        .iter()
        .map(|b| flock::cell_of(b.x, b.y, side))
        .collect();
    let mut counts = vec![0u32; (side * side) as usize];
    for &c in &cells {
        counts[c as usize] += 1;
    }
    let mut starts = Vec::with_capacity(counts.len());
    let mut sum = 0;
    for &n in &counts {
        starts.push(sum);
        sum += n;
    }
    let mut sorted: Vec<u32> = (0..boids.len() as u32).collect();
    sorted.sort_by_key(|&i| (cells[i as usize], i));
    Grid {
        cells,
        starts,
        counts,
        sorted,
    }
}
