//! The collectives and transfers of a process group. Each collective is one exchange through
//! rank 0 (a star): every rank sends its bytes (or the failure that kept it from having them),
//! rank 0 combines them in rank order and sends each rank its share (or the failure, so every
//! rank returns the same error). A refused argument leaves the ranks in step; a lost connection
//! makes every later call that needs it fail at once. The collectives differ only in what a
//! [`Collective`] says (checks, device op, what a rank sends, rank 0's combine step); they run
//! through one wrapper, [`ProcessGroup::collective`].

use super::wire::{Failure, Tag};
use super::{Link, ProcessGroup};
use crate::ComputeClient;
use crate::collective::{self, ElemType, ReduceOp, mismatch, reduce_host, whole_elements};
use gpuworld_systems::cross_device::CollectiveOp;
use gpuworld_systems::{Backend, Binding, Result};
use smallvec::smallvec;

/// Rank 0's combine step: every rank's bytes, in rank order, to each rank's share.
type Combine<'a> = Box<dyn FnOnce(&[Vec<u8>]) -> Result<Vec<Vec<u8>>> + 'a>;

/// What sets one collective apart; [`ProcessGroup::collective`] and
/// [`ProcessGroup::collective_bytes`] are the one way every collective runs.
trait Collective: Copy + 'static {
    /// The call's name, in errors.
    const NAME: &'static str;
    /// The tag of its frames.
    const TAG: Tag;
    /// Whether it works in place, on one buffer (its input is its output).
    const IN_PLACE: bool;
    /// What every rank checks alike before anything is exchanged (a refusal leaves the ranks
    /// in step without an exchange).
    fn refused(&self, _world: usize) -> Result<()> {
        Ok(())
    }
    /// Whether this rank's buffers fit the call (a refusal is sent, so every rank fails alike).
    fn fits(&self, _group: &ProcessGroup, _input: Binding, _output: Binding) -> Result<()> {
        Ok(())
    }
    /// On the devices: what else the buffers must be, the op, and the call's shape checked
    /// across ranks.
    fn on_device(&self, input: Binding, output: Binding) -> (Result<()>, CollectiveOp, Vec<u8>);
    /// What this rank sends: its input's bytes (`read`), by default.
    fn mine(
        &self,
        _rank: usize,
        read: impl FnOnce() -> Result<Vec<u8>>,
        _size: u64,
    ) -> Result<Vec<u8>> {
        read()
    }
    /// Rank 0's combine step: every rank's bytes, in rank order, to each rank's share.
    fn combine(self, world: usize, inputs: &[Vec<u8>]) -> Result<Vec<Vec<u8>>>;
    /// Whether rank `rank` takes its share (a broadcast's root keeps its own bytes).
    fn takes_share(&self, _rank: usize) -> bool {
        true
    }
}

/// [`ProcessGroup::all_reduce`].
#[derive(Clone, Copy)]
struct AllReduce {
    elem: ElemType,
    op: ReduceOp,
}

impl Collective for AllReduce {
    const NAME: &'static str = "all_reduce";
    const TAG: Tag = Tag::AllReduce;
    const IN_PLACE: bool = true;

    fn on_device(&self, buffer: Binding, _: Binding) -> (Result<()>, CollectiveOp, Vec<u8>) {
        let (elem, op) = (self.elem, self.op);
        let fits = whole_elements(Self::NAME, buffer.size(), elem);
        let count = buffer.size() as usize / elem.size();
        let shape = shape(b'a', format!("{elem:?}{op:?}"), &[buffer.size()]);
        (fits, CollectiveOp::AllReduce { elem, op, count }, shape)
    }

    fn combine(self, world: usize, inputs: &[Vec<u8>]) -> Result<Vec<Vec<u8>>> {
        same_sizes(Self::NAME, inputs)?;
        whole_elements(Self::NAME, inputs[0].len() as u64, self.elem)?;
        let slices: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
        Ok(vec![reduce_host(&slices, self.elem, self.op)?; world])
    }
}

