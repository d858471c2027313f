//! The battery: each case opens its own session, does to the server what a network and a
//! stock client do to it (break a stream, reconnect with a cursor, reconnect twice, send a cursor
//! that is wrong), and hands what it saw to the core's judge.

use super::http::{Case, Conn, Extra, Session, Target, count};
use forkscope_core::probe::{
    self, Connection, End, Finding, Item, Known, StreamOf, judge_burst, judge_foreign_cursor,
    judge_resume, judge_second_get,
};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::{Instant, sleep};

/// Every case, in the order the probe runs them: (name, what it does).
pub const CASES: &[(&str, &str)] = &[
    (
        "standalone-resume",
        "break the standalone GET stream and resume it with Last-Event-ID",
    ),
    (
        "call-resume",
        "break a tool call's stream mid-call and resume it with Last-Event-ID",
    ),
    (
        "call-resume-after-result",
        "break a tool call's stream and resume it after the call finished",
    ),
    (
        "resume-while-old-open",
        "resume while the old connection is still open (half-open, as the server sees it)",
    ),
    (
        "plain-get-while-live",
        "open a second, plain GET while the standalone stream is live",
    ),
    (
        "two-resumes-at-once",
        "resume twice at once from the same cursor",
    ),
    (
        "resume-races-emission",
        "resume at once while events are being emitted fast (repeated)",
    ),
    (
        "cursor-of-another-stream",
        "resume a call's stream while the standalone stream is live",
    ),
    (
        "cursor-of-another-session",
        "resume in one session with a cursor from another session",
    ),
    (
        "bogus-cursor",
        "resume with a Last-Event-ID the server never issued",
    ),
    (
        "malformed-cursor",
        "resume with a Last-Event-ID of bytes no server issues",
    ),
    (
        "cursor-ahead",
        "resume with a cursor past the last event sent",
    ),
    ("huge-cursor", "resume with a 64 KiB Last-Event-ID"),
    (
        "burst-order",
        "a 500-step call on one connection: order, duplicates, gaps",
    ),
    (
        "past-replay-capacity",
        "break a call's stream at its first event, let it run 1000 more steps, resume",
    ),
    (
        "unknown-session",
        "GET with a session id the server never issued",
    ),
    (
        "unsupported-version",
        "GET with MCP-Protocol-Version 1999-01-01",
    ),
    (
        "foreign-origin",
        "GET with Origin: http://forkscope-probe.invalid",
    ),
];

/// The tool that gives a call a stream of progress notifications.
#[derive(Debug, Clone)]
pub struct CallTool {
    pub name: String,
    /// `--args`, or `{}` filled with `steps` and `delay_ms` where the schema has them.
    pub args: Value,
    pub takes_steps: bool,
    pub takes_delay: bool,
    pub found: &'static str,
}

impl CallTool {
    /// Arguments for a call of `steps` steps, and the steps the call will send if known.
    fn args(&self, steps: u64, delay_ms: u64) -> (Value, Option<u64>) {
        let mut args = self.args.clone();
        if let Value::Object(map) = &mut args {
            if self.takes_steps {
                map.insert("steps".into(), json!(steps));
            }
            if self.takes_delay {
                map.insert("delay_ms".into(), json!(delay_ms));
            }
        }
        let steps = args.get("steps").and_then(Value::as_u64);
        (args, steps)
    }
}

/// Where standalone-stream events come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Emitter {
    /// A tool (`emit_standalone {count, delay_ms, label}`) the probe asks for numbered events.
    Tool(String),
    /// Whatever the server sends on its own, if anything.
    OnItsOwn,
}

/// What every case shares.
#[derive(Debug)]
pub struct Ctx {
    pub target: Target,
    pub call_tool: Option<CallTool>,
    pub emitter: Emitter,
    pub repeat: u32,
    /// How long a case waits for what it expects before judging what it has.
    pub window: Duration,
    sessions: AtomicU64,
    run: String,
}

/// A case that could not be run, and why.
#[derive(Debug)]
pub struct NotRun(pub String);

pub type Outcome = Result<(Finding, Vec<Connection>), NotRun>;

/// A stock client's pause before reconnecting (the SDKs wait a second or the server's `retry`;
/// a tenth is enough for the server to notice the break, and keeps the battery quick).
const RECONNECT_DELAY: Duration = Duration::from_millis(100);

