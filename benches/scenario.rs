//! `forkscope run`'s cost against the length of a scenario: loading (TOML, line numbers, the
//! bounds) and playing over a real loopback lab, each at n and 4n steps. Linear cost gives a
//! ratio near 4; the loader once counted newlines from the top for every step, which made it
//! 16 (a 20,000-step file took 4 s to load).
//!
//! `cargo bench --bench scenario`; running without `--bench` (as `cargo test --all-targets`
//! does) or with `FORKSCOPE_BENCH_QUICK=1` uses small files.

use forkscope::scenario::{self, format};
use forkscope_core::Policy;
use std::path::Path;
use std::time::{Duration, Instant};

fn quick() -> bool {
    std::env::var_os("FORKSCOPE_BENCH_QUICK").is_some() || !std::env::args().any(|a| a == "--bench")
}

/// A scenario of `steps` steps: background emits, each followed by a wait for it and a bit of
/// narration, the mix a generated file has.
fn text(steps: usize) -> String {
    let mut text =
        String::from("name = \"long\"\nteaches = \"cost per step\"\npolicy = \"fenced\"\n");
    for i in 0..steps {
        text.push_str(match i % 2 {
            0 => "[[step]]\naction = \"emit_background\"\nsay = \"an event\"\n",
            _ => "[[step]]\nsay = \"nothing to wait for\"\n",
        });
    }
    text
}

/// The best of three runs of `f`: the least disturbed by the other work on the machine.
fn best_of_three(mut f: impl FnMut()) -> Duration {
    (0..3)
        .map(|_| {
            let started = Instant::now();
            f();
            started.elapsed()
        })
        .min()
        .unwrap_or_default()
}

fn row(what: &str, n: usize, small: Duration, large: Duration) {
    println!(
        "{what:<28} {n:>6} steps {:>9.2} ms   {:>6} steps {:>9.2} ms   ratio {:>5.2} (linear: 4)",
        small.as_secs_f64() * 1e3,
        4 * n,
        large.as_secs_f64() * 1e3,
        large.as_secs_f64() / small.as_secs_f64().max(1e-9),
    );
}

fn main() {
    let n = if quick() { 1_000 } else { 10_000 };
    let path = Path::new("bench.toml");
    let (small, large) = (text(n), text(4 * n));
    let load = |text: &str| {
        format::parse(text, path).expect("the bench's scenario parses");
    };
    row(
        "load",
        n,
        best_of_three(|| load(&small)),
        best_of_three(|| load(&large)),
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime starts");
    let play = |text: &str| {
        let s = format::parse(text, path).expect("the bench's scenario parses");
        let run = runtime.block_on(scenario::play(&s, Policy::Fenced));
        assert!(run.ok(), "{:?}", run.error);
    };
    row(
        "load and play (fenced)",
        n,
        best_of_three(|| play(&small)),
        best_of_three(|| play(&large)),
    );
}
