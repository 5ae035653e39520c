//! WGSL sources: the source type a kernel lists for this backend, and the module the backend
//! compiles from it — the declarations of the kernel's signature (binding convention on
//! `gpuworld_hal::kernel::KernelDef`), then the source — with its `@workgroup_size` checked
//! against the signature's cube dim.

use crate::WgpuBackend;
use gpuworld_hal::backend::{Kernels, Region};
use gpuworld_hal::kernel::{Access, Elem, KernelDef, Param};
use std::fmt::Write;

pub use gpuworld_hal::kernel::WgslSource;

/// Bytes of the uniform holding `scalars` 32-bit words, padded to 16.
pub(crate) fn uniform_size(scalars: usize) -> u64 {
    (scalars as u64 * 4).div_ceil(16) * 16
}

fn wgsl_type(elem: Elem) -> &'static str {
    match elem {
        Elem::F32 => "f32",
        Elem::U32 => "u32",
        Elem::I32 => "i32",
    }
}

/// A buffer's element type in WGSL: `atomic<..>` for an atomic binding.
fn element_type(param: &Param) -> String {
    match param.access {
        Access::Atomic => format!("atomic<{}>", wgsl_type(param.elem)),
        _ => wgsl_type(param.elem).to_string(),
    }
}

/// WGSL's access mode for a buffer of `access` (WGSL storage has no write-only mode).
pub(crate) fn storage_access(access: Access) -> &'static str {
    match access {
        Access::Read => "read",
        Access::Write | Access::ReadWrite | Access::Atomic => "read_write",
    }
}

/// How a module declares its buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Declared {
    /// As the signature says: read-only buffers `read`.
    AsSigned,
    /// Every buffer `read_write`: for a launch that binds one buffer both read-only and written,
    /// which wgpu refuses in one dispatch (a buffer's read-only and writable storage uses
    /// conflict) and accepts as two writable bindings. The source is the same, and was checked
    /// against the signed declarations, so it stores to no read-only buffer.
    AllWritable,
}

impl Declared {
    /// The declarations a launch of `kernel` over `regions` needs: all writable when one buffer
    /// is bound both read-only and written.
    pub(crate) fn for_launch(kernel: &KernelDef, regions: &[Region]) -> Declared {
        let params = kernel.signature.buffers;
        let writes = |i: usize| params.get(i).is_none_or(|p| p.access.writes());
        let read_and_written = regions.iter().enumerate().any(|(i, read)| {
            !writes(i)
                && (regions.iter().enumerate())
                    .any(|(j, written)| writes(j) && written.storage == read.storage)
        });
        if read_and_written {
            Declared::AllWritable
        } else {
            Declared::AsSigned
        }
    }

    /// WGSL's access mode for a buffer of `access`.
    pub(crate) fn access(self, access: Access) -> &'static str {
        match self {
            Declared::AsSigned => storage_access(access),
            Declared::AllWritable => "read_write",
        }
    }
}

/// The declarations of `kernel`'s bindings: the scalars' struct (padded to the uniform's size),
/// one storage buffer per buffer binding, and the scalars' uniform after them.
pub(crate) fn declarations(kernel: &KernelDef) -> String {
    declarations_as(kernel, Declared::AsSigned)
}

/// [`declarations`], the buffers declared as `declared` says.
pub(crate) fn declarations_as(kernel: &KernelDef, declared: Declared) -> String {
    let signature = &kernel.signature;
    let mut text = String::new();
    if !signature.scalars.is_empty() {
        let words = (uniform_size(signature.scalars.len()) / 4) as usize;
        let mut fields: Vec<String> = signature
            .scalars
            .iter()
            .map(|scalar| format!("{}: {}", scalar.name, wgsl_type(scalar.elem)))
            .collect();
        fields.extend((0..words - signature.scalars.len()).map(|pad| format!("_pad{pad}: u32")));
        let _ = writeln!(text, "struct Scalars {{ {} }}\n", fields.join(", "));
    }
    for (binding, buffer) in signature.buffers.iter().enumerate() {
        let _ = writeln!(
            text,
            "@group(0) @binding({binding}) var<storage, {}> {}: array<{}>;",
            declared.access(buffer.access),
            buffer.name,
            element_type(buffer)
        );
    }
    if !signature.scalars.is_empty() {
        let _ = writeln!(
            text,
            "@group(0) @binding({}) var<uniform> scalars: Scalars;",
            signature.buffers.len()
        );
    }
    text
}

