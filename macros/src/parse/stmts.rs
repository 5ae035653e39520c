//! Statements: blocks and their scopes, `let`s (locals and shared arrays), assignments,
//! `if`, `for` loops and their exits, and where a barrier may stand in each.

use super::atomics::atomic_call;
use super::exprs::{compound, is_call_to};
use super::state::{
    BarrierPlace, LoopFrame, Name, Parser, check_name, coerce, expect, single_ident,
};
pub(crate) use super::state::{elem_type, local_type};
use crate::ir::*;
use proc_macro2::Span;
use std::collections::HashMap;
use syn::spanned::Spanned;
use syn::{Error, Expr as SynExpr, Result};

impl Parser {
    /// Parses statements in a scope of their own.
    pub(super) fn block(&mut self, stmts: &[syn::Stmt]) -> Result<Vec<Stmt>> {
        self.scopes.push(HashMap::new());
        let mut out = Vec::new();
        let mut result = Ok(());
        for stmt in stmts {
            match self.stmt(stmt) {
                Ok(parsed) => {
                    out.append(&mut self.pending);
                    out.extend(parsed);
                }
                Err(error) => {
                    result = Err(error);
                    break;
                }
            }
        }
        self.pending.clear();
        self.scopes.pop();
        result.map(|()| out)
    }

    /// Parses the statements of a nested block (`if`, a loop) under `place`.
    pub(super) fn nested(&mut self, stmts: &[syn::Stmt], place: BarrierPlace) -> Result<Vec<Stmt>> {
        let outer = std::mem::replace(&mut self.barrier_place, place);
        self.depth += 1;
        let result = self.block(stmts);
        self.depth -= 1;
        self.barrier_place = outer;
        result
    }

    /// The barrier place inside a construct: refused for `why`, or what it is outside.
    pub(super) fn inside(&self, allowed: bool, why: &str) -> BarrierPlace {
        match &self.barrier_place {
            BarrierPlace::Refused(reason) => BarrierPlace::Refused(reason.clone()),
            BarrierPlace::Allowed if allowed => BarrierPlace::Allowed,
            BarrierPlace::Allowed => BarrierPlace::Refused(why.to_string()),
        }
    }

    pub(super) fn stmt(&mut self, stmt: &syn::Stmt) -> Result<Option<Stmt>> {
        match stmt {
            syn::Stmt::Local(local) => self.local(local),
            syn::Stmt::Expr(expr, _) => self.expr_stmt(expr),
            syn::Stmt::Item(item) => Err(Error::new_spanned(
                item,
                "items (functions, constants, uses) are not in a kernel's body: the macro sees \
                 only the function itself",
            )),
            syn::Stmt::Macro(mac) => Err(Error::new_spanned(
                mac,
                "macros are not in the subset: the macro sees the tokens before they expand",
            )),
        }
    }

    /// A `let`: a local, or a shared array (which runs nothing where it stands).
    pub(super) fn local(&mut self, local: &syn::Local) -> Result<Option<Stmt>> {
        let (ident, mutable, annotated) = match &local.pat {
            syn::Pat::Ident(pat) if pat.by_ref.is_none() && pat.subpat.is_none() => {
                (&pat.ident, pat.mutability.is_some(), None)
            }
            syn::Pat::Type(typed) => match &*typed.pat {
                syn::Pat::Ident(pat) if pat.by_ref.is_none() && pat.subpat.is_none() => {
                    (&pat.ident, pat.mutability.is_some(), Some(&*typed.ty))
                }
                other => {
                    return Err(Error::new_spanned(
                        other,
                        "a local is a plain name: `let x = ..`",
                    ));
                }
            },
            other => {
                return Err(Error::new_spanned(
                    other,
                    "a local is a plain name (`let x = ..` or `let mut x: f32 = ..`): patterns \
                     are not in the subset",
                ));
            }
        };
        let Some(init) = &local.init else {
            return Err(Error::new_spanned(
                local,
                "give every local its value where it is declared: `let x = 0.0;`",
            ));
        };
        if let Some((_, diverge)) = &init.diverge {
            return Err(Error::new_spanned(
                diverge,
                "`let .. else` is not in the subset",
            ));
        }
        if let Some(shared) = self.shared_declaration(&init.expr)? {
            let (elem, len) = shared;
            if self.depth > 0 {
                return Err(Error::new_spanned(
                    local,
                    "a shared array is declared at the top of the kernel's body, not inside \
                     `if` or a loop: it is one array for the whole cube",
                ));
            }
            if annotated.is_some() {
                return Err(Error::new_spanned(
                    local,
                    "a shared array takes its type from `shared::<T, N>()`",
                ));
            }
            check_name(ident)?;
            let index = self.shared.len();
            self.shared.push(Shared {
                name: format!("gw_shared_{ident}_{index}"),
                elem,
                len,
            });
            self.scopes
                .last_mut()
                .expect("a scope is always open")
                .insert(ident.to_string(), Name::Shared(index));
            // Nothing to run here: the array is declared once per cube.
            return Ok(None);
        }
        if self.is_struct_value(&init.expr) {
            if let Some(ty) = annotated {
                return Err(Error::new_spanned(
                    ty,
                    "a struct local takes its type from its value: `let q = p[i];`",
                ));
            }
            let stmts = self.struct_let(ident, mutable, &init.expr)?;
            self.pending.extend(stmts);
            return Ok(None);
        }
        if self.is_vector(&init.expr) {
            if let Some(ty) = annotated {
                return Err(Error::new_spanned(
                    ty,
                    "a vector local takes its type from its value: `let v = vec2(x, y);`",
                ));
            }
            let value = self.vector(&init.expr)?;
            let stmts = self.vector_let(ident, mutable, value)?;
            self.pending.extend(stmts);
            return Ok(None);
        }
        let mut value = match atomic_call(&init.expr) {
            Some(call) => self.atomic(call)?,
            None => self.expr(&init.expr)?,
        };
        if let Some(ty) = annotated {
            let Some(declared) = local_type(ty) else {
                return Err(Error::new_spanned(
                    ty,
                    "a local is `f32`, `u32`, `i32` or `bool`",
                ));
            };
            value = coerce(value, declared);
            expect(&value, declared, &init.expr)?;
        }
        let uniform = !mutable && self.uniform(&value);
        let id = self.declare(ident, value.ty, mutable, uniform)?;
        Ok(Some(Stmt::Let(id, value)))
    }

