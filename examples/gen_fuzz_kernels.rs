//! Generates random `#[gpuworld::kernel]`s for the differential fuzzer (`tests/kernel_fuzz.rs`),
//! in two families:
//! - `scalar` (the default): each kernel is a few random statements over the subset's f32, u32,
//!   i32 and bool (locals, assignments, `if`/`else`, small `for` and `while` loops, loads at
//!   random indices, some out of bounds) ending in stores to `out_f` and `out_u` (an i32 as its
//!   bits). Only operations the subset defines bit for bit on every backend are used: no
//!   `mul_add`/`fma` (a tolerance on wgpu), and `to_bits` only of a value that is not NaN (a
//!   NaN's sign and payload are the device's).
//! - `rich`: one `#[gpuworld::kernels]` module with a `#[repr(C)] struct Rec`, four random
//!   `#[gpuworld::func]` helpers (each may call the earlier ones) and kernels that add to the
//!   scalar family's statements vectors, struct locals, loads and stores, helper calls, the
//!   exact math (`/`, `sqrt`, `sin cos exp ln tanh powf`) and commutative atomics, each
//!   operation in its own region of the atomic buffer (add and sub share one), so that every
//!   element's final value is deterministic.
//!
//! ```sh
//! cargo run --example gen_fuzz_kernels -- --seed 1 --count 40 > tests/fuzz_kernels/seed_1.rs
//! cargo run --example gen_fuzz_kernels -- --family rich --seed 1 --count 24 \
//!     > tests/fuzz_kernels/rich_1.rs
//! ```
//!
//! The output is a Rust file (no `mod` or `use` of its own) that a test `include!`s inside a
//! module: the kernels and `pub static KERNELS: &[&gpuworld::KernelDef]`. A helper's body uses
//! an operation only where a name is among its operands, so the host (which compiles it as
//! plain Rust) evaluates no constant expression that overflows.

use std::fmt::Write;

/// The operands of every kernel, as the test binds them: buffers, then scalars.
const SIGNATURE: &str =
    "fa: &[f32], ua: &[u32], out_f: &mut [f32], out_u: &mut [u32], s: f32, t: u32";

/// Deepest operator nesting drawn (a leaf is depth 0; a leaf comparison, an index's `% N` and
/// the NaN guard around `to_bits` add one level each).
const MAX_DEPTH: u32 = 4;

/// Deepest statement nesting (`if` and loops) inside the kernel's bounds check.
const MAX_NEST: u32 = 2;

/// A xorshift64* generator: small, seeded, the same sequence on every machine.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x2545_f491_4f6c_dd1d);
        if rng.0 == 0 {
            rng.0 = 1;
        }
        for _ in 0..4 {
            rng.next();
        }
        rng
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A value in `0..n` (`n > 0`).
    fn below(&mut self, n: u32) -> u32 {
        ((self.next() >> 32) % u64::from(n)) as u32
    }

    /// True with probability `num / den`.
    fn chance(&mut self, num: u32, den: u32) -> bool {
        self.below(den) < num
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u32) as usize]
    }
}

/// The subset's value types.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ty {
    F32,
    U32,
    I32,
    Bool,
}

impl Ty {
    fn name(self) -> &'static str {
        match self {
            Ty::F32 => "f32",
            Ty::U32 => "u32",
            Ty::I32 => "i32",
            Ty::Bool => "bool",
        }
    }
}

/// What a local holds: a scalar, a vector of `n` components of its `ty`, or a `Rec`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Scalar,
    Vector(u32),
    Record,
}

/// A local in scope (a loop counter too).
struct Var {
    name: String,
    ty: Ty,
    /// Whether statements may assign it (`let mut`, and not a `while` loop's counter).
    assignable: bool,
    kind: Kind,
}

/// An expression's text and whether it is atomic (a name, a positive literal, a call, a load):
/// anything else is parenthesized where it is an operand or a method's receiver.
struct Text {
    text: String,
    atomic: bool,
}

impl Text {
    fn atom(text: impl Into<String>) -> Text {
        Text {
            text: text.into(),
            atomic: true,
        }
    }

    fn compound(text: impl Into<String>) -> Text {
        Text {
            text: text.into(),
            atomic: false,
        }
    }

    /// The same text, atomic or not as `atomic` says.
    fn atomic_if(self, atomic: bool) -> Text {
        Text { atomic, ..self }
    }

    /// The text as the condition of an `if` or `while`: an `if` value is parenthesized.
    fn condition(&self) -> String {
        if self.text.starts_with("if ") {
            format!("({})", self.text)
        } else {
            self.text.clone()
        }
    }

    /// The text as an operand: parenthesized unless atomic.
    fn operand(&self) -> String {
        if self.atomic {
            self.text.clone()
        } else {
            format!("({})", self.text)
        }
    }

    /// The text as a method's receiver: literals are parenthesized too (`(0.5).abs()`).
    fn receiver(&self) -> String {
        let literal = self.text.starts_with(|c: char| c.is_ascii_digit());
        if self.atomic && !literal {
            self.text.clone()
        } else {
            format!("({})", self.text)
        }
    }
}

/// One kernel's generator: the names in scope and the body written so far.
struct Kernel<'a> {
    rng: &'a mut Rng,
    scopes: Vec<Vec<Var>>,
    next_name: usize,
    out: String,
    /// The `rich` family: `ia`, `ps`, `k`, structs, vectors, atomics, helpers and exact math.
    rich: bool,
    /// The module's `#[gpuworld::func]` helpers the kernel may call.
    helpers: &'a [Helper],
}

