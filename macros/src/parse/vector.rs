//! `vec2/vec3/vec4` of f32, u32 or i32 as locals, taken apart into their components here: a
//! vector local is one local per component, and each vector operation the component-wise
//! scalar operations of the subset, so the code generators see scalars only and every backend
//! computes the same bits. `dot` sums the products left to right (`(a.x * b.x + a.y * b.y) +
//! a.z * b.z`, each product and sum rounded, never fused), `length(v)` is `dot(v, v).sqrt()` and
//! `normalize(v)` divides each component by it.

use super::state::{Name, Parser, VectorLocal, check_name, coerce, expect, single_ident, unknown};
use crate::ir::*;
use syn::spanned::Spanned;
use syn::{Error, Expr as SynExpr, Result};

/// A vector value: its component type and one scalar expression per component.
pub struct Vector {
    pub elem: Ty,
    pub comps: Vec<Expr>,
}

/// The components' names, in order.
const COMPONENTS: [&str; 4] = ["x", "y", "z", "w"];

/// Either side of a vector operation.
enum Operand {
    Scalar(Expr),
    Vector(Vector),
}

fn type_name(elem: Ty, n: usize) -> String {
    format!("vec{n}<{}>", elem.name())
}

impl Parser {
    /// Whether `expr` is a vector (a vector local, `vecN(..)`, `normalize(..)`, or an operation
    /// or `if` on those), by its form and the names in scope.
    pub(super) fn is_vector(&self, expr: &SynExpr) -> bool {
        match expr {
            SynExpr::Path(path) => path.path.get_ident().is_some_and(|ident| {
                matches!(self.lookup(&ident.to_string()), Some(Name::Vector(_)))
            }),
            SynExpr::Call(call) => matches!(
                &*call.func,
                SynExpr::Path(path)
                    if ["vec2", "vec3", "vec4", "normalize"].iter().any(|name| path.path.is_ident(name))
            ),
            SynExpr::Binary(binary) => {
                matches!(
                    binary.op,
                    syn::BinOp::Add(_) | syn::BinOp::Sub(_) | syn::BinOp::Mul(_)
                ) && (self.is_vector(&binary.left) || self.is_vector(&binary.right))
            }
            SynExpr::Unary(unary) => {
                matches!(unary.op, syn::UnOp::Neg(_)) && self.is_vector(&unary.expr)
            }
            SynExpr::Paren(paren) => self.is_vector(&paren.expr),
            SynExpr::Group(group) => self.is_vector(&group.expr),
            SynExpr::If(if_expr) => match if_expr.then_branch.stmts.as_slice() {
                [syn::Stmt::Expr(value, None)] => self.is_vector(value),
                _ => false,
            },
            _ => false,
        }
    }

    /// Parses a vector expression (`is_vector` holds for it).
    pub(super) fn vector(&mut self, expr: &SynExpr) -> Result<Vector> {
        match self.operand(expr)? {
            Operand::Vector(vector) => Ok(vector),
            Operand::Scalar(_) => Err(Error::new_spanned(expr, "expected a vector")),
        }
    }

