//! The tool call and the background emitter driven step by step against a real [`Server`], on
//! a clock that only moves when a test moves it.

use super::*;
use crate::config::LabConfig;
use crate::history::History;
use crate::ids::{ConnectionId, EventId, SessionId, SplitMix64, StreamId};
use crate::policy::Policy;
use crate::resume::{ResumeDecision, ResumeRequest};
use crate::server::{EmitError, Server, StreamState};
use crate::time::LabTime;
use crate::vocabulary::{Effect, PayloadKey};

struct Lab {
    server: Server,
    history: History,
    rng: SplitMix64,
    session: SessionId,
}

fn at(ms: u64) -> LabTime {
    LabTime::ZERO.plus(ms)
}

impl Lab {
    fn new() -> Lab {
        let mut history = History::new(1_000);
        let mut rng = SplitMix64::new(7);
        let mut server = Server::new(LabConfig::default(), Policy::Fenced).unwrap();
        let session = server
            .open_session(LabTime::ZERO, &mut rng, &mut history)
            .unwrap();
        Lab {
            server,
            history,
            rng,
            session,
        }
    }

    /// A request stream for a tool call.
    fn request_stream(&mut self) -> StreamId {
        let (stream, _) = self
            .server
            .open_request_stream(
                LabTime::ZERO,
                self.session,
                None,
                ConnectionId(1),
                &mut self.rng,
                &mut self.history,
            )
            .unwrap();
        stream
    }

    /// The session's standalone stream, for background emits to land on.
    fn standalone_stream(&mut self) {
        let request = ResumeRequest {
            session: self.session,
            token: None,
            last_event_id: None,
            connection: ConnectionId(2),
        };
        let decision = self
            .server
            .handle_get(LabTime::ZERO, &request, &mut self.rng, &mut self.history)
            .unwrap();
        assert!(matches!(decision, ResumeDecision::NewStream(_)));
    }

    fn key(&self, event: EventId) -> PayloadKey {
        let outgoing = self.server.outgoing(self.session, event).unwrap();
        outgoing.key.unwrap().parse().unwrap()
    }

    fn state(&self, stream: StreamId) -> StreamState {
        self.server
            .session(self.session)
            .and_then(|s| s.stream(stream))
            .unwrap()
            .state()
    }

    fn take(&mut self, call: &mut ToolCall, now: LabTime) -> Option<ToolOutcome> {
        call.take(now, "{}", &mut self.server, &mut self.history)
    }
}

fn spec(steps: u64, delay_ms: u64) -> ToolSpec {
    ToolSpec::checked(steps, delay_ms).unwrap()
}

#[test]
fn a_call_takes_every_step_on_time_then_finishes_with_its_result() {
    let mut lab = Lab::new();
    let call_stream = lab.request_stream();
    let mut call = ToolCall::new(lab.session, call_stream, spec(3, 100), true, LabTime::ZERO);
    assert_eq!(call.poll_timeout(), Some(at(100)));
    assert_eq!(call.poll_step(at(99)), None, "not due before its delay");
    let first = Some(ToolStep::Progress { done: 1, total: 3 });
    assert_eq!(call.poll_step(at(100)), first);
    assert_eq!(call.poll_step(at(100)), first, "polling takes nothing");

    let Some(ToolOutcome::Progressed(event)) = lab.take(&mut call, at(100)) else {
        panic!("step 1 emits");
    };
    let progress = |step| Effect::Progress {
        call: call_stream,
        step,
    };
    assert_eq!(lab.key(event).effect(), progress(1));
    assert_eq!(call.poll_timeout(), Some(at(200)));

    // Late: both due steps are taken, each due one delay after the one before.
    let Some(ToolOutcome::Progressed(second)) = lab.take(&mut call, at(350)) else {
        panic!("step 2 emits");
    };
    assert_eq!(lab.key(second).effect(), progress(2));
    assert_eq!(call.poll_timeout(), Some(at(300)));
    let Some(ToolOutcome::Progressed(third)) = lab.take(&mut call, at(350)) else {
        panic!("step 3 emits");
    };
    assert_eq!(lab.key(third).effect(), progress(3));
    assert_eq!((call.done(), call.poll_timeout()), (3, Some(at(400))));
    assert_eq!(lab.take(&mut call, at(399)), None);

    assert_eq!(call.poll_step(at(400)), Some(ToolStep::Result { steps: 3 }));
    let Some(ToolOutcome::Finished(Some(result))) = lab.take(&mut call, at(400)) else {
        panic!("the result is emitted");
    };
    let key = lab.key(result);
    assert_eq!(key.effect(), Effect::Result { call: call_stream });
    assert!(key.ends_call());
    assert!(matches!(
        lab.state(call_stream),
        StreamState::Finished { .. }
    ));
    assert!(call.is_over());
    assert_eq!(call.poll_timeout(), None);
    assert_eq!(call.poll_step(at(10_000)), None);
    assert_eq!(
        lab.take(&mut call, at(10_000)),
        None,
        "nothing after the result"
    );
}

#[test]
fn without_a_progress_token_the_steps_are_silent() {
    let mut lab = Lab::new();
    let stream = lab.request_stream();
    let mut call = ToolCall::new(lab.session, stream, spec(3, 100), false, LabTime::ZERO);
    assert_eq!(call.poll_step(at(250)), None, "silent steps pass unseen");
    assert_eq!(call.done(), 2);
    assert_eq!(call.poll_step(at(400)), Some(ToolStep::Result { steps: 3 }));
    assert!(matches!(
        lab.take(&mut call, at(400)),
        Some(ToolOutcome::Finished(Some(_)))
    ));
    let high_water = lab
        .server
        .session(lab.session)
        .and_then(|s| s.stream(stream))
        .unwrap()
        .high_water();
    assert_eq!(high_water, 1, "only the result was emitted");
}