    /// `shared::<T, N>()`: the element type and length, if `expr` is that call.
    pub(super) fn shared_declaration(&mut self, expr: &SynExpr) -> Result<Option<(Ty, u32)>> {
        let SynExpr::Call(call) = expr else {
            return Ok(None);
        };
        let SynExpr::Path(path) = &*call.func else {
            return Ok(None);
        };
        let Some(segment) = path.path.segments.last() else {
            return Ok(None);
        };
        if segment.ident != "shared" || path.path.segments.len() != 1 {
            return Ok(None);
        }
        let usage = "a shared array is `shared::<f32, 256>()` (or `u32`, `i32`), with a literal \
                     length or a constant of the kernel's module holding one";
        let syn::PathArguments::AngleBracketed(args) = &segment.arguments else {
            return Err(Error::new_spanned(expr, usage));
        };
        if args.args.len() != 2 || !call.args.is_empty() {
            return Err(Error::new_spanned(expr, usage));
        }
        let elem = match &args.args[0] {
            syn::GenericArgument::Type(ty) => elem_type(ty),
            _ => None,
        };
        let len = match &args.args[1] {
            syn::GenericArgument::Const(SynExpr::Lit(syn::ExprLit {
                lit: syn::Lit::Int(int),
                ..
            })) => int.base10_parse::<u32>().ok(),
            // A constant of the kernel's module whose value is a u32 literal.
            syn::GenericArgument::Type(syn::Type::Path(path)) => match path.path.get_ident() {
                Some(ident) if self.context.consts.contains_key(&ident.to_string()) => {
                    match self.constant(ident)?.kind {
                        ExprKind::U32(len) => Some(len),
                        _ => None,
                    }
                }
                _ => None,
            },
            _ => None,
        };
        match (elem, len) {
            (Some(elem), Some(len)) if len > 0 && len <= 16384 => Ok(Some((elem, len))),
            (Some(_), Some(_)) => Err(Error::new_spanned(
                &args.args[1],
                "a shared array holds 1 to 16,384 elements",
            )),
            _ => Err(Error::new_spanned(expr, usage)),
        }
    }