impl Ctx {
    pub fn new(
        target: Target,
        call_tool: Option<CallTool>,
        emitter: Emitter,
        repeat: u32,
        window: Duration,
        run: String,
    ) -> Ctx {
        Ctx {
            target,
            call_tool,
            emitter,
            repeat,
            window,
            sessions: AtomicU64::new(0),
            run,
        }
    }

    pub async fn session(&self) -> Result<Session, NotRun> {
        let n = self.sessions.fetch_add(1, Ordering::Relaxed);
        self.target
            .open_session(format!("{}s{n}", self.run))
            .await
            .map_err(|e| NotRun(format!("could not open a session: {e}")))
    }

    fn deadline(&self) -> Instant {
        Instant::now() + self.window
    }

    /// Opens the standalone stream and gets numbered events flowing on it: `count` of them, one
    /// every `delay_ms`, if the server has a tool for it.
    async fn standalone(
        &self,
        case: &Case,
        s: &Session,
        count: u64,
        delay_ms: u64,
    ) -> Result<(Conn, StreamOf), NotRun> {
        let a = case.get(s, Extra::default()).await;
        let conn = case.connection(a);
        if conn.answer.opened().is_none() {
            return Err(NotRun(format!(
                "the server offers no standalone stream: GET answered {}",
                answer_words(&conn)
            )));
        }
        let label = match &self.emitter {
            Emitter::Tool(name) => {
                let args = json!({ "count": count, "delay_ms": delay_ms, "label": s.label });
                self.target
                    .request(
                        "emit_standalone",
                        s,
                        "tools/call",
                        json!({ "name": name, "arguments": args }),
                    )
                    .await
                    .map_err(|e| NotRun(format!("{name} failed: {e}")))?;
                Some(s.label.clone())
            }
            Emitter::OnItsOwn => None,
        };
        let numbered = |c: &Connection| {
            c.events.iter().find_map(|r| match &r.item {
                Item::Numbered { channel, .. }
                    if label
                        .as_ref()
                        .is_none_or(|l| channel.contains(&format!(":{l}:"))) =>
                {
                    Some(channel.clone())
                }
                _ => None,
            })
        };
        let wait = self.window.min(Duration::from_secs(3));
        let within = Instant::now() + wait;
        case.wait_until(within, |cs| numbered(&cs[a]).is_some())
            .await;
        let Some(channel) = numbered(&case.connection(a)) else {
            return Err(NotRun(match &self.emitter {
                Emitter::Tool(name) => format!(
                    "{name} was called, but no numbered event reached the standalone stream within {} ms",
                    wait.as_millis()
                ),
                Emitter::OnItsOwn => format!(
                    "the server sent nothing numbered on the standalone stream within {} ms, and has no `emit_standalone` tool to ask for some",
                    wait.as_millis()
                ),
            }));
        };
        let last = label.map(|_| count);
        Ok((a, StreamOf::Channel { channel, last }))
    }

    /// Starts a tool call with a progress token: its stream, and how to recognise it.
    async fn call(
        &self,
        case: &Case,
        s: &Session,
        steps: u64,
        delay_ms: u64,
    ) -> Result<(Conn, StreamOf), NotRun> {
        let Some(tool) = &self.call_tool else {
            return Err(NotRun("no tool to call: tools/list offers none that takes `steps` (name one with --tool and --args)".into()));
        };
        let request = json!(s.request_id());
        let token = format!("{}-{}", s.label, request);
        let (args, steps) = tool.args(steps, delay_ms);
        let c = case.call(s, &request, &tool.name, &args, &token).await;
        let conn = case.connection(c);
        match &conn.answer {
            probe::Answer::Stream { .. } => {}
            probe::Answer::Json { .. } => {
                return Err(NotRun(format!(
                    "the server answered tools/call {} with JSON, not a stream: there is nothing to resume",
                    tool.name
                )));
            }
            _ => {
                return Err(NotRun(format!(
                    "tools/call {} answered {}",
                    tool.name,
                    answer_words(&conn)
                )));
            }
        }
        Ok((
            c,
            StreamOf::Call {
                token: Value::String(token).to_string(),
                request: request.to_string(),
                steps,
            },
        ))
    }
}

fn answer_words(c: &Connection) -> String {
    match &c.answer {
        probe::Answer::Stream { status, .. } => format!("{status} with a stream"),
        probe::Answer::Json { status, .. } => format!("{status} with JSON"),
        probe::Answer::Rejected { status, reason } => match reason {
            Some(r) => format!("{status} ({r})"),
            None => status.to_string(),
        },
        probe::Answer::NoAnswer { why } => why.clone(),
    }
}

