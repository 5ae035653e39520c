#![doc = include_str!("../README.md")]

mod context;
mod cpu;
mod cuda;
mod emit;
mod expand;
mod flush;
mod generic;
mod ir;
mod module;
mod parse;
mod race;
mod wgsl;

use proc_macro::TokenStream;
use syn::Error;

/// Compiles a Rust kernel to every backend's source convention and emits it as a `static`
/// `KernelDef` of the same name: `#[kernel(cube_dim = [256, 1, 1])] fn name(..) { .. }`.
/// Options: `cube_dim` (units per cube, `N` or `[x, y, z]`; default 256), `id` (the stable id;
/// default the module path and name), `crate` (the path of the crate that re-exports
/// `kernel::KernelDef`; default `::gpuworld`), `cpu` (a hand-written `CpuKernelFn` used instead
/// of the generated CPU source, where the generated one is too slow: keep a test that the two
/// give the same bits), `instances` (of a generic kernel `fn f<T, const N: u32>`: one static per
/// instance, `instances(f_f32 = (f32, 16), f_u32 = (u32, 16))`).
#[proc_macro_attribute]
pub fn kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    match expand::expand(attr.into(), item.into(), Default::default()) {
        Ok(tokens) => tokens.into(),
        Err(error) => error.to_compile_error().into(),
    }
}

/// A module whose `#[gpuworld::kernel]` functions see its other items: its `const`s of f32, u32,
/// i32 or bool, its `#[gpuworld::func]` helpers and its `#[repr(C)]` structs of f32, u32 and i32
/// fields (as buffer elements and locals). Every item stays as written for host code.
#[proc_macro_attribute]
pub fn kernels(attr: TokenStream, item: TokenStream) -> TokenStream {
    if !attr.is_empty() {
        return Error::new(
            proc_macro2::Span::call_site(),
            "`#[gpuworld::kernels]` takes no options (each kernel takes its own)",
        )
        .to_compile_error()
        .into();
    }
    match module::expand(item.into()) {
        Ok(tokens) => tokens.into(),
        Err(error) => error.to_compile_error().into(),
    }
}

/// A helper function a kernel of the same `#[gpuworld::kernels]` module may call (inlined where
/// it is called; scalar parameters and result; `let`s then one value); for the host it stays
/// the plain Rust function.
#[proc_macro_attribute]
pub fn func(_attr: TokenStream, item: TokenStream) -> TokenStream {
    item
}

// Declared apart from the list above, which the kernel branch grows: the WGSL and CUDA C texts
// of the exact division and square root and the deterministic transcendentals.
mod exact_math;
