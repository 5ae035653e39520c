//! The race detector of checked launches on the host backends: a shadow of every device-buffer
//! element a launch touches, recording which units loaded, stored and atomically changed it, so
//! that two units of one launch storing to one element, or one storing to what another loads,
//! or a plain access to what another unit changes atomically, is found and named.
//!
//! Atomics of different units on one element are not a race; neither is a unit reading what it
//! wrote itself. Read-only bindings are not tracked (nothing may store to them), nor are a
//! cube's shared arrays (plain Rust arrays of the CPU source, private to its cube, ordered by
//! its barriers). A unit is known by the [`KernelIo::at_unit`] calls of the CPU source (the
//! generated sources make them; `map_f32`/`map_u32` name each element's unit); a source that
//! makes none is seen as one unit per cube, and the error says the unit is unknown.
//!
//! Accesses through [`BufferIo::words`](super::BufferIo::words) are not seen: the generated
//! sources use it only where each unit touches its own element (`global_index()`).
//!
//! The shadow lives only for a tracked launch, in striped maps of the elements touched, so it
//! costs memory by what a launch touches and a lock per access: the sim tracks every checked
//! launch; the cpu backend in builds with debug assertions (as Rust checks overflow).

use super::KernelIo;
use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use std::cell::Cell;

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
    /// ([`KernelIo::at_unit`]).
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

/// A race as the shadow finds it: binding `buffer`'s element `element`, and the two accesses
/// (units as launch-wide ids, see [`UnitId`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Race {
    /// The binding's position in the launch.
    pub buffer: usize,
    /// The element's index.
    pub element: u64,
    /// The access recorded first.
    pub first: (UnitId, AccessKind),
    /// The access that conflicts with it.
    pub second: (UnitId, AccessKind),
}

/// A unit of a launch: its cube's index (`CubeContext::cube_index`) and, where the source named
/// it, its index in the cube.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UnitId {
    /// The cube's flattened index.
    pub cube: u64,
    /// The unit's flattened index in its cube, if named.
    pub unit: Option<u32>,
}

impl UnitId {
    /// This unit with its cube's position and its own, for a launch of `count` cubes of `dim`.
    pub fn describe(self, kind: AccessKind, count: [u32; 3], dim: [u32; 3]) -> RacingAccess {
        let unflatten = |index: u64, sides: [u32; 3]| {
            let [x, y, _] = sides.map(|s| u64::from(s.max(1)));
            [
                (index % x) as u32,
                ((index / x) % y) as u32,
                (index / x / y) as u32,
            ]
        };
        RacingAccess {
            cube: unflatten(self.cube, count),
            unit: self.unit.map(|u| unflatten(u64::from(u), dim)),
            kind,
        }
    }
}

/// Who touched one element so far: a storer, two distinct loaders and two distinct atomic users
/// are enough to name another unit than the one accessing it now.
#[derive(Clone, Copy, Debug, Default)]
struct Seen {
    store: Option<UnitId>,
    loads: [Option<UnitId>; 2],
    atomics: [Option<UnitId>; 2],
}

/// One of `ids` other than `me`.
fn other(ids: &[Option<UnitId>; 2], me: UnitId) -> Option<UnitId> {
    ids.iter().flatten().copied().find(|&id| id != me)
}

/// Records `me` among `ids` if there is room and it is not there.
fn remember(ids: &mut [Option<UnitId>; 2], me: UnitId) {
    if ids.contains(&Some(me)) {
        return;
    }
    if let Some(slot) = ids.iter_mut().find(|slot| slot.is_none()) {
        *slot = Some(me);
    }
}

impl Seen {
    /// Records `kind` by `me`; the earlier access it races with, if any.
    fn access(&mut self, me: UnitId, kind: AccessKind) -> Option<(UnitId, AccessKind)> {
        let stored = self.store.filter(|&id| id != me);
        let conflict = match kind {
            AccessKind::Load => stored
                .map(|id| (id, AccessKind::Store))
                .or_else(|| other(&self.atomics, me).map(|id| (id, AccessKind::Atomic))),
            AccessKind::Store => stored
                .map(|id| (id, AccessKind::Store))
                .or_else(|| other(&self.loads, me).map(|id| (id, AccessKind::Load)))
                .or_else(|| other(&self.atomics, me).map(|id| (id, AccessKind::Atomic))),
            AccessKind::Atomic => stored
                .map(|id| (id, AccessKind::Store))
                .or_else(|| other(&self.loads, me).map(|id| (id, AccessKind::Load))),
        };
        match kind {
            AccessKind::Load => remember(&mut self.loads, me),
            AccessKind::Store => {
                self.store.get_or_insert(me);
            }
            AccessKind::Atomic => remember(&mut self.atomics, me),
        }
        conflict
    }
}

/// Stripes of the shadow: accesses to elements of different stripes never wait for each other.
const STRIPES: usize = 64;

/// The shadow of one tracked launch: what each touched element saw, and the first race found.
#[derive(Debug)]
pub struct RaceShadow {
    stripes: Vec<Mutex<FxHashMap<(usize, u64), Seen>>>,
    first: Mutex<Option<Race>>,
}

