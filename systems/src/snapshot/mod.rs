//! `Runtime::snapshot()`: the tick, streams, tasks, in-flight work, handles and memory, sorted by
//! ids, as a [`Snapshot`] value: text by default (`Display`), or any serde format (`Serialize`),
//! so `insta` can redact it. A stream is named by the order its runtime opened it (`s0`, `s1`, and
//! `gc`: `world::Stream::name`), not by its `StreamId`, so a program shows the same names
//! from any thread; the text holds no internal keys, addresses, times or hash order.

use crate::backend::Region;
use serde::Serialize;
use std::fmt;

mod capture;

pub use capture::{
    Capture, EventPosition, StageLines, capture, device_stream_names, fill_contents,
};

/// What a snapshot shows beyond its default lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SnapshotOptions {
    /// Show each memory pool's line and the open allocation-mode windows.
    pub pools: bool,
    /// Show the first elements of each handle, read from device memory where the backend can
    /// ([`Completion::peek`](crate::backend::Completion::peek); the sim can: a device running
    /// work on other threads cannot be read safely mid-tick).
    pub contents: Option<Contents>,
}

impl SnapshotOptions {
    /// The default lines and the memory pools' lines.
    pub fn with_pools(mut self) -> SnapshotOptions {
        self.pools = true;
        self
    }

    /// The default lines and the first `elements` values of each handle, as `element`s.
    pub fn with_contents(mut self, elements: usize, element: Element) -> SnapshotOptions {
        self.contents = Some(Contents { elements, element });
        self
    }
}

/// How many elements of each handle a snapshot shows, and of what type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Contents {
    /// Elements shown from the start of each handle.
    pub elements: usize,
    /// Their type.
    pub element: Element,
}

/// The element type buffer contents are shown as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Element {
    /// 32-bit floats.
    F32,
    /// 32-bit unsigned integers.
    U32,
    /// 32-bit signed integers.
    I32,
    /// Bytes.
    U8,
}

impl Element {
    fn size(self) -> usize {
        match self {
            Element::U8 => 1,
            _ => 4,
        }
    }
}

/// The first elements of a handle, typed.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Values {
    /// 32-bit floats.
    F32(Vec<f32>),
    /// 32-bit unsigned integers.
    U32(Vec<u32>),
    /// 32-bit signed integers.
    I32(Vec<i32>),
    /// Bytes.
    U8(Vec<u8>),
}

impl Values {
    /// `bytes` as `element`s (a trailing partial element is left out).
    pub fn decode(bytes: &[u8], element: Element) -> Values {
        let words = || {
            bytes
                .chunks_exact(4)
                .map(|c| [c[0], c[1], c[2], c[3]])
                .collect::<Vec<_>>()
        };
        match element {
            Element::F32 => Values::F32(words().into_iter().map(f32::from_le_bytes).collect()),
            Element::U32 => Values::U32(words().into_iter().map(u32::from_le_bytes).collect()),
            Element::I32 => Values::I32(words().into_iter().map(i32::from_le_bytes).collect()),
            Element::U8 => Values::U8(bytes.to_vec()),
        }
    }
}

impl fmt::Display for Values {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn list<T: fmt::Debug>(f: &mut fmt::Formatter<'_>, values: &[T]) -> fmt::Result {
            let items: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
            write!(f, "[{}]", items.join(", "))
        }
        match self {
            Values::F32(v) => list(f, v),
            Values::U32(v) => list(f, v),
            Values::I32(v) => list(f, v),
            Values::U8(v) => list(f, v),
        }
    }
}

/// The runtime's state after a tick.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Snapshot {
    /// Ticks run so far.
    pub tick: u64,
    /// Every stream opened, by name.
    pub streams: Vec<StreamLine>,
    /// Tasks not yet handed to the device, in arrival order.
    pub tasks: Vec<TaskLine>,
    /// Commands waiting for released memory to retire.
    pub deferred_commands: usize,
    /// Reads, syncs and memory reclamations waiting for the device, sorted.
    pub in_flight: Vec<String>,
    /// Every live or retiring handle, by id.
    pub handles: Vec<HandleLine>,
    /// Memory in use and reserved.
    pub memory: MemoryLine,
    /// One line per memory pool and open allocation-mode window, when asked for.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<String>,
    /// The backend calls of the tick, when the snapshot comes from `gpuworld::testing`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub backend_calls: Vec<String>,
}

