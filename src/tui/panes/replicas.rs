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
        .map(|r| last_refusal(recent, session, r.id))
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
/// in view after newer facts.
fn last_refusal(
    recent: &[Entry],
    session: Option<SessionId>,
    replica: ReplicaId,
) -> Option<Refused> {
    recent.iter().rev().find_map(|e| match &e.record {
        Record::StaleWriteRefused {
            session: of,
            stream,
            epoch,
            current,
            holder,
            ..
        } if Some(*of) == session && e.by.is_some_and(|b| b.replica == replica) => Some(Refused {
            stream: *stream,
            epoch: *epoch,
            current: *current,
            holder: *holder,
            at: e.at,
        }),
        _ => None,
    })
}

/// A write the store refused: on `stream`, at `epoch`, when the stream was at `current`.
#[derive(Clone, Copy, Debug)]
struct Refused {
    stream: StreamId,
    epoch: u64,
    current: u64,
    holder: Option<ReplicaId>,
    at: LabTime,
}

impl Refused {
    /// How the lab's list of facts words it.
    fn said(&self) -> String {
        format!(
            "write on {} refused: epoch {} < {}{}",
            self.stream,
            self.epoch,
            self.current,
            self.holder
                .map_or_else(String::new, |h| format!(" (held by {h})"))
        )
    }

    /// The longest of its wordings that fits `width`.
    fn fitted(&self, width: usize) -> String {
        let (s, e, c) = (self.stream, self.epoch, self.current);
        let holder = self
            .holder
            .map_or_else(|| "?".to_owned(), |h| h.to_string());
        let forms = [
            format!("{} at {}", self.said(), self.at),
            format!("{s} write refused: epoch {e} < {c} (held by {holder})"),
            format!("{s} refused: epoch {e} < {c}, held by {holder}"),
            format!("{s} refused: ep {e} < {c} ({holder})"),
        ];
        let fits = forms.iter().find(|f| f.chars().count() <= width);
        shorten(fits.unwrap_or(&forms[3]), width)
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
        // The refusal is on screen already.
        let said = refusal.map(|r| r.said());
        let recent: Vec<&String> = replica
            .recent
            .iter()
            .filter(|f| said.as_ref() != Some(*f))
            .collect();
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

/// `▸A up ←next  sent 12  refused 1  fenced 0  adopted 0  routed 5`: whole fields, the ones
/// that do not fit left out.
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
    vec![
        head,
        count("sent", replica.sent, theme.text()),
        count(
            "refused",
            replica.late_writes_refused,
            counted(replica.late_writes_refused),
        ),
        count(
            "fenced",
            replica.deliveries_fenced,
            counted(replica.deliveries_fenced),
        ),
        count("adopted", replica.calls_adopted, theme.text()),
        count("resumes", replica.resumes, theme.text()),
        count("routed", replica.forwarded, theme.text()),
    ]
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
    view.streams
        .iter()
        .skip(skip)
        .enumerate()
        .map(|(i, s)| fields(record(s, label(i == 0), theme), width))
        .collect()
}

fn record(s: &StoredStream, label: Span<'static>, theme: &Theme) -> Vec<Vec<Span<'static>>> {
    let kind = match s.kind {
        StreamKind::Standalone => "GET ",
        StreamKind::Request => "POST",
    };
    let (state, style) = match s.state {
        RecordState::Live => ("live", theme.good()),
        RecordState::Finished => ("finished", theme.good()),
        RecordState::Fenced => ("fenced", theme.accent()),
    };
    let mut out = vec![
        vec![
            label,
            Span::styled(
                format!("{:<3}", s.stream.to_string()),
                theme.stream(s.stream.0),
            ),
            Span::styled(format!(" {kind}"), theme.dim()),
            Span::styled(format!(" {state:<8} "), style),
        ],
        vec![
            Span::styled("ep ", theme.dim()),
            Span::raw(s.epoch.to_string()),
        ],
        vec![
            Span::styled(" owner ", theme.dim()),
            Span::styled(s.owner.clone(), theme.key()),
        ],
        vec![
            Span::styled("  hw ", theme.dim()),
            Span::raw(s.high_water.to_string()),
        ],
    ];
    if let Some((epoch, holder, done)) = &s.lease {
        out.push(vec![
            Span::styled("  lease ", theme.dim()),
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
}