impl Default for RaceShadow {
    fn default() -> Self {
        RaceShadow {
            stripes: (0..STRIPES).map(|_| Mutex::default()).collect(),
            first: Mutex::new(None),
        }
    }
}

// A kernel's launch unwinds through the shadow (`catch_unwind` of the backend, of tests): each
// access updates its element's record in one step under the lock, so no unwind leaves a record
// half made, and `KernelIo` stays `RefUnwindSafe` as it was before it held a shadow.
impl std::panic::RefUnwindSafe for RaceShadow {}

thread_local! {
    /// The unit whose code runs on this thread: set per cube by the backend and per unit by the
    /// CPU source (`KernelIo::at_unit`), read by the shadow at each access.
    static RUNNING: Cell<UnitId> = const { Cell::new(UnitId { cube: 0, unit: None }) };
}

impl RaceShadow {
    /// Records `kind` of element `element` of binding `buffer` by the unit running on this
    /// thread; keeps the launch's first race.
    pub(crate) fn access(&self, buffer: usize, element: usize, kind: AccessKind) {
        let me = RUNNING.with(Cell::get);
        let element = element as u64;
        let stripe = (element as usize ^ buffer.wrapping_mul(31)) % STRIPES;
        let conflict = self.stripes[stripe]
            .lock()
            .entry((buffer, element))
            .or_default()
            .access(me, kind);
        if let Some(first) = conflict {
            self.first.lock().get_or_insert(Race {
                buffer,
                element,
                first,
                second: (me, kind),
            });
        }
    }

    /// The launch's first race, if any.
    pub fn race(&self) -> Option<Race> {
        *self.first.lock()
    }

    /// Marks this thread as running cube `cube`, its units not named yet.
    pub fn enter_cube(cube: u64) {
        RUNNING.with(|running| running.set(UnitId { cube, unit: None }));
    }

    /// Marks this thread as running `unit` of the cube it runs.
    fn enter_unit(unit: u32) {
        RUNNING.with(|running| {
            running.set(UnitId {
                unit: Some(unit),
                ..running.get()
            })
        });
    }

    /// Marks this thread as running the unit of global 1-D index `global`, of cubes of `units`.
    fn enter_global(global: u64, units: u64) {
        let units = units.max(1);
        RUNNING.with(|running| {
            running.set(UnitId {
                cube: global / units,
                unit: Some((global % units) as u32),
            })
        });
    }
}

impl KernelIo<'_> {
    /// The accesses that follow are unit `unit`'s (its flattened index in the cube) of the cube
    /// running: for the race detector of checked launches on the cpu and sim backends. A CPU
    /// source that runs its cube's units one after the other calls it as each unit starts
    /// (the generated sources do); without it, a cube is seen as one unit. Costs a branch
    /// when the launch is not tracked.
    #[inline]
    pub fn at_unit(&self, unit: u32) {
        if self.races().is_some() {
            RaceShadow::enter_unit(unit);
        }
    }

    /// For `map_f32`/`map_u32`: the unit of global 1-D index `global` runs, in cubes of
    /// `units`.
    #[inline]
    pub(crate) fn at_global(&self, global: usize, units: u64) {
        if self.races().is_some() {
            RaceShadow::enter_global(global as u64, units);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(cube: u64, unit: u32) -> UnitId {
        UnitId {
            cube,
            unit: Some(unit),
        }
    }

    #[test]
    fn two_units_storing_one_element_race_and_one_unit_alone_does_not() {
        let mut seen = Seen::default();
        assert_eq!(seen.access(unit(0, 1), AccessKind::Load), None);
        assert_eq!(seen.access(unit(0, 1), AccessKind::Store), None);
        assert_eq!(seen.access(unit(0, 1), AccessKind::Load), None);
        assert_eq!(
            seen.access(unit(1, 1), AccessKind::Store),
            Some((unit(0, 1), AccessKind::Store))
        );
    }

    #[test]
    fn loads_of_many_units_are_no_race_until_one_stores() {
        let mut seen = Seen::default();
        for u in 0..5 {
            assert_eq!(seen.access(unit(0, u), AccessKind::Load), None);
        }
        // Unit 0 loaded it first; storing names another loader.
        assert_eq!(
            seen.access(unit(0, 0), AccessKind::Store),
            Some((unit(0, 1), AccessKind::Load))
        );
    }

    #[test]
    fn atomics_of_many_units_are_no_race_but_a_plain_access_beside_them_is() {
        let mut seen = Seen::default();
        for u in 0..5 {
            assert_eq!(seen.access(unit(u, 0), AccessKind::Atomic), None);
        }
        assert_eq!(
            seen.access(unit(0, 0), AccessKind::Load),
            Some((unit(1, 0), AccessKind::Atomic))
        );
    }

    #[test]
    fn a_unit_is_described_by_its_cube_and_its_position() {
        let racing = unit(5, 9).describe(AccessKind::Store, [2, 3, 4], [4, 4, 1]);
        assert_eq!(
            racing.to_string(),
            "unit (1, 2, 0) of cube (1, 2, 0) stored to it"
        );
        let unnamed = UnitId {
            cube: 0,
            unit: None,
        }
        .describe(AccessKind::Load, [1, 1, 1], [4, 1, 1]);
        assert_eq!(unnamed.to_string(), "a unit of cube (0, 0, 0) loaded it");
    }
}