impl Kernel<'_> {
    fn line(&mut self, indent: u32, text: &str) {
        for _ in 0..indent {
            self.out.push_str("    ");
        }
        self.out.push_str(text);
        self.out.push('\n');
    }

    fn fresh(&mut self, prefix: &str) -> String {
        let name = format!("{prefix}{}", self.next_name);
        self.next_name += 1;
        name
    }

    fn declare(&mut self, name: &str, ty: Ty, assignable: bool) {
        self.declare_kind(name, ty, assignable, Kind::Scalar);
    }

    fn declare_kind(&mut self, name: &str, ty: Ty, assignable: bool, kind: Kind) {
        self.scopes.last_mut().expect("a scope is open").push(Var {
            name: name.to_string(),
            ty,
            assignable,
            kind,
        });
    }

    /// The names in scope of type `ty` (assignable ones only, if `assignable`).
    fn names(&self, ty: Ty, assignable: bool) -> Vec<String> {
        self.names_of(Kind::Scalar, ty, assignable)
    }

    /// The names in scope of `kind` and component type `ty` (any `ty` for records).
    fn names_of(&self, kind: Kind, ty: Ty, assignable: bool) -> Vec<String> {
        self.scopes
            .iter()
            .flatten()
            .filter(|var| {
                var.kind == kind
                    && (var.ty == ty || kind == Kind::Record)
                    && (var.assignable || !assignable)
            })
            .map(|var| var.name.clone())
            .collect()
    }

    /// The vector locals in scope of component type `ty`: name and length.
    fn vectors(&self, ty: Ty) -> Vec<(String, u32)> {
        self.scopes
            .iter()
            .flatten()
            .filter_map(|var| match var.kind {
                Kind::Vector(n) if var.ty == ty => Some((var.name.clone(), n)),
                _ => None,
            })
            .collect()
    }

    fn f32_literal(&mut self) -> Text {
        const FIXED: &[&str] = &[
            "0.0",
            "-0.0",
            "0.5",
            "1.0",
            "2.0",
            "-1.0",
            "3.0",
            "-3.75",
            "0.1",
            "1.5",
            "100.0",
            "1.0e-3",
            "65536.0",
            "4294967296.0",
            "0.25",
        ];
        if self.rng.chance(1, 4) {
            // A random value of moderate magnitude, written with a `.` (a float literal).
            let mantissa = 1.0 + self.rng.below(1 << 23) as f32 / (1u32 << 23) as f32;
            let exponent = self.rng.below(25) as i32 - 12;
            let value = mantissa * 2f32.powi(exponent);
            let sign = if self.rng.chance(1, 3) { "-" } else { "" };
            let text = format!("{value:?}");
            let text = if text.contains('.') {
                text
            } else {
                text.replacen('e', ".0e", 1)
            };
            return Text::compound(format!("{sign}{text}")).atomic_if(sign.is_empty());
        }
        let text = *self.rng.pick(FIXED);
        Text::compound(text).atomic_if(!text.starts_with('-'))
    }

    fn u32_literal(&mut self) -> Text {
        const FIXED: &[&str] = &[
            "0",
            "1",
            "2",
            "3",
            "5",
            "7",
            "16",
            "31",
            "32",
            "33",
            "255",
            "1000",
            "1999",
            "2000",
            "65535",
            "4294967295",
            "2147483648",
            "2139095040",
            "0xdeadbeef",
        ];
        if self.rng.chance(1, 5) {
            return Text::atom((self.rng.next() >> 32).to_string());
        }
        Text::atom(*self.rng.pick(FIXED))
    }

    /// An i32 literal: negative ones as negated integers (`-7`, `-2147483648`), others with
    /// their suffix (`7i32`), so that no literal is read as a u32.
    fn i32_literal(&mut self) -> Text {
        const FIXED: &[i32] = &[
            0,
            1,
            -1,
            2,
            -3,
            7,
            -8,
            31,
            32,
            1000,
            -1000,
            i32::MAX,
            i32::MIN,
        ];
        let value = if self.rng.chance(1, 4) {
            (self.rng.next() >> 32) as u32 as i32
        } else {
            *self.rng.pick(FIXED)
        };
        if value < 0 {
            Text::compound(format!("-{}", value.unsigned_abs()))
        } else {
            Text::atom(format!("{value}i32"))
        }
    }

    /// A leaf of type `ty`: a name in scope, a literal, a scalar, a built-in id or a load.
    fn leaf(&mut self, ty: Ty) -> Text {
        if self.rich
            && self.rng.chance(1, 3)
            && let Some(leaf) = self.rich_leaf(ty)
        {
            return leaf;
        }
        let names = self.names(ty, false);
        match ty {
            Ty::F32 => match self.rng.below(8) {
                0..=2 if !names.is_empty() => Text::atom(self.rng.pick(&names).clone()),
                3 | 4 => self.load("fa", 0),
                5 => Text::atom("s"),
                _ => self.f32_literal(),
            },
            Ty::U32 => match self.rng.below(10) {
                0..=2 if !names.is_empty() => Text::atom(self.rng.pick(&names).clone()),
                3 => self.load("ua", 0),
                4 => Text::atom("t"),
                5 => Text::atom(*self.rng.pick(&["unit()", "cube()", "global_index()", "i"])),
                6 if self.rng.chance(1, 3) => {
                    Text::atom(*self.rng.pick(&["fa.len()", "ua.len()", "out_f.len()"]))
                }
                _ => self.u32_literal(),
            },
            Ty::I32 => match self.rng.below(8) {
                0..=2 if !names.is_empty() => Text::atom(self.rng.pick(&names).clone()),
                3 => Text::compound(format!("{} as i32", self.load("ua", 0).text)),
                4 => Text::compound(*self.rng.pick(&["t as i32", "i as i32"])),
                _ => self.i32_literal(),
            },
            Ty::Bool => match self.rng.below(4) {
                0 | 1 if !names.is_empty() => Text::atom(self.rng.pick(&names).clone()),
                0 => Text::atom(*self.rng.pick(&["true", "false"])),
                _ => {
                    // A comparison of leaves.
                    let operands = *self
                        .rng
                        .pick(&[Ty::F32, Ty::F32, Ty::U32, Ty::U32, Ty::I32]);
                    let (a, b) = (self.leaf(operands), self.leaf(operands));
                    let op = *self.rng.pick(&["==", "!=", "<", "<=", ">", ">="]);
                    Text::compound(format!("{} {op} {}", a.operand(), b.operand()))
                }
            },
        }
    }

    /// A load `buffer[index]`, its index an expression at most `depth` deep.
    fn load(&mut self, buffer: &str, depth: u32) -> Text {
        let index = self.index(depth);
        Text::atom(format!("{buffer}[{index}]"))
    }

    /// An index: near the buffers' 1000 elements most of the time (some out of bounds, which
    /// read 0), or any u32; a simple one (no nested load) at depth 0.
    fn index(&mut self, depth: u32) -> String {
        let simple = |rng: &mut Rng| match rng.below(6) {
            0 | 1 => "i".to_string(),
            2 => format!(
                "i + {}",
                rng.pick(&["1", "2", "7", "500", "999", "1000", "4096"])
            ),
            3 => format!("(i * {}) % 1024", rng.pick(&["3", "7", "13"])),
            4 => format!("t % {}", rng.pick(&["1000", "1100"])),
            _ => rng.pick(&["0", "999", "1000", "4294967295"]).to_string(),
        };
        if depth == 0 {
            return simple(self.rng);
        }
        match self.rng.below(4) {
            0 => simple(self.rng),
            1 | 2 => {
                let value = self.expr(Ty::U32, depth);
                let modulus = *self.rng.pick(&["1000", "1024", "1100", "2000"]);
                format!("{} % {modulus}", value.operand())
            }
            _ => self.expr(Ty::U32, depth).text,
        }
    }

    /// An f32 that is not NaN, for `to_bits`: `x` where `x == x`, else a literal.
    fn not_nan(&mut self, depth: u32) -> String {
        let value = self.expr(Ty::F32, depth.min(1));
        let other = self.f32_literal();
        let x = value.operand();
        format!("if {x} == {x} {{ {x} }} else {{ {} }}", other.text)
    }

    /// An expression of type `ty` nested at most `depth` deep.
    fn expr(&mut self, ty: Ty, depth: u32) -> Text {
        if depth == 0 || self.rng.chance(1, 4) {
            return self.leaf(ty);
        }
        let d = depth - 1;
        if self.rich
            && self.rng.chance(1, 4)
            && let Some(value) = self.rich_expr(ty, d)
        {
            return value;
        }
        match ty {
            Ty::F32 => match self.rng.below(14) {
                0..=4 => {
                    // No `/` or `sqrt`: WGSL allows them 2.5 ULP, which NVIDIA's Vulkan driver
                    // takes (tests/kernel_macro.rs checks them, exact elsewhere).
                    let op = *self.rng.pick(&["+", "-", "*"]);
                    let (a, b) = (self.expr(Ty::F32, d), self.expr(Ty::F32, d));
                    Text::compound(format!("{} {op} {}", a.operand(), b.operand()))
                }
                5 => {
                    let a = self.expr(Ty::F32, d);
                    Text::compound(format!("-{}", a.operand()))
                }
                6 | 7 => {
                    let method = *self.rng.pick(&["abs", "floor", "ceil", "trunc"]);
                    let a = self.expr(Ty::F32, d);
                    Text::atom(format!("{}.{method}()", a.receiver()))
                }
                8 | 9 => {
                    let method = *self.rng.pick(&["min", "max"]);
                    let (a, b) = (self.expr(Ty::F32, d), self.expr(Ty::F32, d));
                    Text::atom(format!("{}.{method}({})", a.receiver(), b.text))
                }
                10 => {
                    // Bits of a normal, finite float in [2^-63, 2): no subnormal (NVIDIA's
                    // Vulkan driver flushes them), no NaN or infinity.
                    let bits = self.expr(Ty::U32, d);
                    Text::atom(format!(
                        "f32::from_bits(({} & 0xbfffffff) | 0x20000000)",
                        bits.operand()
                    ))
                }
                11 | 12 => {
                    let from = *self.rng.pick(&[Ty::U32, Ty::U32, Ty::I32]);
                    let a = self.expr(from, d);
                    Text::compound(format!("{} as f32", a.operand()))
                }
                13 if self.rng.chance(1, 2) => self.load("fa", d),
                _ => self.select(Ty::F32, d),
            },
            Ty::U32 => match self.rng.below(17) {
                0..=6 => {
                    let op = *self.rng.pick(&[
                        "+", "-", "*", "/", "%", "&", "|", "^", "<<", ">>", "+", "*", "^",
                    ]);
                    let (a, b) = (self.expr(Ty::U32, d), self.expr(Ty::U32, d));
                    Text::compound(format!("{} {op} {}", a.operand(), b.operand()))
                }
                7 => {
                    let a = self.expr(Ty::U32, d);
                    Text::compound(format!("!{}", a.operand()))
                }
                8 => {
                    let method = *self.rng.pick(&["min", "max"]);
                    let (a, b) = (self.expr(Ty::U32, d), self.expr(Ty::U32, d));
                    Text::atom(format!("{}.{method}({})", a.receiver(), b.text))
                }
                9 => Text::atom(format!("({}).to_bits()", self.not_nan(d))),
                10 | 11 => {
                    let a = self.expr(Ty::F32, d);
                    Text::compound(format!("{} as u32", a.operand()))
                }
                12 => {
                    let from = *self.rng.pick(&[Ty::Bool, Ty::I32, Ty::I32]);
                    let a = self.expr(from, d);
                    Text::compound(format!("{} as u32", a.operand()))
                }
                13 => self.load("ua", d),
                _ => self.select(Ty::U32, d),
            },
            Ty::I32 => match self.rng.below(16) {
                0..=5 => {
                    let op = *self
                        .rng
                        .pick(&["+", "-", "*", "/", "%", "&", "|", "^", "+", "-"]);
                    let (a, b) = (self.expr(Ty::I32, d), self.expr(Ty::I32, d));
                    Text::compound(format!("{} {op} {}", a.operand(), b.operand()))
                }
                6 => {
                    // The amount of a shift is a u32 (its low five bits count).
                    let op = *self.rng.pick(&["<<", ">>"]);
                    let (a, b) = (self.expr(Ty::I32, d), self.expr(Ty::U32, d));
                    Text::compound(format!("{} {op} {}", a.operand(), b.operand()))
                }
                7 => {
                    let op = *self.rng.pick(&["-", "!"]);
                    let a = self.expr(Ty::I32, d);
                    Text::compound(format!("{op}{}", a.operand()))
                }
                8 => {
                    let method = *self.rng.pick(&["min", "max"]);
                    let (a, b) = (self.expr(Ty::I32, d), self.expr(Ty::I32, d));
                    Text::atom(format!("{}.{method}({})", a.receiver(), b.text))
                }
                9..=11 => {
                    let from = *self.rng.pick(&[Ty::F32, Ty::U32, Ty::Bool]);
                    let a = self.expr(from, d);
                    Text::compound(format!("{} as i32", a.operand()))
                }
                _ => self.select(Ty::I32, d),
            },
            Ty::Bool => match self.rng.below(8) {
                0..=3 => {
                    let operands = *self.rng.pick(&[Ty::F32, Ty::U32, Ty::U32, Ty::I32]);
                    let op = *self.rng.pick(&["==", "!=", "<", "<=", ">", ">="]);
                    let (a, b) = (self.expr(operands, d), self.expr(operands, d));
                    Text::compound(format!("{} {op} {}", a.operand(), b.operand()))
                }
                4 | 5 => {
                    let op = *self.rng.pick(&["&&", "||", "==", "!="]);
                    let (a, b) = (self.expr(Ty::Bool, d), self.expr(Ty::Bool, d));
                    Text::compound(format!("{} {op} {}", a.operand(), b.operand()))
                }
                6 => {
                    let a = self.expr(Ty::Bool, d);
                    Text::compound(format!("!{}", a.operand()))
                }
                _ => self.select(Ty::Bool, d),
            },
        }
    }

    /// `if c { a } else { b }` as a value.
    fn select(&mut self, ty: Ty, depth: u32) -> Text {
        let cond = self.expr(Ty::Bool, depth);
        let (a, b) = (self.expr(ty, depth), self.expr(ty, depth));
        Text::compound(format!(
            "if {} {{ {} }} else {{ {} }}",
            cond.condition(),
            a.text,
            b.text
        ))
    }

    fn any_ty(&mut self) -> Ty {
        *self
            .rng
            .pick(&[Ty::F32, Ty::F32, Ty::U32, Ty::U32, Ty::I32, Ty::Bool])
    }

    /// `n` random statements at `indent`, `nest` deep in `if`s and loops.
    fn stmts(&mut self, n: u32, indent: u32, nest: u32) {
        for _ in 0..n {
            self.stmt(indent, nest);
        }
    }

    fn block(&mut self, n: u32, indent: u32, nest: u32) {
        self.scopes.push(Vec::new());
        self.stmts(n, indent, nest);
        self.scopes.pop();
    }

    fn stmt(&mut self, indent: u32, nest: u32) {
        let nested = nest < MAX_NEST;
        if self.rich && self.rng.chance(2, 5) {
            return self.rich_stmt(indent);
        }
        match self.rng.below(20) {
            0..=6 => {
                let ty = self.any_ty();
                let mutable = self.rng.chance(1, 2);
                let name = self.fresh(match ty {
                    Ty::F32 => "x",
                    Ty::U32 => "n",
                    Ty::I32 => "k",
                    Ty::Bool => "c",
                });
                let value = self.expr(ty, MAX_DEPTH);
                let annotate = self.rng.chance(1, 3);
                let line = format!(
                    "let {}{name}{} = {};",
                    if mutable { "mut " } else { "" },
                    if annotate {
                        format!(": {}", ty.name())
                    } else {
                        String::new()
                    },
                    value.text
                );
                self.line(indent, &line);
                self.declare(&name, ty, mutable);
            }
            7..=10 => {
                let ty = self.any_ty();
                let targets = self.names(ty, true);
                if targets.is_empty() {
                    return self.stmt(indent, nest);
                }
                let target = self.rng.pick(&targets).clone();
                let op = match ty {
                    Ty::Bool => "=",
                    Ty::F32 => *self.rng.pick(&["=", "=", "+=", "-=", "*="]),
                    Ty::U32 => *self.rng.pick(&[
                        "=", "=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>=",
                    ]),
                    Ty::I32 => *self.rng.pick(&[
                        "=", "=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>=",
                    ]),
                };
                // An i32 shifts by a u32.
                let operand = if ty == Ty::I32 && op.starts_with(['<', '>']) {
                    Ty::U32
                } else {
                    ty
                };
                let value = self.expr(operand, MAX_DEPTH - 1);
                self.line(indent, &format!("{target} {op} {};", value.text));
            }
            11 | 12 if nested => {
                let cond = self.expr(Ty::Bool, 3);
                self.line(indent, &format!("if {} {{", cond.condition()));
                let n = 1 + self.rng.below(3);
                self.block(n, indent + 1, nest + 1);
                if self.rng.chance(1, 2) {
                    self.line(indent, "} else {");
                    let n = 1 + self.rng.below(3);
                    self.block(n, indent + 1, nest + 1);
                }
                self.line(indent, "}");
            }
            13 if nested => {
                let counter = self.fresh("j");
                let end = 1 + self.rng.below(4);
                let start = if self.rng.chance(1, 4) { 1 } else { 0 };
                self.line(indent, &format!("for {counter} in {start}..{end} {{"));
                self.scopes.push(Vec::new());
                self.declare(&counter, Ty::U32, false);
                let n = 1 + self.rng.below(3);
                self.stmts(n, indent + 1, nest + 1);
                if self.rng.chance(1, 5) {
                    let cond = self.expr(Ty::Bool, 2);
                    let exit = *self.rng.pick(&["break", "continue"]);
                    self.line(indent + 1, &format!("if {} {{", cond.condition()));
                    self.line(indent + 2, &format!("{exit};"));
                    self.line(indent + 1, "}");
                }
                self.scopes.pop();
                self.line(indent, "}");
            }
            14 if nested => {
                let counter = self.fresh("w");
                let end = 1 + self.rng.below(4);
                self.line(indent, &format!("let mut {counter} = 0;"));
                // The counter is readable in the body but only its own increment assigns it.
                self.declare(&counter, Ty::U32, false);
                self.line(indent, &format!("while {counter} < {end} {{"));
                let n = 1 + self.rng.below(3);
                self.block(n, indent + 1, nest + 1);
                self.line(indent + 1, &format!("{counter} += 1;"));
                self.line(indent, "}");
            }
            15 => {
                // A store to this unit's own slot (a later store may overwrite it), or one past
                // the end (dropped).
                let (buffer, ty) =
                    *self
                        .rng
                        .pick(&[("out_f", Ty::F32), ("out_u", Ty::U32), ("out_u", Ty::I32)]);
                let slot = *self.rng.pick(&["i * 2", "i * 2 + 1", "i * 2 + 4001"]);
                let value = self.expr(ty, 3);
                let value = match ty {
                    Ty::I32 => format!("{} as u32", value.operand()),
                    _ => value.text,
                };
                self.line(indent, &format!("{buffer}[{slot}] = {value};"));
            }
            _ => {
                // Another local, the most common statement.
                let ty = self.any_ty();
                let name = self.fresh("y");
                let value = self.expr(ty, MAX_DEPTH);
                self.line(indent, &format!("let mut {name} = {};", value.text));
                self.declare(&name, ty, true);
            }
        }
    }
}