    fn operand(&mut self, expr: &SynExpr) -> Result<Operand> {
        if !self.is_vector(expr) {
            return Ok(Operand::Scalar(self.expr(expr)?));
        }
        let vector = match expr {
            SynExpr::Path(path) => {
                let ident = single_ident(path)?;
                let Some(Name::Vector(v)) = self.lookup(&ident.to_string()) else {
                    return Err(unknown(ident));
                };
                let local = &self.vectors[v];
                Vector {
                    elem: local.elem,
                    comps: local
                        .comps
                        .iter()
                        .map(|&id| Expr {
                            kind: ExprKind::Local(id),
                            ty: local.elem,
                        })
                        .collect(),
                }
            }
            SynExpr::Call(call) => self.vector_call(call)?,
            SynExpr::Binary(binary) => {
                let op = match binary.op {
                    syn::BinOp::Add(_) => BinOp::Add,
                    syn::BinOp::Sub(_) => BinOp::Sub,
                    _ => BinOp::Mul,
                };
                let left = self.operand(&binary.left)?;
                let right = self.operand(&binary.right)?;
                self.combine(op, left, right, binary.op.span(), expr)?
            }
            SynExpr::Unary(unary) => {
                let inner = self.vector(&unary.expr)?;
                if inner.elem == Ty::U32 {
                    return Err(Error::new_spanned(
                        expr,
                        "`-` on a vector of u32: negate a vector of f32 or i32",
                    ));
                }
                Vector {
                    elem: inner.elem,
                    comps: inner
                        .comps
                        .into_iter()
                        .map(|comp| Expr {
                            ty: comp.ty,
                            kind: ExprKind::Unary(UnOp::Neg, Box::new(comp)),
                        })
                        .collect(),
                }
            }
            SynExpr::Paren(paren) => self.vector(&paren.expr)?,
            SynExpr::Group(group) => self.vector(&group.expr)?,
            SynExpr::If(if_expr) => {
                let cond = self.expr(&if_expr.cond)?;
                expect(&cond, Ty::Bool, &if_expr.cond)?;
                let branch = |block: &syn::Block| match block.stmts.as_slice() {
                    [syn::Stmt::Expr(value, None)] => Ok(value.clone()),
                    _ => Err(Error::new_spanned(
                        expr,
                        "each branch of an `if` used as a value is one expression",
                    )),
                };
                let then = self.vector(&branch(&if_expr.then_branch)?)?;
                let els = match &if_expr.else_branch {
                    Some((_, els)) => match &**els {
                        SynExpr::Block(block) => self.vector(&branch(&block.block)?)?,
                        other => self.vector(other)?,
                    },
                    None => {
                        return Err(Error::new_spanned(
                            expr,
                            "an `if` used as a value needs an `else`",
                        ));
                    }
                };
                if then.elem != els.elem || then.comps.len() != els.comps.len() {
                    return Err(Error::new_spanned(
                        expr,
                        format!(
                            "the branches of this `if` give {} and {}",
                            type_name(then.elem, then.comps.len()),
                            type_name(els.elem, els.comps.len())
                        ),
                    ));
                }
                Vector {
                    elem: then.elem,
                    comps: then
                        .comps
                        .into_iter()
                        .zip(els.comps)
                        .map(|(a, b)| Expr {
                            ty: a.ty,
                            kind: ExprKind::Select(
                                Box::new(cond.clone()),
                                Box::new(a),
                                Box::new(b),
                            ),
                        })
                        .collect(),
                }
            }
            other => return Err(Error::new_spanned(other, "expected a vector")),
        };
        Ok(Operand::Vector(vector))
    }

    /// `vecN(..)` or `normalize(v)`.
    fn vector_call(&mut self, call: &syn::ExprCall) -> Result<Vector> {
        let SynExpr::Path(path) = &*call.func else {
            return Err(Error::new_spanned(call, "expected a vector"));
        };
        if path.path.is_ident("normalize") {
            let [arg] = call.args.iter().collect::<Vec<_>>()[..] else {
                return Err(Error::new_spanned(call, "`normalize` takes one vector"));
            };
            let v = self.vector(arg)?;
            if v.elem != Ty::F32 {
                return Err(Error::new_spanned(arg, "`normalize` takes a vector of f32"));
            }
            let length = self.length(&v, call.span())?;
            let comps = v
                .comps
                .into_iter()
                .map(|comp| self.binary(BinOp::Div, comp, length.clone(), call.span()))
                .collect::<Result<Vec<_>>>()?;
            return Ok(Vector {
                elem: Ty::F32,
                comps,
            });
        }
        let n = match path
            .path
            .get_ident()
            .map(|ident| ident.to_string())
            .as_deref()
        {
            Some("vec2") => 2,
            Some("vec3") => 3,
            _ => 4,
        };
        if call.args.len() != n {
            return Err(Error::new_spanned(
                call,
                format!("`vec{n}` takes {n} components, got {}", call.args.len()),
            ));
        }
        let comps = call
            .args
            .iter()
            .map(|arg| self.expr(arg))
            .collect::<Result<Vec<_>>>()?;
        // Integer literals take the type of the other components (`vec2(x, 1)` of i32).
        let elem = comps
            .iter()
            .find(|comp| !matches!(comp.kind, ExprKind::U32(_)))
            .map_or(Ty::U32, |comp| comp.ty);
        let comps: Vec<Expr> = comps.into_iter().map(|comp| coerce(comp, elem)).collect();
        if elem == Ty::Bool {
            return Err(Error::new_spanned(
                call,
                "a vector holds f32, u32 or i32 components",
            ));
        }
        for (comp, arg) in comps.iter().zip(&call.args) {
            expect(comp, elem, arg)?;
        }
        Ok(Vector { elem, comps })
    }

