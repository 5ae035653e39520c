//! `#[repr(C)]` structs of a `#[gpuworld::kernels]` module as buffer elements (`&[Particle]`)
//! and locals. Their fields are f32, u32 or i32 — 4 bytes each, so Rust, WGSL and CUDA C lay
//! a struct out alike, with no padding (a vec3 field would be aligned to 16 in WGSL: refused, as
//! is any other field type). A struct buffer is a buffer of 32-bit words to the code generators
//! (`u32` in the signature): field `f` of element `k` is word `k * fields + f`, read and written
//! with its bits, so every backend moves the same bits and no target declares the struct. A
//! struct local is one local per field.

use super::state::{
    Array, Name, Parser, StructLocal, StructType, check_name, coerce, expect, single_ident, unknown,
};
use crate::ir::*;
use syn::spanned::Spanned;
use syn::{Error, Expr as SynExpr, Result};

/// What `a.b` names.
pub enum Field {
    /// A vector's component or a struct local's field.
    Local(LocalId, Ty),
    /// A field of a struct buffer's element: the buffer, the word's index, the field's type.
    Word(usize, Expr, Ty),
}

impl Parser {
    /// The struct `ty` names among the module's, if it names one; an error if that struct is
    /// outside the subset.
    pub(super) fn struct_type(&mut self, ty: &syn::Type) -> Result<Option<usize>> {
        let syn::Type::Path(path) = ty else {
            return Ok(None);
        };
        let Some(ident) = path.path.get_ident() else {
            return Ok(None);
        };
        let name = ident.to_string();
        if let Some(known) = self.struct_types.iter().position(|s| s.name == name) {
            return Ok(Some(known));
        }
        match self.context.structs.get(&name) {
            None => Ok(None),
            Some(Err(why)) => Err(Error::new_spanned(ty, why)),
            Some(Ok(fields)) => {
                self.struct_types.push(StructType {
                    name,
                    fields: fields.clone(),
                });
                Ok(Some(self.struct_types.len() - 1))
            }
        }
    }

    /// The struct type of buffer `b`'s elements, if they are structs.
    fn buffer_struct(&self, b: usize) -> Option<usize> {
        self.buffer_structs.get(&b).copied()
    }

    /// `p[i]` of a struct buffer: the buffer, its struct type and the element's index.
    fn struct_element(&mut self, expr: &SynExpr) -> Result<Option<(usize, usize, Expr)>> {
        let SynExpr::Index(index) = expr else {
            return Ok(None);
        };
        let SynExpr::Path(path) = &*index.expr else {
            return Ok(None);
        };
        let Some(ident) = path.path.get_ident() else {
            return Ok(None);
        };
        let Some(Name::Buffer(b)) = self.lookup(&ident.to_string()) else {
            return Ok(None);
        };
        let Some(ty) = self.buffer_struct(b) else {
            return Ok(None);
        };
        let (_, _, position) = self.element(index)?;
        Ok(Some((b, ty, position)))
    }

    /// The word of field `f` of the element at `position` of a struct of `count` fields.
    fn word(
        &self,
        position: Expr,
        count: usize,
        f: usize,
        span: proc_macro2::Span,
    ) -> Result<Expr> {
        let literal = |value: usize| Expr {
            kind: ExprKind::U32(value as u32),
            ty: Ty::U32,
        };
        let start = self.binary(BinOp::Mul, position, literal(count), span)?;
        if f == 0 {
            Ok(start)
        } else {
            self.binary(BinOp::Add, start, literal(f), span)
        }
    }

