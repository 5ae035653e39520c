//! Expressions: operators and their types, literals, method calls and function calls (the
//! builtins, the kernel's own helpers), each type mismatch an error at its span.

use super::atomics::atomic_element;
use super::state::{
    Array, Name, Parser, check_args, coerce, coerce_args, expect, single_ident, unknown,
};
pub(crate) use super::state::{elem_type, local_type};
use super::structs;
use crate::ir::*;
use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::{Error, Expr as SynExpr, Result};

impl Parser {
    pub(super) fn expr(&mut self, expr: &SynExpr) -> Result<Expr> {
        if self.is_vector(expr) {
            return Err(Error::new_spanned(
                expr,
                "a vector where a scalar is expected: take a component (`v.x`), `dot(a, b)` or \
                 `length(v)`",
            ));
        }
        match expr {
            SynExpr::Field(field) => match self.field(field)? {
                structs::Field::Local(id, ty) => Ok(Expr {
                    kind: ExprKind::Local(id),
                    ty,
                }),
                structs::Field::Word(b, word, ty) => self.load_field(b, word, ty, expr),
            },
            SynExpr::Lit(lit) => literal(&lit.lit),
            SynExpr::Paren(paren) => self.expr(&paren.expr),
            SynExpr::Group(group) => self.expr(&group.expr),
            SynExpr::Path(path) => {
                let ident = single_ident(path)?;
                match self.lookup(&ident.to_string()) {
                    Some(Name::Local(id)) => Ok(Expr {
                        kind: ExprKind::Local(id),
                        ty: self.locals[id].ty,
                    }),
                    Some(Name::Scalar(j)) => Ok(Expr {
                        kind: ExprKind::Scalar(j),
                        ty: self.scalars[j].ty,
                    }),
                    Some(Name::Buffer(_)) | Some(Name::Shared(_)) => Err(Error::new_spanned(
                        expr,
                        format!(
                            "`{ident}` is an array: read an element (`{ident}[i]`) or its length (`{ident}.len()`)"
                        ),
                    )),
                    Some(Name::Vector(_)) => Err(Error::new_spanned(
                        expr,
                        format!("`{ident}` is a vector: take a component (`{ident}.x`)"),
                    )),
                    Some(Name::Alias(a)) => Ok(self.aliases[a].clone()),
                    Some(Name::Struct(_)) => Err(Error::new_spanned(
                        expr,
                        format!("`{ident}` is a struct: take a field (`{ident}.x`)"),
                    )),
                    None => self.constant(ident),
                }
            }
            SynExpr::Index(index) => {
                let (ident, array, position) = self.element(index)?;
                self.whole_element(array, expr)?;
                match array {
                    Array::Buffer(b) if self.buffers[b].access == Access::Atomic => {
                        Err(atomic_element(ident))
                    }
                    Array::Buffer(b) if self.buffers[b].access == Access::Write => {
                        let elem = self.buffers[b].elem.name();
                        Err(Error::new_spanned(
                            expr,
                            format!(
                                "`{ident}` is `#[write_only]`: the kernel only stores to it, and a \
                                 load would read contents the runtime did not order before this \
                                 launch. Declare it `{ident}: &mut [{elem}]` (without \
                                 `#[write_only]`) to read it"
                            ),
                        ))
                    }
                    Array::Buffer(b) => Ok(Expr {
                        ty: self.buffers[b].elem,
                        kind: ExprKind::Load(b, Box::new(position)),
                    }),
                    Array::Shared(s) => Ok(Expr {
                        ty: self.shared[s].elem,
                        kind: ExprKind::SharedLoad(s, Box::new(position)),
                    }),
                }
            }
            SynExpr::Unary(unary) => {
                let operand = self.expr(&unary.expr)?;
                match (&unary.op, &operand.kind, operand.ty) {
                    // `-3` is an i32 literal, as Rust infers it; `-2147483648` is `i32::MIN`.
                    (syn::UnOp::Neg(_), ExprKind::U32(value), _) if *value <= 1 << 31 => Ok(Expr {
                        kind: ExprKind::I32((-i64::from(*value)) as i32),
                        ty: Ty::I32,
                    }),
                    (syn::UnOp::Neg(_), ExprKind::I32(value), _) => Ok(Expr {
                        kind: ExprKind::I32(value.wrapping_neg()),
                        ty: Ty::I32,
                    }),
                    (syn::UnOp::Neg(_), _, ty @ (Ty::F32 | Ty::I32)) => Ok(Expr {
                        kind: ExprKind::Unary(UnOp::Neg, Box::new(operand)),
                        ty,
                    }),
                    (syn::UnOp::Neg(_), _, ty) => Err(Error::new_spanned(
                        expr,
                        format!(
                            "`-` on {}: negate an f32 or an i32 (`(x as i32)`; a literal `-3` is \
                             an i32)",
                            ty.name()
                        ),
                    )),
                    (syn::UnOp::Not(_), _, ty @ (Ty::Bool | Ty::U32 | Ty::I32)) => Ok(Expr {
                        kind: ExprKind::Unary(UnOp::Not, Box::new(operand)),
                        ty,
                    }),
                    (syn::UnOp::Not(_), _, ty) => Err(Error::new_spanned(
                        expr,
                        format!("`!` on {}: it takes bool, u32 or i32", ty.name()),
                    )),
                    _ => Err(Error::new_spanned(
                        expr,
                        "references and dereferences are not in the subset",
                    )),
                }
            }
            SynExpr::Binary(binary) => {
                let Some(op) = binary_op(&binary.op) else {
                    return Err(Error::new_spanned(
                        binary.op,
                        "an assignment is a statement, not a value",
                    ));
                };
                let left = self.expr(&binary.left)?;
                let right = self.expr(&binary.right)?;
                self.binary(op, left, right, binary.op.span())
            }
            SynExpr::Cast(cast) => {
                let value = self.expr(&cast.expr)?;
                let Some(target) = elem_type(&cast.ty) else {
                    return Err(Error::new_spanned(
                        &cast.ty,
                        "cast with `as f32`, `as u32` or `as i32`",
                    ));
                };
                match (value.ty, target) {
                    (Ty::Bool, Ty::F32) => Err(Error::new_spanned(
                        expr,
                        "bool casts only to u32 (`b as u32`, then `as f32`)",
                    )),
                    (from, to) if from == to => Ok(value),
                    _ => Ok(Expr {
                        kind: ExprKind::Cast(Box::new(value)),
                        ty: target,
                    }),
                }
            }
            SynExpr::If(if_expr) => {
                let cond = self.expr(&if_expr.cond)?;
                expect(&cond, Ty::Bool, &if_expr.cond)?;
                let then = self.value_block(&if_expr.then_branch, expr)?;
                let Some((_, else_expr)) = &if_expr.else_branch else {
                    return Err(Error::new_spanned(
                        expr,
                        "an `if` used as a value needs an `else`",
                    ));
                };
                let els = match &**else_expr {
                    SynExpr::Block(block) => self.value_block(&block.block, expr)?,
                    nested @ SynExpr::If(_) => self.expr(nested)?,
                    other => return Err(Error::new_spanned(other, "expected a block")),
                };
                let then = coerce(then, els.ty);
                let els = coerce(els, then.ty);
                if then.ty != els.ty {
                    return Err(Error::new_spanned(
                        expr,
                        format!(
                            "the branches of this `if` give {} and {}",
                            then.ty.name(),
                            els.ty.name()
                        ),
                    ));
                }
                let ty = then.ty;
                Ok(Expr {
                    kind: ExprKind::Select(Box::new(cond), Box::new(then), Box::new(els)),
                    ty,
                })
            }
            SynExpr::MethodCall(call) => self.method(call),
            SynExpr::Call(call) => match self.vector_scalar_call(call)? {
                Some(value) => Ok(value),
                None => self.call(call),
            },
            other => Err(Error::new_spanned(
                other,
                "this expression is not in the kernel subset (literals, names, `a[i]`, \
                 arithmetic, comparisons, `as`, `if .. else ..`, the math methods and the \
                 built-in ids are)",
            )),
        }
    }

