//! Reading a checkpoint: the header, metadata and the file's length are checked before anything
//! is allocated (so a truncated file, a wrong version or a state too large for the device
//! allocates nothing); the buffers then stream from the file into staging memory and onto the
//! device chunk by chunk, each checked against its CRC-32 at its end. A mismatch drops every
//! handle made so far and returns the error: nothing is half-restored.

use super::format::{self, Header, Metadata};
use super::write::{CHUNK, io_error};
use super::{CheckpointMeta, Progress, stream_of};
use crate::client::{ComputeClient, ReplyFuture};
use gpuworld_systems::error::CheckpointError;
use gpuworld_systems::{Backend, Handle, Result, StreamId};
use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufReader, ErrorKind, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Writes in flight at once while a restore streams buffers onto the device: each holds a
/// chunk of staging memory until the device has copied it.
const WRITES_IN_FLIGHT: usize = 3;

/// What a checkpoint file holds, every checksum verified ([`inspect`]).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct CheckpointInfo {
    /// The file.
    pub path: PathBuf,
    /// Its format version.
    pub version: u32,
    /// Its length in bytes.
    pub file_len: u64,
    /// Bytes of its metadata section.
    pub metadata_len: u64,
    /// The backend it was taken on.
    pub backend: String,
    /// The device it was taken on.
    pub device: String,
    /// The user's metadata.
    pub meta: CheckpointMeta,
    /// Its buffers, in order.
    pub buffers: Vec<BufferInfo>,
}

/// One buffer of a checkpoint file.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct BufferInfo {
    /// Its name.
    pub name: String,
    /// Bytes of its contents.
    pub len: u64,
    /// The stream it was read on, and is restored on.
    pub stream: StreamId,
    /// Where its record starts in the file.
    pub offset: u64,
    /// The CRC-32 of its contents (verified).
    pub checksum: u32,
}

/// The buffers a restore made, in the checkpoint's order, with the user's metadata.
#[derive(Debug)]
#[non_exhaustive]
pub struct Restored {
    /// The buffers, in the checkpoint's order.
    pub buffers: Vec<RestoredBuffer>,
    /// The user's metadata, as it was written.
    pub meta: CheckpointMeta,
    /// The backend the checkpoint was taken on.
    pub backend: String,
    /// The device the checkpoint was taken on.
    pub device: String,
}

/// One restored buffer: a new handle of the checkpoint's size on its stream.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RestoredBuffer {
    /// Its name in the checkpoint.
    pub name: String,
    /// The new handle holding its contents.
    pub handle: Handle,
    /// The stream it was made and written on.
    pub stream: StreamId,
}

impl Restored {
    /// The handle of the buffer named `name`.
    pub fn handle(&self, name: &str) -> Option<&Handle> {
        self.buffers
            .iter()
            .find(|buffer| buffer.name == name)
            .map(|buffer| &buffer.handle)
    }

    /// The handles, in the checkpoint's order.
    pub fn handles(&self) -> Vec<Handle> {
        self.buffers
            .iter()
            .map(|buffer| buffer.handle.clone())
            .collect()
    }
}

/// Reads the checkpoint at `path` and verifies every checksum without a device: what
/// `gpuworld checkpoint inspect` prints. Host memory holds one chunk of 16 MiB at most.
pub fn inspect(path: impl AsRef<Path>) -> Result<CheckpointInfo> {
    let mut opened = Opened::open(path.as_ref())?;
    let mut chunk = vec![0u8; CHUNK.min(opened.largest()) as usize];
    let mut buffers = Vec::with_capacity(opened.metadata.buffers.len());
    let mut crcs = Vec::with_capacity(opened.metadata.buffers.len());
    for index in 0..opened.metadata.buffers.len() {
        let len = opened.read_len(index)?;
        let mut hasher = crc32fast::Hasher::new();
        let mut left = len;
        while left > 0 {
            let part = &mut chunk[..CHUNK.min(left) as usize];
            opened.read_into(index, part)?;
            hasher.update(part);
            left -= part.len() as u64;
        }
        let checksum = opened.read_crc(index, hasher.finalize())?;
        crcs.push(checksum);
        let entry = &opened.metadata.buffers[index];
        buffers.push(BufferInfo {
            name: entry.name.clone(),
            len,
            stream: stream_of(entry.stream),
            offset: opened.offsets[index],
            checksum,
        });
    }
    opened.finish(&crcs)?;
    Ok(CheckpointInfo {
        path: path.as_ref().to_path_buf(),
        version: opened.header.version,
        file_len: opened.file_len,
        metadata_len: opened.header.metadata_len,
        backend: opened.metadata.backend.clone(),
        device: opened.metadata.device.clone(),
        meta: opened.meta(),
        buffers,
    })
}