    /// What `field` (`a.b`) names: a vector's component, a struct local's field or a struct
    /// buffer element's field.
    pub(super) fn field(&mut self, field: &syn::ExprField) -> Result<Field> {
        let syn::Member::Named(member) = &field.member else {
            return Err(Error::new_spanned(field, "fields are named: `p.x`"));
        };
        let find = |parser: &Parser, ty: usize| {
            let fields = &parser.struct_types[ty].fields;
            fields
                .iter()
                .position(|(name, _)| member == name)
                .ok_or_else(|| {
                    let names: Vec<&str> = fields.iter().map(|(name, _)| name.as_str()).collect();
                    Error::new_spanned(
                        member,
                        format!(
                            "`{}` has no field `{member}` (it has: {})",
                            parser.struct_types[ty].name,
                            names.join(", ")
                        ),
                    )
                })
        };
        if let SynExpr::Path(path) = &*field.base
            && let Some(ident) = path.path.get_ident()
            && let Some(Name::Struct(s)) = self.lookup(&ident.to_string())
        {
            let ty = self.struct_locals[s].ty;
            let f = find(self, ty)?;
            return Ok(Field::Local(
                self.struct_locals[s].fields[f],
                self.struct_types[ty].fields[f].1,
            ));
        }
        if let Some((b, ty, position)) = self.struct_element(&field.base)? {
            let f = find(self, ty)?;
            let count = self.struct_types[ty].fields.len();
            let word = self.word(position, count, f, field.span())?;
            return Ok(Field::Word(b, word, self.struct_types[ty].fields[f].1));
        }
        let (id, ty) = self.component(field)?;
        Ok(Field::Local(id, ty))
    }

    /// The type of `field` where it names a struct local's field.
    pub(super) fn local_field_type(&self, field: &syn::ExprField) -> Option<Ty> {
        let SynExpr::Path(path) = &*field.base else {
            return None;
        };
        let Some(Name::Struct(s)) = self.lookup(&path.path.get_ident()?.to_string()) else {
            return None;
        };
        let syn::Member::Named(member) = &field.member else {
            return None;
        };
        let fields = &self.struct_types[self.struct_locals[s].ty].fields;
        fields
            .iter()
            .find(|(name, _)| member == name)
            .map(|(_, ty)| *ty)
    }

    /// The value of field `f` of a struct buffer, from its word.
    pub(super) fn load_field(&self, b: usize, word: Expr, ty: Ty, at: &SynExpr) -> Result<Expr> {
        let buffer = &self.buffers[b];
        if buffer.access == Access::Write {
            return Err(Error::new_spanned(
                at,
                format!(
                    "`{}` is `#[write_only]`: the kernel only stores to it; declare it without \
                     `#[write_only]` to read it",
                    buffer.name
                ),
            ));
        }
        let bits = Expr {
            kind: ExprKind::Load(b, Box::new(word)),
            ty: Ty::U32,
        };
        Ok(from_bits(bits, ty))
    }

    /// Whether `target` is a struct buffer's element or its field (`p[i] = ..`, `p[i].x = ..`).
    pub(super) fn is_struct_store(&self, target: &SynExpr) -> bool {
        let element = |expr: &SynExpr| {
            match expr {
            SynExpr::Index(index) => match &*index.expr {
                SynExpr::Path(path) => path.path.get_ident().is_some_and(|ident| {
                    matches!(self.lookup(&ident.to_string()), Some(Name::Buffer(b)) if self.buffer_struct(b).is_some())
                }),
                _ => false,
            },
            _ => false,
        }
        };
        match target {
            SynExpr::Field(field) => element(&field.base),
            other => element(other),
        }
    }

    /// `p[i].x = value` (or the store of `p[i].x += ..`, its value computed by the caller).
    pub(super) fn store_field(
        &mut self,
        target: &syn::ExprField,
        value: Expr,
        value_tokens: &SynExpr,
    ) -> Result<Stmt> {
        let Field::Word(b, word, ty) = self.field(target)? else {
            return Err(Error::new_spanned(
                target,
                "expected a struct buffer's field",
            ));
        };
        let value = coerce(value, ty);
        expect(&value, ty, value_tokens)?;
        self.check_store(b, target)?;
        Ok(Stmt::Assign(
            Place::Buffer(b, word, target.span()),
            to_bits(value),
        ))
    }

