//! Allocation modes: `Auto` lets the ladder pick a pool; `Persistent` puts allocations in the
//! persistent pool, which keeps their memory until an explicit cleanup. Windows of a mode nest
//! per stream, in command order.

use crate::ids::StreamId;
use std::collections::HashMap;

/// Where a stream's new allocations go.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum AllocationMode {
    /// The pool ladder decides (reusing an exact-size persistent buffer when one is free).
    #[default]
    Auto,
    /// The persistent pool: exact-size buffers, freed only by `memory_cleanup`.
    Persistent,
}

/// The open mode windows of each stream, innermost last.
#[derive(Debug, Default)]
pub struct AllocationModes {
    stacks: HashMap<StreamId, Vec<AllocationMode>>,
}

impl AllocationModes {
    /// The mode of `stream`'s innermost open window, `Auto` when none is open.
    pub fn current(&self, stream: StreamId) -> AllocationMode {
        if self.stacks.is_empty() {
            return AllocationMode::Auto;
        }
        self.stacks
            .get(&stream)
            .and_then(|stack| stack.last().copied())
            .unwrap_or_default()
    }

    /// Opens a window of `mode` on `stream`.
    pub fn push(&mut self, stream: StreamId, mode: AllocationMode) {
        self.stacks.entry(stream).or_default().push(mode);
    }

    /// Closes `stream`'s innermost window; false if none was open.
    pub fn pop(&mut self, stream: StreamId) -> bool {
        let Some(stack) = self.stacks.get_mut(&stream) else {
            return false;
        };
        stack.pop();
        if stack.is_empty() {
            self.stacks.remove(&stream);
        }
        true
    }

    /// Open windows as `stream [modes]`, sorted by stream, for snapshots.
    pub fn describe(&self) -> Vec<String> {
        let mut lines: Vec<(StreamId, String)> = self
            .stacks
            .iter()
            .map(|(stream, stack)| (*stream, format!("{stream} {stack:?}")))
            .collect();
        lines.sort_by_key(|(stream, _)| stream.value);
        lines.into_iter().map(|(_, line)| line).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_nest_per_stream() {
        let (a, b) = (StreamId { value: 1 }, StreamId { value: 2 });
        let mut modes = AllocationModes::default();
        modes.push(a, AllocationMode::Persistent);
        modes.push(a, AllocationMode::Auto);
        assert_eq!(modes.current(a), AllocationMode::Auto);
        assert_eq!(modes.current(b), AllocationMode::Auto);
        assert!(modes.pop(a));
        assert_eq!(modes.current(a), AllocationMode::Persistent);
        assert!(modes.pop(a));
        assert_eq!(modes.current(a), AllocationMode::Auto);
        assert!(
            !modes.pop(a),
            "closing a window that is not open is refused"
        );
    }
}
