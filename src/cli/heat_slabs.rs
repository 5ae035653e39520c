//! Heat diffusion split across devices: the field is cut into horizontal slabs, one per device,
//! each with a halo row above and below that its neighbours refresh after every step through
//! `to_client_into`. Each device runs the same `STENCIL` on its slab, whose halo rows it keeps
//! as fixed borders, so every owned cell gets exactly the one-device run's arithmetic.

use super::CliError;
use super::heat::{HeatProblem, HeatResult};
use gpuworld::collective::{ElemType, ReduceOp};
use gpuworld::{Backend, Bindings, ComputeClient, CubeCount, Driver, Graph, Handle, library};
use indicatif::ProgressBar;
use std::time::Instant;

/// One device's part of the field: the rows it owns and the rows it holds (owned plus halos).
struct Slab {
    /// First owned row and one past the last, in field rows.
    owned: (usize, usize),
    /// First held row and one past the last: the owned rows and a halo row on each side that
    /// has a neighbour.
    held: (usize, usize),
}

impl Slab {
    /// The slabs of `rows` rows over `devices` devices, as even as rows allow.
    fn split(rows: usize, devices: usize) -> Vec<Slab> {
        (0..devices)
            .map(|k| {
                let (start, end) = (rows * k / devices, rows * (k + 1) / devices);
                Slab {
                    owned: (start, end),
                    held: (start.saturating_sub(1), (end + 1).min(rows)),
                }
            })
            .collect()
    }

    fn held_rows(&self) -> usize {
        self.held.1 - self.held.0
    }
}

/// Row `row` (a field row this slab holds) of `handle`, a slab buffer `width` cells wide.
fn row_of(handle: &Handle, slab: &Slab, row: usize, width: usize) -> Handle {
    let row_bytes = (width * 4) as u64;
    let local = (row - slab.held.0) as u64;
    let end = (local + 1) * row_bytes;
    handle
        .clone()
        .offset_start(local * row_bytes)
        .offset_end(handle.capacity() - end)
}