/// The fields of the rich family's `Rec`, in order, with their types.
const FIELDS: [(&str, Ty); 4] = [
    ("a", Ty::F32),
    ("b", Ty::U32),
    ("c", Ty::I32),
    ("d", Ty::F32),
];

/// The operands of every kernel of the rich family: buffers, then scalars.
const RICH_SIGNATURE: &str = "fa: &[f32], ua: &[u32], ia: &[i32], ps: &[Rec], out_f: &mut [f32], \
     out_u: &mut [u32], out_p: &mut [Rec], #[atomic] acc: &mut [u32], #[atomic] iacc: &mut [i32], \
     s: f32, t: u32, k: i32";

/// The commutative atomic operations and the region of 64 elements each changes (add and sub
/// share one: together they commute), so that every element's final value is deterministic.
const ATOMICS: [(&str, u32); 7] = [
    ("atomic_add", 0),
    ("atomic_sub", 0),
    ("atomic_min", 1),
    ("atomic_max", 2),
    ("atomic_and", 3),
    ("atomic_or", 4),
    ("atomic_xor", 5),
];

/// A `#[gpuworld::func]` helper of the rich family's module.
struct Helper {
    name: String,
    params: Vec<Ty>,
    returns: Ty,
}

impl Kernel<'_> {
    /// A leaf only the rich family has: a field of a record, a vector's component, an `ia` load
    /// or `k`; `None` where there is none of `ty`.
    fn rich_leaf(&mut self, ty: Ty) -> Option<Text> {
        match self.rng.below(4) {
            0 if ty != Ty::Bool => {
                let fields: Vec<&str> = FIELDS
                    .iter()
                    .filter(|(_, field)| *field == ty)
                    .map(|(name, _)| *name)
                    .collect();
                let field = *self.rng.pick(&fields);
                let records = self.names_of(Kind::Record, ty, false);
                if !records.is_empty() && self.rng.chance(1, 2) {
                    let record = self.rng.pick(&records).clone();
                    Some(Text::atom(format!("{record}.{field}")))
                } else {
                    let index = self.index(0);
                    Some(Text::atom(format!("ps[{index}].{field}")))
                }
            }
            1 => {
                let vectors = self.vectors(ty);
                if vectors.is_empty() {
                    return None;
                }
                let (name, n) = self.rng.pick(&vectors).clone();
                let component = ["x", "y", "z", "w"][self.rng.below(n) as usize];
                Some(Text::atom(format!("{name}.{component}")))
            }
            2 if ty == Ty::I32 => Some(if self.rng.chance(1, 3) {
                Text::atom("k")
            } else {
                self.load("ia", 0)
            }),
            2 if ty == Ty::U32 => Some(Text::atom("ps.len()")),
            _ => None,
        }
    }

    /// An expression only the rich family has: exact math, a helper's call, `dot`, `length`.
    fn rich_expr(&mut self, ty: Ty, d: u32) -> Option<Text> {
        let helpers: Vec<usize> = (0..self.helpers.len())
            .filter(|&h| self.helpers[h].returns == ty)
            .collect();
        match self.rng.below(6) {
            0 | 1 if !helpers.is_empty() => {
                let h = *self.rng.pick(&helpers);
                let params = self.helpers[h].params.clone();
                let args: Vec<String> = params
                    .into_iter()
                    .map(|param| self.expr(param, d.min(2)).text)
                    .collect();
                Some(Text::atom(format!(
                    "{}({})",
                    self.helpers[h].name,
                    args.join(", ")
                )))
            }
            2 if ty != Ty::Bool => {
                let n = 2 + self.rng.below(3);
                let (a, b) = (self.vexpr(ty, n, d.min(2)), self.vexpr(ty, n, d.min(2)));
                Some(Text::atom(format!("dot({}, {})", a.text, b.text)))
            }
            3 if ty == Ty::F32 => {
                let n = 2 + self.rng.below(3);
                let a = self.vexpr(ty, n, d.min(2));
                Some(Text::atom(format!("length({})", a.text)))
            }
            4 | 5 if ty == Ty::F32 => {
                // The exact math: correctly rounded `/` and `sqrt`, deterministic
                // transcendentals.
                let a = self.expr(Ty::F32, d);
                Some(match self.rng.below(8) {
                    0 | 1 => {
                        let b = self.expr(Ty::F32, d);
                        Text::compound(format!("{} / {}", a.operand(), b.operand()))
                    }
                    2 => {
                        let b = self.expr(Ty::F32, d.min(1));
                        Text::atom(format!("{}.powf({})", a.receiver(), b.text))
                    }
                    _ => {
                        let method = *self.rng.pick(&["sqrt", "sin", "cos", "exp", "ln", "tanh"]);
                        Text::atom(format!("{}.{method}()", a.receiver()))
                    }
                })
            }
            _ => None,
        }
    }

    /// A vector of `n` components of `ty`, nested at most `depth` deep.
    fn vexpr(&mut self, ty: Ty, n: u32, depth: u32) -> Text {
        let locals: Vec<String> = self
            .vectors(ty)
            .into_iter()
            .filter(|(_, m)| *m == n)
            .map(|(name, _)| name)
            .collect();
        if !locals.is_empty() && (depth == 0 || self.rng.chance(1, 3)) {
            return Text::atom(self.rng.pick(&locals).clone());
        }
        if depth == 0 {
            return self.vector_literal(ty, n, 0);
        }
        let d = depth - 1;
        match self.rng.below(9) {
            0 | 1 => self.vector_literal(ty, n, d),
            2..=4 => {
                let op = *self.rng.pick(&["+", "-", "*"]);
                let (a, b) = (self.vexpr(ty, n, d), self.vexpr(ty, n, d));
                Text::compound(format!("{} {op} {}", a.operand(), b.operand()))
            }
            5 => {
                let (a, b) = (self.vexpr(ty, n, d), self.expr(ty, d.min(1)));
                Text::compound(format!("{} * {}", a.operand(), b.operand()))
            }
            6 if ty != Ty::U32 => {
                let a = self.vexpr(ty, n, d);
                Text::compound(format!("-{}", a.operand()))
            }
            7 if ty == Ty::F32 => {
                let a = self.vexpr(ty, n, d);
                Text::atom(format!("normalize({})", a.text))
            }
            _ => {
                let cond = self.expr(Ty::Bool, d.min(1));
                let (a, b) = (self.vexpr(ty, n, d), self.vexpr(ty, n, d));
                Text::compound(format!(
                    "if {} {{ {} }} else {{ {} }}",
                    cond.condition(),
                    a.text,
                    b.text
                ))
            }
        }
    }

    /// `vecN(..)` of `ty` components.
    fn vector_literal(&mut self, ty: Ty, n: u32, depth: u32) -> Text {
        let comps: Vec<String> = (0..n).map(|_| self.expr(ty, depth).text).collect();
        Text::atom(format!("vec{n}({})", comps.join(", ")))
    }

    /// A `Rec { .. }` literal.
    fn record_literal(&mut self) -> String {
        let fields: Vec<String> = FIELDS
            .iter()
            .map(|(name, ty)| format!("{name}: {}", self.expr(*ty, 2).text))
            .collect();
        format!("Rec {{ {} }}", fields.join(", "))
    }

    /// A statement only the rich family has: vectors, records, stores of records, atomics.
    fn rich_stmt(&mut self, indent: u32) {
        let ty = *self.rng.pick(&[Ty::F32, Ty::F32, Ty::U32, Ty::I32]);
        match self.rng.below(10) {
            0 | 1 => {
                let n = 2 + self.rng.below(3);
                let mutable = self.rng.chance(1, 2);
                let name = self.fresh("v");
                let value = self.vexpr(ty, n, 2);
                let line = format!(
                    "let {}{name} = {};",
                    if mutable { "mut " } else { "" },
                    value.text
                );
                self.line(indent, &line);
                self.declare_kind(&name, ty, mutable, Kind::Vector(n));
            }
            2 => {
                let assignable: Vec<(String, u32)> = self
                    .scopes
                    .iter()
                    .flatten()
                    .filter_map(|var| match var.kind {
                        Kind::Vector(n) if var.ty == ty && var.assignable => {
                            Some((var.name.clone(), n))
                        }
                        _ => None,
                    })
                    .collect();
                if assignable.is_empty() {
                    return self.rich_stmt(indent);
                }
                let (name, n) = self.rng.pick(&assignable).clone();
                if self.rng.chance(1, 2) {
                    let component = ["x", "y", "z", "w"][self.rng.below(n) as usize];
                    let op = *self.rng.pick(&["=", "+=", "*="]);
                    let value = self.expr(ty, 2);
                    self.line(indent, &format!("{name}.{component} {op} {};", value.text));
                } else {
                    let op = *self.rng.pick(&["=", "+=", "-="]);
                    let value = self.vexpr(ty, n, 2);
                    self.line(indent, &format!("{name} {op} {};", value.text));
                }
            }
            3 => {
                let name = self.fresh("r");
                let mutable = self.rng.chance(1, 2);
                let value = if self.rng.chance(1, 2) {
                    format!("ps[{}]", self.index(1))
                } else {
                    self.record_literal()
                };
                let line = format!("let {}{name} = {value};", if mutable { "mut " } else { "" });
                self.line(indent, &line);
                self.declare_kind(&name, Ty::F32, mutable, Kind::Record);
            }
            4 => {
                let records = self.names_of(Kind::Record, ty, true);
                if records.is_empty() {
                    return self.rich_stmt(indent);
                }
                let record = self.rng.pick(&records).clone();
                let (field, ty) = *self.rng.pick(&FIELDS);
                let op = *self.rng.pick(&["=", "+=", "-="]);
                let value = self.expr(ty, 2);
                self.line(indent, &format!("{record}.{field} {op} {};", value.text));
            }
            5 | 6 => {
                // A store to this unit's own record (or one past the end, dropped).
                let slot = *self.rng.pick(&["i", "i", "i + 1000"]);
                let records = self.names_of(Kind::Record, ty, false);
                match self.rng.below(4) {
                    0 if !records.is_empty() => {
                        let record = self.rng.pick(&records).clone();
                        self.line(indent, &format!("out_p[{slot}] = {record};"));
                    }
                    1 => {
                        let value = self.record_literal();
                        self.line(indent, &format!("out_p[{slot}] = {value};"));
                    }
                    _ => {
                        let (field, ty) = *self.rng.pick(&FIELDS);
                        let op = *self.rng.pick(&["=", "+="]);
                        let value = self.expr(ty, 2);
                        self.line(
                            indent,
                            &format!("out_p[{slot}].{field} {op} {};", value.text),
                        );
                    }
                }
            }
            _ => self.atomic(indent),
        }
    }

    /// A commutative atomic operation on `acc` or `iacc`, in its operation's region.
    fn atomic(&mut self, indent: u32) {
        let (op, region) = *self.rng.pick(&ATOMICS);
        let (buffer, ty) = *self.rng.pick(&[("acc", Ty::U32), ("iacc", Ty::I32)]);
        let index = self.expr(Ty::U32, 2);
        let value = self.expr(ty, 2);
        self.line(
            indent,
            &format!(
                "{buffer}.{op}({} + {} % 64, {});",
                region * 64,
                index.operand(),
                value.text
            ),
        );
    }
}

