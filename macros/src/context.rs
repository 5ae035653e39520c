//! What a kernel of a `#[gpuworld::kernels]` module sees beside its own function: the module's
//! items, which `module.rs` collects and the parser reads.

use crate::ir::Ty;
use std::collections::HashMap;

/// What a kernel of a `#[gpuworld::kernels]` module sees beside its own function.
#[derive(Default)]
pub struct Context {
    /// `const NAME: T = value;` of f32, u32, i32 or bool: its type and value expression.
    pub consts: HashMap<String, (Ty, syn::Expr)>,
    /// `#[gpuworld::func] fn name(..) -> T { .. }`.
    pub funcs: HashMap<String, syn::ItemFn>,
    /// `#[repr(C)] struct Name { .. }`: its fields, or why a kernel cannot use it.
    pub structs: HashMap<String, std::result::Result<Vec<(String, Ty)>, String>>,
}
