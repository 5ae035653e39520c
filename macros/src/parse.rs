//! From the Rust function to the typed kernel (`ir`): every construct outside the subset, every
//! type mismatch and every barrier some units could skip is a compile error at its span.

mod atomics;
mod inline;
mod state;
mod structs;
mod vector;

use crate::context::Context;
use crate::ir::*;
use atomics::{atomic_call, atomic_element};
use proc_macro2::Span;
use state::{
    Array, BarrierPlace, LoopFrame, Name, Parser, check_args, check_name, coerce, coerce_args,
    expect, mismatch, single_ident, unknown,
};
pub(crate) use state::{elem_type, local_type};
use std::collections::HashMap;
use std::rc::Rc;
use syn::spanned::Spanned;
use syn::{Error, Expr as SynExpr, Result};

/// Parses `function` into a kernel of `cube_dim` units per cube.
pub fn kernel(function: &syn::ItemFn, cube_dim: [u32; 3], context: Rc<Context>) -> Result<Kernel> {
    let signature = &function.sig;
    if let Some(token) = &signature.asyncness {
        return Err(Error::new_spanned(token, "a kernel is not `async`"));
    }
    if let Some(token) = &signature.unsafety {
        return Err(Error::new_spanned(token, "a kernel is not `unsafe`"));
    }
    if !signature.generics.params.is_empty() {
        return Err(Error::new_spanned(
            &signature.generics,
            "a kernel's generic parameters are given by its `instances(..)` option",
        ));
    }
    if let syn::ReturnType::Type(_, ty) = &signature.output {
        return Err(Error::new_spanned(
            ty,
            "a kernel returns nothing: it writes its results to `&mut` buffers",
        ));
    }
    let name = signature.ident.to_string();
    check_name(&signature.ident)?;
    let mut parser = Parser {
        buffers: Vec::new(),
        scalars: Vec::new(),
        shared: Vec::new(),
        locals: Vec::new(),
        vectors: Vec::new(),
        pending: Vec::new(),
        context,
        aliases: Vec::new(),
        struct_types: Vec::new(),
        struct_locals: Vec::new(),
        buffer_structs: HashMap::new(),
        inlining: Vec::new(),
        uses: Default::default(),
        scopes: vec![HashMap::new()],
        loops: Vec::new(),
        barrier_place: BarrierPlace::Allowed,
        has_barrier: false,
        returns: Vec::new(),
        depth: 0,
    };
    for input in &signature.inputs {
        parser.parameter(input)?;
    }
    let body = parser.block(&function.block.stmts)?;
    if parser.has_barrier
        && let Some(span) = parser.returns.first()
    {
        return Err(Error::new(
            *span,
            "`return` in a kernel with `sync_cube()`: a unit that returns never reaches the \
             barrier the others wait at; guard the work with `if` instead",
        ));
    }
    Ok(Kernel {
        name,
        cube_dim,
        buffers: parser.buffers,
        scalars: parser.scalars,
        shared: parser.shared,
        locals: parser.locals,
        body,
        has_barrier: parser.has_barrier,
        uses: parser.uses.into_iter().collect(),
        span: function.sig.ident.span(),
    })
}

