//! The race detector of checked launches on the host backends: a shadow of every device-buffer
//! element a launch touches, recording which units loaded, stored and atomically changed it, so
//! that two units of one launch storing to one element, or one storing to what another loads,
//! or a plain access to what another unit changes atomically, is found and named.
//!
//! Atomics of different units on one element are not a race; neither is a unit reading what it
//! wrote itself. Read-only bindings are not tracked (nothing may store to them), nor are a
//! cube's shared arrays (plain Rust arrays of the CPU source, private to its cube, ordered by
//! its barriers). A unit is known by the [`KernelIo::at_unit`](super::KernelIo::at_unit) calls of the CPU source (the
//! generated sources make them; `map_f32`/`map_u32` name each element's unit); a source that
//! makes none is seen as one unit per cube, and the error says the unit is unknown.
//!
//! Accesses through [`BufferIo::words`](super::BufferIo::words) are not seen: the generated
//! sources use it only where each unit touches its own element (`global_index()`).
//!
//! The shadow lives only for a tracked launch: one word per element of each writable binding
//! (made when the launch first touches the binding), updated by one compare-and-swap per access
//! (about 2x the time of an untracked launch in a debug build). The sim tracks every checked
//! launch; the cpu backend in builds with debug assertions (as Rust checks overflow).

pub use super::racing::{AccessKind, RacingAccess};

use parking_lot::Mutex;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

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

/// An element's record, one word: what touched it (`KIND_*`, bits 62–63), whether two or more
/// units did (`SHARED`, bit 61), and the first unit (its [`UnitId`] encoded, plus one).
const KIND_SHIFT: u32 = 62;
const KIND_LOAD: u64 = 1;
const KIND_STORE: u64 = 2;
const KIND_ATOMIC: u64 = 3;
const SHARED: u64 = 1 << 61;
const ID_MASK: u64 = SHARED - 1;

/// What `me` doing `kind` to an element recorded as `state` makes of it: the new record, or the
/// earlier access (its kind, and whether it was the first unit or another) it races with.
fn next_state(state: u64, me: u64, kind: AccessKind) -> Result<u64, (AccessKind, bool)> {
    let recorded = state >> KIND_SHIFT;
    let first = state & ID_MASK;
    let shared = state & SHARED != 0;
    let only_me = first == me && !shared;
    let fresh = |kind: u64| (kind << KIND_SHIFT) | me;
    // Another unit: the first one unless it is `me`, else the one that made the record shared.
    let other = first != me;
    match (recorded, kind) {
        (0, AccessKind::Load) => Ok(fresh(KIND_LOAD)),
        (0, AccessKind::Store) => Ok(fresh(KIND_STORE)),
        (0, AccessKind::Atomic) => Ok(fresh(KIND_ATOMIC)),
        (KIND_LOAD, AccessKind::Load) if first == me => Ok(state),
        (KIND_LOAD, AccessKind::Load) => Ok(state | SHARED),
        (KIND_LOAD, AccessKind::Store) if only_me => Ok(fresh(KIND_STORE)),
        (KIND_LOAD, AccessKind::Atomic) if only_me => Ok(fresh(KIND_ATOMIC)),
        (KIND_LOAD, _) => Err((AccessKind::Load, other)),
        (KIND_STORE, _) if first == me => Ok(state),
        (KIND_STORE, _) => Err((AccessKind::Store, true)),
        (_, AccessKind::Atomic) if first == me => Ok(state),
        (_, AccessKind::Atomic) => Ok(state | SHARED),
        (_, AccessKind::Store) if only_me => Ok(fresh(KIND_STORE)),
        (_, AccessKind::Load) if only_me => Ok(state),
        (_, _) => Err((AccessKind::Atomic, other)),
    }
}

/// One binding's records: one word per element, made when the launch first touches it.
#[derive(Debug)]
struct BufferShadow {
    elements: usize,
    states: std::sync::OnceLock<Box<[AtomicU64]>>,
    /// For each element, the last unit that made its record shared (to name a second unit).
    second: std::sync::OnceLock<Box<[AtomicU64]>>,
}

/// The shadow of one tracked launch: a record per element of its writable bindings, and the
/// first race found.
#[derive(Debug)]
pub struct RaceShadow {
    buffers: Vec<BufferShadow>,
    units_per_cube: u64,
    first: Mutex<Option<Race>>,
}

// A kernel's launch unwinds through the shadow (`catch_unwind` of the backend, of tests): each
// access updates its element's record in one atomic step, and the first race is set whole under
// its lock, so no unwind leaves a record half made, and `KernelIo` stays `RefUnwindSafe` as it
// was before it held a shadow.
impl std::panic::RefUnwindSafe for RaceShadow {}

thread_local! {
    /// The unit whose code runs on this thread: set per cube by the backend and per unit by the
    /// CPU source (`KernelIo::at_unit`), read by the shadow at each access.
    static RUNNING: Cell<UnitId> = const { Cell::new(UnitId { cube: 0, unit: None }) };
}

fn zeroed(len: usize) -> Box<[AtomicU64]> {
    std::iter::repeat_with(|| AtomicU64::new(0))
        .take(len)
        .collect()
}

impl RaceShadow {
    /// A shadow for a launch whose bindings hold `elements` 32-bit elements each, in cubes of
    /// `units_per_cube` units.
    pub fn new(elements: impl IntoIterator<Item = usize>, units_per_cube: u64) -> RaceShadow {
        RaceShadow {
            buffers: elements
                .into_iter()
                .map(|elements| BufferShadow {
                    elements,
                    states: std::sync::OnceLock::new(),
                    second: std::sync::OnceLock::new(),
                })
                .collect(),
            units_per_cube: units_per_cube.max(1),
            first: Mutex::new(None),
        }
    }