/// [`ProcessGroup::broadcast`]: the root sends its bytes, every other rank its size, so rank 0
/// can check they fit.
#[derive(Clone, Copy)]
struct Broadcast {
    root: usize,
}

impl Collective for Broadcast {
    const NAME: &'static str = "broadcast";
    const TAG: Tag = Tag::Broadcast;
    const IN_PLACE: bool = true;

    fn refused(&self, world: usize) -> Result<()> {
        let root = self.root;
        if root >= world {
            return Err(mismatch(
                Self::NAME,
                format!("root {root} in a group of {world}"),
            ));
        }
        Ok(())
    }

    fn on_device(&self, buffer: Binding, _: Binding) -> (Result<()>, CollectiveOp, Vec<u8>) {
        let (root, bytes) = (self.root, buffer.size() as usize);
        let shape = shape(b'b', root.to_string(), &[buffer.size()]);
        (Ok(()), CollectiveOp::Broadcast { root, bytes }, shape)
    }

    fn mine(
        &self,
        rank: usize,
        read: impl FnOnce() -> Result<Vec<u8>>,
        size: u64,
    ) -> Result<Vec<u8>> {
        match rank == self.root {
            true => read(),
            false => Ok(size.to_le_bytes().to_vec()),
        }
    }

    fn combine(self, world: usize, inputs: &[Vec<u8>]) -> Result<Vec<Vec<u8>>> {
        let root = self.root;
        let data = &inputs[root];
        for (rank, input) in inputs.iter().enumerate().filter(|(r, _)| *r != root) {
            let size = <[u8; 8]>::try_from(input.as_slice())
                .ok()
                .map(u64::from_le_bytes);
            if size != Some(data.len() as u64) {
                return Err(mismatch(
                    Self::NAME,
                    format!(
                        "root {root} has {} bytes, rank {rank} has {}",
                        data.len(),
                        size.map_or("a malformed size".into(), |s| s.to_string())
                    ),
                ));
            }
        }
        Ok((0..world)
            .map(|r| if r == root { Vec::new() } else { data.clone() })
            .collect())
    }

    fn takes_share(&self, rank: usize) -> bool {
        rank != self.root
    }
}

/// [`ProcessGroup::all_gather`].
#[derive(Clone, Copy)]
struct AllGather;

impl Collective for AllGather {
    const NAME: &'static str = "all_gather";
    const TAG: Tag = Tag::AllGather;
    const IN_PLACE: bool = false;

    fn fits(&self, group: &ProcessGroup, input: Binding, output: Binding) -> Result<()> {
        let total = input.size() * group.world_size() as u64;
        if output.size() != total {
            return Err(mismatch(
                Self::NAME,
                format!(
                    "output of rank {} has {} bytes, not {} ranks x {} bytes = {total}",
                    group.rank(),
                    output.size(),
                    group.world_size(),
                    input.size()
                ),
            ));
        }
        Ok(())
    }

    fn on_device(&self, input: Binding, output: Binding) -> (Result<()>, CollectiveOp, Vec<u8>) {
        let bytes = input.size() as usize;
        let shape = shape(b'g', String::new(), &[input.size(), output.size()]);
        (Ok(()), CollectiveOp::AllGather { bytes }, shape)
    }

    fn combine(self, world: usize, inputs: &[Vec<u8>]) -> Result<Vec<Vec<u8>>> {
        same_sizes(Self::NAME, inputs)?;
        Ok(vec![inputs.concat(); world])
    }
}

/// [`ProcessGroup::reduce_scatter`].
#[derive(Clone, Copy)]
struct ReduceScatter {
    elem: ElemType,
    op: ReduceOp,
}

impl Collective for ReduceScatter {
    const NAME: &'static str = "reduce_scatter";
    const TAG: Tag = Tag::ReduceScatter;
    const IN_PLACE: bool = false;

