//! CUDA graphs for captured gpuworld graphs (issue 28): a replay of launches on one stream runs as
//! one native task, [`GraphReplay`]. Its first run at a graph's version captures the launches on
//! the task's stream (`cuStreamBeginCapture` ... `cuStreamEndCapture`, the same `cuLaunchKernel`
//! calls as eager launches, which the capture records instead of running), instantiates the graph
//! and keeps the executable; that run and every later one is one `cuGraphLaunch`. The runtime
//! orders the task against other work like any task of the stream, over the union of the
//! launches' bindings. A graph at another version (after a scalar update) whose launches differ
//! only in their scalars and buffers updates the executable in place, one
//! `cuGraphExecKernelNodeSetParams` per changed launch (each launch's node is noted as the capture
//! adds it); anything else is captured afresh, and the older executable goes.

use crate::CudaBackend;
use cudarc::driver::sys;
use gpuworld_systems::backend::{LaunchCount, NativeOp, NativeWork, Region};
use gpuworld_systems::error::Error;
use gpuworld_systems::graph::PlannedLaunch;
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
    /// The task's buffers the launches bound at the last capture or update.
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
    /// Executables updated in place for a new version (scalar updates without a capture).
    updates: u64,
    /// Captures made.
    captures: u64,
    /// The streams captures run on, one per lane, made at first need: streams nobody else
    /// queries (a query of a capturing stream, such as a caller waiting on the runtime's
    /// streams does, invalidates the capture).
    capture_streams: Vec<sys::CUstream>,
    /// Events that fork, join and order the lanes of a capture, made at first need.
    capture_events: Vec<sys::CUevent>,
}

impl GraphCache {
    fn get(&self, graph: u64, version: u64) -> Option<sys::CUgraphExec> {
        self.execs
            .iter()
            .find(|e| e.graph == graph && e.version == version)
            .map(|e| e.exec)
    }

    /// Keeps `made` (a new capture), destroying its graph's older versions and the oldest
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

    /// How many captures were made, and how many versions updated an executable in place.
    pub(crate) fn counts(&self) -> (u64, u64) {
        (self.captures, self.updates)
    }

