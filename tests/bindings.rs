//! A `Binding` put together by hand (its fields are public) that claims more bytes than its
//! handle has is refused when a tick resolves it, whatever capacity it names: a read gets
//! `OutOfRange`, a write or a launch faults its stream with it, and the handle's own bytes and
//! its neighbours' are untouched (issue 27).

mod common;

use gpuworld::{Backend, Binding, Bindings, ComputeClient, CubeCount, Driver, Error, library};

test_main![
    an_oversized_binding_is_refused_on_cpu,
    an_oversized_binding_is_refused_on_the_sim,
    #[cfg(feature = "wgpu")]
    an_oversized_binding_is_refused_on_wgpu,
];

fn oversized(handle: &gpuworld::Handle) -> Binding {
    let mut binding = handle.binding();
    binding.capacity = 1 << 20;
    binding
}

fn refused_everywhere<B: Backend>(client: ComputeClient<B>) {
    let original = vec![7u8; 64];
    let handle = client.create_from_slice(&original);
    let neighbour = client.create_from_slice(&[9u8; 64]);
    let wide = oversized(&handle);

    match client.read(&[wide]) {
        Err(Error::OutOfRange { size, end, .. }) => {
            assert_eq!(size, 64, "the handle's real size");
            assert_eq!(end, 1 << 20);
        }
        other => panic!("a read past the handle's memory must be OutOfRange, got {other:?}"),
    }

    // A write through it is refused (the stream's next sync reports it) and writes nothing.
    client
        .write(wide, &[1u8; 1024])
        .expect("the client cannot know the handle's size from the binding alone");
    assert!(
        matches!(client.sync(), Err(Error::OutOfRange { .. })),
        "the write's error reaches the next sync"
    );
    client
        .sync()
        .expect("reported once; the stream works again");

    // So is a launch.
    client
        .launch(
            &library::FILL,
            CubeCount::new_1d(1),
            Bindings::new().buffer(wide).scalar_f32(3.0),
        )
        .expect("arity is right");
    assert!(matches!(client.sync(), Err(Error::OutOfRange { .. })));

    // Nothing written is lost, and the runtime stays usable.
    assert_eq!(client.read_one(&handle).expect("read")[..], original[..]);
    assert_eq!(
        client.read_one(&neighbour).expect("read")[..],
        [9u8; 64][..]
    );
    client.write(&handle, &[5u8; 64]).expect("write");
    assert_eq!(client.read_one(&handle).expect("read")[..], [5u8; 64][..]);
}

fn an_oversized_binding_is_refused_on_cpu() {
    refused_everywhere(gpuworld::cpu_client(Driver::Manual));
}

fn an_oversized_binding_is_refused_on_the_sim() {
    refused_everywhere(gpuworld::sim_client(gpuworld::SimConfig::default()));
}

#[cfg(feature = "wgpu")]
fn an_oversized_binding_is_refused_on_wgpu() -> Result<(), common::Skip> {
    refused_everywhere(common::wgpu_client_or_skip()?);
    Ok(())
}