    fn fits(&self, group: &ProcessGroup, input: Binding, output: Binding) -> Result<()> {
        let world = group.world_size() as u64;
        if output.size() * world != input.size() {
            return Err(mismatch(
                Self::NAME,
                format!(
                    "output of rank {} has {} bytes, not a {world}th of its input's {}",
                    group.rank(),
                    output.size(),
                    input.size()
                ),
            ));
        }
        Ok(())
    }

    fn on_device(&self, input: Binding, output: Binding) -> (Result<()>, CollectiveOp, Vec<u8>) {
        let (elem, op) = (self.elem, self.op);
        let fits = whole_elements(Self::NAME, output.size(), elem);
        let count = output.size() as usize / elem.size();
        let shape = shape(
            b'r',
            format!("{elem:?}{op:?}"),
            &[input.size(), output.size()],
        );
        (fits, CollectiveOp::ReduceScatter { elem, op, count }, shape)
    }

    fn combine(self, world: usize, inputs: &[Vec<u8>]) -> Result<Vec<Vec<u8>>> {
        same_sizes(Self::NAME, inputs)?;
        let len = inputs[0].len();
        if !len.is_multiple_of(world) {
            return Err(mismatch(
                Self::NAME,
                format!("inputs of {len} bytes do not split into {world} parts"),
            ));
        }
        let part = len / world;
        whole_elements(Self::NAME, part as u64, self.elem)?;
        let slices: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
        let reduced = reduce_host(&slices, self.elem, self.op)?;
        Ok(reduced
            .chunks(part.max(1))
            .map(<[u8]>::to_vec)
            .chain(std::iter::repeat(Vec::new()))
            .take(world)
            .collect())
    }
}

impl ProcessGroup {
    /// Replaces `buffer` on every rank with the element-wise `op` of every rank's `buffer`,
    /// reduced in rank order as [`crate::collective::Group::all_reduce`] does. Blocks until
    /// this rank's result is written (queued on the client's stream).
    pub fn all_reduce<B: Backend>(
        &mut self,
        client: &ComputeClient<B>,
        buffer: impl Into<Binding>,
        elem: ElemType,
        op: ReduceOp,
    ) -> Result<()> {
        let buffer = buffer.into();
        self.collective(client, AllReduce { elem, op }, buffer, buffer)
    }

    /// The element-wise `op` of every rank's `bytes`, in rank order.
    pub fn all_reduce_bytes(
        &mut self,
        bytes: &[u8],
        elem: ElemType,
        op: ReduceOp,
    ) -> Result<Vec<u8>> {
        self.collective_bytes(AllReduce { elem, op }, bytes)
    }

    /// Copies rank `root`'s `buffer` into every other rank's `buffer` (all the same size).
    pub fn broadcast<B: Backend>(
        &mut self,
        client: &ComputeClient<B>,
        buffer: impl Into<Binding>,
        root: usize,
    ) -> Result<()> {
        let buffer = buffer.into();
        self.collective(client, Broadcast { root }, buffer, buffer)
    }

    /// Rank `root`'s `bytes` on every rank (the others' `bytes` give only the size they expect).
    pub fn broadcast_bytes(&mut self, bytes: &[u8], root: usize) -> Result<Vec<u8>> {
        self.collective_bytes(Broadcast { root }, bytes)
    }

    /// Writes every rank's `input`, concatenated in rank order, into each rank's `output`,
    /// which holds `world_size()` inputs.
    pub fn all_gather<B: Backend>(
        &mut self,
        client: &ComputeClient<B>,
        input: impl Into<Binding>,
        output: impl Into<Binding>,
    ) -> Result<()> {
        self.collective(client, AllGather, input.into(), output.into())
    }

    /// Every rank's `bytes`, concatenated in rank order.
    pub fn all_gather_bytes(&mut self, bytes: &[u8]) -> Result<Vec<u8>> {
        self.collective_bytes(AllGather, bytes)
    }

