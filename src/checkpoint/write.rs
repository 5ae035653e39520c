//! Writing a checkpoint: the buffers are read back chunk by chunk (two reads in flight, so the
//! device copies one while the file takes the other) straight into a temporary file beside the
//! target, which is synced and renamed over it, and the directory synced: a run killed at any
//! point leaves the previous checkpoint whole.

use super::format::{self, BufferEntry, Metadata};
use super::{CheckpointMeta, Progress};
use crate::client::{ComputeClient, ReplyFuture};
use gpuworld_systems::error::CheckpointError;
use gpuworld_systems::{Backend, Binding, Error, HostBytes, Result, StreamId};
use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes per read of a buffer: the most host memory a read holds, twice over with the next one
/// in flight.
pub(super) const CHUNK: u64 = 16 << 20;

/// Chunks' worth of bytes read ahead at once while a checkpoint is written.
const READS_IN_FLIGHT: usize = 2;

/// Reads queued ahead at once (of small buffers, many fit in the bytes above).
const READS_QUEUED: usize = 64;

/// What to save: named buffers (each read on its stream), the user's metadata, and a progress
/// callback; written by `ComputeClient::checkpoint`.
pub struct Checkpoint<'a> {
    buffers: Vec<(String, Binding, Option<StreamId>)>,
    meta: CheckpointMeta,
    progress: Option<Box<dyn FnMut(Progress) + 'a>>,
}

impl std::fmt::Debug for Checkpoint<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpoint")
            .field("buffers", &self.buffers)
            .field("meta", &self.meta)
            .finish_non_exhaustive()
    }
}

impl Default for Checkpoint<'_> {
    fn default() -> Self {
        Checkpoint::new()
    }
}

impl<'a> Checkpoint<'a> {
    /// A checkpoint of no buffers, at tick 0.
    pub fn new() -> Checkpoint<'a> {
        Checkpoint {
            buffers: Vec::new(),
            meta: CheckpointMeta::default(),
            progress: None,
        }
    }

    /// Adds the bytes of `binding` (a handle's whole range, or part of it) as buffer `name`,
    /// read on the writing client's stream and restored on it.
    pub fn buffer(mut self, name: impl Into<String>, binding: impl Into<Binding>) -> Self {
        self.buffers.push((name.into(), binding.into(), None));
        self
    }

    /// Adds `binding` as buffer `name`, read on `stream` and restored on it.
    pub fn buffer_on(
        mut self,
        name: impl Into<String>,
        binding: impl Into<Binding>,
        stream: StreamId,
    ) -> Self {
        self.buffers
            .push((name.into(), binding.into(), Some(stream)));
        self
    }

    /// Attaches `meta` (tick, RNG state, application data).
    pub fn meta(mut self, meta: CheckpointMeta) -> Self {
        self.meta = meta;
        self
    }

    /// Calls `progress` after each chunk written.
    pub fn on_progress(mut self, progress: impl FnMut(Progress) + 'a) -> Self {
        self.progress = Some(Box::new(progress));
        self
    }
}

/// What a written checkpoint holds.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CheckpointSummary {
    /// Bytes of the file.
    pub file_len: u64,
    /// Bytes of the buffers' contents.
    pub buffer_bytes: u64,
    /// Each buffer's CRC-32, in order.
    pub checksums: Vec<u32>,
}

