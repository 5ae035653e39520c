//! Running a replay: its CUDA graph built (or updated in place) at its first run at a version,
//! then launched.

use super::{Executable, GraphReplay, same_shape};
use crate::device::CudaBackend;
use cudarc::driver::sys;
use gpuworld_hal::backend::{LaunchCount, Region};
use gpuworld_hal::error::Error;
use smallvec::SmallVec;

/// `op`'s failure as a device fault of stream `stream` naming the call.
fn failed(backend: &CudaBackend, s: usize, call: &str, code: sys::CUresult) -> Error {
    Error::device_fault(
        backend.streams[s].id,
        format!(
            "{call} for a graph replay: {}",
            crate::loader::describe(crate::loader::sys_error(code))
        ),
    )
}

impl CudaBackend {
    /// Runs `op` on stream `s` over the task's `buffers`: its executable, made at the first run.
    pub(crate) fn run_graph(
        &mut self,
        s: usize,
        buffers: &[Region],
        op: &GraphReplay,
    ) -> Result<(), Error> {
        self.bind();
        let exec = match self.graphs.get(op.graph, op.version) {
            Some(exec) => exec,
            None => match self.update_graph(s, buffers, op)? {
                Some(exec) => exec,
                None => {
                    let made = self.build_graph(s, buffers, op)?;
                    let exec = made.exec;
                    self.graphs.insert(made);
                    exec
                }
            },
        };
        let stream = self.work_stream(s);
        // SAFETY: an executable of this context, whose kernels bind live allocations the
        // runtime keeps until the task's events passed.
        let code = unsafe { sys::cuGraphLaunch(exec, stream) };
        if code != sys::CUresult::CUDA_SUCCESS {
            return Err(failed(self, s, "cuGraphLaunch", code));
        }
        Ok(())
    }

    /// Updates the executable of an older version of `op`'s graph to `op`'s launches in place,
    /// when they differ only in arguments: `None` when there is none to update, or when the
    /// driver refuses (then the graph is built afresh).
    fn update_graph(
        &mut self,
        s: usize,
        buffers: &[Region],
        op: &GraphReplay,
    ) -> Result<Option<sys::CUgraphExec>, Error> {
        let Some(index) = self.graphs.execs.iter().position(|e| {
            e.graph == op.graph
                && same_shape(&e.launches, &op.launches)
                && e.nodes.iter().all(Option::is_some)
        }) else {
            return Ok(None);
        };
        let exec = self.graphs.execs[index].exec;
        // With the same buffers, only launches whose scalars changed need new arguments.
        let same_buffers = self.graphs.execs[index].regions == buffers;
        for (i, launch) in op.launches.iter().enumerate() {
            if same_buffers && self.graphs.execs[index].launches[i].scalars == launch.scalars {
                continue;
            }
            let regions: SmallVec<[Region; 4]> = launch
                .bindings
                .iter()
                .filter_map(|&b| buffers.get(usize::from(b)).copied())
                .collect();
            let Some(mut prepared) = self.prepare_launch(
                s,
                launch.kernel,
                LaunchCount::Static(launch.grid),
                &regions,
                &launch.scalars,
                launch.mode,
            )?
            else {
                return Ok(None);
            };
            let Some(node) = self.graphs.execs[index].nodes[i] else {
                return Ok(None);
            };
            let code = self.set_node_launch(exec, node, &mut prepared);
            if code != sys::CUresult::CUDA_SUCCESS {
                tracing::warn!(target: "gpuworld::graph", graph = op.graph, ?code, "CUDA graph update refused: capturing afresh");
                return Ok(None);
            }
        }
        let entry = &mut self.graphs.execs[index];
        entry.version = op.version;
        entry.launches = op.launches.clone();
        entry.regions = buffers.to_vec();
        self.graphs.updates += 1;
        tracing::debug!(target: "gpuworld::graph", graph = op.graph, version = op.version, "CUDA graph updated in place");
        Ok(Some(exec))
    }