    /// The single expression of a branch of an `if` used as a value.
    pub(super) fn value_block(&mut self, block: &syn::Block, whole: &SynExpr) -> Result<Expr> {
        match block.stmts.as_slice() {
            [syn::Stmt::Expr(value, None)] => self.expr(value),
            _ => Err(Error::new_spanned(
                whole,
                "each branch of an `if` used as a value is one expression: `if c { a } else { b }`",
            )),
        }
    }

    pub(super) fn binary(&self, op: BinOp, left: Expr, right: Expr, span: Span) -> Result<Expr> {
        let refuse = |why: String| Err(Error::new(span, why));
        if matches!(op, BinOp::Shl | BinOp::Shr) && left.ty == Ty::I32 && right.ty == Ty::U32 {
            // As in Rust and WGSL, an i32 shifts by a u32 amount.
            return Ok(Expr {
                kind: ExprKind::Binary(op, Box::new(left), Box::new(right)),
                ty: Ty::I32,
            });
        }
        let left = coerce(left, right.ty);
        let right = coerce(right, left.ty);
        let (lt, rt) = (left.ty, right.ty);
        if lt != rt {
            let literal = match (&left.kind, &right.kind) {
                (ExprKind::U32(value), _) if rt == Ty::F32 => Some(value),
                (_, ExprKind::U32(value)) if lt == Ty::F32 => Some(value),
                _ => None,
            };
            if let Some(value) = literal {
                return refuse(format!(
                    "`{}` between f32 and the integer literal `{value}`: write `{value}.0` \
                     (integer literals are u32, and the subset has no implicit conversions)",
                    op.symbol()
                ));
            }
            return refuse(format!(
                "`{}` between {} and {}: convert one side with `as {}` (the subset has no \
                 implicit conversions)",
                op.symbol(),
                lt.name(),
                rt.name(),
                if lt == Ty::Bool { rt.name() } else { lt.name() }
            ));
        }
        let ty = match op {
            BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div => match lt {
                Ty::F32 | Ty::U32 | Ty::I32 => lt,
                Ty::Bool => return refuse(format!("`{}` on bool", op.symbol())),
            },
            BinOp::Rem => match lt {
                Ty::U32 | Ty::I32 => lt,
                _ => {
                    return refuse(format!(
                        "`%` on {}: the subset has it for u32 and i32 only (its meaning for f32 \
                         differs between backends)",
                        lt.name()
                    ));
                }
            },
            BinOp::BitAnd | BinOp::BitOr | BinOp::BitXor | BinOp::Shl | BinOp::Shr => match lt {
                Ty::U32 => lt,
                Ty::I32 if !matches!(op, BinOp::Shl | BinOp::Shr) => lt,
                Ty::I32 => {
                    return refuse(format!(
                        "`{}` of an i32 by an i32: the amount of a shift is a u32 (`x {} (k as \
                         u32)`)",
                        op.symbol(),
                        op.symbol()
                    ));
                }
                _ => {
                    return refuse(format!(
                        "`{}` on {}: bit operations take u32 or i32 (`&&` and `||` for bool; \
                         `x.to_bits()` for an f32's bits)",
                        op.symbol(),
                        lt.name()
                    ));
                }
            },
            BinOp::And | BinOp::Or => match lt {
                Ty::Bool => lt,
                _ => return refuse(format!("`{}` on {}: it takes bool", op.symbol(), lt.name())),
            },
            BinOp::Eq | BinOp::Ne => Ty::Bool,
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => match lt {
                Ty::Bool => return refuse(format!("`{}` on bool", op.symbol())),
                _ => Ty::Bool,
            },
        };
        Ok(Expr {
            kind: ExprKind::Binary(op, Box::new(left), Box::new(right)),
            ty,
        })
    }