impl<B: Backend> ComputeClient<B> {
    /// Writes `checkpoint` to `path`, replacing the file there only once the new one is whole
    /// and synced. Each buffer is read on its stream, so it holds every write and launch queued
    /// before this call (by any stream) and nothing queued after; work other threads queue
    /// while it runs races with it, as with any read. Host memory holds three chunks of 16 MiB
    /// at most. May tick: a blocking call.
    pub fn checkpoint(
        &self,
        path: impl AsRef<Path>,
        checkpoint: Checkpoint<'_>,
    ) -> Result<CheckpointSummary> {
        let Checkpoint {
            buffers,
            meta,
            mut progress,
        } = checkpoint;
        let path = path.as_ref();
        let shown: Arc<str> = path.display().to_string().into();
        let mut entries = Vec::with_capacity(buffers.len());
        let mut names = std::collections::HashSet::with_capacity(buffers.len());
        for (name, binding, stream) in &buffers {
            if !names.insert(name.as_str()) {
                return Err(CheckpointError::DuplicateName {
                    name: name.as_str().into(),
                }
                .into());
            }
            let (start, end) = binding.validate(self.runtime_id())?;
            entries.push(BufferEntry {
                name: name.clone(),
                len: end - start,
                stream: stream.unwrap_or_else(|| self.stream_id()).value,
            });
        }
        let bytes_total = entries.iter().map(|entry| entry.len).sum();
        let metadata = Metadata {
            backend: B::NAME.into(),
            device: self.properties().name.clone(),
            tick: meta.tick,
            rng_state: format::encode_hex(&meta.rng_state),
            app_data: format::encode_hex(&meta.app_data),
            buffers: entries,
        };
        let metadata =
            serde_json::to_vec_pretty(&metadata).map_err(|error| CheckpointError::Io {
                path: shown.clone(),
                operation: "encode the metadata",
                reason: error.to_string().into(),
            })?;
        let mut file = TempFile::create(path, &shown)?;
        file.write(&format::encode_header(&metadata))?;
        file.write(&metadata)?;
        // Every chunk of every buffer in file order, read ahead across buffers so that many
        // small buffers cost one round trip between them, not one each.
        let mut plan = Vec::new();
        for (_, binding, stream) in &buffers {
            let client = self.with_stream(stream.unwrap_or_else(|| self.stream_id()));
            for chunk in binding.chunks(CHUNK)? {
                plan.push((client.clone(), chunk));
            }
        }
        let mut reads = ReadAhead::new(plan.into_iter());
        let mut checksums = Vec::with_capacity(buffers.len());
        let mut bytes_done = 0;
        for (index, (_, binding, _)) in buffers.iter().enumerate() {
            file.write(&binding.size().to_le_bytes())?;
            let mut hasher = crc32fast::Hasher::new();
            for _ in 0..binding.size().div_ceil(CHUNK) {
                for bytes in reads.next()? {
                    hasher.update(&bytes);
                    file.write(&bytes)?;
                    bytes_done += bytes.len() as u64;
                }
                if let Some(progress) = progress.as_mut() {
                    progress(Progress {
                        bytes_done,
                        bytes_total,
                        buffer: index,
                        buffers: buffers.len(),
                    });
                }
            }
            let crc = hasher.finalize();
            file.write(&crc.to_le_bytes())?;
            checksums.push(crc);
        }
        let file_len = file.written + format::TRAILER_LEN;
        file.write(&format::encode_trailer(file_len, &checksums))?;
        file.persist()?;
        Ok(CheckpointSummary {
            file_len,
            buffer_bytes: bytes_done,
            checksums,
        })
    }
}

/// The reads of a checkpoint's chunks, queued ahead of the one the file takes next: up to
/// `READS_IN_FLIGHT` chunks' bytes and `READS_QUEUED` reads at once.
struct ReadAhead<B: Backend, I: Iterator<Item = (ComputeClient<B>, Binding)>> {
    plan: std::iter::Peekable<I>,
    queued: VecDeque<(ReplyFuture<Vec<HostBytes>>, u64)>,
    bytes_queued: u64,
}

impl<B: Backend, I: Iterator<Item = (ComputeClient<B>, Binding)>> ReadAhead<B, I> {
    fn new(plan: I) -> Self {
        ReadAhead {
            plan: plan.peekable(),
            queued: VecDeque::new(),
            bytes_queued: 0,
        }
    }

    /// The bytes of the next chunk in the plan, once read.
    fn next(&mut self) -> Result<Vec<HostBytes>> {
        while let Some((_, chunk)) = self.plan.peek() {
            let size = chunk.size();
            let room = self.bytes_queued + size <= READS_IN_FLIGHT as u64 * CHUNK;
            if !self.queued.is_empty() && (!room || self.queued.len() >= READS_QUEUED) {
                break;
            }
            if let Some((client, chunk)) = self.plan.next() {
                self.queued.push_back((client.read_async(&[chunk]), size));
                self.bytes_queued += size;
            }
        }
        let (read, size) = self.queued.pop_front().ok_or(Error::Disconnected)?;
        self.bytes_queued -= size;
        futures_executor::block_on(read)
    }
}

/// Temporary files made by this process so far: part of each one's name.
static TEMP_FILES: AtomicU64 = AtomicU64::new(0);

