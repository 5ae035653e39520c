//! Subnormals flushed, the same on every backend: NVIDIA's Vulkan driver flushes subnormal f32
//! operands and results of its float arithmetic to zero and offers no way to keep them, so the
//! subset flushes them everywhere (`gpuworld::kernel::ops::ftz_f32`, `gw_ftz` in the WGSL and
//! CUDA C). This pass rewrites the kernel before any generator sees it:
//! - the operands of `+ - * /`, comparisons, `min`/`max`, `floor`/`ceil`/`trunc`, `sqrt` and
//!   `mul_add` of f32 are flushed (a subnormal operand counts as a zero of its sign), unless
//!   the operand is a value that cannot be subnormal (below);
//! - the results of `+ - * /` and `mul_add` are flushed (a subnormal result becomes a zero of
//!   its sign): the others of the list cannot give a subnormal from normal operands;
//! - moves of bits are left alone: loads and stores, scalars, `f32::from_bits`/`to_bits`, unary
//!   `-` and `abs` (the sign bit), `if` values, and the float to integer conversions (a
//!   subnormal truncates to 0 either way). The transcendentals flush inside (`exact_math`);
//!   the `native_*` functions are the device's own.
//!
//! An operand needs no flush when it cannot be subnormal: a normal or zero literal, a
//! conversion from an integer, a result this pass flushes or one of the list above, `-`/`abs`
//! of such a value, an `if` of two, and a local every value assigned to which is one (found by
//! iterating to a fixed point over the kernel's assignments).

use crate::ir::*;

/// Rewrites `kernel` so that every float operation flushes subnormals (see the module doc).
pub fn apply(kernel: &mut Kernel) {
    // Locals that may hold a subnormal: start from none and add each local assigned a value
    // that may be one, until nothing changes.
    let mut unflushed = vec![false; kernel.locals.len()];
    loop {
        let mut changed = false;
        assignments(&kernel.body, &mut |local, value| {
            if kernel.locals[local].ty == Ty::F32
                && !unflushed[local]
                && !flushed(value, &unflushed)
            {
                unflushed[local] = true;
                changed = true;
            }
        });
        if !changed {
            break;
        }
    }
    let mut body = std::mem::take(&mut kernel.body);
    stmts(&mut body, &unflushed);
    kernel.body = body;
}

/// Calls `f` with each local and each value assigned to it (`let`, `=`, `for` counters are
/// u32 and not needed).
fn assignments(list: &[Stmt], f: &mut impl FnMut(LocalId, &Expr)) {
    for stmt in list {
        match stmt {
            Stmt::Let(local, value) | Stmt::Assign(Place::Local(local), value) => f(*local, value),
            Stmt::If(_, then, els) => {
                assignments(then, f);
                assignments(els, f);
            }
            Stmt::For { body, .. } | Stmt::While(_, body) => assignments(body, f),
            _ => {}
        }
    }
}

/// Whether `expr` (an f32, before this pass rewrites it) is never subnormal once rewritten.
fn flushed(expr: &Expr, unflushed: &[bool]) -> bool {
    match &expr.kind {
        ExprKind::F32(value) => !value.is_subnormal(),
        ExprKind::Local(local) => !unflushed[*local],
        ExprKind::Binary(BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div, ..) => true,
        ExprKind::Cast(_) => true,
        ExprKind::Call(func, args) => match func {
            Func::Fma
            | Func::Floor
            | Func::Ceil
            | Func::Trunc
            | Func::Sqrt
            | Func::Min
            | Func::Max
            | Func::Flush
            | Func::Exp
            | Func::Ln
            | Func::Sin
            | Func::Cos
            | Func::Tanh
            | Func::Powf => true,
            Func::Abs => flushed(&args[0], unflushed),
            Func::ToBits | Func::FromBits | Func::Native(_) => false,
        },
        ExprKind::Unary(UnOp::Neg, operand) => flushed(operand, unflushed),
        ExprKind::Select(_, then, els) => flushed(then, unflushed) && flushed(els, unflushed),
        _ => false,
    }
}

