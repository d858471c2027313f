//! The resume cases: a stream broken and resumed — after a pause, while the old connection is
//! still open, twice at once, racing emission, with another stream live — and a second plain
//! GET while one is live.

use super::{
    Case, Ctx, Extra, NotRun, Outcome, RECONNECT_DELAY, Session, complete, cursor_header,
    far_enough, finished, judged_resume, known, mine_count, over, receive, resume,
};
use forkscope_core::probe::{self, Connection, End, Known, judge_resume, judge_second_get};
use std::time::Duration;
use tokio::time::{Instant, sleep};

pub(super) async fn standalone_resume(ctx: &Ctx, case: &Case, s: &Session) -> Outcome {
    let (a, mine) = ctx.standalone(case, s, 30, 20).await?;
    receive(ctx, case, a, &mine, 3).await;
    case.drop_connection(a);
    let cursor = case.cursor(a);
    sleep(RECONNECT_DELAY).await;
    let had_cursor = cursor.is_some();
    let resumes = resume(ctx, case, s, &mine, cursor).await;
    let (mut finding, seen) = judged_resume(case, &known(&mine), a, &resumes, false);
    if !had_cursor && finding.is_violated() {
        finding.why = format!(
            "the events carry no ids, so the client reconnected without a cursor ({})",
            finding.why
        );
    }
    Ok((finding, seen))
}

/// Breaks a call's stream after three progress notifications and resumes it after `pause`
/// (beyond the reconnect delay): with a long pause, the call has finished by then.
pub(super) async fn call_resume(
    ctx: &Ctx,
    case: &Case,
    s: &Session,
    steps: u64,
    delay_ms: u64,
    pause: Duration,
) -> Outcome {
    let (a, mine) = ctx.call(case, s, steps, delay_ms).await?;
    receive(ctx, case, a, &mine, 3).await;
    case.drop_connection(a);
    let cursor = case.cursor(a);
    if cursor.is_none() {
        let seen = case.snapshot();
        return Ok((probe::judge::judge_unresumable_call(&mine, &seen[a]), seen));
    }
    sleep(RECONNECT_DELAY + pause).await;
    let resumes = resume(ctx, case, s, &mine, cursor).await;
    Ok(judged_resume(case, &known(&mine), a, &resumes, false))
}

pub(super) async fn resume_while_old_open(ctx: &Ctx, case: &Case, s: &Session) -> Outcome {
    let (a, mine) = ctx.standalone(case, s, 30, 20).await?;
    receive(ctx, case, a, &mine, 3).await;
    let before = mine_count(&case.connection(a), &mine);
    let Some(cursor) = case.cursor(a) else {
        return Err(NotRun(
            "the stream's events carry no ids: there is no cursor to resume with".into(),
        ));
    };
    let b = case.get(s, cursor_header(Some(cursor))).await;
    // Both stay open: the server cannot know the first is dead, so it must fence it itself.
    case.wait_until(ctx.deadline(), |cs| {
        far_enough(&cs[b], &mine, 0) && far_enough(&cs[a], &mine, before)
    })
    .await;
    let seen = case.snapshot();
    Ok((
        judge_resume(
            &known(&mine),
            &[&seen[a], &seen[b]],
            false,
            over(&seen, b, &mine),
        ),
        seen,
    ))
}

pub(super) async fn plain_get_while_live(ctx: &Ctx, case: &Case, s: &Session) -> Outcome {
    let (a, mine) = ctx.standalone(case, s, 30, 20).await?;
    receive(ctx, case, a, &mine, 3).await;
    let before = mine_count(&case.connection(a), &mine);
    let b = case.get(s, Extra::default()).await;
    // A run of known length: wait for its end on either connection (the first may be closed by
    // the server as the second takes over). Otherwise: a few more events on each.
    let known_end = complete(&mine);
    case.wait_until(ctx.deadline(), |cs| {
        cs[b].end != End::Open
            || if known_end {
                mine.ended_in(&cs[a]) || mine.ended_in(&cs[b])
            } else {
                far_enough(&cs[a], &mine, before) && far_enough(&cs[b], &mine, 0)
            }
    })
    .await;
    let seen = case.snapshot();
    Ok((judge_second_get(&known(&mine), &seen[a], &seen[b]), seen))
}