fn known(mine: &StreamOf) -> Known<'_> {
    Known {
        mine,
        same_session: &[],
        other_sessions: &[],
    }
}

fn mine_count(c: &Connection, mine: &StreamOf) -> usize {
    count(c, |i| mine.owns(i))
}

/// The stream has reached its end, or the connection is over.
fn finished(c: &Connection, mine: &StreamOf) -> bool {
    c.end != End::Open || mine.ended_in(c)
}

/// Reconnects a stock client makes when a resumed stream is closed before its end (a server
/// may close streams on purpose, to have clients poll); the case's window bounds them too.
const MAX_RECONNECTS: usize = 50;

/// Resumes from `cursor` as a stock client does: when the server closes the resumed stream
/// before the stream's end, it reconnects with the latest id it holds, while the window lasts.
async fn resume(
    ctx: &Ctx,
    case: &Case,
    s: &Session,
    mine: &StreamOf,
    mut cursor: Option<String>,
) -> Vec<Conn> {
    let deadline = ctx.deadline();
    let mut chain = Vec::new();
    for attempt in 0..MAX_RECONNECTS {
        if attempt > 0 {
            sleep(RECONNECT_DELAY).await;
        }
        let b = case.get(s, cursor_header(cursor.clone())).await;
        chain.push(b);
        case.wait_until(deadline, |cs| far_enough(&cs[b], mine, 0))
            .await;
        let c = case.connection(b);
        let over = c.answer.opened().is_none() || c.end != End::ClosedByServer || mine.ended_in(&c);
        if over || Instant::now() >= deadline {
            break;
        }
        if let Some(id) = case.cursor(b) {
            cursor = Some(id);
        }
    }
    chain
}

/// Whether the stream was over when the case judged it — it reached its end, or the server
/// closed its last connection — so what is missing is missing, not merely late.
fn over(seen: &[Connection], last: Conn, mine: &StreamOf) -> bool {
    complete(mine) && (mine.ended_in(&seen[last]) || seen[last].end != End::Open)
}

/// Waits until `n` events of `mine` reached connection `conn`, or it ended.
async fn receive(ctx: &Ctx, case: &Case, conn: Conn, mine: &StreamOf, n: usize) {
    case.wait_until(ctx.deadline(), |cs| {
        mine_count(&cs[conn], mine) >= n || cs[conn].end != End::Open
    })
    .await;
}

/// What the case saw, and the judge's ruling on the resume from `first` through `resumes`.
fn judged_resume(
    case: &Case,
    known: &Known<'_>,
    first: Conn,
    resumes: &[Conn],
    may_refuse: bool,
) -> (Finding, Vec<Connection>) {
    let seen = case.snapshot();
    let over = resumes.last().is_some_and(|&l| over(&seen, l, known.mine));
    let finding = judge_resume(known, &links(&seen, first, resumes), may_refuse, over);
    (finding, seen)
}

/// The connections of a resume, the broken one first, as the judge reads them.
fn links<'a>(seen: &'a [Connection], first: Conn, resumes: &[Conn]) -> Vec<&'a Connection> {
    std::iter::once(first)
        .chain(resumes.iter().copied())
        .map(|i| &seen[i])
        .collect()
}

/// How far a stream must get before the case judges it: its end, or for a source with no known
/// end, a few more events.
fn far_enough(c: &Connection, mine: &StreamOf, before: usize) -> bool {
    match mine {
        StreamOf::Channel { last: None, .. } => {
            c.end != End::Open || mine_count(c, mine) >= before + 5
        }
        _ => finished(c, mine),
    }
}

fn complete(mine: &StreamOf) -> bool {
    !matches!(mine, StreamOf::Channel { last: None, .. })
}

fn cursor_header(cursor: Option<String>) -> Extra {
    Extra {
        last_event_id: cursor.map(String::into_bytes),
        ..Extra::default()
    }
}

