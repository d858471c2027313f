//! The probe's rules: what a correct server does with each kind of resume, and how to name
//! what it did instead. Pure functions of what was observed.
//!
//! The invariant is the lab's: at most one live stream per logical stream, and what the client
//! applies is a gap-free, in-order continuation of that one stream, each event once.

use super::continuity::{continuity, counts_by_one, position, reached_end, span};
use super::observed::{Answer, Connection, End, Received, StreamOf};
use super::verdict::{Finding, Unexercised, Verdict};

/// What the probe knows about streams: the one a case follows, the session's others, and
/// streams of other sessions it can tell apart.
#[derive(Clone, Debug)]
pub struct Known<'a> {
    pub mine: &'a StreamOf,
    pub same_session: &'a [StreamOf],
    pub other_sessions: &'a [StreamOf],
}

/// Events of another stream or another session, wherever they turned up: the worst finding.
fn foreign(known: &Known<'_>, connections: &[&Connection]) -> Option<Finding> {
    let mut cross_stream = None;
    for conn in connections {
        for r in conn.carried() {
            if known.other_sessions.iter().any(|s| s.owns(&r.item)) {
                return Some(Finding::violated(
                    Verdict::CrossSessionReplay {
                        item: r.item.short(),
                    },
                    format!(
                        "connection {} carried an event of a stream the probe opened in another session",
                        conn.label
                    ),
                ).marking([r.order]));
            }
            if cross_stream.is_none()
                && !known.mine.owns(&r.item)
                && known.same_session.iter().any(|s| s.owns(&r.item))
            {
                cross_stream = Some(
                    Finding::violated(
                        Verdict::CrossStreamReplay {
                            item: r.item.short(),
                        },
                        format!(
                            "connection {} carried an event of another stream of this session",
                            conn.label
                        ),
                    )
                    .marking([r.order]),
                );
            }
        }
    }
    cross_stream
}

/// An answer that is not a stream, as a verdict.
fn not_a_stream(answer: &Answer) -> Option<Verdict> {
    match answer {
        Answer::Stream { .. } => None,
        Answer::Rejected { status, .. } => Some(Verdict::TypedRejection {
            status: *status,
            reinitializes: *status == 404,
        }),
        Answer::Json { status, .. } => Some(Verdict::NoAnswer {
            why: format!("{status} with a JSON body where an event stream was asked for"),
        }),
        Answer::NoAnswer { why } => Some(Verdict::NoAnswer { why: why.clone() }),
    }
}

fn plural(n: u64) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// A resume after which nothing of the stream arrived, when that says nothing about the
/// server: nothing was seen at all, the stream had ended before the break, or its source has no
/// known end and may simply have gone quiet.
fn nothing_after(
    mine: &StreamOf,
    old: &Connection,
    old_mine: u64,
    new_mine: u64,
) -> Option<Finding> {
    if new_mine > 0 {
        return None;
    }
    if old_mine == 0 {
        return Some(Finding::not_exercised(
            Unexercised::NoEventAtAll,
            "neither the broken connection nor the resume carried an event of the stream",
        ));
    }
    if mine.ended_in(old) {
        return Some(Finding::not_exercised(
            Unexercised::EndedBeforeBreak { before: old_mine },
            "the resume had nothing to carry, so whether the server replays from a cursor was not tested",
        ));
    }
    if matches!(mine, StreamOf::Channel { last: None, .. }) {
        return Some(Finding::not_exercised(
            Unexercised::SourceWentQuiet,
            format!(
                "{old_mine} event{} before the break, none after it",
                plural(old_mine)
            ),
        ));
    }
    None
}