/// A helper's body: an expression of `ty` over `names` (name, type), at most `depth` deep, in
/// which every operation has a name among its operands (so the host compiles no constant
/// expression that overflows).
fn helper_expr(
    rng: &mut Rng,
    names: &[(String, Ty)],
    helpers: &[Helper],
    ty: Ty,
    depth: u32,
) -> String {
    let leaf = |rng: &mut Rng| {
        let of: Vec<&String> = names
            .iter()
            .filter(|(_, t)| *t == ty)
            .map(|(n, _)| n)
            .collect();
        if !of.is_empty() && rng.chance(3, 4) {
            return rng.pick(&of).to_string();
        }
        let (name, _) = rng.pick(names);
        format!("({name} as {})", ty.name())
    };
    if depth == 0 || rng.chance(1, 4) {
        return leaf(rng);
    }
    let d = depth - 1;
    let sub = |rng: &mut Rng| helper_expr(rng, names, helpers, ty, d);
    let callable: Vec<&Helper> = helpers.iter().filter(|h| h.returns == ty).collect();
    if !callable.is_empty() && rng.chance(1, 6) {
        let helper = *rng.pick(&callable);
        let args: Vec<String> = helper
            .params
            .iter()
            .map(|param| helper_expr(rng, names, helpers, *param, d.min(1)))
            .collect();
        return format!("{}({})", helper.name, args.join(", "));
    }
    match ty {
        Ty::F32 => match rng.below(7) {
            0 | 1 => {
                let op = *rng.pick(&["+", "-", "*", "/"]);
                format!("({} {op} {})", sub(rng), sub(rng))
            }
            2 => {
                let literal = *rng.pick(&["0.5", "1.5", "-2.25", "3.0", "1.0e-3"]);
                let op = *rng.pick(&["+", "*"]);
                format!("({} {op} {literal})", sub(rng))
            }
            3 => {
                let method =
                    *rng.pick(&["abs", "floor", "sqrt", "sin", "cos", "exp", "ln", "tanh"]);
                format!("{}.{method}()", sub(rng))
            }
            4 => {
                let method = *rng.pick(&["min", "max", "powf"]);
                format!("{}.{method}({})", sub(rng), sub(rng))
            }
            5 => format!("(-{})", sub(rng)),
            _ => format!(
                "(if {} < {} {{ {} }} else {{ {} }})",
                sub(rng),
                sub(rng),
                sub(rng),
                sub(rng)
            ),
        },
        Ty::U32 | Ty::I32 => match rng.below(5) {
            0..=2 => {
                let op = *rng.pick(&["+", "-", "*", "^", "&", "|", "/", "%"]);
                format!("({} {op} {})", sub(rng), sub(rng))
            }
            3 => {
                let method = *rng.pick(&["min", "max"]);
                format!("{}.{method}({})", sub(rng), sub(rng))
            }
            _ => format!(
                "(if {} < {} {{ {} }} else {{ {} }})",
                sub(rng),
                sub(rng),
                sub(rng),
                sub(rng)
            ),
        },
        Ty::Bool => leaf(rng),
    }
}

