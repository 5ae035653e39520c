//! One walker over the kernel's IR for the C-like targets (WGSL and CUDA C), parameterised by a
//! [`Dialect`]: each target's spelling of every statement and expression as data — templates
//! with named holes (`{a}`, `{name}`, ...), tables keyed by operator, function, cast and
//! built-in, and a few functions where a spelling depends on a value (literals). The walker
//! owns the structure (nesting, indentation, what is evaluated where); `wgsl.rs` and `cuda.rs`
//! hold their dialect and the text around the body (helpers, declarations, entry point).

use crate::ir::*;

/// A target language's spelling of the IR.
pub struct Dialect {
    /// Each type's name (`float`, `f32`) and its zero (`0.0f`, `0.0`).
    pub types: fn(Ty) -> (&'static str, &'static str),
    /// `let`: holes `{ty}`, `{name}`, `{value}`; immutable, then mutable.
    pub let_const: &'static str,
    pub let_mut: &'static str,
    /// A checked store to a buffer: `{index}`, `{name}`, `{value}`.
    pub store: &'static str,
    /// A checked store to a shared array: `{index}`, `{len}`, `{name}`, `{value}`.
    pub shared_store: &'static str,
    /// `if`'s and `while`'s heads: `{cond}`.
    pub if_head: &'static str,
    pub while_head: &'static str,
    /// A `for` loop: lines opening it (each at the statement's depth plus its offset; holes
    /// `{name}`, `{id}`, `{start}`, `{end}`), the body's depth offset, the closing lines.
    pub for_open: &'static [(usize, &'static str)],
    pub for_body: usize,
    pub for_close: &'static [(usize, &'static str)],
    pub return_stmt: &'static str,
    pub barrier: &'static str,
    /// An atomic operation whose old value is not used: `{value}`.
    pub discard: &'static str,
    /// Literals.
    pub f32_literal: fn(f32) -> String,
    pub i32_literal: fn(i32) -> String,
    /// A scalar parameter: `{name}`.
    pub scalar: &'static str,
    /// A checked load from a buffer and a shared array, a buffer's length: `{name}`,
    /// `{index}`, `{zero}`, `{len}`.
    pub load: &'static str,
    pub shared_load: &'static str,
    pub len: &'static str,
    /// Each built-in (`{units}`: units per cube).
    pub builtin: fn(Builtin) -> &'static str,
    /// Unary operations by operator and operand type (`None`: any): `{a}`.
    pub unary: &'static [(UnOp, Option<Ty>, &'static str)],
    /// Binary operations by operator and left operand's type (`None`: any): `{a}`, `{b}`,
    /// `{op}`; those not listed are `({a} {op} {b})`.
    pub binary: &'static [(BinOp, Option<Ty>, &'static str)],
    /// Conversions by source (`None`: any) and target type: `{a}`.
    pub cast: &'static [(Option<Ty>, Ty, &'static str)],
    /// Functions by their first argument's type (`None`: any): `{0}`, `{1}`, `{2}`, `{args}`
    /// (all, comma-separated).
    pub call: &'static [(Func, Option<Ty>, &'static str)],
    /// The device's own functions (`native_*`): a name called with the arguments.
    pub native: fn(NativeFunc) -> &'static str,
    /// `if c { a } else { b }` as a value: `{cond}`, `{then}`, `{els}`.
    pub select: &'static str,
    /// An atomic operation: `{name}`, `{ty}` (the element's), `{op}` (the method's name,
    /// `atomic_add`), `{k}` (the index), `{rest}` (the other arguments), `{args}` (all).
    pub atomic: fn(AtomicOp) -> &'static str,
    /// Around every atomic operation (`{value}`, `{k}`, `{name}`, `{zero}`), or `{value}`.
    pub atomic_bounds: &'static str,
    /// Where the target's compiler evaluates constant expressions (WGSL's naga, which refuses
    /// one that overflows): `text` of type `ty` as a value it cannot see. The walker applies
    /// it to an i32 operand of a unary operation, the left operand of a binary operation and
    /// the first argument of a call whose operands are all constant.
    pub opaque: Option<fn(&str, Ty) -> String>,
}

/// Fills the holes of `template` from `holes` (`{name}` → value); `{{` and `}}` are braces.
pub fn fill(template: &str, holes: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len() + 32);
    let mut rest = template;
    while let Some(at) = rest.find(['{', '}']) {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if tail.starts_with("{{") || tail.starts_with("}}") {
            out.push_str(&tail[..1]);
            rest = &tail[2..];
            continue;
        }
        if let Some(end) = tail.find('}').filter(|_| tail.starts_with('{')) {
            let key = &tail[1..end];
            if let Some((_, value)) = holes.iter().find(|(name, _)| *name == key) {
                out.push_str(value);
                rest = &tail[end + 1..];
                continue;
            }
        }
        out.push_str(&tail[..1]);
        rest = &tail[1..];
    }
    out.push_str(rest);
    out
}

