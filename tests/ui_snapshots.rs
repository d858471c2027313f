//! Whole-screen snapshots of the dashboard at fixed sizes, drawn into ratatui's TestBackend
//! from deterministic in-memory labs (no sockets, no clock).

use forkscope::lab::Exchange;
use forkscope::lab::Snapshot;
use forkscope::tui::panes::narration::Narration;
use forkscope::tui::theme::Theme;
use forkscope::tui::ui::{Screen, draw};
use forkscope_core::sim::Sim;
use forkscope_core::{LabConfig, LabTime, Policy, StreamIdentity};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use tracing::Level;

const NO_COLOR: Theme = Theme { color: false };

fn render(panels: &[Snapshot], help: bool, width: u16, height: u16) -> String {
    render_with(panels, help, None, width, height)
}

fn render_with(
    panels: &[Snapshot],
    help: bool,
    narration: Option<&Narration>,
    width: u16,
    height: u16,
) -> String {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    let log = vec![
        (Level::INFO, "session initialized session=3f2a1c".to_owned()),
        (
            Level::WARN,
            "fault: the resumption token header was dropped on this retry".to_owned(),
        ),
    ];
    let screen = Screen {
        panels,
        log: &log,
        help,
        help_scroll: 0,
        status: None,
        theme: NO_COLOR,
        narration,
        picker: None,
        proof: None,
        evidence: None,
        lanes: &[],
        travel: None,
        reach: None,
        event: None,
        present: false,
        hide_verdict: false,
        knobs: None,
        explained: None,
    };
    terminal
        .draw(|frame| {
            draw(frame, &screen);
        })
        .unwrap();
    terminal.backend().to_string()
}

fn exchange(
    ms: u64,
    method: &'static str,
    what: &str,
    status: u16,
    headers: &[(&str, &str)],
) -> Exchange {
    Exchange {
        at: LabTime::from_millis(ms),
        method,
        what: what.to_owned(),
        status,
        headers: headers
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect(),
    }
}

/// A lab that has delivered a few background events and is idle. The seed's two-header model,
/// so the incident below turns on the stripped token.
fn idle(policy: Policy) -> Sim {
    let config = LabConfig {
        identity: StreamIdentity::TokenHeader,
        ..LabConfig::default()
    };
    let mut sim = Sim::new(config, policy, 7).unwrap();
    sim.start();
    for _ in 0..5 {
        sim.advance(700);
        sim.emit_background();
        sim.deliver_all();
    }
    sim
}

/// The seed incident, stopped while the orphan is still inside its grace window.
fn mid_incident(policy: Policy) -> Sim {
    let mut sim = idle(policy);
    sim.drop_connection();
    sim.strip_token();
    sim.advance(300);
    sim.reconnect(true);
    sim.deliver_all();
    for _ in 0..3 {
        sim.advance(400);
        sim.emit_background();
        sim.deliver_all();
    }
    sim
}

#[test]
fn idle_lab() {
    let sim = idle(Policy::Fenced);
    let exchanges = vec![
        exchange(
            0,
            "POST",
            "initialize",
            200,
            &[("← mcp-session-id", "5f0a…")],
        ),
        exchange(
            1,
            "GET",
            "open stream",
            200,
            &[("← mcp-stream-id", "s1"), ("← mcp-stream-resumed", "false")],
        ),
    ];
    let panels = [Snapshot::from_sim(&sim, exchanges)];
    insta::assert_snapshot!(render(&panels, false, 120, 40));
}

#[test]
fn naive_mid_incident_shows_the_fork() {
    let sim = mid_incident(Policy::Naive);
    let screen = render(&[Snapshot::from_sim(&sim, Vec::new())], false, 120, 40);
    assert!(screen.contains("FORK ×1"), "{screen}");
    assert!(screen.contains("orphaned"), "{screen}");
    assert!(
        screen.contains(forkscope::tui::panes::lanes::ORPHAN_EMIT),
        "orphan emits have their own glyph:\n{screen}"
    );
    insta::assert_snapshot!(screen);
}

#[test]
fn fenced_rejection() {
    let sim = mid_incident(Policy::Fenced);
    let exchanges = vec![exchange(
        3_800,
        "GET",
        "resume",
        428,
        &[("→ last-event-id", "s1-5")],
    )];
    let screen = render(&[Snapshot::from_sim(&sim, exchanges)], false, 120, 40);
    assert!(screen.contains("CLEAN"), "{screen}");
    assert!(screen.contains("1 rejected"), "{screen}");
    assert!(
        screen.contains("typed rejections 428 missing_token ×1"),
        "{screen}"
    );
    insta::assert_snapshot!(screen);
}

#[test]
fn compare_mode() {
    let panels = [
        Snapshot::from_sim(&mid_incident(Policy::Naive), Vec::new()),
        Snapshot::from_sim(&mid_incident(Policy::Fenced), Vec::new()),
    ];
    let screen = render(&panels, false, 120, 40);
    assert!(
        screen.contains("NAIVE") && screen.contains("FENCED"),
        "{screen}"
    );
    insta::assert_snapshot!(screen);
}