/// The source of kernel `k` of `seed`: of the scalar family, or of the rich one (`helpers` in
/// its module).
fn kernel(rng: &mut Rng, seed: u64, k: u32, rich: Option<&[Helper]>) -> String {
    let cube_dim = *rng.pick(&[32, 64, 128, 256]);
    let mut kernel = Kernel {
        rich: rich.is_some(),
        helpers: rich.unwrap_or(&[]),
        rng,
        // `i`, the unit's index; the scalars `s` and `t` are leaves of their own.
        scopes: vec![vec![Var {
            name: "i".into(),
            ty: Ty::U32,
            assignable: false,
            kind: Kind::Scalar,
        }]],
        next_name: 0,
        out: String::new(),
    };
    let n = 3 + kernel.rng.below(6);
    kernel.stmts(n, 2, 0);
    // The final stores: each output's first slot always, its second most of the time (else the
    // initial pattern, or an earlier store, shows through).
    for (buffer, ty) in [("out_f", Ty::F32), ("out_u", Ty::U32)] {
        for slot in ["i * 2", "i * 2 + 1"] {
            if slot == "i * 2" || kernel.rng.chance(3, 4) {
                // Half of `out_u`'s second slots hold an i32's bits.
                let value = if ty == Ty::U32 && slot != "i * 2" && kernel.rng.chance(1, 2) {
                    let value = kernel.expr(Ty::I32, MAX_DEPTH);
                    format!("{} as u32", value.operand())
                } else {
                    kernel.expr(ty, MAX_DEPTH).text
                };
                kernel.line(2, &format!("{buffer}[{slot}] = {value};"));
            }
        }
    }
    if kernel.rich {
        // The unit's record and one atomic operation always, so every output is reached.
        let value = kernel.record_literal();
        kernel.line(2, &format!("out_p[i] = {value};"));
        kernel.atomic(2);
        let body = kernel.out;
        return format!(
            "    /// Generated kernel {k} of rich seed {seed}.\n    \
             #[gpuworld::kernel(cube_dim = {cube_dim})]\n    \
             pub fn fuzz_rich_{seed}_{k}({RICH_SIGNATURE}) {{\n        \
                 let i = global_index();\n        \
                 if i < out_f.len() {{\n\
             {}        }}\n    \
             }}\n",
            indent_lines(&body)
        );
    }
    let body = kernel.out;
    format!(
        "/// Generated kernel {k} of seed {seed}.\n\
         #[gpuworld::kernel(cube_dim = {cube_dim})]\n\
         fn fuzz_{seed}_{k}({SIGNATURE}) {{\n    \
             let i = global_index();\n    \
             if i < out_f.len() {{\n\
         {body}    }}\n\
         }}\n"
    )
}