/// A resume: `chain[0]` was the stream's connection; each later one reconnected with the
/// cursor the client held (a stock client reconnects again when a resumed stream is closed
/// before its end). The client applies what each carried, in turn. `may_refuse`: a typed
/// refusal is a correct answer here (the server cannot replay so far back, and says so).
/// `complete`: the case waited for the stream's end, so anything missing is a gap.
pub fn judge_resume(
    known: &Known<'_>,
    chain: &[&Connection],
    may_refuse: bool,
    complete: bool,
) -> Finding {
    let Some((old, resumes)) = chain.split_first() else {
        return Finding::violated(
            Verdict::NoAnswer {
                why: "nothing was observed".into(),
            },
            "the case opened no connection",
        );
    };
    for new in resumes {
        if let Some(verdict) = not_a_stream(&new.answer) {
            return match verdict {
                Verdict::TypedRejection { .. } if may_refuse => Finding::holds(
                    verdict,
                    "the server cannot replay from this cursor and says so",
                ),
                _ => Finding::violated(verdict, "a resume the server could serve was not served"),
            };
        }
    }
    if let Some(finding) = foreign(known, chain) {
        return finding;
    }
    let mine = |c: &Connection| c.carried().filter(|r| known.mine.owns(&r.item)).count() as u64;
    let new_mine: u64 = resumes.iter().map(|c| mine(c)).sum();
    for pair in chain.windows(2) {
        let (before, after) = (pair[0], pair[1]);
        let opened = after.answer.opened().unwrap_or(u64::MAX);
        let kept_orders: Vec<u64> = before
            .carried()
            .filter(|r| r.order > opened && known.mine.owns(&r.item))
            .map(|r| r.order)
            .collect();
        let kept = kept_orders.len() as u64;
        if kept == 0 {
            continue;
        }
        if mine(after) == 0 {
            return Finding::violated(
                Verdict::SilentEmptyStream { live: 0 },
                format!(
                    "the resume got nothing while the server went on writing {kept} event{} to the old connection: a client whose old connection is dead loses them",
                    if kept == 1 { "" } else { "s" }
                ),
            )
            .marking(kept_orders);
        }
        return Finding::violated(
            Verdict::TwoLiveStreams {
                old: kept,
                new: mine(after),
            },
            "the resume attached a second stream while the first still received events",
        )
        .marking(kept_orders);
    }
    let applied: Vec<&Received> = chain
        .iter()
        .flat_map(|c| c.carried())
        .filter(|r| known.mine.owns(&r.item))
        .collect();
    let from_start = matches!(known.mine, StreamOf::Call { .. });
    let by_one = counts_by_one(known.mine, old.carried());
    let old_mine = mine(old);
    if let Some(vacuous) = nothing_after(known.mine, old, old_mine, new_mine) {
        return vacuous;
    }
    if new_mine == 0 && !reached_end(known.mine, &[old]) {
        let others: usize = resumes.iter().map(|c| c.carried().count()).sum();
        return Finding::violated(
            Verdict::SilentEmptyStream { live: 0 },
            if others > 0 {
                format!(
                    "nothing of this stream arrived after the resume ({others} events of another stream came instead): the rest is lost without a sign"
                )
            } else {
                "nothing of this stream arrived after the resume: the rest is lost without a sign"
                    .to_string()
            },
        );
    }
    if let Some(mut finding) = continuity(known.mine, &applied, from_start, complete, by_one) {
        if new_mine == 0 {
            if let Verdict::Gap { missing } = &finding.verdict {
                finding = Finding::violated(
                    Verdict::SilentEmptyStream { live: 0 },
                    format!(
                        "the resume was answered 200 with nothing from the cursor on: {missing} lost without a sign"
                    ),
                );
            }
        }
        return finding;
    }
    if old_mine == 0 {
        return Finding::not_exercised(
            Unexercised::NothingBeforeBreak,
            format!(
                "{new_mine} event{} after the break, but the resume continued from nothing: the break itself was not tested",
                plural(new_mine)
            ),
        );
    }
    let positioned_after = resumes
        .iter()
        .flat_map(|c| c.carried())
        .filter(|r| known.mine.owns(&r.item))
        .filter(|r| position(&r.item).is_some_and(|p| p != u64::MAX))
        .count();
    if positioned_after == 0 && by_one && matches!(known.mine, StreamOf::Call { steps: None, .. }) {
        return Finding::not_exercised(
            Unexercised::OnlyTheEndAfterBreak,
            format!("{old_mine} progress events before the break, then the result"),
        );
    }
    let before = applied.len() as u64 - new_mine;
    let reconnects = resumes.len();
    Finding::holds(
        Verdict::CleanContinuation,
        format!(
            "{before} event{} before the break, {new_mine} after it{}, each once and in order",
            if before == 1 { "" } else { "s" },
            if reconnects > 1 {
                format!(" over {reconnects} reconnects")
            } else {
                String::new()
            }
        ),
    )
}