    /// A statement written as an expression: assignments, control flow, barriers.
    pub(super) fn expr_stmt(&mut self, expr: &SynExpr) -> Result<Option<Stmt>> {
        match expr {
            SynExpr::Assign(assign) if self.is_struct_store(&assign.left) => {
                let stmts = match &*assign.left {
                    SynExpr::Field(field) => {
                        let value = self.expr(&assign.right)?;
                        vec![self.store_field(field, value, &assign.right)?]
                    }
                    whole => self.store_element(whole, &assign.right)?,
                };
                self.pending.extend(stmts);
                Ok(None)
            }
            SynExpr::Binary(binary)
                if compound(&binary.op).is_some()
                    && matches!(&*binary.left, SynExpr::Field(_))
                    && self.is_struct_store(&binary.left) =>
            {
                let op = compound(&binary.op).expect("checked above");
                let SynExpr::Field(field) = &*binary.left else {
                    return Err(Error::new_spanned(&binary.left, "expected a field"));
                };
                let current = self.expr(&binary.left)?;
                let operand = self.expr(&binary.right)?;
                let value = self.binary(op, current, operand, binary.op.span())?;
                Ok(Some(self.store_field(field, value, expr)?))
            }
            SynExpr::Assign(assign) if self.is_vector(&assign.left) => {
                let SynExpr::Path(path) = &*assign.left else {
                    return Err(Error::new_spanned(&assign.left, "assign to a vector local"));
                };
                let target = single_ident(path)?;
                let value = self.vector(&assign.right)?;
                let stmts = self.vector_assign(target, value, &assign.right)?;
                self.pending.extend(stmts);
                Ok(None)
            }
            SynExpr::Binary(binary)
                if compound(&binary.op).is_some() && self.is_vector(&binary.left) =>
            {
                let op = compound(&binary.op).expect("checked above");
                let stmts = self.vector_compound(op, binary)?;
                self.pending.extend(stmts);
                Ok(None)
            }
            SynExpr::Assign(assign) => {
                let mut value = match atomic_call(&assign.right) {
                    Some(call) => {
                        let to_local = matches!(&*assign.left, SynExpr::Path(_))
                            && self.place_type(&assign.left).is_some();
                        if !to_local {
                            return Err(Error::new_spanned(
                                &assign.right,
                                "the old value of an atomic operation goes to a local (`let old = \
                                 counts.atomic_add(k, 1);`), or nowhere (`counts.atomic_add(k, 1);`)",
                            ));
                        }
                        self.atomic(call)?
                    }
                    None => self.expr(&assign.right)?,
                };
                if let Some(ty) = self.place_type(&assign.left) {
                    value = coerce(value, ty);
                }
                let place = self.place(&assign.left, value.ty, &assign.right)?;
                Ok(Some(Stmt::Assign(place, value)))
            }
            SynExpr::Binary(binary) if compound(&binary.op).is_some() => {
                let op = compound(&binary.op).expect("checked above");
                let current = self.expr(&binary.left)?;
                let place_expr = &binary.left;
                let operand = self.expr(&binary.right)?;
                let value = self.binary(op, current, operand, binary.op.span())?;
                let place = self.place(place_expr, value.ty, expr)?;
                Ok(Some(Stmt::Assign(place, value)))
            }
            SynExpr::If(if_expr) => self.if_stmt(if_expr).map(Some),
            SynExpr::ForLoop(for_loop) => self.for_loop(for_loop).map(Some),
            SynExpr::While(while_loop) => {
                if while_loop.label.is_some() {
                    return Err(Error::new_spanned(
                        while_loop,
                        "loop labels are not in the subset",
                    ));
                }
                let cond = self.expr(&while_loop.cond)?;
                expect(&cond, Ty::Bool, &while_loop.cond)?;
                let place = self.inside(
                    false,
                    "inside a `while` loop: units may run it a different number of times",
                );
                self.loops.push(LoopFrame {
                    barrier: false,
                    exits: Vec::new(),
                });
                let body = self.nested(&while_loop.body.stmts, place);
                self.loops.pop();
                Ok(Some(Stmt::While(cond, body?)))
            }
            SynExpr::Break(brk) => {
                if brk.label.is_some() || brk.expr.is_some() {
                    return Err(Error::new_spanned(
                        brk,
                        "`break` takes no label or value here",
                    ));
                }
                self.loop_exit(brk.span())?;
                Ok(Some(Stmt::Break))
            }
            SynExpr::Continue(cont) => {
                if cont.label.is_some() {
                    return Err(Error::new_spanned(
                        cont,
                        "loop labels are not in the subset",
                    ));
                }
                self.loop_exit(cont.span())?;
                Ok(Some(Stmt::Continue))
            }
            SynExpr::Return(ret) => {
                if let Some(value) = &ret.expr {
                    return Err(Error::new_spanned(value, "a kernel returns nothing"));
                }
                self.returns.push(ret.span());
                Ok(Some(Stmt::Return))
            }
            SynExpr::Call(call) if is_call_to(call, "sync_cube") => {
                if !call.args.is_empty() {
                    return Err(Error::new_spanned(call, "`sync_cube()` takes no arguments"));
                }
                if let BarrierPlace::Refused(why) = &self.barrier_place {
                    return Err(Error::new_spanned(
                        call,
                        format!(
                            "`sync_cube()` {why}: every unit of a cube must reach the same \
                             barriers. A barrier stands at the top of the body or in `for` loops \
                             whose bounds are the same for every unit of the cube"
                        ),
                    ));
                }
                self.has_barrier = true;
                for frame in &mut self.loops {
                    frame.barrier = true;
                }
                Ok(Some(Stmt::Barrier))
            }
            SynExpr::MethodCall(call) if atomic_call(expr).is_some() => {
                Ok(Some(Stmt::Atomic(self.atomic(call)?)))
            }
            SynExpr::Paren(paren) => self.expr_stmt(&paren.expr),
            SynExpr::Group(group) => self.expr_stmt(&group.expr),
            SynExpr::Block(block) if block.label.is_none() => Err(Error::new_spanned(
                block,
                "bare blocks are not in the subset: use `if` or a loop",
            )),
            SynExpr::Loop(lp) => Err(Error::new_spanned(
                lp.loop_token,
                "`loop` is not in the subset: write `while cond { .. }` or `for i in a..b { .. }`",
            )),
            other => {
                let value = self.expr(other)?;
                Err(Error::new_spanned(
                    other,
                    format!(
                        "this {} is computed and thrown away: a statement assigns, stores, \
                         branches, loops or calls `sync_cube()`",
                        value.ty.name()
                    ),
                ))
            }
        }
    }

