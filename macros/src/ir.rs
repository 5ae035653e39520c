//! The kernel as the code generators see it: typed statements and expressions over the subset,
//! every local renamed to a name of its own (shadowing is resolved here, so no target language
//! sees two declarations of one name).

use proc_macro2::Span;

/// A value's type: the subset has 32-bit floats, unsigned and signed integers, and booleans.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ty {
    F32,
    U32,
    I32,
    Bool,
}

impl Ty {
    pub fn name(self) -> &'static str {
        match self {
            Ty::F32 => "f32",
            Ty::U32 => "u32",
            Ty::I32 => "i32",
            Ty::Bool => "bool",
        }
    }
}

/// How a kernel accesses a buffer parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
    ReadWrite,
    /// `#[atomic]`: only through atomic operations.
    Atomic,
}

/// An atomic operation on an element of a `#[atomic]` buffer (`counts.atomic_add(k, 1)`): it
/// returns the element's old value; relaxed on every backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicOp {
    Load,
    Add,
    Sub,
    Min,
    Max,
    And,
    Or,
    Xor,
    Exchange,
    /// `(k, expected, new)`: stores `new` where the element is `expected`.
    CompareExchange,
}

impl AtomicOp {
    /// Every operation, by its method's name.
    pub const ALL: [(&'static str, AtomicOp); 10] = [
        ("atomic_load", AtomicOp::Load),
        ("atomic_add", AtomicOp::Add),
        ("atomic_sub", AtomicOp::Sub),
        ("atomic_min", AtomicOp::Min),
        ("atomic_max", AtomicOp::Max),
        ("atomic_and", AtomicOp::And),
        ("atomic_or", AtomicOp::Or),
        ("atomic_xor", AtomicOp::Xor),
        ("atomic_exchange", AtomicOp::Exchange),
        ("atomic_compare_exchange", AtomicOp::CompareExchange),
    ];

    /// Its operands after the index.
    pub fn operands(self) -> usize {
        match self {
            AtomicOp::Load => 0,
            AtomicOp::CompareExchange => 2,
            _ => 1,
        }
    }
}

/// A buffer parameter: `&[f32]`, `&mut [u32]`, `&[i32]`, ...
#[derive(Debug)]
pub struct Buffer {
    pub name: String,
    pub elem: Ty,
    pub access: Access,
}

/// A scalar parameter: `f32`, `u32` or `i32`.
#[derive(Debug)]
pub struct Scalar {
    pub name: String,
    pub ty: Ty,
}

/// A cube-shared array: `let tile = shared::<f32, 256>();`.
#[derive(Debug)]
pub struct Shared {
    pub name: String,
    pub elem: Ty,
    pub len: u32,
}

/// A local: its unique name in the generated code, its type, whether it may be assigned.
#[derive(Debug)]
pub struct Local {
    pub name: String,
    pub ty: Ty,
    pub mutable: bool,
    /// Whether every unit of a cube holds the same value (see `parse::uniform`).
    pub uniform: bool,
    /// On the CPU, in a kernel with barriers: whether it lives across phases, as one value per
    /// unit in an array.
    pub per_unit_array: bool,
}

pub type LocalId = usize;

/// A built-in value: where the unit or its cube sits in the launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Builtin {
    /// The unit's index in its cube (flattened x-fastest).
    Unit,
    UnitX,
    UnitY,
    UnitZ,
    /// The cube's index in the launch (flattened x-fastest).
    Cube,
    CubeX,
    CubeY,
    CubeZ,
    CubeCountX,
    CubeCountY,
    CubeCountZ,
    /// Units per cube.
    UnitsPerCube,
    /// `cube() * units_per_cube() + unit()`.
    GlobalIndex,
}

impl Builtin {
    /// Whether every unit of a cube sees the same value.
    pub fn uniform(self) -> bool {
        !matches!(
            self,
            Builtin::Unit | Builtin::UnitX | Builtin::UnitY | Builtin::UnitZ | Builtin::GlobalIndex
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnOp {
    /// `-x`: the sign bit flipped (f32), wrapping (i32).
    Neg,
    /// `!x`: logical on bool, bitwise on u32 and i32.
    Not,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    BitAnd,
    BitOr,
    BitXor,
    Shl,
    Shr,
    And,
    Or,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl BinOp {
    /// The operator as Rust, C and WGSL spell it.
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
            BinOp::BitAnd => "&",
            BinOp::BitOr => "|",
            BinOp::BitXor => "^",
            BinOp::Shl => "<<",
            BinOp::Shr => ">>",
            BinOp::And => "&&",
            BinOp::Or => "||",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
        }
    }
}

/// A function of the fixed list (methods in the source: `x.sqrt()`, `a.min(b)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Func {
    /// `f32::abs`: clears the sign bit.
    Abs,
    /// `min`/`max` of f32 (NaN-aware, defined once) or u32.
    Min,
    Max,
    Floor,
    Ceil,
    Trunc,
    Sqrt,
    /// `a.mul_add(b, c)` or `fma(a, b, c)`: fused, one rounding.
    Fma,
    /// `x.to_bits()`: f32 → u32.
    ToBits,
    /// `f32::from_bits(u)`.
    FromBits,
    /// Transcendentals: within a documented tolerance, not bit-equal across backends.
    Exp,
    Ln,
    Sin,
    Cos,
    Tanh,
    Powf,
    /// A subnormal f32 flushed to a zero of its sign, inserted around float operations by
    /// `flush` (never written in a kernel).
    Flush,
    /// `x.native_sin()` and the like: the device's own function, fast and not the same bits on
    /// every backend (the name says so).
    Native(NativeFunc),
}

/// The device's own versions of the functions the subset computes exactly or deterministically.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NativeFunc {
    Sqrt,
    Exp,
    Ln,
    Sin,
    Cos,
    Tanh,
    Powf,
}