/// One stream's events on two connections: an event on both is a duplicate (a broadcast), and
/// both receiving is two live streams. `earlier` is everything the first connection had, for
/// duplicates; `first_live` and `second_live` what each received once both were attached.
fn exclusive(
    earlier: &[&Received],
    first_live: &[&Received],
    second_live: &[&Received],
    broadcast: &str,
    forked: &str,
) -> Option<Finding> {
    if let Some(dup) = second_live
        .iter()
        .find(|r| earlier.iter().any(|f| f.item == r.item))
    {
        return Some(
            Finding::violated(
                Verdict::Duplicate {
                    item: dup.item.short(),
                },
                broadcast,
            )
            .marking([dup.order]),
        );
    }
    if !first_live.is_empty() && !second_live.is_empty() {
        return Some(
            Finding::violated(
                Verdict::TwoLiveStreams {
                    old: first_live.len() as u64,
                    new: second_live.len() as u64,
                },
                forked,
            )
            .marking(first_live.iter().map(|r| r.order)),
        );
    }
    None
}

/// A second GET while `first` is live (a plain one, or a second resume from the same cursor).
/// Correct: refuse it, or hand the stream over (the first ends); each event goes to one of them.
pub fn judge_second_get(known: &Known<'_>, first: &Connection, second: &Connection) -> Finding {
    if let Some(verdict) = not_a_stream(&second.answer) {
        return match verdict {
            Verdict::TypedRejection { .. } => Finding::holds(
                verdict,
                "the second stream was refused; the first stays the one",
            ),
            _ => Finding::violated(verdict, "a GET got no usable answer"),
        };
    }
    if let Some(finding) = foreign(known, &[first, second]) {
        return finding;
    }
    let opened = second.answer.opened().unwrap_or(u64::MAX);
    let first_after: Vec<&Received> = first
        .carried()
        .filter(|r| r.order > opened && known.mine.owns(&r.item))
        .collect();
    let second_mine: Vec<&Received> = second
        .carried()
        .filter(|r| known.mine.owns(&r.item))
        .collect();
    let earlier: Vec<&Received> = first.carried().collect();
    if let Some(finding) = exclusive(
        &earlier,
        &first_after,
        &second_mine,
        "one event went to both connections",
        "both connections received events of one stream",
    ) {
        return finding;
    }
    if first_after.is_empty() && second_mine.is_empty() {
        return Finding::not_exercised(
            Unexercised::NothingWhileBothOpen,
            "the second GET was answered with a stream, but no event followed on either",
        );
    }
    let why = match (first.end, first_after.is_empty()) {
        (End::ClosedByServer, _) => {
            "the server ended the first stream and carried on in the second"
        }
        (_, true) => "only one connection received events",
        (_, false) => "the second connection stayed idle while the first carried on",
    };
    Finding::holds(Verdict::CleanContinuation, why)
}

/// A GET with a cursor the server should not honour: bogus, malformed, ahead of the stream,
/// huge, or another session's. Correct: a typed 4xx. Worst: events of another session.
pub fn judge_foreign_cursor(known: &Known<'_>, conn: &Connection) -> Finding {
    if let Some(verdict) = not_a_stream(&conn.answer) {
        return match verdict {
            Verdict::TypedRejection { .. } => {
                Finding::holds(verdict, "a cursor the server cannot honour is refused")
            }
            _ => Finding::violated(verdict, "a bad cursor must be refused with a 4xx"),
        };
    }
    if let Some(finding) = foreign(known, &[conn]) {
        return finding;
    }
    let live = conn.carried().count() as u64;
    Finding::violated(
        Verdict::SilentEmptyStream { live },
        "the client believes it resumed; whatever it missed is silently lost",
    )
}

