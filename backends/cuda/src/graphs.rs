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

mod run;

use cudarc::driver::sys;
use gpuworld_hal::backend::{NativeOp, NativeWork, Region};
use gpuworld_hal::graph::PlannedLaunch;
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

/// Whether `work` is a [`GraphReplay`], and it if so.
pub(crate) fn as_graph_replay(work: &NativeWork) -> Option<&GraphReplay> {
    work.as_any().downcast_ref::<GraphReplay>()
}