    pub(super) fn method(&mut self, call: &syn::ExprMethodCall) -> Result<Expr> {
        let method = call.method.to_string();
        if method.starts_with("atomic_") {
            return Err(Error::new_spanned(
                call,
                "an atomic operation stands alone: as a statement (`counts.atomic_add(k, 1);`) \
                 or as the whole value of a `let` or an assignment to a local (`let old = \
                 counts.atomic_add(k, 1);`), so that no backend runs it twice or in another order",
            ));
        }
        if call.turbofish.is_some() {
            return Err(Error::new_spanned(call, "no turbofish on methods"));
        }
        if method == "len" {
            let receiver = match &*call.receiver {
                SynExpr::Path(path) => single_ident(path)?,
                other => {
                    return Err(Error::new_spanned(
                        other,
                        "`.len()` of a buffer or shared array by name",
                    ));
                }
            };
            if !call.args.is_empty() {
                return Err(Error::new_spanned(call, "`.len()` takes no arguments"));
            }
            return match self.lookup(&receiver.to_string()) {
                // Of a struct buffer: whole elements.
                Some(Name::Buffer(b)) if self.buffer_structs.contains_key(&b) => {
                    let fields = self.struct_types[self.buffer_structs[&b]].fields.len();
                    let words = Expr {
                        kind: ExprKind::Len(b),
                        ty: Ty::U32,
                    };
                    let fields = Expr {
                        kind: ExprKind::U32(fields as u32),
                        ty: Ty::U32,
                    };
                    self.binary(BinOp::Div, words, fields, call.span())
                }
                Some(Name::Buffer(b)) => Ok(Expr {
                    kind: ExprKind::Len(b),
                    ty: Ty::U32,
                }),
                Some(Name::Shared(s)) => Ok(Expr {
                    kind: ExprKind::U32(self.shared[s].len),
                    ty: Ty::U32,
                }),
                Some(_) => Err(Error::new_spanned(
                    &call.receiver,
                    "`.len()` is a buffer's or shared array's length",
                )),
                None => Err(unknown(receiver)),
            };
        }
        let receiver = self.expr(&call.receiver)?;
        let mut args = call
            .args
            .iter()
            .map(|arg| self.expr(arg))
            .collect::<Result<Vec<_>>>()?;
        let (func, params, result): (Func, &[Ty], Ty) = match (receiver.ty, method.as_str()) {
            (Ty::F32, "abs") => (Func::Abs, &[], Ty::F32),
            (Ty::F32, "floor") => (Func::Floor, &[], Ty::F32),
            (Ty::F32, "ceil") => (Func::Ceil, &[], Ty::F32),
            (Ty::F32, "trunc") => (Func::Trunc, &[], Ty::F32),
            (Ty::F32, "sqrt") => (Func::Sqrt, &[], Ty::F32),
            (Ty::F32, "exp") => (Func::Exp, &[], Ty::F32),
            (Ty::F32, "ln") => (Func::Ln, &[], Ty::F32),
            (Ty::F32, "sin") => (Func::Sin, &[], Ty::F32),
            (Ty::F32, "cos") => (Func::Cos, &[], Ty::F32),
            (Ty::F32, "tanh") => (Func::Tanh, &[], Ty::F32),
            (Ty::F32, "powf") => (Func::Powf, &[Ty::F32], Ty::F32),
            (Ty::F32, "native_sqrt") => (Func::Native(NativeFunc::Sqrt), &[], Ty::F32),
            (Ty::F32, "native_exp") => (Func::Native(NativeFunc::Exp), &[], Ty::F32),
            (Ty::F32, "native_ln") => (Func::Native(NativeFunc::Ln), &[], Ty::F32),
            (Ty::F32, "native_sin") => (Func::Native(NativeFunc::Sin), &[], Ty::F32),
            (Ty::F32, "native_cos") => (Func::Native(NativeFunc::Cos), &[], Ty::F32),
            (Ty::F32, "native_tanh") => (Func::Native(NativeFunc::Tanh), &[], Ty::F32),
            (Ty::F32, "native_powf") => (Func::Native(NativeFunc::Powf), &[Ty::F32], Ty::F32),
            (Ty::F32, "min") => (Func::Min, &[Ty::F32], Ty::F32),
            (Ty::F32, "max") => (Func::Max, &[Ty::F32], Ty::F32),
            (Ty::F32, "mul_add") => (Func::Fma, &[Ty::F32, Ty::F32], Ty::F32),
            (Ty::F32, "to_bits") => (Func::ToBits, &[], Ty::U32),
            (Ty::U32, "min") => (Func::Min, &[Ty::U32], Ty::U32),
            (Ty::U32, "max") => (Func::Max, &[Ty::U32], Ty::U32),
            (Ty::I32, "min") => (Func::Min, &[Ty::I32], Ty::I32),
            (Ty::I32, "max") => (Func::Max, &[Ty::I32], Ty::I32),
            (ty, _) => {
                let offer = match ty {
                    Ty::F32 => {
                        "abs, floor, ceil, trunc, sqrt, min, max, mul_add, to_bits, exp, ln, sin, cos, tanh, powf, and the device's own (not the same bits everywhere) native_sqrt, native_exp, native_ln, native_sin, native_cos, native_tanh, native_powf"
                    }
                    Ty::U32 | Ty::I32 => "min, max",
                    Ty::Bool => "none",
                };
                return Err(Error::new_spanned(
                    &call.method,
                    format!(
                        "`{method}` is not a method of {} in the subset (it has: {offer})",
                        ty.name()
                    ),
                ));
            }
        };
        coerce_args(&mut args, params);
        check_args(&call.method, &method, &args, params, &call.args)?;
        let mut all = vec![receiver];
        all.extend(args);
        Ok(Expr {
            kind: ExprKind::Call(func, all),
            ty: result,
        })
    }