/// One stream of a [`Snapshot`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StreamLine {
    /// Its name (`s0`, `gc`).
    pub name: String,
    /// Tasks ever assigned to it.
    pub cursor: u64,
    /// Cursor of the last task handed to the device.
    pub submitted: u64,
    /// Tasks queued, not yet handed to the device.
    pub queued: usize,
    /// For each other stream, the cursor of it this stream has waited for (`s1@3`).
    pub synced: Vec<String>,
    /// The fault to be reported by the stream's next read or sync.
    pub fault: Option<String>,
}

/// One task of a [`Snapshot`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TaskLine {
    /// Arrival order across all streams.
    pub seq: u64,
    /// Its stream and cursor (`s0@2`).
    pub at: String,
    /// What it does (`launch fill`, `write 16B`).
    pub work: String,
    /// The handles it binds.
    pub bindings: Vec<String>,
    /// The stream cursors it waits for (`s1@1`).
    pub waits: Vec<String>,
}

/// One handle of a [`Snapshot`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HandleLine {
    /// Its id (`h0`).
    pub id: String,
    /// Requested bytes.
    pub size: u64,
    /// Where its bytes are: `storage#1+256`, `parked` (released, kept for its stream),
    /// `failed (why)`.
    pub memory: String,
    /// The stream and cursor of its last write (`s0@1`).
    pub written: String,
    /// The last use on each stream that used it (`s0@2`).
    pub uses: Vec<String>,
    /// `live`, `released`, `released, awaiting gc`, with `, pinned xN` while pinned.
    pub state: String,
    /// Its first elements, when asked for and readable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contents: Option<Values>,
    /// Where its bytes are on the device (read for `contents`).
    #[serde(skip)]
    pub region: Option<Region>,
}

/// The memory summary of a [`Snapshot`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MemoryLine {
    /// Live allocations.
    pub allocs: u64,
    /// Bytes requested by live allocations.
    pub in_use: u64,
    /// Bytes lost to alignment.
    pub padding: u64,
    /// Bytes held from the device.
    pub reserved: u64,
    /// Free slices in the pools.
    pub free_slices: usize,
    /// Released slices parked for their streams' later allocations.
    pub parked_slices: usize,
    /// Their bytes.
    pub parked_bytes: u64,
}

impl fmt::Display for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "tick {}", self.tick)?;
        writeln!(f, "streams:")?;
        for s in &self.streams {
            writeln!(
                f,
                "  {} cursor {} submitted {} queued {} synced [{}] fault {}",
                s.name,
                s.cursor,
                s.submitted,
                s.queued,
                s.synced.join(", "),
                s.fault.as_deref().unwrap_or("-")
            )?;
        }
        writeln!(f, "tasks:")?;
        for t in &self.tasks {
            writeln!(
                f,
                "  #{} {} {} [{}] waits [{}]",
                t.seq,
                t.at,
                t.work,
                t.bindings.join(", "),
                t.waits.join(", ")
            )?;
        }
        if self.deferred_commands > 0 {
            writeln!(
                f,
                "  waiting for released memory to retire: {} commands",
                self.deferred_commands
            )?;
        }
        writeln!(f, "in flight:")?;
        for line in &self.in_flight {
            writeln!(f, "  {line}")?;
        }
        writeln!(f, "handles:")?;
        for h in &self.handles {
            let at = if h.region.is_some() { "at " } else { "" };
            writeln!(
                f,
                "  {} {}B {at}{} written {} uses [{}] {}",
                h.id,
                h.size,
                h.memory,
                h.written,
                h.uses.join(", "),
                h.state
            )?;
            if let Some(values) = &h.contents {
                writeln!(f, "    = {values}")?;
            }
        }
        let m = &self.memory;
        write!(
            f,
            "memory: allocs {} in use {}B padding {}B reserved {}B free slices {}",
            m.allocs, m.in_use, m.padding, m.reserved, m.free_slices
        )?;
        if m.parked_slices > 0 {
            write!(f, " parked {} ({}B)", m.parked_slices, m.parked_bytes)?;
        }
        writeln!(f)?;
        for line in &self.pools {
            writeln!(f, "  {line}")?;
        }
        if !self.backend_calls.is_empty() {
            writeln!(f, "backend calls:")?;
            for line in &self.backend_calls {
                writeln!(f, "  {line}")?;
            }
        }
        Ok(())
    }
}
