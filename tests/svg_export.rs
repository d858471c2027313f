//! SVG exports of a recording, parsed back as XML: the picture has the recording's size, its
//! frames play at the recording's pace, the last one shows the verdict, and the first violation
//! can be found.

use forkscope::record::svg::{CELL_HEIGHT, CELL_WIDTH, PADDING};
use forkscope::record::{Format, record_scenario};
use forkscope::scenario;
use forkscope::tui::ui::draw_still;
use forkscope_core::Policy;
use roxmltree::{Document, Node};
use std::path::{Path, PathBuf};

const WIDTH: u16 = 100;
const HEIGHT: u16 = 30;

fn seed() -> scenario::Scenario {
    scenario::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/seed-incident.toml"))
        .unwrap()
}

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("forkscope-test-{}-{name}", std::process::id()))
}

fn frames<'a, 'input>(doc: &'a Document<'input>) -> Vec<Node<'a, 'input>> {
    doc.descendants()
        .filter(|n| n.attribute("class") == Some("frame"))
        .collect()
}

/// A frame's screen as text, one line per drawn row: each `<use>` resolved to its row in
/// `<defs>`.
fn frame_text(doc: &Document, frame: Node) -> String {
    frame
        .children()
        .filter(|n| n.has_tag_name("use"))
        .map(|u| {
            let id = u.attribute("href").unwrap().trim_start_matches('#');
            let row = doc
                .descendants()
                .find(|n| n.attribute("id") == Some(id))
                .unwrap_or_else(|| panic!("no row {id}"));
            row.descendants()
                .filter(|n| n.is_text())
                .filter_map(|n| n.text())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn seconds(node: Node, attribute: &str) -> f64 {
    node.attribute(attribute).unwrap().parse().unwrap()
}

fn style(doc: &Document) -> String {
    doc.descendants()
        .find(|n| n.has_tag_name("style"))
        .and_then(|n| n.text())
        .unwrap()
        .to_owned()
}

fn assert_root_fits(doc: &Document) {
    let root = doc.root_element();
    assert!(root.has_tag_name(("http://www.w3.org/2000/svg", "svg")));
    let (w, h) = (
        u32::from(WIDTH) * CELL_WIDTH + 2 * PADDING,
        u32::from(HEIGHT) * CELL_HEIGHT + 2 * PADDING,
    );
    assert_eq!(
        root.attribute("viewBox"),
        Some(format!("0 0 {w} {h}").as_str())
    );
    assert_eq!(root.attribute("width"), Some(w.to_string().as_str()));
}

/// The seed incident under naive, recorded as `format` into a temporary `name`; its text.
async fn recorded(name: &str, format: Format) -> String {
    let path = temp(name);
    record_scenario(
        &seed(),
        &[Policy::Naive],
        &path,
        format,
        WIDTH,
        HEIGHT,
        draw_still,
    )
    .await
    .unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).ok();
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_animated_svg_of_the_naive_incident_plays_its_frames_and_ends_on_the_fork() {
    let text = recorded("naive.svg", Format::Svg).await;
    let doc = Document::parse(&text).unwrap();
    assert_root_fits(&doc);

    let frames = frames(&doc);
    assert!(frames.len() > 5, "{} frames", frames.len());
    let last = frame_text(&doc, *frames.last().unwrap());
    assert!(
        last.contains("NAIVE") && last.contains("verdict FORK"),
        "{last}"
    );
    let first = frame_text(&doc, frames[0]);
    assert!(
        !first.contains("FORK"),
        "the opening frame is before the fork: {first}"
    );

    // The pace is the recording's: the opening held 2.5 s, the verdict 3 s, each frame starting
    // where the one before ended, and the animation as long as all of them.
    assert_eq!(seconds(frames[0], "data-duration"), 2.5);
    assert_eq!(seconds(*frames.last().unwrap(), "data-duration"), 3.0);
    let mut end = 0.0;
    for frame in &frames {
        assert!((seconds(*frame, "data-start") - end).abs() < 0.002);
        end += seconds(*frame, "data-duration");
    }
    let css = style(&doc);
    let total = format!("animation:film {}s ", (end * 1000.0_f64).round() / 1000.0);
    assert!(css.contains(&total), "{total} in {css}");
    assert_eq!(
        css.matches("transform:translateY(").count(),
        frames.len() + 2
    );

    // The first violation: one marked frame, after the opening, titled with the headline.
    let marked: Vec<usize> = frames
        .iter()
        .enumerate()
        .filter(|(_, f)| f.attribute("id") == Some("first-violation"))
        .map(|(k, _)| k)
        .collect();
    assert_eq!(marked.len(), 1, "one frame marked");
    let at = marked[0];
    assert!(at > 0 && at < frames.len());
    let title = frames[at]
        .children()
        .find(|n| n.has_tag_name("title"))
        .and_then(|n| n.text())
        .unwrap();
    assert!(title.starts_with("first violation: "), "{title}");
    let before = frame_text(&doc, frames[at - 1]);
    assert!(before.contains("verdict CLEAN"), "{before}");
    let marked_text = frame_text(&doc, frames[at]);
    assert!(!marked_text.contains("verdict CLEAN"), "{marked_text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_still_svg_is_the_final_frame_alone() {
    let text = recorded("still.svg", Format::SvgStill).await;
    let doc = Document::parse(&text).unwrap();
    assert_root_fits(&doc);
    let frames = frames(&doc);
    assert_eq!(frames.len(), 1);
    let screen = frame_text(&doc, frames[0]);
    assert!(screen.contains("verdict FORK"), "{screen}");
    assert!(!style(&doc).contains("@keyframes"), "a still does not move");
}

#[test]
fn an_unknown_extension_is_refused_before_anything_runs() {
    let out = temp("recording.png");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_forkscope"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["record", "scenarios/seed-incident.toml", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(status.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&status.stderr);
    assert!(stderr.contains(".cast or .svg"), "{stderr}");
    assert!(!out.exists());
    let still_cast = std::process::Command::new(env!("CARGO_BIN_EXE_forkscope"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["record", "scenarios/seed-incident.toml", "--still", "--out"])
        .arg(temp("still.cast"))
        .output()
        .unwrap();
    assert_eq!(still_cast.status.code(), Some(2));
}

#[test]
fn the_shipped_svgs_end_on_their_verdicts() {
    let assets = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets");
    let both = std::fs::read_to_string(assets.join("seed-incident-side-by-side.svg")).unwrap();
    let doc = Document::parse(&both).unwrap();
    let frames = frames(&doc);
    let last = frame_text(&doc, *frames.last().unwrap());
    assert!(
        last.contains("NAIVE")
            && last.contains("FENCED")
            && last.contains("verdict FORK")
            && last.contains("verdict CLEAN"),
        "{last}"
    );
    assert!(
        doc.descendants()
            .any(|n| n.attribute("id") == Some("first-violation"))
    );
    let still = std::fs::read_to_string(assets.join("seed-incident-naive-fork.svg")).unwrap();
    let doc = Document::parse(&still).unwrap();
    assert_eq!(self::frames(&doc).len(), 1);
    assert!(frame_text(&doc, self::frames(&doc)[0]).contains("verdict FORK"));
}
