//! A lab of replicas, in place of the server's streams: each replica (up, partitioned or
//! killed; the balancer's next; which stream deliveries it runs, on which epoch and connection,
//! and which of them are orphans now; what it sent and what the store refused it; what it did
//! last), then the store's record of each of the client's streams (epoch, owner, high-water,
//! a tool call's lease). The chosen replica, the one the replica keys act on, is marked.

use super::{block, fields, shorten};
use crate::lab::replicas::{Held, ReplicaState, ReplicaView, ReplicasView, StoredStream};
use crate::tui::theme::Theme;
use forkscope_core::history::{Entry, Record};
use forkscope_core::replica::RecordState;
use forkscope_core::{LabTime, ReplicaId, SessionId, StreamId, StreamKind};
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

/// Facts of a replica's recent list shown at most, newest last.
const FACTS: usize = 3;

/// Replica A: the one the replica keys act on until another is chosen.
pub fn first() -> ReplicaId {
    ReplicaId::new(0).unwrap_or_else(|| unreachable!("a lab's replicas start at A"))
}

/// `recent`: the lab's history, for the store's last refusal of each replica's write in the
/// client's `session`.
pub fn render(
    frame: &mut Frame,
    area: Rect,
    view: &ReplicasView,
    recent: &[Entry],
    session: Option<SessionId>,
    chosen: ReplicaId,
    theme: &Theme,
) {
    let inner = usize::from(area.width.saturating_sub(2));
    let rows = usize::from(area.height.saturating_sub(2));
    let refused: Vec<Option<Refused>> = view
        .replicas
        .iter()
        .map(|r| last_refusal(recent, session, r))
        .collect();
    let lines = lines(view, &refused, chosen, inner, rows, theme);
    // A short border drops the store's name first: the routing is what the keys change.
    let title = format!(
        "replicas · {} · store {}",
        view.routing.as_str(),
        view.store
    );
    let title = if title.chars().count() + 4 <= inner + 2 {
        title
    } else {
        format!("replicas · {}", view.routing.as_str())
    };
    frame.render_widget(Paragraph::new(lines).block(block(&title, theme)), area);
}

/// The store's last refusal of a write by `replica`: the fence across replicas at work, kept
/// in view after newer facts while it is still news. It goes when the replica holds the stream
/// at a newer epoch than the one refused, and with a restart (its count starts again at 0).
fn last_refusal(
    recent: &[Entry],
    session: Option<SessionId>,
    replica: &ReplicaView,
) -> Option<Refused> {
    if replica.late_writes_refused == 0 {
        return None;
    }
    let refused = recent.iter().rev().find_map(|e| match &e.record {
        Record::StaleWriteRefused {
            session: of,
            stream,
            epoch,
            current,
            holder,
            ..
        } if Some(*of) == session && e.by.is_some_and(|b| b.replica == replica.id) => {
            Some(Refused {
                replica: replica.id,
                stream: *stream,
                epoch: *epoch,
                current: *current,
                holder: *holder,
                at: e.at,
            })
        }
        _ => None,
    })?;
    let moved_on = replica
        .holds
        .iter()
        .any(|h| h.stream == refused.stream && h.epoch.is_some_and(|e| e > refused.epoch));
    (!moved_on).then_some(refused)
}

/// A write the store refused: `replica`'s, on `stream` at `epoch`, when the stream was at
/// `current`, held by `holder`.
#[derive(Clone, Copy, Debug)]
struct Refused {
    replica: ReplicaId,
    stream: StreamId,
    epoch: u64,
    current: u64,
    holder: Option<ReplicaId>,
    at: LabTime,
}

impl Refused {
    /// In words that name both replicas: the one refused, and the one holding the stream's
    /// newer epoch (which may be the same replica's later attach).
    fn said(&self) -> String {
        let (r, s, e, c) = (self.replica, self.stream, self.epoch, self.current);
        let held = match self.holder {
            Some(h) if h == r => format!(", held by {h} (its newer attach)"),
            Some(h) => format!(", held by {h}"),
            None => String::new(),
        };
        format!("{r}'s write on {s} refused: epoch {e} < {c}{held}")
    }

    /// The longest of its wordings that fits `width`; each names the replica refused and the
    /// holder.
    fn fitted(&self, width: usize) -> String {
        let (r, s, e, c) = (self.replica, self.stream, self.epoch, self.current);
        let holder = self
            .holder
            .map_or_else(|| "?".to_owned(), |h| h.to_string());
        let forms = [
            format!("{} at {}", self.said(), self.at),
            self.said(),
            format!("{r} refused on {s}: epoch {e} < {c}, held by {holder}"),
            format!("{r} refused on {s}: ep {e} < {c}, {holder} holds"),
            format!("{r} on {s}: ep {e}<{c}, {holder} holds"),
        ];
        let fits = forms.iter().find(|f| f.chars().count() <= width);
        shorten(fits.unwrap_or(&forms[4]), width)
    }
}

