//! Continuity: duplicates, order and gaps in what a client applies from one logical stream,
//! in the order it applies it. The judges of [`super::judge`] ask it of every resume.

use super::observed::{Connection, Item, Received, StreamOf};
use super::verdict::{Finding, Verdict};

/// The position of an item within its stream, for order and gaps. A call's result comes after
/// every progress notification.
pub(super) fn position(item: &Item) -> Option<u64> {
    match item {
        Item::Progress { n, .. } | Item::Numbered { n, .. } => Some(*n),
        Item::Response { .. } => Some(u64::MAX),
        _ => None,
    }
}

pub(super) fn span(from: u64, to: u64, prefix: &str) -> String {
    if from == to {
        format!("{prefix}{from}")
    } else {
        format!("{prefix}{from}–{prefix}{to}")
    }
}

/// Whether a stream counts by one (as the probe's own tools do): its positions so far rise by
/// exactly 1. Only then is a jump a gap; a stream counting by tens, or in fractions, is checked
/// for order and duplicates alone. Too few events to tell: by one.
pub(super) fn counts_by_one<'a>(
    mine: &StreamOf,
    events: impl Iterator<Item = &'a Received>,
) -> bool {
    let positions: Vec<u64> = events
        .filter(|r| mine.owns(&r.item))
        .filter_map(|r| position(&r.item))
        .filter(|p| *p != u64::MAX)
        .take(4)
        .collect();
    positions.windows(2).all(|w| w[1] == w[0] + 1)
}

/// The stream's last event is among these: the call's result, or the last numbered event.
pub(super) fn reached_end(mine: &StreamOf, connections: &[&Connection]) -> bool {
    connections.iter().any(|c| mine.ended_in(c))
}

/// Duplicates, order and gaps in what the client applies, in the order it applies it.
/// `from_start`: the stream's first event should be number 1 (the probe saw it begin).
pub(super) fn continuity(
    mine: &StreamOf,
    applied: &[&Received],
    from_start: bool,
    complete: bool,
    by_one: bool,
) -> Option<Finding> {
    let prefix = match mine {
        StreamOf::Call { .. } => "p",
        StreamOf::Channel { .. } => "#",
    };
    let mut seen = std::collections::HashSet::new();
    let mut last: Option<u64> = if from_start { Some(0) } else { None };
    for (i, r) in applied.iter().enumerate() {
        if !seen.insert(&r.item) {
            return Some(
                Finding::violated(
                    Verdict::Duplicate {
                        item: r.item.short(),
                    },
                    "the client would apply this event twice",
                )
                .marking([r.order]),
            );
        }
        let Some(at) = position(&r.item) else {
            continue;
        };
        if let Some(prev) = last {
            if at <= prev && !(at == prev && prev == 0) {
                return Some(
                    Finding::violated(
                        Verdict::OutOfOrder {
                            item: r.item.short(),
                            after: if prev == u64::MAX {
                                "the result".into()
                            } else {
                                format!("{prefix}{prev}")
                            },
                        },
                        "events of one stream must arrive in the order they were sent",
                    )
                    .marking([r.order]),
                );
            }
            if at > prev + 1 {
                // A missing event that turns up later is out of order, not lost.
                let late = applied[i + 1..]
                    .iter()
                    .find(|later| position(&later.item).is_some_and(|p| p > prev && p < at));
                if let Some(late) = late {
                    return Some(
                        Finding::violated(
                            Verdict::OutOfOrder {
                                item: late.item.short(),
                                after: r.item.short(),
                            },
                            "events of one stream must arrive in the order they were sent",
                        )
                        .marking([late.order]),
                    );
                }
            }
            if by_one && at != u64::MAX && at > prev + 1 {
                return Some(
                    Finding::violated(
                        Verdict::Gap {
                            missing: span(prev + 1, at - 1, prefix),
                        },
                        "the client skipped over events without being told",
                    )
                    .marking([r.order]),
                );
            }
            if at == u64::MAX && by_one {
                if let StreamOf::Call {
                    steps: Some(steps), ..
                } = mine
                {
                    if prev < *steps {
                        return Some(
                            Finding::violated(
                                Verdict::Gap {
                                    missing: span(prev + 1, *steps, prefix),
                                },
                                "the result arrived, but not every progress notification before it",
                            )
                            .marking([r.order]),
                        );
                    }
                }
            }
        }
        last = Some(at);
    }
    if complete {
        let reached = last.unwrap_or(0);
        let missing = match mine {
            StreamOf::Call { steps, .. } if reached != u64::MAX => Some(match steps {
                Some(steps) if by_one && reached < *steps => {
                    format!("{} and the result", span(reached + 1, *steps, prefix))
                }
                _ => "the result".to_string(),
            }),
            StreamOf::Channel {
                last: Some(end), ..
            } if by_one && reached < *end => Some(span(reached + 1, *end, prefix)),
            _ => None,
        };
        if let Some(missing) = missing {
            return Some(Finding::violated(
                Verdict::Gap { missing },
                "the stream never delivered the rest of what the server produced",
            ));
        }
    }
    None
}
