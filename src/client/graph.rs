//! Capture and replay (issue 28): [`ComputeClient::capture`] runs a closure's work once and keeps
//! the launches, writes and flushes it queued as a [`Graph`]; [`Graph::replay`] queues them
//! again as one command. What a graph uses stays allocated while it lives, whatever the user
//! drops; scalars and written bytes change between replays through [`Graph::set_scalar_u32`],
//! [`Graph::set_scalar_f32`] and [`Graph::set_data`]; a read, a sync or a collective inside a
//! capture is a typed error. `gpuworld_systems::graph` has the recording and the pins.

use super::ComputeClient;
use gpuworld_systems::error::{Error, GraphError};
use gpuworld_systems::graph::{CaptureOrder, Captured, CapturedTransfer, Recording};
use gpuworld_systems::inbox::{Command, Op, PinHolder};
use gpuworld_systems::kernel::Elem;
use gpuworld_systems::{Backend, HandleId, Result};
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Numbers graphs for traces.
static NEXT_GRAPH: AtomicU64 = AtomicU64::new(1);

/// Work captured from one client's runtime (or several, [`Graph::capture_group`]), to be
/// replayed as one unit. Holds every buffer its commands use until it is dropped.
pub struct Graph<B: Backend> {
    /// The runtimes it replays on, one client each; the capturing one first.
    clients: Vec<ComputeClient<B>>,
    id: u64,
    /// Its commands, in the order they were issued across runtimes, as a replay issues them:
    /// every command is in one part.
    parts: Vec<Part>,
    /// How many commands.
    len: usize,
    /// The handles pinned, by index into `clients`.
    pinned: Vec<(usize, HandleId)>,
}

/// A run of a graph's commands that a replay issues at once.
#[derive(Debug)]
enum Part {
    /// Consecutive commands of one runtime: one replay command there.
    Replay {
        /// Index into the graph's clients.
        client: usize,
        /// Its number, for the runtime's plans and traces: the graph's own for the first part.
        id: u64,
        /// Which of the graph's commands (their indices, for updates).
        nodes: Range<usize>,
        /// Updates made to those commands: a replay carries it, so a backend's compiled form
        /// of an older version is never launched (an update elsewhere leaves it as it is).
        version: u64,
        /// Those commands' ops.
        ops: Arc<Vec<Op>>,
    },
    /// A transfer to another runtime, which its target issues.
    Transfer(CapturedTransfer),
}

impl<B: Backend> std::fmt::Debug for Graph<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph")
            .field("id", &self.id)
            .field("runtimes", &self.clients.len())
            .field("commands", &self.len)
            .field("buffers", &self.pinned.len())
            .finish()
    }
}

impl<B: Backend> ComputeClient<B> {
    /// Runs `record` once on this client and captures the launches, writes, flushes and
    /// transfers to other runtimes (`to_client_into`) it queues from this thread (on this
    /// client's stream or others', through clones made with `with_stream`) into a [`Graph`]. The
    /// run is the warm-up: buffers it creates are made now and kept by the graph, so a replay
    /// allocates nothing. A `read`, `sync`, `mark`, collective or transfer from another runtime
    /// into this one inside `record` fails with `GraphError::NotCapturable` (the read or sync
    /// itself returns it, and so does the capture); so does an error `record` returns. One
    /// capture at a time per runtime: `GraphError::NestedCapture` otherwise.
    ///
    /// ```
    /// use gpuworld::{library, Bindings, CubeCount, Driver};
    ///
    /// let client = gpuworld::cpu_client(Driver::DeviceThread)?;
    /// let x = client.create_from_pod(&[1.0f32; 256]);
    /// let graph = client.capture(|c| {
    ///     let bindings = Bindings::new().buffer(&x).buffer(&x).buffer(&x);
    ///     c.launch(&library::ADD, CubeCount::new_1d(1), bindings)
    /// })?;
    /// graph.replay()?;
    /// graph.replay()?;
    /// // The capture's run and two replays: 1 -> 2 -> 4 -> 8.
    /// assert_eq!(client.read_one_as::<f32>(&x)?[0], 8.0);
    /// # Ok::<(), gpuworld::Error>(())
    /// ```
    pub fn capture(
        &self,
        record: impl FnOnce(&ComputeClient<B>) -> Result<()>,
    ) -> Result<Graph<B>> {
        Graph::capture_group(std::slice::from_ref(self), |clients| record(&clients[0]))
    }
}