    /// `left op right` of vectors component by component, or of a vector and a scalar (`*`
    /// only).
    fn combine(
        &self,
        op: BinOp,
        left: Operand,
        right: Operand,
        span: proc_macro2::Span,
        whole: &SynExpr,
    ) -> Result<Vector> {
        let pairs: Vec<(Expr, Expr)> = match (left, right) {
            (Operand::Vector(a), Operand::Vector(b)) => {
                if a.elem != b.elem || a.comps.len() != b.comps.len() {
                    return Err(Error::new(
                        span,
                        format!(
                            "`{}` between {} and {}",
                            op.symbol(),
                            type_name(a.elem, a.comps.len()),
                            type_name(b.elem, b.comps.len())
                        ),
                    ));
                }
                a.comps.into_iter().zip(b.comps).collect()
            }
            (Operand::Vector(a), Operand::Scalar(s)) if op == BinOp::Mul => {
                let s = coerce(s, a.elem);
                a.comps.into_iter().map(|c| (c, s.clone())).collect()
            }
            (Operand::Scalar(s), Operand::Vector(b)) if op == BinOp::Mul => {
                let s = coerce(s, b.elem);
                b.comps.into_iter().map(|c| (s.clone(), c)).collect()
            }
            _ => {
                return Err(Error::new_spanned(
                    whole,
                    format!(
                        "`{}` between a vector and a scalar: vectors add and subtract vectors, and \
                         multiply vectors or scalars",
                        op.symbol()
                    ),
                ));
            }
        };
        let comps = pairs
            .into_iter()
            .map(|(a, b)| self.binary(op, a, b, span))
            .collect::<Result<Vec<_>>>()?;
        Ok(Vector {
            elem: comps[0].ty,
            comps,
        })
    }

    /// `dot(a, b)`: the products summed left to right.
    fn dot(&self, a: &Vector, b: &Vector, span: proc_macro2::Span) -> Result<Expr> {
        if a.elem != b.elem || a.comps.len() != b.comps.len() {
            return Err(Error::new(
                span,
                format!(
                    "`dot` of {} and {}",
                    type_name(a.elem, a.comps.len()),
                    type_name(b.elem, b.comps.len())
                ),
            ));
        }
        let mut products = a
            .comps
            .iter()
            .zip(&b.comps)
            .map(|(x, y)| self.binary(BinOp::Mul, x.clone(), y.clone(), span));
        let mut sum = products
            .next()
            .unwrap_or_else(|| Err(Error::new(span, "an empty vector")))?;
        for product in products {
            sum = self.binary(BinOp::Add, sum, product?, span)?;
        }
        Ok(sum)
    }

    /// `length(v)`: `dot(v, v).sqrt()`.
    fn length(&self, v: &Vector, span: proc_macro2::Span) -> Result<Expr> {
        if v.elem != Ty::F32 {
            return Err(Error::new(span, "`length` takes a vector of f32"));
        }
        Ok(Expr {
            kind: ExprKind::Call(Func::Sqrt, vec![self.dot(v, v, span)?]),
            ty: Ty::F32,
        })
    }

    /// `dot(a, b)` or `length(v)` as a scalar, if `call` is one.
    pub(super) fn vector_scalar_call(&mut self, call: &syn::ExprCall) -> Result<Option<Expr>> {
        let SynExpr::Path(path) = &*call.func else {
            return Ok(None);
        };
        let args: Vec<&SynExpr> = call.args.iter().collect();
        if path.path.is_ident("dot") {
            let [a, b] = args[..] else {
                return Err(Error::new_spanned(call, "`dot` takes two vectors"));
            };
            let (a, b) = (self.vector(a)?, self.vector(b)?);
            return self.dot(&a, &b, call.span()).map(Some);
        }
        if path.path.is_ident("length") {
            let [v] = args[..] else {
                return Err(Error::new_spanned(call, "`length` takes one vector"));
            };
            let v = self.vector(v)?;
            return self.length(&v, call.span()).map(Some);
        }
        Ok(None)
    }

