//! The report as a person reads it (`--format text`): the header, one line per case, a
//! violated case's evidence — a connection to a line, runs folded — and the summary.

use super::{Outcome, Report, expect};
use forkscope_core::probe::{Connection, Item};
use std::fmt::Write as _;

pub fn text(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "forkscope probe {}", report.url);
    let revisions = match report.revisions.as_slice() {
        [] => "no revision probed: no case ran".to_owned(),
        probed => format!("probed {}", probed.join(" and ")),
    };
    let _ = writeln!(out, "  server      {} ({revisions})", report.server);
    let _ = writeln!(
        out,
        "  tool: {}",
        report
            .call_tool
            .as_deref()
            .unwrap_or("none: no tool has an integer argument that sets how many notifications it sends (name one with --tool and --count-arg), so the call cases are not run")
    );
    let _ = writeln!(out, "  standalone: {}", report.standalone);
    let _ = writeln!(out);
    let width = report.cases.iter().map(|c| c.case.len()).max().unwrap_or(0);
    let mut before: Option<String> = None;
    for c in &report.cases {
        let mark = match c.outcome {
            Outcome::Holds => "holds",
            Outcome::Violated => "VIOLATED",
            Outcome::NotRun => "not run",
            Outcome::NotExercised => "not exercised",
        };
        let says = match c.outcome {
            Outcome::NotRun => c.why.clone(),
            _ => format!("{} — {}", c.says, c.why),
        };
        // A case that came out word for word as the one before says so in a word: a server
        // that loses every session would otherwise print one paragraph eighteen times.
        if before.as_deref() == Some(format!("{mark}{says}").as_str())
            && c.connections.is_empty()
            && c.notes.is_empty()
        {
            let _ = writeln!(out, "  {mark:13}  {:width$}  the same", c.case);
            continue;
        }
        before = Some(format!("{mark}{says}"));
        let _ = writeln!(out, "  {mark:13}  {:width$}  {says}", c.case);
        // What a fault case did is shown whatever it found; what a task case asked and was
        // answered, when it found a violation (`--format json` and `--watch` have it always).
        if super::cases::is_fault_case(c.case) || matches!(c.outcome, Outcome::Violated) {
            for note in &c.notes {
                let _ = writeln!(out, "  {:15}{:width$}  {note}", "", "");
            }
        }
        if matches!(c.outcome, Outcome::Violated) {
            let _ = writeln!(out, "  {:15}{:width$}  ({})", "", "", c.does);
            for line in evidence_lines(&c.connections) {
                let _ = writeln!(out, "  {:15}{:width$}  {line}", "", "");
            }
        }
    }
    let holds = report.count(|o| matches!(o, Outcome::Holds));
    let violated = report.count(|o| matches!(o, Outcome::Violated));
    let not_run = report.count(|o| matches!(o, Outcome::NotRun));
    let not_exercised = report.count(|o| matches!(o, Outcome::NotExercised));
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{} cases: {holds} hold, {violated} violated, {not_run} not run, {not_exercised} not exercised",
        report.cases.len()
    );
    let _ = writeln!(
        out,
        "(p7: progress 7 of a call · #7: the 7th numbered event of a stream · priming: an event with only an id)"
    );
    if let Some(compared) = &report.expected {
        out.push_str(&expect::text(compared));
    }
    out
}

/// The connections one per line, a run of connections that differ only in their label folded
/// into one line (`C–AY (49×) GET …`): a case that resumes 49 times alike says it once.
pub fn evidence_lines(connections: &[Connection]) -> Vec<String> {
    let mut lines: Vec<(String, String, usize, String)> = Vec::new();
    for c in connections {
        let rest = evidence_after_label(c);
        match lines.last_mut() {
            Some((_, last, n, same)) if *same == rest => {
                *last = c.label.clone();
                *n += 1;
            }
            _ => lines.push((c.label.clone(), c.label.clone(), 1, rest)),
        }
    }
    lines
        .into_iter()
        .map(|(first, last, n, rest)| match n {
            1 => format!("{first} {rest}"),
            n => format!("{first}–{last} ({n}×) {rest}"),
        })
        .collect()
}

/// One connection in a line: the request, the answer, the events (runs folded), the end.
pub fn evidence(c: &Connection) -> String {
    format!("{} {}", c.label, evidence_after_label(c))
}

fn evidence_after_label(c: &Connection) -> String {
    let answer = match &c.answer {
        forkscope_core::probe::Answer::Stream { status, .. } => format!("{status} stream"),
        forkscope_core::probe::Answer::Json { status, .. } => format!("{status} JSON"),
        forkscope_core::probe::Answer::Rejected { status, reason } => match reason {
            Some(r) => format!("{status} \"{r}\""),
            None => status.to_string(),
        },
        forkscope_core::probe::Answer::NoAnswer { why } => why.clone(),
    };
    let end = match c.end {
        forkscope_core::probe::End::Open => "still open",
        forkscope_core::probe::End::DroppedByProbe => "dropped by the probe",
        forkscope_core::probe::End::ClosedByServer => "closed by the server",
        forkscope_core::probe::End::Broken => "broke off",
    };
    let events = fold(&c.events.iter().map(|r| &r.item).collect::<Vec<_>>());
    if matches!(c.answer, forkscope_core::probe::Answer::Stream { .. }) {
        format!("{} → {answer}: {events} ({end})", c.request)
    } else {
        format!("{} → {answer}", c.request)
    }
}

/// `p1–p20, result`: consecutive numbers of one stream folded into a run.
fn fold(items: &[&Item]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut run: Option<(&Item, u64, u64)> = None;
    let number = |i: &Item| match i {
        Item::Progress { n, .. } | Item::Numbered { n, .. } => Some(*n),
        _ => None,
    };
    let same_stream = |a: &Item, b: &Item| match (a, b) {
        (Item::Progress { token: x, .. }, Item::Progress { token: y, .. }) => x == y,
        (Item::Numbered { channel: x, .. }, Item::Numbered { channel: y, .. }) => x == y,
        _ => false,
    };
    let flush = |run: &mut Option<(&Item, u64, u64)>, parts: &mut Vec<String>| {
        if let Some((item, from, to)) = run.take() {
            let prefix = if matches!(item, Item::Progress { .. }) {
                "p"
            } else {
                "#"
            };
            parts.push(if from == to {
                format!("{prefix}{from}")
            } else {
                format!("{prefix}{from}–{prefix}{to}")
            });
        }
    };
    for item in items {
        match (number(item), &mut run) {
            (Some(n), Some((first, _, to))) if same_stream(first, item) && n == *to + 1 => *to = n,
            (Some(n), _) => {
                flush(&mut run, &mut parts);
                run = Some((item, n, n));
            }
            (None, _) => {
                flush(&mut run, &mut parts);
                parts.push(item.short());
            }
        }
    }
    flush(&mut run, &mut parts);
    if parts.is_empty() {
        return "no events".into();
    }
    if parts.len() > 14 {
        let more = parts.len() - 12;
        parts.truncate(12);
        parts.push(format!("… {more} more"));
    }
    parts.join(", ")
}