impl Parser {
    fn parameter(&mut self, input: &syn::FnArg) -> Result<()> {
        let syn::FnArg::Typed(typed) = input else {
            return Err(Error::new_spanned(input, "a kernel takes no `self`"));
        };
        let syn::Pat::Ident(pat) = &*typed.pat else {
            return Err(Error::new_spanned(
                &typed.pat,
                "a kernel parameter is a plain name: `x: &[f32]`",
            ));
        };
        if pat.by_ref.is_some() || pat.subpat.is_some() {
            return Err(Error::new_spanned(
                pat,
                "a kernel parameter is a plain name",
            ));
        }
        check_name(&pat.ident)?;
        let name = pat.ident.to_string();
        if self.scopes[0].contains_key(&name) {
            return Err(Error::new_spanned(
                &pat.ident,
                format!("a second parameter `{name}`"),
            ));
        }
        let mut write_only = false;
        let mut atomic = None;
        for attr in &typed.attrs {
            if attr.path().is_ident("write_only") {
                write_only = true;
            } else if attr.path().is_ident("atomic") {
                atomic = Some(attr);
            } else {
                return Err(Error::new_spanned(
                    attr,
                    "the attributes of a kernel parameter are `#[write_only]` and `#[atomic]`",
                ));
            }
        }
        match &*typed.ty {
            syn::Type::Reference(reference) => {
                let syn::Type::Slice(slice) = &*reference.elem else {
                    return Err(Error::new_spanned(
                        &typed.ty,
                        "a buffer parameter is a slice of f32, u32 or i32: `&[f32]`, `&mut [u32]`, ...",
                    ));
                };
                let layout = match elem_type(&slice.elem) {
                    Some(_) => None,
                    None => match self.struct_type(&slice.elem)? {
                        Some(layout) => Some(layout),
                        None => {
                            return Err(Error::new_spanned(
                                &slice.elem,
                                "a buffer holds `f32`, `u32`, `i32`, or a `#[repr(C)]` struct \
                                 declared in the kernel's `#[gpuworld::kernels]` module",
                            ));
                        }
                    },
                };
                // A struct buffer is words to the generated code.
                let elem = elem_type(&slice.elem).unwrap_or(Ty::U32);
                if let (Some(attr), Some(_)) = (atomic, layout) {
                    return Err(Error::new_spanned(
                        attr,
                        "`#[atomic]` is for a `&mut [u32]` or `&mut [i32]` buffer, not one of structs",
                    ));
                }
                if let Some(layout) = layout {
                    self.buffer_structs.insert(self.buffers.len(), layout);
                }
                if reference.lifetime.is_some() {
                    return Err(Error::new_spanned(
                        reference,
                        "a buffer parameter takes no lifetime",
                    ));
                }
                if let Some(attr) = atomic
                    && (write_only || reference.mutability.is_none() || elem == Ty::F32)
                {
                    return Err(Error::new_spanned(
                        attr,
                        "`#[atomic]` is for a `&mut [u32]` or `&mut [i32]` buffer (not \
                         `#[write_only]`): `#[atomic] counts: &mut [u32]`",
                    ));
                }
                let access = match (reference.mutability.is_some(), write_only) {
                    _ if atomic.is_some() => Access::Atomic,
                    (false, false) => Access::Read,
                    (false, true) => {
                        return Err(Error::new_spanned(
                            &typed.ty,
                            "`#[write_only]` is for a `&mut` buffer the kernel only stores to",
                        ));
                    }
                    (true, false) => Access::ReadWrite,
                    (true, true) => Access::Write,
                };
                if !self.scalars.is_empty() {
                    return Err(Error::new_spanned(
                        input,
                        "buffers come before scalars: a launch binds the buffers, then the scalars",
                    ));
                }
                self.scopes[0].insert(name.clone(), Name::Buffer(self.buffers.len()));
                self.buffers.push(Buffer { name, elem, access });
            }
            ty => {
                if let Some(attr) = atomic {
                    return Err(Error::new_spanned(
                        attr,
                        "`#[atomic]` is for a `&mut [u32]` or `&mut [i32]` buffer",
                    ));
                }
                if write_only {
                    return Err(Error::new_spanned(
                        ty,
                        "`#[write_only]` is for a `&mut` buffer",
                    ));
                }
                let Some(scalar) = elem_type(ty) else {
                    return Err(Error::new_spanned(
                        ty,
                        "a kernel parameter is a buffer (`&[f32]`, `&mut [u32]`, ...) or a scalar \
                         (`f32`, `u32` or `i32`)",
                    ));
                };
                self.scopes[0].insert(name.clone(), Name::Scalar(self.scalars.len()));
                self.scalars.push(Scalar { name, ty: scalar });
            }
        }
        Ok(())
    }

    fn lookup(&self, name: &str) -> Option<Name> {
        self.scopes
            .iter()
            .rev()
            .find_map(|scope| scope.get(name).copied())
    }

    fn declare(
        &mut self,
        ident: &syn::Ident,
        ty: Ty,
        mutable: bool,
        uniform: bool,
    ) -> Result<LocalId> {
        check_name(ident)?;
        let user = ident.to_string();
        let id = self.locals.len();
        self.locals.push(Local {
            name: format!("gw_{user}_{id}"),
            ty,
            mutable,
            uniform,
            per_unit_array: false,
        });
        self.scopes
            .last_mut()
            .expect("a scope is always open")
            .insert(user, Name::Local(id));
        Ok(id)
    }

    /// A local the generated code needs and the kernel does not name (a vector's component, a
    /// temporary).
    fn hidden(&mut self, name: &str, ty: Ty, mutable: bool, uniform: bool) -> LocalId {
        let id = self.locals.len();
        self.locals.push(Local {
            name: format!("gw_{name}_{id}"),
            ty,
            mutable,
            uniform,
            per_unit_array: false,
        });
        id
    }

