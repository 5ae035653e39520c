//! The parser's state while it reads one kernel, and the checks every part of it shares (names,
//! types, arguments): what the grammar (`parse.rs`, `stmts`, `places`, `exprs`) and its
//! per-feature parts (`atomics`, `inline`, `structs`, `vector`) all build on: they depend on it,
//! it on none of them, and the parts on nothing of the grammar's.

use crate::context::Context;
use crate::ir::*;
use proc_macro2::Span;
use std::collections::HashMap;
use std::rc::Rc;
use syn::{Error, Expr as SynExpr, Result};

/// What a name in the body refers to.
#[derive(Clone, Copy)]
pub(super) enum Name {
    Local(LocalId),
    Buffer(usize),
    Scalar(usize),
    Shared(usize),
    /// A vector local (`Parser::vectors`).
    Vector(usize),
    /// A parameter or `let` of a `#[gpuworld::func]` being inlined: its value
    /// (`Parser::aliases`).
    Alias(usize),
    /// A struct local (`Parser::struct_locals`).
    Struct(usize),
}

/// An array a kernel indexes.
#[derive(Clone, Copy)]
pub(super) enum Array {
    Buffer(usize),
    Shared(usize),
}

/// A loop being parsed: whether its body holds a barrier, and its `break`/`continue`s.
pub(super) struct LoopFrame {
    pub(super) barrier: bool,
    pub(super) exits: Vec<Span>,
}

/// Why a barrier may not stand where the parser is, if it may not.
#[derive(Clone)]
pub(super) enum BarrierPlace {
    Allowed,
    Refused(String),
}

/// The parser's state while it reads one kernel.
pub(super) struct Parser {
    pub(super) buffers: Vec<Buffer>,
    pub(super) scalars: Vec<Scalar>,
    pub(super) shared: Vec<Shared>,
    pub(super) locals: Vec<Local>,
    pub(super) vectors: Vec<VectorLocal>,
    /// Statements a statement being parsed expands to before itself (a vector's components).
    pub(super) pending: Vec<Stmt>,
    /// The module's items beside the kernel (`#[gpuworld::kernels]`).
    pub(super) context: Rc<Context>,
    pub(super) aliases: Vec<Expr>,
    pub(super) struct_types: Vec<StructType>,
    pub(super) struct_locals: Vec<StructLocal>,
    /// The struct type of each struct buffer's elements, by buffer.
    pub(super) buffer_structs: HashMap<usize, usize>,
    /// The constants and functions being expanded, innermost last (recursion is refused).
    pub(super) inlining: Vec<String>,
    /// The module's constants and functions the kernel uses.
    pub(super) uses: std::collections::BTreeSet<String>,
    pub(super) scopes: Vec<HashMap<String, Name>>,
    pub(super) loops: Vec<LoopFrame>,
    pub(super) barrier_place: BarrierPlace,
    pub(super) has_barrier: bool,
    pub(super) returns: Vec<Span>,
    /// Nesting of `if`/`for`/`while` around the statement being parsed (shared arrays are
    /// declared only at depth 0).
    pub(super) depth: usize,
}

/// A vector local: its component type and the local holding each component.
pub struct VectorLocal {
    pub elem: Ty,
    pub comps: Vec<LocalId>,
}

/// A struct the kernel uses: its name and fields.
pub struct StructType {
    pub name: String,
    pub fields: Vec<(String, Ty)>,
}

/// A struct local: its type (`Parser::struct_types`) and the local holding each field.
pub struct StructLocal {
    pub ty: usize,
    pub fields: Vec<LocalId>,
}

/// Refuses names the generated code cannot use as written.
pub(super) fn check_name(ident: &syn::Ident) -> Result<()> {
    let name = ident.to_string();
    if name.starts_with("r#") {
        return Err(Error::new_spanned(
            ident,
            "raw identifiers are not in the subset",
        ));
    }
    if name.starts_with("gw_") || name.starts_with("GW_") || name.starts_with("__") {
        return Err(Error::new_spanned(
            ident,
            format!("`{name}`: names starting with `gw_`, `GW_` or `__` are the generated code's"),
        ));
    }
    if RESERVED_ELSEWHERE.contains(&name.as_str()) {
        return Err(Error::new_spanned(
            ident,
            format!(
                "`{name}` is a reserved word or a name of the generated code in CUDA C++ or WGSL, \
                 where a kernel's name and its parameters' names appear as written: rename it"
            ),
        ));
    }
    Ok(())
}

