//! The items of a `#[gpuworld::kernels]` module a kernel uses: a `const` is its value where it
//! is named, a `#[gpuworld::func]` its body where it is called — its parameters and `let`s
//! stand for their values, and its result is one expression of the subset, so a call is as pure
//! as any expression (the generators never see a function). Recursion is refused.

use super::state::{Name, Parser, coerce, expect, local_type, unknown};
use crate::ir::*;
use std::collections::HashMap;
use syn::{Error, Result};

impl Parser {
    /// The value of the module's constant `ident`.
    pub(super) fn constant(&mut self, ident: &syn::Ident) -> Result<Expr> {
        let name = ident.to_string();
        let Some((ty, value)) = self.context.consts.get(&name).cloned() else {
            return Err(unknown(ident));
        };
        self.enter(&name, ident)?;
        // A constant sees the module's constants only, as Rust's do.
        let scopes = std::mem::replace(&mut self.scopes, vec![HashMap::new()]);
        let result = self.expr(&value);
        self.scopes = scopes;
        self.inlining.pop();
        let result = coerce(result?, ty);
        expect(&result, ty, &value)?;
        Ok(result)
    }

    /// `function(args)` inlined: its body, its parameters standing for `args`.
    pub(super) fn inline(
        &mut self,
        call: &syn::ExprCall,
        function: &syn::ItemFn,
        args: Vec<Expr>,
    ) -> Result<Expr> {
        let name = function.sig.ident.to_string();
        let signature = &function.sig;
        if !signature.generics.params.is_empty() {
            return Err(Error::new_spanned(
                &signature.generics,
                "a `#[gpuworld::func]` has no generic parameters",
            ));
        }
        let syn::ReturnType::Type(_, returns) = &signature.output else {
            return Err(Error::new_spanned(
                signature,
                "a `#[gpuworld::func]` returns one value: `-> f32`",
            ));
        };
        let Some(returns) = local_type(returns) else {
            return Err(Error::new_spanned(
                returns,
                "a `#[gpuworld::func]` returns f32, u32, i32 or bool",
            ));
        };
        if args.len() != signature.inputs.len() {
            return Err(Error::new_spanned(
                call,
                format!(
                    "`{name}` takes {} argument(s), got {}",
                    signature.inputs.len(),
                    args.len()
                ),
            ));
        }
        let mut bound = HashMap::new();
        for ((input, arg), tokens) in signature.inputs.iter().zip(args).zip(&call.args) {
            let (ident, ty) = match input {
                syn::FnArg::Typed(typed) => match (&*typed.pat, local_type(&typed.ty)) {
                    (syn::Pat::Ident(pat), Some(ty)) => (pat.ident.to_string(), ty),
                    _ => {
                        return Err(Error::new_spanned(
                            input,
                            "a `#[gpuworld::func]` parameter is a name of f32, u32, i32 or bool",
                        ));
                    }
                },
                syn::FnArg::Receiver(_) => {
                    return Err(Error::new_spanned(
                        input,
                        "a `#[gpuworld::func]` takes no `self`",
                    ));
                }
            };
            let arg = coerce(arg, ty);
            expect(&arg, ty, tokens)?;
            bound.insert(ident, Name::Alias(self.aliases.len()));
            self.aliases.push(arg);
        }
        self.enter(&name, &call.func)?;
        // The body sees its parameters, the module's items and nothing of the caller's.
        let scopes = std::mem::replace(&mut self.scopes, vec![bound]);
        let result = self.body(function);
        self.scopes = scopes;
        self.inlining.pop();
        let result = coerce(result?, returns);
        if result.ty != returns {
            return Err(Error::new_spanned(
                &function.block,
                format!(
                    "`{name}` gives {}, and declares `-> {}`",
                    result.ty.name(),
                    returns.name()
                ),
            ));
        }
        Ok(result)
    }

    /// A function body of `let`s and one final value.
    fn body(&mut self, function: &syn::ItemFn) -> Result<Expr> {
        let usage = "a `#[gpuworld::func]` body is `let`s and one final value (use `if c { a } \
                     else { b }` for a choice)";
        let Some((last, lets)) = function.block.stmts.split_last() else {
            return Err(Error::new_spanned(&function.block, usage));
        };
        for stmt in lets {
            let syn::Stmt::Local(local) = stmt else {
                return Err(Error::new_spanned(stmt, usage));
            };
            let (ident, annotated) = match &local.pat {
                syn::Pat::Ident(pat) if pat.mutability.is_none() => (&pat.ident, None),
                syn::Pat::Type(typed) => match &*typed.pat {
                    syn::Pat::Ident(pat) if pat.mutability.is_none() => {
                        (&pat.ident, local_type(&typed.ty))
                    }
                    other => return Err(Error::new_spanned(other, usage)),
                },
                other => {
                    return Err(Error::new_spanned(
                        other,
                        "a `#[gpuworld::func]` declares plain `let name = value;` (no `mut`)",
                    ));
                }
            };
            let Some(init) = &local.init else {
                return Err(Error::new_spanned(local, usage));
            };
            let mut value = self.expr(&init.expr)?;
            if let Some(ty) = annotated {
                value = coerce(value, ty);
                expect(&value, ty, &init.expr)?;
            }
            let alias = Name::Alias(self.aliases.len());
            self.aliases.push(value);
            self.scopes
                .last_mut()
                .expect("a scope is always open")
                .insert(ident.to_string(), alias);
        }
        match last {
            syn::Stmt::Expr(value, None) => self.expr(value),
            other => Err(Error::new_spanned(other, usage)),
        }
    }

    /// Marks `name` as being expanded; refuses it when it already is (recursion).
    fn enter(&mut self, name: &str, at: &dyn quote::ToTokens) -> Result<()> {
        if self.inlining.iter().any(|outer| outer == name) {
            return Err(Error::new_spanned(
                at,
                format!(
                    "`{name}` is used in its own definition ({} -> {name}): a kernel's constants and \
                     functions are expanded where used, so recursion is not in the subset",
                    self.inlining.join(" -> ")
                ),
            ));
        }
        self.inlining.push(name.to_string());
        self.uses.insert(name.to_string());
        Ok(())
    }
}
