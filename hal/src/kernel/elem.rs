//! The element types of buffers and scalars: a leaf that errors and signatures both name.

use std::fmt;

/// The type of a buffer's elements or of a scalar: a 32-bit word read as a float, an unsigned or
/// a signed integer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Elem {
    /// `f32`.
    F32,
    /// `u32`.
    U32,
    /// `i32` (two's complement).
    I32,
}

impl Elem {
    /// Bytes of one element.
    pub const fn size(self) -> u64 {
        4
    }

    /// Its name in Rust, as errors show it.
    pub const fn name(self) -> &'static str {
        match self {
            Elem::F32 => "f32",
            Elem::U32 => "u32",
            Elem::I32 => "i32",
        }
    }
}

impl fmt::Display for Elem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
