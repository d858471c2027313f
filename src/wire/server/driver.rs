//! The driver: turns lab time into the server's work — grace and retention deadlines, background
//! emits, tool-call steps — without a polling tick.
//!
//! In the sans-IO style of quinn's endpoint driver: each turn runs what is due under one lock
//! (reading the lab time once, under that lock), asks for the next deadline, and sleeps until
//! then or until something wakes it — a request, a connection that ended, a writer that made
//! room, the lab clock changing speed or being stepped. An idle server sleeps; a tool call with
//! `delay_ms: 0` runs turn after turn, as fast as its socket drains.

use super::handles::Wake;
use super::{ServeOptions, background, emission, liveness, tool};
use crate::clock::LabClock;
use crate::wire::{Core, Shared};
use forkscope_core::LabTime;
use std::sync::Arc;
use std::time::Duration;

/// Events one turn emits at most, so the core's lock is never held for long.
const EMITS_PER_TURN: usize = 512;

/// When the driver should run next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// More is due right now (the turn's budget ran out).
    Now,
    At(LabTime),
    /// Nothing is scheduled: sleep until woken.
    Idle,
}

/// One turn at lab time `now`: deadlines, then due background emits, then tool-call steps.
pub fn run_due(core: &mut Core, now: LabTime, options: &ServeOptions) -> Next {
    for expired in core.server.handle_timeout(now, &mut core.history) {
        tracing::info!(session = %expired.session.short(), stream = %expired.stream, state = expired.state.label(), "stream ended by its deadline");
        core.io
            .writers
            .close_stream(expired.session, expired.stream);
    }
    // Sessions the core ended by their idle deadline leave nothing behind here either.
    core.io.forget_gone_sessions(&core.server);
    let mut budget = EMITS_PER_TURN;
    let background = options
        .background
        .and_then(|rate| background::run_due(core, rate, now, &mut budget));
    let tools = tool::run_due(core, now, &mut budget);
    let emissions = emission::run_due(core, now, &mut budget);
    let liveness = liveness::run_due(core, now, options.liveness);
    let next = [
        core.server.poll_timeout(),
        background,
        tools,
        emissions,
        liveness,
    ]
    .into_iter()
    .flatten()
    .min();
    match next {
        Some(at) if at <= now => Next::Now,
        Some(at) => Next::At(at),
        None => Next::Idle,
    }
}

/// Runs turns until nothing more is due at `now` (a scripted lab's clock moved).
pub fn run_until_idle(core: &mut Core, now: LabTime, options: &ServeOptions) {
    while run_due(core, now, options) == Next::Now {}
}

pub(super) async fn drive(shared: Shared, clock: Arc<LabClock>, options: ServeOptions, wake: Wake) {
    loop {
        let next = {
            let mut core = shared.lock();
            let now = clock.now();
            run_due(&mut core, now, &options)
        };
        let sleep = match next {
            Next::Now => {
                // Let the sockets drain and requests in before the next turn.
                tokio::task::yield_now().await;
                continue;
            }
            Next::At(at) => clock.real_ms_until(at).map(Duration::from_millis),
            Next::Idle => None,
        };
        match sleep {
            Some(duration) => tokio::select! {
                () = tokio::time::sleep(duration) => {}
                () = wake.woken() => {}
                () = clock.changed() => {}
            },
            None => tokio::select! {
                () = wake.woken() => {}
                () = clock.changed() => {}
            },
        }
    }
}
