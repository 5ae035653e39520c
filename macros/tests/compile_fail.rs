//! What the kernel subset refuses, and the message a user sees for it (`tests/ui/*.stderr`;
//! `TRYBUILD=overwrite cargo test -p gpuworld-macros` rewrites them after a deliberate change).

#[test]
fn the_subset_refuses_with_a_clear_message_at_the_span() {
    trybuild::TestCases::new().compile_fail("tests/ui/*.rs");
}