    pub(super) fn loop_exit(&mut self, span: Span) -> Result<()> {
        match self.loops.last_mut() {
            Some(frame) => {
                frame.exits.push(span);
                Ok(())
            }
            None => Err(Error::new(
                span,
                "`break` and `continue` stand inside a loop",
            )),
        }
    }

    pub(super) fn if_stmt(&mut self, if_expr: &syn::ExprIf) -> Result<Stmt> {
        let cond = self.expr(&if_expr.cond)?;
        expect(&cond, Ty::Bool, &if_expr.cond)?;
        let place = self.inside(
            false,
            "inside an `if`: the units that skip the branch would never reach it",
        );
        let then = self.nested(&if_expr.then_branch.stmts, place.clone())?;
        let els = match &if_expr.else_branch {
            None => Vec::new(),
            Some((_, else_expr)) => match &**else_expr {
                SynExpr::Block(block) => self.nested(&block.block.stmts, place)?,
                SynExpr::If(nested) => {
                    let outer = std::mem::replace(&mut self.barrier_place, place);
                    self.depth += 1;
                    let stmt = self.if_stmt(nested);
                    self.depth -= 1;
                    self.barrier_place = outer;
                    vec![stmt?]
                }
                other => return Err(Error::new_spanned(other, "expected a block")),
            },
        };
        Ok(Stmt::If(cond, then, els))
    }

    pub(super) fn for_loop(&mut self, for_loop: &syn::ExprForLoop) -> Result<Stmt> {
        if for_loop.label.is_some() {
            return Err(Error::new_spanned(
                for_loop,
                "loop labels are not in the subset",
            ));
        }
        let syn::Pat::Ident(pat) = &*for_loop.pat else {
            return Err(Error::new_spanned(
                &for_loop.pat,
                "a `for` loop binds a plain name",
            ));
        };
        if pat.mutability.is_some() || pat.by_ref.is_some() {
            return Err(Error::new_spanned(pat, "a `for` loop binds a plain name"));
        }
        let mut range_expr = &*for_loop.expr;
        while let SynExpr::Paren(paren) = range_expr {
            range_expr = &paren.expr;
        }
        let range = match range_expr {
            SynExpr::Range(range) => range,
            other => {
                return Err(Error::new_spanned(
                    other,
                    "a `for` loop runs over a range `start..end` of u32",
                ));
            }
        };
        let (Some(start), Some(end), syn::RangeLimits::HalfOpen(_)) =
            (&range.start, &range.end, &range.limits)
        else {
            return Err(Error::new_spanned(
                range,
                "a `for` loop runs over a half-open range `start..end` with both ends given",
            ));
        };
        let start_value = self.expr(start)?;
        expect(&start_value, Ty::U32, start)?;
        let end_value = self.expr(end)?;
        expect(&end_value, Ty::U32, end)?;
        let uniform = self.uniform(&start_value) && self.uniform(&end_value);
        let place = self.inside(
            uniform,
            "inside a `for` loop whose bounds differ between units of a cube",
        );
        self.scopes.push(HashMap::new());
        let local = self.declare(&pat.ident, Ty::U32, false, uniform);
        let local = match local {
            Ok(local) => local,
            Err(error) => {
                self.scopes.pop();
                return Err(error);
            }
        };
        self.loops.push(LoopFrame {
            barrier: false,
            exits: Vec::new(),
        });
        let body = self.nested(&for_loop.body.stmts, place);
        let frame = self.loops.pop().expect("pushed above");
        self.scopes.pop();
        let body = body?;
        if frame.barrier
            && let Some(span) = frame.exits.first()
        {
            return Err(Error::new(
                *span,
                "`break` or `continue` in a loop with `sync_cube()`: the units that leave the \
                 iteration early would miss the barrier the others wait at",
            ));
        }
        Ok(Stmt::For {
            local,
            start: start_value,
            end: end_value,
            body,
            barrier: frame.barrier,
        })
    }
}
