//! Atomic operations on the elements of a `#[atomic]` buffer (`counts.atomic_add(k, 1)`): each
//! returns the element's old value and is relaxed on every backend. Since an atomic operation
//! has an effect, it stands only as a whole statement or as the whole value of a `let` or of an
//! assignment to a local — never inside another expression, where a target could evaluate it
//! twice (both sides of an `if` value) or in another order.

use super::state::{Name, Parser, check_args, coerce_args, single_ident, unknown};
use crate::ir::*;
use syn::{Error, Expr as SynExpr, Result};

impl Parser {
    /// `buffer.atomic_<op>(index, operands..)` (the caller has checked that it stands where an
    /// atomic operation may).
    pub(super) fn atomic(&mut self, call: &syn::ExprMethodCall) -> Result<Expr> {
        let method = call.method.to_string();
        let Some(&(_, op)) = AtomicOp::ALL.iter().find(|(name, _)| *name == method) else {
            let names: Vec<&str> = AtomicOp::ALL.iter().map(|(name, _)| *name).collect();
            return Err(Error::new_spanned(
                &call.method,
                format!(
                    "`{method}` is not an atomic operation of the subset (it has: {})",
                    names.join(", ")
                ),
            ));
        };
        if call.turbofish.is_some() {
            return Err(Error::new_spanned(call, "no turbofish on methods"));
        }
        let receiver = match &*call.receiver {
            SynExpr::Path(path) => single_ident(path)?,
            other => {
                return Err(Error::new_spanned(
                    other,
                    "an atomic operation is a method of a `#[atomic]` buffer, by name: \
                     `counts.atomic_add(k, 1)`",
                ));
            }
        };
        let b = match self.lookup(&receiver.to_string()) {
            Some(Name::Buffer(b)) if self.buffers[b].access == Access::Atomic => b,
            Some(Name::Buffer(b)) => {
                let elem = self.buffers[b].elem.name();
                return Err(Error::new_spanned(
                    receiver,
                    format!(
                        "`{receiver}` is not `#[atomic]`: declare it `#[atomic] {receiver}: &mut \
                         [{elem}]` (of u32 or i32) for its atomic operations"
                    ),
                ));
            }
            Some(_) => {
                return Err(Error::new_spanned(
                    receiver,
                    "an atomic operation is a method of a `#[atomic]` buffer",
                ));
            }
            None => return Err(unknown(receiver)),
        };
        let elem = self.buffers[b].elem;
        let mut args = call
            .args
            .iter()
            .map(|arg| self.expr(arg))
            .collect::<Result<Vec<_>>>()?;
        let mut params = vec![Ty::U32];
        params.extend(std::iter::repeat_n(elem, op.operands()));
        coerce_args(&mut args, &params);
        check_args(&call.method, &method, &args, &params, &call.args)?;
        Ok(Expr {
            kind: ExprKind::Atomic(op, b, args),
            ty: elem,
        })
    }
}

/// The method call of `expr`, if it is an atomic operation's (`counts.atomic_add(k, 1)`).
pub(super) fn atomic_call(expr: &SynExpr) -> Option<&syn::ExprMethodCall> {
    match expr {
        SynExpr::MethodCall(call) if call.method.to_string().starts_with("atomic_") => Some(call),
        SynExpr::Paren(paren) => atomic_call(&paren.expr),
        _ => None,
    }
}

/// Indexing a `#[atomic]` buffer.
pub(super) fn atomic_element(ident: &syn::Ident) -> Error {
    Error::new_spanned(
        ident,
        format!(
            "`{ident}` is `#[atomic]`: its elements are reached through its atomic operations, \
             each returning the old value — `{ident}.atomic_load(k)`, `atomic_add(k, v)`, \
             `atomic_sub`, `atomic_min`, `atomic_max`, `atomic_and`, `atomic_or`, `atomic_xor`, \
             `atomic_exchange(k, v)`, `atomic_compare_exchange(k, expected, new)`"
        ),
    )
}