    /// Reduces every rank's `input` element-wise with `op` (in rank order) and writes part
    /// `rank` of the result (a `world_size()`-th of it) into `output`.
    pub fn reduce_scatter<B: Backend>(
        &mut self,
        client: &ComputeClient<B>,
        input: impl Into<Binding>,
        output: impl Into<Binding>,
        elem: ElemType,
        op: ReduceOp,
    ) -> Result<()> {
        let collective = ReduceScatter { elem, op };
        self.collective(client, collective, input.into(), output.into())
    }

    /// Part `rank` of the element-wise `op` of every rank's `bytes`.
    pub fn reduce_scatter_bytes(
        &mut self,
        bytes: &[u8],
        elem: ElemType,
        op: ReduceOp,
    ) -> Result<Vec<u8>> {
        self.collective_bytes(ReduceScatter { elem, op }, bytes)
    }

    /// Runs `collective` over this rank's `input` into its `output` (one buffer for both where
    /// it works in place): on the devices where the group runs there, else through rank 0,
    /// reading `input` and writing this rank's share into `output`.
    fn collective<B: Backend, C: Collective>(
        &mut self,
        client: &ComputeClient<B>,
        collective: C,
        input: Binding,
        output: Binding,
    ) -> Result<()> {
        let refused = collective.refused(self.world_size());
        let fits = collective.fits(self, input, output);
        if let Some(on_device) = self.on_device(client)? {
            let (also, op, shape) = collective.on_device(input, output);
            let fits = refused.and(fits).and(also);
            let buffers = match C::IN_PLACE {
                true => smallvec![input],
                false => smallvec![input, output],
            };
            return self.run_on_device(client, &*on_device, op, shape, fits, buffers);
        }
        refused?;
        let rank = self.rank();
        let mine = fits.and_then(|()| collective.mine(rank, || read(client, input), input.size()));
        let share = self.exchange_of(collective, mine)?;
        if collective.takes_share(rank) {
            client.write(output, &share)?;
        }
        Ok(())
    }

    /// Runs `collective` over this rank's `bytes` through rank 0: this rank's share (a
    /// broadcast's root keeps its own bytes).
    fn collective_bytes<C: Collective>(&mut self, collective: C, bytes: &[u8]) -> Result<Vec<u8>> {
        collective.refused(self.world_size())?;
        let size = bytes.len() as u64;
        let mine = collective.mine(self.rank(), || Ok(bytes.to_vec()), size);
        let share = self.exchange_of(collective, mine)?;
        Ok(match collective.takes_share(self.rank()) {
            true => share,
            false => bytes.to_vec(),
        })
    }

    /// One exchange of `collective` through rank 0, this rank sending `mine`.
    fn exchange_of<C: Collective>(
        &mut self,
        collective: C,
        mine: Result<Vec<u8>>,
    ) -> Result<Vec<u8>> {
        let world = self.world_size();
        let combine: Combine<'_> =
            Box::new(move |inputs: &[Vec<u8>]| collective.combine(world, inputs));
        self.exchange(C::NAME, C::TAG, mine, combine)
    }

    /// Sends `buffer` to rank `to`, which takes it with [`ProcessGroup::recv`]. Returns once the
    /// bytes are handed to the socket: a pair of ranks sending each other large buffers at once
    /// can fill both sockets, so pair them (even ranks send first).
    pub fn send<B: Backend>(
        &mut self,
        client: &ComputeClient<B>,
        buffer: impl Into<Binding>,
        to: usize,
    ) -> Result<()> {
        self.check_peer("send", to)?;
        let buffer = buffer.into();
        if let Some(on_device) = self.on_device(client)? {
            return self.exchange_on_device(client, &*on_device, &[(buffer, to)], &[]);
        }
        match read(client, buffer) {
            Ok(bytes) => self.send_bytes(&bytes, to),
            Err(error) => {
                // The receiver hears why nothing comes, instead of waiting out its timeout.
                let failure = Failure::of(&error, self.rank()).encode();
                let peer = self.peer(to)?;
                if let Err(lost) = peer.send(Tag::Failed, &failure) {
                    self.lose(to, lost);
                }
                Err(error)
            }
        }
    }