/// The WGSL module the backend compiles for `kernel`: the declarations of its bindings, then its
/// source; `None` when the backend has no WGSL for it.
pub fn wgsl_text(kernel: &KernelDef) -> Option<String> {
    wgsl_text_as(kernel, Declared::AsSigned)
}

/// [`wgsl_text`], the buffers declared as `declared` says.
pub(crate) fn wgsl_text_as(kernel: &KernelDef, declared: Declared) -> Option<String> {
    WgpuBackend::source_for(kernel).map(|source| module_text(kernel, source, declared))
}

/// The module the backend compiles for `kernel` from `source`: its declarations (the buffers
/// declared as `declared` says), then `source`.
fn module_text(kernel: &KernelDef, source: &WgslSource, declared: Declared) -> String {
    let declarations = declarations_as(kernel, declared);
    if declarations.is_empty() {
        return source.0.to_string();
    }
    format!("{declarations}\n{}", source.0)
}

/// Lines the generated prelude adds before the source in [`module_text`].
fn prelude_lines(kernel: &KernelDef) -> u32 {
    let declarations = declarations(kernel);
    match declarations.matches('\n').count() {
        0 => 0,
        lines => lines as u32 + 1,
    }
}

/// Parses and validates the module `text` of `kernel` with naga, as wgpu will; an error is
/// reported in the coordinates of the kernel's own source (an error in the generated prelude is
/// named as such), with the declared bindings listed.
pub(crate) fn check_source(kernel: &KernelDef, text: &str) -> Result<(), String> {
    let (message, location, labels) = match naga::front::wgsl::parse_str(text) {
        Err(error) => (
            error.message().to_string(),
            error.location(text),
            error
                .labels()
                .skip(1)
                .map(|(span, label)| (span.location(text), label.to_string()))
                .collect(),
        ),
        Ok(module) => {
            // Every capability: what the device lacks is wgpu's to report, not a source error.
            let mut validator = naga::valid::Validator::new(
                naga::valid::ValidationFlags::all(),
                naga::valid::Capabilities::all(),
            );
            match validator.validate(&module) {
                Ok(_) => return check_workgroup_size(kernel, &module),
                Err(error) => (
                    full_message(error.as_inner()),
                    error.location(text),
                    Vec::new(),
                ),
            }
        }
    };
    let prelude = prelude_lines(kernel);
    let mut log = format!(
        "kernel `{}`: WGSL error {}: {message}",
        kernel.name,
        where_in(location, prelude)
    );
    if let Some(at) = location.filter(|at| at.line_number > prelude) {
        let line = text.lines().nth(at.line_number as usize - 1).unwrap_or("");
        let _ = write!(log, "\n  {} | {line}", at.line_number - prelude);
    }
    for (at, label) in labels {
        let _ = write!(log, "\n  {label} ({})", where_in(Some(at), prelude));
    }
    let _ = write!(
        log,
        "\nThe source follows a generated prelude of {prelude} lines \
         (gpuworld::kernel_source_text shows it) declaring: {}",
        declared(kernel)
    );
    Err(log)
}

/// `location` in the kernel's own source, or in the generated prelude before it.
fn where_in(location: Option<naga::SourceLocation>, prelude: u32) -> String {
    match location {
        Some(at) if at.line_number > prelude => format!(
            "at line {}, column {} of its source",
            at.line_number - prelude,
            at.line_position
        ),
        Some(at) => format!(
            "at line {} of the generated prelude (the declarations from the signature)",
            at.line_number
        ),
        None => "in its module".to_string(),
    }
}

/// An error and its sources, joined.
fn full_message(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let _ = write!(message, ": {cause}");
        source = cause.source();
    }
    message
}

/// The bindings a source may name: each buffer with its type and access, each `scalars.*` field.
fn declared(kernel: &KernelDef) -> String {
    let signature = &kernel.signature;
    let buffers = signature.buffers.iter().map(|buffer| {
        format!(
            "{}: array<{}> ({})",
            buffer.name,
            element_type(buffer),
            storage_access(buffer.access)
        )
    });
    let scalars = (signature.scalars.iter())
        .map(|scalar| format!("scalars.{}: {}", scalar.name, wgsl_type(scalar.elem)));
    let all: Vec<String> = buffers.chain(scalars).collect();
    if all.is_empty() {
        "no bindings".to_string()
    } else {
        all.join(", ")
    }
}

