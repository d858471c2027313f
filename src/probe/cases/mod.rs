//! The battery: each case opens its own session, does to the server what a network and a
//! stock client do to it (break a stream, reconnect with a cursor, reconnect twice, send a cursor
//! that is wrong), and hands what it saw to the core's judge.

mod cursors;
mod faults;
mod list;
mod resumes;
mod tasks;
mod volume;

use super::discover::ToolPlan;
use super::http::{Case, Conn, Extra, HttpError, Session, Target, count};
use crate::wire::mcp::{Call, ToolCall};
use forkscope_core::probe::{self, Connection, End, Finding, Item, Known, StreamOf, judge_resume};
pub use list::CASES;
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::{Instant, sleep};

/// Where standalone-stream events come from.
#[derive(Debug, Clone, PartialEq)]
pub enum Emitter {
    /// A tool the probe asks for numbered events on the standalone stream.
    Tool(ToolPlan),
    /// Whatever the server sends on its own, if anything.
    OnItsOwn,
}

/// What every case shares.
#[derive(Debug)]
pub struct Ctx {
    pub target: Target,
    pub call_tool: Option<ToolPlan>,
    pub emitter: Emitter,
    pub repeat: u32,
    /// How many times longer than a case asks the probe makes a call or a standalone run: it
    /// grows when a whole stream arrived before the probe could break it, and stays grown.
    /// Indexed by whether the stream is the standalone one.
    stretch: [AtomicU64; 2],
    /// How long a case waits for what it expects before judging what it has.
    pub window: Duration,
    sessions: AtomicU64,
    run: String,
    /// The server speaks 2025-11-25 (else 2026-07-28 alone: only the `task-` cases run).
    pub legacy: bool,
    /// Sessions found unknown by the request right after their `initialize`.
    lost: AtomicU64,
    /// The user's fault commands and effect counters.
    pub faults: crate::probe::faults::Faults,
    /// What the running case did that its report should say (the commands it ran, the effects
    /// it counted, each task request and its answer), taken when it ends: (when, line, times
    /// in a row).
    notes: std::sync::Mutex<Vec<(f64, String, u32)>>,
    started: Instant,
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
        call_tool: Option<ToolPlan>,
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
            stretch: [AtomicU64::new(1), AtomicU64::new(1)],
            window,
            sessions: AtomicU64::new(0),
            run,
            legacy: true,
            lost: AtomicU64::new(0),
            faults: crate::probe::faults::Faults::default(),
            notes: std::sync::Mutex::new(Vec::new()),
            started: Instant::now(),
        }
    }

    /// A line for the running case's report, stamped with the time since the probe began; the
    /// same line again right after it is counted, not repeated (a task polled 40 times reads
    /// `tasks/get … → working (×40)`).
    pub fn note(&self, line: String) {
        let at = self.started.elapsed().as_secs_f64();
        if let Ok(mut notes) = self.notes.lock() {
            match notes.last_mut() {
                Some((_, last, times)) if *last == line => *times += 1,
                _ => notes.push((at, line, 1)),
            }
        }
    }

    /// The running case's notes, taken.
    pub fn take_notes(&self) -> Vec<String> {
        let notes = self
            .notes
            .lock()
            .map(|mut n| std::mem::take(&mut *n))
            .unwrap_or_default();
        notes
            .into_iter()
            .map(|(at, line, times)| match times {
                1 => format!("at {at:.2} s: {line}"),
                n => format!("at {at:.2} s: {line} (×{n})"),
            })
            .collect()
    }

    pub async fn session(&self) -> Result<Session, NotRun> {
        let n = self.sessions.fetch_add(1, Ordering::Relaxed);
        let opened = self.target.open_session(format!("{}s{n}", self.run)).await;
        if let Err(HttpError::SessionLost { .. }) = &opened {
            self.lost.fetch_add(1, Ordering::Relaxed);
        }
        opened.map_err(|e| NotRun(format!("could not open a session: {e}")))
    }

    /// Sessions lost so far, and sessions tried.
    fn lost_of_tried(&self) -> (u64, u64) {
        (
            self.lost.load(Ordering::Relaxed),
            self.sessions.load(Ordering::Relaxed),
        )
    }

    /// An idempotency key unique to this run and case.
    fn task_key(&self, case: &str) -> String {
        format!("forkscope-probe-{}-{case}", self.run)
    }

    fn deadline(&self) -> Instant {
        Instant::now() + self.window
    }

    fn emitter_plan(&self) -> Option<&ToolPlan> {
        match &self.emitter {
            Emitter::Tool(plan) => Some(plan),
            Emitter::OnItsOwn => None,
        }
    }

    /// A run of `count` events `delay_ms` apart made longer by the stretch: more of them where
    /// the tool takes a count, else further apart.
    fn stretched(&self, standalone: bool, count: u64, delay_ms: u64) -> (u64, u64) {
        let k = self.stretch[usize::from(standalone)].load(Ordering::Relaxed);
        let plan = if standalone {
            self.emitter_plan()
        } else {
            self.call_tool.as_ref()
        };
        match plan {
            Some(p) if p.count_arg.is_some() => {
                ((count * k).min(MAX_STRETCHED.max(count)), delay_ms)
            }
            Some(p) if p.pace.is_some() => (count, delay_ms.max(1) * k),
            _ => (count, delay_ms),
        }
    }

    /// The tool whose runs a case's streams come from can be made longer.
    fn can_lengthen(&self, standalone: bool) -> bool {
        let plan = if standalone {
            self.emitter_plan()
        } else {
            self.call_tool.as_ref()
        };
        plan.is_some_and(ToolPlan::can_lengthen)
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
        let (count, delay_ms) = self.stretched(true, count, delay_ms);
        // The emit call runs beside the wait: a tool may send its whole run before it answers.
        let (label, sent, called) = match &self.emitter {
            Emitter::Tool(plan) => {
                let (args, sent) = plan.args(count, delay_ms, &s.label);
                let called = self
                    .target
                    .request_detached("emit", s, emit(&plan.name, args));
                (
                    plan.label_arg.as_ref().map(|_| s.label.clone()),
                    sent,
                    Some(called),
                )
            }
            Emitter::OnItsOwn => (None, None, None),
        };
        // The session's label in an event's data tells the tool's run from what the server
        // sends on its own; a server that does not echo it is read without it.
        let numbered = |c: &Connection, labelled: bool| {
            c.events.iter().find_map(|r| match &r.item {
                Item::Numbered { channel, n }
                    if !labelled
                        || label
                            .as_ref()
                            .is_none_or(|l| channel.contains(&format!(":{l}:"))) =>
                {
                    Some((channel.clone(), *n))
                }
                _ => None,
            })
        };
        let wait = self.window.min(Duration::from_secs(3));
        let within = Instant::now() + wait;
        case.wait_until(within, |cs| numbered(&cs[a], true).is_some())
            .await;
        let seen = case.connection(a);
        let found = numbered(&seen, true).or_else(|| numbered(&seen, false));
        if found.is_none()
            && let Some(called) = called
            && called.is_finished()
            && let Ok(Err(e)) = called.await
            && let Emitter::Tool(plan) = &self.emitter
        {
            return Err(NotRun(format!("{} failed: {e}", plan.name)));
        }
        let Some((channel, first)) = found else {
            return Err(NotRun(match &self.emitter {
                Emitter::Tool(plan) => format!(
                    "{} was called, but no numbered event reached the standalone stream within {} ms",
                    plan.name,
                    wait.as_millis()
                ),
                Emitter::OnItsOwn => format!(
                    "the server sent nothing numbered on the standalone stream within {} ms, and no tool of tools/list notifies on it (name one with --standalone-tool)",
                    wait.as_millis()
                ),
            }));
        };
        // A run of `sent` events numbered on from the first one seen ends at a known number.
        let last = sent.map(|sent| first + sent.saturating_sub(1));
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
        let (steps, delay_ms) = self.stretched(false, steps, delay_ms);
        self.call_exactly(case, s, steps, delay_ms).await
    }

    /// [`Ctx::call`] at exactly this size, whatever the stretch (the volume cases size their
    /// calls themselves).
    async fn call_exactly(
        &self,
        case: &Case,
        s: &Session,
        steps: u64,
        delay_ms: u64,
    ) -> Result<(Conn, StreamOf), NotRun> {
        let Some(tool) = &self.call_tool else {
            return Err(NotRun("no tool to call: tools/list offers none with an integer argument that sets how many notifications it sends (name one with --tool and --count-arg)".into()));
        };
        let request = s.request_id();
        let token = format!("{}-{}", s.label, request);
        let (args, steps) = tool.args(steps, delay_ms, &s.label);
        let c = case.call(s, request, &tool.name, &args, &token).await;
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

/// `tools/call` of the tool that puts numbered events on the standalone stream.
fn emit(name: &str, args: Value) -> Call {
    Call::ToolsCall(ToolCall::plain(name, args))
}

fn cursor_header(cursor: Option<String>) -> Extra {
    Extra {
        last_event_id: cursor.map(String::into_bytes),
        ..Extra::default()
    }
}

/// The cases that break a stream the probe sized by the stretch, and whether it is the
/// standalone stream's (else a call's).
fn breaks_a_stretched_stream(name: &str) -> Option<bool> {
    match name {
        "standalone-resume"
        | "resume-while-old-open"
        | "plain-get-while-live"
        | "two-resumes-at-once" => Some(true),
        "call-resume" | "call-resume-after-result" | "cursor-of-another-stream" => Some(false),
        _ => None,
    }
}

/// The most events a lengthened run asks for: past a server's replay history a resume is
/// refused or lost, which `past-replay-capacity` tests on purpose and these cases must not.
const MAX_STRETCHED: u64 = 250;

/// Lengthenings a case may ask for, each ten times the last.
const MAX_LENGTHENINGS: u32 = 2;

/// Runs one case by name. A case whose whole stream arrived before the probe could break it
/// tested nothing: the probe makes the tool's runs ten times longer — for this case and every
/// later one — and runs it again, while the tool lets it.
/// A case that needs the user's fault commands.
pub fn is_fault_case(case: &str) -> bool {
    faults::CASES.contains(&case)
}

/// A 2026-07-28 case (the tasks extension), run with no session.
pub fn is_modern(case: &str) -> bool {
    case.starts_with("task-")
}

pub async fn run(ctx: &Ctx, name: &str) -> Outcome {
    if faults::CASES.contains(&name) {
        return faults::run(ctx, name).await;
    }
    if is_modern(name) {
        return tasks::run(ctx, name).await;
    }
    if !ctx.legacy {
        return Err(NotRun(
            "the server speaks 2026-07-28 alone: no initialize, no session, no stream to resume"
                .into(),
        ));
    }
    // A case stopped by a session the server forgot meets the failure itself: it says so.
    let (lost, tried) = ctx.lost_of_tried();
    let outcome = run_legacy(ctx, name).await;
    let (lost_now, tried_now) = ctx.lost_of_tried();
    match (
        outcome,
        probe::judge_lost_sessions(lost_now - lost, tried_now - tried),
    ) {
        (Err(NotRun(_)), Some(found)) => Ok((found, Vec::new())),
        (outcome, _) => outcome,
    }
}

/// A 2025-11-25 case, run again with its tool's runs made longer while the whole stream
/// arrived before the break.
async fn run_legacy(ctx: &Ctx, name: &str) -> Outcome {
    let mut lengthened = 0;
    loop {
        let outcome = run_once(ctx, name).await;
        let ended_early = matches!(
            &outcome,
            Ok((
                Finding {
                    verdict: probe::Verdict::NotExercised {
                        because: probe::Unexercised::EndedBeforeBreak { .. }
                    },
                    ..
                },
                _
            ))
        );
        let standalone = breaks_a_stretched_stream(name);
        let can = standalone.is_some_and(|s| ctx.can_lengthen(s));
        let stretch = &ctx.stretch[usize::from(standalone.unwrap_or(false))];
        if !ended_early || !can || lengthened == MAX_LENGTHENINGS {
            return outcome.map(|(mut finding, seen)| {
                if lengthened > 0 {
                    let k = stretch.load(Ordering::Relaxed);
                    finding.why = format!(
                        "{} (the tool's runs made up to {k} times longer than asked: at first the whole stream arrived before the break)",
                        finding.why
                    );
                } else if ended_early && !can {
                    finding.why = format!(
                        "{} (the tool has no count or pace argument the probe knows, so it cannot make the run outlast the break)",
                        finding.why
                    );
                }
                (finding, seen)
            });
        }
        stretch.fetch_max(10 * stretch.load(Ordering::Relaxed), Ordering::Relaxed);
        lengthened += 1;
    }
}

async fn run_once(ctx: &Ctx, name: &str) -> Outcome {
    let s = ctx.session().await?;
    let case = Case::new(&ctx.target);
    let outcome = match name {
        "standalone-resume" => resumes::standalone_resume(ctx, &case, &s).await,
        "call-resume" => resumes::call_resume(ctx, &case, &s, 20, 20, Duration::ZERO).await,
        "call-resume-after-result" => {
            resumes::call_resume(ctx, &case, &s, 10, 10, Duration::from_millis(600)).await
        }
        "resume-while-old-open" => resumes::resume_while_old_open(ctx, &case, &s).await,
        "plain-get-while-live" => resumes::plain_get_while_live(ctx, &case, &s).await,
        "two-resumes-at-once" => resumes::two_resumes_at_once_noticed(ctx, &case, &s).await,
        "resume-races-emission" => resumes::resume_races_emission(ctx).await,
        "cursor-of-another-stream" => resumes::cursor_of_another_stream(ctx, &case, &s).await,
        "cursor-of-another-session" => cursors::cursor_of_another_session(ctx, &case, &s).await,
        "bogus-cursor" => {
            cursors::bad_cursor(
                ctx,
                &case,
                &s,
                format!("forkscope-probe-{}-never-issued", s.label).into_bytes(),
            )
            .await
        }
        "malformed-cursor" => {
            cursors::bad_cursor(
                ctx,
                &case,
                &s,
                b"\xff\xfe../../%00 \"not an event id\"".to_vec(),
            )
            .await
        }
        "cursor-ahead" => cursors::cursor_ahead(ctx, &case, &s).await,
        "huge-cursor" => cursors::huge_cursor(ctx, &case, &s).await,
        "burst-order" => volume::burst_order(ctx, &case, &s).await,
        "past-replay-capacity" => volume::past_replay_capacity(ctx, &case, &s).await,
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