/// `pause`: how long after closing the first connection the two resumes leave. The case is
/// about a drop the server noticed (one it did not is `resume-while-old-open`), and a server
/// notices a close when its scheduler gets to it: see [`two_resumes_at_once_noticed`].
pub(super) async fn two_resumes_at_once(
    ctx: &Ctx,
    case: &Case,
    s: &Session,
    pause: Duration,
) -> Outcome {
    let (a, mine) = ctx.standalone(case, s, 60, 20).await?;
    receive(ctx, case, a, &mine, 3).await;
    case.drop_connection(a);
    let cursor = case.cursor(a);
    sleep(pause).await;
    let (b, c) = tokio::join!(
        case.get(s, cursor_header(cursor.clone())),
        case.get(s, cursor_header(cursor))
    );
    // First each is answered and replayed to; what arrives after that is live.
    let replayed = |x: &Connection| x.end != End::Open || mine_count(x, &mine) > 0;
    let within = Instant::now() + ctx.window.min(Duration::from_secs(1));
    case.wait_until(within, |cs| replayed(&cs[b]) && replayed(&cs[c]))
        .await;
    // A replay is written at once; give its tail a moment to land before counting live events.
    sleep(Duration::from_millis(30)).await;
    let settled = case.order_now().saturating_sub(1);
    let live = |cs: &[Connection]| {
        [b, c]
            .iter()
            .map(|&x| {
                cs[x]
                    .events
                    .iter()
                    .filter(|r| r.order > settled && mine.owns(&r.item))
                    .count()
            })
            .sum::<usize>()
    };
    // A run of known length is judged whole: wait for its end (or both connections' end),
    // not for the loser's close. Otherwise a few live events show where the stream went.
    let known_end = complete(&mine);
    case.wait_until(ctx.deadline(), |cs| {
        let both_ended = cs[b].end != End::Open && cs[c].end != End::Open;
        let run_ended = mine.ended_in(&cs[b]) || mine.ended_in(&cs[c]);
        both_ended
            || run_ended
            || (!known_end && (live(cs) >= 3 || finished(&cs[b], &mine) || finished(&cs[c], &mine)))
    })
    .await;
    // Let events already on their way to the other connection arrive.
    sleep(RECONNECT_DELAY).await;
    let seen = case.snapshot();
    Ok((
        probe::judge::judge_concurrent_resumes(
            &known(&mine),
            &seen[a],
            &seen[b],
            &seen[c],
            settled,
            complete(&mine),
        ),
        seen,
    ))
}

/// Two resumes at once, once the server has noticed the drop. Both answered with an empty
/// stream is what a server does when it still holds the old connection open; a busy server
/// (two cores, a test suite beside it) may not have noticed the close within the usual pause,
/// so that answer is looked at again, on a fresh session, after a pause ten times as long.
pub(super) async fn two_resumes_at_once_noticed(ctx: &Ctx, case: &Case, s: &Session) -> Outcome {
    let first = two_resumes_at_once(ctx, case, s, RECONNECT_DELAY).await;
    let silent = matches!(
        &first,
        Ok((f, _)) if matches!(f.verdict, probe::Verdict::SilentEmptyStream { .. })
    );
    if !silent {
        return first;
    }
    let again = ctx.session().await?;
    let case = Case::new(&ctx.target);
    let pause = 10 * RECONNECT_DELAY;
    let outcome = two_resumes_at_once(ctx, &case, &again, pause).await;
    drop(case);
    ctx.target.end_session(&again).await;
    outcome.map(|(mut finding, seen)| {
        let still = matches!(finding.verdict, probe::Verdict::SilentEmptyStream { .. });
        finding.why = if still {
            format!("{} (the same after a {} ms pause)", finding.why, pause.as_millis())
        } else {
            format!(
                "{} (looked at again after a {} ms pause: {} ms after the drop, both resumes were answered empty, the server not yet past the old connection)",
                finding.why,
                pause.as_millis(),
                RECONNECT_DELAY.as_millis()
            )
        };
        (finding, seen)
    })
}

