//! The boids of `examples/boids` written by hand in CUDA C: the same algorithm as the
//! `#[gpuworld::kernel]`s of `examples/boids/world.rs` (`flock`) — a grid built each tick with an
//! atomic histogram, a prefix sum and a stable counting sort, then the 3×3-cell neighbour
//! search — with the same signatures, so `Flock::tick_with` launches them through gpuworld's
//! user-kernel path (checked launches, as the generated ones). Written as a CUDA programmer
//! would: boids loaded as `float4`, a warp-shuffle scan, plain `float` arithmetic (NVRTC runs
//! with `--fmad=false`, as for every source), `sqrtf` and `/`. `benches/kernels.rs` times it
//! against the generated code: the generated code's target is at most 1.2x this.

#![allow(dead_code)]

use gpuworld::kernel::{CudaSource, KernelDef, Param, Signature};

#[path = "../../examples/boids/world.rs"]
pub mod world;

/// The helpers every kernel below is compiled with (each source is its own module).
macro_rules! helpers {
    () => {
        r#"
#define GW_LOAD(buffer, index) (GW_IN_BOUNDS((index), buffer##_len) ? (buffer)[(index)] : 0u)
__device__ __forceinline__ unsigned int cell_of(float x, float y, unsigned int side) {
    const unsigned int cx = min((unsigned int)x, side - 1u);
    const unsigned int cy = min((unsigned int)y, side - 1u);
    return cy * side + cx;
}
__device__ __forceinline__ float wrap_delta(float d, float width) {
    const float half = width * 0.5f;
    return d > half ? d - width : (d < -half ? d + width : d);
}
__device__ __forceinline__ float wrap(float p, float width) {
    const float q = p < 0.0f ? p + width : p;
    return q >= width ? q - width : q;
}
"#
    };
}

/// A hand-written boids kernel: `$name`, its buffers and scalars (as `flock`'s) and CUDA C.
macro_rules! hand_kernel {
    ($static:ident, $name:literal, [$($buffer:expr),*], [$($scalar:expr),*], $body:literal) => {
        pub static $static: KernelDef = KernelDef {
            id: concat!("bench.hand_boids.", $name),
            name: $name,
            signature: Signature {
                buffers: &[$($buffer),*],
                scalars: &[$($scalar),*],
                cube_dim: [256, 1, 1],
            },
            sources: &[&CudaSource(concat!(helpers!(), $body))],
        };
    };
}

hand_kernel!(
    CLEAR,
    "clear",
    [
        Param::u32("counts").write_only(),
        Param::u32("fill").write_only()
    ],
    [],
    r#"
extern "C" __global__ void clear(GW_PARAMS) {
    GW_FOR_EACH_CUBE {
        const unsigned long long i = GW_FIRST_UNIT_1D + GW_UNIT;
        if (i < counts_len) {
            counts[i] = 0u;
            if (GW_IN_BOUNDS(i, fill_len)) fill[i] = 0u;
        }
    }
}
"#
);

hand_kernel!(
    ASSIGN,
    "assign",
    [
        Param::u32("boids").read_only(),
        Param::u32("cells").write_only(),
        Param::u32("counts").atomic()
    ],
    [Param::u32("side")],
    r#"
extern "C" __global__ void assign(GW_PARAMS) {
    const float4* b = reinterpret_cast<const float4*>(boids);
    const unsigned long long count = boids_len / 4u;
    GW_FOR_EACH_CUBE {
        const unsigned long long i = GW_FIRST_UNIT_1D + GW_UNIT;
        if (i < count) {
            const float4 me = b[i];
            const unsigned int c = cell_of(me.x, me.y, side);
            if (GW_IN_BOUNDS(i, cells_len)) cells[i] = c;
            if (GW_IN_BOUNDS(c, counts_len)) atomicAdd(&counts[c], 1u);
        }
    }
}
"#
);

hand_kernel!(
    SCAN_BLOCKS,
    "scan_blocks",
    [
        Param::u32("input").read_only(),
        Param::u32("output").write_only(),
        Param::u32("sums").write_only()
    ],
    [],
    r#"
extern "C" __global__ void scan_blocks(GW_PARAMS) {
    __shared__ unsigned int warp_sums[8];
    const unsigned int unit = threadIdx.x, lane = unit & 31u, warp = unit >> 5;
    GW_FOR_EACH_CUBE {
        const unsigned long long i = GW_FIRST_UNIT_1D + unit;
        const unsigned int own = i < input_len ? input[i] : 0u;
        unsigned int v = own;
        for (unsigned int d = 1u; d < 32u; d <<= 1) {
            const unsigned int t = __shfl_up_sync(0xffffffffu, v, d);
            if (lane >= d) v += t;
        }
        if (lane == 31u) warp_sums[warp] = v;
        __syncthreads();
        if (warp == 0u) {
            unsigned int s = lane < 8u ? warp_sums[lane] : 0u;
            for (unsigned int d = 1u; d < 8u; d <<= 1) {
                const unsigned int t = __shfl_up_sync(0xffffffffu, s, d);
                if (lane >= d) s += t;
            }
            if (lane < 8u) warp_sums[lane] = s;
        }
        __syncthreads();
        const unsigned int inclusive = v + (warp > 0u ? warp_sums[warp - 1u] : 0u);
        if (i < output_len) output[i] = inclusive - own;
        if (unit == 255u && GW_IN_BOUNDS(GW_CUBE_INDEX, sums_len)) sums[GW_CUBE_INDEX] = inclusive;
        __syncthreads();
    }
}
"#
);