/// Names Rust allows as identifiers that CUDA C++ or WGSL reserve (keywords, reserved words,
/// built-in types and variables), or that the generated code declares itself (`main`, `scalars`).
const RESERVED_ELSEWHERE: &[&str] = &[
    // CUDA C++ keywords and alternative operators, and CUDA's built-in variables.
    "alignas",
    "alignof",
    "and",
    "and_eq",
    "asm",
    "auto",
    "bitand",
    "bitor",
    "bool",
    "case",
    "catch",
    "char",
    "char8_t",
    "char16_t",
    "char32_t",
    "class",
    "compl",
    "concept",
    "const_cast",
    "consteval",
    "constexpr",
    "constinit",
    "co_await",
    "co_return",
    "co_yield",
    "decltype",
    "default",
    "delete",
    "double",
    "dynamic_cast",
    "explicit",
    "export",
    "float",
    "friend",
    "goto",
    "inline",
    "int",
    "long",
    "mutable",
    "namespace",
    "new",
    "noexcept",
    "not",
    "not_eq",
    "nullptr",
    "operator",
    "or",
    "or_eq",
    "private",
    "protected",
    "public",
    "register",
    "reinterpret_cast",
    "requires",
    "short",
    "signed",
    "sizeof",
    "static_assert",
    "static_cast",
    "switch",
    "template",
    "this",
    "thread_local",
    "throw",
    "try",
    "typedef",
    "typeid",
    "typename",
    "union",
    "unsigned",
    "using",
    "virtual",
    "void",
    "volatile",
    "wchar_t",
    "xor",
    "xor_eq",
    "restrict",
    "threadIdx",
    "blockIdx",
    "blockDim",
    "gridDim",
    "warpSize",
    "NULL",
    // WGSL keywords, reserved words, built-in functions and predeclared types Rust allows.
    "alias",
    "bitcast",
    "function",
    "i32",
    "texture_2d",
    "const_assert",
    "continuing",
    "diagnostic",
    "discard",
    "enable",
    "fallthrough",
    "var",
    "array",
    "atomic",
    "f16",
    "mat2x2",
    "mat2x3",
    "mat2x4",
    "mat3x2",
    "mat3x3",
    "mat3x4",
    "mat4x2",
    "mat4x3",
    "mat4x4",
    "ptr",
    "sampler",
    "sampler_comparison",
    "vec2",
    "vec3",
    "vec4",
    "active",
    "attribute",
    "binding_array",
    "cast",
    "coherent",
    "column_major",
    "common",
    "compile",
    "compile_fragment",
    "debugger",
    "demote",
    "demote_to_helper",
    "do",
    "extends",
    "external",
    "filter",
    "finally",
    "fxgroup",
    "get",
    "groupshared",
    "highp",
    "implements",
    "import",
    "instanceof",
    "interface",
    "layout",
    "lowp",
    "mediump",
    "meta",
    "module",
    "nil",
    "noinline",
    "nointerpolation",
    "noperspective",
    "null",
    "of",
    "package",
    "packoffset",
    "partition",
    "pass",
    "patch",
    "pixelfragment",
    "precise",
    "precision",
    "premerge",
    "readonly",
    "regardless",
    "require",
    "resource",
    "set",
    "shared",
    "smooth",
    "snorm",
    "std",
    "subroutine",
    "target",
    "type",
    "unless",
    "unorm",
    "unsized",
    "varying",
    "wgsl",
    "with",
    "writeonly",
    "override",
    "storage",
    "uniform",
    "workgroup",
    "private",
    // The generated code's own names.
    "main",
    "scalars",
    "Scalars",
];