    /// `id` as a record's unit: the cube's units, then one for "not named", plus one.
    fn encode(&self, id: UnitId) -> u64 {
        let unit = id.unit.map_or(self.units_per_cube, u64::from);
        (id.cube * (self.units_per_cube + 1) + unit + 1) & ID_MASK
    }

    fn decode(&self, code: u64) -> UnitId {
        let code = code.saturating_sub(1);
        let unit = code % (self.units_per_cube + 1);
        UnitId {
            cube: code / (self.units_per_cube + 1),
            unit: (unit < self.units_per_cube).then_some(unit as u32),
        }
    }

    /// Records `kind` of element `element` of binding `buffer` by the unit running on this
    /// thread; keeps the launch's first race.
    pub(crate) fn access(&self, buffer: usize, element: usize, kind: AccessKind) {
        let Some(shadow) = self.buffers.get(buffer) else {
            return;
        };
        let states = shadow.states.get_or_init(|| zeroed(shadow.elements));
        let Some(word) = states.get(element) else {
            return;
        };
        let me = self.encode(RUNNING.with(Cell::get));
        let mut state = word.load(Ordering::SeqCst);
        loop {
            match next_state(state, me, kind) {
                Ok(next) if next == state => return,
                Ok(next) => {
                    match word.compare_exchange(state, next, Ordering::SeqCst, Ordering::SeqCst) {
                        Ok(_) => {
                            if next & SHARED != 0 && state & SHARED == 0 {
                                let second = shadow.second.get_or_init(|| zeroed(shadow.elements));
                                second[element].store(me, Ordering::SeqCst);
                            }
                            return;
                        }
                        Err(now) => state = now,
                    }
                }
                Err((earlier, first_unit)) => {
                    let code = if first_unit {
                        state & ID_MASK
                    } else {
                        shadow
                            .second
                            .get()
                            .map_or(0, |second| second[element].load(Ordering::SeqCst))
                    };
                    let earlier_unit = if code == 0 || code == me {
                        // The other unit was not recorded (it raced with the record itself).
                        UnitId {
                            cube: u64::MAX,
                            unit: None,
                        }
                    } else {
                        self.decode(code)
                    };
                    self.first.lock().get_or_insert(Race {
                        buffer,
                        element: element as u64,
                        first: (earlier_unit, earlier),
                        second: (self.decode(me), kind),
                    });
                    return;
                }
            }
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
    pub(super) fn enter_unit(unit: u32) {
        RUNNING.with(|running| {
            running.set(UnitId {
                unit: Some(unit),
                ..running.get()
            })
        });
    }

    /// Marks this thread as running the unit of global 1-D index `global`, of cubes of `units`.
    pub(super) fn enter_global(global: u64, units: u64) {
        let units = units.max(1);
        RUNNING.with(|running| {
            running.set(UnitId {
                cube: global / units,
                unit: Some((global % units) as u32),
            })
        });
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

    /// `accesses` by `(cube, unit, kind)` on one element of a one-binding launch of 8-unit
    /// cubes, in order; the race found, as (earlier, later).
    fn run(
        accesses: &[(u64, u32, AccessKind)],
    ) -> Option<((UnitId, AccessKind), (UnitId, AccessKind))> {
        let shadow = RaceShadow::new([4], 8);
        for &(cube, u, kind) in accesses {
            RaceShadow::enter_cube(cube);
            RaceShadow::enter_unit(u);
            shadow.access(0, 2, kind);
        }
        shadow.race().map(|race| {
            assert_eq!((race.buffer, race.element), (0, 2));
            (race.first, race.second)
        })
    }

    use AccessKind::{Atomic, Load, Store};

    #[test]
    fn two_units_storing_one_element_race_and_one_unit_alone_does_not() {
        assert_eq!(run(&[(0, 1, Load), (0, 1, Store), (0, 1, Load)]), None);
        assert_eq!(
            run(&[(0, 1, Load), (0, 1, Store), (1, 1, Store)]),
            Some(((unit(0, 1), Store), (unit(1, 1), Store)))
        );
    }

    #[test]
    fn loads_of_many_units_are_no_race_until_one_stores() {
        let loads: Vec<_> = (0..5).map(|u| (0, u, Load)).collect();
        assert_eq!(run(&loads), None);
        let mut then_store = loads.clone();
        then_store.push((0, 0, Store));
        // Unit 0 loaded it first; storing names the unit that made it shared.
        assert_eq!(
            run(&then_store),
            Some(((unit(0, 1), Load), (unit(0, 0), Store)))
        );
        let mut other_stores = loads;
        other_stores.push((3, 7, Store));
        assert_eq!(
            run(&other_stores),
            Some(((unit(0, 0), Load), (unit(3, 7), Store)))
        );
    }

    #[test]
    fn atomics_of_many_units_are_no_race_but_a_plain_access_beside_them_is() {
        let atomics: Vec<_> = (0..5).map(|c| (c, 0, Atomic)).collect();
        assert_eq!(run(&atomics), None);
        let mut then_load = atomics;
        then_load.push((0, 0, Load));
        assert_eq!(
            run(&then_load),
            Some(((unit(1, 0), Atomic), (unit(0, 0), Load)))
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