/// A 64 KiB cursor's finding, told whose refusal it was by what a 64 KiB header of no meaning
/// (`padded`) got: the same 4xx is the HTTP layer's header limit — the server never read the
/// cursor, and its verdict holds for the head's size, not for a cursor check — anything else
/// means the server read the head and refused the cursor itself.
pub fn judge_huge_cursor(mut finding: Finding, padded: &Answer) -> Finding {
    let Verdict::TypedRejection { status, .. } = finding.verdict else {
        return finding;
    };
    finding.why = match padded {
        Answer::Rejected { status: same, .. } if *same == status => format!(
            "the request head was refused before any cursor was read: a 64 KiB header of another name was refused {status} alike, so this is the HTTP layer's header limit; the client is told, and whether the server would check such a cursor is not seen"
        ),
        other => format!(
            "{} (by the server itself: a 64 KiB header of another name was answered {})",
            finding.why,
            other
                .status()
                .map_or_else(|| "with no status".to_owned(), |s| s.to_string())
        ),
    };
    finding
}

/// One connection from start to end (a burst): each event once, in order, none missing.
pub fn judge_burst(known: &Known<'_>, conn: &Connection, complete: bool) -> Finding {
    if let Some(verdict) = not_a_stream(&conn.answer) {
        return Finding::violated(verdict, "the call's stream was not served");
    }
    if let Some(finding) = foreign(known, &[conn]) {
        return finding;
    }
    let applied: Vec<&Received> = conn
        .carried()
        .filter(|r| known.mine.owns(&r.item))
        .collect();
    let by_one = counts_by_one(known.mine, conn.carried());
    if let Some(finding) = continuity(known.mine, &applied, true, complete, by_one) {
        return finding;
    }
    let seen = applied.len() as u64;
    if seen == 0 {
        return Finding::not_exercised(
            Unexercised::NoEventAtAll,
            "the call's stream carried nothing of the call",
        );
    }
    if seen < 2 {
        return Finding::not_exercised(
            Unexercised::TooFew { seen },
            "a burst needs events to order",
        );
    }
    Finding::holds(
        Verdict::CleanContinuation,
        format!("{} events, each once and in order", applied.len()),
    )
}

/// A request naming a session the server does not know. The transport's rule: 404, on which a
/// stock client starts a new session.
pub fn judge_unknown_session(answer: &Answer) -> Finding {
    match not_a_stream(answer) {
        Some(v @ Verdict::TypedRejection { status: 404, .. }) => {
            Finding::holds(v, "unknown sessions answer 404, and the client starts over")
        }
        Some(v @ Verdict::TypedRejection { .. }) => Finding::violated(
            v,
            "an unknown session must answer 404, or a stock client never starts a new one",
        ),
        Some(v) => Finding::violated(v, "an unknown session must answer 404"),
        None => Finding::violated(
            Verdict::SilentEmptyStream { live: 0 },
            "a stream was opened for a session that does not exist",
        ),
    }
}

/// Sessions `initialize` made that the very next request on them found unknown (404): `lost`
/// of `tries`. One is enough: the server gave the session id and then did not know it, which a
/// server keeping its sessions in one process does behind a balancer without affinity.
pub fn judge_lost_sessions(lost: u64, tries: u64) -> Option<Finding> {
    (lost > 0).then(|| {
        Finding::violated(
            Verdict::SessionPerProcess { lost, tries },
            "the session lives in the process that answered initialize: a request that lands on another process is told 404, so behind a balancer without session affinity every 2025-11-25 session breaks, and its streams with it",
        )
    })
}

