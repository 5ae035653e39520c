//! Tune keys: what a tunable set's key generator makes of an input (typically shape buckets),
//! small and `Copy` so a cache hit hashes a few words and allocates nothing.

use std::fmt;

/// Most parts a [`TuneKey`] holds.
pub const MAX_KEY_PARTS: usize = 4;

/// A key within one tunable set: up to four `u32` parts, shown as `a`, `axb`, `axbxc`, ...
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TuneKey {
    parts: [u32; MAX_KEY_PARTS],
    len: u8,
}

impl TuneKey {
    /// A key of `N <= 4` parts (checked at compile time).
    pub const fn new<const N: usize>(parts: [u32; N]) -> TuneKey {
        const { assert!(N <= MAX_KEY_PARTS, "a TuneKey holds at most four parts") };
        let mut all = [0; MAX_KEY_PARTS];
        let mut i = 0;
        while i < N {
            all[i] = parts[i];
            i += 1;
        }
        TuneKey {
            parts: all,
            len: N as u8,
        }
    }

    /// The key's parts.
    pub fn parts(&self) -> &[u32] {
        &self.parts[..usize::from(self.len)]
    }

    /// Part `index`, or 0 when the key has fewer parts.
    pub fn part(&self, index: usize) -> u32 {
        self.parts().get(index).copied().unwrap_or(0)
    }
}

impl fmt::Display for TuneKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, part) in self.parts().iter().enumerate() {
            if i > 0 {
                f.write_str("x")?;
            }
            write!(f, "{part}")?;
        }
        Ok(())
    }
}

/// The power-of-two bucket of `value`: the smallest power of two at least `value` (1 for 0),
/// capped at 2^31.
pub fn pow2_bucket(value: u64) -> u32 {
    let bucket = value.max(1).checked_next_power_of_two().unwrap_or(1 << 31);
    u32::try_from(bucket.min(1 << 31)).unwrap_or(1 << 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_displays_its_parts_joined_by_x() {
        assert_eq!(TuneKey::new([64, 128, 32]).to_string(), "64x128x32");
        assert_eq!(TuneKey::new([4096]).to_string(), "4096");
    }

    #[test]
    fn keys_with_the_same_parts_but_different_lengths_differ() {
        assert_ne!(TuneKey::new([1, 0]), TuneKey::new([1]));
    }

    #[test]
    fn pow2_bucket_rounds_up_to_a_power_of_two() {
        assert_eq!(pow2_bucket(0), 1);
        assert_eq!(pow2_bucket(1), 1);
        assert_eq!(pow2_bucket(1000), 1024);
        assert_eq!(pow2_bucket(1024), 1024);
        assert_eq!(pow2_bucket(u64::MAX), 1 << 31);
    }
}
