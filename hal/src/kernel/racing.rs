//! What a race report names: which unit did what to an element. A leaf, so that the errors
//! that carry it need not reach the detector (`race.rs`).

/// What a unit did to an element.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AccessKind {
    /// A plain load.
    Load,
    /// A plain store.
    Store,
    /// An atomic read-modify-write.
    Atomic,
}

impl AccessKind {
    /// The access as a verb, for messages.
    pub const fn verb(self) -> &'static str {
        match self {
            AccessKind::Load => "loaded",
            AccessKind::Store => "stored to",
            AccessKind::Atomic => "changed atomically",
        }
    }
}

/// One side of a race: the unit (its cube, and its position in the cube where the CPU source
/// names it) and what it did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RacingAccess {
    /// The unit's cube.
    pub cube: [u32; 3],
    /// The unit's position in its cube; `None` where the CPU source does not name its units
    /// ([`KernelIo::at_unit`](super::KernelIo::at_unit)).
    pub unit: Option<[u32; 3]>,
    /// What it did to the element.
    pub kind: AccessKind,
}

impl std::fmt::Display for RacingAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [cx, cy, cz] = self.cube;
        match self.unit {
            Some([x, y, z]) => write!(f, "unit ({x}, {y}, {z}) of cube ({cx}, {cy}, {cz})")?,
            None => write!(f, "a unit of cube ({cx}, {cy}, {cz})")?,
        }
        write!(f, " {} it", self.kind.verb())
    }
}