/// The element type named by `ty` (`f32`, `u32` or `i32`), if it is one.
pub(crate) fn elem_type(ty: &syn::Type) -> Option<Ty> {
    match ty {
        syn::Type::Path(path) if path.qself.is_none() => {
            let ident = path.path.get_ident()?;
            match ident.to_string().as_str() {
                "f32" => Some(Ty::F32),
                "u32" => Some(Ty::U32),
                "i32" => Some(Ty::I32),
                _ => None,
            }
        }
        syn::Type::Group(group) => elem_type(&group.elem),
        syn::Type::Paren(paren) => elem_type(&paren.elem),
        _ => None,
    }
}

/// The type named by `ty` for a local: `f32`, `u32`, `i32` or `bool`.
pub(crate) fn local_type(ty: &syn::Type) -> Option<Ty> {
    if let syn::Type::Path(path) = ty
        && path.path.is_ident("bool")
    {
        return Some(Ty::Bool);
    }
    elem_type(ty)
}

/// Integer literals among `args` as the i32 their parameters take.
pub(super) fn coerce_args(args: &mut Vec<Expr>, params: &[Ty]) {
    let taken = std::mem::take(args);
    args.extend(
        taken
            .into_iter()
            .enumerate()
            .map(|(k, arg)| match params.get(k) {
                Some(&ty) => coerce(arg, ty),
                None => arg,
            }),
    );
}

/// `value` as `ty` where it is an integer literal that `ty` holds (`3` where an i32 is
/// expected); otherwise `value` as it is.
pub(super) fn coerce(value: Expr, ty: Ty) -> Expr {
    match (&value.kind, ty) {
        (ExprKind::U32(literal), Ty::I32) => match i32::try_from(*literal) {
            Ok(literal) => Expr {
                kind: ExprKind::I32(literal),
                ty: Ty::I32,
            },
            Err(_) => value,
        },
        _ => value,
    }
}

pub(super) fn check_args(
    at: &dyn quote::ToTokens,
    name: &str,
    args: &[Expr],
    params: &[Ty],
    tokens: &syn::punctuated::Punctuated<SynExpr, syn::Token![,]>,
) -> Result<()> {
    if args.len() != params.len() {
        return Err(Error::new_spanned(
            at,
            format!(
                "`{name}` takes {} argument(s), got {}",
                params.len(),
                args.len()
            ),
        ));
    }
    for ((arg, &param), tokens) in args.iter().zip(params).zip(tokens) {
        expect(arg, param, tokens)?;
    }
    Ok(())
}

pub(super) fn single_ident(path: &syn::ExprPath) -> Result<&syn::Ident> {
    if path.qself.is_some() {
        return Err(Error::new_spanned(path, "paths are not in the subset"));
    }
    path.path.get_ident().ok_or_else(|| {
        Error::new_spanned(
            path,
            "paths are not in the subset: the macro sees only the kernel's own names (pass a \
             value as a scalar parameter, or write the literal)",
        )
    })
}

pub(super) fn unknown(ident: &syn::Ident) -> Error {
    Error::new_spanned(
        ident,
        format!(
            "`{ident}` is not a local, parameter or shared array of this kernel: the macro sees \
             only the function's own names (pass a value as a scalar parameter, or write the \
             literal)"
        ),
    )
}

pub(super) fn mismatch(at: &SynExpr, expected: Ty, found: Ty) -> Error {
    Error::new_spanned(
        at,
        format!(
            "expected {}, found {}{}",
            expected.name(),
            found.name(),
            match (expected, found) {
                (Ty::F32, Ty::U32) =>
                    ": convert with `as f32` (write `2.0`, not `2`, for a float literal)",
                (Ty::U32, Ty::F32) => ": convert with `as u32`",
                (Ty::I32, Ty::F32 | Ty::U32) => ": convert with `as i32`",
                (Ty::U32, Ty::I32) => ": convert with `as u32`",
                (Ty::F32, Ty::I32) => ": convert with `as f32`",
                _ => "",
            }
        ),
    )
}

pub(super) fn expect(value: &Expr, ty: Ty, at: &SynExpr) -> Result<()> {
    if value.ty == ty {
        Ok(())
    } else {
        Err(mismatch(at, ty, value.ty))
    }
}