impl<B: Backend> Graph<B> {
    /// Runs `record` once over `clients` (runtimes of one backend, such as the devices of a
    /// split run) and captures what it queues on all of them from this thread, as
    /// [`ComputeClient::capture`] does on one, into one graph: a replay issues the commands in
    /// the order `record` issued them across the runtimes, each runtime's consecutive commands
    /// as one replay command there, and each transfer between them (`to_client_into`, peer
    /// copies on CUDA) as `to_client_into` would. Clients of one runtime count once.
    ///
    /// ```
    /// use gpuworld::{Bindings, CubeCount, Driver, Graph, library};
    ///
    /// let a = gpuworld::cpu_client(Driver::DeviceThread)?;
    /// let b = gpuworld::cpu_client(Driver::DeviceThread)?;
    /// let (x, y) = (a.create_from_pod(&[1.0f32; 64]), b.create_from_pod(&[0.0f32; 64]));
    /// let step = Graph::capture_group(&[a.clone(), b.clone()], |clients| {
    ///     let doubled = Bindings::new().buffer(&x).buffer(&x).buffer(&x);
    ///     clients[0].launch(&library::ADD, CubeCount::new_1d(1), doubled)?;
    ///     clients[0].to_client_into(&x, &clients[1], &y)
    /// })?;
    /// step.replay()?;
    /// assert_eq!(b.read_one_as::<f32>(&y)?[0], 4.0);
    /// # Ok::<(), gpuworld::Error>(())
    /// ```
    pub fn capture_group(
        clients: &[ComputeClient<B>],
        record: impl FnOnce(&[ComputeClient<B>]) -> Result<()>,
    ) -> Result<Graph<B>> {
        let mut runtimes: Vec<ComputeClient<B>> = Vec::with_capacity(clients.len());
        for client in clients {
            if !runtimes.iter().any(|c| c.shared.id == client.shared.id) {
                runtimes.push(client.held_by_graph());
            }
        }
        let order = CaptureOrder::default();
        for (opened, client) in runtimes.iter().enumerate() {
            if let Err(error) = client.shared.inbox.begin_ordered_capture(order.clone()) {
                for client in &runtimes[..opened] {
                    if let Some(recording) = client.shared.inbox.end_capture() {
                        unpin_recorded(client, &recording.pinned);
                    }
                }
                return Err(error);
            }
        }
        let result = record(clients);
        let mut recordings = Vec::with_capacity(runtimes.len());
        let mut nested = false;
        for client in &runtimes {
            match client.shared.inbox.end_capture() {
                Some(recording) => recordings.push(recording),
                None => nested = true,
            }
        }
        let refused = recordings.iter_mut().find_map(|r| r.refused.take());
        // A failed capture drops the graph, whose pins go with it.
        let graph = Graph::from_recordings(runtimes, recordings);
        if nested {
            return Err(Error::Graph(GraphError::NestedCapture));
        }
        if let Some(refused) = refused {
            return Err(refused);
        }
        result?;
        tracing::debug!(target: "gpuworld::graph", graph = graph.id, runtimes = graph.clients.len(), commands = graph.len, buffers = graph.pinned.len(), "captured");
        Ok(graph)
    }

    /// The graph of `recordings` (one per client, in order), their commands merged in the
    /// order they were issued.
    fn from_recordings(clients: Vec<ComputeClient<B>>, recordings: Vec<Recording>) -> Graph<B> {
        let mut merged: Vec<(u64, usize, Captured)> = Vec::new();
        let mut pinned = Vec::new();
        for (client, recording) in recordings.into_iter().enumerate() {
            pinned.extend(recording.pinned.iter().map(|&handle| (client, handle)));
            let numbered = recording.order.into_iter().zip(recording.commands);
            merged.extend(numbered.map(|(number, command)| (number, client, command)));
        }
        merged.sort_by_key(|(number, ..)| *number);
        let len = merged.len();
        let id = NEXT_GRAPH.fetch_add(1, Ordering::Relaxed);
        let parts = Graph::<B>::parts(id, merged.into_iter().map(|(_, client, c)| (client, c)));
        Graph {
            clients,
            id,
            parts,
            len,
            pinned,
        }
    }

