//! The collectives and transfers of a process group. Each collective is one exchange through
//! rank 0 (a star): every rank sends its bytes (or the failure that kept it from having them),
//! rank 0 combines them in rank order and sends each rank its share (or the failure, so every
//! rank returns the same error). A refused argument leaves the ranks in step; a lost connection
//! makes every later call that needs it fail at once.

use super::wire::{Failure, Tag};
use super::{Link, ProcessGroup};
use crate::ComputeClient;
use crate::collective::{self, ElemType, ReduceOp, mismatch, reduce_host, whole_elements};
use gpuworld_systems::cross_device::CollectiveOp;
use gpuworld_systems::{Backend, Binding, Result};
use smallvec::smallvec;

/// Rank 0's combine step: every rank's bytes, in rank order, to each rank's share.
type Combine<'a> = Box<dyn FnOnce(&[Vec<u8>]) -> Result<Vec<Vec<u8>>> + 'a>;

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
        if let Some(on_device) = self.on_device(client)? {
            let fits = whole_elements("all_reduce", buffer.size(), elem);
            let count = buffer.size() as usize / elem.size();
            let shape = shape(b'a', format!("{elem:?}{op:?}"), &[buffer.size()]);
            let op = CollectiveOp::AllReduce { elem, op, count };
            let buffers = smallvec![buffer];
            return self.run_on_device(client, &*on_device, op, shape, fits, buffers);
        }
        let reduced = self.all_reduce_bytes_from(read(client, buffer), elem, op)?;
        client.write(buffer, &reduced)
    }

    /// The element-wise `op` of every rank's `bytes`, in rank order.
    pub fn all_reduce_bytes(
        &mut self,
        bytes: &[u8],
        elem: ElemType,
        op: ReduceOp,
    ) -> Result<Vec<u8>> {
        self.all_reduce_bytes_from(Ok(bytes.to_vec()), elem, op)
    }

    fn all_reduce_bytes_from(
        &mut self,
        mine: Result<Vec<u8>>,
        elem: ElemType,
        op: ReduceOp,
    ) -> Result<Vec<u8>> {
        let name = "all_reduce";
        let world = self.world_size();
        self.exchange(
            name,
            Tag::AllReduce,
            mine,
            Box::new(move |inputs| {
                same_sizes(name, inputs)?;
                whole_elements(name, inputs[0].len() as u64, elem)?;
                let slices: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
                Ok(vec![reduce_host(&slices, elem, op)?; world])
            }),
        )
    }

    /// Copies rank `root`'s `buffer` into every other rank's `buffer` (all the same size).
    pub fn broadcast<B: Backend>(
        &mut self,
        client: &ComputeClient<B>,
        buffer: impl Into<Binding>,
        root: usize,
    ) -> Result<()> {
        let buffer = buffer.into();
        if let Some(on_device) = self.on_device(client)? {
            let world = self.world_size();
            let fits = if root >= world {
                Err(mismatch(
                    "broadcast",
                    format!("root {root} in a group of {world}"),
                ))
            } else {
                Ok(())
            };
            let bytes = buffer.size() as usize;
            let shape = shape(b'b', root.to_string(), &[buffer.size()]);
            let op = CollectiveOp::Broadcast { root, bytes };
            let buffers = smallvec![buffer];
            return self.run_on_device(client, &*on_device, op, shape, fits, buffers);
        }
        let mine = if self.rank() == root {
            read(client, buffer)
        } else {
            Ok(Vec::new())
        };
        let received = self.broadcast_from(mine, buffer.size(), root)?;
        if self.rank() != root {
            client.write(buffer, &received)?;
        }
        Ok(())
    }

    /// Rank `root`'s `bytes` on every rank (the others' `bytes` give only the size they expect).
    pub fn broadcast_bytes(&mut self, bytes: &[u8], root: usize) -> Result<Vec<u8>> {
        let received = self.broadcast_from(Ok(bytes.to_vec()), bytes.len() as u64, root)?;
        Ok(if self.rank() == root {
            bytes.to_vec()
        } else {
            received
        })
    }

    /// The root sends its bytes; every other rank its size, so rank 0 can check they fit.
    fn broadcast_from(&mut self, mine: Result<Vec<u8>>, size: u64, root: usize) -> Result<Vec<u8>> {
        let name = "broadcast";
        let world = self.world_size();
        if root >= world {
            return Err(mismatch(name, format!("root {root} in a group of {world}")));
        }
        let mine = if self.rank() == root {
            mine
        } else {
            mine.map(|_| size.to_le_bytes().to_vec())
        };
        self.exchange(
            name,
            Tag::Broadcast,
            mine,
            Box::new(move |inputs| {
                let data = &inputs[root];
                for (rank, input) in inputs.iter().enumerate().filter(|(r, _)| *r != root) {
                    let size = <[u8; 8]>::try_from(input.as_slice())
                        .ok()
                        .map(u64::from_le_bytes);
                    if size != Some(data.len() as u64) {
                        return Err(mismatch(
                            name,
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
            }),
        )
    }

    /// Writes every rank's `input`, concatenated in rank order, into each rank's `output`,
    /// which holds `world_size()` inputs.
    pub fn all_gather<B: Backend>(
        &mut self,
        client: &ComputeClient<B>,
        input: impl Into<Binding>,
        output: impl Into<Binding>,
    ) -> Result<()> {
        let (input, output) = (input.into(), output.into());
        let total = input.size() * self.world_size() as u64;
        let fits = if output.size() != total {
            Err(mismatch(
                "all_gather",
                format!(
                    "output of rank {} has {} bytes, not {} ranks x {} bytes = {total}",
                    self.rank(),
                    output.size(),
                    self.world_size(),
                    input.size()
                ),
            ))
        } else {
            Ok(())
        };
        if let Some(on_device) = self.on_device(client)? {
            let bytes = input.size() as usize;
            let shape = shape(b'g', String::new(), &[input.size(), output.size()]);
            let op = CollectiveOp::AllGather { bytes };
            let buffers = smallvec![input, output];
            return self.run_on_device(client, &*on_device, op, shape, fits, buffers);
        }
        let mine = fits.and_then(|()| read(client, input));
        let gathered = self.all_gather_from(mine)?;
        client.write(output, &gathered)
    }

    /// Every rank's `bytes`, concatenated in rank order.
    pub fn all_gather_bytes(&mut self, bytes: &[u8]) -> Result<Vec<u8>> {
        self.all_gather_from(Ok(bytes.to_vec()))
    }

    fn all_gather_from(&mut self, mine: Result<Vec<u8>>) -> Result<Vec<u8>> {
        let name = "all_gather";
        let world = self.world_size();
        self.exchange(
            name,
            Tag::AllGather,
            mine,
            Box::new(move |inputs| {
                same_sizes(name, inputs)?;
                Ok(vec![inputs.concat(); world])
            }),
        )
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
        let (input, output) = (input.into(), output.into());
        let world = self.world_size() as u64;
        let fits = if output.size() * world != input.size() {
            Err(mismatch(
                "reduce_scatter",
                format!(
                    "output of rank {} has {} bytes, not a {world}th of its input's {}",
                    self.rank(),
                    output.size(),
                    input.size()
                ),
            ))
        } else {
            Ok(())
        };
        if let Some(on_device) = self.on_device(client)? {
            let fits = fits.and_then(|()| whole_elements("reduce_scatter", output.size(), elem));
            let count = output.size() as usize / elem.size();
            let sizes = [input.size(), output.size()];
            let shape = shape(b'r', format!("{elem:?}{op:?}"), &sizes);
            let op = CollectiveOp::ReduceScatter { elem, op, count };
            let buffers = smallvec![input, output];
            return self.run_on_device(client, &*on_device, op, shape, fits, buffers);
        }
        let mine = fits.and_then(|()| read(client, input));
        let part = self.reduce_scatter_from(mine, elem, op)?;
        client.write(output, &part)
    }

    /// Part `rank` of the element-wise `op` of every rank's `bytes`.
    pub fn reduce_scatter_bytes(
        &mut self,
        bytes: &[u8],
        elem: ElemType,
        op: ReduceOp,
    ) -> Result<Vec<u8>> {
        self.reduce_scatter_from(Ok(bytes.to_vec()), elem, op)
    }

    fn reduce_scatter_from(
        &mut self,
        mine: Result<Vec<u8>>,
        elem: ElemType,
        op: ReduceOp,
    ) -> Result<Vec<u8>> {
        let name = "reduce_scatter";
        let world = self.world_size();
        self.exchange(
            name,
            Tag::ReduceScatter,
            mine,
            Box::new(move |inputs| {
                same_sizes(name, inputs)?;
                let len = inputs[0].len();
                if !len.is_multiple_of(world) {
                    return Err(mismatch(
                        name,
                        format!("inputs of {len} bytes do not split into {world} parts"),
                    ));
                }
                let part = len / world;
                whole_elements(name, part as u64, elem)?;
                let slices: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
                let reduced = reduce_host(&slices, elem, op)?;
                Ok(reduced
                    .chunks(part.max(1))
                    .map(<[u8]>::to_vec)
                    .chain(std::iter::repeat(Vec::new()))
                    .take(world)
                    .collect())
            }),
        )
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
