//! CUDA graphs for captured gpuworld graphs (issue 28): a replay of launches on one stream runs as
//! one native task, [`GraphReplay`]. Its first run at a graph's version builds a CUDA graph of the
//! launches node by node (`cuGraphAddKernelNode`, with the arguments an eager launch would pass,
//! each launch after the one before it in its lane and after the launches of other lanes it
//! follows), instantiates it and keeps the executable; that run and every later one is one
//! `cuGraphLaunch`. The runtime orders the task against other work like any task of the stream,
//! over the union of the launches' bindings. A graph at another version (after a scalar update)
//! whose launches differ only in their scalars and buffers updates the executable in place, one
//! `cuGraphExecKernelNodeSetParams` per changed launch; anything else is built afresh, and the
//! older executable goes.

use crate::CudaBackend;
use cudarc::driver::sys;
use gpuworld_hal::backend::{LaunchCount, NativeOp, NativeWork, Region};
use gpuworld_hal::error::Error;
use gpuworld_hal::graph::PlannedLaunch;
use smallvec::SmallVec;
use std::sync::Arc;

/// Executables kept at most; the oldest goes first.
const KEPT: usize = 64;

/// A replay of launches on one stream, run as one CUDA graph.
#[derive(Debug)]
pub struct GraphReplay {
    graph: u64,
    version: u64,
    launches: Arc<[PlannedLaunch]>,
}

impl GraphReplay {
    /// The op for `launches` of graph `graph` at `version`.
    pub fn work(graph: u64, version: u64, launches: Arc<[PlannedLaunch]>) -> NativeWork {
        Box::new(GraphReplay {
            graph,
            version,
            launches,
        })
    }
}

impl NativeOp for GraphReplay {
    fn name(&self) -> &'static str {
        "cuda graph replay"
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// One instantiated graph: the gpuworld graph and version it runs, the CUDA graph it was made
/// from (kept: its nodes name what an update changes), each launch's node, and the launches.
#[derive(Debug)]
struct Executable {
    graph: u64,
    version: u64,
    exec: sys::CUgraphExec,
    cuda_graph: sys::CUgraph,
    nodes: Vec<Option<sys::CUgraphNode>>,
    launches: Arc<[PlannedLaunch]>,
    /// The task's buffers the launches bound when it was built or last updated.
    regions: Vec<Region>,
}

impl Executable {
    /// Destroys the executable and its graph.
    fn destroy(self) {
        // SAFETY: an executable of this context, launched only on its streams, whose launches
        // in flight keep what they need (destroying it is allowed then), and the graph it was
        // instantiated from, used by nothing else.
        unsafe {
            sys::cuGraphExecDestroy(self.exec);
            sys::cuGraphDestroy(self.cuda_graph);
        }
    }
}

/// The instantiated graphs of one backend, by gpuworld graph.
#[derive(Debug, Default)]
pub(crate) struct GraphCache {
    /// The executables, the most recently made last.
    execs: Vec<Executable>,
    /// Executables updated in place for a new version (scalar updates without a new graph).
    updates: u64,
    /// Graphs built.
    captures: u64,
}

impl GraphCache {
    fn get(&self, graph: u64, version: u64) -> Option<sys::CUgraphExec> {
        self.execs
            .iter()
            .find(|e| e.graph == graph && e.version == version)
            .map(|e| e.exec)
    }

    /// Keeps `made` (a new graph), destroying its graph's older versions and the oldest
    /// executable past [`KEPT`].
    fn insert(&mut self, made: Executable) {
        let graph = made.graph;
        let (stale, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.execs)
            .into_iter()
            .partition(|e| e.graph == graph);
        self.execs = kept;
        stale.into_iter().for_each(Executable::destroy);
        if self.execs.len() >= KEPT {
            self.execs.remove(0).destroy();
        }
        self.captures += 1;
        self.execs.push(made);
    }

    /// How many executables are kept.
    pub(crate) fn len(&self) -> usize {
        self.execs.len()
    }

    /// How many graphs were built, and how many versions updated an executable in place.
    pub(crate) fn counts(&self) -> (u64, u64) {
        (self.captures, self.updates)
    }

    /// Destroys every executable (the context is idle).
    pub(crate) fn clear(&mut self) {
        self.execs.drain(..).for_each(Executable::destroy);
    }
}

/// Whether `new` runs the same kernels on the same grids in the same modes as `old`, so that an
/// executable of `old` takes it by changing arguments only.
fn same_shape(old: &[PlannedLaunch], new: &[PlannedLaunch]) -> bool {
    old.len() == new.len()
        && old.iter().zip(new).all(|(a, b)| {
            std::ptr::eq(a.kernel, b.kernel)
                && a.grid == b.grid
                && a.lane == b.lane
                && a.after == b.after
                && a.mode == b.mode
                && a.bindings.len() == b.bindings.len()
                && a.scalars.len() == b.scalars.len()
        })
}

/// `op`'s failure as a device fault of stream `stream` naming the call.
fn failed(backend: &CudaBackend, s: usize, call: &str, code: sys::CUresult) -> Error {
    Error::device_fault(
        backend.streams[s].id,
        format!(
            "{call} for a graph replay: {}",
            crate::loader::describe(crate::faults::sys_error(code))
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

/// Whether `work` is a [`GraphReplay`], and it if so.
pub(crate) fn as_graph_replay(work: &NativeWork) -> Option<&GraphReplay> {
    work.as_any().downcast_ref::<GraphReplay>()
}