    /// Builds `op`'s launches, made as stream `s`'s, into an executable graph, node by node: a
    /// launch depends on the one before it in its lane and on the launches of other lanes it
    /// follows (its `after`); a lane's first launch with nothing to follow is a root. Built, not
    /// captured: a stream capture is invalidated by what other threads of the process do
    /// meanwhile (another runtime freeing memory, which synchronizes the device), and two runtimes
    /// in one process replayed graphs beside each other in the tests.
    fn build_graph(
        &mut self,
        s: usize,
        buffers: &[Region],
        op: &GraphReplay,
    ) -> Result<Executable, Error> {
        let mut graph = std::ptr::null_mut();
        // SAFETY: an out-pointer; the graph is destroyed below on failure, else kept with its
        // executable.
        let code = unsafe { sys::cuGraphCreate(&mut graph, 0) };
        if code != sys::CUresult::CUDA_SUCCESS {
            return Err(failed(self, s, "cuGraphCreate", code));
        }
        let built = self.add_launches(s, graph, buffers, op);
        let nodes = match built {
            Ok(nodes) => nodes,
            Err(error) => {
                // SAFETY: the graph just built, used by nothing.
                unsafe { sys::cuGraphDestroy(graph) };
                return Err(error);
            }
        };
        let mut exec = std::ptr::null_mut();
        // SAFETY: `graph` was just built; the executable and the graph are kept in the cache and
        // destroyed together there (the graph's nodes name what an update changes).
        let code = unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0) };
        if code != sys::CUresult::CUDA_SUCCESS {
            // SAFETY: the graph just built, used by nothing.
            unsafe { sys::cuGraphDestroy(graph) };
            return Err(failed(self, s, "cuGraphInstantiate", code));
        }
        tracing::debug!(target: "gpuworld::graph", graph = op.graph, version = op.version, launches = op.launches.len(), "CUDA graph instantiated");
        Ok(Executable {
            graph: op.graph,
            version: op.version,
            exec,
            cuda_graph: graph,
            nodes,
            launches: op.launches.clone(),
            regions: buffers.to_vec(),
        })
    }

    /// Adds a kernel node per launch of `op` to `graph`; each launch's node (`None` for a launch
    /// of no cubes, which adds none).
    fn add_launches(
        &mut self,
        s: usize,
        graph: sys::CUgraph,
        buffers: &[Region],
        op: &GraphReplay,
    ) -> Result<Vec<Option<sys::CUgraphNode>>, Error> {
        let lanes = op
            .launches
            .iter()
            .map(|l| usize::from(l.lane) + 1)
            .max()
            .unwrap_or(1);
        let mut nodes = Vec::with_capacity(op.launches.len());
        // What the work after each launch depends on: its node, or for a launch without one,
        // what its lane's work depended on before it.
        let mut tips: Vec<Option<sys::CUgraphNode>> = Vec::with_capacity(op.launches.len());
        let mut last: SmallVec<[Option<sys::CUgraphNode>; 4]> = smallvec::smallvec![None; lanes];
        for launch in op.launches.iter() {
            let lane = usize::from(launch.lane);
            let regions: SmallVec<[Region; 4]> = launch
                .bindings
                .iter()
                .filter_map(|&i| buffers.get(usize::from(i)).copied())
                .collect();
            let prepared = self.prepare_launch(
                s,
                launch.kernel,
                LaunchCount::Static(launch.grid),
                &regions,
                &launch.scalars,
                launch.mode,
            )?;
            let node = match prepared {
                Some(mut prepared) => {
                    let mut deps: SmallVec<[sys::CUgraphNode; 4]> = SmallVec::new();
                    let followed = launch
                        .after
                        .iter()
                        .map(|&i| tips.get(usize::from(i)).copied().flatten());
                    for node in std::iter::once(last[lane]).chain(followed).flatten() {
                        if !deps.contains(&node) {
                            deps.push(node);
                        }
                    }
                    let node = self.add_node(graph, &deps, &mut prepared).map_err(|code| {
                        failed(
                            self,
                            s,
                            &format!("cuGraphAddKernelNode of `{}`", launch.kernel.name),
                            code,
                        )
                    })?;
                    last[lane] = Some(node);
                    Some(node)
                }
                None => None,
            };
            nodes.push(node);
            tips.push(last[lane]);
        }
        Ok(nodes)
    }
}