/// How many rows each part gets: every replica's state first, then a line of the store, then
/// the store's last refusal of each replica, what each replica holds, the rest of the store,
/// and last what each did (rows too few for every replica's next fact go to the chosen one's).
#[derive(Debug, PartialEq, Eq)]
struct Rows {
    refusals: bool,
    holds: bool,
    facts: usize,
    store: usize,
    /// More facts of the chosen replica.
    chosen: usize,
}

fn share(replicas: usize, refused: usize, stored: usize, rows: usize) -> Rows {
    let mut left = rows.saturating_sub(replicas);
    let mut take = |n: usize| {
        let ok = left >= n;
        if ok {
            left -= n;
        }
        ok
    };
    let mut store = usize::from(take(1));
    let refusals = take(refused);
    let holds = take(replicas);
    while store < stored.max(1) && take(1) {
        store += 1;
    }
    let mut facts = 0;
    while facts < FACTS && take(replicas) {
        facts += 1;
    }
    let chosen = left.min(FACTS - facts);
    Rows {
        refusals,
        holds,
        facts,
        store,
        chosen,
    }
}

fn lines(
    view: &ReplicasView,
    refused: &[Option<Refused>],
    chosen: ReplicaId,
    width: usize,
    rows: usize,
    theme: &Theme,
) -> Vec<Line<'static>> {
    let count = refused.iter().flatten().count();
    let share = share(view.replicas.len(), count, view.streams.len(), rows);
    let mut lines = Vec::new();
    for (replica, refusal) in view.replicas.iter().zip(refused) {
        lines.push(fields(header(replica, replica.id == chosen, theme), width));
        if let Some(refusal) = refusal.as_ref().filter(|_| share.refusals) {
            lines.push(Line::styled(
                format!("   × {}", refusal.fitted(width.saturating_sub(5))),
                theme.warn(),
            ));
        }
        if share.holds {
            lines.push(fields(holds(&replica.holds, theme), width));
        }
        let more = if replica.id == chosen {
            share.chosen
        } else {
            0
        };
        let recent: Vec<&String> = replica.recent.iter().collect();
        let facts = recent.len().min(share.facts + more);
        for fact in &recent[recent.len() - facts..] {
            lines.push(Line::styled(
                format!("   {}", shorten(fact, width.saturating_sub(3))),
                theme.dim(),
            ));
        }
    }
    lines.extend(store(view, share.store, width, theme));
    lines
}

/// `▸A up ←next  sent 12  refused 1  routed 5  fenced 0  adopted 0`: whole fields, counts
/// above zero first, the ones that do not fit left out.
fn header(replica: &ReplicaView, chosen: bool, theme: &Theme) -> Vec<Vec<Span<'static>>> {
    let name = if chosen {
        theme.key().add_modifier(Modifier::REVERSED)
    } else {
        theme.key()
    };
    let (state, style) = match replica.state {
        ReplicaState::Up => ("up", theme.good()),
        ReplicaState::Partitioned => ("partitioned", theme.warn()),
        ReplicaState::Killed => ("killed", theme.bad()),
    };
    let mut head = vec![
        Span::styled(if chosen { "▸" } else { " " }, theme.key()),
        Span::styled(replica.id.to_string(), name),
        Span::styled(format!(" {state}"), style),
    ];
    if replica.next {
        head.push(Span::styled(" ←next", theme.accent()));
    }
    let count = |word: &str, n: u64, style: Style| {
        vec![
            Span::styled(format!("  {word} "), theme.dim()),
            Span::styled(n.to_string(), style),
        ]
    };
    let counted = |n: u64| if n > 0 { theme.warn() } else { theme.text() };
    let counts = [
        ("sent", replica.sent, theme.text()),
        (
            "refused",
            replica.late_writes_refused,
            counted(replica.late_writes_refused),
        ),
        (
            "fenced",
            replica.deliveries_fenced,
            counted(replica.deliveries_fenced),
        ),
        ("adopted", replica.calls_adopted, theme.text()),
        ("resumes", replica.resumes, theme.text()),
        ("routed", replica.forwarded, theme.text()),
    ];
    // What happened before what did not: counts above zero first (in their order), so a narrow
    // pane leaves out zeros, not the count that tells the story.
    let mut fields = vec![head];
    for nonzero in [true, false] {
        fields.extend(
            counts
                .iter()
                .filter(|(_, n, _)| (*n > 0) == nonzero)
                .map(|(word, n, style)| count(word, *n, *style)),
        );
    }
    fields
}