pub(super) async fn resume_races_emission(ctx: &Ctx) -> Outcome {
    let mut runs = 0;
    let mut last: Option<Outcome> = None;
    let mut sources = vec![true, false];
    for _ in 0..ctx.repeat.max(1) {
        for standalone in sources.clone() {
            // A session per race, so no stream of an earlier round is still attached.
            let session = ctx.session().await?;
            let s = &session;
            let case = Case::new(&ctx.target);
            let opened = if standalone {
                ctx.standalone(&case, s, 60, 2).await
            } else {
                ctx.call(&case, s, 60, 2).await
            };
            let (a, mine) = match opened {
                Ok(x) => x,
                // A source the server lacks leaves the other to race.
                Err(why) => {
                    drop(case);
                    ctx.target.end_session(s).await;
                    sources.retain(|x| *x != standalone);
                    if last.is_none() {
                        last = Some(Err(why));
                    }
                    continue;
                }
            };
            receive(ctx, &case, a, &mine, 3).await;
            case.drop_connection(a);
            let cursor = case.cursor(a);
            if cursor.is_none() && !standalone {
                let seen = case.snapshot();
                drop(case);
                ctx.target.end_session(s).await;
                return Ok((probe::judge::judge_unresumable_call(&mine, &seen[a]), seen));
            }
            // No pause: the resume lands while the server is still emitting.
            let resumes = resume(ctx, &case, s, &mine, cursor).await;
            let (finding, seen) = judged_resume(&case, &known(&mine), a, &resumes, false);
            drop(case);
            ctx.target.end_session(s).await;
            if finding.is_violated() {
                return Ok((finding, seen));
            }
            // A round that saw too little says nothing of the race: it is kept only if no
            // round was judged.
            let judged = finding.held();
            if judged {
                runs += 1;
            }
            let keep = match &last {
                Some(Ok((kept, _))) => judged && (!kept.held() || standalone),
                _ => true,
            };
            if keep {
                last = Some(Ok((finding, seen)));
            }
        }
    }
    match last {
        Some(Ok((mut finding, seen))) if runs > 0 && finding.held() => {
            finding.why = format!(
                "{runs} racing resume{} ({} rounds), each clean",
                if runs == 1 { "" } else { "s" },
                ctx.repeat.max(1)
            );
            Ok((finding, seen))
        }
        Some(Ok(not_exercised)) => Ok(not_exercised),
        Some(Err(why)) => Err(why),
        None => Err(NotRun("nothing to race".into())),
    }
}

pub(super) async fn cursor_of_another_stream(ctx: &Ctx, case: &Case, s: &Session) -> Outcome {
    let (_standalone, channel) = ctx.standalone(case, s, 40, 20).await?;
    let (t, call) = ctx.call(case, s, 20, 20).await?;
    receive(ctx, case, t, &call, 3).await;
    let cursor = case.cursor(t);
    case.drop_connection(t);
    let Some(cursor) = cursor else {
        return Err(NotRun(
            "the call's events carry no ids: there is no cursor to send".into(),
        ));
    };
    sleep(RECONNECT_DELAY).await;
    let resumes = resume(ctx, case, s, &call, Some(cursor)).await;
    let others = [channel];
    let known = Known {
        mine: &call,
        same_session: &others,
        other_sessions: &[],
    };
    Ok(judged_resume(case, &known, t, &resumes, false))
}
