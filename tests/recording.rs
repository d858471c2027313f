//! Recordings read back through a virtual terminal (avt): the final screen must say what the
//! run concluded, and the first violation must be marked.

use forkscope::record::{Format, record_scenario};
use forkscope::scenario;
use forkscope::tui::ui::draw_still;
use forkscope_core::Policy;
use std::path::Path;

struct Cast {
    width: usize,
    height: usize,
    events: Vec<(f64, String, String)>,
}

fn read_cast(path: &Path) -> Cast {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let header: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(header["version"], 2);
    let events = lines
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v[0].as_f64().unwrap(),
                v[1].as_str().unwrap().to_owned(),
                v[2].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    Cast {
        width: header["width"].as_u64().unwrap() as usize,
        height: header["height"].as_u64().unwrap() as usize,
        events,
    }
}

/// The screen after every output event has been played.
fn final_screen(cast: &Cast) -> String {
    let mut vt = avt::Terminal::new(cast.width, cast.height).unwrap();
    for (_, kind, data) in &cast.events {
        if kind == "o" {
            vt.feed(data.as_str());
        }
    }
    vt.screen()
        .visible_lines()
        .map(|l| l.text())
        .collect::<Vec<_>>()
        .join("\n")
}

fn times_never_go_back(cast: &Cast) -> bool {
    cast.events.windows(2).all(|w| w[0].0 <= w[1].0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_of_the_naive_incident_ends_on_the_fork_and_marks_it() {
    let seed =
        scenario::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/seed-incident.toml"))
            .unwrap();
    let path = std::env::temp_dir().join(format!("forkscope-test-{}.cast", std::process::id()));
    record_scenario(
        &seed,
        &[Policy::Naive],
        &path,
        Format::Cast,
        100,
        30,
        draw_still,
    )
    .await
    .unwrap();
    let cast = read_cast(&path);
    assert!(times_never_go_back(&cast));
    let screen = final_screen(&cast);
    assert!(screen.contains("NAIVE"), "{screen}");
    assert!(screen.contains("verdict FORK ×1"), "{screen}");
    let markers: Vec<&String> = cast
        .events
        .iter()
        .filter(|(_, k, _)| k == "m")
        .map(|(_, _, d)| d)
        .collect();
    assert_eq!(markers.len(), 1, "one marker, at the first violation");
    assert!(markers[0].starts_with("first violation:"), "{markers:?}");
    std::fs::remove_file(&path).ok();
}

#[test]
fn the_shipped_demos_end_on_their_verdicts() {
    let assets = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets");
    let naive = read_cast(&assets.join("seed-incident-naive.cast"));
    assert!(final_screen(&naive).contains("verdict FORK"));
    let fenced = read_cast(&assets.join("seed-incident-fenced.cast"));
    let screen = final_screen(&fenced);
    assert!(
        screen.contains("verdict CLEAN") && !screen.contains("FORK"),
        "{screen}"
    );
    assert!(
        fenced.events.iter().all(|(_, k, _)| k != "m"),
        "a clean run has no violation marker"
    );
    let both = read_cast(&assets.join("seed-incident-side-by-side.cast"));
    let screen = final_screen(&both);
    assert!(
        screen.contains("NAIVE")
            && screen.contains("FENCED")
            && screen.contains("FORK")
            && screen.contains("CLEAN"),
        "{screen}"
    );
    for cast in [&naive, &fenced, &both] {
        assert!(times_never_go_back(cast));
    }
}

/// A scenario that presses `n` ends under the other policy, and the recording's verdict line
/// names both: never the starting policy alone for a fork the other one made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_names_the_policy_a_scenario_switched_to() {
    let text = "name = \"switch\"\nteaches = \"n\"\npolicy = \"fenced\"\n[[step]]\naction = \"toggle_naive\"\n[[step]]\nadvance_ms = 100\n";
    let switched = scenario::format::parse(text, Path::new("switch.toml")).unwrap();
    let path = std::env::temp_dir().join(format!("forkscope-switch-{}.cast", std::process::id()));
    let verdicts = record_scenario(
        &switched,
        &[Policy::Fenced],
        &path,
        Format::Cast,
        100,
        30,
        draw_still,
    )
    .await
    .unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(verdicts.len(), 1);
    assert!(verdicts[0].starts_with("fenced → naive: "), "{verdicts:?}");
}

/// `run` labels a scenario that pressed `n` by both policies, as `record` does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_names_the_policy_a_scenario_switched_to() {
    let text = "name = \"switch\"\nteaches = \"n\"\npolicy = \"fenced\"\n[[step]]\naction = \"toggle_naive\"\n[[step]]\nadvance_ms = 100\n";
    let switched = scenario::format::parse(text, Path::new("switch.toml")).unwrap();
    let run = forkscope::scenario::player::play(&switched, Policy::Fenced).await;
    assert_eq!(run.ended_under, Some(Policy::Naive));
    let report = forkscope::scenario::report::text(&switched, std::slice::from_ref(&run));
    assert!(report.contains("fenced → naive"), "{report}");
}
