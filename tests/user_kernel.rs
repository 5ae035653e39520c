//! A user's kernel with a CPU and a WGSL source, exactly as `docs/architecture.md` (Kernels)
//! shows it: the lines between the markers below are the document's example, at most 25 of them,
//! and the kernel gives the same result on cpu, sim and wgpu.

mod common;

use common::{Skip, wgpu_client_or_skip};
use gpuworld::error::ExecutionError;
use gpuworld::{Backend, Bindings, ComputeClient, CubeCount};

test_main![
    the_example_is_at_most_25_lines_and_is_the_one_the_architecture_document_shows,
    the_example_gives_the_same_result_on_cpu_sim_and_wgpu,
    a_read_only_input_bound_over_the_output_reads_the_same_values_on_cpu_sim_and_wgpu,
    a_wgsl_error_on_line_2_of_the_source_is_reported_at_line_2,
    the_generated_text_is_the_prelude_then_the_source,
];

// The example begins.
use gpuworld::{CpuSource, KernelDef, Param, Signature, WgslSource};
/// `out[i] = x[i] + offset`, 64 units per cube.
static SHIFT: KernelDef = KernelDef {
    id: "example.shift",
    name: "shift",
    signature: Signature {
        buffers: &[Param::f32("x").read_only(), Param::f32("out")],
        scalars: &[Param::f32("offset")],
        cube_dim: [64, 1, 1],
    },
    sources: &[
        &CpuSource(|cube, io| {
            for i in cube.units_1d(io.len32(1)) {
                io.store_f32(1, i, io.load_f32(0, i) + io.scalar_f32(0));
            }
        }),
        &WgslSource(
            "@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < arrayLength(&out) { out[id.x] = x[id.x] + scalars.offset; }
}",
        ),
    ],
};
// The example ends.

/// The lines of this file between the example's markers.
fn example() -> Vec<&'static str> {
    include_str!("user_kernel.rs")
        .lines()
        .skip_while(|line| *line != "// The example begins.")
        .skip(1)
        .take_while(|line| *line != "// The example ends.")
        .collect()
}

fn the_example_is_at_most_25_lines_and_is_the_one_the_architecture_document_shows() {
    let example = example();
    assert!(example.len() <= 25, "{} lines", example.len());
    let shown = format!("```rust\n{}\n```", example.join("\n"));
    assert!(
        include_str!("../docs/architecture.md").contains(&shown),
        "docs/architecture.md (Kernels) must show the example as it is here:\n{shown}"
    );
}

fn shift_on<B: Backend>(client: &ComputeClient<B>) -> Vec<f32> {
    let x: Vec<f32> = (0..200).map(|i| i as f32 / 4.0).collect();
    let x = client.create_from_slice(bytemuck::cast_slice(&x));
    let out = client.empty(200 * 4);
    let bindings = Bindings::new().buffer(&x).buffer(&out).scalar_f32(1.5);
    client
        .launch(&SHIFT, CubeCount::covering(200, 64), bindings)
        .unwrap();
    client.read_one_as(&out).unwrap()
}

fn the_example_gives_the_same_result_on_cpu_sim_and_wgpu() -> Result<(), Skip> {
    let expected: Vec<f32> = (0..200).map(|i| i as f32 / 4.0 + 1.5).collect();
    let cpu = gpuworld::cpu_client(gpuworld::Driver::Manual).unwrap();
    assert_eq!(shift_on(&cpu), expected);
    let sim = gpuworld::sim_client(gpuworld::SimConfig::default()).expect("the sim opens");
    assert_eq!(shift_on(&sim), expected);
    assert_eq!(shift_on(&wgpu_client_or_skip()?), expected);
    Ok(())
}

/// `x` read-only and `out` written, bound to one handle: wgpu refuses one buffer as read-only and
/// read-write storage in a dispatch, so the backend reads `x` from a copy; every unit reads its
/// own element before writing it, so each backend gives `x + offset` in place.
fn shift_in_place_on<B: Backend>(client: &ComputeClient<B>) -> Vec<f32> {
    let x: Vec<f32> = (0..200).map(|i| i as f32).collect();
    let x = client.create_from_slice(bytemuck::cast_slice(&x));
    let bindings = Bindings::new().buffer(&x).buffer(&x).scalar_f32(0.5);
    client
        .launch(&SHIFT, CubeCount::covering(200, 64), bindings)
        .unwrap();
    client.read_one_as(&x).unwrap()
}

fn a_read_only_input_bound_over_the_output_reads_the_same_values_on_cpu_sim_and_wgpu()
-> Result<(), Skip> {
    let expected: Vec<f32> = (0..200).map(|i| i as f32 + 0.5).collect();
    let cpu = gpuworld::cpu_client(gpuworld::Driver::Manual).unwrap();
    assert_eq!(shift_in_place_on(&cpu), expected);
    let sim = gpuworld::sim_client(gpuworld::SimConfig::default()).expect("the sim opens");
    assert_eq!(shift_in_place_on(&sim), expected);
    assert_eq!(shift_in_place_on(&wgpu_client_or_skip()?), expected);
    Ok(())
}

/// `SHIFT`'s signature with a misspelt scalar on line 2 of its WGSL.
static MISSPELT: KernelDef = KernelDef {
    id: "example.misspelt",
    name: "misspelt",
    signature: SHIFT.signature,
    sources: &[&WgslSource(
        "@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) { out[id.x] = x[id.x] + scalars.ofset; }",
    )],
};

fn a_wgsl_error_on_line_2_of_the_source_is_reported_at_line_2() -> Result<(), Skip> {
    let client = wgpu_client_or_skip()?;
    let x = client.create_from_slice(bytemuck::cast_slice(&[1.0f32; 64]));
    let out = client.empty(64 * 4);
    let bindings = Bindings::new().buffer(&x).buffer(&out).scalar_f32(1.0);
    client
        .launch(&MISSPELT, CubeCount::new_1d(1), bindings)
        .unwrap();
    let error = client.sync().unwrap_err();
    let gpuworld::Error::Execution(ExecutionError::Compile { kernel, log }) = &error else {
        panic!("expected a compile error, got {error:?}");
    };
    assert_eq!(*kernel, "misspelt");
    assert!(log.contains("at line 2, column "), "{log}");
    assert!(log.contains("invalid field accessor `ofset`"), "{log}");
    assert!(log.contains("generated prelude"), "{log}");
    assert!(log.contains("x: array<f32> (read)"), "{log}");
    assert!(log.contains("scalars.offset: f32"), "{log}");
    Ok(())
}

fn the_generated_text_is_the_prelude_then_the_source() {
    let text = gpuworld::kernel_source_text::<gpuworld::WgpuBackend>(&SHIFT).unwrap();
    assert!(
        text.contains("@group(0) @binding(0) var<storage, read> x: array<f32>;"),
        "{text}"
    );
    assert!(text.ends_with("scalars.offset; }\n}"), "{text}");
    assert_eq!(
        gpuworld::kernel_source_text::<gpuworld::CpuBackend>(&SHIFT),
        None
    );
}