#[test]
fn a_call_whose_stream_went_away_is_over() {
    let mut lab = Lab::new();
    let stream = lab.request_stream();
    let mut call = ToolCall::new(lab.session, stream, spec(3, 100), true, LabTime::ZERO);
    lab.server
        .finish_request_stream(at(50), lab.session, stream, &mut lab.history);
    assert_eq!(lab.take(&mut call, at(100)), Some(ToolOutcome::Lost));
    assert!(call.is_over());
    assert_eq!(call.poll_timeout(), None);
}

#[test]
fn a_stopped_call_ends_with_why_and_its_stream_finishes() {
    let mut lab = Lab::new();
    let stream = lab.request_stream();
    let mut call = ToolCall::new(lab.session, stream, spec(3, 100), true, LabTime::ZERO);
    lab.take(&mut call, at(100));
    let stopped = call.stop(at(150), "{}", &mut lab.server, &mut lab.history);
    let Some(ToolOutcome::Finished(Some(last))) = stopped else {
        panic!("the stop is the stream's last event");
    };
    assert_eq!(lab.key(last).effect(), Effect::Stopped { call: stream });
    assert!(matches!(lab.state(stream), StreamState::Finished { .. }));
    assert_eq!(
        call.stop(at(160), "{}", &mut lab.server, &mut lab.history),
        None,
        "a call stops once"
    );
}

#[test]
fn a_cancelled_call_sends_nothing_more() {
    let mut lab = Lab::new();
    let stream = lab.request_stream();
    let mut call = ToolCall::new(lab.session, stream, spec(3, 100), true, LabTime::ZERO);
    assert!(call.cancel(at(50), &mut lab.server, &mut lab.history));
    assert!(!call.cancel(at(60), &mut lab.server, &mut lab.history));
    assert!(matches!(lab.state(stream), StreamState::Finished { .. }));
    assert_eq!(lab.take(&mut call, at(1_000)), None);
}

#[test]
fn a_call_is_bounded() {
    assert!(ToolSpec::checked(1, 0).is_ok());
    assert!(ToolSpec::checked(MAX_STEPS, 60).is_ok());
    for (steps, delay) in [(0, 1), (MAX_STEPS + 1, 1), (1, MAX_DELAY_MS + 1)] {
        assert!(matches!(
            ToolSpec::checked(steps, delay),
            Err(ToolSpecError::OutOfRange { .. })
        ));
    }
    assert_eq!(
        ToolSpec::checked(MAX_STEPS, MAX_DELAY_MS),
        Err(ToolSpecError::TooLong {
            total_ms: MAX_STEPS * MAX_DELAY_MS,
            max_ms: MAX_CALL_MS
        })
    );
}

#[test]
fn on_demand_emits_are_numbered_by_what_landed() {
    let mut lab = Lab::new();
    let mut task = BackgroundEmitter::on_demand(lab.session);
    assert_eq!(task.poll_timeout(), None, "no schedule");
    let none = task.emit(at(1), "{}", &mut lab.server, &mut lab.history);
    assert_eq!(none, Err(EmitError::NoStream));
    assert_eq!(task.next_number(), 1, "a refused emit takes no number");
    lab.standalone_stream();
    for n in 1..=2 {
        let emitted = task
            .emit(at(2), "{}", &mut lab.server, &mut lab.history)
            .unwrap();
        assert_eq!(lab.key(emitted.event).effect(), Effect::Background { n });
    }
    assert_eq!(task.emitted(), 2);
    task.handle_timeout(at(10_000));
    assert!(!task.is_owed());
    assert!(
        task.take_owed(at(10_000), "{}", &mut lab.server, &mut lab.history)
            .is_none()
    );
}

#[test]
fn a_schedule_owes_what_is_due_and_skips_what_it_fell_too_far_behind() {
    let mut lab = Lab::new();
    lab.standalone_stream();
    let rate = EmitRate::every_ms(100);
    let mut task = BackgroundEmitter::scheduled(lab.session, rate, 3, LabTime::ZERO);
    task.handle_timeout(at(99));
    assert!(!task.is_owed());
    assert_eq!(task.poll_timeout(), Some(at(100)));

    task.handle_timeout(at(250));
    let mut landed = 0;
    while let Some(emitted) = task.take_owed(at(250), "{}", &mut lab.server, &mut lab.history) {
        emitted.unwrap();
        landed += 1;
    }
    assert_eq!(landed, 2);
    assert_eq!(task.poll_timeout(), Some(at(300)));

    // Ten are due by 1.25 s, eight more than taken: only the last three are owed.
    task.handle_timeout(at(1_250));
    let mut owed = 0;
    while task
        .take_owed(at(1_250), "{}", &mut lab.server, &mut lab.history)
        .is_some()
    {
        owed += 1;
    }
    assert_eq!(owed, 3);
    assert_eq!(task.emitted(), 5, "numbered by what landed");
    assert_eq!(task.poll_timeout(), Some(at(1_300)));
}

#[test]
fn a_scheduled_emit_with_nowhere_to_land_is_skipped_not_owed() {
    let mut lab = Lab::new();
    let mut task =
        BackgroundEmitter::scheduled(lab.session, EmitRate::every_ms(100), 10, LabTime::ZERO);
    task.handle_timeout(at(100));
    let taken = task.take_owed(at(100), "{}", &mut lab.server, &mut lab.history);
    assert_eq!(taken, Some(Err(EmitError::NoStream)));
    assert!(!task.is_owed());
    assert_eq!(task.poll_timeout(), Some(at(200)));
    assert_eq!(task.next_number(), 1);
}