#[test]
fn help_overlay() {
    let panels = [Snapshot::from_sim(&idle(Policy::Fenced), Vec::new())];
    let screen = render(&panels, true, 100, 32);
    // The glossary: every verdict word and the abbreviations.
    for word in [
        "FORK",
        "DUPLICATE",
        "CURSOR BACK",
        "LOST",
        "DRIFT",
        "high-water",
        "stalled",
    ] {
        assert!(screen.contains(word), "{word}:\n{screen}");
    }
    insta::assert_snapshot!(screen);
}

#[test]
fn the_smallest_usable_size_and_below() {
    let panels = [Snapshot::from_sim(&mid_incident(Policy::Naive), Vec::new())];
    let usable = render(&panels, false, 80, 24);
    assert!(
        usable.contains("FORK ×1"),
        "the verdict fits at 80×24:\n{usable}"
    );
    insta::assert_snapshot!("usable_80x24", usable);
    let tiny = render(&panels, false, 40, 10);
    assert!(tiny.contains("enlarge the terminal"), "{tiny}");
}

#[test]
fn a_scenario_playing_with_its_narration() {
    let sim = mid_incident(Policy::Naive);
    let narration = Narration {
        name: "The seed incident".into(),
        teaches: "A NAT drops the connection after event 41…".into(),
        total: 10,
        done: 4,
        said: Some((
            23,
            "a NAT drops the TCP connection; the server is not told".into(),
        )),
        doing: Some("waiting for: reconnecting 1".into()),
        decided: vec![(
            "naive".into(),
            "server mints standalone stream s2, not flagged as new: the client will take it for a continuation".into(),
        )],
        paused: true,
        finished: false,
        error: None,
    };
    let screen = render_with(
        &[Snapshot::from_sim(&sim, Vec::new())],
        false,
        Some(&narration),
        120,
        40,
    );
    // The step's own words (no "line N:" prefix), and what the server decided.
    assert!(
        screen.contains("step 4/10")
            && screen.contains("a NAT drops the TCP connection")
            && !screen.contains("line 23:"),
        "{screen}"
    );
    assert!(
        screen.contains("naive: server mints standalone stream s2, not flagged as new"),
        "{screen}"
    );
    assert!(screen.contains("waiting for: reconnecting 1"), "{screen}");
    insta::assert_snapshot!(screen);
}

/// The fork is two lanes receiving at once: both must be visible at the smallest supported
/// size (60×20) and at 80×24, beside the verdict.
#[test]
fn both_lanes_of_the_fork_fit_the_smallest_sizes() {
    let panels = [Snapshot::from_sim(&mid_incident(Policy::Naive), Vec::new())];
    for (width, height) in [(60, 20), (80, 24)] {
        let screen = render(&panels, false, width, height);
        let lane = |name: &str| {
            screen
                .lines()
                .any(|l| l.trim_start_matches(['"', '│']).starts_with(name))
        };
        assert!(
            lane("s1 ") && lane("s2 ") && lane("client"),
            "{width}×{height}: both stream lanes and the client's:\n{screen}"
        );
        assert!(screen.contains("FORK ×1"), "{width}×{height}:\n{screen}");
    }
}

/// Compare mode at 80×24: the naive side still shows both lanes of its fork.
#[test]
fn compare_mode_at_80x24_keeps_the_naive_fork_visible() {
    let panels = [
        Snapshot::from_sim(&mid_incident(Policy::Naive), Vec::new()),
        Snapshot::from_sim(&mid_incident(Policy::Fenced), Vec::new()),
    ];
    let screen = render(&panels, false, 80, 24);
    let lanes = |name: &str| screen.matches(&format!("│{name} ")).count();
    assert!(lanes("s2") >= 1, "the naive s2 lane:\n{screen}");
    assert!(lanes("s1") >= 2, "an s1 lane on each side:\n{screen}");
    assert!(screen.contains("FORK"), "{screen}");
}

