//! WGSL sources: the source type a kernel lists for this backend, and the module the backend
//! compiles from it — the declarations of the kernel's signature (binding convention on
//! `gpuworld_systems::kernel::KernelDef`), then the source — with its `@workgroup_size` checked
//! against the signature's cube dim.

use crate::WgpuBackend;
use gpuworld_systems::backend::Backend;
use gpuworld_systems::kernel::{Access, Elem, KernelDef, KernelSource};
use std::fmt::Write;

/// A kernel's WGSL for the wgpu backend: the entry point `main`, with
/// `@compute @workgroup_size` equal to the signature's cube dim, and its helpers. The bindings
/// are declared by the backend from the signature: buffer `<name>: array<f32 | u32>` at
/// `@binding(i)` (`var<storage, read>` when read-only), scalars as `scalars.<name>`.
#[derive(Clone, Copy, Debug)]
pub struct WgslSource(pub &'static str);

impl KernelSource for WgslSource {}

/// Bytes of the uniform holding `scalars` 32-bit words, padded to 16.
pub(crate) fn uniform_size(scalars: usize) -> u64 {
    (scalars as u64 * 4).div_ceil(16) * 16
}

fn wgsl_type(elem: Elem) -> &'static str {
    match elem {
        Elem::F32 => "f32",
        Elem::U32 => "u32",
    }
}

/// WGSL's access mode for a buffer of `access` (WGSL storage has no write-only mode).
pub(crate) fn storage_access(access: Access) -> &'static str {
    match access {
        Access::Read => "read",
        Access::Write | Access::ReadWrite => "read_write",
    }
}

/// The declarations of `kernel`'s bindings: the scalars' struct (padded to the uniform's size),
/// one storage buffer per buffer binding, and the scalars' uniform after them.
pub(crate) fn declarations(kernel: &KernelDef) -> String {
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
            storage_access(buffer.access),
            buffer.name,
            wgsl_type(buffer.elem)
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
    WgpuBackend::source_for(kernel).map(|source| module_text(kernel, source))
}

/// The module the backend compiles for `kernel` from `source`: its declarations, then `source`.
pub(crate) fn module_text(kernel: &KernelDef, source: &WgslSource) -> String {
    let declarations = declarations(kernel);
    if declarations.is_empty() {
        return source.0.to_string();
    }
    format!("{declarations}\n{}", source.0)
}

/// Checks that the entry point `main` of `text` runs workgroups of the kernel's cube dim; the
/// reason when it does not. A module that does not parse passes: compiling it reports why.
pub(crate) fn check_workgroup_size(kernel: &KernelDef, text: &str) -> Result<(), String> {
    let Ok(module) = naga::front::wgsl::parse_str(text) else {
        return Ok(());
    };
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
    use gpuworld_systems::kernel::{Param, Signature};

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
    fn a_workgroup_size_other_than_the_cube_dim_is_refused() {
        let body = |size: &str| {
            module_text(
                &PATCH,
                &WgslSource(
                    format!("@compute @workgroup_size({size})\nfn main() {{ out[0] = 1.0; }}\n")
                        .leak(),
                ),
            )
        };
        assert_eq!(check_workgroup_size(&PATCH, &body("64")), Ok(()));
        assert_eq!(check_workgroup_size(&PATCH, &body("64, 1, 1")), Ok(()));
        let refused = check_workgroup_size(&PATCH, &body("32, 2")).unwrap_err();
        assert!(refused.contains("@workgroup_size(32, 2, 1)"), "{refused}");
        assert!(refused.contains("[64, 1, 1]"), "{refused}");
    }
}