    /// How a replay issues `commands`, each with the runtime it was issued on: runs of one
    /// runtime's ops between transfers as replay commands, the graph's first with the graph's
    /// number.
    fn parts(id: u64, commands: impl Iterator<Item = (usize, Captured)>) -> Vec<Part> {
        let (mut parts, mut own_id) = (Vec::<Part>::new(), Some(id));
        for (node, (owner, command)) in commands.enumerate() {
            let op = match command {
                Captured::Transfer(transfer) => {
                    parts.push(Part::Transfer(transfer));
                    continue;
                }
                Captured::Op(op) => op,
            };
            if let Some(Part::Replay {
                client, nodes, ops, ..
            }) = parts.last_mut()
                && *client == owner
            {
                nodes.end = node + 1;
                Arc::make_mut(ops).push(op);
                continue;
            }
            parts.push(Part::Replay {
                client: owner,
                id: own_id
                    .take()
                    .unwrap_or_else(|| NEXT_GRAPH.fetch_add(1, Ordering::Relaxed)),
                nodes: node..node + 1,
                version: 0,
                ops: Arc::new(vec![op]),
            });
        }
        parts
    }

    /// The graph's commands, in order.
    fn nodes(&self) -> impl Iterator<Item = Node<'_>> {
        self.parts
            .iter()
            .flat_map(|part| -> Box<dyn Iterator<Item = Node<'_>> + '_> {
                match part {
                    Part::Replay { ops, .. } => Box::new(ops.iter().map(Node::Op)),
                    Part::Transfer(transfer) => Box::new(std::iter::once(Node::Transfer(transfer))),
                }
            })
    }

    /// Command `node`, what it is (for errors), and, for an op, the op to update with the
    /// version of the part replaying it, which an update bumps (a replay carries it, so no
    /// backend's compiled form of the old op is launched).
    fn node_mut(&mut self, node: usize) -> (&'static str, Option<(&mut Op, &mut u64)>) {
        let kind = self.nodes().nth(node).map_or("none", |n| n.kind());
        for part in &mut self.parts {
            if let Part::Replay {
                nodes,
                ops,
                version,
                ..
            } = part
                && nodes.contains(&node)
            {
                let op = Arc::make_mut(ops).get_mut(node - nodes.start);
                return (kind, op.map(|op| (op, version)));
            }
        }
        (kind, None)
    }

    /// Whether the graph's commands are `recorded`, one for one.
    fn same_as(&self, recorded: &[Captured]) -> bool {
        self.len == recorded.len()
            && self
                .nodes()
                .zip(recorded)
                .all(|(node, recorded)| match (node, recorded) {
                    (Node::Op(op), Captured::Op(other)) => op == other,
                    (Node::Transfer(transfer), Captured::Transfer(other)) => transfer == other,
                    _ => false,
                })
    }

    /// The graph's commands, as a capture records them.
    fn captured(&self) -> Vec<Captured> {
        (self.nodes())
            .map(|node| match node {
                Node::Op(op) => Captured::Op(op.clone()),
                Node::Transfer(transfer) => Captured::Transfer(transfer.clone()),
            })
            .collect()
    }

    /// Queues the captured commands again, in order: on each runtime, its commands between two
    /// transfers as one command, after everything queued before it on their streams and before
    /// everything queued after; each transfer as `to_client_into` queues it. Only enqueues,
    /// like a launch (under `Driver::Manual` the next tick runs it).
    /// [`GraphError::NoClientLeft`] when a user holds no client of a runtime it replays on (the
    /// graph's own clones keep the runtime alive, but nothing could read the result).
    pub fn replay(&self) -> Result<()> {
        if let Some(orphan) = self.clients.iter().find(|c| !c.has_user_client()) {
            return Err(Error::Graph(GraphError::NoClientLeft {
                runtime: orphan.shared.id,
            }));
        }
        for part in &self.parts {
            match part {
                Part::Replay {
                    client,
                    id,
                    ops,
                    version,
                    ..
                } => {
                    let client = &self.clients[*client];
                    client.make_room();
                    client.shared.inbox.push(Command::Replay {
                        graph: *id,
                        version: *version,
                        ops: ops.clone(),
                    });
                }
                Part::Transfer(transfer) => transfer.target.issue()?,
            }
        }
        Ok(())
    }

    /// How many commands the graph holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the capture queued nothing.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// One line per captured command, in order: what a replay issues.
    pub fn commands(&self) -> Vec<String> {
        self.nodes()
            .enumerate()
            .map(|(i, command)| format!("{i}: {}", command.describe()))
            .collect()
    }

    /// How many buffers the graph holds, on the runtimes it replays on and those its transfers
    /// write to.
    pub fn buffers(&self) -> usize {
        let mut held = rustc_hash::FxHashSet::default();
        for &(client, handle) in &self.pinned {
            held.insert((self.clients[client].shared.id, handle));
        }
        for part in &self.parts {
            if let Part::Transfer(CapturedTransfer { target, .. }) = part {
                let (runtime, range) = target.destination();
                held.insert((runtime, range.handle()));
            }
        }
        held.len()
    }

    /// Sets scalar `index` of launch `node` (an index into [`Graph::commands`]) to `value` for
    /// the replays that follow; the kernel must declare it `u32`.
    pub fn set_scalar_u32(&mut self, node: usize, index: usize, value: u32) -> Result<()> {
        self.set_scalar(node, index, Elem::U32, value)
    }

    /// Sets scalar `index` of launch `node` to `value`; the kernel must declare it `i32`.
    pub fn set_scalar_i32(&mut self, node: usize, index: usize, value: i32) -> Result<()> {
        self.set_scalar(node, index, Elem::I32, value as u32)
    }

    /// Sets scalar `index` of launch `node` to `value`; the kernel must declare it `f32`.
    pub fn set_scalar_f32(&mut self, node: usize, index: usize, value: f32) -> Result<()> {
        self.set_scalar(node, index, Elem::F32, value.to_bits())
    }

    fn set_scalar(&mut self, node: usize, index: usize, elem: Elem, bits: u32) -> Result<()> {
        let nodes = self.len;
        let refused = |reason: String| {
            Error::Graph(GraphError::UpdateRefused {
                node,
                reason: reason.into(),
            })
        };
        let (found, op) = self.node_mut(node);
        let Some((Op::Launch(launch), version)) = op else {
            return Err(Error::Graph(GraphError::NoSuchNode {
                node,
                wanted: "a launch",
                nodes,
                found,
            }));
        };
        let kernel = launch.kernel();
        let Some(scalars) = launch.scalars_mut() else {
            return Err(refused(format!(
                "{} was launched unchecked: its safety was vouched for the captured scalars",
                kernel.name
            )));
        };
        let Some(slot) = scalars.get_mut(index) else {
            return Err(refused(format!(
                "{} has {} scalars, not {}",
                kernel.name,
                scalars.len(),
                index + 1
            )));
        };
        if let Some(param) = kernel.signature.scalars.get(index)
            && param.elem != elem
        {
            return Err(refused(format!(
                "scalar {index} of {} (`{}`) is {:?}, not {elem:?}",
                kernel.name, param.name, param.elem
            )));
        }
        *slot = bits;
        *version += 1;
        Ok(())
    }

    /// Replaces the bytes write `node` copies (a `write`, or a creation's initial contents)
    /// for the replays that follow; `bytes` must have the captured length.
    pub fn set_data(&mut self, node: usize, bytes: &[u8]) -> Result<()> {
        let nodes = self.len;
        let (found, op) = self.node_mut(node);
        let Some((Op::Write { data, .. }, version)) = op else {
            return Err(Error::Graph(GraphError::NoSuchNode {
                node,
                wanted: "a write",
                nodes,
                found,
            }));
        };
        if data.len() != bytes.len() {
            return Err(Error::Graph(GraphError::UpdateRefused {
                node,
                reason: format!(
                    "the write was captured with {} bytes, not {}",
                    data.len(),
                    bytes.len()
                )
                .into(),
            }));
        }
        *data = gpuworld_systems::HostBytes::from_vec(bytes.to_vec());
        *version += 1;
        Ok(())
    }
}

