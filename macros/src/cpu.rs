//! The CPU source: a Rust function called once per cube that runs the cube's units one after the
//! other. A kernel with barriers runs phase by phase: every unit runs up to the barrier, then
//! every unit runs on to the next; locals that live across a barrier become arrays with one
//! value per unit, and loops that hold a barrier run at the cube's level.

use crate::ir::*;
use proc_macro2::{Ident, Span, TokenStream};
use quote::{format_ident, quote};

/// The `CpuKernelFn` of `kernel`, as an expression; `krate` is the path of gpuworld's kernel
/// module's crate.
pub fn source(kernel: &mut Kernel, krate: &TokenStream) -> TokenStream {
    if kernel.has_barrier {
        mark_per_unit_arrays(kernel);
    }
    let checked = Gen {
        kernel,
        krate,
        fast: Vec::new(),
    };
    let units = kernel.units();
    let buffers = kernel.buffers.iter().enumerate().map(|(b, _)| {
        let name = buffer_ident(b);
        quote! { let #name = gw_io.buffer(#b); }
    });
    let scalars = kernel.scalars.iter().enumerate().map(|(j, scalar)| {
        let name = Ident::new(&scalar.name, Span::call_site());
        match scalar.ty {
            Ty::F32 => quote! { let #name: f32 = gw_io.scalar_f32(#j); },
            Ty::I32 => quote! { let #name: i32 = gw_io.scalar_u32(#j) as i32; },
            _ => quote! { let #name: u32 = gw_io.scalar_u32(#j); },
        }
    });
    let shared = kernel.shared.iter().map(|shared| {
        let name = Ident::new(&shared.name, Span::call_site());
        let len = shared.len as usize;
        let (ty, zero) = rust_type(shared.elem);
        quote! { let mut #name: [#ty; #len] = [#zero; #len]; }
    });
    let arrays = kernel
        .locals
        .iter()
        .filter(|local| local.per_unit_array)
        .map(|local| {
            let name = Ident::new(&local.name, Span::call_site());
            let (ty, zero) = rust_type(local.ty);
            let units = units as usize;
            quote! { let mut #name: [#ty; #units] = [#zero; #units]; }
        });
    let body = if kernel.has_barrier {
        checked.level(&kernel.body)
    } else {
        let body = checked.segment(&kernel.body);
        let fast = aligned_buffers(kernel);
        if fast.iter().any(|&fast| fast) {
            // A cube whose units' `global_index()` every such buffer holds reads and writes them
            // without a check per element (the same accesses, in the same order).
            let units = kernel.units();
            let chosen: Vec<usize> = (0..fast.len()).filter(|&b| fast[b]).collect();
            let units_usize = units as usize;
            // As arrays of the cube's length, so that indexing by unit needs no check either.
            let words = chosen.iter().map(|&b| {
                let name = buffer_ident(b);
                quote! {
                    #name
                        .words(gw_range.clone())
                        .and_then(|gw_w| <&[::core::sync::atomic::AtomicU32; #units_usize]>::try_from(gw_w).ok())
                }
            });
            let names = chosen.iter().map(|&b| {
                let name = format_ident!("gw_w{}", b);
                quote! { Some(#name) }
            });
            let fast_body = Gen {
                kernel,
                krate,
                fast,
            }
            .segment(&kernel.body);
            quote! {
                let gw_first = u64::from(gw_c) * #units as u64;
                if gw_first + #units as u64 <= 1u64 << 32 {
                    let gw_range = gw_first as usize..(gw_first + #units as u64) as usize;
                    if let (#(#names,)*) = (#(#words,)*) {
                        #fast_body
                        return;
                    }
                }
                #body
            }
        } else {
            body
        }
    };
    quote! {
        {
            #[allow(warnings, clippy::all, clippy::pedantic, clippy::nursery)]
            fn gw_cpu(gw_cube: &#krate::kernel::CubeContext, gw_io: &#krate::kernel::KernelIo<'_>) {
                let gw_c: u32 = gw_cube.cube_index() as u32;
                #(#buffers)*
                #(#scalars)*
                #(#shared)*
                #(#arrays)*
                #body
            }
            gw_cpu
        }
    }
}

fn buffer_ident(b: usize) -> Ident {
    format_ident!("gw_b{}", b)
}

fn rust_type(ty: Ty) -> (TokenStream, TokenStream) {
    match ty {
        Ty::F32 => (quote!(f32), quote!(0.0f32)),
        Ty::U32 => (quote!(u32), quote!(0u32)),
        Ty::I32 => (quote!(i32), quote!(0i32)),
        Ty::Bool => (quote!(bool), quote!(false)),
    }
}

/// Where an expression runs: inside a unit's phase, or at the cube's level (a loop holding a
/// barrier), where a per-unit local is read from unit 0 (the bounds there are uniform).
#[derive(Clone, Copy, PartialEq)]
enum At {
    Unit,
    Cube,
}

struct Gen<'a> {
    kernel: &'a Kernel,
    krate: &'a TokenStream,
    /// Per buffer, in a cube's fast path: whether its accesses (all at an aligned index, see
    /// `aligned_buffers`) go to the cube's words `gw_w<b>` without a check. Empty: all checked.
    fast: Vec<bool>,
}

impl Gen<'_> {
    /// Statements at the cube's level: runs of statements without barriers become phases, run
    /// for every unit in turn.
    fn level(&self, stmts: &[Stmt]) -> TokenStream {
        let mut out = TokenStream::new();
        let mut phase: Vec<&Stmt> = Vec::new();
        let flush = |phase: &mut Vec<&Stmt>, out: &mut TokenStream| {
            if !phase.is_empty() {
                out.extend(self.phase(phase));
                phase.clear();
            }
        };
        for stmt in stmts {
            match stmt {
                Stmt::Barrier => flush(&mut phase, &mut out),
                Stmt::For {
                    local,
                    start,
                    end,
                    body,
                    barrier: true,
                } => {
                    flush(&mut phase, &mut out);
                    let name = self.local_ident(*local);
                    let start = self.expr(start, At::Cube);
                    let end = self.expr(end, At::Cube);
                    let body = self.level(body);
                    out.extend(quote! { for #name in (#start)..(#end) { #body } });
                }
                other => phase.push(other),
            }
        }
        flush(&mut phase, &mut out);
        out
    }

    /// One phase: `stmts` for every unit of the cube in turn.
    fn phase(&self, stmts: &[&Stmt]) -> TokenStream {
        let body: TokenStream = stmts.iter().map(|stmt| self.stmt(stmt)).collect();
        self.units(body)
    }

    /// A kernel without barriers: the whole body for every unit in turn.
    fn segment(&self, stmts: &[Stmt]) -> TokenStream {
        let body: TokenStream = stmts.iter().map(|stmt| self.stmt(stmt)).collect();
        self.units(body)
    }

    fn units(&self, body: TokenStream) -> TokenStream {
        let [dx, dy, _] = self.kernel.cube_dim;
        let units = self.kernel.units();
        let dxy = dx * dy;
        quote! {
            'gw_units: for gw_u in 0..#units {
                let gw_ux: u32 = gw_u % #dx;
                let gw_uy: u32 = (gw_u / #dx) % #dy;
                let gw_uz: u32 = gw_u / #dxy;
                // Names the unit for the race detector of checked launches.
                gw_io.at_unit(gw_u);
                #body
            }
        }
    }

    fn local_ident(&self, id: LocalId) -> Ident {
        Ident::new(&self.kernel.locals[id].name, Span::call_site())
    }

    fn local(&self, id: LocalId, at: At) -> TokenStream {
        let name = self.local_ident(id);
        if self.kernel.locals[id].per_unit_array {
            match at {
                At::Unit => quote! { #name[gw_u as usize] },
                At::Cube => quote! { #name[0] },
            }
        } else {
            quote! { #name }
        }
    }

    fn stmt(&self, stmt: &Stmt) -> TokenStream {
        match stmt {
            Stmt::Let(id, value) => {
                let value = self.expr(value, At::Unit);
                let local = &self.kernel.locals[*id];
                if local.per_unit_array {
                    let place = self.local(*id, At::Unit);
                    quote! { #place = #value; }
                } else {
                    let name = self.local_ident(*id);
                    let (ty, _) = rust_type(local.ty);
                    quote! { let mut #name: #ty = #value; }
                }
            }
            Stmt::Assign(Place::Local(id), value) => {
                let value = self.expr(value, At::Unit);
                let place = self.local(*id, At::Unit);
                quote! { #place = #value; }
            }
            Stmt::Assign(Place::Buffer(b, _, _), value) if self.fast.get(*b) == Some(&true) => {
                let words = format_ident!("gw_w{}", b);
                let value = self.expr(value, At::Unit);
                let bits = match self.kernel.buffers[*b].elem {
                    Ty::F32 => quote! { f32::to_bits(#value) },
                    Ty::I32 => quote! { ((#value) as u32) },
                    _ => quote! { #value },
                };
                quote! { #words[gw_u as usize].store(#bits, ::core::sync::atomic::Ordering::Relaxed); }
            }
            Stmt::Assign(Place::Buffer(b, index, _), value) => {
                let name = buffer_ident(*b);
                let index = self.expr(index, At::Unit);
                let value = self.expr(value, At::Unit);
                match self.kernel.buffers[*b].elem {
                    Ty::F32 => quote! { #name.store_f32((#index) as usize, #value); },
                    Ty::I32 => quote! { #name.store_u32((#index) as usize, (#value) as u32); },
                    _ => quote! { #name.store_u32((#index) as usize, #value); },
                }
            }
            Stmt::Assign(Place::Shared(s, index), value) => {
                let shared = &self.kernel.shared[*s];
                let name = Ident::new(&shared.name, Span::call_site());
                let index = self.expr(index, At::Unit);
                let value = self.expr(value, At::Unit);
                quote! {
                    {
                        let gw_v = #value;
                        let gw_i = (#index) as usize;
                        if let Some(gw_slot) = #name.get_mut(gw_i) {
                            *gw_slot = gw_v;
                        }
                    }
                }
            }
            Stmt::If(cond, then, els) => {
                let cond = self.expr(cond, At::Unit);
                let then: TokenStream = then.iter().map(|s| self.stmt(s)).collect();
                let els: TokenStream = els.iter().map(|s| self.stmt(s)).collect();
                quote! { if #cond { #then } else { #els } }
            }
            Stmt::For {
                local,
                start,
                end,
                body,
                ..
            } => {
                let name = self.local_ident(*local);
                let start = self.expr(start, At::Unit);
                let end = self.expr(end, At::Unit);
                let body: TokenStream = body.iter().map(|s| self.stmt(s)).collect();
                quote! { for #name in (#start)..(#end) { #body } }
            }
            Stmt::While(cond, body) => {
                let cond = self.expr(cond, At::Unit);
                let body: TokenStream = body.iter().map(|s| self.stmt(s)).collect();
                quote! { while #cond { #body } }
            }
            Stmt::Break => quote! { break; },
            Stmt::Continue => quote! { continue; },
            Stmt::Return => quote! { continue 'gw_units; },
            // Phases end at barriers (`level`); none stands inside a phase.
            Stmt::Barrier => quote! {},
            Stmt::Atomic(op) => {
                let op = self.expr(op, At::Unit);
                quote! { let _ = #op; }
            }
        }
    }

    fn expr(&self, expr: &Expr, at: At) -> TokenStream {
        let krate = self.krate;
        let ops = quote! { #krate::kernel::ops };
        match &expr.kind {
            ExprKind::F32(value) => {
                let bits = value.to_bits();
                quote! { f32::from_bits(#bits) }
            }
            ExprKind::U32(value) => quote! { #value },
            ExprKind::I32(value) => quote! { (#value) },
            ExprKind::Bool(value) => quote! { #value },
            ExprKind::Local(id) => self.local(*id, at),
            ExprKind::Scalar(j) => {
                let name = Ident::new(&self.kernel.scalars[*j].name, Span::call_site());
                quote! { #name }
            }
            ExprKind::Load(b, _) if self.fast.get(*b) == Some(&true) => {
                let words = format_ident!("gw_w{}", b);
                let bits =
                    quote! { #words[gw_u as usize].load(::core::sync::atomic::Ordering::Relaxed) };
                match self.kernel.buffers[*b].elem {
                    Ty::F32 => quote! { f32::from_bits(#bits) },
                    Ty::I32 => quote! { ((#bits) as i32) },
                    _ => bits,
                }
            }
            ExprKind::Load(b, index) => {
                let name = buffer_ident(*b);
                let index = self.expr(index, at);
                match self.kernel.buffers[*b].elem {
                    Ty::F32 => quote! { #name.load_f32((#index) as usize) },
                    Ty::I32 => quote! { (#name.load_u32((#index) as usize) as i32) },
                    _ => quote! { #name.load_u32((#index) as usize) },
                }
            }
            ExprKind::Len(b) => {
                let name = buffer_ident(*b);
                quote! { (#name.len32() as u32) }
            }
            ExprKind::SharedLoad(s, index) => {
                let shared = &self.kernel.shared[*s];
                let name = Ident::new(&shared.name, Span::call_site());
                let (_, zero) = rust_type(shared.elem);
                let index = self.expr(index, at);
                quote! {
                    match #name.get((#index) as usize) {
                        Some(gw_value) => *gw_value,
                        None => #zero,
                    }
                }
            }
            ExprKind::Builtin(builtin) => {
                let units = self.kernel.units();
                match builtin {
                    Builtin::Unit => quote!(gw_u),
                    Builtin::UnitX => quote!(gw_ux),
                    Builtin::UnitY => quote!(gw_uy),
                    Builtin::UnitZ => quote!(gw_uz),
                    Builtin::Cube => quote!(gw_c),
                    Builtin::CubeX => quote!(gw_cube.cube_pos[0]),
                    Builtin::CubeY => quote!(gw_cube.cube_pos[1]),
                    Builtin::CubeZ => quote!(gw_cube.cube_pos[2]),
                    Builtin::CubeCountX => quote!(gw_cube.cube_count[0]),
                    Builtin::CubeCountY => quote!(gw_cube.cube_count[1]),
                    Builtin::CubeCountZ => quote!(gw_cube.cube_count[2]),
                    Builtin::UnitsPerCube => quote!(#units),
                    Builtin::GlobalIndex => quote!(gw_c.wrapping_mul(#units).wrapping_add(gw_u)),
                }
            }
            ExprKind::Unary(op, operand) => {
                let operand = self.expr(operand, at);
                match op {
                    UnOp::Neg if expr.ty == Ty::I32 => quote! { (#operand).wrapping_neg() },
                    UnOp::Neg => quote! { (-(#operand)) },
                    UnOp::Not => quote! { (!(#operand)) },
                }
            }
            ExprKind::Binary(op, left, right) => {
                let ty = left.ty;
                let a = self.expr(left, at);
                let b = self.expr(right, at);
                match (op, ty) {
                    (BinOp::Add, Ty::U32) => quote! { (#a).wrapping_add(#b) },
                    (BinOp::Sub, Ty::U32) => quote! { (#a).wrapping_sub(#b) },
                    (BinOp::Mul, Ty::U32) => quote! { (#a).wrapping_mul(#b) },
                    (BinOp::Div, Ty::U32) => quote! { #ops::div_u32(#a, #b) },
                    (BinOp::Rem, Ty::U32) => quote! { #ops::rem_u32(#a, #b) },
                    (BinOp::Add, Ty::I32) => quote! { (#a).wrapping_add(#b) },
                    (BinOp::Sub, Ty::I32) => quote! { (#a).wrapping_sub(#b) },
                    (BinOp::Mul, Ty::I32) => quote! { (#a).wrapping_mul(#b) },
                    (BinOp::Div, Ty::I32) => quote! { #ops::div_i32(#a, #b) },
                    (BinOp::Rem, Ty::I32) => quote! { #ops::rem_i32(#a, #b) },
                    (BinOp::Shl, _) => quote! { (#a).wrapping_shl(#b) },
                    (BinOp::Shr, _) => quote! { (#a).wrapping_shr(#b) },
                    _ => {
                        let op: TokenStream = op.symbol().parse().expect("an operator");
                        quote! { ((#a) #op (#b)) }
                    }
                }
            }
            ExprKind::Cast(value) => {
                let from = value.ty;
                let inner = self.expr(value, at);
                match (from, expr.ty) {
                    (_, Ty::F32) => quote! { ((#inner) as f32) },
                    // Saturating, NaN to 0: Rust's `as`, which `ops::f32_to_u32` documents.
                    (Ty::F32, Ty::I32) => quote! { #ops::f32_to_i32(#inner) },
                    (Ty::F32, _) => quote! { #ops::f32_to_u32(#inner) },
                    (_, Ty::I32) => quote! { ((#inner) as i32) },
                    _ => quote! { ((#inner) as u32) },
                }
            }
            ExprKind::Call(func, args) => {
                let a: Vec<TokenStream> = args.iter().map(|arg| self.expr(arg, at)).collect();
                let ty = args.first().map(|arg| arg.ty);
                match func {
                    Func::Abs => quote! { #ops::abs_f32(#(#a),*) },
                    Func::Min if ty == Some(Ty::F32) => quote! { #ops::min_f32(#(#a),*) },
                    Func::Max if ty == Some(Ty::F32) => quote! { #ops::max_f32(#(#a),*) },
                    Func::Min if ty == Some(Ty::I32) => quote! { ::core::cmp::min(#(#a),*) },
                    Func::Max if ty == Some(Ty::I32) => quote! { ::core::cmp::max(#(#a),*) },
                    Func::Min => quote! { #ops::min_u32(#(#a),*) },
                    Func::Max => quote! { #ops::max_u32(#(#a),*) },
                    Func::Floor => quote! { #ops::floor_f32(#(#a),*) },
                    Func::Ceil => quote! { #ops::ceil_f32(#(#a),*) },
                    Func::Trunc => quote! { #ops::trunc_f32(#(#a),*) },
                    Func::Sqrt => quote! { #ops::sqrt_f32(#(#a),*) },
                    Func::Flush => quote! { #ops::ftz_f32(#(#a),*) },
                    Func::Fma => quote! { #ops::fma_f32(#(#a),*) },
                    Func::ToBits => quote! { f32::to_bits(#(#a),*) },
                    Func::FromBits => quote! { f32::from_bits(#(#a),*) },
                    Func::Exp => quote! { #ops::exp_f32(#(#a),*) },
                    Func::Ln => quote! { #ops::ln_f32(#(#a),*) },
                    Func::Sin => quote! { #ops::sin_f32(#(#a),*) },
                    Func::Cos => quote! { #ops::cos_f32(#(#a),*) },
                    Func::Tanh => quote! { #ops::tanh_f32(#(#a),*) },
                    Func::Powf => quote! { #ops::powf_f32(#(#a),*) },
                    Func::Native(native) => {
                        let name = match native {
                            NativeFunc::Sqrt => quote! { sqrt },
                            NativeFunc::Exp => quote! { exp },
                            NativeFunc::Ln => quote! { ln },
                            NativeFunc::Sin => quote! { sin },
                            NativeFunc::Cos => quote! { cos },
                            NativeFunc::Tanh => quote! { tanh },
                            NativeFunc::Powf => quote! { powf },
                        };
                        quote! { f32::#name(#(#a),*) }
                    }
                }
            }
            ExprKind::Select(cond, then, els) => {
                let cond = self.expr(cond, at);
                let then = self.expr(then, at);
                let els = self.expr(els, at);
                quote! { (if #cond { #then } else { #els }) }
            }
            ExprKind::Atomic(op, b, args) => self.atomic(*op, *b, args, at),
        }
    }

    /// An atomic operation on the host's words (`AtomicU32`), relaxed as on the GPUs; out of
    /// bounds it does nothing and gives 0, in checked and unchecked launches alike.
    fn atomic(&self, op: AtomicOp, b: usize, args: &[Expr], at: At) -> TokenStream {
        let name = buffer_ident(b);
        let signed = self.kernel.buffers[b].elem == Ty::I32;
        let index = self.expr(&args[0], at);
        let operands: Vec<TokenStream> = args[1..]
            .iter()
            .map(|arg| {
                let value = self.expr(arg, at);
                if signed {
                    quote! { ((#value) as u32) }
                } else {
                    value
                }
            })
            .collect();
        let relaxed = quote! { ::core::sync::atomic::Ordering::Relaxed };
        let v = operands.first();
        let bits = match op {
            AtomicOp::Load => quote! { gw_w.load(#relaxed) },
            AtomicOp::Add => quote! { gw_w.fetch_add(#v, #relaxed) },
            AtomicOp::Sub => quote! { gw_w.fetch_sub(#v, #relaxed) },
            AtomicOp::And => quote! { gw_w.fetch_and(#v, #relaxed) },
            AtomicOp::Or => quote! { gw_w.fetch_or(#v, #relaxed) },
            AtomicOp::Xor => quote! { gw_w.fetch_xor(#v, #relaxed) },
            AtomicOp::Exchange => quote! { gw_w.swap(#v, #relaxed) },
            AtomicOp::Min if !signed => quote! { gw_w.fetch_min(#v, #relaxed) },
            AtomicOp::Max if !signed => quote! { gw_w.fetch_max(#v, #relaxed) },
            AtomicOp::Min | AtomicOp::Max => {
                let pick = if op == AtomicOp::Min {
                    quote!(min)
                } else {
                    quote!(max)
                };
                quote! {
                    {
                        let gw_v = #v as i32;
                        match gw_w.fetch_update(#relaxed, #relaxed, |gw_old| {
                            Some(::core::cmp::#pick(gw_old as i32, gw_v) as u32)
                        }) {
                            Ok(gw_old) | Err(gw_old) => gw_old,
                        }
                    }
                }
            }
            AtomicOp::CompareExchange => {
                let new = &operands[1];
                quote! {
                    match gw_w.compare_exchange(#v, #new, #relaxed, #relaxed) {
                        Ok(gw_old) | Err(gw_old) => gw_old,
                    }
                }
            }
        };
        let old = quote! {
            match #name
                .words({
                    let gw_k = (#index) as usize;
                    gw_k..gw_k + 1
                })
                .and_then(|gw_s| gw_s.first())
            {
                Some(gw_w) => #bits,
                None => 0u32,
            }
        };
        if signed {
            quote! { ((#old) as i32) }
        } else {
            quote! { (#old) }
        }
    }
}

/// Per buffer of a kernel without barriers: whether it is accessed, and only at an index that is
/// an immutable local holding `global_index()` (`let i = global_index(); .. x[i] ..`), so that a
/// cube whose range of units the buffer holds needs no check per access.
fn aligned_buffers(kernel: &Kernel) -> Vec<bool> {
    fn aligned_locals(stmts: &[Stmt], kernel: &Kernel, out: &mut Vec<LocalId>) {
        for stmt in stmts {
            match stmt {
                Stmt::Let(id, value)
                    if !kernel.locals[*id].mutable
                        && matches!(value.kind, ExprKind::Builtin(Builtin::GlobalIndex)) =>
                {
                    out.push(*id)
                }
                Stmt::If(_, then, els) => {
                    aligned_locals(then, kernel, out);
                    aligned_locals(els, kernel, out);
                }
                Stmt::For { body, .. } | Stmt::While(_, body) => aligned_locals(body, kernel, out),
                _ => {}
            }
        }
    }
    /// Records each access of `expr` to a buffer: `Some(true)` while all are aligned.
    fn walk_expr(e: &Expr, aligned: &[LocalId], state: &mut [Option<bool>]) {
        e.visit(&mut |e| match &e.kind {
            ExprKind::Load(b, index) => {
                let ok = matches!(index.kind, ExprKind::Local(id) if aligned.contains(&id));
                state[*b] = Some(state[*b].unwrap_or(true) && ok);
            }
            ExprKind::Atomic(_, b, _) => state[*b] = Some(false),
            _ => {}
        });
    }
    fn walk_stmts(list: &[Stmt], aligned: &[LocalId], state: &mut [Option<bool>]) {
        for stmt in list {
            match stmt {
                Stmt::Let(_, value) | Stmt::Atomic(value) => walk_expr(value, aligned, state),
                Stmt::Assign(place, value) => {
                    match place {
                        Place::Buffer(b, index, _) => {
                            let ok =
                                matches!(index.kind, ExprKind::Local(id) if aligned.contains(&id));
                            state[*b] = Some(state[*b].unwrap_or(true) && ok);
                            walk_expr(index, aligned, state);
                        }
                        Place::Shared(_, index) => walk_expr(index, aligned, state),
                        Place::Local(_) => {}
                    }
                    walk_expr(value, aligned, state);
                }
                Stmt::If(cond, then, els) => {
                    walk_expr(cond, aligned, state);
                    walk_stmts(then, aligned, state);
                    walk_stmts(els, aligned, state);
                }
                Stmt::For {
                    start, end, body, ..
                } => {
                    walk_expr(start, aligned, state);
                    walk_expr(end, aligned, state);
                    walk_stmts(body, aligned, state);
                }
                Stmt::While(cond, body) => {
                    walk_expr(cond, aligned, state);
                    walk_stmts(body, aligned, state);
                }
                _ => {}
            }
        }
    }
    let mut aligned = Vec::new();
    aligned_locals(&kernel.body, kernel, &mut aligned);
    let mut state = vec![None; kernel.buffers.len()];
    if !aligned.is_empty() {
        walk_stmts(&kernel.body, &aligned, &mut state);
    }
    state.into_iter().map(|s| s == Some(true)).collect()
}

/// Marks the locals of a kernel with barriers that live across a barrier: declared in one phase
/// and used in another, or at the cube's level.
fn mark_per_unit_arrays(kernel: &mut Kernel) {
    let mut walk = Walk {
        declared: vec![None; kernel.locals.len()],
        used: vec![Vec::new(); kernel.locals.len()],
        phase: 0,
        open: false,
    };
    walk.level(&kernel.body);
    for (id, local) in kernel.locals.iter_mut().enumerate() {
        local.per_unit_array = match walk.declared[id] {
            Some(phase) if phase != CUBE => walk.used[id].iter().any(|&used| used != phase),
            _ => false,
        };
    }
}

/// The phase id of the cube's level.
const CUBE: usize = usize::MAX;

struct Walk {
    declared: Vec<Option<usize>>,
    used: Vec<Vec<usize>>,
    phase: usize,
    open: bool,
}

impl Walk {
    fn level(&mut self, stmts: &[Stmt]) {
        for stmt in stmts {
            match stmt {
                Stmt::Barrier => self.open = false,
                Stmt::For {
                    local,
                    start,
                    end,
                    body,
                    barrier: true,
                } => {
                    self.open = false;
                    self.expr(start, CUBE);
                    self.expr(end, CUBE);
                    self.declared[*local] = Some(CUBE);
                    self.level(body);
                    self.open = false;
                }
                other => {
                    if !self.open {
                        self.phase += 1;
                        self.open = true;
                    }
                    self.stmt(other, self.phase);
                }
            }
        }
    }

    fn stmt(&mut self, stmt: &Stmt, phase: usize) {
        match stmt {
            Stmt::Let(id, value) => {
                self.declared[*id] = Some(phase);
                self.expr(value, phase);
            }
            Stmt::Assign(place, value) => {
                match place {
                    Place::Local(id) => self.used[*id].push(phase),
                    Place::Buffer(_, index, _) | Place::Shared(_, index) => self.expr(index, phase),
                }
                self.expr(value, phase);
            }
            Stmt::If(cond, then, els) => {
                self.expr(cond, phase);
                for stmt in then.iter().chain(els) {
                    self.stmt(stmt, phase);
                }
            }
            Stmt::For {
                local,
                start,
                end,
                body,
                ..
            } => {
                self.declared[*local] = Some(phase);
                self.expr(start, phase);
                self.expr(end, phase);
                for stmt in body {
                    self.stmt(stmt, phase);
                }
            }
            Stmt::While(cond, body) => {
                self.expr(cond, phase);
                for stmt in body {
                    self.stmt(stmt, phase);
                }
            }
            Stmt::Atomic(value) => self.expr(value, phase),
            Stmt::Break | Stmt::Continue | Stmt::Return | Stmt::Barrier => {}
        }
    }

    fn expr(&mut self, expr: &Expr, phase: usize) {
        let used = &mut self.used;
        expr.visit(&mut |e| {
            if let ExprKind::Local(id) = e.kind {
                used[id].push(phase);
            }
        });
    }
}
