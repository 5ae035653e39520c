//! CUDA graphs for captured gpuworld graphs (issue 28): a replay of launches on one stream runs as
//! one native task, [`GraphReplay`]. Its first run at a graph's version captures the launches on
//! the task's stream (`cuStreamBeginCapture` ... `cuStreamEndCapture`, the same `cuLaunchKernel`
//! calls as eager launches, which the capture records instead of running), instantiates the graph
//! and keeps the executable; that run and every later one is one `cuGraphLaunch`. The runtime
//! orders the task against other work like any task of the stream, over the union of the
//! launches' bindings. A graph at another version (after a scalar update) is captured afresh,
//! and the older executable goes.

use crate::CudaBackend;
use cudarc::driver::sys;
use gpuworld_systems::backend::{LaunchCount, NativeOp, NativeWork, Region};
use gpuworld_systems::error::Error;
use gpuworld_systems::graph::PlannedLaunch;
use smallvec::SmallVec;

/// Executables kept at most; the oldest goes first.
const KEPT: usize = 64;

/// A replay of launches on one stream, run as one CUDA graph.
#[derive(Debug)]
pub struct GraphReplay {
    graph: u64,
    version: u64,
    launches: Vec<PlannedLaunch>,
}

impl GraphReplay {
    /// The op for `launches` of graph `graph` at `version`.
    pub fn work(graph: u64, version: u64, launches: Vec<PlannedLaunch>) -> NativeWork {
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

/// The instantiated graphs of one backend, by gpuworld graph.
#[derive(Debug, Default)]
pub(crate) struct GraphCache {
    /// (graph, version, executable), the most recently made last.
    execs: Vec<(u64, u64, sys::CUgraphExec)>,
    /// The stream captures run on, made at the first: one nobody else queries (a query of a
    /// capturing stream, such as a caller waiting on the runtime's streams does, invalidates
    /// the capture).
    capture_stream: Option<sys::CUstream>,
}

impl GraphCache {
    fn get(&self, graph: u64, version: u64) -> Option<sys::CUgraphExec> {
        self.execs
            .iter()
            .find(|(g, v, _)| *g == graph && *v == version)
            .map(|(_, _, exec)| *exec)
    }

    /// Keeps `exec` for `graph` at `version`, destroying the graph's older versions and the
    /// oldest executable past [`KEPT`].
    fn insert(&mut self, graph: u64, version: u64, exec: sys::CUgraphExec) {
        self.execs.retain(|&(g, _, old)| {
            let stale = g == graph;
            if stale {
                // SAFETY: an executable of this context, launched only on its streams, whose
                // launches in flight keep what they need (destroying it is allowed then).
                unsafe { sys::cuGraphExecDestroy(old) };
            }
            !stale
        });
        if self.execs.len() >= KEPT {
            let (_, _, oldest) = self.execs.remove(0);
            // SAFETY: as above.
            unsafe { sys::cuGraphExecDestroy(oldest) };
        }
        self.execs.push((graph, version, exec));
    }

    /// How many executables are kept.
    pub(crate) fn len(&self) -> usize {
        self.execs.len()
    }

    /// Destroys every executable and the capture stream (the context is idle).
    pub(crate) fn clear(&mut self) {
        for (_, _, exec) in self.execs.drain(..) {
            // SAFETY: executables of this context, which is idle.
            unsafe { sys::cuGraphExecDestroy(exec) };
        }
        if let Some(stream) = self.capture_stream.take() {
            // SAFETY: a stream of this context, which is idle; never used again.
            unsafe { sys::cuStreamDestroy_v2(stream) };
        }
    }
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
            None => {
                let exec = self.capture_graph(s, buffers, op)?;
                self.graphs.insert(op.graph, op.version, exec);
                exec
            }
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

    /// Captures `op`'s launches on stream `s` into an executable graph.
    fn capture_graph(
        &mut self,
        s: usize,
        buffers: &[Region],
        op: &GraphReplay,
    ) -> Result<sys::CUgraphExec, Error> {
        // Modules load outside the capture, and reads that were the stream's last work get their
        // events first (recorded into the capture, they would never pass).
        for launch in &op.launches {
            self.kernels.function(launch.kernel, launch.mode, false)?;
        }
        self.work_stream(s);
        let stream = match self.graphs.capture_stream {
            Some(stream) => stream,
            None => {
                let mut stream = std::ptr::null_mut();
                let flags = sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32;
                // SAFETY: creates a stream of this context, destroyed by `GraphCache::clear`.
                let code = unsafe { sys::cuStreamCreate(&mut stream, flags) };
                if code != sys::CUresult::CUDA_SUCCESS {
                    return Err(failed(self, s, "cuStreamCreate", code));
                }
                self.graphs.capture_stream = Some(stream);
                stream
            }
        };
        // The launches go to the capture stream in stream `s`'s place (the capture runs
        // nothing: the executable is launched on `s` after).
        self.capture_on(s, stream, buffers, op)
    }

    /// Captures `op`'s launches, made as stream `s`'s, on `stream`.
    fn capture_on(
        &mut self,
        s: usize,
        stream: sys::CUstream,
        buffers: &[Region],
        op: &GraphReplay,
    ) -> Result<sys::CUgraphExec, Error> {
        // SAFETY: a stream of this context; the capture ends below on every path.
        let code = unsafe {
            sys::cuStreamBeginCapture_v2(
                stream,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
            )
        };
        if code != sys::CUresult::CUDA_SUCCESS {
            return Err(failed(self, s, "cuStreamBeginCapture", code));
        }
        let mut captured = Ok(());
        for launch in &op.launches {
            let regions: SmallVec<[Region; 4]> = launch
                .bindings
                .iter()
                .filter_map(|&i| buffers.get(usize::from(i)).copied())
                .collect();
            captured = self.launch_on(
                s,
                Some(stream),
                launch.kernel,
                LaunchCount::Static(launch.grid),
                &regions,
                &launch.scalars,
                launch.mode,
            );
            if captured.is_err() {
                break;
            }
        }
        let mut graph = std::ptr::null_mut();
        // SAFETY: ends the capture begun above; `graph` is an out-pointer.
        let code = unsafe { sys::cuStreamEndCapture(stream, &mut graph) };
        if let Err(error) = captured {
            if !graph.is_null() {
                // SAFETY: the graph just captured, used by nothing.
                unsafe { sys::cuGraphDestroy(graph) };
            }
            return Err(error);
        }
        if code != sys::CUresult::CUDA_SUCCESS {
            return Err(failed(self, s, "cuStreamEndCapture", code));
        }
        let mut exec = std::ptr::null_mut();
        // SAFETY: `graph` was just captured; the executable is kept in the cache and destroyed
        // there; the graph itself is not needed once instantiated.
        let code = unsafe {
            let code = sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0);
            sys::cuGraphDestroy(graph);
            code
        };
        if code != sys::CUresult::CUDA_SUCCESS {
            return Err(failed(self, s, "cuGraphInstantiate", code));
        }
        tracing::debug!(target: "gpuworld::graph", graph = op.graph, version = op.version, launches = op.launches.len(), "CUDA graph instantiated");
        Ok(exec)
    }
}

/// Whether `work` is a [`GraphReplay`], and it if so.
pub(crate) fn as_graph_replay(work: &NativeWork) -> Option<&GraphReplay> {
    work.as_any().downcast_ref::<GraphReplay>()
}
