//! Interop: `get_resource` hands out the backend's memory behind a binding once the stream has
//! written it, `exclusive` runs host code while no tick runs.

mod common;

use gpuworld::error::BindingError;
use gpuworld::{Bindings, CubeCount, Driver, Error, cpu_client, library};
use std::sync::atomic::Ordering;

test_main![
    get_resource_shows_host_memory_after_the_stream_wrote_it_and_host_writes_are_seen_by_kernels,
    get_resource_of_a_released_or_foreign_binding_is_an_error,
    exclusive_runs_after_the_stream_and_no_tick_runs_meanwhile,
    #[cfg(feature = "wgpu")]
    get_resource_on_wgpu_is_the_buffer_holding_the_binding,
];

fn get_resource_shows_host_memory_after_the_stream_wrote_it_and_host_writes_are_seen_by_kernels() {
    let client = cpu_client(Driver::DeviceThread).unwrap();
    let input = client.create_from_slice(bytemuck::cast_slice(&[1.0f32, 2.0, 3.0, 4.0]));
    let output = client.empty(16);
    let bindings = Bindings::new()
        .buffer(&input)
        .buffer(&output)
        .scalar_f32(3.0);
    client
        .launch(&library::SCALE, CubeCount::new_1d(1), bindings)
        .expect("launch");
    {
        let guard = client.get_resource(&output).expect("a live handle");
        assert_eq!(guard.region().size, 16);
        let words = guard.resource().expect("word-aligned");
        let values: Vec<f32> = words
            .words()
            .iter()
            .map(|w| f32::from_bits(w.load(Ordering::Relaxed)))
            .collect();
        assert_eq!(values, [3.0, 6.0, 9.0, 12.0]);
        words.words()[0].store(7.0f32.to_bits(), Ordering::Relaxed);
    }
    let values: Vec<f32> = client.read_one_as(&output).expect("read");
    assert_eq!(values, [7.0, 6.0, 9.0, 12.0]);
    // A sub-range starts where the binding does.
    let guard = client
        .get_resource(&output.clone().offset_start(8))
        .expect("a live handle");
    let third = guard
        .resource()
        .map(|words| f32::from_bits(words.words()[0].load(Ordering::Relaxed)));
    assert_eq!(third, Some(9.0));
}

fn get_resource_of_a_released_or_foreign_binding_is_an_error() {
    let client = cpu_client(Driver::Manual).unwrap();
    let other = cpu_client(Driver::Manual).unwrap();
    let handle = client.create_from_slice(&[0u8; 16]);
    let binding = handle.binding();
    drop(handle);
    let error = client.get_resource(binding).expect_err("released");
    assert!(
        matches!(error, Error::Binding(BindingError::ReleasedHandle { .. })),
        "{error}"
    );
    let foreign = other.create_from_slice(&[0u8; 16]);
    let error = client.get_resource(&foreign).expect_err("foreign");
    assert!(
        matches!(error, Error::Binding(BindingError::ForeignHandle { .. })),
        "{error}"
    );
    // The runtime goes on.
    let again = client.create_from_slice(&[5u8; 4]);
    assert_eq!(client.read_one(&again).expect("read"), [5u8; 4]);
}

fn exclusive_runs_after_the_stream_and_no_tick_runs_meanwhile() {
    let client = cpu_client(Driver::DeviceThread).unwrap();
    let handle = client.create_from_slice(&[1u8; 64]);
    let ticks_inside = client
        .exclusive(|| {
            // Enqueued while held: it waits for the runtime to be released.
            let reader = client.clone();
            let mut pending = common::Pending::new(reader.read_async(&[handle.binding()]));
            std::thread::sleep(std::time::Duration::from_millis(20));
            assert!(
                pending.poll().is_none(),
                "a tick ran while the runtime was held"
            );
            pending
        })
        .expect("no fault");
    let mut pending = ticks_inside;
    let bytes = loop {
        if let Some(bytes) = pending.poll() {
            break bytes.expect("read");
        }
        client.tick();
    };
    assert_eq!(bytes[0], [1u8; 64]);
}

#[cfg(feature = "wgpu")]
fn get_resource_on_wgpu_is_the_buffer_holding_the_binding() -> Result<(), common::Skip> {
    let client = common::wgpu_client_or_skip()?;
    let handle = client.create_from_slice(&[3u8; 256]);
    let guard = client.get_resource(&handle).expect("a live handle");
    let buffer = guard.resource().expect("a wgpu buffer");
    assert!(buffer.size() >= guard.region().offset + 256);
    Ok(())
}
