//! Table tests: every branch of the resume decision and every `ResumeRejected` variant, under
//! both policies, driven directly against the server.

use forkscope_core::history::{AnomalyKind, Owed, Record, Told};
use forkscope_core::{
    ConnectionId, EventId, History, LabConfig, LabTime, Payload, Policy, RejectReason,
    ResumeDecision, ResumeRequest, Server, SessionError, SessionId, SplitMix64, StreamId,
    StreamIdentity, StreamKind, StreamState,
};

struct Fixture {
    server: Server,
    history: History,
    rng: SplitMix64,
    session: SessionId,
    token: String,
    next_conn: u64,
}

const T0: LabTime = LabTime::from_millis(1_000);

impl Fixture {
    /// A session with standalone stream s1 carrying `events` events, attached to connection c1.
    fn new(policy: Policy, config: LabConfig, events: u64) -> Self {
        let mut server = Server::new(config, policy).unwrap();
        let mut history = History::new(1024);
        let mut rng = SplitMix64::new(3);
        let session = server
            .open_session(LabTime::ZERO, &mut rng, &mut history)
            .unwrap();
        let mut fixture = Fixture {
            server,
            history,
            rng,
            session,
            token: String::new(),
            next_conn: 1,
        };
        match fixture.get_at(LabTime::ZERO, None, None) {
            ResumeDecision::NewStream(new) => fixture.token = new.token.to_string(),
            other => panic!("first GET must open a stream: {other:?}"),
        }
        for n in 1..=events {
            fixture.emit(StreamId(1), n);
        }
        fixture
    }

    /// The client received and applied event `seq` of `stream` (the key `emit` gave it).
    fn deliver(&mut self, stream: StreamId, seq: u64) {
        self.history.record(
            T0,
            Record::Delivered {
                session: self.session,
                event: EventId { stream, seq },
                key: format!("k{seq}").into(),
                applied: true,
            },
        );
    }

    fn emit(&mut self, stream: StreamId, n: u64) {
        let payload = Payload::new(format!("k{n}"), "{}");
        self.server
            .emit(
                LabTime::ZERO,
                self.session,
                stream,
                payload,
                &mut self.history,
            )
            .unwrap();
    }

    fn get_at(
        &mut self,
        now: LabTime,
        token: Option<&str>,
        cursor: Option<&str>,
    ) -> ResumeDecision {
        let connection = ConnectionId(self.next_conn);
        self.next_conn += 1;
        let request = ResumeRequest {
            session: self.session,
            token,
            last_event_id: cursor,
            connection,
        };
        self.server
            .handle_get(now, &request, &mut self.rng, &mut self.history)
            .unwrap()
    }

    fn get(&mut self, token: Option<&str>, cursor: Option<&str>) -> ResumeDecision {
        self.get_at(T0, token, cursor)
    }

    fn with_token(&mut self, cursor: &str) -> ResumeDecision {
        let token = self.token.clone();
        self.get(Some(&token), Some(cursor))
    }

    fn state(&self, stream: u32) -> StreamState {
        self.server
            .session(self.session)
            .unwrap()
            .stream(StreamId(stream))
            .unwrap()
            .state()
    }

    /// States and high-water marks of every stream: what a rejection must leave untouched.
    fn fingerprint(&self) -> Vec<(StreamId, &'static str, u64)> {
        let session = self.server.session(self.session).unwrap();
        session
            .streams()
            .iter()
            .map(|s| (s.id(), s.state().label(), s.high_water()))
            .collect()
    }

    /// Drops s1's connection as seen by the server (EOF), so it is orphaned.
    fn close_s1(&mut self, now: LabTime) {
        self.server.connection_closed(
            now,
            self.session,
            StreamId(1),
            ConnectionId(1),
            forkscope_core::OrphanCause::ConnectionClosed,
            &mut self.history,
        );
    }
}