    /// Sends `bytes` to rank `to`; see [`ProcessGroup::send`].
    pub fn send_bytes(&mut self, bytes: &[u8], to: usize) -> Result<()> {
        self.check_peer("send", to)?;
        let sent = self.peer(to)?.send(Tag::Send, bytes);
        sent.map_err(|error| self.lose(to, error))
    }

    /// Writes what rank `from` sends with [`ProcessGroup::send`] into `buffer`, which must have
    /// its size.
    pub fn recv<B: Backend>(
        &mut self,
        client: &ComputeClient<B>,
        buffer: impl Into<Binding>,
        from: usize,
    ) -> Result<()> {
        let buffer = buffer.into();
        if let Some(on_device) = self.on_device(client)? {
            self.check_peer("recv", from)?;
            return self.exchange_on_device(client, &*on_device, &[], &[(buffer, from)]);
        }
        let bytes = self.recv_bytes(from)?;
        if bytes.len() as u64 != buffer.size() {
            return Err(mismatch(
                "recv",
                format!(
                    "rank {from} sent {} bytes into a buffer of {}",
                    bytes.len(),
                    buffer.size()
                ),
            ));
        }
        client.write(buffer, &bytes)
    }

    /// The bytes rank `from` sends next.
    pub fn recv_bytes(&mut self, from: usize) -> Result<Vec<u8>> {
        self.check_peer("recv", from)?;
        match self.peer(from)?.recv(Tag::Send, "recv") {
            Ok(Ok(bytes)) => Ok(bytes),
            Ok(Err(failure)) => Err(failure.into_error("recv")),
            Err(lost) => Err(self.lose(from, lost)),
        }
    }

    /// Sends each `sends[i].0` to rank `sends[i].1` and receives into each `recvs[i].0` from
    /// rank `recvs[i].1`, posted together: the halo exchange of a split domain, where every rank
    /// sends to and receives from its neighbours in one call without waiting on them in turn.
    /// On the devices the transfers are queued on the client's stream and the call returns; on
    /// the host the sends go first, then the receives, so buffers that do not fit in the
    /// sockets' buffers may wait on each other until the timeout (pair them as for
    /// [`ProcessGroup::send`]). At most [`Peers::MAX`](gpuworld_systems::cross_device::Peers::MAX)
    /// each way.
    pub fn send_recv<B: Backend>(
        &mut self,
        client: &ComputeClient<B>,
        sends: &[(Binding, usize)],
        recvs: &[(Binding, usize)],
    ) -> Result<()> {
        for (_, to) in sends {
            self.check_peer("send", *to)?;
        }
        for (_, from) in recvs {
            self.check_peer("recv", *from)?;
        }
        if let Some(on_device) = self.on_device(client)? {
            return self.exchange_on_device(client, &*on_device, sends, recvs);
        }
        for (buffer, to) in sends {
            self.send(client, *buffer, *to)?;
        }
        for (buffer, from) in recvs {
            self.recv(client, *buffer, *from)?;
        }
        Ok(())
    }

    fn check_peer(&self, op: &'static str, rank: usize) -> Result<()> {
        if rank == self.rank() || rank >= self.world_size() {
            return Err(mismatch(
                op,
                format!(
                    "rank {} cannot {op} with rank {rank} in a group of {}",
                    self.rank(),
                    self.world_size()
                ),
            ));
        }
        Ok(())
    }

