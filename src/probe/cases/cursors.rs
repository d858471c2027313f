//! The cursor cases: a `Last-Event-ID` the server should refuse — another session's, one never
//! issued, bytes no server issues, one past the last event — and what the server did with it.

use super::{
    Case, Ctx, Emitter, Extra, NotRun, Outcome, Session, cursor_header, emit, known, receive,
};
use forkscope_core::probe::{
    End, Finding, Known, StreamOf, judge_foreign_cursor, judge_huge_cursor,
};
use std::time::Duration;
use tokio::time::Instant;

/// Another session's cursor: first of its standalone stream (the probe labels those events per
/// session, so a leak is seen), then of a tool call's stream. The worse finding is reported.
pub(super) async fn cursor_of_another_session(ctx: &Ctx, case: &Case, s: &Session) -> Outcome {
    let mut findings = Vec::new();
    let mut why_not = None;
    if matches!(ctx.emitter, Emitter::Tool(_)) {
        match ctx.standalone(case, s, 40, 20).await {
            Ok((a, channel)) => {
                receive(ctx, case, a, &channel, 3).await;
                if let Some(cursor) = case.cursor(a) {
                    findings.push(borrowed_cursor(ctx, case, channel, cursor).await?);
                }
            }
            Err(NotRun(why)) => why_not = Some(why),
        }
    }
    if ctx.call_tool.is_some() {
        match ctx.call(case, s, 20, 20).await {
            Ok((t, call)) => {
                receive(ctx, case, t, &call, 3).await;
                if let Some(cursor) = case.cursor(t) {
                    findings.push(borrowed_cursor(ctx, case, call, cursor).await?);
                }
            }
            Err(NotRun(why)) => why_not = why_not.or(Some(why)),
        }
    }
    let seen = case.snapshot();
    // The worst of what was found: a leak of another session's events outranks a silence.
    let worst = findings
        .iter()
        .enumerate()
        .max_by_key(|(i, f)| {
            (
                f.is_violated(),
                f.held(),
                f.verdict.severity(),
                std::cmp::Reverse(*i),
            )
        })
        .map(|(i, _)| i);
    match worst.and_then(|i| findings.into_iter().nth(i)) {
        Some(finding) => Ok((finding, seen)),
        None => Err(NotRun(why_not.unwrap_or_else(|| {
            "the server's events carry no ids: there is no cursor to borrow".into()
        }))),
    }
}

/// A fresh session resumes with `cursor`, which belongs to `theirs` in another session.
async fn borrowed_cursor(
    ctx: &Ctx,
    case: &Case,
    theirs: StreamOf,
    cursor: String,
) -> Result<Finding, NotRun> {
    let other = ctx.session().await?;
    let b = case.get(&other, cursor_header(Some(cursor))).await;
    let within = Instant::now() + ctx.window.min(Duration::from_secs(1));
    case.wait_until(within, |cs| cs[b].end != End::Open).await;
    case.drop_connection(b);
    ctx.target.end_session(&other).await;
    let nothing = StreamOf::Channel {
        channel: String::new(),
        last: None,
    };
    let theirs = [theirs];
    let known = Known {
        mine: &nothing,
        same_session: &[],
        other_sessions: &theirs,
    };
    Ok(judge_foreign_cursor(&known, &case.connection(b)))
}

/// A cursor the server should refuse. If the server answers with a stream anyway, events are
/// asked for, so the report can say whether the stream is live.
pub(super) async fn bad_cursor(ctx: &Ctx, case: &Case, s: &Session, cursor: Vec<u8>) -> Outcome {
    let b = case
        .get(
            s,
            Extra {
                last_event_id: Some(cursor),
                ..Extra::default()
            },
        )
        .await;
    if case.connection(b).answer.opened().is_some() {
        if let Emitter::Tool(plan) = &ctx.emitter {
            let (args, _) = plan.args(5, 10, &s.label);
            let _ = ctx.target.request("emit", s, emit(&plan.name, args)).await;
        }
        let within = Instant::now() + ctx.window.min(Duration::from_secs(1));
        case.wait_until(within, |cs| cs[b].end != End::Open).await;
    }
    let seen = case.snapshot();
    let nothing = StreamOf::Channel {
        channel: String::new(),
        last: None,
    };
    Ok((judge_foreign_cursor(&known(&nothing), &seen[b]), seen))
}