impl<B: Backend> ComputeClient<B> {
    /// Restores the checkpoint at `path` into this runtime, of any backend: a new handle per
    /// buffer, on the stream it was saved from, holding its bytes; see
    /// [`ComputeClient::restore_with_progress`]. May tick: a blocking call.
    pub fn restore(&self, path: impl AsRef<Path>) -> Result<Restored> {
        self.restore_with_progress(path, |_| {})
    }

    /// Like [`ComputeClient::restore`], calling `progress` after each chunk. A file that is not
    /// a checkpoint, of another version, truncated or too large for the device is refused
    /// before anything is allocated; a checksum that does not match drops every handle made
    /// and returns `CheckpointError::Corrupted` naming the buffer. Returns once every byte is on
    /// the device. May tick: a blocking call.
    pub fn restore_with_progress(
        &self,
        path: impl AsRef<Path>,
        mut progress: impl FnMut(Progress),
    ) -> Result<Restored> {
        let mut opened = Opened::open(path.as_ref())?;
        self.check_fits(&opened)?;
        let count = opened.metadata.buffers.len();
        let bytes_total = opened.metadata.buffers.iter().map(|b| b.len).sum();
        let mut buffers: Vec<RestoredBuffer> = Vec::with_capacity(count);
        let mut crcs = Vec::with_capacity(count);
        let mut writes = BoundedWrites::default();
        let mut bytes_done = 0;
        for index in 0..count {
            let entry = opened.metadata.buffers[index].clone();
            let stream = stream_of(entry.stream);
            let client = self.with_stream(stream);
            writes.switch_to(&client)?;
            let len = opened.read_len(index)?;
            let handle = client.empty(len);
            let mut hasher = crc32fast::Hasher::new();
            for part in handle.binding().chunks(CHUNK)? {
                let size = part.size() as usize;
                let mut staging = client
                    .reserve_staging(&[size])
                    .pop()
                    .ok_or(gpuworld_systems::Error::Disconnected)?;
                staging.truncate(size);
                opened.read_into(index, &mut staging)?;
                hasher.update(&staging);
                client.write_bytes(part, staging)?;
                writes.wrote(&client, size as u64)?;
                bytes_done += size as u64;
                progress(Progress {
                    bytes_done,
                    bytes_total,
                    buffer: index,
                    buffers: count,
                });
            }
            crcs.push(opened.read_crc(index, hasher.finalize())?);
            buffers.push(RestoredBuffer {
                name: entry.name,
                handle,
                stream,
            });
        }
        opened.finish(&crcs)?;
        writes.finish()?;
        // Every stream written is synced: the buffers' bytes are on the device.
        let mut streams: Vec<StreamId> = buffers.iter().map(|b| b.stream).collect();
        streams.sort_by_key(|stream| stream.value);
        streams.dedup();
        for stream in streams {
            self.with_stream(stream).sync()?;
        }
        Ok(Restored {
            buffers,
            meta: opened.meta(),
            backend: opened.metadata.backend,
            device: opened.metadata.device,
        })
    }

