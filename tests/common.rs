//! Shared pieces of the integration tests: polling a future once, and f32 conversions.

#![allow(dead_code)]

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// A future polled by hand, one tick at a time, as a game loop would.
pub struct Pending<T>(Pin<Box<dyn Future<Output = T> + Send>>);

impl<T> Pending<T> {
    /// Wraps a future.
    pub fn new(future: impl Future<Output = T> + Send + 'static) -> Self {
        Pending(Box::pin(future))
    }

    /// Polls once: `Some` when ready.
    pub fn poll(&mut self) -> Option<T> {
        match self
            .0
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
        {
            Poll::Ready(value) => Some(value),
            Poll::Pending => None,
        }
    }
}

/// The bytes of `values`.
pub fn bytes_of(values: &[f32]) -> Vec<u8> {
    bytemuck::cast_slice(values).to_vec()
}

/// `bytes` as `f32` values.
pub fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}