hand_kernel!(
    ADD_OFFSETS,
    "add_offsets",
    [Param::u32("data"), Param::u32("offsets").read_only()],
    [],
    r#"
extern "C" __global__ void add_offsets(GW_PARAMS) {
    GW_FOR_EACH_CUBE {
        const unsigned long long i = GW_FIRST_UNIT_1D + GW_UNIT;
        if (i < data_len) data[i] += GW_LOAD(offsets, GW_CUBE_INDEX);
    }
}
"#
);

hand_kernel!(
    SCATTER,
    "scatter",
    [
        Param::u32("cells").read_only(),
        Param::u32("starts").read_only(),
        Param::u32("fill").atomic(),
        Param::u32("unordered")
    ],
    [],
    r#"
extern "C" __global__ void scatter(GW_PARAMS) {
    GW_FOR_EACH_CUBE {
        const unsigned long long i = GW_FIRST_UNIT_1D + GW_UNIT;
        if (i < cells_len) {
            const unsigned int c = cells[i];
            if (GW_IN_BOUNDS(c, fill_len)) {
                const unsigned int at = GW_LOAD(starts, c) + atomicAdd(&fill[c], 1u);
                if (GW_IN_BOUNDS(at, unordered_len)) unordered[at] = (unsigned int)i;
            }
        }
    }
}
"#
);

hand_kernel!(
    ORDER,
    "order",
    [
        Param::u32("cells").read_only(),
        Param::u32("starts").read_only(),
        Param::u32("counts").read_only(),
        Param::u32("unordered").read_only(),
        Param::u32("sorted")
    ],
    [],
    r#"
extern "C" __global__ void order(GW_PARAMS) {
    GW_FOR_EACH_CUBE {
        const unsigned long long i = GW_FIRST_UNIT_1D + GW_UNIT;
        if (i < cells_len) {
            const unsigned int c = cells[i];
            const unsigned int start = GW_LOAD(starts, c), count = GW_LOAD(counts, c);
            unsigned int rank = 0u;
            for (unsigned int k = 0u; k < count; ++k)
                if (GW_LOAD(unordered, start + k) < i) ++rank;
            if (GW_IN_BOUNDS(start + rank, sorted_len)) sorted[start + rank] = (unsigned int)i;
        }
    }
}
"#
);

hand_kernel!(
    STEER,
    "steer",
    [
        Param::u32("boids").read_only(),
        Param::u32("next").write_only(),
        Param::u32("sorted").read_only(),
        Param::u32("starts").read_only(),
        Param::u32("counts").read_only()
    ],
    [Param::u32("side"), Param::f32("dt")],
    r#"
extern "C" __global__ void steer(GW_PARAMS) {
    const float4* b = reinterpret_cast<const float4*>(boids);
    float4* out = reinterpret_cast<float4*>(next);
    const unsigned int count = boids_len / 4u;
    GW_FOR_EACH_CUBE {
        const unsigned long long i = GW_FIRST_UNIT_1D + GW_UNIT;
        if (i >= count) continue;
        const float4 me = b[i];
        const float width = (float)side;
        const unsigned int c = cell_of(me.x, me.y, side);
        const unsigned int cx = c % side, cy = c / side;
        float sx = 0.0f, sy = 0.0f, hx = 0.0f, hy = 0.0f, px = 0.0f, py = 0.0f;
        unsigned int seen = 0u;
        for (unsigned int dy = 0u; dy < 3u; ++dy) {
            const unsigned int ny = (cy + side + dy - 1u) % side;
            for (unsigned int dx = 0u; dx < 3u; ++dx) {
                const unsigned int n = ny * side + (cx + side + dx - 1u) % side;
                const unsigned int start = GW_LOAD(starts, n), members = GW_LOAD(counts, n);
                for (unsigned int k = 0u; k < members; ++k) {
                    const unsigned int j = GW_LOAD(sorted, start + k);
                    if (j == i || !GW_IN_BOUNDS(j, count)) continue;
                    const float4 other = b[j];
                    const float ddx = wrap_delta(other.x - me.x, width);
                    const float ddy = wrap_delta(other.y - me.y, width);
                    const float d2 = ddx * ddx + ddy * ddy;
                    if (d2 < 1.0f) {
                        ++seen;
                        hx += other.z;
                        hy += other.w;
                        px += ddx;
                        py += ddy;
                        if (d2 < 0.16f) {
                            sx += ddx * (d2 - 0.16f);
                            sy += ddy * (d2 - 0.16f);
                        }
                    }
                }
            }
        }
        float vx = me.z, vy = me.w;
        if (seen > 0u) {
            const float inverse = 1.0f / (float)seen;
            const float ax = hx * inverse - vx, ay = hy * inverse - vy;
            vx += (sx * 24.0f + ax * 0.6f + px * inverse * 0.5f) * dt;
            vy += (sy * 24.0f + ay * 0.6f + py * inverse * 0.5f) * dt;
        }
        const float speed = sqrtf(vx * vx + vy * vy);
        if (speed > 2.0f) { vx *= 2.0f / speed; vy *= 2.0f / speed; }
        if (speed < 0.5f && speed > 0.0f) { vx *= 0.5f / speed; vy *= 0.5f / speed; }
        if (GW_IN_BOUNDS(4u * i + 3u, next_len))
            out[i] = make_float4(wrap(me.x + vx * dt, width), wrap(me.y + vy * dt, width), vx, vy);
    }
}
"#
);

/// The hand-written kernels, by role, for `Flock::tick_with`.
pub const KERNELS: world::Kernels = world::Kernels {
    clear: &CLEAR,
    assign: &ASSIGN,
    scan_blocks: &SCAN_BLOCKS,
    add_offsets: &ADD_OFFSETS,
    scatter: &SCATTER,
    order: &ORDER,
    steer: &STEER,
};