impl HeatProblem {
    /// Runs `steps` diffusion steps with the field split over `clients`, one slab each, and
    /// reads the final field back; `Error::TooManyDevices` when a slab would get no row. With
    /// `replay`, the first two steps (a step swaps each slab's buffers, so two bring them back)
    /// are captured over every device as one graph (`Graph::capture_group`: the stencils and the
    /// halo transfers), which the later pairs replay, an odd last step running eagerly: the same
    /// field bit for bit.
    pub fn simulate_on_devices<B: Backend>(
        &self,
        clients: &[ComputeClient<B>],
        steps: u64,
        progress: &ProgressBar,
        replay: bool,
    ) -> Result<HeatResult, CliError> {
        let (width, rows) = (self.side as usize, self.side as usize);
        if clients.len() > rows {
            return Err(CliError::TooManyDevices {
                devices: clients.len(),
                rows,
            });
        }
        let slabs = Slab::split(rows, clients.len());
        let initial = self.initial_field();
        let start = Instant::now();
        let mut buffers: Vec<(Handle, Handle)> = clients
            .iter()
            .zip(&slabs)
            .map(|(client, slab)| {
                let cells = &initial[slab.held.0 * width..slab.held.1 * width];
                let bytes = bytemuck::cast_slice(cells);
                (
                    client.create_from_slice(bytes),
                    client.create_from_slice(bytes),
                )
            })
            .collect();
        for client in clients {
            client.sync()?;
        }
        let steps_start = Instant::now();
        let tick = || {
            for client in clients {
                if client.driver() == Driver::Manual {
                    client.tick();
                }
            }
        };
        let mut done = 0;
        if replay && steps >= 2 {
            let pair = Graph::capture_group(clients, |clients| {
                self.step_on_devices(clients, &slabs, &mut buffers)?;
                self.step_on_devices(clients, &slabs, &mut buffers)
            })?;
            tick();
            progress.inc(2);
            done = 2;
            while done + 2 <= steps {
                pair.replay()?;
                tick();
                progress.inc(2);
                done += 2;
            }
        }
        for _ in done..steps {
            self.step_on_devices(clients, &slabs, &mut buffers)?;
            tick();
            progress.inc(1);
        }
        for client in clients {
            client.sync()?;
        }
        let (elapsed, steps_elapsed) = (start.elapsed(), steps_start.elapsed());
        let mut field = Vec::with_capacity(self.cells());
        for ((client, slab), (src, _)) in clients.iter().zip(&slabs).zip(&buffers) {
            let row_bytes = width * 4;
            let owned = src
                .clone()
                .offset_start(((slab.owned.0 - slab.held.0) * row_bytes) as u64)
                .offset_end(((slab.held.1 - slab.owned.1) * row_bytes) as u64);
            let rows: Vec<f32> = client.read_one_as(&owned)?;
            field.extend(rows);
        }
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
    /// One step of `slab` on `client`: the stencil from `src` into `dst`, its halo rows kept.
    fn launch_stencil<B: Backend>(
        &self,
        client: &ComputeClient<B>,
        slab: &Slab,
        src: &Handle,
        dst: &Handle,
    ) -> Result<(), gpuworld::Error> {
        let bindings = Bindings::new()
            .buffer(src)
            .buffer(dst)
            .scalar_u32(self.side)
            .scalar_u32(slab.held_rows() as u32)
            .scalar_f32(self.alpha);
        let count =
            CubeCount::covering_2d(self.side, slab.held_rows() as u32, library::STENCIL_TILE);
        client.launch(&library::STENCIL, count, bindings)
    }

    /// One step over the slabs: every device's stencil, then each slab's edge rows to its
    /// neighbours' halos for the next step (`buffers` swap: the field is in the first of each).
    fn step_on_devices<B: Backend>(
        &self,
        clients: &[ComputeClient<B>],
        slabs: &[Slab],
        buffers: &mut [(Handle, Handle)],
    ) -> Result<(), gpuworld::Error> {
        let width = self.side as usize;
        for ((client, slab), (src, dst)) in clients.iter().zip(slabs).zip(buffers.iter()) {
            self.launch_stencil(client, slab, src, dst)?;
        }
        for (src, dst) in buffers.iter_mut() {
            std::mem::swap(src, dst);
        }
        // Each slab's edge rows become its neighbours' halos for the next step.
        for k in 0..clients.len() {
            let (slab, src) = (&slabs[k], &buffers[k].0);
            if k > 0 {
                let (above, above_src) = (&slabs[k - 1], &buffers[k - 1].0);
                let first = slab.owned.0;
                clients[k].to_client_into(
                    &row_of(src, slab, first, width),
                    &clients[k - 1],
                    &row_of(above_src, above, first, width),
                )?;
            }
            if k + 1 < clients.len() {
                let (below, below_src) = (&slabs[k + 1], &buffers[k + 1].0);
                let last = slab.owned.1 - 1;
                clients[k].to_client_into(
                    &row_of(src, slab, last, width),
                    &clients[k + 1],
                    &row_of(below_src, below, last, width),
                )?;
            }
        }
        Ok(())
    }
}

/// This process's part of a split run across processes: the rows it owns, and the times.
pub struct RankResult {
    /// The owned rows of the final field, row-major.
    pub owned: Vec<f32>,
    /// The field rows this rank owns, first and one past the last.
    pub rows: (usize, usize),
    /// Time from the upload until the last step had run on this rank's device.
    pub elapsed: std::time::Duration,
    /// Time of the steps alone.
    pub steps_elapsed: std::time::Duration,
}

impl HeatProblem {
    /// Runs `steps` diffusion steps of this process's slab of the field split over the ranks of
    /// `group`, each step's halo rows exchanged with the neighbouring ranks in one
    /// [`ProcessGroup::send_recv`] (NCCL on CUDA, TCP elsewhere), and reads the owned rows back.
    pub fn simulate_across_processes<B: Backend>(
        &self,
        client: &ComputeClient<B>,
        group: &mut gpuworld::distributed::ProcessGroup,
        steps: u64,
        progress: &ProgressBar,
    ) -> Result<RankResult, CliError> {
        let (width, rows) = (self.side as usize, self.side as usize);
        let (rank, world) = (group.rank(), group.world_size());
        if world > rows {
            return Err(CliError::TooManyDevices {
                devices: world,
                rows,
            });
        }
        let slabs = Slab::split(rows, world);
        let slab = &slabs[rank];
        let initial = self.initial_field();
        let cells = bytemuck::cast_slice(&initial[slab.held.0 * width..slab.held.1 * width]);
        // Every rank starts its clock together.
        group.all_reduce_bytes(&[0; 4], ElemType::I32, ReduceOp::Sum)?;
        let start = Instant::now();
        let (mut src, mut dst) = (
            client.create_from_slice(cells),
            client.create_from_slice(cells),
        );
        // The edge rows go to the neighbours, whose edge rows come back as the halos.
        let exchange = |group: &mut gpuworld::distributed::ProcessGroup, src: &Handle| {
            let (mut sends, mut recvs) = (Vec::new(), Vec::new());
            if rank > 0 {
                sends.push(((&row_of(src, slab, slab.owned.0, width)).into(), rank - 1));
                recvs.push(((&row_of(src, slab, slab.held.0, width)).into(), rank - 1));
            }
            if rank + 1 < world {
                sends.push((
                    (&row_of(src, slab, slab.owned.1 - 1, width)).into(),
                    rank + 1,
                ));
                recvs.push((
                    (&row_of(src, slab, slab.held.1 - 1, width)).into(),
                    rank + 1,
                ));
            }
            group.send_recv(client, &sends, &recvs)
        };
        // Timed warm, as the one-device run is: the first exchange sets up the ranks' links
        // (NCCL connects a pair at its first transfer, hundreds of milliseconds). It changes no
        // cell: the halos already hold the neighbours' initial edge rows.
        exchange(group, &src)?;
        exchange(group, &dst)?;
        client.sync()?;
        let steps_start = Instant::now();
        for _ in 0..steps {
            self.launch_stencil(client, slab, &src, &dst)?;
            std::mem::swap(&mut src, &mut dst);
            exchange(group, &src)?;
            if client.driver() == Driver::Manual {
                client.tick();
            }
            progress.inc(1);
        }
        client.sync()?;
        let (elapsed, steps_elapsed) = (start.elapsed(), steps_start.elapsed());
        let row_bytes = width * 4;
        let owned = src
            .clone()
            .offset_start(((slab.owned.0 - slab.held.0) * row_bytes) as u64)
            .offset_end(((slab.held.1 - slab.owned.1) * row_bytes) as u64);
        let owned: Vec<f32> = client.read_one_as(&owned)?;
        Ok(RankResult {
            owned,
            rows: slab.owned,
            elapsed,
            steps_elapsed,
        })
    }
}
