//! The volume cases: many events on one connection (order, duplicates, gaps), and a resume
//! after more events than a replay buffer may hold.

use super::{
    Case, Ctx, NotRun, Outcome, Session, finished, judged_resume, known, over, receive, resume,
};
use forkscope_core::probe::{self, End, judge_burst};
use std::time::Duration;
use tokio::time::sleep;

pub(super) async fn burst_order(ctx: &Ctx, case: &Case, s: &Session) -> Outcome {
    if let Some(tool) = ctx.call_tool.as_ref().filter(|t| t.count_arg.is_none()) {
        return Err(NotRun(format!(
            "{} has no argument the probe knows sets how many notifications it sends, so it cannot ask for a burst (name it with --count-arg)",
            tool.name
        )));
    }
    let (a, mine) = ctx.call_exactly(case, s, 500, 0).await?;
    case.wait_until(ctx.deadline(), |cs| finished(&cs[a], &mine))
        .await;
    let first = case.connection(a);
    if first.end == End::ClosedByServer && !mine.ended_in(&first) {
        // The server closed the stream before the end, as it may (to have clients poll): follow
        // it as a stock client does, and judge the whole as one resume.
        let resumes = resume(ctx, case, s, &mine, case.cursor(a)).await;
        return Ok(judged_resume(case, &known(&mine), a, &resumes, false));
    }
    let seen = case.snapshot();
    let over = over(&seen, a, &mine);
    Ok((judge_burst(&known(&mine), &seen[a], over), seen))
}

pub(super) async fn past_replay_capacity(ctx: &Ctx, case: &Case, s: &Session) -> Outcome {
    if let Some(tool) = ctx.call_tool.as_ref().filter(|t| t.count_arg.is_none()) {
        return Err(NotRun(format!(
            "{} has no argument the probe knows sets how many notifications it sends, so it cannot outrun a replay buffer (name it with --count-arg)",
            tool.name
        )));
    }
    let (a, mine) = ctx.call_exactly(case, s, 1000, 1).await?;
    receive(ctx, case, a, &mine, 1).await;
    case.drop_connection(a);
    let cursor = case.cursor(a);
    if cursor.is_none() {
        let seen = case.snapshot();
        return Ok((probe::judge::judge_unresumable_call(&mine, &seen[a]), seen));
    }
    // The call runs on unread; a thousand steps a millisecond apart are done well within this.
    sleep(Duration::from_millis(2500)).await;
    let resumes = resume(ctx, case, s, &mine, cursor).await;
    Ok(judged_resume(case, &known(&mine), a, &resumes, true))
}
