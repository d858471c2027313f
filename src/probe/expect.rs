//! `--expect FILE`: what a server is known to do, written down, so a change in its findings —
//! a fixed bug or a new one — is noticed. A TOML file maps each case to the verdict it gives
//! (or the verdicts, where the server races):
//!
//! ```toml
//! about = "the official Python SDK, mcp 2.3.0, with an in-memory event store"
//! [cases]
//! call-resume = "gap"
//! standalone-resume = ["gap", "clean_continuation"]  # the lost event is a race
//! unsupported-version = "typed_rejection:405"        # a rejection may name its status
//! cursor-ahead = "not_run"
//! call-resume-after-result = "not_exercised"        # it saw too little to judge
//! ```
//!
//! `not_exercised` is a verdict like the others: a case that starts or stops being exercised
//! is a change.

use super::Report;
use super::cases::CASES;
use forkscope_core::probe::Verdict;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use strum::VariantNames;

#[derive(Debug, thiserror::Error)]
pub enum ExpectError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: Box<toml::de::Error>,
    },
    #[error("{path}: no case named {case} (the cases are: {names})")]
    UnknownCase {
        path: PathBuf,
        case: String,
        names: String,
    },
    #[error(
        "{path}: {case} expects `{word}`, which is not a verdict (one of: {words}, not_run; a typed rejection may name its 4xx status, as typed_rejection:409)"
    )]
    UnknownVerdict {
        path: PathBuf,
        case: String,
        word: String,
        words: String,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    about: Option<String>,
    cases: BTreeMap<String, OneOrMany>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

/// A loaded expectations file.
#[derive(Debug, Clone)]
pub struct Expectations {
    pub path: PathBuf,
    pub about: Option<String>,
    pub cases: BTreeMap<String, Vec<String>>,
}

/// A case whose finding is not what was written down.
#[derive(Debug, Clone, Serialize)]
pub struct Mismatch {
    pub case: String,
    /// Empty when the file says nothing about the case.
    pub expected: Vec<String>,
    pub found: String,
}

/// The comparison, as the report shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Compared {
    pub file: String,
    pub about: Option<String>,
    pub matched: usize,
    pub mismatches: Vec<Mismatch>,
}

pub fn load(path: &Path) -> Result<Expectations, ExpectError> {
    let text = std::fs::read_to_string(path).map_err(|source| ExpectError::Read {
        path: path.to_owned(),
        source,
    })?;
    let file: File = toml::from_str(&text).map_err(|source| ExpectError::Parse {
        path: path.to_owned(),
        source: Box::new(source),
    })?;
    let mut cases = BTreeMap::new();
    for (case, words) in file.cases {
        if !CASES.iter().any(|(n, _)| *n == case) {
            return Err(ExpectError::UnknownCase {
                path: path.to_owned(),
                case,
                names: CASES.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", "),
            });
        }
        let words = match words {
            OneOrMany::One(w) => vec![w],
            OneOrMany::Many(ws) => ws,
        };
        for word in &words {
            let (verdict, status) = word.split_once(':').unwrap_or((word, ""));
            let status_ok = status.is_empty()
                || (verdict == "typed_rejection"
                    && status.parse::<u16>().is_ok_and(|s| (400..500).contains(&s)));
            if !status_ok || (verdict != "not_run" && !Verdict::VARIANTS.contains(&verdict)) {
                return Err(ExpectError::UnknownVerdict {
                    path: path.to_owned(),
                    case,
                    word: word.clone(),
                    words: Verdict::VARIANTS.join(", "),
                });
            }
        }
        cases.insert(case, words);
    }
    Ok(Expectations {
        path: path.to_owned(),
        about: file.about,
        cases,
    })
}

/// Compares each case the report ran with what the file expects. A case the file does not
/// mention is a mismatch too: a new case's finding must be written down before it passes.
pub fn compare(expected: &Expectations, report: &Report) -> Compared {
    let mut matched = 0;
    let mut mismatches = Vec::new();
    for case in &report.cases {
        let word = case.verdict.unwrap_or("not_run");
        let found = match case.status {
            Some(status) => format!("{word}:{status}"),
            None => word.to_owned(),
        };
        match expected.cases.get(case.case) {
            Some(words) if words.iter().any(|w| *w == found || w == word) => matched += 1,
            Some(words) => mismatches.push(Mismatch {
                case: case.case.into(),
                expected: words.clone(),
                found,
            }),
            None => mismatches.push(Mismatch {
                case: case.case.into(),
                expected: Vec::new(),
                found,
            }),
        }
    }
    Compared {
        file: expected.path.display().to_string(),
        about: expected.about.clone(),
        matched,
        mismatches,
    }
}

pub fn text(compared: &Compared) -> String {
    let mut out = format!(
        "expected findings ({}{}): {} match",
        compared.file,
        compared
            .about
            .as_deref()
            .map(|a| format!(", {a}"))
            .unwrap_or_default(),
        compared.matched
    );
    if compared.mismatches.is_empty() {
        out.push('\n');
        return out;
    }
    out.push_str(&format!(", {} changed:\n", compared.mismatches.len()));
    for m in &compared.mismatches {
        if m.expected.is_empty() {
            out.push_str(&format!(
                "  {}: found {}, and the file says nothing of it\n",
                m.case, m.found
            ));
        } else {
            out.push_str(&format!(
                "  {}: expected {}, found {}\n",
                m.case,
                m.expected.join(" or "),
                m.found
            ));
        }
    }
    out
}
