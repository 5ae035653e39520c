//! The committed training-step allocation trace (`benches/data/training_trace.txt`): its events
//! and its text format, shared by the pool-only replay (`memory.rs`) and the replay through the
//! client (`common/client_rows.rs`).

/// Where the committed trace lives.
pub const TRACE_PATH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/benches/data/training_trace.txt"
);

/// One step of the trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// Allocate `bytes` for buffer `id`, persistent (weights) or not.
    Alloc {
        id: u32,
        bytes: u64,
        persistent: bool,
    },
    /// Free buffer `id`.
    Free { id: u32 },
}

/// The events of a trace's text: `a <id> <bytes>`, `p <id> <bytes>`, `f <id>`; `#` comments.
pub fn parse_trace(text: &str) -> Vec<Event> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let number = |i: usize| -> u64 {
                fields
                    .get(i)
                    .and_then(|f| f.parse().ok())
                    .unwrap_or_else(|| panic!("bad trace line `{line}`"))
            };
            match fields[0] {
                "a" | "p" => Event::Alloc {
                    id: number(1) as u32,
                    bytes: number(2),
                    persistent: fields[0] == "p",
                },
                "f" => Event::Free {
                    id: number(1) as u32,
                },
                _ => panic!("bad trace line `{line}`"),
            }
        })
        .collect()
}

/// The committed trace, read from [`TRACE_PATH`], else from the same path under the current
/// directory (a bench binary copied to another machine runs from the repository's root there).
pub fn committed_trace() -> Vec<Event> {
    std::fs::read_to_string(TRACE_PATH)
        .or_else(|_| std::fs::read_to_string("benches/data/training_trace.txt"))
        .map(|text| parse_trace(&text))
        .unwrap_or_else(|error| panic!("reading {TRACE_PATH}: {error}"))
}