/// Runs one case by name.
pub async fn run(ctx: &Ctx, name: &str) -> Outcome {
    let s = ctx.session().await?;
    let case = Case::new(&ctx.target);
    let outcome = match name {
        "standalone-resume" => standalone_resume(ctx, &case, &s).await,
        "call-resume" => call_resume(ctx, &case, &s, 20, 20, Duration::ZERO).await,
        "call-resume-after-result" => {
            call_resume(ctx, &case, &s, 10, 10, Duration::from_millis(600)).await
        }
        "resume-while-old-open" => resume_while_old_open(ctx, &case, &s).await,
        "plain-get-while-live" => plain_get_while_live(ctx, &case, &s).await,
        "two-resumes-at-once" => two_resumes_at_once(ctx, &case, &s).await,
        "resume-races-emission" => resume_races_emission(ctx).await,
        "cursor-of-another-stream" => cursor_of_another_stream(ctx, &case, &s).await,
        "cursor-of-another-session" => cursor_of_another_session(ctx, &case, &s).await,
        "bogus-cursor" => {
            bad_cursor(
                ctx,
                &case,
                &s,
                format!("forkscope-probe-{}-never-issued", s.label).into_bytes(),
            )
            .await
        }
        "malformed-cursor" => {
            bad_cursor(
                ctx,
                &case,
                &s,
                b"\xff\xfe../../%00 \"not an event id\"".to_vec(),
            )
            .await
        }
        "cursor-ahead" => cursor_ahead(ctx, &case, &s).await,
        "huge-cursor" => bad_cursor(ctx, &case, &s, vec![b'9'; 64 * 1024]).await,
        "burst-order" => burst_order(ctx, &case, &s).await,
        "past-replay-capacity" => past_replay_capacity(ctx, &case, &s).await,
        "unknown-session" => {
            let extra = Extra {
                session_id: Some(format!("forkscope-probe-{}-no-such-session", s.label)),
                ..Extra::default()
            };
            basics(&case, &s, extra, probe::judge::judge_unknown_session).await
        }
        "unsupported-version" => {
            let extra = Extra {
                protocol_version: Some("1999-01-01".into()),
                ..Extra::default()
            };
            basics(&case, &s, extra, probe::judge::judge_unsupported_version).await
        }
        "foreign-origin" => {
            let extra = Extra {
                origin: Some("http://forkscope-probe.invalid".into()),
                ..Extra::default()
            };
            basics(&case, &s, extra, probe::judge::judge_foreign_origin).await
        }
        other => Err(NotRun(format!("no case named {other}"))),
    };
    drop(case);
    ctx.target.end_session(&s).await;
    outcome
}

async fn standalone_resume(ctx: &Ctx, case: &Case, s: &Session) -> Outcome {
    let (a, mine) = ctx.standalone(case, s, 30, 20).await?;
    receive(ctx, case, a, &mine, 3).await;
    let cursor = case.cursor(a);
    case.drop_connection(a);
    sleep(RECONNECT_DELAY).await;
    let had_cursor = cursor.is_some();
    let resumes = resume(ctx, case, s, &mine, cursor).await;
    let (mut finding, seen) = judged_resume(case, &known(&mine), a, &resumes, false);
    if !had_cursor && !finding.holds {
        finding.why = format!(
            "the events carry no ids, so the client reconnected without a cursor ({})",
            finding.why
        );
    }
    Ok((finding, seen))
}

/// Breaks a call's stream after three progress notifications and resumes it after `pause`
/// (beyond the reconnect delay): with a long pause, the call has finished by then.
async fn call_resume(
    ctx: &Ctx,
    case: &Case,
    s: &Session,
    steps: u64,
    delay_ms: u64,
    pause: Duration,
) -> Outcome {
    let (a, mine) = ctx.call(case, s, steps, delay_ms).await?;
    receive(ctx, case, a, &mine, 3).await;
    let cursor = case.cursor(a);
    case.drop_connection(a);
    if cursor.is_none() {
        let seen = case.snapshot();
        return Ok((probe::judge::judge_unresumable_call(&mine, &seen[a]), seen));
    }
    sleep(RECONNECT_DELAY + pause).await;
    let resumes = resume(ctx, case, s, &mine, cursor).await;
    Ok(judged_resume(case, &known(&mine), a, &resumes, false))
}

