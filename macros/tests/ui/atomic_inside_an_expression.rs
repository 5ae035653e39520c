use gpuworld_macros::kernel;

#[kernel]
fn takes_a_ticket(#[atomic] next: &mut [u32], tickets: &mut [u32]) {
    let i = global_index();
    let ticket = next.atomic_add(0, 1) + 1;
    tickets[i] = ticket;
}

fn main() {}
