//! CUDA C of the matmul tilings (`gpuworld_hal::library::matmul`) that stay hand-written
//! because the `#[kernel]`'s took over 1.1x their time on the H100 and H200 hosts
//! (`benches/kernels.rs`, 2026-12-06): the 4×4 tiling (1.51–1.57x: the generated code's 32-bit
//! indices cost an address computation per load, where these 64-bit ones fold into offsets)
//! and the 16×16 shared tiles (1.32–1.48x: the generated code checks every shared access).
//! `c = a · b`, elements outside the matrices read as zero and are never written; each output's
//! products added in `k` order (NVRTC runs with `--fmad=false`), as on the CPU.

use gpuworld_hal::kernel::CudaSource;

/// A 4×4 block of outputs per unit, 64×64 per cube.
pub(super) const FOUR_BY_FOUR: CudaSource = CudaSource(
    r#"
extern "C" __global__ void matmul_4x4(GW_PARAMS) {
    GW_FOR_EACH_CUBE {
        const unsigned long long row0 = GW_CUBE_Y * 64ull + threadIdx.y;
        const unsigned long long col0 = GW_CUBE_X * 64ull + threadIdx.x;
        float acc[4][4] = {{0.0f}};
        for (unsigned long long kk = 0; kk < k; ++kk) {
            float av[4], bv[4];
            for (int r = 0; r < 4; ++r) {
                const unsigned long long row = row0 + r * 16ull, col = col0 + r * 16ull;
                const unsigned long long ia = row * k + kk, ib = kk * n + col;
                av[r] = row < m && GW_IN_BOUNDS(ia, a_len) ? a[ia] : 0.0f;
                bv[r] = col < n && GW_IN_BOUNDS(ib, b_len) ? b[ib] : 0.0f;
            }
            for (int r = 0; r < 4; ++r)
                for (int q = 0; q < 4; ++q) acc[r][q] += av[r] * bv[q];
        }
        for (int r = 0; r < 4; ++r)
            for (int q = 0; q < 4; ++q) {
                const unsigned long long row = row0 + r * 16ull, col = col0 + q * 16ull;
                const unsigned long long ic = row * n + col;
                if (row < m && col < n && GW_IN_BOUNDS(ic, c_len)) c[ic] = acc[r][q];
            }
    }
}
"#,
);

/// One output per unit, `a` and `b` staged through 16×16 tiles in shared memory.
pub(super) const TILED16: CudaSource = CudaSource(
    r#"
extern "C" __global__ void matmul_tiled16(GW_PARAMS) {
    __shared__ float tile_a[16][16];
    __shared__ float tile_b[16][16];
    GW_FOR_EACH_CUBE {
        const unsigned long long row = GW_CUBE_Y * 16ull + threadIdx.y;
        const unsigned long long col = GW_CUBE_X * 16ull + threadIdx.x;
        float acc = 0.0f;
        for (unsigned long long t = 0; t < ((unsigned long long)k + 15) / 16; ++t) {
            const unsigned long long ka = t * 16 + threadIdx.x, kb = t * 16 + threadIdx.y;
            const unsigned long long ia = row * k + ka, ib = kb * n + col;
            tile_a[threadIdx.y][threadIdx.x] = row < m && ka < k && GW_IN_BOUNDS(ia, a_len) ? a[ia] : 0.0f;
            tile_b[threadIdx.y][threadIdx.x] = kb < k && col < n && GW_IN_BOUNDS(ib, b_len) ? b[ib] : 0.0f;
            __syncthreads();
            for (int kk = 0; kk < 16; ++kk) acc += tile_a[threadIdx.y][kk] * tile_b[kk][threadIdx.x];
            __syncthreads();
        }
        const unsigned long long ic = row * n + col;
        if (row < m && col < n && GW_IN_BOUNDS(ic, c_len)) c[ic] = acc;
    }
}
"#,
);