fn stmts(list: &mut [Stmt], unflushed: &[bool]) {
    for stmt in list {
        match stmt {
            Stmt::Let(_, value) | Stmt::Atomic(value) => expr(value, unflushed),
            Stmt::Assign(place, value) => {
                match place {
                    Place::Local(_) => {}
                    Place::Buffer(_, index, _) | Place::Shared(_, index) => expr(index, unflushed),
                }
                expr(value, unflushed);
            }
            Stmt::If(cond, then, els) => {
                expr(cond, unflushed);
                stmts(then, unflushed);
                stmts(els, unflushed);
            }
            Stmt::For {
                start, end, body, ..
            } => {
                expr(start, unflushed);
                expr(end, unflushed);
                stmts(body, unflushed);
            }
            Stmt::While(cond, body) => {
                expr(cond, unflushed);
                stmts(body, unflushed);
            }
            Stmt::Break | Stmt::Continue | Stmt::Return | Stmt::Barrier => {}
        }
    }
}

/// `value` flushed: `ftz(value)`.
fn wrap(value: Expr) -> Expr {
    Expr {
        ty: Ty::F32,
        kind: ExprKind::Call(Func::Flush, vec![value]),
    }
}

/// Flushes `operand` in place unless it cannot be subnormal.
fn operand(operand: &mut Expr, unflushed: &[bool]) {
    if operand.ty == Ty::F32 && !flushed(operand, unflushed) {
        let value = std::mem::replace(
            operand,
            Expr {
                ty: Ty::Bool,
                kind: ExprKind::Bool(false),
            },
        );
        *operand = wrap(value);
    }
}

/// Rewrites `e` and everything inside it.
fn expr(e: &mut Expr, unflushed: &[bool]) {
    let result = match &mut e.kind {
        ExprKind::Binary(op, left, right) if left.ty == Ty::F32 => {
            expr(left, unflushed);
            expr(right, unflushed);
            // `flushed` reads the operands as they were: a rewritten one is a flush or an
            // operation of the list, flushed either way.
            operand(left, unflushed);
            operand(right, unflushed);
            matches!(op, BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div)
        }
        ExprKind::Call(func, args)
            if matches!(
                func,
                Func::Min
                    | Func::Max
                    | Func::Floor
                    | Func::Ceil
                    | Func::Trunc
                    | Func::Sqrt
                    | Func::Fma
            ) && args.first().is_some_and(|arg| arg.ty == Ty::F32) =>
        {
            for arg in args.iter_mut() {
                expr(arg, unflushed);
                operand(arg, unflushed);
            }
            *func == Func::Fma
        }
        ExprKind::Load(_, a)
        | ExprKind::SharedLoad(_, a)
        | ExprKind::Unary(_, a)
        | ExprKind::Cast(a) => {
            expr(a, unflushed);
            false
        }
        ExprKind::Binary(_, a, b) => {
            expr(a, unflushed);
            expr(b, unflushed);
            false
        }
        ExprKind::Call(_, args) | ExprKind::Atomic(_, _, args) => {
            for arg in args.iter_mut() {
                expr(arg, unflushed);
            }
            false
        }
        ExprKind::Select(c, a, b) => {
            expr(c, unflushed);
            expr(a, unflushed);
            expr(b, unflushed);
            false
        }
        ExprKind::F32(_)
        | ExprKind::U32(_)
        | ExprKind::I32(_)
        | ExprKind::Bool(_)
        | ExprKind::Local(_)
        | ExprKind::Scalar(_)
        | ExprKind::Len(_)
        | ExprKind::Builtin(_) => false,
    };
    if result {
        let value = std::mem::replace(
            e,
            Expr {
                ty: Ty::Bool,
                kind: ExprKind::Bool(false),
            },
        );
        *e = wrap(value);
    }
}