/// `text` with each line indented one more level (the rich family's kernels are in a module).
fn indent_lines(text: &str) -> String {
    text.lines().map(|line| format!("    {line}\n")).collect()
}

/// The helpers of a rich module: their signatures and their source.
fn helpers(rng: &mut Rng) -> (Vec<Helper>, String) {
    let mut helpers: Vec<Helper> = Vec::new();
    let mut out = String::new();
    for h in 0..4 {
        let returns = *rng.pick(&[Ty::F32, Ty::F32, Ty::U32, Ty::I32]);
        let count = 1 + rng.below(3);
        let params: Vec<Ty> = (0..count)
            .map(|_| *rng.pick(&[Ty::F32, Ty::U32, Ty::I32]))
            .collect();
        let mut names: Vec<(String, Ty)> = params
            .iter()
            .enumerate()
            .map(|(p, ty)| (format!("p{p}"), *ty))
            .collect();
        let mut body = String::new();
        for l in 0..rng.below(3) {
            let ty = *rng.pick(&[Ty::F32, Ty::U32, Ty::I32]);
            let value = helper_expr(rng, &names, &helpers, ty, 2);
            let _ = writeln!(body, "        let l{l}: {} = {value};", ty.name());
            names.push((format!("l{l}"), ty));
        }
        let value = helper_expr(rng, &names, &helpers, returns, 3);
        let list: Vec<String> = params
            .iter()
            .enumerate()
            .map(|(p, ty)| format!("p{p}: {}", ty.name()))
            .collect();
        let _ = write!(
            out,
            "    /// Generated helper {h}.\n    #[gpuworld::func]\n    pub fn h{h}({}) -> {} {{\n{body}        {value}\n    }}\n\n",
            list.join(", "),
            returns.name()
        );
        helpers.push(Helper {
            name: format!("h{h}"),
            params,
            returns,
        });
    }
    (helpers, out)
}

