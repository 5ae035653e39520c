//! The user's view of an allocation: a cheap-clone [`Handle`] whose last drop releases the memory
//! through the inbox, and names a byte range of it as a [`Binding`].

use crate::binding::Binding;
use crate::bytes::HostBytes;
use crate::ids::{HandleId, RuntimeId, StreamId};
use crate::inbox::{Command, Inbox, Op};
use std::fmt;
use std::sync::Arc;

struct HandleInner {
    id: HandleId,
    runtime: RuntimeId,
    size: u64,
    inbox: Arc<Inbox>,
}

impl Drop for HandleInner {
    fn drop(&mut self) {
        self.inbox
            .push(Command::Op(Op::Release { handle: self.id }));
    }
}

/// An allocation on the device; clones share it, and dropping the last clone releases it.
#[derive(Clone)]
pub struct Handle {
    inner: Arc<HandleInner>,
    offset_start: u64,
    offset_end: u64,
}

impl Handle {
    /// Queues the allocation of `size` bytes (holding `data`, if given) on `stream` of the
    /// runtime that owns `inbox`, and returns its handle: the only way to make one, so a handle
    /// always names memory of its size.
    pub fn create(
        inbox: &Arc<Inbox>,
        size: u64,
        data: Option<HostBytes>,
        stream: StreamId,
    ) -> Handle {
        let id = inbox.next_handle_id();
        inbox.push(Command::Op(Op::Create {
            handle: id,
            size,
            data,
            stream,
        }));
        Handle::new(id, size, inbox.clone())
    }

    /// Wraps a fresh allocation id of the runtime that owns `inbox`.
    fn new(id: HandleId, size: u64, inbox: Arc<Inbox>) -> Handle {
        Handle {
            inner: Arc::new(HandleInner {
                id,
                runtime: inbox.runtime(),
                size,
                inbox,
            }),
            offset_start: 0,
            offset_end: 0,
        }
    }

    /// The allocation's id.
    pub fn id(&self) -> HandleId {
        self.inner.id
    }

    /// The runtime that made this handle.
    pub fn runtime(&self) -> RuntimeId {
        self.inner.runtime
    }

    /// Size of the whole allocation in bytes, ignoring offsets.
    pub fn capacity(&self) -> u64 {
        self.inner.size
    }

    /// Size in bytes between the offsets (0 if they overlap).
    pub fn size(&self) -> u64 {
        self.inner
            .size
            .saturating_sub(self.offset_start)
            .saturating_sub(self.offset_end)
    }

    /// Moves the start of the viewed range `bytes` further in.
    pub fn offset_start(mut self, bytes: u64) -> Handle {
        self.offset_start = self.offset_start.saturating_add(bytes);
        self
    }

    /// Moves the end of the viewed range `bytes` further in.
    pub fn offset_end(mut self, bytes: u64) -> Handle {
        self.offset_end = self.offset_end.saturating_add(bytes);
        self
    }

    /// Bytes skipped at the start.
    pub fn start(&self) -> u64 {
        self.offset_start
    }

    /// Bytes skipped at the end.
    pub fn end(&self) -> u64 {
        self.offset_end
    }

    /// True when this is the only clone, so the memory may be written in place.
    pub fn can_mut(&self) -> bool {
        Arc::strong_count(&self.inner) == 1
    }

    /// A binding of this handle's range, for launches, reads and writes.
    pub fn binding(&self) -> Binding {
        Binding::of_handle(
            self.inner.id,
            self.inner.runtime,
            self.offset_start,
            self.offset_end,
            self.inner.size,
        )
    }
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle")
            .field("id", &self.inner.id)
            .field("capacity", &self.inner.size)
            .field("offset_start", &self.offset_start)
            .field("offset_end", &self.offset_end)
            .finish()
    }
}

impl From<&Handle> for Binding {
    fn from(handle: &Handle) -> Binding {
        handle.binding()
    }
}