impl<B: Backend> Drop for Graph<B> {
    /// Lets go of the graph's buffers: those the user released already go back to the pool.
    fn drop(&mut self) {
        for &(client, handle) in &self.pinned {
            if let Some(client) = self.clients.get(client) {
                client.shared.inbox.push(Command::Op(Op::Unpin {
                    handle,
                    holder: PinHolder::Graph,
                }));
            }
        }
    }
}

/// One of a graph's commands.
enum Node<'a> {
    /// An op its runtime replays.
    Op(&'a Op),
    /// A transfer to another runtime.
    Transfer(&'a CapturedTransfer),
}

impl Node<'_> {
    /// What it is, for listings.
    fn kind(&self) -> &'static str {
        match self {
            Node::Op(op) => op.kind(),
            Node::Transfer(_) => "transfer",
        }
    }

    /// A one-line description.
    fn describe(&self) -> String {
        match self {
            Node::Op(op) => op.describe(),
            Node::Transfer(transfer) => Captured::Transfer((*transfer).clone()).describe(),
        }
    }
}

/// Lets go of pins a capture made on `client` that no graph took over.
fn unpin_recorded<B: Backend>(client: &ComputeClient<B>, pinned: &[HandleId]) {
    for &handle in pinned {
        client.shared.inbox.push(Command::Op(Op::Unpin {
            handle,
            holder: PinHolder::Graph,
        }));
    }
}

