//! The server's side under 2026-07-28: no session and no stream, so its tasks — each one's
//! status, steps applied, epoch, and what the checker knows of it (found again by its key,
//! adopted, orphaned, a second run of its call) — named as their lanes are (`t` and the short
//! id).

use super::block;
use crate::lab::Snapshot;
use crate::tui::theme::Theme;
use forkscope_core::history::TaskLine;
use forkscope_core::vocabulary::TaskStatus;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

/// `hidden`: predict, then reveal — whether a task is an orphan or a run again of its call is
/// the checker's verdict, so it waits for `V`.
pub fn render(frame: &mut Frame, area: Rect, snap: &Snapshot, hidden: bool, theme: &Theme) {
    let rows = usize::from(area.height.saturating_sub(2));
    let inner = usize::from(area.width.saturating_sub(2));
    let lines: Vec<Line> = lines(&snap.view.tasks, rows, inner, hidden, theme)
        .into_iter()
        .map(|l| super::clip(l, inner))
        .collect();
    frame.render_widget(
        Paragraph::new(lines).block(block("server · tasks", theme)),
        area,
    );
}

/// The newest tasks that fit `rows`, oldest first, and how many more there are; each line in
/// full where it fits `width`, else in its short form.
pub fn lines(
    tasks: &[TaskLine],
    rows: usize,
    width: usize,
    hidden: bool,
    theme: &Theme,
) -> Vec<Line<'static>> {
    if tasks.is_empty() {
        return vec![
            Line::styled("no task yet", theme.dim()),
            Line::styled("X calls progress_task as a task", theme.dim()),
        ];
    }
    let shown = if tasks.len() > rows {
        rows.saturating_sub(1)
    } else {
        tasks.len()
    };
    let mut lines = Vec::with_capacity(shown + 1);
    if shown < tasks.len() {
        lines.push(Line::styled(
            format!("+{} older task(s)", tasks.len() - shown),
            theme.dim(),
        ));
    }
    let forms = [(true, false), (false, false), (false, true)];
    lines.extend(tasks[tasks.len() - shown..].iter().map(|t| {
        super::fit(
            forms
                .map(|(epoch, brief)| line(t, (epoch, brief, hidden), theme))
                .into(),
            width,
        )
    }));
    lines
}

/// `epoch`: say the epoch; `brief`: each mark without its words; `hidden`: without the
/// checker's verdict on it (orphan, a run again).
fn line(
    task: &TaskLine,
    (epoch, brief, hidden): (bool, bool, bool),
    theme: &Theme,
) -> Line<'static> {
    let (status, style) = match task.ended {
        None | Some(TaskStatus::Working) => ("working", theme.good()),
        Some(TaskStatus::Completed) => ("completed", theme.good()),
        Some(TaskStatus::Cancelled) => ("cancelled", theme.warn()),
        Some(TaskStatus::Failed) => ("failed", theme.bad()),
    };
    let mut spans = vec![
        Span::styled(format!("t{} ", task.id.short()), theme.key()),
        Span::styled(format!("{status:<9} "), style),
        Span::raw(format!("{:>3}/{:<3}", task.done, task.of)),
    ];
    let mut flag = |long: String, short: String, style| {
        spans.push(Span::styled(if brief { short } else { long }, style));
    };
    if epoch {
        flag(
            format!(" epoch {}", task.epoch.max(1)),
            String::new(),
            theme.dim(),
        );
    }
    if task.epoch > 1 {
        flag(
            " □ adopted".into(),
            format!(" □e{}", task.epoch),
            theme.warn(),
        );
    }
    if task.found_again > 0 {
        let n = task.found_again;
        flag(
            format!(" ↻×{n} found by key"),
            format!(" ↻×{n}"),
            theme.good(),
        );
    }
    // Which of its call's tasks it is, as the checker counted them: past 1, the call ran again.
    let run = task.run;
    if run > 1 && !hidden {
        flag(
            format!(" ⇉ run {run} of its call"),
            format!(" ⇉{run}"),
            theme.bad(),
        );
    }
    if task.orphaned && !hidden {
        flag(" ⊗ orphan".into(), " ⊗".into(), theme.bad());
    }
    Line::from(spans)
}

#[cfg(test)]
mod tests {
    use super::*;
    use forkscope_core::ids::{SplitMix64, TaskId};

    const THEME: Theme = Theme { color: false };

    fn task(seed: u64) -> TaskLine {
        TaskLine {
            id: TaskId::generate(&mut SplitMix64::new(seed)),
            op: "k".into(),
            ended: None,
            done: 2,
            of: 8,
            epoch: 1,
            named: true,
            orphaned: false,
            found_again: 0,
            run: 1,
        }
    }

    fn text(line: &Line) -> String {
        line.spans.iter().map(|s| s.content.as_ref()).collect()
    }

    #[test]
    fn each_task_says_its_state_and_what_befell_it_and_the_oldest_give_way() {
        let orphan = TaskLine {
            orphaned: true,
            named: false,
            ..task(1)
        };
        let found = TaskLine {
            ended: Some(TaskStatus::Completed),
            done: 8,
            epoch: 2,
            found_again: 1,
            ..task(2)
        };
        let again = TaskLine { run: 3, ..task(3) };
        let shown: Vec<String> = lines(
            &[orphan.clone(), found.clone(), again.clone()],
            5,
            80,
            false,
            &THEME,
        )
        .iter()
        .map(text)
        .collect();
        assert!(shown[0].starts_with(&format!("t{} working", orphan.id.short())));
        assert!(
            shown[0].contains("2/8") && shown[0].contains("⊗ orphan"),
            "{shown:?}"
        );
        assert!(shown[1].contains("completed") && shown[1].contains("8/8"));
        assert!(shown[1].contains("□ adopted") && shown[1].contains("↻×1 found by key"));
        // The same call's third task: a call run again.
        assert!(shown[2].contains("⇉ run 3 of its call"), "{shown:?}");
        assert!(!shown[0].contains('⇉') && !shown[1].contains('⇉'));
        // While a room predicts, the checker's word on each waits for V; the state does not.
        let hidden: Vec<String> =
            lines(&[orphan.clone(), found.clone(), again], 5, 80, true, &THEME)
                .iter()
                .map(text)
                .collect();
        assert!(
            hidden.iter().all(|l| !l.contains('⊗') && !l.contains('⇉')),
            "{hidden:?}"
        );
        assert!(hidden[1].contains("↻×1 found by key"), "{hidden:?}");
        let many: Vec<TaskLine> = (0..6).map(task).collect();
        let shown = lines(&many, 3, 80, false, &THEME);
        assert_eq!(shown.len(), 3);
        assert_eq!(text(&shown[0]), "+4 older task(s)");
        assert!(
            lines(&[], 3, 80, false, &THEME)
                .iter()
                .map(text)
                .any(|l| l == "no task yet")
        );
    }
}