    pub(super) fn call(&mut self, call: &syn::ExprCall) -> Result<Expr> {
        let SynExpr::Path(path) = &*call.func else {
            return Err(Error::new_spanned(
                &call.func,
                "call a built-in function by name",
            ));
        };
        let segments: Vec<String> = path
            .path
            .segments
            .iter()
            .map(|s| s.ident.to_string())
            .collect();
        let name = segments.join("::");
        if let Some(function) = self
            .context
            .funcs
            .get(&name)
            .filter(|function| function.sig.generics.params.is_empty())
        {
            // Before the arguments: a vector or struct argument would be refused for its own
            // sake, and the helper's signature is what to change.
            for input in &function.sig.inputs {
                if let syn::FnArg::Typed(typed) = input
                    && local_type(&typed.ty).is_none()
                {
                    return Err(Error::new_spanned(
                        &typed.ty,
                        format!(
                            "`{name}` takes a `{}`: a `#[gpuworld::func]` takes and returns \
                             f32, u32, i32 or bool, so pass a vector's components (`v.x, v.y`) \
                             or a struct's fields (`p.x`) and return one value",
                            quote::ToTokens::to_token_stream(&typed.ty)
                        ),
                    ));
                }
            }
        }
        let args = call
            .args
            .iter()
            .map(|arg| self.expr(arg))
            .collect::<Result<Vec<_>>>()?;
        let builtin = match name.as_str() {
            "unit" => Some(Builtin::Unit),
            "unit_x" => Some(Builtin::UnitX),
            "unit_y" => Some(Builtin::UnitY),
            "unit_z" => Some(Builtin::UnitZ),
            "cube" => Some(Builtin::Cube),
            "cube_x" => Some(Builtin::CubeX),
            "cube_y" => Some(Builtin::CubeY),
            "cube_z" => Some(Builtin::CubeZ),
            "cube_count_x" => Some(Builtin::CubeCountX),
            "cube_count_y" => Some(Builtin::CubeCountY),
            "cube_count_z" => Some(Builtin::CubeCountZ),
            "units_per_cube" => Some(Builtin::UnitsPerCube),
            "global_index" => Some(Builtin::GlobalIndex),
            _ => None,
        };
        if let Some(builtin) = builtin {
            check_args(&call.func, &name, &args, &[], &call.args)?;
            return Ok(Expr {
                kind: ExprKind::Builtin(builtin),
                ty: Ty::U32,
            });
        }
        if let Some(function) = self.context.funcs.get(&name).cloned() {
            return self.inline(call, &function, args);
        }
        let (func, params, result): (Func, &[Ty], Ty) = match name.as_str() {
            "fma" => (Func::Fma, &[Ty::F32, Ty::F32, Ty::F32], Ty::F32),
            "f32::from_bits" => (Func::FromBits, &[Ty::U32], Ty::F32),
            "sync_cube" => {
                return Err(Error::new_spanned(
                    call,
                    "`sync_cube()` is a statement, not a value",
                ));
            }
            "shared" => {
                return Err(Error::new_spanned(
                    call,
                    "a shared array is declared with `let name = shared::<f32, 256>();`",
                ));
            }
            _ => {
                return Err(Error::new_spanned(
                    &call.func,
                    format!(
                        "`{name}` is not a function of the kernel subset (it has: unit, unit_x/y/z, \
                         cube, cube_x/y/z, cube_count_x/y/z, units_per_cube, global_index, \
                         sync_cube, fma, f32::from_bits, shared::<T, N>, dot, length, and the \
                         `#[gpuworld::func]` helpers of the kernel's `#[gpuworld::kernels]` module)"
                    ),
                ));
            }
        };
        check_args(&call.func, &name, &args, params, &call.args)?;
        Ok(Expr {
            kind: ExprKind::Call(func, args),
            ty: result,
        })
    }
}