async fn resume_while_old_open(ctx: &Ctx, case: &Case, s: &Session) -> Outcome {
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

async fn plain_get_while_live(ctx: &Ctx, case: &Case, s: &Session) -> Outcome {
    let (a, mine) = ctx.standalone(case, s, 30, 20).await?;
    receive(ctx, case, a, &mine, 3).await;
    let before = mine_count(&case.connection(a), &mine);
    let b = case.get(s, Extra::default()).await;
    case.wait_until(ctx.deadline(), |cs| {
        cs[b].end != End::Open
            || far_enough(&cs[a], &mine, before)
                && (complete(&mine) || far_enough(&cs[b], &mine, 0))
    })
    .await;
    let seen = case.snapshot();
    Ok((judge_second_get(&known(&mine), &seen[a], &seen[b]), seen))
}

async fn two_resumes_at_once(ctx: &Ctx, case: &Case, s: &Session) -> Outcome {
    let (a, mine) = ctx.standalone(case, s, 60, 20).await?;
    receive(ctx, case, a, &mine, 3).await;
    let cursor = case.cursor(a);
    case.drop_connection(a);
    sleep(RECONNECT_DELAY).await;
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
    case.wait_until(ctx.deadline(), |cs| {
        live(cs) >= 3
            || (cs[b].end != End::Open && cs[c].end != End::Open)
            || finished(&cs[b], &mine)
            || finished(&cs[c], &mine)
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

async fn resume_races_emission(ctx: &Ctx) -> Outcome {
    let mut runs = 0;
    let mut last = None;
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
            let cursor = case.cursor(a);
            case.drop_connection(a);
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
            runs += 1;
            if !finding.holds {
                return Ok((finding, seen));
            }
            if !matches!(last, Some(Ok(_))) || standalone {
                last = Some(Ok((finding, seen)));
            }
        }
    }
    match last {
        Some(Ok((mut finding, seen))) if runs > 0 => {
            finding.why = format!(
                "{runs} racing resume{} ({} rounds), each clean",
                if runs == 1 { "" } else { "s" },
                ctx.repeat.max(1)
            );
            Ok((finding, seen))
        }
        Some(Err(why)) => Err(why),
        _ => Err(NotRun("nothing to race".into())),
    }
}

async fn cursor_of_another_stream(ctx: &Ctx, case: &Case, s: &Session) -> Outcome {
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

/// Another session's cursor: first of its standalone stream (the probe labels those events per
/// session, so a leak is seen), then of a tool call's stream. The worse finding is reported.
async fn cursor_of_another_session(ctx: &Ctx, case: &Case, s: &Session) -> Outcome {
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
        .max_by_key(|(i, f)| (!f.holds, f.verdict.severity(), std::cmp::Reverse(*i)))
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
async fn bad_cursor(ctx: &Ctx, case: &Case, s: &Session, cursor: Vec<u8>) -> Outcome {
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
        if let Emitter::Tool(name) = &ctx.emitter {
            let args = json!({ "count": 5, "delay_ms": 10, "label": s.label });
            let _ = ctx
                .target
                .request(
                    "emit_standalone",
                    s,
                    "tools/call",
                    json!({ "name": name, "arguments": args }),
                )
                .await;
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

async fn cursor_ahead(ctx: &Ctx, case: &Case, s: &Session) -> Outcome {
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
                super::http::shorten(id)
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

async fn burst_order(ctx: &Ctx, case: &Case, s: &Session) -> Outcome {
    if ctx.call_tool.as_ref().is_some_and(|t| !t.takes_steps) {
        return Err(NotRun(
            "the call tool takes no `steps`: the probe cannot ask for a burst".into(),
        ));
    }
    let (a, mine) = ctx.call(case, s, 500, 0).await?;
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

async fn past_replay_capacity(ctx: &Ctx, case: &Case, s: &Session) -> Outcome {
    if ctx.call_tool.as_ref().is_some_and(|t| !t.takes_steps) {
        return Err(NotRun(
            "the call tool takes no `steps`: the probe cannot outrun a replay buffer".into(),
        ));
    }
    let (a, mine) = ctx.call(case, s, 1000, 1).await?;
    receive(ctx, case, a, &mine, 1).await;
    let cursor = case.cursor(a);
    case.drop_connection(a);
    if cursor.is_none() {
        let seen = case.snapshot();
        return Ok((probe::judge::judge_unresumable_call(&mine, &seen[a]), seen));
    }
    // The call runs on unread; a thousand steps a millisecond apart are done well within this.
    sleep(Duration::from_millis(2500)).await;
    let resumes = resume(ctx, case, s, &mine, cursor).await;
    Ok(judged_resume(case, &known(&mine), a, &resumes, true))
}

async fn basics(
    case: &Case,
    s: &Session,
    extra: Extra,
    judge: fn(&probe::Answer) -> Finding,
) -> Outcome {
    let b = case.get(s, extra).await;
    case.drop_connection(b);
    let seen = case.snapshot();
    Ok((judge(&seen[b].answer), seen))
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