    /// One collective: this rank's bytes (or why it has none) to rank 0, its share back.
    fn exchange(
        &mut self,
        op: &'static str,
        tag: Tag,
        mine: Result<Vec<u8>>,
        combine: Combine<'_>,
    ) -> Result<Vec<u8>> {
        if self.world_size() == 1 {
            let mut shares = combine(&[mine?])?;
            return Ok(shares.swap_remove(0));
        }
        if self.rank() == 0 {
            return self.exchange_as_root(op, tag, mine, combine);
        }
        let rank = self.rank();
        let root = self.peer(0)?;
        let sent = match &mine {
            Ok(bytes) => root.send(tag, bytes),
            Err(error) => root.send(Tag::Failed, &Failure::of(error, rank).encode()),
        };
        let reply = sent.and_then(|()| root.recv(tag, op));
        let reply = reply.map_err(|lost| self.lose(0, lost))?;
        // This rank's own failure says more than rank 0's report of it.
        mine?;
        reply.map_err(|failure| failure.into_error(op))
    }

    /// Rank 0's side: gathers every rank's bytes in rank order, combines them and answers each.
    fn exchange_as_root(
        &mut self,
        op: &'static str,
        tag: Tag,
        mine: Result<Vec<u8>>,
        combine: Combine<'_>,
    ) -> Result<Vec<u8>> {
        let world = self.world_size();
        let mut failure = mine.as_ref().err().map(|e| Failure::of(e, 0));
        let mut inputs = vec![mine.as_ref().cloned().unwrap_or_default()];
        for rank in 1..world {
            let received = match self.peer(rank) {
                Ok(peer) => peer.recv(tag, op).map_err(|lost| self.lose(rank, lost)),
                Err(lost) => Err(lost),
            };
            let input = match received {
                Ok(Ok(bytes)) => bytes,
                Ok(Err(reported)) => {
                    failure.get_or_insert(reported);
                    Vec::new()
                }
                Err(lost) => {
                    let lost = Failure::of(&lost, rank);
                    // A lost rank outranks a refused argument: the group cannot go on.
                    if !failure.as_ref().is_some_and(Failure::is_lost_peer) {
                        failure = Some(lost);
                    }
                    Vec::new()
                }
            };
            inputs.push(input);
        }
        let shares = match failure {
            Some(_) => None,
            None => match combine(&inputs) {
                Ok(shares) => Some(shares),
                Err(error) => {
                    failure = Some(Failure::of(&error, 0));
                    None
                }
            },
        };
        for rank in 1..world {
            let Link::Live(peer) = &mut self.peers[rank] else {
                continue;
            };
            let sent = match (&shares, &failure) {
                (Some(shares), _) => peer.send(tag, &shares[rank]),
                (None, Some(failure)) => peer.send(Tag::Failed, &failure.encode()),
                (None, None) => unreachable!("rank 0 has neither shares nor a failure"),
            };
            if let Err(lost) = sent {
                let lost = self.lose(rank, lost);
                failure.get_or_insert(Failure::of(&lost, rank));
            }
        }
        mine?;
        match (shares, failure) {
            (_, Some(failure)) => Err(failure.into_error(op)),
            (Some(mut shares), None) => Ok(shares.swap_remove(0)),
            (None, None) => unreachable!("rank 0 has neither shares nor a failure"),
        }
    }
}

/// The bytes of `buffer`, read through `client` (after the buffer's earlier writes).
fn read<B: Backend>(client: &ComputeClient<B>, buffer: Binding) -> Result<Vec<u8>> {
    Ok(client.read_one(buffer)?.into_vec())
}

/// The shape of a call, checked across ranks on the devices: the collective, its arguments and
/// its buffers' sizes.
fn shape(kind: u8, arguments: String, sizes: &[u64]) -> Vec<u8> {
    let mut shape = vec![kind];
    shape.extend(arguments.into_bytes());
    for size in sizes {
        shape.extend(size.to_le_bytes());
    }
    shape
}

/// [`collective::same_sizes`] over what every rank sent.
fn same_sizes(name: &'static str, inputs: &[Vec<u8>]) -> Result<()> {
    let sizes: Vec<u64> = inputs.iter().map(|input| input.len() as u64).collect();
    collective::same_sizes(name, &sizes)
}