/// A 64 KiB cursor, and a 64 KiB header of no meaning after it: a refusal both get alike is the
/// HTTP layer's header limit (the server never read the cursor), one the padding does not get
/// is the server's. The verdict is the cursor's; the why says which refused it.
pub(super) async fn huge_cursor(ctx: &Ctx, case: &Case, s: &Session) -> Outcome {
    const SIZE: usize = 64 * 1024;
    let (finding, _) = bad_cursor(ctx, case, s, vec![b'9'; SIZE]).await?;
    let padded = case.get_padded(s, SIZE).await;
    case.drop_connection(padded);
    let seen = case.snapshot();
    let finding = judge_huge_cursor(finding, &seen[padded].answer);
    Ok((finding, seen))
}

pub(super) async fn cursor_ahead(ctx: &Ctx, case: &Case, s: &Session) -> Outcome {
    let (t, call) = ctx.call(case, s, 10, 20).await?;
    receive(ctx, case, t, &call, 2).await;
    case.drop_connection(t);
    let ids: Vec<String> = case
        .connection(t)
        .events
        .iter()
        .filter_map(|r| r.event_id.clone())
        .collect();
    let ahead = match ids.as_slice() {
        [.., prev, last] => move_ahead(prev, last),
        _ => None,
    };
    let Some(ahead) = ahead else {
        return Err(NotRun(match ids.last() {
            None => "the call's events carry no ids: there is no cursor to move ahead".into(),
            Some(id) => format!(
                "the server's event ids ({}) are not a counter the probe can move ahead",
                crate::probe::http::shorten(id)
            ),
        }));
    };
    bad_cursor(ctx, case, s, ahead.into_bytes()).await
}

/// Splits an id into runs of digits and of everything else.
fn runs(id: &str) -> Vec<(bool, &str)> {
    let mut out = Vec::new();
    let mut start = 0;
    let bytes = id.as_bytes();
    for i in 1..=bytes.len() {
        if i == bytes.len() || bytes[i].is_ascii_digit() != bytes[start].is_ascii_digit() {
            out.push((bytes[start].is_ascii_digit(), &id[start..i]));
            start = i;
        }
    }
    out
}

/// Given two consecutive event ids that differ only in one number which grew, the id with that
/// number a million ahead: a cursor of the same shape that no event has reached. Ids that are
/// not a counter (random, or signed) give `None`.
fn move_ahead(prev: &str, last: &str) -> Option<String> {
    let (a, b) = (runs(prev), runs(last));
    if a.len() != b.len() || a.is_empty() {
        return None;
    }
    let mut grown = None;
    for (i, ((da, ta), (db, tb))) in a.iter().zip(&b).enumerate() {
        if da != db || (!da && ta != tb) {
            return None;
        }
        if *da && ta != tb {
            let (x, y): (u64, u64) = (ta.parse().ok()?, tb.parse().ok()?);
            if y <= x || grown.is_some() {
                return None;
            }
            grown = Some((i, y));
        }
    }
    let (at, n) = grown?;
    Some(
        b.iter()
            .enumerate()
            .map(|(i, (_, t))| {
                if i == at {
                    (n + 1_000_000).to_string()
                } else {
                    (*t).to_owned()
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::move_ahead;

    #[test]
    fn an_ahead_cursor_moves_the_counter_and_nothing_else() {
        assert_eq!(move_ahead("s1:11", "s1:12").as_deref(), Some("s1:1000012"));
        assert_eq!(move_ahead("7", "8").as_deref(), Some("1000008"));
        // Signed or random ids are not counters.
        assert_eq!(move_ahead("s1-1.Ab3", "s1-2.Qx9"), None);
        assert_eq!(move_ahead("abc", "abd"), None);
        assert_eq!(move_ahead("s1:12", "s1:11"), None);
    }
}
