//! `#[gpuworld::kernel]`'s expansion: its options read, a generic kernel's instances made, and
//! each kernel parsed, checked and compiled to every backend's source as a `static KernelDef`.

use crate::context::Context;
use crate::{cpu, cuda, flush, generic, ir, parse, race, wgsl};
use quote::quote;
use syn::parse::Parser as _;
use syn::{Error, Result};

/// The attribute's options.
struct Options {
    cube_dim: [u32; 3],
    id: Option<syn::LitStr>,
    krate: proc_macro2::TokenStream,
    cpu: Option<syn::Path>,
    /// A generic kernel's instances.
    instances: Vec<generic::Instance>,
}

fn options(attr: proc_macro2::TokenStream) -> Result<Options> {
    let mut options = Options {
        cube_dim: [256, 1, 1],
        id: None,
        krate: quote!(::gpuworld),
        cpu: None,
        instances: Vec::new(),
    };
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("cube_dim") {
            let value: syn::Expr = meta.value()?.parse()?;
            options.cube_dim = cube_dim(&value)?;
            Ok(())
        } else if meta.path.is_ident("id") {
            options.id = Some(meta.value()?.parse()?);
            Ok(())
        } else if meta.path.is_ident("cpu") {
            options.cpu = Some(meta.value()?.parse()?);
            Ok(())
        } else if meta.path.is_ident("instances") {
            meta.parse_nested_meta(|instance| {
                options.instances.push(generic::instance(&instance)?);
                Ok(())
            })
        } else if meta.path.is_ident("crate") {
            let path: syn::Path = meta.value()?.parse()?;
            options.krate = quote!(#path);
            Ok(())
        } else {
            Err(meta.error(
                "unknown option: the options are `cube_dim`, `id`, `crate`, `cpu` and `instances`",
            ))
        }
    });
    parser.parse2(attr)?;
    Ok(options)
}

fn cube_dim(value: &syn::Expr) -> Result<[u32; 3]> {
    let usage = "`cube_dim` is a number of units (`256`) or `[x, y, z]` of literals";
    let number = |expr: &syn::Expr| -> Result<u32> {
        match expr {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Int(int),
                ..
            }) => int.base10_parse::<u32>(),
            other => Err(Error::new_spanned(other, usage)),
        }
    };
    let dim = match value {
        syn::Expr::Array(array) if array.elems.len() == 3 => {
            let mut dim = [0; 3];
            for (slot, elem) in dim.iter_mut().zip(&array.elems) {
                *slot = number(elem)?;
            }
            dim
        }
        syn::Expr::Lit(_) => [number(value)?, 1, 1],
        other => return Err(Error::new_spanned(other, usage)),
    };
    let units: u64 = dim.iter().map(|&d| u64::from(d)).product();
    if dim.contains(&0) || units > 1024 {
        return Err(Error::new_spanned(
            value,
            "a cube has 1 to 1,024 units (every backend's limit), none of its sides 0",
        ));
    }
    Ok(dim)
}

pub(crate) fn expand(
    attr: proc_macro2::TokenStream,
    item: proc_macro2::TokenStream,
    context: std::rc::Rc<Context>,
) -> Result<proc_macro2::TokenStream> {
    let options = options(attr)?;
    let function: syn::ItemFn = syn::parse2(item)?;
    if function.sig.generics.params.is_empty() && options.instances.is_empty() {
        return expand_one(&options, &function, context);
    }
    if options.instances.is_empty() {
        return Err(Error::new_spanned(
            &function.sig.generics,
            "a generic kernel lists its instances, one static each: \
             `#[kernel(instances(scale_f32 = (f32, 16), scale_u32 = (u32, 16)))]`",
        ));
    }
    if let Some(id) = &options.id {
        return Err(Error::new_spanned(
            id,
            "each instance of a generic kernel takes the id of its own name: no `id`",
        ));
    }
    if let Some(cpu) = &options.cpu {
        return Err(Error::new_spanned(
            cpu,
            "a generic kernel has no hand-written `cpu` source",
        ));
    }
    let mut out = proc_macro2::TokenStream::new();
    for instance in &options.instances {
        let concrete = generic::instantiate(&function, instance)?;
        out.extend(expand_one(&options, &concrete, context.clone())?);
    }
    Ok(out)
}

/// The `static KernelDef` of one (not generic) kernel function.
fn expand_one(
    options: &Options,
    function: &syn::ItemFn,
    context: std::rc::Rc<Context>,
) -> Result<proc_macro2::TokenStream> {
    let mut kernel = parse::kernel(function, options.cube_dim, context)?;
    race::check(&kernel)?;
    flush::apply(&mut kernel);
    let krate = &options.krate;
    let cpu = match &options.cpu {
        Some(path) => quote!(#path),
        None => cpu::source(&mut kernel, krate),
    };
    let wgsl = wgsl::source(&kernel);
    let cuda = cuda::source(&kernel);
    let name = &function.sig.ident;
    let name_text = name.to_string();
    let vis = &function.vis;
    let docs = function
        .attrs
        .iter()
        .filter(|attr| attr.path().is_ident("doc"));
    let id = match &options.id {
        Some(id) => quote!(#id),
        None => quote!(concat!(module_path!(), "::", #name_text)),
    };
    let elem = |ty: ir::Ty| match ty {
        ir::Ty::F32 => quote!(#krate::kernel::Elem::F32),
        ir::Ty::I32 => quote!(#krate::kernel::Elem::I32),
        _ => quote!(#krate::kernel::Elem::U32),
    };
    let buffers = kernel.buffers.iter().map(|buffer| {
        let param = &buffer.name;
        let elem = elem(buffer.elem);
        let access = match buffer.access {
            ir::Access::Read => quote!(#krate::kernel::Access::Read),
            ir::Access::Write => quote!(#krate::kernel::Access::Write),
            ir::Access::ReadWrite => quote!(#krate::kernel::Access::ReadWrite),
            ir::Access::Atomic => quote!(#krate::kernel::Access::Atomic),
        };
        quote! { #krate::kernel::Param { name: #param, elem: #elem, access: #access } }
    });
    let scalars = kernel.scalars.iter().map(|scalar| {
        let param = &scalar.name;
        let elem = elem(scalar.ty);
        quote! { #krate::kernel::Param { name: #param, elem: #elem, access: #krate::kernel::Access::Read } }
    });
    let [dx, dy, dz] = kernel.cube_dim;
    // The module's items the kernel inlined are used, as far as the host's lints see.
    let uses = kernel
        .uses
        .iter()
        .map(|name| proc_macro2::Ident::new(name, proc_macro2::Span::call_site()));
    Ok(quote! {
        const _: () = { #(let _ = #uses;)* };
        #(#docs)*
        #[allow(non_upper_case_globals)]
        #vis static #name: #krate::kernel::KernelDef = #krate::kernel::KernelDef {
            id: #id,
            name: #name_text,
            signature: #krate::kernel::Signature {
                buffers: &[#(#buffers),*],
                scalars: &[#(#scalars),*],
                cube_dim: [#dx, #dy, #dz],
            },
            sources: &[
                &#krate::kernel::CpuSource(#cpu),
                &#krate::kernel::WgslSource(#wgsl),
                &#krate::kernel::CudaSource(#cuda),
            ],
        };
    })
}