pub(super) fn is_call_to(call: &syn::ExprCall, name: &str) -> bool {
    matches!(&*call.func, SynExpr::Path(path) if path.path.is_ident(name))
}

fn literal(lit: &syn::Lit) -> Result<Expr> {
    match lit {
        syn::Lit::Int(int) => match int.suffix() {
            "" | "u32" => {
                let value = int.base10_parse::<u32>().map_err(|_| {
                    Error::new_spanned(int, "an integer literal is a u32: 0 to 4294967295")
                })?;
                Ok(Expr {
                    kind: ExprKind::U32(value),
                    ty: Ty::U32,
                })
            }
            "i32" => {
                let value = int.base10_parse::<i32>().map_err(|_| {
                    Error::new_spanned(
                        int,
                        "an i32 literal is 0 to 2147483647 (negate it: `-5i32`)",
                    )
                })?;
                Ok(Expr {
                    kind: ExprKind::I32(value),
                    ty: Ty::I32,
                })
            }
            "f32" => float(int.base10_parse::<f32>(), lit),
            suffix => Err(Error::new_spanned(
                int,
                format!("`{suffix}` literals are not in the subset: its integers are u32 and i32"),
            )),
        },
        syn::Lit::Float(value) => match value.suffix() {
            "" | "f32" => float(value.base10_parse::<f32>(), lit),
            suffix => Err(Error::new_spanned(
                value,
                format!("`{suffix}` literals are not in the subset: its floats are f32"),
            )),
        },
        syn::Lit::Bool(value) => Ok(Expr {
            kind: ExprKind::Bool(value.value),
            ty: Ty::Bool,
        }),
        other => Err(Error::new_spanned(
            other,
            "only numbers and `true`/`false` are literals of the subset",
        )),
    }
}

