//! No silent race: a store to a buffer element (`x[k] = ..`, `x[k] += ..`) whose index is not
//! derived from the storing unit's own position is a compile error, since two units of one
//! launch could then store to one element and the result would differ between backends.
//!
//! The rule, on the typed kernel: an index is *unit-derived* when it is computed from the unit's
//! or its cube's position (`global_index()`, `unit()`, `unit_x/y/z()`, `cube()`,
//! `cube_x/y/z()`) through arithmetic (`+ - * / % & | ^ << >> !`, `min`/`max`, casts) with
//! literals, scalars, lengths, loop counters and locals of such values, and from no value loaded
//! from a buffer or shared array. A comparison or a bool carries no position, and an `if .. else`
//! value is unit-derived when both of its branches are. A mutable local is unit-derived when
//! every value assigned to it is. The check is a filter, not a proof: `x[i / 2]` and
//! `x[cube()]` pass (the runtime's race detector in checked cpu and sim launches reports such
//! collisions). Stores to shared arrays are not checked.

use crate::ir::*;
use syn::{Error, Result};

/// Where a value comes from, as far as the race check cares.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Origin {
    /// Computed from the unit's or its cube's position.
    unit: bool,
    /// Depends on a value loaded from a buffer or shared array.
    loaded: bool,
}

const PLAIN: Origin = Origin {
    unit: false,
    loaded: false,
};

impl Origin {
    fn either(self, other: Origin) -> Origin {
        Origin {
            unit: self.unit || other.unit,
            loaded: self.loaded || other.loaded,
        }
    }

    /// Of a local assigned both values: unit-derived only when both are.
    fn both(self, other: Origin) -> Origin {
        Origin {
            unit: self.unit && other.unit,
            loaded: self.loaded || other.loaded,
        }
    }
}

/// Refuses a store to a buffer element at an index that is not unit-derived (module doc).
pub fn check(kernel: &Kernel) -> Result<()> {
    // Every local starts as the best origin and only worsens: a fixed point in a few rounds.
    let mut locals = vec![
        Origin {
            unit: true,
            loaded: false
        };
        kernel.locals.len()
    ];
    loop {
        let before = locals.clone();
        assigned(&kernel.body, &mut locals);
        if before == locals {
            break;
        }
    }
    stores(&kernel.body, kernel, &locals)
}

fn assigned(stmts: &[Stmt], locals: &mut [Origin]) {
    for stmt in stmts {
        match stmt {
            Stmt::Let(id, value) | Stmt::Assign(Place::Local(id), value) => {
                let origin = origin(value, locals);
                locals[*id] = locals[*id].both(origin);
            }
            Stmt::If(_, then, els) => {
                assigned(then, locals);
                assigned(els, locals);
            }
            Stmt::For {
                local,
                start,
                end,
                body,
                ..
            } => {
                let counter = Origin {
                    loaded: origin(end, locals).loaded,
                    ..PLAIN
                }
                .either(origin(start, locals));
                locals[*local] = locals[*local].both(counter);
                assigned(body, locals);
            }
            Stmt::While(_, body) => assigned(body, locals),
            _ => {}
        }
    }
}

fn origin(expr: &Expr, locals: &[Origin]) -> Origin {
    match &expr.kind {
        ExprKind::Local(id) => locals[*id],
        ExprKind::Load(..) | ExprKind::SharedLoad(..) | ExprKind::Atomic(..) => Origin {
            loaded: true,
            ..PLAIN
        },
        ExprKind::Builtin(builtin) => Origin {
            unit: !matches!(
                builtin,
                Builtin::CubeCountX
                    | Builtin::CubeCountY
                    | Builtin::CubeCountZ
                    | Builtin::UnitsPerCube
            ),
            loaded: false,
        },
        ExprKind::Select(cond, then, els) => {
            let loaded = origin(cond, locals).loaded;
            let value = origin(then, locals).both(origin(els, locals));
            Origin {
                loaded: value.loaded || loaded,
                ..value
            }
        }
        _ => {
            let inner = expr
                .children()
                .into_iter()
                .fold(PLAIN, |acc, child| acc.either(origin(child, locals)));
            if expr.ty == Ty::Bool {
                Origin {
                    unit: false,
                    ..inner
                }
            } else {
                inner
            }
        }
    }
}

fn stores(stmts: &[Stmt], kernel: &Kernel, locals: &[Origin]) -> Result<()> {
    for stmt in stmts {
        match stmt {
            Stmt::Assign(Place::Buffer(b, index, span), _) => {
                let origin = origin(index, locals);
                if origin.unit && !origin.loaded {
                    continue;
                }
                let buffer = &kernel.buffers[*b];
                let why = if origin.loaded {
                    "is computed from a value loaded from a buffer or shared array"
                } else {
                    "does not depend on the unit's position"
                };
                let name = &buffer.name;
                let atomics = match buffer.elem {
                    Ty::U32 | Ty::I32 => format!(
                        "declare the buffer `#[atomic] {name}: &mut [{}]` and use its atomic \
                         operations (`{name}.atomic_add(k, 1)`)",
                        buffer.elem.name()
                    ),
                    _ => "use a `#[atomic]` buffer of u32 or i32 and its atomic operations \
                          (`counts.atomic_add(k, 1)`)"
                        .to_string(),
                };
                return Err(Error::new(
                    *span,
                    format!(
                        "a store to `{name}` at an index that {why}: two units of a launch could \
                         store to one element, a race whose result differs between backends. \
                         Index with the unit's own position (`global_index()`, `unit()`, \
                         `cube()`, ..., and arithmetic on it with literals, scalars and loop \
                         counters), or, to count or combine into shared elements, {atomics}"
                    ),
                ));
            }
            Stmt::If(_, then, els) => {
                stores(then, kernel, locals)?;
                stores(els, kernel, locals)?;
            }
            Stmt::For { body, .. } | Stmt::While(_, body) => stores(body, kernel, locals)?,
            _ => {}
        }
    }
    Ok(())
}