    /// `v.x`: the component's local, if `field` is a vector local's component.
    pub(super) fn component(&self, field: &syn::ExprField) -> Result<(LocalId, Ty)> {
        let usage = "a vector's components are `.x`, `.y`, `.z` and `.w` of a vector local";
        let SynExpr::Path(path) = &*field.base else {
            return Err(Error::new_spanned(field, usage));
        };
        let ident = single_ident(path)?;
        let Some(Name::Vector(v)) = self.lookup(&ident.to_string()) else {
            return Err(Error::new_spanned(
                field,
                format!("`{ident}` is not a vector: {usage}"),
            ));
        };
        let local = &self.vectors[v];
        let syn::Member::Named(member) = &field.member else {
            return Err(Error::new_spanned(&field.member, usage));
        };
        match COMPONENTS[..local.comps.len()]
            .iter()
            .position(|name| member == name)
        {
            Some(k) => Ok((local.comps[k], local.elem)),
            None => Err(Error::new_spanned(
                member,
                format!(
                    "`{ident}` is a {}: its components are {}",
                    type_name(local.elem, local.comps.len()),
                    COMPONENTS[..local.comps.len()].join(", ")
                ),
            )),
        }
    }

    /// `let v = <vector>;`: one local per component, declared in order.
    pub(super) fn vector_let(
        &mut self,
        ident: &syn::Ident,
        mutable: bool,
        value: Vector,
    ) -> Result<Vec<Stmt>> {
        check_name(ident)?;
        let mut comps = Vec::new();
        let mut stmts = Vec::new();
        for (k, comp) in value.comps.into_iter().enumerate() {
            let uniform = !mutable && self.uniform(&comp);
            let id = self.hidden(
                &format!("{ident}_{}", COMPONENTS[k]),
                comp.ty,
                mutable,
                uniform,
            );
            comps.push(id);
            stmts.push(Stmt::Let(id, comp));
        }
        let index = self.vectors.len();
        self.vectors.push(VectorLocal {
            elem: value.elem,
            comps,
        });
        self.scopes
            .last_mut()
            .expect("a scope is always open")
            .insert(ident.to_string(), Name::Vector(index));
        Ok(stmts)
    }

    /// `v = <vector>;` to a `let mut` vector local: every component computed first, then
    /// assigned (`v = vec2(v.y, v.x)` swaps).
    pub(super) fn vector_assign(
        &mut self,
        target: &syn::Ident,
        value: Vector,
        at: &SynExpr,
    ) -> Result<Vec<Stmt>> {
        let Some(Name::Vector(v)) = self.lookup(&target.to_string()) else {
            return Err(unknown(target));
        };
        let (elem, comps) = (self.vectors[v].elem, self.vectors[v].comps.clone());
        if !self.locals[comps[0]].mutable {
            return Err(Error::new_spanned(
                target,
                format!("`{target}` is not `mut`: declare it `let mut {target}`"),
            ));
        }
        if elem != value.elem || comps.len() != value.comps.len() {
            return Err(Error::new_spanned(
                at,
                format!(
                    "expected {}, found {}",
                    type_name(elem, comps.len()),
                    type_name(value.elem, value.comps.len())
                ),
            ));
        }
        let mut stmts = Vec::new();
        let mut temps = Vec::new();
        for comp in value.comps {
            let temp = self.hidden("gw_t", comp.ty, false, false);
            temps.push(temp);
            stmts.push(Stmt::Let(temp, comp));
        }
        for (id, temp) in comps.into_iter().zip(temps) {
            let ty = self.locals[temp].ty;
            stmts.push(Stmt::Assign(
                Place::Local(id),
                Expr {
                    kind: ExprKind::Local(temp),
                    ty,
                },
            ));
        }
        Ok(stmts)
    }

    /// `v += w`, `v -= w`, `v *= w` or `v *= s` to a vector local.
    pub(super) fn vector_compound(
        &mut self,
        op: BinOp,
        binary: &syn::ExprBinary,
    ) -> Result<Vec<Stmt>> {
        let target = match &*binary.left {
            SynExpr::Path(path) => single_ident(path)?.clone(),
            other => return Err(Error::new_spanned(other, "expected a vector local")),
        };
        let current = self.operand(&binary.left)?;
        let operand = self.operand(&binary.right)?;
        let whole = SynExpr::Binary(binary.clone());
        let value = self.combine(op, current, operand, binary.op.span(), &whole)?;
        self.vector_assign(&target, value, &binary.right)
    }
}
