//! A halo exchange between two runtimes, run eagerly and replayed from one graph captured over
//! both (`Graph::capture_group`): the replay must give the eager run's bytes after every step.

use gpuworld::{Backend, Bindings, ComputeClient, CubeCount, Graph, Handle, library};

/// Words per buffer.
pub const N: usize = 1024;
/// Words each side sends.
pub const HALO: usize = 64;

fn floats<B: Backend>(client: &ComputeClient<B>, handle: &Handle) -> Vec<f32> {
    client.read_one_as::<f32>(handle).expect("read")
}

/// Words `words` of `handle`.
pub fn words(handle: &Handle, words: std::ops::Range<usize>) -> Handle {
    handle
        .clone()
        .offset_start((words.start * 4) as u64)
        .offset_end(handle.capacity() - (words.end * 4) as u64)
}

/// Two runtimes' state: `x` on each, and a buffer of ones on the second.
#[derive(Debug)]
pub struct Pair<B: Backend> {
    /// The first runtime.
    pub a: ComputeClient<B>,
    /// The second runtime.
    pub b: ComputeClient<B>,
    /// The first runtime's field.
    pub xa: Handle,
    /// The second runtime's field.
    pub xb: Handle,
    /// Ones, on the second runtime.
    pub ones: Handle,
}

impl<B: Backend> Pair<B> {
    /// Both fields start as `i % 7`.
    pub fn new(a: ComputeClient<B>, b: ComputeClient<B>) -> Pair<B> {
        let start: Vec<f32> = (0..N).map(|i| (i % 7) as f32).collect();
        let xa = a.create_from_pod(&start);
        let xb = b.create_from_pod(&start);
        let ones = b.create_from_pod(&[1.0f32; N]);
        Pair { a, b, xa, xb, ones }
    }

    /// One step of a halo exchange: `a` doubles its `x`, `b` adds one to its own; then the
    /// first words of `a`'s go to `b`'s first words, and `b`'s next words to `a`'s last ones.
    /// Each side's next step reads what the other sent.
    pub fn step(&self, clients: &[ComputeClient<B>]) -> gpuworld::Result<()> {
        let (a, b) = (&clients[0], &clients[1]);
        let cubes = CubeCount::new_1d(N.div_ceil(256) as u32);
        a.launch(
            &library::ADD,
            cubes,
            Bindings::new()
                .buffer(&self.xa)
                .buffer(&self.xa)
                .buffer(&self.xa),
        )?;
        b.launch(
            &library::ADD,
            cubes,
            Bindings::new()
                .buffer(&self.xb)
                .buffer(&self.ones)
                .buffer(&self.xb),
        )?;
        a.to_client_into(&words(&self.xa, 0..HALO), b, &words(&self.xb, 0..HALO))?;
        b.to_client_into(
            &words(&self.xb, HALO..2 * HALO),
            a,
            &words(&self.xa, N - HALO..N),
        )
    }

    /// Both clients, for a step.
    pub fn clients(&self) -> [ComputeClient<B>; 2] {
        [self.a.clone(), self.b.clone()]
    }

    /// Both fields, read back.
    pub fn state(&self) -> (Vec<f32>, Vec<f32>) {
        (floats(&self.a, &self.xa), floats(&self.b, &self.xb))
    }
}

/// `steps` steps run eagerly on one pair and, on the other, captured once as one graph and
/// replayed, with the same eager writes on both sides between them: the same bytes after each.
pub fn replay_equals_eager<B: Backend>(eager: Pair<B>, replayed: Pair<B>) {
    let graph = Graph::capture_group(&replayed.clients(), |clients| replayed.step(clients))
        .expect("the capture");
    eager.step(&eager.clients()).expect("an eager step");
    assert_eq!(replayed.state(), eager.state(), "the capture's run");
    for round in 1..12u32 {
        // Eager work on both sides between replays, seen by the next one exactly as by the
        // next eager step.
        if round % 3 == 0 {
            for pair in [&eager, &replayed] {
                let value = [round as f32; HALO];
                let a_edge = words(&pair.xa, HALO..2 * HALO);
                pair.a.write(&a_edge, bytemuck::cast_slice(&value)).unwrap();
                let b_edge = words(&pair.xb, N - HALO..N);
                pair.b.write(&b_edge, bytemuck::cast_slice(&value)).unwrap();
            }
        }
        eager.step(&eager.clients()).expect("an eager step");
        graph.replay().expect("a replay");
        assert_eq!(replayed.state(), eager.state(), "after replay {round}");
    }
}