    /// Parses statements in a scope of their own.
    fn block(&mut self, stmts: &[syn::Stmt]) -> Result<Vec<Stmt>> {
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
    fn nested(&mut self, stmts: &[syn::Stmt], place: BarrierPlace) -> Result<Vec<Stmt>> {
        let outer = std::mem::replace(&mut self.barrier_place, place);
        self.depth += 1;
        let result = self.block(stmts);
        self.depth -= 1;
        self.barrier_place = outer;
        result
    }

    /// The barrier place inside a construct: refused for `why`, or what it is outside.
    fn inside(&self, allowed: bool, why: &str) -> BarrierPlace {
        match &self.barrier_place {
            BarrierPlace::Refused(reason) => BarrierPlace::Refused(reason.clone()),
            BarrierPlace::Allowed if allowed => BarrierPlace::Allowed,
            BarrierPlace::Allowed => BarrierPlace::Refused(why.to_string()),
        }
    }

    fn stmt(&mut self, stmt: &syn::Stmt) -> Result<Option<Stmt>> {
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
    fn local(&mut self, local: &syn::Local) -> Result<Option<Stmt>> {
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
    fn shared_declaration(&mut self, expr: &SynExpr) -> Result<Option<(Ty, u32)>> {
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
    fn expr_stmt(&mut self, expr: &SynExpr) -> Result<Option<Stmt>> {
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

    fn loop_exit(&mut self, span: Span) -> Result<()> {
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

    fn if_stmt(&mut self, if_expr: &syn::ExprIf) -> Result<Stmt> {
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

    fn for_loop(&mut self, for_loop: &syn::ExprForLoop) -> Result<Stmt> {
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

    /// The type of what `target` names (a local, or an array's element), if it names one.
    fn place_type(&self, target: &SynExpr) -> Option<Ty> {
        match target {
            SynExpr::Path(path) => match self.lookup(&path.path.get_ident()?.to_string())? {
                Name::Local(id) => Some(self.locals[id].ty),
                _ => None,
            },
            SynExpr::Index(index) => match &*index.expr {
                SynExpr::Path(path) => match self.lookup(&path.path.get_ident()?.to_string())? {
                    Name::Buffer(b) => Some(self.buffers[b].elem),
                    Name::Shared(s) => Some(self.shared[s].elem),
                    _ => None,
                },
                _ => None,
            },
            SynExpr::Paren(paren) => self.place_type(&paren.expr),
            SynExpr::Field(field) => self
                .component(field)
                .ok()
                .map(|(_, ty)| ty)
                .or_else(|| self.local_field_type(field)),
            _ => None,
        }
    }

    /// Where an assignment stores: a mutable local, a writable buffer's element, a shared
    /// array's element; `value_ty` must be its type.
    fn place(&mut self, target: &SynExpr, value_ty: Ty, value_tokens: &SynExpr) -> Result<Place> {
        match target {
            SynExpr::Path(path) => {
                let ident = single_ident(path)?;
                match self.lookup(&ident.to_string()) {
                    Some(Name::Local(id)) => {
                        let local = &self.locals[id];
                        if !local.mutable {
                            return Err(Error::new_spanned(
                                target,
                                format!("`{ident}` is not `mut`: declare it `let mut {ident}`"),
                            ));
                        }
                        if local.ty != value_ty {
                            return Err(mismatch(value_tokens, local.ty, value_ty));
                        }
                        Ok(Place::Local(id))
                    }
                    Some(Name::Scalar(_)) => Err(Error::new_spanned(
                        target,
                        format!(
                            "`{ident}` is a scalar parameter: copy it to a `let mut` to change it"
                        ),
                    )),
                    Some(Name::Buffer(_)) | Some(Name::Shared(_)) => Err(Error::new_spanned(
                        target,
                        format!("store to an element: `{ident}[i] = ..`"),
                    )),
                    Some(Name::Vector(_)) => Err(Error::new_spanned(
                        value_tokens,
                        format!("`{ident}` is a vector: assign it a vector"),
                    )),
                    Some(Name::Struct(_)) => Err(Error::new_spanned(
                        target,
                        format!("`{ident}` is a struct: assign its fields (`{ident}.x = ..`)"),
                    )),
                    Some(Name::Alias(_)) => Err(Error::new_spanned(
                        target,
                        format!(
                            "`{ident}` is a value of a `#[gpuworld::func]`: it is not assigned"
                        ),
                    )),
                    None => Err(unknown(ident)),
                }
            }
            SynExpr::Index(index) => {
                let (ident, array, position) = self.element(index)?;
                self.whole_element(array, target)?;
                match array {
                    Array::Buffer(b) => {
                        let buffer = &self.buffers[b];
                        if buffer.access == Access::Atomic {
                            return Err(atomic_element(ident));
                        }
                        if buffer.access == Access::Read {
                            return Err(Error::new_spanned(
                                target,
                                format!(
                                    "`{ident}` is read-only (`&[{}]`): declare it `&mut [{}]` to store to it",
                                    buffer.elem.name(),
                                    buffer.elem.name()
                                ),
                            ));
                        }
                        if buffer.elem != value_ty {
                            return Err(mismatch(value_tokens, buffer.elem, value_ty));
                        }
                        Ok(Place::Buffer(b, position, target.span()))
                    }
                    Array::Shared(s) => {
                        if self.shared[s].elem != value_ty {
                            return Err(mismatch(value_tokens, self.shared[s].elem, value_ty));
                        }
                        Ok(Place::Shared(s, position))
                    }
                }
            }
            SynExpr::Paren(paren) => self.place(&paren.expr, value_ty, value_tokens),
            SynExpr::Field(field) => {
                let structs::Field::Local(id, ty) = self.field(field)? else {
                    return Err(Error::new_spanned(target, "assign to a field of a local"));
                };
                if !self.locals[id].mutable {
                    return Err(Error::new_spanned(
                        target,
                        "this vector or struct is not `mut`: declare it `let mut`",
                    ));
                }
                if ty != value_ty {
                    return Err(mismatch(value_tokens, ty, value_ty));
                }
                Ok(Place::Local(id))
            }
            other => Err(Error::new_spanned(
                other,
                "assign to a `mut` local, a buffer element or a shared array element",
            )),
        }
    }

    /// `array[index]`: the array's name, what it is (a buffer or a shared array) and the index,
    /// a u32.
    fn element<'a>(&mut self, index: &'a syn::ExprIndex) -> Result<(&'a syn::Ident, Array, Expr)> {
        let SynExpr::Path(path) = &*index.expr else {
            return Err(Error::new_spanned(
                &index.expr,
                "index a buffer or shared array by name",
            ));
        };
        let ident = single_ident(path)?;
        let position = self.expr(&index.index)?;
        expect(&position, Ty::U32, &index.index)?;
        match self.lookup(&ident.to_string()) {
            Some(Name::Buffer(b)) => Ok((ident, Array::Buffer(b), position)),
            Some(Name::Shared(s)) => Ok((ident, Array::Shared(s), position)),
            Some(_) => Err(Error::new_spanned(
                &index.expr,
                format!("`{ident}` is not a buffer or shared array"),
            )),
            None => Err(unknown(ident)),
        }
    }

    /// Whether every unit of a cube computes the same value for `expr`.
    fn uniform(&self, expr: &Expr) -> bool {
        match &expr.kind {
            ExprKind::Local(id) => self.locals[*id].uniform,
            ExprKind::Load(..) | ExprKind::SharedLoad(..) | ExprKind::Atomic(..) => false,
            ExprKind::Builtin(builtin) => builtin.uniform(),
            _ => expr.children().into_iter().all(|child| self.uniform(child)),
        }
    }

    fn expr(&mut self, expr: &SynExpr) -> Result<Expr> {
        if self.is_vector(expr) {
            return Err(Error::new_spanned(
                expr,
                "a vector where a scalar is expected: take a component (`v.x`), `dot(a, b)` or \
                 `length(v)`",
            ));
        }
        match expr {
            SynExpr::Field(field) => match self.field(field)? {
                structs::Field::Local(id, ty) => Ok(Expr {
                    kind: ExprKind::Local(id),
                    ty,
                }),
                structs::Field::Word(b, word, ty) => self.load_field(b, word, ty, expr),
            },
            SynExpr::Lit(lit) => literal(&lit.lit),
            SynExpr::Paren(paren) => self.expr(&paren.expr),
            SynExpr::Group(group) => self.expr(&group.expr),
            SynExpr::Path(path) => {
                let ident = single_ident(path)?;
                match self.lookup(&ident.to_string()) {
                    Some(Name::Local(id)) => Ok(Expr {
                        kind: ExprKind::Local(id),
                        ty: self.locals[id].ty,
                    }),
                    Some(Name::Scalar(j)) => Ok(Expr {
                        kind: ExprKind::Scalar(j),
                        ty: self.scalars[j].ty,
                    }),
                    Some(Name::Buffer(_)) | Some(Name::Shared(_)) => Err(Error::new_spanned(
                        expr,
                        format!(
                            "`{ident}` is an array: read an element (`{ident}[i]`) or its length (`{ident}.len()`)"
                        ),
                    )),
                    Some(Name::Vector(_)) => Err(Error::new_spanned(
                        expr,
                        format!("`{ident}` is a vector: take a component (`{ident}.x`)"),
                    )),
                    Some(Name::Alias(a)) => Ok(self.aliases[a].clone()),
                    Some(Name::Struct(_)) => Err(Error::new_spanned(
                        expr,
                        format!("`{ident}` is a struct: take a field (`{ident}.x`)"),
                    )),
                    None => self.constant(ident),
                }
            }
            SynExpr::Index(index) => {
                let (ident, array, position) = self.element(index)?;
                self.whole_element(array, expr)?;
                match array {
                    Array::Buffer(b) if self.buffers[b].access == Access::Atomic => {
                        Err(atomic_element(ident))
                    }
                    Array::Buffer(b) if self.buffers[b].access == Access::Write => {
                        let elem = self.buffers[b].elem.name();
                        Err(Error::new_spanned(
                            expr,
                            format!(
                                "`{ident}` is `#[write_only]`: the kernel only stores to it, and a \
                                 load would read contents the runtime did not order before this \
                                 launch. Declare it `{ident}: &mut [{elem}]` (without \
                                 `#[write_only]`) to read it"
                            ),
                        ))
                    }
                    Array::Buffer(b) => Ok(Expr {
                        ty: self.buffers[b].elem,
                        kind: ExprKind::Load(b, Box::new(position)),
                    }),
                    Array::Shared(s) => Ok(Expr {
                        ty: self.shared[s].elem,
                        kind: ExprKind::SharedLoad(s, Box::new(position)),
                    }),
                }
            }
            SynExpr::Unary(unary) => {
                let operand = self.expr(&unary.expr)?;
                match (&unary.op, &operand.kind, operand.ty) {
                    // `-3` is an i32 literal, as Rust infers it; `-2147483648` is `i32::MIN`.
                    (syn::UnOp::Neg(_), ExprKind::U32(value), _) if *value <= 1 << 31 => Ok(Expr {
                        kind: ExprKind::I32((-i64::from(*value)) as i32),
                        ty: Ty::I32,
                    }),
                    (syn::UnOp::Neg(_), ExprKind::I32(value), _) => Ok(Expr {
                        kind: ExprKind::I32(value.wrapping_neg()),
                        ty: Ty::I32,
                    }),
                    (syn::UnOp::Neg(_), _, ty @ (Ty::F32 | Ty::I32)) => Ok(Expr {
                        kind: ExprKind::Unary(UnOp::Neg, Box::new(operand)),
                        ty,
                    }),
                    (syn::UnOp::Neg(_), _, ty) => Err(Error::new_spanned(
                        expr,
                        format!(
                            "`-` on {}: negate an f32 or an i32 (`(x as i32)`; a literal `-3` is \
                             an i32)",
                            ty.name()
                        ),
                    )),
                    (syn::UnOp::Not(_), _, ty @ (Ty::Bool | Ty::U32 | Ty::I32)) => Ok(Expr {
                        kind: ExprKind::Unary(UnOp::Not, Box::new(operand)),
                        ty,
                    }),
                    (syn::UnOp::Not(_), _, ty) => Err(Error::new_spanned(
                        expr,
                        format!("`!` on {}: it takes bool, u32 or i32", ty.name()),
                    )),
                    _ => Err(Error::new_spanned(
                        expr,
                        "references and dereferences are not in the subset",
                    )),
                }
            }
            SynExpr::Binary(binary) => {
                let Some(op) = binary_op(&binary.op) else {
                    return Err(Error::new_spanned(
                        binary.op,
                        "an assignment is a statement, not a value",
                    ));
                };
                let left = self.expr(&binary.left)?;
                let right = self.expr(&binary.right)?;
                self.binary(op, left, right, binary.op.span())
            }
            SynExpr::Cast(cast) => {
                let value = self.expr(&cast.expr)?;
                let Some(target) = elem_type(&cast.ty) else {
                    return Err(Error::new_spanned(
                        &cast.ty,
                        "cast with `as f32`, `as u32` or `as i32`",
                    ));
                };
                match (value.ty, target) {
                    (Ty::Bool, Ty::F32) => Err(Error::new_spanned(
                        expr,
                        "bool casts only to u32 (`b as u32`, then `as f32`)",
                    )),
                    (from, to) if from == to => Ok(value),
                    _ => Ok(Expr {
                        kind: ExprKind::Cast(Box::new(value)),
                        ty: target,
                    }),
                }
            }
            SynExpr::If(if_expr) => {
                let cond = self.expr(&if_expr.cond)?;
                expect(&cond, Ty::Bool, &if_expr.cond)?;
                let then = self.value_block(&if_expr.then_branch, expr)?;
                let Some((_, else_expr)) = &if_expr.else_branch else {
                    return Err(Error::new_spanned(
                        expr,
                        "an `if` used as a value needs an `else`",
                    ));
                };
                let els = match &**else_expr {
                    SynExpr::Block(block) => self.value_block(&block.block, expr)?,
                    nested @ SynExpr::If(_) => self.expr(nested)?,
                    other => return Err(Error::new_spanned(other, "expected a block")),
                };
                let then = coerce(then, els.ty);
                let els = coerce(els, then.ty);
                if then.ty != els.ty {
                    return Err(Error::new_spanned(
                        expr,
                        format!(
                            "the branches of this `if` give {} and {}",
                            then.ty.name(),
                            els.ty.name()
                        ),
                    ));
                }
                let ty = then.ty;
                Ok(Expr {
                    kind: ExprKind::Select(Box::new(cond), Box::new(then), Box::new(els)),
                    ty,
                })
            }
            SynExpr::MethodCall(call) => self.method(call),
            SynExpr::Call(call) => match self.vector_scalar_call(call)? {
                Some(value) => Ok(value),
                None => self.call(call),
            },
            other => Err(Error::new_spanned(
                other,
                "this expression is not in the kernel subset (literals, names, `a[i]`, \
                 arithmetic, comparisons, `as`, `if .. else ..`, the math methods and the \
                 built-in ids are)",
            )),
        }
    }

    /// The single expression of a branch of an `if` used as a value.
    fn value_block(&mut self, block: &syn::Block, whole: &SynExpr) -> Result<Expr> {
        match block.stmts.as_slice() {
            [syn::Stmt::Expr(value, None)] => self.expr(value),
            _ => Err(Error::new_spanned(
                whole,
                "each branch of an `if` used as a value is one expression: `if c { a } else { b }`",
            )),
        }
    }

    fn binary(&self, op: BinOp, left: Expr, right: Expr, span: Span) -> Result<Expr> {
        let refuse = |why: String| Err(Error::new(span, why));
        if matches!(op, BinOp::Shl | BinOp::Shr) && left.ty == Ty::I32 && right.ty == Ty::U32 {
            // As in Rust and WGSL, an i32 shifts by a u32 amount.
            return Ok(Expr {
                kind: ExprKind::Binary(op, Box::new(left), Box::new(right)),
                ty: Ty::I32,
            });
        }
        let left = coerce(left, right.ty);
        let right = coerce(right, left.ty);
        let (lt, rt) = (left.ty, right.ty);
        if lt != rt {
            let literal = match (&left.kind, &right.kind) {
                (ExprKind::U32(value), _) if rt == Ty::F32 => Some(value),
                (_, ExprKind::U32(value)) if lt == Ty::F32 => Some(value),
                _ => None,
            };
            if let Some(value) = literal {
                return refuse(format!(
                    "`{}` between f32 and the integer literal `{value}`: write `{value}.0` \
                     (integer literals are u32, and the subset has no implicit conversions)",
                    op.symbol()
                ));
            }
            return refuse(format!(
                "`{}` between {} and {}: convert one side with `as {}` (the subset has no \
                 implicit conversions)",
                op.symbol(),
                lt.name(),
                rt.name(),
                if lt == Ty::Bool { rt.name() } else { lt.name() }
            ));
        }
        let ty = match op {
            BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div => match lt {
                Ty::F32 | Ty::U32 | Ty::I32 => lt,
                Ty::Bool => return refuse(format!("`{}` on bool", op.symbol())),
            },
            BinOp::Rem => match lt {
                Ty::U32 | Ty::I32 => lt,
                _ => {
                    return refuse(format!(
                        "`%` on {}: the subset has it for u32 and i32 only (its meaning for f32 \
                         differs between backends)",
                        lt.name()
                    ));
                }
            },
            BinOp::BitAnd | BinOp::BitOr | BinOp::BitXor | BinOp::Shl | BinOp::Shr => match lt {
                Ty::U32 => lt,
                Ty::I32 if !matches!(op, BinOp::Shl | BinOp::Shr) => lt,
                Ty::I32 => {
                    return refuse(format!(
                        "`{}` of an i32 by an i32: the amount of a shift is a u32 (`x {} (k as \
                         u32)`)",
                        op.symbol(),
                        op.symbol()
                    ));
                }
                _ => {
                    return refuse(format!(
                        "`{}` on {}: bit operations take u32 or i32 (`&&` and `||` for bool; \
                         `x.to_bits()` for an f32's bits)",
                        op.symbol(),
                        lt.name()
                    ));
                }
            },
            BinOp::And | BinOp::Or => match lt {
                Ty::Bool => lt,
                _ => return refuse(format!("`{}` on {}: it takes bool", op.symbol(), lt.name())),
            },
            BinOp::Eq | BinOp::Ne => Ty::Bool,
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => match lt {
                Ty::Bool => return refuse(format!("`{}` on bool", op.symbol())),
                _ => Ty::Bool,
            },
        };
        Ok(Expr {
            kind: ExprKind::Binary(op, Box::new(left), Box::new(right)),
            ty,
        })
    }

    fn method(&mut self, call: &syn::ExprMethodCall) -> Result<Expr> {
        let method = call.method.to_string();
        if method.starts_with("atomic_") {
            return Err(Error::new_spanned(
                call,
                "an atomic operation stands alone: as a statement (`counts.atomic_add(k, 1);`) \
                 or as the whole value of a `let` or an assignment to a local (`let old = \
                 counts.atomic_add(k, 1);`), so that no backend runs it twice or in another order",
            ));
        }
        if call.turbofish.is_some() {
            return Err(Error::new_spanned(call, "no turbofish on methods"));
        }
        if method == "len" {
            let receiver = match &*call.receiver {
                SynExpr::Path(path) => single_ident(path)?,
                other => {
                    return Err(Error::new_spanned(
                        other,
                        "`.len()` of a buffer or shared array by name",
                    ));
                }
            };
            if !call.args.is_empty() {
                return Err(Error::new_spanned(call, "`.len()` takes no arguments"));
            }
            return match self.lookup(&receiver.to_string()) {
                // Of a struct buffer: whole elements.
                Some(Name::Buffer(b)) if self.buffer_structs.contains_key(&b) => {
                    let fields = self.struct_types[self.buffer_structs[&b]].fields.len();
                    let words = Expr {
                        kind: ExprKind::Len(b),
                        ty: Ty::U32,
                    };
                    let fields = Expr {
                        kind: ExprKind::U32(fields as u32),
                        ty: Ty::U32,
                    };
                    self.binary(BinOp::Div, words, fields, call.span())
                }
                Some(Name::Buffer(b)) => Ok(Expr {
                    kind: ExprKind::Len(b),
                    ty: Ty::U32,
                }),
                Some(Name::Shared(s)) => Ok(Expr {
                    kind: ExprKind::U32(self.shared[s].len),
                    ty: Ty::U32,
                }),
                Some(_) => Err(Error::new_spanned(
                    &call.receiver,
                    "`.len()` is a buffer's or shared array's length",
                )),
                None => Err(unknown(receiver)),
            };
        }
        let receiver = self.expr(&call.receiver)?;
        let mut args = call
            .args
            .iter()
            .map(|arg| self.expr(arg))
            .collect::<Result<Vec<_>>>()?;
        let (func, params, result): (Func, &[Ty], Ty) = match (receiver.ty, method.as_str()) {
            (Ty::F32, "abs") => (Func::Abs, &[], Ty::F32),
            (Ty::F32, "floor") => (Func::Floor, &[], Ty::F32),
            (Ty::F32, "ceil") => (Func::Ceil, &[], Ty::F32),
            (Ty::F32, "trunc") => (Func::Trunc, &[], Ty::F32),
            (Ty::F32, "sqrt") => (Func::Sqrt, &[], Ty::F32),
            (Ty::F32, "exp") => (Func::Exp, &[], Ty::F32),
            (Ty::F32, "ln") => (Func::Ln, &[], Ty::F32),
            (Ty::F32, "sin") => (Func::Sin, &[], Ty::F32),
            (Ty::F32, "cos") => (Func::Cos, &[], Ty::F32),
            (Ty::F32, "tanh") => (Func::Tanh, &[], Ty::F32),
            (Ty::F32, "powf") => (Func::Powf, &[Ty::F32], Ty::F32),
            (Ty::F32, "native_sqrt") => (Func::Native(NativeFunc::Sqrt), &[], Ty::F32),
            (Ty::F32, "native_exp") => (Func::Native(NativeFunc::Exp), &[], Ty::F32),
            (Ty::F32, "native_ln") => (Func::Native(NativeFunc::Ln), &[], Ty::F32),
            (Ty::F32, "native_sin") => (Func::Native(NativeFunc::Sin), &[], Ty::F32),
            (Ty::F32, "native_cos") => (Func::Native(NativeFunc::Cos), &[], Ty::F32),
            (Ty::F32, "native_tanh") => (Func::Native(NativeFunc::Tanh), &[], Ty::F32),
            (Ty::F32, "native_powf") => (Func::Native(NativeFunc::Powf), &[Ty::F32], Ty::F32),
            (Ty::F32, "min") => (Func::Min, &[Ty::F32], Ty::F32),
            (Ty::F32, "max") => (Func::Max, &[Ty::F32], Ty::F32),
            (Ty::F32, "mul_add") => (Func::Fma, &[Ty::F32, Ty::F32], Ty::F32),
            (Ty::F32, "to_bits") => (Func::ToBits, &[], Ty::U32),
            (Ty::U32, "min") => (Func::Min, &[Ty::U32], Ty::U32),
            (Ty::U32, "max") => (Func::Max, &[Ty::U32], Ty::U32),
            (Ty::I32, "min") => (Func::Min, &[Ty::I32], Ty::I32),
            (Ty::I32, "max") => (Func::Max, &[Ty::I32], Ty::I32),
            (ty, _) => {
                let offer = match ty {
                    Ty::F32 => {
                        "abs, floor, ceil, trunc, sqrt, min, max, mul_add, to_bits, exp, ln, sin, cos, tanh, powf, and the device's own (not the same bits everywhere) native_sqrt, native_exp, native_ln, native_sin, native_cos, native_tanh, native_powf"
                    }
                    Ty::U32 | Ty::I32 => "min, max",
                    Ty::Bool => "none",
                };
                return Err(Error::new_spanned(
                    &call.method,
                    format!(
                        "`{method}` is not a method of {} in the subset (it has: {offer})",
                        ty.name()
                    ),
                ));
            }
        };
        coerce_args(&mut args, params);
        check_args(&call.method, &method, &args, params, &call.args)?;
        let mut all = vec![receiver];
        all.extend(args);
        Ok(Expr {
            kind: ExprKind::Call(func, all),
            ty: result,
        })
    }

    fn call(&mut self, call: &syn::ExprCall) -> Result<Expr> {
        let SynExpr::Path(path) = &*call.func else {
            return Err(Error::new_spanned(
                &call.func,
                "call a built-in function by name",
            ));
        };
        let segments: Vec<String> = path
            .path
            .segments
            .iter()
            .map(|s| s.ident.to_string())
            .collect();
        let name = segments.join("::");
        if let Some(function) = self
            .context
            .funcs
            .get(&name)
            .filter(|function| function.sig.generics.params.is_empty())
        {
            // Before the arguments: a vector or struct argument would be refused for its own
            // sake, and the helper's signature is what to change.
            for input in &function.sig.inputs {
                if let syn::FnArg::Typed(typed) = input
                    && local_type(&typed.ty).is_none()
                {
                    return Err(Error::new_spanned(
                        &typed.ty,
                        format!(
                            "`{name}` takes a `{}`: a `#[gpuworld::func]` takes and returns \
                             f32, u32, i32 or bool, so pass a vector's components (`v.x, v.y`) \
                             or a struct's fields (`p.x`) and return one value",
                            quote::ToTokens::to_token_stream(&typed.ty)
                        ),
                    ));
                }
            }
        }
        let args = call
            .args
            .iter()
            .map(|arg| self.expr(arg))
            .collect::<Result<Vec<_>>>()?;
        let builtin = match name.as_str() {
            "unit" => Some(Builtin::Unit),
            "unit_x" => Some(Builtin::UnitX),
            "unit_y" => Some(Builtin::UnitY),
            "unit_z" => Some(Builtin::UnitZ),
            "cube" => Some(Builtin::Cube),
            "cube_x" => Some(Builtin::CubeX),
            "cube_y" => Some(Builtin::CubeY),
            "cube_z" => Some(Builtin::CubeZ),
            "cube_count_x" => Some(Builtin::CubeCountX),
            "cube_count_y" => Some(Builtin::CubeCountY),
            "cube_count_z" => Some(Builtin::CubeCountZ),
            "units_per_cube" => Some(Builtin::UnitsPerCube),
            "global_index" => Some(Builtin::GlobalIndex),
            _ => None,
        };
        if let Some(builtin) = builtin {
            check_args(&call.func, &name, &args, &[], &call.args)?;
            return Ok(Expr {
                kind: ExprKind::Builtin(builtin),
                ty: Ty::U32,
            });
        }
        if let Some(function) = self.context.funcs.get(&name).cloned() {
            return self.inline(call, &function, args);
        }
        let (func, params, result): (Func, &[Ty], Ty) = match name.as_str() {
            "fma" => (Func::Fma, &[Ty::F32, Ty::F32, Ty::F32], Ty::F32),
            "f32::from_bits" => (Func::FromBits, &[Ty::U32], Ty::F32),
            "sync_cube" => {
                return Err(Error::new_spanned(
                    call,
                    "`sync_cube()` is a statement, not a value",
                ));
            }
            "shared" => {
                return Err(Error::new_spanned(
                    call,
                    "a shared array is declared with `let name = shared::<f32, 256>();`",
                ));
            }
            _ => {
                return Err(Error::new_spanned(
                    &call.func,
                    format!(
                        "`{name}` is not a function of the kernel subset (it has: unit, unit_x/y/z, \
                         cube, cube_x/y/z, cube_count_x/y/z, units_per_cube, global_index, \
                         sync_cube, fma, f32::from_bits, shared::<T, N>, dot, length, and the \
                         `#[gpuworld::func]` helpers of the kernel's `#[gpuworld::kernels]` module)"
                    ),
                ));
            }
        };
        check_args(&call.func, &name, &args, params, &call.args)?;
        Ok(Expr {
            kind: ExprKind::Call(func, args),
            ty: result,
        })
    }
}

fn is_call_to(call: &syn::ExprCall, name: &str) -> bool {
    matches!(&*call.func, SynExpr::Path(path) if path.path.is_ident(name))
}

fn literal(lit: &syn::Lit) -> Result<Expr> {
    match lit {
        syn::Lit::Int(int) => match int.suffix() {
            "" | "u32" => {
                let value = int.base10_parse::<u32>().map_err(|_| {
                    Error::new_spanned(int, "an integer literal is a u32: 0 to 4294967295")
                })?;
                Ok(Expr {
                    kind: ExprKind::U32(value),
                    ty: Ty::U32,
                })
            }
            "i32" => {
                let value = int.base10_parse::<i32>().map_err(|_| {
                    Error::new_spanned(
                        int,
                        "an i32 literal is 0 to 2147483647 (negate it: `-5i32`)",
                    )
                })?;
                Ok(Expr {
                    kind: ExprKind::I32(value),
                    ty: Ty::I32,
                })
            }
            "f32" => float(int.base10_parse::<f32>(), lit),
            suffix => Err(Error::new_spanned(
                int,
                format!("`{suffix}` literals are not in the subset: its integers are u32 and i32"),
            )),
        },
        syn::Lit::Float(value) => match value.suffix() {
            "" | "f32" => float(value.base10_parse::<f32>(), lit),
            suffix => Err(Error::new_spanned(
                value,
                format!("`{suffix}` literals are not in the subset: its floats are f32"),
            )),
        },
        syn::Lit::Bool(value) => Ok(Expr {
            kind: ExprKind::Bool(value.value),
            ty: Ty::Bool,
        }),
        other => Err(Error::new_spanned(
            other,
            "only numbers and `true`/`false` are literals of the subset",
        )),
    }
}

fn float(parsed: Result<f32>, lit: &syn::Lit) -> Result<Expr> {
    match parsed {
        Ok(value) if value.is_finite() => Ok(Expr {
            kind: ExprKind::F32(value),
            ty: Ty::F32,
        }),
        _ => Err(Error::new_spanned(lit, "this literal is not a finite f32")),
    }
}

fn binary_op(op: &syn::BinOp) -> Option<BinOp> {
    Some(match op {
        syn::BinOp::Add(_) => BinOp::Add,
        syn::BinOp::Sub(_) => BinOp::Sub,
        syn::BinOp::Mul(_) => BinOp::Mul,
        syn::BinOp::Div(_) => BinOp::Div,
        syn::BinOp::Rem(_) => BinOp::Rem,
        syn::BinOp::BitAnd(_) => BinOp::BitAnd,
        syn::BinOp::BitOr(_) => BinOp::BitOr,
        syn::BinOp::BitXor(_) => BinOp::BitXor,
        syn::BinOp::Shl(_) => BinOp::Shl,
        syn::BinOp::Shr(_) => BinOp::Shr,
        syn::BinOp::And(_) => BinOp::And,
        syn::BinOp::Or(_) => BinOp::Or,
        syn::BinOp::Eq(_) => BinOp::Eq,
        syn::BinOp::Ne(_) => BinOp::Ne,
        syn::BinOp::Lt(_) => BinOp::Lt,
        syn::BinOp::Le(_) => BinOp::Le,
        syn::BinOp::Gt(_) => BinOp::Gt,
        syn::BinOp::Ge(_) => BinOp::Ge,
        _ => return None,
    })
}

/// The operator of a compound assignment (`+=`), if `op` is one.
fn compound(op: &syn::BinOp) -> Option<BinOp> {
    Some(match op {
        syn::BinOp::AddAssign(_) => BinOp::Add,
        syn::BinOp::SubAssign(_) => BinOp::Sub,
        syn::BinOp::MulAssign(_) => BinOp::Mul,
        syn::BinOp::DivAssign(_) => BinOp::Div,
        syn::BinOp::RemAssign(_) => BinOp::Rem,
        syn::BinOp::BitAndAssign(_) => BinOp::BitAnd,
        syn::BinOp::BitOrAssign(_) => BinOp::BitOr,
        syn::BinOp::BitXorAssign(_) => BinOp::BitXor,
        syn::BinOp::ShlAssign(_) => BinOp::Shl,
        syn::BinOp::ShrAssign(_) => BinOp::Shr,
        _ => return None,
    })
}
