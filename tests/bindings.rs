//! A `Binding` comes only from a `Handle`: its fields are private (a hand-built one does not
//! compile: the `compile_fail` example on `Binding`), and narrowing it past its range is
//! `OutOfRange` at once. A handle's view moved past its end is refused on every backend: a read
//! gets `OutOfRange`, a write or a launch is refused or faults its stream with it, and the
//! handle's own bytes and its neighbours' are untouched (issue 27). That the ingest stage checks
//! a binding against its handle's real memory is tested beside it (`resolve_refuses_…`).

mod common;

use gpuworld::error::BindingError;
use gpuworld::{Backend, Bindings, ComputeClient, CubeCount, Driver, Error, library};

test_main![
    a_binding_narrowed_past_its_range_is_out_of_range,
    a_view_past_its_handle_is_refused_on_cpu,
    a_view_past_its_handle_is_refused_on_the_sim,
    #[cfg(feature = "wgpu")]
    a_view_past_its_handle_is_refused_on_wgpu,
];

fn a_binding_narrowed_past_its_range_is_out_of_range() {
    let client = gpuworld::sim_client(gpuworld::SimConfig::default()).expect("the sim opens");
    let handle = client.create_from_slice(&[7u8; 64]);
    let binding = handle.binding();
    assert_eq!(
        (
            binding.capacity(),
            binding.offset_start(),
            binding.offset_end()
        ),
        (64, 0, 0)
    );
    match binding.slice(0..1 << 20) {
        Err(BindingError::OutOfRange { size, end, .. }) => {
            assert_eq!((size, end), (64, 1 << 20))
        }
        other => panic!("a slice past the handle must be OutOfRange, got {other:?}"),
    }
    let part = binding.slice(16..48).expect("inside");
    assert_eq!(part.size(), 32);
    assert!(matches!(
        part.slice(0..33),
        Err(BindingError::OutOfRange { .. })
    ));
    // A slice may only narrow: its capacity is the handle's, whatever was asked.
    assert_eq!(part.capacity(), 64);
    assert_eq!(client.read_one(part).unwrap()[..], [7u8; 32][..]);
}

fn refused_everywhere<B: Backend>(client: ComputeClient<B>) {
    let original = vec![7u8; 64];
    let handle = client.create_from_slice(&original);
    let neighbour = client.create_from_slice(&[9u8; 64]);
    // The view starts past the handle's end: its binding names no bytes of it.
    let past = handle.clone().offset_start(128);

    match client.read(&[past.binding()]) {
        Err(Error::Binding(BindingError::OutOfRange { size, start, .. })) => {
            assert_eq!(size, 64, "the handle's real size");
            assert_eq!(start, 128);
        }
        other => panic!("a read past the handle's memory must be OutOfRange, got {other:?}"),
    }

    // A write through it is refused at the call and writes nothing.
    assert!(matches!(
        client.write(&past, &[1u8; 16]),
        Err(Error::Binding(BindingError::OutOfRange { .. }))
    ));

    // So is a launch: at the call, or on the stream's next sync.
    let launched = client.launch(
        &library::FILL,
        CubeCount::new_1d(1),
        Bindings::new().buffer(&past).scalar_f32(3.0),
    );
    match launched {
        Err(error) => assert!(
            matches!(error, Error::Binding(BindingError::OutOfRange { .. })),
            "{error}"
        ),
        Ok(()) => assert!(matches!(
            client.sync(),
            Err(Error::Binding(BindingError::OutOfRange { .. }))
        )),
    }
    client
        .sync()
        .expect("reported once; the stream works again");

    // Nothing written is lost, and the runtime stays usable.
    assert_eq!(client.read_one(&handle).expect("read")[..], original[..]);
    assert_eq!(
        client.read_one(&neighbour).expect("read")[..],
        [9u8; 64][..]
    );
    client.write(&handle, &[5u8; 64]).expect("write");
    assert_eq!(client.read_one(&handle).expect("read")[..], [5u8; 64][..]);
}

fn a_view_past_its_handle_is_refused_on_cpu() {
    refused_everywhere(gpuworld::cpu_client(Driver::Manual).unwrap());
}

fn a_view_past_its_handle_is_refused_on_the_sim() {
    refused_everywhere(
        gpuworld::sim_client(gpuworld::SimConfig::default()).expect("the sim opens"),
    );
}

#[cfg(feature = "wgpu")]
fn a_view_past_its_handle_is_refused_on_wgpu() -> Result<(), common::Skip> {
    refused_everywhere(common::wgpu_client_or_skip()?);
    Ok(())
}
