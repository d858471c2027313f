//! The selected event, explained: what it is, who emitted it, what the client made of it
//! (its belief) beside what really happened (the ground truth the history records).

use super::block;
use super::lanes::Placed;
use crate::tui::theme::Theme;
use forkscope_core::history::{Anomaly, AnomalyKind, Entry, Owed, Record};
use forkscope_core::{Effect, EventId, IdScheme, PayloadKey, Policy, SessionId, StreamId};
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::Line;
use ratatui::widgets::{Clear, Paragraph};

/// Rows the card takes: border, title and three lines.
pub const HEIGHT: u16 = 6;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventCard {
    pub title: String,
    pub lines: Vec<String>,
    /// It is evidence of a violation.
    pub bad: bool,
}

/// `bg:3` from `3fa2…:bg:3`.
fn short_key(key: &str) -> &str {
    key.split_once(':').map_or(key, |(_, rest)| rest)
}

fn who_emitted(key: &str, copied: bool) -> &'static str {
    if copied {
        "copied by the naive server from an older stream's backlog: old content under a new id"
    } else if key
        .parse::<PayloadKey>()
        .is_ok_and(|k| matches!(k.effect(), Effect::Background { .. }))
    {
        "emitted by the server's background emitter"
    } else {
        "emitted by the progress_task tool call"
    }
}

/// How the id of `event` read on the wire, by its stream's id scheme, and what the policy in
/// force does with it on a resume (a keyed id proves nothing to a naive server).
fn wire_id(entries: &[Entry], session: SessionId, event: EventId, policy: Policy) -> String {
    let scheme = entries.iter().find_map(|e| match &e.record {
        Record::StreamOpened {
            session: s,
            stream,
            ids,
            ..
        } if *s == session && *stream == event.stream => Some(*ids),
        _ => None,
    });
    match scheme {
        Some(IdScheme::Bare) => format!(
            "id `{}` on the wire: a bare counter, the client cannot tell which stream",
            event.seq
        ),
        Some(IdScheme::Keyed) if policy == Policy::Fenced => format!(
            "id `{}-{}.<key>` on the wire: names its stream and proves it (fenced checks the key)",
            event.stream, event.seq
        ),
        Some(IdScheme::Keyed) if policy == Policy::Naive => format!(
            "id `{}-{}.<key>` on the wire: names its stream, but naive checks nothing on a resume",
            event.stream, event.seq
        ),
        // An SDK's policy: what it does on a resume, in its own table's words.
        _ => match forkscope_core::resume::sdk::quirks(policy) {
            Some(quirks) => format!(
                "id `{}-{}` on the wire, as {} spells it; on a resume, {}",
                event.stream, event.seq, quirks.sdk, quirks.summary
            ),
            None => format!(
                "id `{}-{}` on the wire: names its stream",
                event.stream, event.seq
            ),
        },
    }
}

/// One application of a side effect: when, from which event, and whether the checker judged
/// it a duplicate.
struct Application {
    at: String,
    event: EventId,
    duplicate: bool,
}

/// What the client did with the side effect `key`: each application.
fn applications(entries: &[Entry], key: &str) -> Vec<Application> {
    entries
        .iter()
        .filter_map(|e| match &e.record {
            Record::Delivered {
                event,
                key: k,
                applied: true,
                ..
            } if &**k == key => Some(Application {
                at: e.at.to_string(),
                event: *event,
                duplicate: e.caused.kinds().contains(AnomalyKind::Duplicate),
            }),
            _ => None,
        })
        .collect()
}

/// The side effect's applications, and whether the checker judged one a duplicate.
/// `gone`: the checker settled the event as never delivered, so "(yet)" would mislead.
fn truth(entries: &[Entry], key: &str, gone: bool) -> (String, bool) {
    let applied = applications(entries, key);
    let duplicate = applied.iter().any(|a| a.duplicate);
    let said = match applied.as_slice() {
        [] if gone => format!("truth: side effect {} never applied", short_key(key)),
        [] => format!("truth: side effect {} not applied (yet)", short_key(key)),
        [once] => format!(
            "truth: side effect {} applied once, at {} ({})",
            short_key(key),
            once.at,
            once.event
        ),
        many => format!(
            "truth: side effect {} applied {}× ({}){}",
            short_key(key),
            many.len(),
            many.iter()
                .map(|a| format!("{} at {}", a.event, a.at))
                .collect::<Vec<_>>()
                .join(", "),
            if duplicate { ": a DUPLICATE" } else { "" }
        ),
    };
    (said, duplicate)
}

/// How the checker settled `event` as not delivered, if it did, from the entries after its
/// emit: lost, or undelivered and told.
fn settled(after: &[Entry], event: EventId) -> Option<&Anomaly> {
    after.iter().find_map(|e| {
        e.caused.anomalies().iter().find(|a| match a {
            Anomaly::Lost { event: e, .. } => *e == event,
            Anomaly::Undelivered {
                owed: Owed::Event { event: e },
                ..
            } => *e == event,
            _ => false,
        })
    })
}