/// A request with a protocol version the server does not support: 400, by the transport.
pub fn judge_unsupported_version(answer: &Answer) -> Finding {
    match not_a_stream(answer) {
        Some(v @ Verdict::TypedRejection { status: 400, .. }) => {
            Finding::holds(v, "an unsupported MCP-Protocol-Version is refused with 400")
        }
        Some(v) => Finding::violated(
            v,
            "an unsupported MCP-Protocol-Version must be answered 400",
        ),
        None => Finding::violated(
            Verdict::SilentEmptyStream { live: 0 },
            "a stream was opened under a protocol version the server does not speak",
        ),
    }
}

/// A request from a foreign web origin: 403, by the transport (DNS rebinding).
pub fn judge_foreign_origin(answer: &Answer) -> Finding {
    match not_a_stream(answer) {
        Some(v @ Verdict::TypedRejection { status: 403, .. }) => {
            Finding::holds(v, "a foreign Origin is refused with 403")
        }
        Some(v) => Finding::violated(v, "a foreign Origin must be answered 403"),
        None => Finding::violated(
            Verdict::SilentEmptyStream { live: 0 },
            "a page on any web origin can open this session's stream (DNS rebinding)",
        ),
    }
}

/// A call's stream broke and its events carried no ids: no client can resume it, so what the
/// tool sent after the break, its result included, is lost.
pub fn judge_unresumable_call(mine: &StreamOf, old: &Connection) -> Finding {
    let had = old.carried().filter(|r| mine.owns(&r.item)).count() as u64;
    if mine.ended_in(old) {
        return Finding::not_exercised(
            Unexercised::EndedBeforeBreak { before: had },
            "the whole call arrived before the break, so nothing was lost to it",
        );
    }
    let reached = old
        .carried()
        .filter(|r| mine.owns(&r.item))
        .filter_map(|r| position(&r.item))
        .max()
        .unwrap_or(0);
    let missing = match mine {
        StreamOf::Call {
            steps: Some(steps), ..
        } if reached < *steps => format!("{} and the result", span(reached + 1, *steps, "p")),
        _ => "the result".into(),
    };
    Finding::violated(
        Verdict::Gap { missing },
        "the call's events carry no ids, so its stream cannot be resumed after a break",
    )
}

/// Two resumes from one cursor at once (`b`, `c`). Each may be replayed what followed the
/// cursor; correct is that once both are answered, at most one stays live — the other refused
/// or fenced — and what the client applies from `old` and the live one is a clean
/// continuation. `settled`: the arrival order once both had been answered and replayed to;
/// events that arrive later are live ones.
pub fn judge_concurrent_resumes(
    known: &Known<'_>,
    old: &Connection,
    b: &Connection,
    c: &Connection,
    settled: u64,
    complete: bool,
) -> Finding {
    let (b_stream, c_stream) = (b.answer.opened().is_some(), c.answer.opened().is_some());
    match (b_stream, c_stream) {
        (false, false) => return judge_resume(known, &[old, b], false, complete),
        (true, false) => return judge_resume(known, &[old, b], false, complete),
        (false, true) => return judge_resume(known, &[old, c], false, complete),
        (true, true) => {}
    }
    if let Some(finding) = foreign(known, &[old, b, c]) {
        return finding;
    }
    fn live<'a>(x: &'a Connection, known: &Known<'_>, settled: u64) -> Vec<&'a Received> {
        x.carried()
            .filter(|r| r.order > settled && known.mine.owns(&r.item))
            .collect()
    }
    let (live_b, live_c) = (live(b, known, settled), live(c, known, settled));
    if let Some(finding) = exclusive(
        &live_b,
        &live_b,
        &live_c,
        "one live event went to both resumed connections",
        "both resumed connections stayed live: the session forked",
    ) {
        return finding;
    }
    let winner =
        if !live_c.is_empty() || (live_b.is_empty() && c.end == End::Open && b.end != End::Open) {
            c
        } else {
            b
        };
    let mut finding = judge_resume(known, &[old, winner], false, complete);
    if finding.held() {
        finding.why = format!(
            "one of the two stayed live ({}); {}",
            winner.label, finding.why
        );
    }
    finding
}
