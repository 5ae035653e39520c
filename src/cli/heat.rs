//! Heat diffusion on a gpuworld runtime: the initial field, and the ping-pong of `STENCIL`
//! launches that advances it, one launch per step.

use super::CliError;
use gpuworld::{Backend, Bindings, ComputeClient, CubeCount, Driver, library};
use indicatif::ProgressBar;
use std::time::{Duration, Instant};

/// Hot discs of the initial field: centre x, centre y and radius, as fractions of the side.
const HOT_DISCS: [(f32, f32, f32); 3] =
    [(0.25, 0.30, 0.08), (0.70, 0.45, 0.10), (0.40, 0.75, 0.06)];

/// Temperature of the hot discs and of the top border.
const HOT: f32 = 1.0;

/// A square heat-diffusion problem.
#[derive(Clone, Copy, Debug)]
pub struct HeatProblem {
    /// Grid side in cells.
    pub side: u32,
    /// Diffusion coefficient per step; explicit steps are stable up to 0.25.
    pub alpha: f32,
}

/// The field after the last step and how long the steps took.
pub struct HeatResult {
    /// The final field, row-major, row 0 at the top.
    pub field: Vec<f32>,
    /// Time from the upload until the last step had run on the device.
    pub elapsed: Duration,
    /// Time of the steps alone: from the uploads having landed until the last step had run.
    pub steps_elapsed: Duration,
}

impl HeatProblem {
    /// Cells of the grid.
    pub fn cells(&self) -> usize {
        self.side as usize * self.side as usize
    }

    /// Zero everywhere but the hot discs and the top border row, which the stencil keeps fixed.
    pub fn initial_field(&self) -> Vec<f32> {
        let side = self.side as usize;
        let mut field = vec![0.0f32; self.cells()];
        for &(cx, cy, r) in &HOT_DISCS {
            let (cx, cy) = (cx * self.side as f32, cy * self.side as f32);
            // At least one cell, so a tiny grid still gets its discs.
            let r = (r * self.side as f32).max(1.0);
            for (y, row) in field.chunks_exact_mut(side).enumerate() {
                let dy = y as f32 + 0.5 - cy;
                for (x, cell) in row.iter_mut().enumerate() {
                    let dx = x as f32 + 0.5 - cx;
                    if dx * dx + dy * dy <= r * r {
                        *cell = HOT;
                    }
                }
            }
        }
        field[..side].fill(HOT);
        field
    }

    /// Runs `steps` diffusion steps on `client` and reads the final field back.
    ///
    /// A manual runtime is ticked once per step; a device thread is left to tick on its own.
    pub fn simulate<B: Backend>(
        &self,
        client: &ComputeClient<B>,
        steps: u64,
        progress: &ProgressBar,
    ) -> Result<HeatResult, CliError> {
        let initial = self.initial_field();
        let start = Instant::now();
        // Both buffers start from the initial field so that zero steps read back a valid field.
        let mut src = client.create_from_slice(bytemuck::cast_slice(&initial));
        let mut dst = client.create_from_slice(bytemuck::cast_slice(&initial));
        client.sync()?;
        let steps_start = Instant::now();
        for _ in 0..steps {
            let bindings = Bindings::new()
                .buffer(&src)
                .buffer(&dst)
                .scalar_u32(self.side)
                .scalar_u32(self.side)
                .scalar_f32(self.alpha);
            let count = CubeCount::covering_2d(self.side, self.side, library::STENCIL_TILE);
            client.launch(&library::STENCIL, count, bindings)?;
            if client.driver() == Driver::Manual {
                client.tick();
            }
            std::mem::swap(&mut src, &mut dst);
            progress.inc(1);
        }
        client.sync()?;
        let (elapsed, steps_elapsed) = (start.elapsed(), steps_start.elapsed());
        let field: Vec<f32> = client.read_one_as(&src)?;
        if field.len() != self.cells() {
            return Err(CliError::FieldSize {
                expected: self.cells(),
                got: field.len(),
            });
        }
        Ok(HeatResult {
            field,
            elapsed,
            steps_elapsed,
        })
    }
}