/// The card for the mark `placed`, seen at the instant whose history is `entries` (absolute
/// index of the first: `base`).
/// `policy`: the one in force at that instant.
///
/// What it says is wrong is what the checker tagged the entry with, on the mark's lane.
pub fn describe(
    entries: &[Entry],
    base: usize,
    placed: &Placed,
    policy: Policy,
) -> Option<EventCard> {
    let entry = entries.get(placed.entry.checked_sub(base)?)?;
    let anomalies: Vec<&Anomaly> = entry
        .caused
        .anomalies()
        .iter()
        .filter(|a| placed.mark.stands_for(a.kind()))
        .collect();
    // What the card's own words do not already say, in the checker's sentence.
    let rest = |worded: &[AnomalyKind]| {
        anomalies
            .iter()
            .filter(|a| !worded.contains(&a.kind()))
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
    };
    Some(match &entry.record {
        Record::Emitted {
            session,
            stream,
            seq,
            key,
            copied,
        } => {
            let event = EventId {
                stream: *stream,
                seq: *seq,
            };
            let across = anomalies.iter().find_map(|a| match a {
                Anomaly::Fork {
                    across: Some(across),
                    ..
                } => Some(*across),
                _ => None,
            });
            let orphan = anomalies.iter().find_map(|a| match a {
                Anomaly::Fork { bound, .. } => Some(Some(*bound)),
                Anomaly::Lost { event: lost, .. } if *lost == event => Some(None),
                _ => None,
            });
            let client = entries.iter().find_map(|e| match &e.record {
                Record::Delivered {
                    session: s,
                    event: got,
                    applied,
                    ..
                } if s == session && *got == event => Some((e.at, *applied)),
                _ => None,
            });
            let belief = match (client, orphan) {
                (Some((at, true)), _) => format!("client: applied it at {at}"),
                (Some((at, false)), _) => format!("client: skipped it at {at} (a replay it had)"),
                (None, Some(_)) if let Some(across) = across => format!(
                    "client: never gets it from replica {} — its {stream} is on replica {}; {} \
                     still sends on the connection it left: a FORK across replicas",
                    across.from, across.bound_on, across.from
                ),
                (None, Some(bound)) => format!(
                    "client: never gets it — it is bound to {}; this one is an orphan still \
                     receiving: a FORK",
                    bound.map_or_else(|| "another stream".to_owned(), stream_words)
                ),
                // Settled by the checker later (a loss found when the stream could deliver
                // nothing more, or an undelivered event the client was told of): never "(yet)".
                (None, None) => match settled(&entries[placed.entry - base..], event) {
                    Some(Anomaly::Undelivered { told, at, .. }) => {
                        format!("client: never gets it — UNDELIVERED; it was told at {at}: {told}")
                    }
                    Some(settled) => format!(
                        "client: never gets it — LOST at {}, and nothing told the client",
                        settled.at()
                    ),
                    None => "client: has not received it (yet)".to_owned(),
                },
            };
            let gone =
                orphan.is_some() || settled(&entries[placed.entry - base..], event).is_some();
            let (truth, duplicate) = truth(entries, key, gone);
            let mut lines = vec![
                format!(
                    "payload {} · {} · {}",
                    short_key(key),
                    who_emitted(key, *copied),
                    wire_id(entries, *session, event, policy)
                ),
                belief,
                truth,
            ];
            lines.extend(rest(&[AnomalyKind::Fork, AnomalyKind::Lost]));
            EventCard {
                title: format!("event {event} at {}{}", entry.at, by_words(entry)),
                lines,
                bad: !anomalies.is_empty() || duplicate,
            }
        }
        Record::Delivered {
            session,
            event,
            key,
            applied,
        } => {
            let first = anomalies.iter().find_map(|a| match a {
                Anomaly::Duplicate { first, .. } => Some(*first),
                _ => None,
            });
            let belief = match (applied, first) {
                (true, Some(first)) => format!(
                    "client: applied it, believing it new — but it applied {} before, at {} \
                     from {}: a DUPLICATE",
                    short_key(key),
                    first.at,
                    first.event
                ),
                (true, None) => "client: applied it, the first time".to_owned(),
                (false, _) => {
                    "client: skipped it — its cursor says it has this one (a replay)".to_owned()
                }
            };
            let (truth, _) = truth(entries, key, false);
            let mut lines = vec![
                format!(
                    "payload {} from {} · {}",
                    short_key(key),
                    stream_words(event.stream),
                    wire_id(entries, *session, *event, policy)
                ),
                belief,
                truth,
            ];
            lines.extend(rest(&[AnomalyKind::Duplicate]));
            EventCard {
                title: format!("delivery of {event} at {}", entry.at),
                lines,
                bad: !anomalies.is_empty(),
            }
        }
        other => {
            let mut lines: Vec<String> = other.describe().into_iter().collect();
            lines.extend(rest(&[]));
            EventCard {
                title: format!("{} at {}{}", kind_words(other), entry.at, by_words(entry)),
                lines,
                bad: !anomalies.is_empty(),
            }
        }
    })
}