/// `   sends s2 ep 2 conn 3 · s1 ep 1 conn 1 orphan`: each delivery it runs, the client's first.
fn holds(held: &[Held], theme: &Theme) -> Vec<Vec<Span<'static>>> {
    if held.is_empty() {
        return vec![vec![Span::styled("   sends nothing", theme.dim())]];
    }
    let mut ordered: Vec<&Held> = held.iter().filter(|h| !h.superseded).collect();
    ordered.extend(held.iter().rev().filter(|h| h.superseded));
    let mut out = vec![vec![Span::styled("   sends", theme.dim())]];
    for (i, h) in ordered.into_iter().enumerate() {
        let mut field = vec![Span::styled(if i == 0 { " " } else { " · " }, theme.dim())];
        field.push(Span::styled(h.stream.to_string(), theme.stream(h.stream.0)));
        if let Some(epoch) = h.epoch {
            field.push(Span::raw(format!(" ep {epoch}")));
        }
        field.push(Span::styled(format!(" conn {}", h.connection), theme.dim()));
        if h.superseded {
            field.push(Span::styled(" orphan", theme.warn()));
        }
        out.push(field);
    }
    out
}

/// `store  s1 GET  live      ep 2 owner B  hw 14  lease ep 1 A 3 done`, newest streams kept.
fn store(view: &ReplicasView, rows: usize, width: usize, theme: &Theme) -> Vec<Line<'static>> {
    if rows == 0 {
        return Vec::new();
    }
    let label = |first: bool| Span::styled(if first { "store " } else { "      " }, theme.dim());
    if let Some(error) = &view.store_error {
        return vec![fields(
            vec![
                vec![label(true)],
                vec![Span::styled(
                    shorten(error, width.saturating_sub(6)),
                    theme.bad(),
                )],
            ],
            width,
        )];
    }
    if view.streams.is_empty() {
        return vec![Line::from(vec![
            label(true),
            Span::styled("no stream of the client's yet", theme.dim()),
        ])];
    }
    let skip = view.streams.len().saturating_sub(rows);
    let shown: Vec<&StoredStream> = view.streams.iter().skip(skip).collect();
    // One wording for every row, the longest that fits them all: the columns stay aligned,
    // and a call's lease (epoch, holder, steps done) is the last thing a narrow pane gives up.
    let worded = |brief: u8| -> Vec<Line<'static>> {
        shown
            .iter()
            .enumerate()
            .map(|(i, s)| Line::from(record(s, label(i == 0), brief, theme)))
            .collect()
    };
    for brief in 0..BRIEFEST {
        let lines = worded(brief);
        if lines.iter().all(|l| l.width() <= width) {
            return lines;
        }
    }
    worded(BRIEFEST)
        .into_iter()
        .map(|l| super::clip(l, width))
        .collect()
}

/// How far [`record`] can shorten a record's wording.
const BRIEFEST: u8 = 2;

