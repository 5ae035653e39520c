//! `#[gpuworld::kernels] mod name { .. }`: a module whose kernels see its other items. An
//! attribute on one function sees nothing else of its crate, so the items a kernel uses — its
//! `const`s, its `#[gpuworld::func]` helpers and its `#[repr(C)]` structs — are declared beside
//! it in one module, which this macro reads whole: every item stays as written for the host
//! (the structs, the constants and the helpers are plain Rust there), and each
//! `#[gpuworld::kernel]` function in it is compiled with them in sight.

use crate::context::Context;
use crate::ir::Ty;
use quote::ToTokens;
use std::rc::Rc;
use syn::{Error, Result};

/// Whether `attr` is `#[name]` or `#[path::name]`.
fn is(attr: &syn::Attribute, name: &str) -> bool {
    attr.path()
        .segments
        .last()
        .is_some_and(|segment| segment.ident == name)
}

/// The module with its kernels compiled (see the module doc).
pub fn expand(item: proc_macro2::TokenStream) -> Result<proc_macro2::TokenStream> {
    let mut module: syn::ItemMod = syn::parse2(item)?;
    let span = module.ident.clone();
    let Some((_, items)) = &mut module.content else {
        return Err(Error::new_spanned(
            span,
            "`#[gpuworld::kernels]` goes on a module with its items inline: `mod name { .. }`",
        ));
    };
    let mut context = Context::default();
    for item in items.iter_mut() {
        match item {
            syn::Item::Struct(item) => {
                let fields = struct_fields(item);
                context.structs.insert(item.ident.to_string(), fields);
            }
            syn::Item::Const(item) => {
                if let Some(ty) = crate::parse::local_type(&item.ty) {
                    context
                        .consts
                        .insert(item.ident.to_string(), (ty, (*item.expr).clone()));
                }
            }
            syn::Item::Fn(function) if function.attrs.iter().any(|attr| is(attr, "func")) => {
                function.attrs.retain(|attr| !is(attr, "func"));
                context
                    .funcs
                    .insert(function.sig.ident.to_string(), function.clone());
            }
            _ => {}
        }
    }
    let context = Rc::new(context);
    for item in items.iter_mut() {
        let syn::Item::Fn(function) = item else {
            continue;
        };
        let Some(position) = function.attrs.iter().position(|attr| is(attr, "kernel")) else {
            continue;
        };
        let attr = function.attrs.remove(position);
        let options = match &attr.meta {
            syn::Meta::Path(_) => proc_macro2::TokenStream::new(),
            syn::Meta::List(list) => list.tokens.clone(),
            syn::Meta::NameValue(value) => {
                return Err(Error::new_spanned(
                    value,
                    "`#[kernel(..)]` takes a list of options",
                ));
            }
        };
        let tokens = crate::expand::expand(options, function.to_token_stream(), context.clone())?;
        *item = syn::Item::Verbatim(tokens);
    }
    Ok(module.into_token_stream())
}

/// The fields of a struct a kernel may use: `#[repr(C)]`, named fields of f32, u32 or i32.
fn struct_fields(item: &syn::ItemStruct) -> std::result::Result<Vec<(String, Ty)>, String> {
    let name = &item.ident;
    let repr_c = item.attrs.iter().any(|attr| {
        attr.path().is_ident("repr")
            && attr
                .parse_args_with(
                    syn::punctuated::Punctuated::<syn::Ident, syn::Token![,]>::parse_terminated,
                )
                .is_ok_and(|reprs| reprs.iter().any(|repr| repr == "C"))
    });
    if !repr_c {
        return Err(format!(
            "`{name}` is not `#[repr(C)]`: a kernel's struct has the layout the GPU sees, so \
             declare it `#[repr(C)]`"
        ));
    }
    if !item.generics.params.is_empty() {
        return Err(format!("`{name}` is generic: a kernel's struct is not"));
    }
    let syn::Fields::Named(fields) = &item.fields else {
        return Err(format!(
            "`{name}` has no named fields: a kernel's struct names each field"
        ));
    };
    if fields.named.is_empty() {
        return Err(format!(
            "`{name}` has no fields: a kernel's struct holds at least one"
        ));
    }
    fields
        .named
        .iter()
        .map(|field| {
            let ident = field
                .ident
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default();
            match crate::parse::elem_type(&field.ty) {
                Some(ty) => Ok((ident, ty)),
                None => Err(format!(
                    "field `{ident}` of `{name}` is a `{}`: a kernel's struct has fields of f32, \
                     u32 and i32 only, 4 bytes each, so that Rust, WGSL and CUDA C lay it out \
                     alike with no padding",
                    field.ty.to_token_stream()
                )),
            }
        })
        .collect()
}