/// How [`FrameGraph::run`] ran a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameMode {
    /// Eagerly, recorded to compare with the frames before.
    Eager,
    /// Eagerly, and the frame became the graph later frames replay.
    Captured,
    /// As one replay of the graph: the frame queued the same work as the captured one.
    Replayed,
    /// Eagerly, because the frame's work differed from the graph's (which is dropped).
    Changed,
}

/// A frame that captures itself once it repeats: opt-in replay for a loop (a game's frame, a
/// simulation's step) that issues the same work most of the time. After `after` frames in a row
/// queued the same commands (same kernels, bindings, scalars and bytes), the last one is kept as
/// a [`Graph`]; from then on each frame's closure runs in a dry capture (recorded, not queued),
/// and a frame that matches the graph is queued as one replay, while one that differs is queued
/// eagerly as recorded and the graph is dropped (capturing again after `after` identical frames).
/// The closure runs every frame: the frame decides, the graph only saves its submission.
pub struct FrameGraph<B: Backend> {
    client: ComputeClient<B>,
    after: u32,
    previous: Option<Vec<Captured>>,
    same: u32,
    graph: Option<Graph<B>>,
}

impl<B: Backend> std::fmt::Debug for FrameGraph<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameGraph")
            .field("after", &self.after)
            .field("same", &self.same)
            .field("graph", &self.graph)
            .finish()
    }
}

impl<B: Backend> FrameGraph<B> {
    /// Frames of `client`'s runtime, captured after `after` identical ones (at least 1).
    pub fn new(client: &ComputeClient<B>, after: u32) -> FrameGraph<B> {
        FrameGraph {
            client: client.clone(),
            after: after.max(1),
            previous: None,
            same: 0,
            graph: None,
        }
    }

    /// The graph frames are replayed from, once there is one.
    pub fn graph(&self) -> Option<&Graph<B>> {
        self.graph.as_ref()
    }

    /// Runs one frame: `frame` queues its work on the client it is given (this thread's calls
    /// only; reads and syncs inside are refused as in [`ComputeClient::capture`]).
    pub fn run(
        &mut self,
        frame: impl FnOnce(&ComputeClient<B>) -> Result<()>,
    ) -> Result<FrameMode> {
        let Some(graph) = &self.graph else {
            return self.run_eager(frame);
        };
        let inbox = &self.client.shared.inbox;
        inbox.begin_dry_capture()?;
        let result = frame(&self.client);
        let Some(recording) = inbox.end_capture() else {
            return Err(Error::Graph(GraphError::NestedCapture));
        };
        // The dry recording's pins are not needed: the graph holds what it replays, and eager
        // commands hold nothing past their run.
        let unpin = |pinned: &[HandleId]| {
            for &handle in pinned {
                inbox.push(Command::Op(Op::Unpin {
                    handle,
                    holder: PinHolder::Graph,
                }));
            }
        };
        if let Some(refused) = recording.refused {
            unpin(&recording.pinned);
            return Err(refused);
        }
        if let Err(error) = result {
            unpin(&recording.pinned);
            return Err(error);
        }
        if graph.same_as(&recording.commands) {
            graph.replay()?;
            unpin(&recording.pinned);
            return Ok(FrameMode::Replayed);
        }
        tracing::debug!(target: "gpuworld::graph", graph = graph.id, "the frame changed: eager until it repeats");
        let mut issued = Ok(());
        for command in recording.commands.iter().cloned() {
            self.client.make_room();
            match command {
                Captured::Transfer(CapturedTransfer { target, .. }) => {
                    issued = issued.and_then(|()| target.issue());
                }
                Captured::Op(op) => inbox.push(Command::Op(op)),
            }
        }
        unpin(&recording.pinned);
        self.graph = None;
        self.previous = Some(recording.commands);
        self.same = 1;
        issued.map(|()| FrameMode::Changed)
    }

    fn run_eager(
        &mut self,
        frame: impl FnOnce(&ComputeClient<B>) -> Result<()>,
    ) -> Result<FrameMode> {
        let graph = self.client.capture(frame)?;
        let repeated = self
            .previous
            .as_ref()
            .is_some_and(|previous| graph.same_as(previous));
        self.same = if repeated { self.same + 1 } else { 1 };
        if self.same >= self.after {
            self.previous = None;
            self.graph = Some(graph);
            return Ok(FrameMode::Captured);
        }
        self.previous = Some(graph.captured());
        Ok(FrameMode::Eager)
    }
}
