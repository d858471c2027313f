//! `forkscope probe --format junit`: the report as JUnit XML, the one format every CI renders
//! (GitHub, GitLab, Jenkins). One `testcase` per case. What fails is what the exit status
//! fails on: without `--expect`, a VIOLATED case; with it, a case whose finding changed from
//! the file's (a violation written down is then a pass, as the exit status says). `not run` and
//! `not exercised` are skipped, with their reason: neither a pass nor a failure.

use super::{CaseReport, Outcome, Report, evidence_lines};
use std::fmt::Write as _;

/// How one case reads in JUnit.
enum Fate {
    Passed,
    Failed { message: String, body: String },
    Skipped(String),
}

fn fate(report: &Report, case: &CaseReport) -> Fate {
    let verdict = case.verdict.unwrap_or("not_run");
    let evidence = || {
        let mut body = format!("{} — {}\n({})\n", case.says, case.why, case.does);
        for line in evidence_lines(&case.connections).iter().chain(&case.notes) {
            let _ = writeln!(body, "{line}");
        }
        body
    };
    if let Some(compared) = &report.expected {
        return match compared.mismatches.iter().find(|m| m.case == case.case) {
            Some(m) if m.expected.is_empty() => Fate::Failed {
                message: format!(
                    "found {}, and {} says nothing of it",
                    m.found, compared.file
                ),
                body: evidence(),
            },
            Some(m) => Fate::Failed {
                message: format!("expected {}, found {}", m.expected.join(" or "), m.found),
                body: evidence(),
            },
            None => match case.outcome {
                Outcome::NotRun | Outcome::NotExercised => Fate::Skipped(skip_reason(case)),
                _ => Fate::Passed,
            },
        };
    }
    match case.outcome {
        Outcome::Holds => Fate::Passed,
        Outcome::Violated => Fate::Failed {
            message: format!("VIOLATED {verdict}: {}", case.says),
            body: evidence(),
        },
        Outcome::NotRun | Outcome::NotExercised => Fate::Skipped(skip_reason(case)),
    }
}

fn skip_reason(case: &CaseReport) -> String {
    match case.outcome {
        Outcome::NotRun => format!("not run: {}", case.why),
        _ => format!("not exercised: {} — {}", case.says, case.why),
    }
}

/// The report as one JUnit `testsuites` document.
pub fn junit(report: &Report) -> String {
    let fates: Vec<Fate> = report.cases.iter().map(|c| fate(report, c)).collect();
    let failures = fates
        .iter()
        .filter(|f| matches!(f, Fate::Failed { .. }))
        .count();
    let skipped = fates
        .iter()
        .filter(|f| matches!(f, Fate::Skipped(_)))
        .count();
    let seconds: f64 = report
        .cases
        .iter()
        .map(|c| c.elapsed_ms as f64)
        .sum::<f64>()
        / 1000.0;
    let suite = format!("forkscope probe {}", report.url);
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites name=\"{}\" tests=\"{}\" failures=\"{failures}\" errors=\"0\" skipped=\"{skipped}\" time=\"{seconds:.3}\">",
        escape(&suite),
        report.cases.len()
    );
    let _ = writeln!(
        out,
        "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\" errors=\"0\" skipped=\"{skipped}\" time=\"{seconds:.3}\">",
        escape(&suite),
        report.cases.len()
    );
    let _ = writeln!(out, "    <properties>");
    let revisions = report.revisions.join(" ");
    for (name, value) in [
        ("server", report.server.as_str()),
        ("protocol", report.protocol.as_str()),
        ("revisions", revisions.as_str()),
        ("tool", report.call_tool.as_deref().unwrap_or("none")),
        ("standalone", report.standalone.as_str()),
    ] {
        let _ = writeln!(
            out,
            "      <property name=\"{name}\" value=\"{}\"/>",
            escape(value)
        );
    }
    if let Some(compared) = &report.expected {
        let _ = writeln!(
            out,
            "      <property name=\"expect\" value=\"{}\"/>",
            escape(&compared.file)
        );
    }
    let _ = writeln!(out, "    </properties>");
    for (case, fate) in report.cases.iter().zip(&fates) {
        let _ = write!(
            out,
            "    <testcase classname=\"forkscope.probe\" name=\"{}\" time=\"{:.3}\"",
            escape(case.case),
            case.elapsed_ms as f64 / 1000.0
        );
        match fate {
            Fate::Passed => {
                let _ = writeln!(out, ">");
                let line = format!(
                    "{} {} — {}",
                    case.verdict.unwrap_or("not_run"),
                    case.says,
                    case.why
                );
                let _ = writeln!(out, "      <system-out>{}</system-out>", escape(&line));
                let _ = writeln!(out, "    </testcase>");
            }
            Fate::Failed { message, body } => {
                let _ = writeln!(out, ">");
                let _ = writeln!(
                    out,
                    "      <failure message=\"{}\" type=\"{}\">{}</failure>",
                    escape(message),
                    case.verdict.unwrap_or("not_run"),
                    escape(body)
                );
                let _ = writeln!(out, "    </testcase>");
            }
            Fate::Skipped(why) => {
                let _ = writeln!(out, ">");
                let _ = writeln!(out, "      <skipped message=\"{}\"/>", escape(why));
                let _ = writeln!(out, "    </testcase>");
            }
        }
    }
    let _ = writeln!(out, "  </testsuite>");
    let _ = writeln!(out, "</testsuites>");
    out
}