/// ` by replica A`, for a fact a replica made; nothing in a lab of one.
fn by_words(entry: &Entry) -> String {
    entry
        .by
        .map_or_else(String::new, |b| format!(" by replica {}", b.replica))
}

fn stream_words(stream: StreamId) -> String {
    format!("stream {stream}")
}

fn kind_words(record: &Record) -> &'static str {
    match record {
        Record::Attached { .. } => "attach",
        Record::ResumeAccepted { .. } => "resume",
        Record::ResumeRejected { .. } => "typed rejection",
        Record::Fenced { .. } => "fence",
        Record::Orphaned { .. } => "grace window",
        Record::LateEmitRefused { .. } => "late emit refused",
        Record::StaleWriteRefused { .. } => "stale write refused",
        Record::CallAdopted { .. } => "call adopted",
        Record::CursorMoved { .. } => "cursor move",
        Record::StreamClosed { .. } => "stream closed",
        Record::StreamForgotten { .. } => "stream let go",
        _ => "record",
    }
}

/// Rows the card may grow to, so its sentences wrap instead of being cut.
const MAX_HEIGHT: u16 = 10;

/// Rows the card needs at `width` columns: its border and every line wrapped between words.
pub fn height(card: &EventCard, width: u16) -> u16 {
    let rows = wrapped(card, width).len();
    (2 + u16::try_from(rows).unwrap_or(u16::MAX)).clamp(HEIGHT, MAX_HEIGHT)
}

fn wrapped(card: &EventCard, width: u16) -> Vec<(String, bool)> {
    let inner = usize::from(width.saturating_sub(2));
    std::iter::once((card.title.as_str(), true))
        .chain(card.lines.iter().map(|l| (l.as_str(), false)))
        .flat_map(|(text, title)| {
            super::wrap_words(text, inner)
                .into_iter()
                .map(move |row| (row, title))
        })
        .collect()
}

pub fn render(frame: &mut Frame, area: Rect, card: &EventCard, theme: &Theme) {
    let rows = usize::from(area.height.saturating_sub(2));
    let mut wrapped = wrapped(card, area.width);
    if wrapped.len() > rows {
        // Whatever is left over says so rather than ending mid-sentence without a sign.
        wrapped.truncate(rows);
        if let Some((last, _)) = wrapped.last_mut() {
            let inner = usize::from(area.width.saturating_sub(2));
            while last.chars().count() + 2 > inner && !last.is_empty() {
                let cut = last.rfind(' ').unwrap_or(0);
                last.truncate(cut);
            }
            last.push_str(" …");
        }
    }
    let lines: Vec<Line> = wrapped
        .into_iter()
        .map(|(row, title)| match (title, card.bad) {
            (true, true) => Line::styled(row, theme.bad()),
            (true, false) => Line::styled(row, theme.title()),
            (false, _) => Line::raw(row),
        })
        .collect();
    frame.render_widget(Clear, area);
    frame.render_widget(
        Paragraph::new(lines).block(block("selected event · , . move · Esc clears", theme)),
        area,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use forkscope_core::history::Caused;
    use forkscope_core::{LabTime, SplitMix64, StreamKind};

    /// A keyed id proves its stream only to a server that checks the key.
    #[test]
    fn a_keyed_id_is_described_by_the_policy_in_force() {
        let session = SessionId::generate(&mut SplitMix64::new(3));
        let entries = [Entry {
            at: LabTime::ZERO,
            by: None,
            record: Record::StreamOpened {
                session,
                stream: StreamId(1),
                stream_kind: StreamKind::Standalone,
                ids: IdScheme::Keyed,
                flagged_new: false,
                request: None,
            },
            caused: Caused::NOTHING,
        }];
        let event = EventId {
            stream: StreamId(1),
            seq: 4,
        };
        let fenced = wire_id(&entries, session, event, Policy::Fenced);
        let naive = wire_id(&entries, session, event, Policy::Naive);
        assert!(fenced.contains("proves it"), "{fenced}");
        assert!(naive.contains("naive checks nothing"), "{naive}");
        assert!(!naive.contains("proves"), "{naive}");
        // An SDK's policy is described by its own table, never by naive's sentence.
        for policy in Policy::SDKS {
            let quirks = forkscope_core::resume::sdk::quirks(policy).unwrap();
            let said = wire_id(&entries, session, event, policy);
            assert!(said.contains(quirks.summary), "{policy}: {said}");
            assert!(!said.contains("naive"), "{policy}: {said}");
        }
    }
}