    /// Refuses a checkpoint whose buffers cannot fit this device, before anything is made.
    fn check_fits(&self, opened: &Opened) -> Result<(), CheckpointError> {
        let properties = self.properties();
        let buffers = &opened.metadata.buffers;
        if let Some(limit) = properties.max_buffer_bytes
            && let Some((index, entry)) = buffers.iter().enumerate().find(|(_, b)| b.len > limit)
        {
            return Err(CheckpointError::TooLargeForDevice {
                path: opened.path.clone(),
                what: format::buffer_section(index, &entry.name).into(),
                needed: entry.len,
                limit,
                limit_name: "the device's largest buffer",
            });
        }
        let needed: u64 = buffers.iter().map(|b| b.len).sum();
        let free = properties
            .memory_bytes
            .saturating_sub(self.memory_usage().bytes_in_use);
        if needed > free {
            return Err(CheckpointError::TooLargeForDevice {
                path: opened.path.clone(),
                what: match buffers.len() {
                    1 => "its buffer".into(),
                    n => format!("its {n} buffers together").into(),
                },
                needed,
                limit: free,
                limit_name: "the device memory free",
            });
        }
        Ok(())
    }
}

/// The writes of a restore in flight, bounded: a sync follows every chunk's worth of bytes
/// written on a stream (and the last writes of a stream the restore leaves), and at most
/// `WRITES_IN_FLIGHT` of those syncs are waited for at once, so staging memory holds a few
/// chunks while small buffers still go out many at a time.
#[derive(Default)]
struct BoundedWrites {
    syncs: VecDeque<ReplyFuture<()>>,
    unsynced: u64,
    stream: Option<StreamId>,
}

impl BoundedWrites {
    /// Syncs the writes of the stream left, before those on `client`'s.
    fn switch_to<B: Backend>(&mut self, client: &ComputeClient<B>) -> Result<()> {
        if let Some(previous) = self.stream
            && previous != client.stream_id()
            && self.unsynced > 0
        {
            self.push(client.with_stream(previous).sync_async())?;
        }
        self.stream = Some(client.stream_id());
        Ok(())
    }

    /// Counts `bytes` written on `client`'s stream.
    fn wrote<B: Backend>(&mut self, client: &ComputeClient<B>, bytes: u64) -> Result<()> {
        self.unsynced += bytes;
        if self.unsynced >= CHUNK {
            self.push(client.sync_async())?;
        }
        Ok(())
    }

    fn push(&mut self, sync: ReplyFuture<()>) -> Result<()> {
        self.unsynced = 0;
        self.syncs.push_back(sync);
        if self.syncs.len() >= WRITES_IN_FLIGHT
            && let Some(oldest) = self.syncs.pop_front()
        {
            futures_executor::block_on(oldest)?;
        }
        Ok(())
    }

    /// Waits for every sync pushed.
    fn finish(self) -> Result<()> {
        for sync in self.syncs {
            futures_executor::block_on(sync)?;
        }
        Ok(())
    }
}

/// A checkpoint file whose header and metadata were read and checked, and whose length matches
/// them, positioned at its first buffer's record.
struct Opened {
    file: BufReader<File>,
    path: Arc<str>,
    file_len: u64,
    header: Header,
    metadata: Metadata,
    offsets: Vec<u64>,
}

impl Opened {
    fn open(path: &Path) -> Result<Opened, CheckpointError> {
        let shown: Arc<str> = path.display().to_string().into();
        let file = File::open(path).map_err(io_error(path, "open it"))?;
        let file_len = file
            .metadata()
            .map_err(io_error(path, "read its length"))?
            .len();
        let mut file = BufReader::with_capacity(1 << 20, file);
        let mut header = [0u8; format::HEADER_LEN as usize];
        let got = read_up_to(&mut file, &mut header).map_err(io_error(path, "read it"))?;
        let header = format::decode_header(&shown, &header[..got], file_len)?;
        let metadata_end = format::HEADER_LEN + header.metadata_len;
        if file_len < metadata_end {
            return Err(format::truncated(
                &shown,
                file_len,
                "the metadata",
                metadata_end,
            ));
        }
        let mut metadata = vec![0u8; header.metadata_len as usize];
        file.read_exact(&mut metadata)
            .map_err(io_error(path, "read it"))?;
        let computed = crc32fast::hash(&metadata);
        if computed != header.metadata_crc {
            return Err(format::mismatch(
                &shown,
                "the metadata",
                header.metadata_crc,
                computed,
            ));
        }
        let metadata = Metadata::decode(&shown, &metadata)?;
        let (offsets, expected_len) = metadata.layout(header.metadata_len);
        if file_len < expected_len {
            let (section, needed) = metadata
                .buffers
                .iter()
                .zip(&offsets)
                .enumerate()
                .map(|(index, (entry, offset))| {
                    let end = offset + format::RECORD_OVERHEAD + entry.len;
                    (format::buffer_section(index, &entry.name), end)
                })
                .find(|(_, end)| file_len < *end)
                .unwrap_or_else(|| ("the trailer".into(), expected_len));
            return Err(format::truncated(&shown, file_len, &section, needed));
        }
        if file_len > expected_len {
            return Err(format::corrupted(
                &shown,
                "the file",
                format!(
                    "has {} bytes after its trailer (its metadata lists {expected_len} bytes)",
                    file_len - expected_len
                ),
            ));
        }
        Ok(Opened {
            file,
            path: shown,
            file_len,
            header,
            metadata,
            offsets,
        })
    }