    /// Destroys every executable, the capture streams and their events (the context is idle).
    pub(crate) fn clear(&mut self) {
        self.execs.drain(..).for_each(Executable::destroy);
        for stream in self.capture_streams.drain(..) {
            // SAFETY: a stream of this context, which is idle; never used again.
            unsafe { sys::cuStreamDestroy_v2(stream) };
        }
        for event in self.capture_events.drain(..) {
            // SAFETY: an event of this context, used by no pending work; never used again.
            unsafe { sys::cuEventDestroy_v2(event) };
        }
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
                    let made = self.capture_graph(s, buffers, op)?;
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
    /// driver refuses (then the graph is captured afresh).
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

    /// Captures `op`'s launches on stream `s` into an executable graph.
    fn capture_graph(
        &mut self,
        s: usize,
        buffers: &[Region],
        op: &GraphReplay,
    ) -> Result<Executable, Error> {
        // Modules load outside the capture, and reads that were the stream's last work get their
        // events first (recorded into the capture, they would never pass).
        for launch in op.launches.iter() {
            self.kernels.function(launch.kernel, launch.mode, false)?;
        }
        self.work_stream(s);
        let lanes = op
            .launches
            .iter()
            .map(|l| usize::from(l.lane) + 1)
            .max()
            .unwrap_or(1);
        while self.graphs.capture_streams.len() < lanes {
            let mut stream = std::ptr::null_mut();
            let flags = sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32;
            // SAFETY: creates a stream of this context, destroyed by `GraphCache::clear`.
            let code = unsafe { sys::cuStreamCreate(&mut stream, flags) };
            if code != sys::CUresult::CUDA_SUCCESS {
                return Err(failed(self, s, "cuStreamCreate", code));
            }
            self.graphs.capture_streams.push(stream);
        }
        // The events a capture records: a fork, one per launch another lane follows, one join
        // per lane past the first.
        let targets = op.launches.iter().flat_map(|l| &l.after).count();
        while self.graphs.capture_events.len() < 1 + targets + lanes {
            let mut event = std::ptr::null_mut();
            let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
            // SAFETY: creates an event of this context, destroyed by `GraphCache::clear`.
            let code = unsafe { sys::cuEventCreate(&mut event, flags) };
            if code != sys::CUresult::CUDA_SUCCESS {
                return Err(failed(self, s, "cuEventCreate", code));
            }
            self.graphs.capture_events.push(event);
        }
        // The launches go to the capture streams in stream `s`'s place (the capture runs
        // nothing: the executable is launched on `s` after).
        let streams: SmallVec<[sys::CUstream; 4]> = self.graphs.capture_streams[..lanes]
            .iter()
            .copied()
            .collect();
        let events = self.graphs.capture_events.clone();
        self.capture_on(s, &streams, &events, buffers, op)
    }

    /// Captures `op`'s launches, made as stream `s`'s, each on the stream of its lane (`streams`,
    /// the first beginning and ending the capture), noting each launch's node. The other lanes
    /// fork from the first at the start, with no dependency; a launch waits for the launches of
    /// other lanes it follows (its `after`), and every lane joins the first at the end. `events`
    /// holds enough for a fork, one per followed launch and a join per lane.
    fn capture_on(
        &mut self,
        s: usize,
        streams: &[sys::CUstream],
        events: &[sys::CUevent],
        buffers: &[Region],
        op: &GraphReplay,
    ) -> Result<Executable, Error> {
        let origin = streams[0];
        // SAFETY: a stream of this context; the capture ends below on every path.
        let code = unsafe {
            sys::cuStreamBeginCapture_v2(
                origin,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
            )
        };
        if code != sys::CUresult::CUDA_SUCCESS {
            return Err(failed(self, s, "cuStreamBeginCapture", code));
        }
        let mut next_event = events.iter().copied();
        let mut captured = Ok(());
        // Record `event` on `from` and make `to` wait for it: inside the capture, an edge.
        let order = |event: Option<sys::CUevent>, from: sys::CUstream, to: sys::CUstream| {
            let Some(event) = event else {
                return sys::CUresult::CUDA_ERROR_INVALID_VALUE;
            };
            // SAFETY: an event and streams of this context, the streams in this capture.
            unsafe {
                match sys::cuEventRecord(event, from) {
                    sys::CUresult::CUDA_SUCCESS => sys::cuStreamWaitEvent(to, event, 0),
                    code => code,
                }
            }
        };
        if streams.len() > 1 {
            let fork = next_event.next();
            for &lane in &streams[1..] {
                let code = order(fork, origin, lane);
                if code != sys::CUresult::CUDA_SUCCESS {
                    captured = Err(failed(self, s, "the fork of a graph's lanes", code));
                }
            }
        }
        // For each launch another lane follows, the event recorded after it.
        let mut after_events: Vec<Option<sys::CUevent>> = vec![None; op.launches.len()];
        let followed: Vec<bool> = {
            let mut followed = vec![false; op.launches.len()];
            for &i in op.launches.iter().flat_map(|l| &l.after) {
                if let Some(f) = followed.get_mut(usize::from(i)) {
                    *f = true;
                }
            }
            followed
        };
        let mut nodes = Vec::with_capacity(op.launches.len());
        let mut last: SmallVec<[Option<sys::CUgraphNode>; 4]> =
            smallvec::smallvec![None; streams.len()];
        for (j, launch) in op.launches.iter().enumerate() {
            if captured.is_err() {
                break;
            }
            let lane = usize::from(launch.lane).min(streams.len() - 1);
            let stream = streams[lane];
            for &i in &launch.after {
                let event = after_events.get(usize::from(i)).copied().flatten();
                let code = match event {
                    // SAFETY: an event of this context recorded in this capture; a stream in it.
                    Some(event) => unsafe { sys::cuStreamWaitEvent(stream, event, 0) },
                    None => sys::CUresult::CUDA_ERROR_INVALID_VALUE,
                };
                if code != sys::CUresult::CUDA_SUCCESS {
                    captured = Err(failed(self, s, "a wait between a graph's lanes", code));
                }
            }
            if captured.is_err() {
                break;
            }
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
            // The node the launch added is what the lane's next work would depend on.
            let node = capture_tip(stream).filter(|&node| Some(node) != last[lane]);
            nodes.push(node);
            last[lane] = node.or(last[lane]);
            if followed[j] {
                let event = next_event.next();
                after_events[j] = event;
                let code = match event {
                    // SAFETY: an event of this context and a stream in this capture.
                    Some(event) => unsafe { sys::cuEventRecord(event, stream) },
                    None => sys::CUresult::CUDA_ERROR_INVALID_VALUE,
                };
                if code != sys::CUresult::CUDA_SUCCESS {
                    captured = Err(failed(self, s, "an event between a graph's lanes", code));
                }
            }
        }
        // Every lane joins the first, on every path: a capture left unjoined does not end.
        for &lane in streams.iter().skip(1) {
            let code = order(next_event.next(), lane, origin);
            if code != sys::CUresult::CUDA_SUCCESS && captured.is_ok() {
                captured = Err(failed(self, s, "the join of a graph's lanes", code));
            }
        }
        let stream = origin;
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
        // SAFETY: `graph` was just captured; the executable and the graph are kept in the cache
        // and destroyed together there (the graph's nodes name what an update changes).
        let code = unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0) };
        if code != sys::CUresult::CUDA_SUCCESS {
            // SAFETY: the graph just captured, used by nothing.
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
}

/// The node a capturing `stream`'s next work would depend on: the last one captured, when there
/// is exactly one.
fn capture_tip(stream: sys::CUstream) -> Option<sys::CUgraphNode> {
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let mut id = 0;
    let mut graph = std::ptr::null_mut();
    let mut deps: *const sys::CUgraphNode = std::ptr::null();
    let mut edges: *const sys::CUgraphEdgeData = std::ptr::null();
    let mut count = 0usize;
    // SAFETY: out-pointers only; `deps` points at driver memory valid until the stream's next
    // capture call, read at once below.
    let code = unsafe {
        sys::cuStreamGetCaptureInfo_v3(
            stream,
            &mut status,
            &mut id,
            &mut graph,
            &mut deps,
            &mut edges,
            &mut count,
        )
    };
    if code != sys::CUresult::CUDA_SUCCESS || count != 1 || deps.is_null() {
        return None;
    }
    // SAFETY: the driver reported one dependency at `deps`.
    Some(unsafe { *deps })
}

/// Whether `work` is a [`GraphReplay`], and it if so.
pub(crate) fn as_graph_replay(work: &NativeWork) -> Option<&GraphReplay> {
    work.as_any().downcast_ref::<GraphReplay>()
}