/// Checks that the entry point `main` of `module` runs workgroups of the kernel's cube dim; the
/// reason when it does not.
fn check_workgroup_size(kernel: &KernelDef, module: &naga::Module) -> Result<(), String> {
    let Some(main) = module
        .entry_points
        .iter()
        .find(|entry| entry.name == "main")
    else {
        return Ok(());
    };
    let expected = kernel.signature.cube_dim;
    if main.workgroup_size_overrides.is_none() && main.workgroup_size != expected {
        let [x, y, z] = main.workgroup_size;
        return Err(format!(
            "`main` has @workgroup_size({x}, {y}, {z}), but kernel `{}` declares a cube dim of \
             {expected:?}: they must be equal",
            kernel.name
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuworld_hal::kernel::{Param, Signature};

    static PATCH: KernelDef = KernelDef {
        id: "test.patch",
        name: "patch",
        signature: Signature {
            buffers: &[Param::u32("words").read_only(), Param::f32("out")],
            scalars: &[Param::u32("word"), Param::f32("value")],
            cube_dim: [64, 1, 1],
        },
        sources: &[],
    };

    #[test]
    fn declarations_follow_the_signature_and_pad_the_scalars_to_16_bytes() {
        assert_eq!(
            declarations(&PATCH),
            "struct Scalars { word: u32, value: f32, _pad0: u32, _pad1: u32 }

@group(0) @binding(0) var<storage, read> words: array<u32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<uniform> scalars: Scalars;
"
        );
    }

    #[test]
    fn an_atomic_buffer_is_declared_as_an_array_of_atomics_a_source_can_add_to() {
        static COUNTS: KernelDef = KernelDef {
            id: "test.counts",
            name: "counts",
            signature: Signature {
                buffers: &[Param::u32("counts").atomic(), Param::i32("low").atomic()],
                scalars: &[],
                cube_dim: [64, 1, 1],
            },
            sources: &[],
        };
        assert_eq!(
            declarations(&COUNTS),
            "@group(0) @binding(0) var<storage, read_write> counts: array<atomic<u32>>;
@group(0) @binding(1) var<storage, read_write> low: array<atomic<i32>>;
"
        );
        let source = "@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    atomicAdd(&counts[id.x % 4u], 1u);
    atomicMin(&low[0], -i32(id.x));
}
";
        let text = module_text(&COUNTS, &WgslSource(source), Declared::AsSigned);
        assert_eq!(check_source(&COUNTS, &text), Ok(()));
    }

    #[test]
    fn the_all_writable_declarations_differ_only_in_the_read_only_buffers_access() {
        let signed = declarations(&PATCH);
        let writable = declarations_as(&PATCH, Declared::AllWritable);
        assert_eq!(
            writable,
            signed.replace("var<storage, read> words", "var<storage, read_write> words")
        );
        assert_ne!(writable, signed);
    }

    #[test]
    fn a_workgroup_size_other_than_the_cube_dim_is_refused() {
        let body = |size: &str| {
            module_text(
                &PATCH,
                &WgslSource(
                    format!("@compute @workgroup_size({size})\nfn main() {{ out[0] = 1.0; }}\n")
                        .leak(),
                ),
                Declared::AsSigned,
            )
        };
        assert_eq!(check_source(&PATCH, &body("64")), Ok(()));
        assert_eq!(check_source(&PATCH, &body("64, 1, 1")), Ok(()));
        let refused = check_source(&PATCH, &body("32, 2")).unwrap_err();
        assert!(refused.contains("@workgroup_size(32, 2, 1)"), "{refused}");
        assert!(refused.contains("[64, 1, 1]"), "{refused}");
    }

    /// `PATCH` with `source` as its WGSL, checked as the backend checks it.
    fn check(source: &str) -> Result<(), String> {
        check_source(
            &PATCH,
            &module_text(
                &PATCH,
                &WgslSource(source.to_string().leak()),
                Declared::AsSigned,
            ),
        )
    }

    #[test]
    fn an_error_on_line_2_of_the_source_is_reported_at_line_2_with_the_declared_bindings() {
        let log = check("@compute @workgroup_size(64)\nfn main() { out[0] = scalars.valu; }\n")
            .unwrap_err();
        assert!(log.contains("at line 2, column "), "{log}");
        assert!(
            log.contains("2 | fn main() { out[0] = scalars.valu; }"),
            "{log}"
        );
        assert!(log.contains("generated prelude of 6 lines"), "{log}");
        assert!(log.contains("words: array<u32> (read)"), "{log}");
        assert!(log.contains("scalars.value: f32"), "{log}");
    }

    #[test]
    fn a_store_to_a_read_only_buffer_is_a_source_error() {
        let log =
            check("@compute @workgroup_size(64)\nfn main() {\n  words[0] = 1u;\n}\n").unwrap_err();
        assert!(log.contains("of its source"), "{log}");
    }
}