#[derive(Clone, Debug)]
pub struct Expr {
    pub kind: ExprKind,
    pub ty: Ty,
}

impl Expr {
    /// The expressions directly inside this one.
    pub fn children(&self) -> Vec<&Expr> {
        match &self.kind {
            ExprKind::Load(_, a)
            | ExprKind::SharedLoad(_, a)
            | ExprKind::Unary(_, a)
            | ExprKind::Cast(a) => vec![a],
            ExprKind::Binary(_, a, b) => vec![a, b],
            ExprKind::Call(_, args) | ExprKind::Atomic(_, _, args) => args.iter().collect(),
            ExprKind::Select(c, a, b) => vec![c, a, b],
            _ => Vec::new(),
        }
    }

    /// Calls `f` on this expression and on every expression inside it, outer first.
    pub fn visit(&self, f: &mut impl FnMut(&Expr)) {
        f(self);
        for child in self.children() {
            child.visit(f);
        }
    }
}

#[derive(Clone, Debug)]
pub enum ExprKind {
    F32(f32),
    U32(u32),
    I32(i32),
    Bool(bool),
    Local(LocalId),
    Scalar(usize),
    /// `buffer[index]`: out of bounds reads 0 in checked launches.
    Load(usize, Box<Expr>),
    /// `buffer.len()`, in elements.
    Len(usize),
    /// `shared[index]`: out of bounds reads 0.
    SharedLoad(usize, Box<Expr>),
    Builtin(Builtin),
    Unary(UnOp, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// `e as f32` / `e as u32` / `e as i32` (from any of the four types but bool to f32).
    Cast(Box<Expr>),
    Call(Func, Vec<Expr>),
    /// `if c { a } else { b }` as a value: both sides are pure, so every target may evaluate
    /// both.
    Select(Box<Expr>, Box<Expr>, Box<Expr>),
    /// `buffer.atomic_<op>(index, operands..)`, its arguments in that order: the one expression
    /// with an effect, so the parser admits it only as a whole statement or the whole value of
    /// a `let` or an assignment to a local (never evaluated twice, or in an order a target
    /// language leaves open).
    Atomic(AtomicOp, usize, Vec<Expr>),
}

#[derive(Debug)]
pub enum Place {
    Local(LocalId),
    /// A store: dropped out of bounds in checked launches. The span is the store's, for the race
    /// check (`race`).
    Buffer(usize, Expr, Span),
    /// A store to a shared array: dropped out of bounds.
    Shared(usize, Expr),
}

#[derive(Debug)]
pub enum Stmt {
    Let(LocalId, Expr),
    Assign(Place, Expr),
    If(Expr, Vec<Stmt>, Vec<Stmt>),
    /// `for local in start..end`: `end` is evaluated once, before the first iteration.
    For {
        local: LocalId,
        start: Expr,
        end: Expr,
        body: Vec<Stmt>,
        /// Whether a barrier sits in the body (the bounds are then uniform).
        barrier: bool,
    },
    While(Expr, Vec<Stmt>),
    Break,
    Continue,
    /// This unit is done with its cube.
    Return,
    /// `sync_cube()`: every unit of the cube reaches it before any goes on.
    Barrier,
    /// An atomic operation (`ExprKind::Atomic`) whose old value is not used.
    Atomic(Expr),
}

/// A whole kernel.
#[derive(Debug)]
pub struct Kernel {
    pub name: String,
    pub cube_dim: [u32; 3],
    pub buffers: Vec<Buffer>,
    pub scalars: Vec<Scalar>,
    pub shared: Vec<Shared>,
    pub locals: Vec<Local>,
    pub body: Vec<Stmt>,
    pub has_barrier: bool,
    /// The names of the module's constants and functions it uses (`#[gpuworld::kernels]`).
    pub uses: Vec<String>,
    /// The span of the function, for errors that have no better place.
    #[allow(dead_code)]
    pub span: Span,
}

impl Kernel {
    pub fn units(&self) -> u32 {
        self.cube_dim.iter().product()
    }
}