/// The rich family's file for `seed`: a `#[gpuworld::kernels]` module with `Rec`, helpers and
/// `count` kernels, and `KERNELS`.
fn rich_file(seed: u64, count: u32) -> String {
    let mut rng = Rng::new(seed ^ 0x7269_6368);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "// Generated by `cargo run --example gen_fuzz_kernels -- --family rich --seed {seed} \
         --count {count}`: do not edit.\n// Random kernels over the `#[gpuworld::kernel]` subset's \
         structs, vectors, i32, atomics, helpers and exact math for tests/kernel_fuzz.rs.\n"
    );
    let (helpers, source) = helpers(&mut rng);
    let _ = writeln!(
        out,
        "/// The kernels of rich seed {seed}, their record and helpers.\n\
         #[gpuworld::kernels]\n\
         #[allow(dead_code, unused_parens, unused_variables, clippy::all)]\n\
         pub mod rich_{seed} {{\n    \
             /// A record of every scalar type.\n    \
             #[repr(C)]\n    \
             #[derive(Clone, Copy)]\n    \
             pub struct Rec {{\n        pub a: f32,\n        pub b: u32,\n        pub c: i32,\n        pub d: f32,\n    }}\n"
    );
    out.push_str(&source);
    for k in 0..count {
        out.push_str(&kernel(&mut rng, seed, k, Some(&helpers)));
        out.push('\n');
    }
    out.push_str("}\n\n");
    let _ = writeln!(out, "/// Every kernel of this file, in order.");
    let _ = writeln!(out, "pub static KERNELS: &[&gpuworld::KernelDef] = &[");
    for k in 0..count {
        let _ = writeln!(out, "    &rich_{seed}::fuzz_rich_{seed}_{k},");
    }
    out.push_str("];\n");
    out
}

