//! Second versions of the matmul ports that stayed over 1.1x the hand-written time on CUDA
//! (2026-12-06, `docs/benchmarks-history.md`), kept to measure the next macro change against:
//! the same additions in the same order (so the same bits as the library's), written so that
//! the generated code does less per element. (The second versions of `REDUCE_SUM_TREE4` and
//! `MATMUL_NAIVE` reached 1.1x and are the library's now.) Shared
//! indices are masked (`& 255`, a no-op for a 256-unit cube) so that the compiler can drop the
//! bounds check the macro puts on every shared access; index products are hoisted out of loops.

#![allow(dead_code)]

/// `library::matmul::MATMUL_4X4` with its row starts hoisted and `b`'s index stepped.
#[gpuworld::kernel(id = "bench.variant.matmul_4x4", cube_dim = [16, 16, 1])]
pub fn matmul_4x4_v2(a: &[f32], b: &[f32], c: &mut [f32], m: u32, n: u32, k: u32) {
    let row0 = cube_y() * 64 + unit_y();
    let col0 = cube_x() * 64 + unit_x();
    let ra0 = row0 * k;
    let ra1 = (row0 + 16) * k;
    let ra2 = (row0 + 32) * k;
    let ra3 = (row0 + 48) * k;
    let mut acc0 = vec4(0.0, 0.0, 0.0, 0.0);
    let mut acc1 = vec4(0.0, 0.0, 0.0, 0.0);
    let mut acc2 = vec4(0.0, 0.0, 0.0, 0.0);
    let mut acc3 = vec4(0.0, 0.0, 0.0, 0.0);
    let mut ib = col0;
    for kk in 0..k {
        let a0 = if row0 < m { a[ra0 + kk] } else { 0.0 };
        let a1 = if row0 + 16 < m { a[ra1 + kk] } else { 0.0 };
        let a2 = if row0 + 32 < m { a[ra2 + kk] } else { 0.0 };
        let a3 = if row0 + 48 < m { a[ra3 + kk] } else { 0.0 };
        let b0 = if col0 < n { b[ib] } else { 0.0 };
        let b1 = if col0 + 16 < n { b[ib + 16] } else { 0.0 };
        let b2 = if col0 + 32 < n { b[ib + 32] } else { 0.0 };
        let b3 = if col0 + 48 < n { b[ib + 48] } else { 0.0 };
        let bv = vec4(b0, b1, b2, b3);
        acc0 += bv * a0;
        acc1 += bv * a1;
        acc2 += bv * a2;
        acc3 += bv * a3;
        ib += n;
    }
    for r in 0..4 {
        let row = row0 + r * 16;
        let v = if r == 0 {
            acc0
        } else {
            if r == 1 {
                acc1
            } else {
                if r == 2 { acc2 } else { acc3 }
            }
        };
        if row < m {
            let i = row * n + col0;
            if col0 < n {
                c[i] = v.x;
            }
            if col0 + 16 < n {
                c[i + 16] = v.y;
            }
            if col0 + 32 < n {
                c[i + 32] = v.z;
            }
            if col0 + 48 < n {
                c[i + 48] = v.w;
            }
        }
    }
}

/// `library::matmul::MATMUL_TILED16` with its shared indices masked.
#[gpuworld::kernel(id = "bench.variant.matmul_tiled16", cube_dim = [16, 16, 1])]
pub fn matmul_tiled16_v2(a: &[f32], b: &[f32], c: &mut [f32], m: u32, n: u32, k: u32) {
    let tile_a = shared::<f32, 256>();
    let tile_b = shared::<f32, 256>();
    let row = cube_y() * 16 + unit_y();
    let col = cube_x() * 16 + unit_x();
    let ty = unit_y() * 16;
    let tx = unit_x();
    let tiles = (k + 15) / 16;
    let mut acc = 0.0;
    for t in 0..tiles {
        let ka = t * 16 + unit_x();
        let kb = t * 16 + unit_y();
        tile_a[(ty + tx) & 255] = if row < m && ka < k {
            a[row * k + ka]
        } else {
            0.0
        };
        tile_b[(ty + tx) & 255] = if kb < k && col < n {
            b[kb * n + col]
        } else {
            0.0
        };
        sync_cube();
        for kk in 0..16 {
            acc += tile_a[(ty + kk) & 255] * tile_b[(kk * 16 + tx) & 255];
        }
        sync_cube();
    }
    if row < m && col < n {
        c[row * n + col] = acc;
    }
}