fn rejected(decision: ResumeDecision) -> RejectReason {
    match decision {
        ResumeDecision::Reject(r) => {
            assert!(!r.to_string().is_empty());
            r.reason()
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
}

fn fenced(events: u64) -> Fixture {
    Fixture::new(Policy::Fenced, LabConfig::default(), events)
}

#[test]
fn a_valid_resume_replays_after_the_cursor_and_detaches_the_old_connection() {
    let mut f = fenced(10);
    match f.with_token("s1-7") {
        ResumeDecision::Resume(r) => {
            assert_eq!((r.stream, r.after, r.replay_len), (StreamId(1), 7, 3));
            assert_eq!(r.detached, Some(ConnectionId(1)));
            assert_eq!(
                r.echo.map(|e| (e.stream, e.resumed)),
                Some((StreamId(1), true))
            );
            let replayed: Vec<u64> = f
                .server
                .replay(f.session, StreamId(1), r.after)
                .unwrap()
                .map(|e| e.id.seq)
                .collect();
            assert_eq!(replayed, vec![8, 9, 10], "exclusive of the cursor");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(f.history.checker().counters().resumes_accepted, 1);
}

#[test]
fn a_resume_at_high_water_replays_nothing() {
    let mut f = fenced(4);
    match f.with_token("s1-4") {
        ResumeDecision::Resume(r) => assert_eq!(r.replay_len, 0),
        other => panic!("{other:?}"),
    }
}

#[test]
fn every_rejection_variant_has_its_branch_and_changes_nothing() {
    type Setup = fn(&mut Fixture) -> ResumeDecision;
    let cases: Vec<(&str, RejectReason, Setup)> = vec![
        ("id without token", RejectReason::MissingToken, |f| {
            f.get(None, Some("s1-3"))
        }),
        ("token without id", RejectReason::MissingLastEventId, |f| {
            let t = f.token.clone();
            f.get(Some(&t), None)
        }),
        ("garbage cursor", RejectReason::MalformedCursor, |f| {
            f.with_token("s1-x")
        }),
        ("huge cursor", RejectReason::MalformedCursor, |f| {
            f.with_token(&"9".repeat(10_000))
        }),
        ("malformed token", RejectReason::UnknownToken, |f| {
            f.get(Some("not-a-token"), Some("s1-3"))
        }),
        ("unknown token", RejectReason::UnknownToken, |f| {
            f.get(Some("0123456789abcdef0123456789abcdef"), Some("s1-3"))
        }),
        (
            "cursor of another stream",
            RejectReason::CursorNotOnStream,
            |f| f.with_token("s2-3"),
        ),
        ("bare cursor", RejectReason::CursorNotOnStream, |f| {
            f.with_token("3")
        }),
        ("cursor ahead", RejectReason::CursorAhead, |f| {
            f.with_token("s1-11")
        }),
    ];
    for (name, expected, setup) in cases {
        let mut f = fenced(10);
        let before = f.fingerprint();
        assert_eq!(rejected(setup(&mut f)), expected, "{name}");
        assert_eq!(
            f.fingerprint(),
            before,
            "{name}: a rejection changes nothing"
        );
        assert_eq!(
            f.history
                .checker()
                .counters()
                .resumes_rejected
                .get(&expected),
            Some(&1),
            "{name}"
        );
    }
}

#[test]
fn a_token_of_another_session_is_refused() {
    let mut f = fenced(3);
    let other = f
        .server
        .open_session(T0, &mut f.rng, &mut f.history)
        .unwrap();
    let request = ResumeRequest {
        session: other,
        token: Some(&f.token),
        last_event_id: Some("s1-2"),
        connection: ConnectionId(99),
    };
    let decision = f
        .server
        .handle_get(T0, &request, &mut f.rng, &mut f.history)
        .unwrap();
    assert_eq!(rejected(decision), RejectReason::TokenOfAnotherSession);
    assert_eq!(RejectReason::TokenOfAnotherSession.http_status(), 403);
}

#[test]
fn a_fenced_stream_cannot_be_resumed() {
    let mut f = fenced(5);
    f.close_s1(T0);
    let grace = f.server.config().grace_ms;
    let after_grace = T0.plus(grace);
    f.server.handle_timeout(after_grace, &mut f.history);
    assert!(matches!(f.state(1), StreamState::Fenced { .. }));
    let token = f.token.clone();
    assert_eq!(
        rejected(f.get_at(after_grace, Some(&token), Some("s1-5"))),
        RejectReason::StreamFenced
    );
}

#[test]
fn a_finished_request_stream_stays_resumable_for_its_retention_then_is_refused() {
    let mut f = fenced(0);
    let (stream, token) = f
        .server
        .open_request_stream(
            T0,
            f.session,
            None,
            ConnectionId(50),
            &mut f.rng,
            &mut f.history,
        )
        .unwrap();
    for n in 1..=3 {
        f.emit(stream, n);
    }
    let token = token.to_string();
    match f.get(Some(&token), Some("s2-1")) {
        ResumeDecision::Resume(r) => {
            assert_eq!((r.stream, r.replay_len, r.fenced.len()), (stream, 2, 0));
            assert!(!r.finished);
        }
        other => panic!("{other:?}"),
    }
    f.server
        .finish_request_stream(T0, f.session, stream, &mut f.history);
    assert!(matches!(f.state(2), StreamState::Finished { .. }));
    let retention = f.server.config().retention_ms;
    assert_eq!(
        f.server.poll_timeout(),
        Some(T0.plus(retention)),
        "retention is a deadline"
    );
    // Within retention: the same continuation, as often as asked, and the connection ends.
    for _ in 0..2 {
        match f.get_at(T0.plus(retention - 1), Some(&token), Some("s2-1")) {
            ResumeDecision::Resume(r) => {
                assert_eq!(r.replay_len, 2);
                assert!(r.finished, "a finished stream ends after its replay");
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(
        matches!(f.state(2), StreamState::Finished { .. }),
        "a resume does not revive a finished stream"
    );
    let decision = f.get_at(T0.plus(1), Some(&token), Some("s2-0"));
    let opening = f.server.opening_for(f.session, &decision).unwrap();
    assert_eq!(opening.replay.len(), 3);
    assert!(opening.ends && !opening.priming);
    // Past retention: a typed rejection, and the events are gone.
    f.server.handle_timeout(T0.plus(retention), &mut f.history);
    assert!(matches!(f.state(2), StreamState::Closed { .. }));
    assert_eq!(
        f.server.session(f.session).unwrap().streams()[1].buffered(),
        0
    );
    assert_eq!(
        rejected(f.get_at(T0.plus(retention), Some(&token), Some("s2-3"))),
        RejectReason::StreamClosed
    );
}

#[test]
fn a_keyed_event_id_alone_co_validates_what_a_stock_client_sends() {
    let mut f = fenced(5);
    let s1 = f.server.session(f.session).unwrap().streams()[0].wire_id(3, LabTime::ZERO);
    assert!(s1.starts_with("s1-3."), "{s1}");
    // No token header, only Last-Event-ID: the id carries the token.
    match f.get(None, Some(&s1)) {
        ResumeDecision::Resume(r) => {
            assert_eq!((r.stream, r.after, r.replay_len), (StreamId(1), 3, 2))
        }
        other => panic!("{other:?}"),
    }
    // Header and id agree: fine. The id's token is forged: unknown.
    let token = f.token.clone();
    assert!(matches!(
        f.get(Some(&token), Some(&s1)),
        ResumeDecision::Resume(_)
    ));
    let forged = "s1-3.AAAAAAAAAAA".to_owned();
    assert_eq!(
        rejected(f.get(None, Some(&forged))),
        RejectReason::UnknownToken
    );
    // A keyed id whose token names another stream than the header: not on that stream.
    let (stream, _) = f
        .server
        .open_request_stream(
            T0,
            f.session,
            None,
            ConnectionId(60),
            &mut f.rng,
            &mut f.history,
        )
        .unwrap();
    f.emit(stream, 1);
    let s2 = f.server.session(f.session).unwrap().streams()[1].wire_id(1, LabTime::ZERO);
    match f.get(None, Some(&s2)) {
        ResumeDecision::Resume(r) => assert_eq!(r.stream, stream),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        rejected(f.get(Some(&token), Some(&s2))),
        RejectReason::CursorNotOnStream
    );
    // A key is bound to the stream the id names: s2's key on an s1 id identifies nothing.
    let lying = format!("s1-1.{}", s2.rsplit_once('.').unwrap().1);
    assert_eq!(
        rejected(f.get(None, Some(&lying))),
        RejectReason::UnknownToken
    );
    // Without the token in the id, an id alone still proves nothing.
    assert_eq!(
        rejected(f.get(None, Some("s1-3"))),
        RejectReason::MissingToken
    );
    assert_eq!(
        rejected(f.get(None, Some("s1-x"))),
        RejectReason::MalformedCursor
    );
}

#[test]
fn a_keyed_id_of_another_session_names_nothing_here() {
    let mut f = fenced(2);
    let second = f
        .server
        .open_session(T0, &mut f.rng, &mut f.history)
        .unwrap();
    let request = ResumeRequest {
        session: second,
        token: None,
        last_event_id: None,
        connection: ConnectionId(70),
    };
    let token = match f
        .server
        .handle_get(T0, &request, &mut f.rng, &mut f.history)
        .unwrap()
    {
        ResumeDecision::NewStream(n) => n.token,
        d => panic!("{d:?}"),
    };
    // Their s1's key is not our s1's: the id identifies nothing in this session.
    let theirs = f.server.session(second).unwrap().streams()[0].wire_id(0, LabTime::ZERO);
    assert_eq!(
        theirs,
        format!("s1-0.{}", theirs.rsplit_once('.').unwrap().1)
    );
    assert_eq!(
        rejected(f.get(None, Some(&theirs))),
        RejectReason::UnknownToken
    );
    // The header form of the same token still says whose it is.
    let token = token.to_string();
    assert_eq!(
        rejected(f.get(Some(&token), Some("s1-0"))),
        RejectReason::TokenOfAnotherSession
    );
}

#[test]
fn the_token_header_mode_keeps_the_seeds_two_header_model() {
    let config = LabConfig {
        identity: StreamIdentity::TokenHeader,
        ..LabConfig::default()
    };
    let mut f = Fixture::new(Policy::Fenced, config, 5);
    let id = f.server.session(f.session).unwrap().streams()[0].wire_id(3, LabTime::ZERO);
    assert_eq!(id, "s1-3", "plain scoped ids");
    assert_eq!(rejected(f.get(None, Some(&id))), RejectReason::MissingToken);
    let token = f.token.clone();
    assert!(matches!(
        f.get(Some(&token), Some(&id)),
        ResumeDecision::Resume(_)
    ));
}

/// `s1-03` is not `s1-3`: a cursor is read only in the spelling the server wrote, under either
/// identity scheme, and any other spelling is refused exactly as a malformed one is.
#[test]
fn a_second_spelling_of_an_issued_id_is_a_malformed_cursor() {
    for identity in [StreamIdentity::EventId, StreamIdentity::TokenHeader] {
        let config = LabConfig {
            identity,
            ..LabConfig::default()
        };
        let issued = Fixture::new(Policy::Fenced, config, 5);
        let canonical =
            issued.server.session(issued.session).unwrap().streams()[0].wire_id(3, LabTime::ZERO);
        let key = canonical.split_once('.').map(|(_, k)| format!(".{k}"));
        let key = key.as_deref().unwrap_or("");
        for spelling in [
            "s1-03", "s01-3", "s1-003", "s001-03", "s1-+3", "s+1-3", "s1- 3", "s 1-3", "s1-3 ",
        ] {
            let cursor = format!("{spelling}{key}");
            for with_token in [true, false] {
                let how = if with_token { "with token" } else { "alone" };
                let mut f = Fixture::new(Policy::Fenced, config, 5);
                let before = f.fingerprint();
                let token = with_token.then(|| f.token.clone());
                let decision = f.get(token.as_deref(), Some(&cursor));
                let ResumeDecision::Reject(rejection) = decision else {
                    panic!("{identity:?} {how} {cursor:?} must be refused: {decision:?}");
                };
                assert_eq!(
                    rejection.reason(),
                    RejectReason::MalformedCursor,
                    "{identity:?} {how} {cursor:?}"
                );
                let sentence = rejection.to_string();
                assert!(
                    sentence.starts_with("Last-Event-ID s")
                        && sentence.contains("is not an event id this server issues"),
                    "{sentence}"
                );
                assert_eq!(f.fingerprint(), before, "{identity:?} {how} {cursor:?}");
            }
        }
        // The spelling the server wrote resumes.
        let mut f = Fixture::new(Policy::Fenced, config, 5);
        match f.with_token(&canonical) {
            ResumeDecision::Resume(r) => assert_eq!((r.stream, r.after), (StreamId(1), 3)),
            other => panic!("{identity:?} {canonical}: {other:?}"),
        }
        // A token is fixed width lowercase hex: another case is another, unknown token.
        let mut f = Fixture::new(Policy::Fenced, config, 5);
        let upper = f.token.to_uppercase();
        assert_eq!(
            rejected(f.get(Some(&upper), Some("s1-3"))),
            RejectReason::UnknownToken,
            "{identity:?}"
        );
    }
    // The naive policy trusts any cursor and reads one it cannot parse as "from the start":
    // `03` is such a cursor now, not a second spelling of `3`.
    let mut f = Fixture::new(Policy::Naive, LabConfig::default(), 10);
    for (cursor, after) in [("3", 3), ("03", 0), ("+3", 0)] {
        match f.with_token(cursor) {
            ResumeDecision::Resume(r) => assert_eq!(r.after, after, "{cursor}"),
            other => panic!("{cursor}: {other:?}"),
        }
    }
}

#[test]
fn an_evicted_cursor_cannot_be_proven_gap_free() {
    let config = LabConfig {
        replay_buffer: 4,
        ..LabConfig::default()
    };
    let mut f = Fixture::new(Policy::Fenced, config, 10);
    assert_eq!(rejected(f.with_token("s1-5")), RejectReason::CursorEvicted);
    match f.with_token("s1-6") {
        ResumeDecision::Resume(r) => assert_eq!(r.replay_len, 4, "7..=10 still kept"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_new_stream_request_waits_out_the_orphans_grace_window_then_fences_it() {
    let mut f = fenced(3);
    // s1 is attached and healthy: a request for another stream is refused, and the refusal
    // changes nothing — it is no proof that s1 was abandoned.
    let before = f.server.session(f.session).unwrap().streams()[0].state();
    let first = f.get(None, None);
    assert_eq!(rejected(first), RejectReason::OrphanStillLive);
    assert_eq!(f.state(1), before, "still live: no grace window started");
    assert_eq!(f.server.poll_timeout(), None, "no timer started");
    // Its connection ends: now it is an orphan, and its grace window runs.
    f.close_s1(T0);
    let grace = f.server.config().grace_ms;
    let halfway = T0.plus(grace / 2);
    match f.get_at(halfway, None, None) {
        ResumeDecision::Reject(r) => {
            assert_eq!(r.reason(), RejectReason::OrphanStillLive);
            assert_eq!(
                r.retry_after_secs(),
                Some((grace - grace / 2).div_ceil(1000))
            );
        }
        other => panic!("{other:?}"),
    }
    match f.get_at(T0.plus(grace), None, None) {
        ResumeDecision::NewStream(new) => {
            assert_eq!(new.fenced, vec![StreamId(1)]);
            assert_eq!(new.echo.map(|e| e.resumed), Some(false), "flagged new");
            assert_eq!(new.replay_len, 0);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(f.state(1), StreamState::Fenced { .. }));
}

#[test]
fn a_zero_grace_window_fences_at_once() {
    let config = LabConfig {
        grace_ms: 0,
        ..LabConfig::default()
    };
    let mut f = Fixture::new(Policy::Fenced, config, 2);
    match f.get(None, None) {
        ResumeDecision::NewStream(new) => assert_eq!(new.fenced, vec![StreamId(1)]),
        other => panic!("{other:?}"),
    }
}

#[test]
fn switching_to_fenced_fences_the_naive_orphan_at_once() {
    // Two live standalone streams exist only after a naive spell.
    let mut f = Fixture::new(Policy::Naive, LabConfig::default(), 3);
    let s2_token = match f.get(None, Some("3")) {
        ResumeDecision::NewStream(new) => new.token.to_string(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        f.server.session(f.session).unwrap().live_standalone_count(),
        2
    );
    // The header will say FENCED: from that instant one live stream, not two.
    let fenced = f
        .server
        .set_policy(T0, Policy::Fenced, &mut f.history)
        .unwrap();
    assert_eq!(fenced, vec![(f.session, StreamId(1))]);
    assert!(matches!(f.state(1), StreamState::Fenced { .. }));
    assert!(matches!(f.state(2), StreamState::Live));
    // The background task's next emit onto the orphan is refused and counted.
    let payload = Payload::new("late", "{}");
    assert!(
        f.server
            .emit(T0, f.session, StreamId(1), payload, &mut f.history)
            .is_err()
    );
    assert_eq!(f.history.checker().counters().late_emits_refused, 1);
    // The bound stream resumes as any fenced stream would, with nothing else to fence.
    match f.get(Some(&s2_token), Some("s2-3")) {
        ResumeDecision::Resume(r) => assert!(r.fenced.is_empty()),
        other => panic!("{other:?}"),
    }
    // Switching again (or to the same policy) fences nothing more.
    assert_eq!(
        f.server
            .set_policy(T0, Policy::Fenced, &mut f.history)
            .unwrap(),
        Vec::new()
    );
}

#[test]
fn streams_are_bounded_per_session() {
    let config = LabConfig {
        max_streams_per_session: 3,
        ..LabConfig::default()
    };
    let mut f = Fixture::new(Policy::Fenced, config, 0);
    for conn in 0..2 {
        f.server
            .open_request_stream(
                T0,
                f.session,
                None,
                ConnectionId(60 + conn),
                &mut f.rng,
                &mut f.history,
            )
            .unwrap();
    }
    assert!(
        f.server
            .open_request_stream(
                T0,
                f.session,
                None,
                ConnectionId(70),
                &mut f.rng,
                &mut f.history
            )
            .is_err()
    );
    let mut naive = Fixture::new(Policy::Naive, config, 0);
    naive.get(None, None);
    naive.get(None, None);
    assert_eq!(
        rejected(naive.get(None, None)),
        RejectReason::TooManyStreams
    );
}

#[test]
fn an_unknown_session_is_a_session_error_not_a_rejection() {
    let mut f = fenced(0);
    let request = ResumeRequest {
        session: SessionId::parse("00000000000000000000000000000001").unwrap(),
        token: None,
        last_event_id: None,
        connection: ConnectionId(9),
    };
    assert_eq!(
        f.server
            .handle_get(T0, &request, &mut f.rng, &mut f.history),
        Err(SessionError::Unknown)
    );
}

#[test]
fn sessions_are_bounded() {
    let config = LabConfig {
        max_sessions: 1,
        ..LabConfig::default()
    };
    let mut f = Fixture::new(Policy::Fenced, config, 0);
    assert_eq!(
        f.server.open_session(T0, &mut f.rng, &mut f.history),
        Err(SessionError::Limit {
            max: 1,
            free_at: None
        }),
        "the one session has its stream attached: none idles"
    );
}

#[test]
fn naive_mints_a_silent_stream_with_the_backlog_and_leaves_the_orphan_live() {
    let mut f = Fixture::new(Policy::Naive, LabConfig::default(), 41);
    match f.get(None, Some("41")) {
        ResumeDecision::NewStream(new) => {
            assert_eq!(new.echo, None, "nothing says new");
            assert_eq!(new.replay_len, 41, "replays from its own index 0");
            assert_eq!(new.orphaned, Some(StreamId(1)));
            assert_eq!(new.ids, forkscope_core::IdScheme::Bare);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(f.state(1), StreamState::Orphaned { .. }));
    // The background task is still on s1.
    let emitted = f
        .server
        .emit_background(T0, f.session, Payload::new("k42", "{}"), &mut f.history)
        .unwrap();
    assert_eq!(emitted.event.stream, StreamId(1));
    // After the grace window the orphan is merely closed, and the task moves on.
    let grace = f.server.config().grace_ms;
    f.server.handle_timeout(T0.plus(grace), &mut f.history);
    assert!(matches!(f.state(1), StreamState::Closed { .. }));
    let emitted = f
        .server
        .emit_background(
            T0.plus(grace),
            f.session,
            Payload::new("k43", "{}"),
            &mut f.history,
        )
        .unwrap();
    assert_eq!(
        (emitted.event.stream, emitted.refused_on),
        (StreamId(2), None)
    );
}

#[test]
fn naive_honours_any_token_without_proof() {
    let config = LabConfig {
        replay_buffer: 4,
        ..LabConfig::default()
    };
    let mut f = Fixture::new(Policy::Naive, config, 10);
    let cases = [("99", 10, 0), ("2", 6, 4), ("junk", 6, 4), ("8", 8, 2)];
    for (cursor, after, replay_len) in cases {
        match f.with_token(cursor) {
            ResumeDecision::Resume(r) => {
                assert_eq!(
                    (r.after, r.replay_len),
                    (after, replay_len),
                    "cursor {cursor}"
                );
                assert_eq!((r.echo, r.detached), (None, None));
            }
            other => panic!("{other:?}"),
        }
    }
    match f.get(Some("0123456789abcdef0123456789abcdef"), Some("3")) {
        ResumeDecision::NewStream(new) => assert_eq!(new.echo, None),
        other => panic!("an unknown token is treated as none: {other:?}"),
    }
}

#[test]
fn a_late_emit_onto_a_fenced_stream_is_refused_and_counted() {
    let mut f = fenced(2);
    f.deliver(StreamId(1), 1);
    f.deliver(StreamId(1), 2);
    f.close_s1(T0);
    let grace = f.server.config().grace_ms;
    let later = T0.plus(grace);
    let expired = f.server.handle_timeout(later, &mut f.history);
    assert_eq!(expired.len(), 1);
    assert!(matches!(
        f.get_at(later, None, None),
        ResumeDecision::NewStream(_)
    ));
    let bg = f
        .server
        .emit_background(later, f.session, Payload::new("late", "{}"), &mut f.history)
        .unwrap();
    assert_eq!(
        bg.refused_on,
        Some(StreamId(1)),
        "refused on the fenced stream first"
    );
    assert_eq!(bg.event.stream, StreamId(2));
    assert_eq!(f.history.checker().counters().late_emits_refused, 1);
    let direct = f.server.emit(
        later,
        f.session,
        StreamId(1),
        Payload::new("later", "{}"),
        &mut f.history,
    );
    assert_eq!(direct, Err(forkscope_core::EmitError::Fenced(StreamId(1))));
    assert_eq!(f.history.checker().counters().late_emits_refused, 2);
    assert!(f.history.verdict().clean);
}

/// Lost outside a fork: events the client was owed on the stream it was bound to and never
/// got, once that stream can deliver nothing more — silently (the naive server's new stream is
/// not flagged), or undelivered, told, when the client was told continuity broke (the fenced
/// server flags it): never clean, since they did not arrive.
#[test]
fn events_owed_by_an_ended_bound_stream_are_lost_unless_the_client_was_told() {
    for policy in [Policy::Naive, Policy::Fenced] {
        let mut f = Fixture::new(policy, LabConfig::default(), 0);
        for n in 1..=2 {
            f.emit(StreamId(1), n);
            f.deliver(StreamId(1), n);
        }
        f.emit(StreamId(1), 3);
        f.emit(StreamId(1), 4);
        f.close_s1(T0);
        let later = T0.plus(f.server.config().grace_ms);
        if policy == Policy::Fenced {
            f.server.handle_timeout(later, &mut f.history);
            assert!(
                f.history.verdict().clean,
                "still the bound stream: the client may yet come back for 3 and 4"
            );
        }
        let at = if policy == Policy::Fenced { later } else { T0 };
        assert!(matches!(
            f.get_at(at, None, None),
            ResumeDecision::NewStream(_)
        ));
        // Naive: s1 is an orphan in grace until now; its end settles what it owed.
        f.server.handle_timeout(later, &mut f.history);
        let verdict = f.history.verdict();
        assert_eq!(verdict.count(AnomalyKind::Fork), 0, "{verdict:?}");
        let lost: Vec<_> = f
            .history
            .checker()
            .anomalies()
            .iter()
            .filter_map(|a| match a {
                forkscope_core::history::Anomaly::Lost { event, .. } => Some(event.seq),
                _ => None,
            })
            .collect();
        let undelivered: Vec<_> = f
            .history
            .checker()
            .anomalies()
            .iter()
            .filter_map(|a| match a {
                forkscope_core::history::Anomaly::Undelivered {
                    owed: Owed::Event { event },
                    told,
                    ..
                } => Some((event.seq, *told)),
                _ => None,
            })
            .collect();
        match policy {
            Policy::Naive => {
                assert_eq!(lost, [3, 4], "silently lost");
                assert!(undelivered.is_empty(), "{undelivered:?}");
            }
            Policy::Fenced => {
                assert!(lost.is_empty(), "told, not silent: {verdict:?}");
                assert_eq!(
                    undelivered,
                    [(3, Told::FlaggedNew), (4, Told::FlaggedNew)],
                    "told: s2 is flagged new"
                );
                assert!(!verdict.clean, "told is not delivered: {verdict:?}");
                assert_eq!(
                    verdict.summary(),
                    "undelivered ×2 (told: its new stream was flagged new)"
                );
            }
            other => unreachable!("{other}"),
        }
    }
}

/// What a replay delivers is not lost, nor what arrives under other ids (a naive copy).
#[test]
fn owed_events_delivered_by_replay_or_as_copies_are_not_lost() {
    let mut f = fenced(3);
    f.deliver(StreamId(1), 1);
    f.close_s1(T0);
    let token = f.token.clone();
    let cursor = f.server.session(f.session).unwrap().streams()[0].wire_id(1, LabTime::ZERO);
    assert!(matches!(
        f.get(Some(&token), Some(&cursor)),
        ResumeDecision::Resume(_)
    ));
    f.deliver(StreamId(1), 2);
    f.deliver(StreamId(1), 3);
    f.server
        .close_session(T0, f.session, &mut f.history)
        .unwrap();
    assert!(f.history.verdict().clean, "{:?}", f.history.verdict());

    let mut n = Fixture::new(Policy::Naive, LabConfig::default(), 2);
    n.close_s1(T0);
    assert!(matches!(n.get(None, None), ResumeDecision::NewStream(_)));
    // The backlog copied onto s2 carries k1 and k2: the client applies them there.
    n.deliver(StreamId(2), 1);
    n.deliver(StreamId(2), 2);
    let later = T0.plus(n.server.config().grace_ms);
    n.server.handle_timeout(later, &mut n.history);
    assert_eq!(n.history.verdict().count(AnomalyKind::Lost), 0);
}

#[test]
fn grace_timers_are_exposed_through_poll_timeout() {
    let mut f = fenced(1);
    assert_eq!(f.server.poll_timeout(), None);
    f.close_s1(T0);
    let deadline = T0.plus(f.server.config().grace_ms);
    assert_eq!(f.server.poll_timeout(), Some(deadline));
    let just_before = LabTime::from_millis(deadline.as_millis() - 1);
    assert!(
        f.server
            .handle_timeout(just_before, &mut f.history)
            .is_empty()
    );
    assert_eq!(f.server.handle_timeout(deadline, &mut f.history).len(), 1);
    // What is left is the session's own idle deadline: nothing is attached any more.
    let idle = f.server.config().session_idle_ms;
    assert_eq!(f.server.poll_timeout(), Some(T0.plus(idle)));
}

#[test]
fn request_streams_stay_out_of_the_standalone_lineage() {
    let mut f = fenced(1);
    let (stream, _) = f
        .server
        .open_request_stream(
            T0,
            f.session,
            None,
            ConnectionId(80),
            &mut f.rng,
            &mut f.history,
        )
        .unwrap();
    let session = f.server.session(f.session).unwrap();
    assert_eq!(session.stream(stream).unwrap().kind(), StreamKind::Request);
    assert_eq!(session.live_standalone_count(), 1);
    f.emit(stream, 1);
    match f.with_token("s1-1") {
        ResumeDecision::Resume(r) => assert!(r.fenced.is_empty(), "a tool call is no orphan"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn deleting_a_session_ends_its_streams_and_tokens() {
    let mut f = fenced(2);
    let connections = f
        .server
        .close_session(T0, f.session, &mut f.history)
        .unwrap();
    assert_eq!(connections, vec![ConnectionId(1)]);
    assert_eq!(
        f.server.close_session(T0, f.session, &mut f.history),
        Err(SessionError::Unknown)
    );
    let other = f
        .server
        .open_session(T0, &mut f.rng, &mut f.history)
        .unwrap();
    let request = ResumeRequest {
        session: other,
        token: Some(&f.token),
        last_event_id: Some("s1-1"),
        connection: ConnectionId(5),
    };
    let decision = f
        .server
        .handle_get(T0, &request, &mut f.rng, &mut f.history)
        .unwrap();
    assert_eq!(rejected(decision), RejectReason::UnknownToken);
}

#[test]
fn idle_sessions_expire_and_a_full_server_says_when_a_slot_frees() {
    let config = LabConfig {
        session_idle_ms: 1_000,
        max_sessions: 2,
        ..LabConfig::default()
    };
    let mut server = Server::new(config, Policy::Fenced).unwrap();
    let mut history = History::new(1024);
    let mut rng = SplitMix64::new(9);
    let t0 = LabTime::ZERO;
    let idle = server.open_session(t0, &mut rng, &mut history).unwrap();
    let busy = server.open_session(t0, &mut rng, &mut history).unwrap();
    // `busy` holds a stream with a connection attached: in use, it never idles.
    let request = ResumeRequest {
        session: busy,
        token: None,
        last_event_id: None,
        connection: ConnectionId(1),
    };
    assert!(matches!(
        server.handle_get(t0, &request, &mut rng, &mut history),
        Ok(ResumeDecision::NewStream(_))
    ));
    assert_eq!(server.poll_timeout(), Some(t0.plus(1_000)));
    match server.open_session(t0, &mut rng, &mut history) {
        Err(SessionError::Limit { max: 2, free_at }) => assert_eq!(free_at, Some(t0.plus(1_000))),
        other => panic!("{other:?}"),
    }
    // A request restarts the idle clock.
    server.touch(t0.plus(500), idle);
    server.handle_timeout(t0.plus(1_000), &mut history);
    assert!(server.session(idle).is_some());
    server.handle_timeout(t0.plus(1_500), &mut history);
    assert!(server.session(idle).is_none(), "idle past its deadline");
    assert!(server.session(busy).is_some(), "in use");
    // Its connection ends: now it idles from that moment.
    server.connection_closed(
        t0.plus(2_000),
        busy,
        StreamId(1),
        ConnectionId(1),
        forkscope_core::OrphanCause::ConnectionClosed,
        &mut history,
    );
    assert_eq!(
        server.poll_timeout(),
        Some(t0.plus(3_000)).min(server.poll_timeout())
    );
    server.handle_timeout(t0.plus(10_000), &mut history);
    assert_eq!(server.sessions().count(), 0);
    assert!(
        server
            .open_session(t0.plus(10_000), &mut rng, &mut history)
            .is_ok()
    );
}

#[test]
fn a_long_session_keeps_bounded_state() {
    let config = LabConfig {
        replay_buffer_bytes: 4 * 1024,
        ..LabConfig::default()
    };
    let mut f = Fixture::new(Policy::Fenced, config, 0);
    let max = f.server.config().max_streams_per_session;
    for call in 0..2_000u64 {
        let (stream, _) = f
            .server
            .open_request_stream(
                T0,
                f.session,
                None,
                ConnectionId(1_000 + call),
                &mut f.rng,
                &mut f.history,
            )
            .unwrap();
        for n in 1..=3 {
            f.emit(stream, n);
        }
        f.server
            .finish_request_stream(T0, f.session, stream, &mut f.history);
    }
    let session = f.server.session(f.session).unwrap();
    assert!(session.streams().len() <= max);
    assert!(
        f.history.checker().tracked_streams() <= max + 1,
        "the checker forgets forgotten streams: {}",
        f.history.checker().tracked_streams()
    );
    // The byte bound holds on a stream that emits big events.
    let s1 = StreamId(1);
    for n in 0..100 {
        let payload = Payload::new(format!("big{n}"), "x".repeat(1_000));
        let _ = f.server.emit(T0, f.session, s1, payload, &mut f.history);
    }
    let s1 = f.server.session(f.session).unwrap().stream(s1);
    if let Some(s1) = s1 {
        assert!(s1.buffered_bytes() <= 4 * 1024, "{}", s1.buffered_bytes());
        assert!(s1.buffered() < 10);
    }
}

/// Replay memory is held to one budget across sessions: past it new sessions and tool calls
/// are refused with a typed error, emits evict their own stream's oldest events (a resume from
/// before them is refused, never gap-filled silently), and retention running out frees it.
#[test]
fn replay_memory_is_held_to_a_global_budget() {
    let per_stream = 4 * 1024;
    let config = LabConfig {
        replay_buffer_bytes: per_stream,
        replay_budget_bytes: 3 * per_stream,
        ..LabConfig::default()
    };
    let budget = config.replay_budget_bytes;
    let mut f = Fixture::new(Policy::Fenced, config, 0);
    let big = |n: u64| Payload::new(format!("big{n}"), "x".repeat(500));
    let mut calls = Vec::new();
    let refused = loop {
        match f.server.open_request_stream(
            T0,
            f.session,
            None,
            ConnectionId(100 + calls.len() as u64),
            &mut f.rng,
            &mut f.history,
        ) {
            Ok((stream, _)) => {
                for n in 0..20 {
                    f.server
                        .emit(T0, f.session, stream, big(n), &mut f.history)
                        .unwrap();
                }
                calls.push(stream);
            }
            Err(e) => break e,
        }
        assert!(
            calls.len() < 10,
            "the budget must refuse before the stream bound"
        );
    };
    assert_eq!(refused, forkscope_core::EmitError::OverBudget { budget });
    assert!(refused.to_string().contains("budget"));
    assert!(matches!(
        f.server.open_session(T0, &mut f.rng, &mut f.history),
        Err(SessionError::OverBudget { .. })
    ));
    // Streams admitted before keep emitting; the total stays within the budget plus one
    // event per stream.
    for n in 20..200 {
        for stream in &calls {
            f.server
                .emit(T0, f.session, *stream, big(n), &mut f.history)
                .unwrap();
        }
        assert!(f.server.replay_bytes() <= budget + calls.len() * 700);
    }
    let sum: usize = f
        .server
        .session(f.session)
        .unwrap()
        .streams()
        .iter()
        .map(|s| s.buffered_bytes())
        .sum();
    assert_eq!(
        sum,
        f.server.replay_bytes(),
        "the account matches the buffers"
    );
    // Finished calls let their memory go when retention runs out; admission resumes.
    for stream in &calls {
        f.server
            .finish_request_stream(T0, f.session, *stream, &mut f.history);
    }
    let later = T0.plus(f.server.config().retention_ms);
    f.server.handle_timeout(later, &mut f.history);
    assert_eq!(f.server.replay_bytes(), 0);
    assert!(
        f.server
            .open_session(later, &mut f.rng, &mut f.history)
            .is_ok()
    );
    assert!(
        f.server
            .open_request_stream(
                later,
                f.session,
                None,
                ConnectionId(999),
                &mut f.rng,
                &mut f.history
            )
            .is_ok()
    );
}

#[test]
fn a_budget_below_one_stream_is_refused() {
    let config = LabConfig {
        replay_budget_bytes: 1_024,
        ..LabConfig::default()
    };
    let err = Server::new(config, Policy::Fenced).unwrap_err();
    assert!(err.to_string().contains("replay_budget_bytes"), "{err}");
}

/// A client that starts a new session says when and why: its stream ids restart at s1, which
/// would otherwise look like an id reused across streams.
#[test]
fn a_client_remembers_why_it_started_a_new_session() {
    use forkscope_core::ClientAction;
    use forkscope_core::client::Client;
    let mut history = History::new(64);
    let mut rng = SplitMix64::new(9);
    let mut client = Client::new(Policy::Fenced, forkscope_core::RetryConfig::default());
    client.begin_session(T0, SessionId::generate(&mut rng), &mut history);
    assert_eq!(client.renewed(), None, "the first session replaces nothing");
    let action = client.on_rejected(T0, RejectReason::StreamFenced, &mut history);
    assert_eq!(action, ClientAction::StartNewSession);
    let later = T0.plus(5);
    client.begin_session(later, SessionId::generate(&mut rng), &mut history);
    assert_eq!(client.renewed(), Some((later, "stream_fenced")));
}

/// `connection_closed` says whether it started a grace window: once for the live stream's
/// connection, never for a connection already replaced or a stream already orphaned.
#[test]
fn connection_closed_says_whether_a_grace_window_started() {
    let mut f = fenced(1);
    let close = |f: &mut Fixture, connection| {
        f.server.connection_closed(
            T0,
            f.session,
            StreamId(1),
            ConnectionId(connection),
            forkscope_core::OrphanCause::ConnectionClosed,
            &mut f.history,
        )
    };
    assert!(!close(&mut f, 99), "a connection the stream never had");
    assert!(close(&mut f, 1), "the live stream's connection");
    assert!(!close(&mut f, 1), "already orphaned");
}

#[test]
fn a_live_tuning_that_breaks_condition_five_is_refused_under_fenced_and_changes_nothing() {
    let mut f = fenced(3);
    let before = *f.server.config();
    let too_long = forkscope_core::Tuning {
        grace_ms: Some(before.retry.budget_ms),
        ..forkscope_core::Tuning::default()
    };
    let err = f.server.tune(&too_long).unwrap_err();
    assert!(err.to_string().contains("condition 5"), "{err}");
    assert_eq!(
        *f.server.config(),
        before,
        "a refused tuning changes nothing"
    );
    // Under naive the same tuning is taken: seeing condition 5 fail is the lesson.
    let mut naive = Fixture::new(Policy::Naive, LabConfig::default(), 3);
    let tuned = naive.server.tune(&too_long).unwrap();
    assert_eq!(tuned.grace_ms, before.retry.budget_ms);
    assert!(!naive.server.config().grace_shorter_than_retry_budget());
}

#[test]
fn a_shorter_grace_window_applies_to_the_next_orphan() {
    let mut f = fenced(3);
    let short = f
        .server
        .tune(&forkscope_core::Tuning {
            grace_ms: Some(500),
            ..forkscope_core::Tuning::default()
        })
        .unwrap();
    assert_eq!(short.grace_ms, 500);
    f.close_s1(T0);
    assert_eq!(f.server.poll_timeout(), Some(T0.plus(500)));
    match f.get_at(T0.plus(500), None, None) {
        ResumeDecision::NewStream(new) => assert_eq!(new.fenced, vec![StreamId(1)]),
        other => panic!("{other:?}"),
    }
}