/// The whole file for `seed`: `count` kernels and `KERNELS`.
fn file(seed: u64, count: u32) -> String {
    let mut rng = Rng::new(seed);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "// Generated by `cargo run --example gen_fuzz_kernels -- --seed {seed} --count {count}`: \
         do not edit.\n// Random kernels over the `#[gpuworld::kernel]` subset for \
         tests/kernel_fuzz.rs.\n"
    );
    for k in 0..count {
        out.push_str(&kernel(&mut rng, seed, k, None));
        out.push('\n');
    }
    let _ = writeln!(out, "/// Every kernel of this file, in order.");
    let _ = writeln!(out, "pub static KERNELS: &[&gpuworld::KernelDef] = &[");
    for k in 0..count {
        let _ = writeln!(out, "    &fuzz_{seed}_{k},");
    }
    out.push_str("];\n");
    out
}

fn usage() -> ! {
    eprintln!(
        "usage: gen_fuzz_kernels [--family scalar|rich] --seed S --count N  (prints the Rust \
         file to stdout)"
    );
    std::process::exit(2);
}

fn main() {
    let mut seed = None;
    let mut count = None;
    let mut rich = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next().unwrap_or_else(|| usage());
        match arg.as_str() {
            "--seed" => seed = Some(value.parse::<u64>().unwrap_or_else(|_| usage())),
            "--count" => count = Some(value.parse::<u32>().unwrap_or_else(|_| usage())),
            "--family" => {
                rich = match value.as_str() {
                    "scalar" => false,
                    "rich" => true,
                    _ => usage(),
                }
            }
            _ => usage(),
        }
    }
    let (Some(seed), Some(count)) = (seed, count) else {
        usage()
    };
    if rich {
        print!("{}", rich_file(seed, count));
    } else {
        print!("{}", file(seed, count));
    }
}