/// Whether the target's compiler sees `expr` as a constant expression (float literals reach it
/// through an opaque zero, so they are not).
fn constant(expr: &Expr) -> bool {
    match &expr.kind {
        ExprKind::U32(_) | ExprKind::I32(_) | ExprKind::Bool(_) => true,
        ExprKind::Builtin(Builtin::UnitsPerCube) => true,
        ExprKind::Unary(..)
        | ExprKind::Cast(..)
        | ExprKind::Binary(..)
        | ExprKind::Call(..)
        | ExprKind::Select(..) => expr.children().into_iter().all(constant),
        _ => false,
    }
}

/// The walker: a kernel in a dialect.
pub struct Emitter<'a> {
    pub kernel: &'a Kernel,
    pub dialect: &'a Dialect,
}

fn indent(out: &mut String, depth: usize) {
    for _ in 0..depth {
        out.push_str("    ");
    }
}

/// A line at `depth`.
fn line(out: &mut String, depth: usize, text: &str) {
    indent(out, depth);
    out.push_str(text);
    out.push('\n');
}

impl Emitter<'_> {
    /// The statements `stmts`, each at `depth`.
    pub fn block(&self, stmts: &[Stmt], depth: usize, out: &mut String) {
        for stmt in stmts {
            self.stmt(stmt, depth, out);
        }
    }

    fn stmt(&self, stmt: &Stmt, depth: usize, out: &mut String) {
        let d = self.dialect;
        match stmt {
            Stmt::Let(id, value) => {
                let local = &self.kernel.locals[*id];
                let template = if local.mutable {
                    d.let_mut
                } else {
                    d.let_const
                };
                let value = self.expr(value);
                let text = fill(
                    template,
                    &[
                        ("ty", (d.types)(local.ty).0),
                        ("name", &local.name),
                        ("value", &value),
                    ],
                );
                line(out, depth, &text);
            }
            Stmt::Assign(Place::Local(id), value) => {
                let text = format!("{} = {};", self.kernel.locals[*id].name, self.expr(value));
                line(out, depth, &text);
            }
            Stmt::Assign(Place::Buffer(b, index, _), value) => {
                let (index, value) = (self.expr(index), self.expr(value));
                let text = fill(
                    d.store,
                    &[
                        ("index", &index),
                        ("name", &self.kernel.buffers[*b].name),
                        ("value", &value),
                    ],
                );
                line(out, depth, &text);
            }
            Stmt::Assign(Place::Shared(s, index), value) => {
                let shared = &self.kernel.shared[*s];
                let (index, value) = (self.expr(index), self.expr(value));
                let text = fill(
                    d.shared_store,
                    &[
                        ("index", &index),
                        ("len", &shared.len.to_string()),
                        ("name", &shared.name),
                        ("value", &value),
                    ],
                );
                line(out, depth, &text);
            }
            Stmt::If(cond, then, els) => {
                let cond = self.expr(cond);
                line(out, depth, &fill(d.if_head, &[("cond", &cond)]));
                self.block(then, depth + 1, out);
                if !els.is_empty() {
                    line(out, depth, "} else {");
                    self.block(els, depth + 1, out);
                }
                line(out, depth, "}");
            }
            Stmt::For {
                local,
                start,
                end,
                body,
                ..
            } => {
                // `start..end` is evaluated once, before the first iteration, as in Rust.
                let name = &self.kernel.locals[*local].name;
                let (start, end) = (self.expr(start), self.expr(end));
                let id = local.to_string();
                let holes = [
                    ("name", name.as_str()),
                    ("id", id.as_str()),
                    ("start", start.as_str()),
                    ("end", end.as_str()),
                ];
                for (offset, template) in d.for_open {
                    line(out, depth + offset, &fill(template, &holes));
                }
                self.block(body, depth + d.for_body, out);
                for (offset, text) in d.for_close {
                    line(out, depth + offset, text);
                }
            }
            Stmt::While(cond, body) => {
                let cond = self.expr(cond);
                line(out, depth, &fill(d.while_head, &[("cond", &cond)]));
                self.block(body, depth + 1, out);
                line(out, depth, "}");
            }
            Stmt::Break => line(out, depth, "break;"),
            Stmt::Continue => line(out, depth, "continue;"),
            Stmt::Return => line(out, depth, d.return_stmt),
            Stmt::Barrier => line(out, depth, d.barrier),
            Stmt::Atomic(op) => {
                let value = self.expr(op);
                line(out, depth, &fill(d.discard, &[("value", &value)]));
            }
        }
    }

    /// `expr` in the dialect.
    pub fn expr(&self, expr: &Expr) -> String {
        let d = self.dialect;
        let units = format!("{}u", self.kernel.units());
        match &expr.kind {
            ExprKind::F32(value) => (d.f32_literal)(*value),
            ExprKind::U32(value) => format!("{value}u"),
            ExprKind::I32(value) => (d.i32_literal)(*value),
            ExprKind::Bool(value) => value.to_string(),
            ExprKind::Local(id) => self.kernel.locals[*id].name.clone(),
            ExprKind::Scalar(j) => fill(d.scalar, &[("name", &self.kernel.scalars[*j].name)]),
            ExprKind::Load(b, index) => {
                let buffer = &self.kernel.buffers[*b];
                let index = self.expr(index);
                fill(
                    d.load,
                    &[
                        ("index", &index),
                        ("name", &buffer.name),
                        ("zero", (d.types)(buffer.elem).1),
                    ],
                )
            }
            ExprKind::Len(b) => fill(d.len, &[("name", &self.kernel.buffers[*b].name)]),
            ExprKind::SharedLoad(s, index) => {
                let shared = &self.kernel.shared[*s];
                let index = self.expr(index);
                fill(
                    d.shared_load,
                    &[
                        ("index", &index),
                        ("len", &shared.len.to_string()),
                        ("name", &shared.name),
                        ("zero", (d.types)(shared.elem).1),
                    ],
                )
            }
            ExprKind::Builtin(builtin) => fill((d.builtin)(*builtin), &[("units", &units)]),
            ExprKind::Unary(op, operand) => {
                let mut inner = self.expr(operand);
                if let Some(opaque) = d.opaque
                    && operand.ty == Ty::I32
                    && constant(operand)
                {
                    inner = opaque(&inner, operand.ty);
                }
                let template = lookup(d.unary, |(o, ty, _)| {
                    *o == *op && ty.is_none_or(|ty| ty == operand.ty)
                })
                .map_or("{a}", |(_, _, template)| template);
                fill(template, &[("a", &inner)])
            }
            ExprKind::Binary(op, left, right) => {
                let (mut a, b) = (self.expr(left), self.expr(right));
                if let Some(opaque) = d.opaque
                    && constant(left)
                    && constant(right)
                {
                    a = opaque(&a, left.ty);
                }
                let template = lookup(d.binary, |(o, ty, _)| {
                    *o == *op && ty.is_none_or(|ty| ty == left.ty)
                })
                .map_or("({a} {op} {b})", |(_, _, template)| template);
                fill(template, &[("a", &a), ("b", &b), ("op", op.symbol())])
            }
            ExprKind::Cast(value) => {
                let inner = self.expr(value);
                let template = lookup(d.cast, |(from, to, _)| {
                    *to == expr.ty && from.is_none_or(|from| from == value.ty)
                })
                .map_or("{a}", |(_, _, template)| template);
                fill(template, &[("a", &inner)])
            }
            ExprKind::Call(func, args) => {
                let mut a: Vec<String> = args.iter().map(|arg| self.expr(arg)).collect();
                if let Some(opaque) = d.opaque
                    && args.iter().all(constant)
                {
                    a[0] = opaque(&a[0], args[0].ty);
                }
                let ty = args.first().map(|arg| arg.ty);
                let joined = a.join(", ");
                let template = match func {
                    Func::Native(native) => {
                        return format!("{}({joined})", (d.native)(*native));
                    }
                    _ => lookup(d.call, |(f, t, _)| {
                        *f == *func && t.is_none_or(|t| Some(t) == ty)
                    })
                    .map_or("{args}", |(_, _, template)| template),
                };
                let get = |k: usize| a.get(k).map_or("", String::as_str);
                fill(
                    template,
                    &[
                        ("0", get(0)),
                        ("1", get(1)),
                        ("2", get(2)),
                        ("args", &joined),
                    ],
                )
            }
            ExprKind::Select(cond, then, els) => {
                let (cond, then, els) = (self.expr(cond), self.expr(then), self.expr(els));
                fill(d.select, &[("cond", &cond), ("then", &then), ("els", &els)])
            }
            ExprKind::Atomic(op, b, args) => {
                let buffer = &self.kernel.buffers[*b];
                let a: Vec<String> = args.iter().map(|arg| self.expr(arg)).collect();
                let method = AtomicOp::ALL
                    .iter()
                    .find(|(_, each)| each == op)
                    .map_or("atomic_load", |(name, _)| name);
                let (ty, zero) = (d.types)(buffer.elem);
                let rest = a[1..].join(", ");
                let args = a.join(", ");
                let value = fill(
                    (d.atomic)(*op),
                    &[
                        ("name", &buffer.name),
                        ("ty", ty),
                        ("op", method),
                        ("k", &a[0]),
                        ("rest", &rest),
                        ("args", &args),
                    ],
                );
                fill(
                    d.atomic_bounds,
                    &[
                        ("value", &value),
                        ("k", &a[0]),
                        ("name", &buffer.name),
                        ("zero", zero),
                    ],
                )
            }
        }
    }
}

/// The first entry of `table` that `matches`.
fn lookup<T>(table: &[T], matches: impl Fn(&T) -> bool) -> Option<&T> {
    table.iter().find(|entry| matches(entry))
}

#[cfg(test)]
mod tests {
    use super::fill;

    #[test]
    fn fill_replaces_named_holes_and_keeps_doubled_braces() {
        assert_eq!(
            fill("{{ x = {a} + {b}; }} {c}", &[("a", "1"), ("b", "{two}")]),
            "{ x = 1 + {two}; } {c}"
        );
    }
}