    /// The largest buffer's length.
    fn largest(&self) -> u64 {
        self.metadata
            .buffers
            .iter()
            .map(|b| b.len)
            .max()
            .unwrap_or(0)
    }

    fn section(&self, index: usize) -> String {
        format::buffer_section(index, &self.metadata.buffers[index].name)
    }

    /// Fills `bytes` from the file; a file that ends first was cut while being read.
    fn read_into(&mut self, index: usize, bytes: &mut [u8]) -> Result<(), CheckpointError> {
        self.file.read_exact(bytes).map_err(|error| {
            if error.kind() == ErrorKind::UnexpectedEof {
                format::truncated(
                    &self.path,
                    self.file_len,
                    &self.section(index),
                    self.file_len + 1,
                )
            } else {
                CheckpointError::Io {
                    path: self.path.clone(),
                    operation: "read it",
                    reason: error.to_string().into(),
                }
            }
        })
    }

    /// Reads buffer `index`'s length, which must be the metadata's.
    fn read_len(&mut self, index: usize) -> Result<u64, CheckpointError> {
        let mut word = [0u8; 8];
        self.read_into(index, &mut word)?;
        let len = u64::from_le_bytes(word);
        let listed = self.metadata.buffers[index].len;
        if len != listed {
            return Err(format::corrupted(
                &self.path,
                &self.section(index),
                format!("has a length of {len} bytes; the metadata lists {listed}"),
            ));
        }
        Ok(len)
    }

    /// Reads buffer `index`'s stored CRC-32, which must be `computed`.
    fn read_crc(&mut self, index: usize, computed: u32) -> Result<u32, CheckpointError> {
        let mut word = [0u8; 4];
        self.read_into(index, &mut word)?;
        let stored = u32::from_le_bytes(word);
        if stored != computed {
            return Err(format::mismatch(
                &self.path,
                &self.section(index),
                stored,
                computed,
            ));
        }
        Ok(stored)
    }

    /// Reads and checks the trailer.
    fn finish(&mut self, crcs: &[u32]) -> Result<(), CheckpointError> {
        let mut trailer = [0u8; format::TRAILER_LEN as usize];
        self.file.read_exact(&mut trailer).map_err(|_| {
            format::truncated(&self.path, self.file_len, "the trailer", self.file_len + 1)
        })?;
        format::check_trailer(&self.path, &trailer, self.file_len, crcs)
    }

    /// The user's metadata (its hex fields were checked when it was decoded).
    fn meta(&self) -> CheckpointMeta {
        CheckpointMeta {
            tick: self.metadata.tick,
            rng_state: format::decode_hex(&self.metadata.rng_state).unwrap_or_default(),
            app_data: format::decode_hex(&self.metadata.app_data).unwrap_or_default(),
        }
    }
}

/// Reads into `bytes` until it is full or the file ends; the bytes read.
fn read_up_to(file: &mut impl Read, bytes: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < bytes.len() {
        match file.read(&mut bytes[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(error) if error.kind() == ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(got)
}