fn float(parsed: Result<f32>, lit: &syn::Lit) -> Result<Expr> {
    match parsed {
        Ok(value) if value.is_finite() => Ok(Expr {
            kind: ExprKind::F32(value),
            ty: Ty::F32,
        }),
        _ => Err(Error::new_spanned(lit, "this literal is not a finite f32")),
    }
}

fn binary_op(op: &syn::BinOp) -> Option<BinOp> {
    Some(match op {
        syn::BinOp::Add(_) => BinOp::Add,
        syn::BinOp::Sub(_) => BinOp::Sub,
        syn::BinOp::Mul(_) => BinOp::Mul,
        syn::BinOp::Div(_) => BinOp::Div,
        syn::BinOp::Rem(_) => BinOp::Rem,
        syn::BinOp::BitAnd(_) => BinOp::BitAnd,
        syn::BinOp::BitOr(_) => BinOp::BitOr,
        syn::BinOp::BitXor(_) => BinOp::BitXor,
        syn::BinOp::Shl(_) => BinOp::Shl,
        syn::BinOp::Shr(_) => BinOp::Shr,
        syn::BinOp::And(_) => BinOp::And,
        syn::BinOp::Or(_) => BinOp::Or,
        syn::BinOp::Eq(_) => BinOp::Eq,
        syn::BinOp::Ne(_) => BinOp::Ne,
        syn::BinOp::Lt(_) => BinOp::Lt,
        syn::BinOp::Le(_) => BinOp::Le,
        syn::BinOp::Gt(_) => BinOp::Gt,
        syn::BinOp::Ge(_) => BinOp::Ge,
        _ => return None,
    })
}

/// The operator of a compound assignment (`+=`), if `op` is one.
pub(super) fn compound(op: &syn::BinOp) -> Option<BinOp> {
    Some(match op {
        syn::BinOp::AddAssign(_) => BinOp::Add,
        syn::BinOp::SubAssign(_) => BinOp::Sub,
        syn::BinOp::MulAssign(_) => BinOp::Mul,
        syn::BinOp::DivAssign(_) => BinOp::Div,
        syn::BinOp::RemAssign(_) => BinOp::Rem,
        syn::BinOp::BitAndAssign(_) => BinOp::BitAnd,
        syn::BinOp::BitOrAssign(_) => BinOp::BitOr,
        syn::BinOp::BitXorAssign(_) => BinOp::BitXor,
        syn::BinOp::ShlAssign(_) => BinOp::Shl,
        syn::BinOp::ShrAssign(_) => BinOp::Shr,
        _ => return None,
    })
}