    /// A store to struct buffer `b` is allowed.
    fn check_store(&self, b: usize, at: &dyn quote::ToTokens) -> Result<()> {
        let buffer = &self.buffers[b];
        if buffer.access == Access::Read {
            let ty = self
                .buffer_struct(b)
                .map_or("", |s| &self.struct_types[s].name);
            return Err(Error::new_spanned(
                at,
                format!(
                    "`{}` is read-only (`&[{ty}]`): declare it `&mut [{ty}]` to store to it",
                    buffer.name
                ),
            ));
        }
        Ok(())
    }

    /// `p[i] = q;` or `p[i] = Name { .. };`: every field stored.
    pub(super) fn store_element(&mut self, target: &SynExpr, value: &SynExpr) -> Result<Vec<Stmt>> {
        let Some((b, ty, position)) = self.struct_element(target)? else {
            return Err(Error::new_spanned(
                target,
                "expected a struct buffer's element",
            ));
        };
        self.check_store(b, target)?;
        let values = self.struct_value(value, ty)?;
        let count = values.len();
        let mut stmts = Vec::new();
        for (f, value) in values.into_iter().enumerate() {
            let word = self.word(position.clone(), count, f, target.span())?;
            stmts.push(Stmt::Assign(
                Place::Buffer(b, word, target.span()),
                to_bits(value),
            ));
        }
        Ok(stmts)
    }

    /// Whether `expr` is a struct value: `p[i]` of a struct buffer, a struct local, or a struct
    /// literal of the module's.
    pub(super) fn is_struct_value(&self, expr: &SynExpr) -> bool {
        match expr {
            SynExpr::Struct(_) => true,
            SynExpr::Path(path) => path.path.get_ident().is_some_and(|ident| {
                matches!(self.lookup(&ident.to_string()), Some(Name::Struct(_)))
            }),
            SynExpr::Paren(paren) => self.is_struct_value(&paren.expr),
            other => self.is_struct_store(other) && !matches!(other, SynExpr::Field(_)),
        }
    }

    /// The fields of struct value `expr`, of struct type `expected` where given, with the type
    /// it has.
    fn struct_fields_of(
        &mut self,
        expr: &SynExpr,
        expected: Option<usize>,
    ) -> Result<(usize, Vec<Expr>)> {
        let (ty, values) = match expr {
            SynExpr::Paren(paren) => return self.struct_fields_of(&paren.expr, expected),
            SynExpr::Struct(literal) => {
                let ty = match self.struct_type(&syn::Type::Path(syn::TypePath {
                    qself: None,
                    path: literal.path.clone(),
                }))? {
                    Some(ty) => ty,
                    None => {
                        return Err(Error::new_spanned(
                            &literal.path,
                            "not a `#[repr(C)]` struct of this `#[gpuworld::kernels]` module",
                        ));
                    }
                };
                if let Some(rest) = &literal.rest {
                    return Err(Error::new_spanned(
                        rest,
                        "give every field: `..` is not in the subset",
                    ));
                }
                let fields = self.struct_types[ty].fields.clone();
                let mut values = Vec::new();
                for (name, field_ty) in &fields {
                    let Some(given) = literal.fields.iter().find(|given| {
                        matches!(&given.member, syn::Member::Named(member) if member == name)
                    }) else {
                        return Err(Error::new_spanned(literal, format!("field `{name}` is missing")));
                    };
                    let value = coerce(self.expr(&given.expr)?, *field_ty);
                    expect(&value, *field_ty, &given.expr)?;
                    values.push(value);
                }
                if literal.fields.len() != fields.len() {
                    return Err(Error::new_spanned(
                        literal,
                        "a field given twice or not declared",
                    ));
                }
                (ty, values)
            }
            SynExpr::Path(path) => {
                let ident = single_ident(path)?;
                let Some(Name::Struct(s)) = self.lookup(&ident.to_string()) else {
                    return Err(unknown(ident));
                };
                let ty = self.struct_locals[s].ty;
                let values = self.struct_locals[s]
                    .fields
                    .iter()
                    .zip(&self.struct_types[ty].fields)
                    .map(|(&id, (_, field_ty))| Expr {
                        kind: ExprKind::Local(id),
                        ty: *field_ty,
                    })
                    .collect();
                (ty, values)
            }
            other => {
                let Some((b, ty, position)) = self.struct_element(other)? else {
                    return Err(Error::new_spanned(other, "expected a struct"));
                };
                let fields = self.struct_types[ty].fields.clone();
                let mut values = Vec::new();
                for (f, (_, field_ty)) in fields.iter().enumerate() {
                    let word = self.word(position.clone(), fields.len(), f, other.span())?;
                    values.push(self.load_field(b, word, *field_ty, other)?);
                }
                (ty, values)
            }
        };
        if let Some(expected) = expected
            && expected != ty
        {
            return Err(Error::new_spanned(
                expr,
                format!(
                    "expected {}, found {}",
                    self.struct_types[expected].name, self.struct_types[ty].name
                ),
            ));
        }
        Ok((ty, values))
    }