/// Text as XML character data or an attribute value: a server's answer quoted as evidence may
/// hold any character, line breaks kept.
fn escape(text: &str) -> String {
    crate::xml::escape(text, crate::xml::Controls::Replace)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::expect::{Compared, Mismatch};

    fn case(name: &'static str, outcome: Outcome, verdict: Option<&'static str>) -> CaseReport {
        CaseReport {
            case: name,
            does: "does a thing",
            outcome,
            verdict,
            status: None,
            says: "says <it> & \"more\"\u{1}".into(),
            why: "because".into(),
            marked: Vec::new(),
            connections: Vec::new(),
            elapsed_ms: 1_250,
            notes: Vec::new(),
        }
    }

    fn report() -> Report {
        Report::new(
            "http://127.0.0.1:1/mcp".into(),
            "srv".into(),
            "2025-11-25".into(),
            None,
            "none".into(),
            vec![
                case("call-resume", Outcome::Holds, Some("clean_continuation")),
                case(
                    "resume-while-old-open",
                    Outcome::Violated,
                    Some("two_live_streams"),
                ),
                case("cursor-ahead", Outcome::NotRun, None),
                case("burst-order", Outcome::NotExercised, Some("not_exercised")),
            ],
        )
    }

    /// Each testcase's fate, read back by an XML parser.
    fn parsed(xml: &str) -> Vec<(String, &'static str)> {
        let doc = roxmltree::Document::parse(xml).expect("well-formed XML");
        let suite = doc
            .descendants()
            .find(|n| n.has_tag_name("testsuite"))
            .unwrap();
        suite
            .children()
            .filter(|n| n.has_tag_name("testcase"))
            .map(|n| {
                let fate = if n.children().any(|c| c.has_tag_name("failure")) {
                    "failure"
                } else if n.children().any(|c| c.has_tag_name("skipped")) {
                    "skipped"
                } else {
                    "passed"
                };
                (n.attribute("name").unwrap().to_owned(), fate)
            })
            .collect()
    }

    #[test]
    fn a_violation_fails_and_an_unjudged_case_is_skipped() {
        let xml = junit(&report());
        assert_eq!(
            parsed(&xml),
            [
                ("call-resume".to_owned(), "passed"),
                ("resume-while-old-open".to_owned(), "failure"),
                ("cursor-ahead".to_owned(), "skipped"),
                ("burst-order".to_owned(), "skipped"),
            ]
        );
        let doc = roxmltree::Document::parse(&xml).unwrap();
        let root = doc.root_element();
        assert_eq!(root.attribute("tests"), Some("4"));
        assert_eq!(root.attribute("failures"), Some("1"));
        assert_eq!(root.attribute("skipped"), Some("2"));
        assert_eq!(root.attribute("time"), Some("5.000"));
        let failure = doc
            .descendants()
            .find(|n| n.has_tag_name("failure"))
            .unwrap();
        assert_eq!(failure.attribute("type"), Some("two_live_streams"));
        assert!(
            failure
                .text()
                .unwrap()
                .contains("says <it> & \"more\"\u{FFFD}")
        );
    }

    #[test]
    fn with_expectations_a_changed_finding_fails_and_a_written_violation_passes() {
        let mut report = report();
        report.expected = Some(Compared {
            file: "findings.toml".into(),
            about: None,
            matched: 3,
            mismatches: vec![Mismatch {
                case: "call-resume".into(),
                expected: vec!["duplicate".into()],
                found: "clean_continuation".into(),
            }],
        });
        let xml = junit(&report);
        assert_eq!(
            parsed(&xml),
            [
                ("call-resume".to_owned(), "failure"),
                ("resume-while-old-open".to_owned(), "passed"),
                ("cursor-ahead".to_owned(), "skipped"),
                ("burst-order".to_owned(), "skipped"),
            ]
        );
        assert!(xml.contains("expected duplicate, found clean_continuation"));
    }
}