/// The "prove it" card over the lab: naive's counterexample, step by step, and the key that
/// plays it; it stays readable at the smallest size.
#[test]
fn the_prove_it_card_shows_the_counterexample() {
    use forkscope::tui::panes::proof::{ProofResult, ProofView};
    use forkscope_core::model::{self, Bounds, Delivery};
    let bounds = Bounds {
        probes: false,
        delivery: Delivery::Eager,
        target: Some(forkscope_core::AnomalyKind::Fork),
        ..Bounds::default()
    };
    let checked = forkscope::check::check(model::config(), Policy::Naive, bounds, |_| {}).unwrap();
    let mut details = Vec::new();
    for (i, step) in checked.trace.iter().enumerate() {
        details.push(format!("{:>2}. {}", i + 1, step.step));
        details.extend(step.anomalies.iter().map(|a| format!("    ✘ {a}")));
    }
    let proof = ProofView {
        policies: "naive".into(),
        progress: None,
        results: vec![ProofResult {
            holds: false,
            verdict: format!("naive: {}", checked.exploration.verdict()),
            figures: "158 states".into(),
            details,
        }],
        playable: true,
        error: None,
    };
    let panels = [Snapshot::from_sim(&idle(Policy::Naive), Vec::new())];
    for (width, height) in [(120, 40), (60, 20)] {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
        let screen = Screen {
            panels: &panels,
            log: &[],
            help: false,
            help_scroll: 0,
            status: None,
            theme: NO_COLOR,
            narration: None,
            picker: None,
            proof: Some(&proof),
            evidence: None,
            lanes: &[],
            travel: None,
            reach: None,
            event: None,
            present: false,
            hide_verdict: false,
            knobs: None,
            explained: None,
        };
        terminal
            .draw(|frame| {
                draw(frame, &screen);
            })
            .unwrap();
        let text = terminal.backend().to_string();
        assert!(
            text.contains("naive: counterexample in 4 steps: fork"),
            "{width}×{height}:\n{text}"
        );
        assert!(text.contains("Enter plays"), "{width}×{height}:\n{text}");
        if height >= 40 {
            assert!(text.contains("NAT drop"), "{text}");
            assert!(text.contains("✘ fork"), "{text}");
        }
    }
}

/// The evidence card: naive pins its first violation, fenced its typed rejection; a clean,
/// idle lab pins nothing. Drawn, it leaves the verdict on screen at 80×24.
#[test]
fn the_evidence_card_pins_the_lesson() {
    use forkscope::tui::panes::evidence;
    let naive = Snapshot::from_sim(&mid_incident(Policy::Naive), Vec::new());
    let pinned = evidence::of(&naive).expect("naive has a violation");
    assert!(pinned.violation);
    assert_eq!(pinned.title, "FORK", "{pinned:?}");
    assert!(pinned.why.contains("two live streams"), "{pinned:?}");
    let fenced = Snapshot::from_sim(&mid_incident(Policy::Fenced), Vec::new());
    let pinned_fenced = evidence::of(&fenced).expect("fenced has a typed rejection");
    assert!(!pinned_fenced.violation);
    assert!(
        pinned_fenced.said.contains("428 missing_token"),
        "{pinned_fenced:?}"
    );
    let idle = Snapshot::from_sim(&idle(Policy::Fenced), Vec::new());
    assert_eq!(evidence::of(&idle), None);
    for (width, height) in [(120, 40), (80, 24)] {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
        let panels = [naive.clone()];
        let screen = Screen {
            panels: &panels,
            log: &[],
            help: false,
            help_scroll: 0,
            status: None,
            theme: NO_COLOR,
            narration: None,
            picker: None,
            proof: None,
            evidence: Some(&pinned),
            lanes: &[],
            travel: None,
            reach: None,
            event: None,
            present: false,
            hide_verdict: false,
            knobs: None,
            explained: None,
        };
        terminal
            .draw(|frame| {
                draw(frame, &screen);
            })
            .unwrap();
        let text = terminal.backend().to_string();
        assert!(
            text.contains("evidence · naive lab"),
            "{width}×{height}:\n{text}"
        );
        assert!(text.contains("FORK"), "{width}×{height}:\n{text}");
        assert!(text.contains("verdict FORK"), "{width}×{height}:\n{text}");
    }
}

/// A fenced rejection stays in the http pane however many exchanges follow it (the client's
/// DELETE, initialize and new stream used to push it out at once).
#[test]
fn the_last_rejection_stays_in_the_http_pane() {
    let sim = mid_incident(Policy::Fenced);
    let mut exchanges = vec![exchange(
        3_800,
        "GET",
        "resume",
        428,
        &[("→ last-event-id", "s1-5")],
    )];
    for (i, (method, what)) in [
        ("DELETE", "end session"),
        ("POST", "initialize"),
        ("POST", "notifications/initialized"),
        ("GET", "open stream"),
        ("POST", "tools/call progress_task (8 steps)"),
        ("GET", "resume tool call 2"),
    ]
    .into_iter()
    .enumerate()
    {
        exchanges.push(exchange(
            3_900 + i as u64 * 10,
            method,
            what,
            200,
            &[("← mcp-session-id", "5f0a…"), ("← mcp-stream-id", "s1")],
        ));
    }
    for (width, height) in [(120, 40), (100, 30)] {
        let screen = render(
            &[Snapshot::from_sim(&sim, exchanges.clone())],
            false,
            width,
            height,
        );
        assert!(
            screen.contains("GET    428 resume"),
            "{width}×{height}:\n{screen}"
        );
    }
}

/// 100×30, a common laptop split: the client keeps its tool-call line and the log keeps its
/// rows, as on a tall screen.
#[test]
fn a_100x30_terminal_keeps_the_call_line_and_the_log() {
    let panels = [Snapshot::from_sim(&mid_incident(Policy::Naive), Vec::new())];
    let text = render(&panels, false, 100, 30);
    assert!(text.contains("call    "), "{text}");
    assert!(text.contains("verdict FORK"), "{text}");
    assert!(
        text.contains("fault: the resumption token header was dropped"),
        "{text}"
    );
}
