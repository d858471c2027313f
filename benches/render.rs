//! Frame render time with a long history: 10⁴ events emitted and delivered, drawn into a
//! TestBackend at 120×40 and 80×24, single and compare mode. The snapshot a frame is drawn
//! from is measured too. Baseline in the same run: drawing the same screen with an empty lab.

use criterion::{Criterion, criterion_group, criterion_main};
use forkscope::lab::Snapshot;
use forkscope::tui::theme::Theme;
use forkscope::tui::ui::{Screen, draw};
use forkscope_core::sim::Sim;
use forkscope_core::{LabConfig, Policy};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use std::hint::black_box;

fn lab(events: u64, policy: Policy) -> Sim {
    let mut sim = Sim::new(LabConfig::default(), policy, 1).unwrap();
    sim.start();
    for n in 0..events {
        sim.emit_background();
        if n % 10 == 0 {
            sim.advance(50);
        }
        sim.deliver_all();
    }
    if policy == Policy::Naive {
        sim.drop_connection();
        sim.strip_token();
        sim.reconnect(true);
        sim.deliver_all();
        sim.emit_background();
    }
    sim
}

fn frame(c: &mut Criterion, name: &str, panels: &[Snapshot], width: u16, height: u16) {
    let theme = Theme { color: true };
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    c.bench_function(name, |b| {
        b.iter(|| {
            let screen = Screen::of(panels, theme);
            terminal
                .draw(|f| {
                    draw(f, black_box(&screen));
                })
                .unwrap();
        });
    });
}

fn benches(c: &mut Criterion) {
    let empty = Sim::new(LabConfig::default(), Policy::Fenced, 1).unwrap();
    let long = lab(10_000, Policy::Naive);
    let fenced = lab(10_000, Policy::Fenced);
    assert!(long.history().total() > 20_000);
    c.bench_function("snapshot of a lab with 10^4 events", |b| {
        b.iter(|| black_box(Snapshot::from_sim(&long, Vec::new())));
    });
    let empty_panel = [Snapshot::from_sim(&empty, Vec::new())];
    let long_panel = [Snapshot::from_sim(&long, Vec::new())];
    let both = [
        Snapshot::from_sim(&long, Vec::new()),
        Snapshot::from_sim(&fenced, Vec::new()),
    ];
    frame(
        c,
        "frame 120x40, empty lab (baseline)",
        &empty_panel,
        120,
        40,
    );
    frame(c, "frame 120x40, 10^4 events", &long_panel, 120, 40);
    frame(c, "frame 80x24, 10^4 events", &long_panel, 80, 24);
    frame(c, "frame 120x40 compare, 2 x 10^4 events", &both, 120, 40);
}

criterion_group!(render, benches);
criterion_main!(render);