    fn struct_value(&mut self, expr: &SynExpr, expected: usize) -> Result<Vec<Expr>> {
        self.struct_fields_of(expr, Some(expected))
            .map(|(_, values)| values)
    }

    /// `let q = <struct value>;`: one local per field.
    pub(super) fn struct_let(
        &mut self,
        ident: &syn::Ident,
        mutable: bool,
        value: &SynExpr,
    ) -> Result<Vec<Stmt>> {
        check_name(ident)?;
        let (ty, values) = self.struct_fields_of(value, None)?;
        let mut fields = Vec::new();
        let mut stmts = Vec::new();
        for (value, (name, _)) in values.into_iter().zip(self.struct_types[ty].fields.clone()) {
            let uniform = !mutable && self.uniform(&value);
            let id = self.hidden(&format!("{ident}_{name}"), value.ty, mutable, uniform);
            fields.push(id);
            stmts.push(Stmt::Let(id, value));
        }
        self.struct_locals.push(StructLocal { ty, fields });
        let index = self.struct_locals.len() - 1;
        self.scopes
            .last_mut()
            .expect("a scope is always open")
            .insert(ident.to_string(), Name::Struct(index));
        Ok(stmts)
    }

    /// Refuses `p[i]` of a struct buffer where a scalar is expected.
    pub(super) fn whole_element(&self, array: Array, at: &SynExpr) -> Result<()> {
        if let Array::Buffer(b) = array
            && let Some(ty) = self.buffer_struct(b)
        {
            return Err(Error::new_spanned(
                at,
                format!(
                    "an element of `{}` is a `{}`: take a field (`.{}`), or the whole element in \
                     a `let`",
                    self.buffers[b].name,
                    self.struct_types[ty].name,
                    self.struct_types[ty]
                        .fields
                        .first()
                        .map_or("x", |(name, _)| name.as_str())
                ),
            ));
        }
        Ok(())
    }
}

/// A field's value from its word's bits.
fn from_bits(bits: Expr, ty: Ty) -> Expr {
    match ty {
        Ty::F32 => Expr {
            kind: ExprKind::Call(Func::FromBits, vec![bits]),
            ty: Ty::F32,
        },
        Ty::I32 => Expr {
            kind: ExprKind::Cast(Box::new(bits)),
            ty: Ty::I32,
        },
        _ => bits,
    }
}

/// A field's value as its word's bits.
fn to_bits(value: Expr) -> Expr {
    match value.ty {
        Ty::F32 => Expr {
            kind: ExprKind::Call(Func::ToBits, vec![value]),
            ty: Ty::U32,
        },
        Ty::I32 => Expr {
            kind: ExprKind::Cast(Box::new(value)),
            ty: Ty::U32,
        },
        _ => value,
    }
}