/// A stream's record: `s2  POST finished ep 1 owner B  hw 9  lease ep 2 B 8 done`; `brief` 1
/// drops the words a reader can do without, 2 the padding too.
fn record(s: &StoredStream, label: Span<'static>, brief: u8, theme: &Theme) -> Vec<Span<'static>> {
    let kind = match s.kind {
        StreamKind::Standalone => "GET ",
        StreamKind::Request => "POST",
    };
    let (state, style) = match s.state {
        RecordState::Live => ("live", theme.good()),
        RecordState::Finished => ("finished", theme.good()),
        RecordState::Fenced => ("fenced", theme.accent()),
    };
    let (gap, pad) = if brief >= 2 { (" ", 0) } else { ("  ", 8) };
    let mut out = vec![
        label,
        Span::styled(
            format!("{:<3}", s.stream.to_string()),
            theme.stream(s.stream.0),
        ),
        Span::styled(format!(" {kind}"), theme.dim()),
        Span::styled(format!(" {state:<pad$} "), style),
        Span::styled("ep ", theme.dim()),
        Span::raw(s.epoch.to_string()),
        Span::styled(if brief >= 1 { " " } else { " owner " }, theme.dim()),
        Span::styled(s.owner.clone(), theme.key()),
        Span::styled(format!("{gap}hw "), theme.dim()),
        Span::raw(s.high_water.to_string()),
    ];
    if let Some((epoch, holder, done)) = &s.lease {
        out.extend([
            Span::styled(format!("{gap}lease "), theme.dim()),
            Span::raw(format!("ep {epoch} ")),
            Span::styled(holder.clone(), theme.key()),
            Span::raw(format!(" {done} done")),
        ]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_replica_keeps_its_state_line_first() {
        assert_eq!(
            share(2, 0, 3, 2),
            Rows {
                refusals: true,
                holds: false,
                facts: 0,
                store: 0,
                chosen: 0
            }
        );
        assert_eq!(
            share(2, 0, 3, 6),
            Rows {
                refusals: true,
                holds: true,
                facts: 0,
                store: 2,
                chosen: 0
            }
        );
        assert_eq!(
            share(2, 0, 1, 12),
            Rows {
                refusals: true,
                holds: true,
                facts: 3,
                store: 1,
                chosen: 0
            }
        );
        // 80×24 under fenced: the store's refusal of A's write before what each sends.
        assert_eq!(
            share(2, 1, 1, 6),
            Rows {
                refusals: true,
                holds: true,
                facts: 0,
                store: 1,
                chosen: 0
            }
        );
        // 80×24: a row to spare goes to the chosen replica's last fact.
        assert_eq!(
            share(2, 0, 1, 6),
            Rows {
                refusals: true,
                holds: true,
                facts: 0,
                store: 1,
                chosen: 1
            }
        );
    }

    fn replica(refused: u64, holds: Option<u64>) -> ReplicaView {
        ReplicaView {
            id: ReplicaId::parse("A").unwrap(),
            addr: "127.0.0.1:1".parse().unwrap(),
            state: ReplicaState::Up,
            holds: holds
                .map(|epoch| Held {
                    stream: StreamId(1),
                    connection: 3,
                    epoch: Some(epoch),
                    superseded: false,
                })
                .into_iter()
                .collect(),
            forwarded: 0,
            next: false,
            late_writes_refused: refused,
            deliveries_fenced: 0,
            calls_adopted: 0,
            resumes: 0,
            sent: 0,
            recent: Vec::new(),
        }
    }

    #[test]
    fn a_refusal_names_both_replicas_and_goes_once_the_replica_holds_a_newer_epoch() {
        let session = SessionId::generate(&mut forkscope_core::SplitMix64::new(7));
        let refusal = Entry {
            at: LabTime::from_millis(1_500),
            by: Some(forkscope_core::ByReplica {
                replica: ReplicaId::parse("A").unwrap(),
                epoch: Some(1),
            }),
            record: Record::StaleWriteRefused {
                session,
                stream: StreamId(1),
                epoch: 1,
                current: 2,
                holder: ReplicaId::parse("B"),
            },
            caused: forkscope_core::history::Caused::NOTHING,
        };
        let recent = [refusal];
        let shown = last_refusal(&recent, Some(session), &replica(1, Some(1))).unwrap();
        assert_eq!(
            shown.fitted(60),
            "A's write on s1 refused: epoch 1 < 2, held by B at 1.5 s"
        );
        assert_eq!(shown.fitted(40), "A refused on s1: epoch 1 < 2, held by B");
        // A holds s1 at epoch 3 now: the refusal of epoch 1 is no longer news.
        assert!(last_refusal(&recent, Some(session), &replica(1, Some(3))).is_none());
        // A restarted: its count starts again, and so does what it was refused.
        assert!(last_refusal(&recent, Some(session), &replica(0, None)).is_none());
    }

    #[test]
    fn the_store_keeps_a_calls_lease_at_the_width_of_a_100_column_screen() {
        let stream = |n: u32, kind, lease| StoredStream {
            stream: StreamId(n),
            kind,
            state: RecordState::Finished,
            epoch: 2,
            owner: "B".to_owned(),
            high_water: 120,
            lease,
        };
        let view = ReplicasView {
            store: "memory".to_owned(),
            routing: crate::lab::replicas::Routing::RoundRobin,
            lease_ms: 1_000,
            replicas: Vec::new(),
            streams: vec![
                stream(1, StreamKind::Standalone, None),
                stream(2, StreamKind::Request, Some((2, "B".to_owned(), 8))),
            ],
            store_error: None,
        };
        let theme = Theme { color: false };
        let text = |width| -> Vec<String> {
            store(&view, 2, width, &theme)
                .iter()
                .map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect())
                .collect()
        };
        // The pane's inner width at 100 columns: the lease whole, the columns aligned.
        let lines = text(58);
        assert!(lines[1].ends_with("lease ep 2 B 8 done"), "{lines:?}");
        assert!(lines.iter().all(|l| l.chars().count() <= 58), "{lines:?}");
        assert_eq!(lines[0].find("ep 2"), lines[1].find("ep 2"), "{lines:?}");
        // Wide enough for every word.
        assert!(text(90)[1].contains("ep 2 owner B  hw 120  lease ep 2 B 8 done"));
    }
}