/// The file a checkpoint is written to before it replaces its target; removed when dropped
/// unpersisted (a failed write leaves nothing behind; a killed process leaves it, named
/// `.NAME.tmp.PID.N`, and the target untouched, until the next checkpoint of the target removes
/// it).
struct TempFile {
    file: Option<BufWriter<File>>,
    temp: PathBuf,
    target: PathBuf,
    shown: Arc<str>,
    written: u64,
}

impl TempFile {
    fn create(target: &Path, shown: &Arc<str>) -> Result<TempFile, CheckpointError> {
        let name = target.file_name().ok_or_else(|| CheckpointError::Io {
            path: shown.clone(),
            operation: "name a file there",
            reason: "the path has no file name".into(),
        })?;
        let temp = target.with_file_name(format!(
            ".{}.tmp.{}.{}",
            name.to_string_lossy(),
            std::process::id(),
            TEMP_FILES.fetch_add(1, Ordering::Relaxed)
        ));
        let file = File::create(&temp).map_err(io_error(&temp, "create the temporary file"))?;
        Ok(TempFile {
            file: Some(BufWriter::with_capacity(1 << 20, file)),
            temp,
            target: target.to_path_buf(),
            shown: shown.clone(),
            written: 0,
        })
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), CheckpointError> {
        let temp = &self.temp;
        if let Some(file) = self.file.as_mut() {
            file.write_all(bytes)
                .map_err(io_error(temp, "write the temporary file"))?;
        }
        self.written += bytes.len() as u64;
        Ok(())
    }

    /// Syncs the file, renames it over the target and syncs the directory.
    fn persist(mut self) -> Result<(), CheckpointError> {
        let Some(file) = self.file.take() else {
            return Ok(());
        };
        let file = file.into_inner().map_err(|error| {
            io_error(&self.temp, "write the temporary file")(error.into_error())
        })?;
        file.sync_all()
            .map_err(io_error(&self.temp, "sync the temporary file"))?;
        drop(file);
        std::fs::rename(&self.temp, &self.target).map_err(|error| CheckpointError::Io {
            path: self.shown.clone(),
            operation: "rename the temporary file over it",
            reason: error.to_string().into(),
        })?;
        // Renamed: nothing left to remove.
        self.temp = PathBuf::new();
        sync_directory_of(&self.target, &self.shown)?;
        remove_files_of_dead_writers(&self.target);
        Ok(())
    }
}

/// Removes the temporary files that writers of `target` killed mid-write left beside it (a job
/// preempted again and again would otherwise fill the disk with partial checkpoints): those
/// named `.NAME.tmp.PID.N` whose process is gone. Best effort, and only where the system says
/// which processes run (Linux's `/proc`); a live writer's file, or a reused PID's, stays.
fn remove_files_of_dead_writers(target: &Path) {
    #[cfg(target_os = "linux")]
    {
        let (Some(dir), Some(name)) = (target.parent(), target.file_name()) else {
            return;
        };
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        let prefix = format!(".{}.tmp.", name.to_string_lossy());
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let file_name = entry.file_name();
            let file_name = file_name.to_string_lossy();
            let Some(rest) = file_name.strip_prefix(&prefix) else {
                continue;
            };
            let Some(pid) = rest
                .split('.')
                .next()
                .and_then(|pid| pid.parse::<u32>().ok())
            else {
                continue;
            };
            let alive = Path::new("/proc").join(pid.to_string()).exists();
            if pid != std::process::id() && !alive {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = target;
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.temp.as_os_str().is_empty() {
            self.file = None;
            // Best effort: the error that made us give up is the one the caller sees.
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

/// Syncs the directory holding `path`, so that a rename into it survives a power loss.
fn sync_directory_of(path: &Path, shown: &Arc<str>) -> Result<(), CheckpointError> {
    #[cfg(unix)]
    {
        let dir = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        File::open(dir)
            .and_then(|dir| dir.sync_all())
            .map_err(|error| CheckpointError::Io {
                path: shown.clone(),
                operation: "sync its directory",
                reason: error.to_string().into(),
            })?;
    }
    #[cfg(not(unix))]
    let _ = (path, shown);
    Ok(())
}

/// `CheckpointError::Io` of `operation` on `path`.
pub(super) fn io_error<'p>(
    path: &'p Path,
    operation: &'static str,
) -> impl FnOnce(std::io::Error) -> CheckpointError + 'p {
    move |error| CheckpointError::Io {
        path: path.display().to_string().into(),
        operation,
        reason: error.to_string().into(),
    }
}
