//! Places an assignment stores to (a mutable local, a writable buffer's or a shared array's
//! element), array indexing, and whether a value is the same for every unit of a cube.

use super::atomics::atomic_element;
use super::state::{Array, Name, Parser, expect, mismatch, single_ident, unknown};
use super::structs;
use crate::ir::*;
use syn::spanned::Spanned;
use syn::{Error, Expr as SynExpr, Result};

impl Parser {
    /// The type of what `target` names (a local, or an array's element), if it names one.
    pub(super) fn place_type(&self, target: &SynExpr) -> Option<Ty> {
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
    pub(super) fn place(
        &mut self,
        target: &SynExpr,
        value_ty: Ty,
        value_tokens: &SynExpr,
    ) -> Result<Place> {
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
    pub(super) fn element<'a>(
        &mut self,
        index: &'a syn::ExprIndex,
    ) -> Result<(&'a syn::Ident, Array, Expr)> {
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
    pub(super) fn uniform(&self, expr: &Expr) -> bool {
        match &expr.kind {
            ExprKind::Local(id) => self.locals[*id].uniform,
            ExprKind::Load(..) | ExprKind::SharedLoad(..) | ExprKind::Atomic(..) => false,
            ExprKind::Builtin(builtin) => builtin.uniform(),
            _ => expr.children().into_iter().all(|child| self.uniform(child)),
        }
    }
}
