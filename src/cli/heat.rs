//! Heat diffusion on a gpuworld runtime: the initial field, and the ping-pong of `STENCIL`
//! launches that advances it, one launch per step; the field saved every N steps and resumed
//! from a checkpoint (`--checkpoint-every`, `--checkpoint`, `--resume`).

use super::CliError;
use gpuworld::checkpoint::{Checkpoint, CheckpointMeta, Progress};
use gpuworld::{Backend, Bindings, ComputeClient, CubeCount, Driver, Handle, library};
use indicatif::ProgressBar;
use std::path::{Path, PathBuf};
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

/// Where a run saves its field and what it resumes from.
#[derive(Clone, Debug, Default)]
pub struct Persistence {
    /// Save every this many steps (else only after the last step, when `path` is given).
    pub every: Option<u64>,
    /// Where to save.
    pub path: Option<PathBuf>,
    /// The checkpoint to continue from.
    pub resume: Option<PathBuf>,
}

impl Persistence {
    /// Where to save after step `done` of `steps`, if anywhere.
    fn due(&self, done: u64, steps: u64) -> Option<&Path> {
        let path = self.path.as_deref()?;
        let due = match self.every {
            Some(every) => done.is_multiple_of(every.max(1)),
            None => done == steps,
        };
        due.then_some(path)
    }
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
        self.simulate_with(client, steps, progress, &Persistence::default())
    }

    /// Like [`HeatProblem::simulate`], resuming from and saving checkpoints as `persistence`
    /// says: a resumed run continues from the saved step up to `steps` in all.
    pub fn simulate_with<B: Backend>(
        &self,
        client: &ComputeClient<B>,
        steps: u64,
        progress: &ProgressBar,
        persistence: &Persistence,
    ) -> Result<HeatResult, CliError> {
        let start = Instant::now();
        let (mut src, mut dst, first) = match &persistence.resume {
            Some(path) => self.resume(client, path, steps, progress)?,
            None => {
                let initial = self.initial_field();
                // Both buffers start from the initial field so that zero steps read back a
                // valid field.
                let src = client.create_from_slice(bytemuck::cast_slice(&initial));
                let dst = client.create_from_slice(bytemuck::cast_slice(&initial));
                (src, dst, 0)
            }
        };
        client.sync()?;
        progress.set_position(first);
        let steps_start = Instant::now();
        for step in first..steps {
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
            if let Some(path) = persistence.due(step + 1, steps) {
                self.save(client, [&src, &dst], step + 1, path, progress)?;
            }
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

impl HeatProblem {
    /// What a checkpoint of this problem carries beside the field: the grid and the step, so
    /// that a resume of another problem is refused.
    fn app_data(&self) -> Vec<u8> {
        format!(
            "heat side={} alpha={:#010x}",
            self.side,
            self.alpha.to_bits()
        )
        .into_bytes()
    }

    /// Writes the field (`buffers`: the current one, then the other) after step `done`.
    fn save<B: Backend>(
        &self,
        client: &ComputeClient<B>,
        buffers: [&Handle; 2],
        done: u64,
        path: &Path,
        progress: &ProgressBar,
    ) -> Result<(), CliError> {
        let meta = CheckpointMeta::at_tick(done).with_app_data(self.app_data());
        let checkpoint = Checkpoint::new()
            .buffer("field", buffers[0])
            .buffer("scratch", buffers[1])
            .meta(meta)
            .on_progress(|p| progress.set_message(percent("checkpoint", p)));
        client.checkpoint(path, checkpoint)?;
        progress.set_message("");
        Ok(())
    }

    /// The field and the step of the checkpoint at `path`, which must be of this problem and
    /// of a step no later than `steps`.
    fn resume<B: Backend>(
        &self,
        client: &ComputeClient<B>,
        path: &Path,
        steps: u64,
        progress: &ProgressBar,
    ) -> Result<(Handle, Handle, u64), CliError> {
        let mismatch = |reason: String| CliError::ResumeMismatch {
            path: path.to_path_buf(),
            reason,
        };
        let restored =
            client.restore_with_progress(path, |p| progress.set_message(percent("restore", p)))?;
        progress.set_message("");
        if restored.meta.app_data != self.app_data() {
            return Err(mismatch(format!(
                "it holds `{}`, and this run is `{}`",
                String::from_utf8_lossy(&restored.meta.app_data),
                String::from_utf8_lossy(&self.app_data())
            )));
        }
        let tick = restored.meta.tick;
        if tick > steps {
            return Err(mismatch(format!(
                "it was saved after step {tick}, past --ticks {steps}"
            )));
        }
        let buffer = |name: &str| {
            restored
                .handle(name)
                .cloned()
                .ok_or_else(|| mismatch(format!("it has no `{name}` buffer")))
        };
        Ok((buffer("field")?, buffer("scratch")?, tick))
    }
}

/// `what 42%` for a progress message.
fn percent(what: &str, progress: Progress) -> String {
    let done = progress.bytes_done.saturating_mul(100) / progress.bytes_total.max(1);
    format!("{what} {done}%")
}
