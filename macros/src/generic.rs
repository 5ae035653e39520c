//! Generic kernels: `fn scale<T, const N: u32>(..)` with
//! `#[kernel(instances(scale_f32 = (f32, 4), scale_i32 = (i32, 8)))]` is one kernel per
//! instance, each a `static KernelDef` of the instance's name, compiled from the function with
//! its generic parameters replaced by the instance's arguments (a type of the subset for a type
//! parameter, a literal or constant expression for a const one). Nothing is generic at run
//! time: each instance is a kernel of its own, with its own id and sources.

use proc_macro2::{Group, TokenStream, TokenTree};
use quote::ToTokens;
use std::collections::HashMap;
use syn::{Error, Result};

/// One instance: the name of its static and its generic arguments, in the order the function
/// declares its parameters.
pub struct Instance {
    pub name: syn::Ident,
    pub args: Vec<syn::Expr>,
}

/// `name = (arg, ..)` (or `name = arg` for one parameter) inside `instances(..)`.
pub fn instance(meta: &syn::meta::ParseNestedMeta) -> Result<Instance> {
    let Some(name) = meta.path.get_ident().cloned() else {
        return Err(meta.error("an instance is `name = (f32, 16)`: the name of its static"));
    };
    let value: syn::Expr = meta.value()?.parse()?;
    let args = match value {
        syn::Expr::Tuple(tuple) => tuple.elems.into_iter().collect(),
        syn::Expr::Paren(paren) => vec![*paren.expr],
        other => vec![other],
    };
    Ok(Instance { name, args })
}

/// `function` as `instance`: its generic parameters replaced by the instance's arguments, named
/// as the instance.
pub fn instantiate(function: &syn::ItemFn, instance: &Instance) -> Result<syn::ItemFn> {
    let params = &function.sig.generics.params;
    if params.len() != instance.args.len() {
        return Err(Error::new_spanned(
            &instance.name,
            format!(
                "`{}` gives {} generic argument(s); `{}` declares {}",
                instance.name,
                instance.args.len(),
                function.sig.ident,
                params.len()
            ),
        ));
    }
    let mut replace = HashMap::new();
    for (param, arg) in params.iter().zip(&instance.args) {
        match param {
            syn::GenericParam::Type(ty) => {
                if !matches!(arg, syn::Expr::Path(_)) {
                    return Err(Error::new_spanned(
                        arg,
                        format!("`{}` is a type: give f32, u32 or i32", ty.ident),
                    ));
                }
                replace.insert(ty.ident.to_string(), arg.to_token_stream());
            }
            syn::GenericParam::Const(constant) => {
                let value = match arg {
                    syn::Expr::Lit(_) => arg.to_token_stream(),
                    other => quote::quote!((#other)),
                };
                replace.insert(constant.ident.to_string(), value);
            }
            syn::GenericParam::Lifetime(lifetime) => {
                return Err(Error::new_spanned(
                    lifetime,
                    "a kernel has no lifetime parameters",
                ));
            }
        }
    }
    let mut concrete = function.clone();
    concrete.sig.generics = syn::Generics::default();
    concrete.sig.ident = instance.name.clone();
    let tokens = substitute(concrete.into_token_stream(), &replace);
    syn::parse2(tokens)
}

/// `tokens` with every identifier of `replace` replaced by its tokens.
fn substitute(tokens: TokenStream, replace: &HashMap<String, TokenStream>) -> TokenStream {
    tokens
        .into_iter()
        .flat_map(|tree| -> Vec<TokenTree> {
            match tree {
                TokenTree::Ident(ident) => match replace.get(&ident.to_string()) {
                    Some(with) => with.clone().into_iter().collect(),
                    None => vec![TokenTree::Ident(ident)],
                },
                TokenTree::Group(group) => {
                    let mut inner =
                        Group::new(group.delimiter(), substitute(group.stream(), replace));
                    inner.set_span(group.span());
                    vec![TokenTree::Group(inner)]
                }
                other => vec![other],
            }
        })
        .collect()
}
