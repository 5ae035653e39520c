//! From the Rust function to the typed kernel (`ir`): every construct outside the subset, every
//! type mismatch and every barrier some units could skip is a compile error at its span. This
//! file reads the signature (parameters) and keeps the scopes; the grammar is `stmts`
//! (statements), `places` (what an assignment stores to) and `exprs` (expressions), over the
//! parser's state and shared checks (`state`) and its per-feature parts (`atomics`, `inline`,
//! `structs`, `vector`).

mod atomics;
mod exprs;
mod inline;
mod places;
mod state;
mod stmts;
mod structs;
mod vector;

use crate::context::Context;
use crate::ir::*;
use state::{BarrierPlace, Name, Parser, check_name};
pub(crate) use state::{elem_type, local_type};
use std::collections::HashMap;
use std::rc::Rc;
use syn::{Error, Result};

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
}
