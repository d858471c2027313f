//! The SDK policies, quirk by quirk, driven directly against the server: each test is one
//! finding of `interop/probe/<sdk>.toml`, reproduced by the table in `resume::sdk`.

use forkscope_core::resume::sdk::{self, Answer};
use forkscope_core::{
    ConnectionId, History, LabConfig, LabTime, OrphanCause, Payload, Policy, ResumeDecision,
    ResumeRequest, Server, SessionId, SplitMix64, StreamId,
};

struct Fixture {
    server: Server,
    history: History,
    rng: SplitMix64,
    session: SessionId,
    next_conn: u64,
}

const STANDALONE: StreamId = StreamId(1);

impl Fixture {
    /// A session whose standalone stream s1 is attached to connection c1.
    fn new(policy: Policy) -> Self {
        let mut server = Server::new(LabConfig::default(), policy).unwrap();
        let mut history = History::new(1024);
        let mut rng = SplitMix64::new(5);
        let session = server
            .open_session(LabTime::ZERO, &mut rng, &mut history)
            .unwrap();
        let mut f = Fixture {
            server,
            history,
            rng,
            session,
            next_conn: 1,
        };
        assert!(matches!(f.get(None), ResumeDecision::NewStream(_)));
        f
    }

    fn connection(&mut self) -> ConnectionId {
        let c = ConnectionId(self.next_conn);
        self.next_conn += 1;
        c
    }

    fn get(&mut self, cursor: Option<&str>) -> ResumeDecision {
        let connection = self.connection();
        let request = ResumeRequest {
            session: self.session,
            token: None,
            last_event_id: cursor,
            connection,
        };
        self.server
            .handle_get(
                LabTime::from_millis(5_000),
                &request,
                &mut self.rng,
                &mut self.history,
            )
            .unwrap()
    }

    /// A tool call's stream, attached to a fresh connection.
    fn call(&mut self) -> (StreamId, ConnectionId) {
        let connection = self.connection();
        let (stream, _) = self
            .server
            .open_request_stream(
                LabTime::ZERO,
                self.session,
                None,
                connection,
                &mut self.rng,
                &mut self.history,
            )
            .unwrap();
        (stream, connection)
    }

    /// Emits `n` events on `stream`, all at lab time `at`.
    fn emit(&mut self, stream: StreamId, n: u64, at: LabTime) {
        for i in 1..=n {
            let payload = Payload::new(format!("k{}-{i}", stream.0), "{}");
            self.server
                .emit(at, self.session, stream, payload, &mut self.history)
                .unwrap();
        }
    }

    fn close(&mut self, stream: StreamId, connection: ConnectionId) {
        self.server.connection_closed(
            LabTime::from_millis(4_000),
            self.session,
            stream,
            connection,
            OrphanCause::ConnectionClosed,
            &mut self.history,
        );
    }

    /// The wire id of event `seq` of `stream`.
    fn id(&self, stream: StreamId, seq: u64) -> String {
        let s = self
            .server
            .session(self.session)
            .unwrap()
            .stream(stream)
            .unwrap();
        let at = self
            .server
            .replay(self.session, stream, seq - 1)
            .and_then(|mut r| r.next().map(|e| e.emitted_at))
            .unwrap();
        s.wire_id(seq, at)
    }

    /// The sequence numbers a decision's connection is sent, in order, and whether it ends.
    fn replayed(&self, decision: &ResumeDecision) -> (Vec<u64>, bool) {
        let opening = self.server.opening_for(self.session, decision).unwrap();
        (
            opening.replay.iter().map(|e| e.id.seq).collect(),
            opening.ends,
        )
    }
}

fn answered(decision: &ResumeDecision) -> Option<Answer> {
    match decision {
        ResumeDecision::Answered(a) => Some(*a),
        _ => None,
    }
}

#[test]
fn every_sdk_policy_has_a_table_that_cites_its_sources() {
    for policy in Policy::SDKS {
        let q = sdk::quirks(policy).expect("an SDK policy has a table");
        assert_eq!(q.policy, policy);
        assert!(!q.cites.is_empty(), "{policy} cites nothing");
        assert!(
            q.cites
                .iter()
                .all(|c| c.url.starts_with("https://github.com/"))
        );
        assert_eq!(Policy::from_name(policy.name()), Some(policy));
    }
    assert!(sdk::quirks(Policy::Fenced).is_none() && sdk::quirks(Policy::Naive).is_none());
    assert_eq!(
        Policy::Rmcp.next(),
        Policy::Fenced,
        "n cycles back to the fence"
    );
}

#[test]
fn a_cursor_no_store_holds_is_answered_200_and_silent() {
    for (policy, expected) in [
        (Policy::TsSdk, Answer::HELD_OPEN),
        (Policy::PythonSdkStore, Answer::EMPTY),
        (Policy::Rmcp, Answer::EMPTY),
    ] {
        let mut f = Fixture::new(policy);
        f.emit(STANDALONE, 3, LabTime::ZERO);
        assert_eq!(
            answered(&f.get(Some("never-issued"))),
            Some(expected),
            "{policy}"
        );
    }
}

#[test]
fn python_without_a_store_numbers_nothing_and_fails_a_cursor() {
    let mut f = Fixture::new(Policy::PythonSdk);
    f.emit(STANDALONE, 3, LabTime::ZERO);
    assert_eq!(f.id(STANDALONE, 2), "", "no id at all");
    assert_eq!(
        answered(&f.get(Some("anything"))).map(|a| a.status),
        Some(500)
    );
    // One standalone stream per session: a second GET while it is attached is a 409.
    assert_eq!(answered(&f.get(None)).map(|a| a.status), Some(409));
    // Once its connection is gone a plain GET takes it again, from now on: the rest is lost.
    f.close(STANDALONE, ConnectionId(1));
    f.emit(STANDALONE, 2, LabTime::ZERO);
    let again = f.get(None);
    assert!(matches!(&again, ResumeDecision::Resume(r) if r.stream == STANDALONE));
    assert_eq!(
        f.replayed(&again).0,
        Vec::<u64>::new(),
        "events 4 and 5 are gone"
    );
}

#[test]
fn typescript_cannot_resume_its_standalone_stream() {
    let mut f = Fixture::new(Policy::TsSdk);
    f.emit(STANDALONE, 3, LabTime::ZERO);
    let cursor = f.id(STANDALONE, 2);
    assert!(cursor.starts_with("_GET_stream_"), "{cursor}");
    f.close(STANDALONE, ConnectionId(1));
    assert_eq!(answered(&f.get(Some(&cursor))), Some(Answer::HELD_OPEN));
    // A call's stream is found and resumed after the cursor (one event per millisecond: the
    // ids sort as the events were sent).
    let (call, c) = f.call();
    for ms in 1..=5 {
        f.emit(call, 1, LabTime::from_millis(ms));
    }
    f.close(call, c);
    let resumed = f.get(Some(&f.id(call, 4)));
    assert!(matches!(&resumed, ResumeDecision::Resume(r) if r.stream == call));
    assert_eq!(f.replayed(&resumed).0, vec![5]);
}

#[test]
fn typescript_replays_in_the_order_its_ids_sort() {
    let mut f = Fixture::new(Policy::TsSdk);
    let (call, c) = f.call();
    // Forty events in one millisecond: their ids sort by a random suffix.
    f.emit(call, 40, LabTime::from_millis(7));
    f.close(call, c);
    let cursor = f.id(call, 10);
    let resumed = f.get(Some(&cursor));
    let (replayed, _) = f.replayed(&resumed);
    let ids: Vec<String> = replayed.iter().map(|&seq| f.id(call, seq)).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "in id order");
    assert!(
        ids.iter().all(|id| *id > cursor),
        "only ids sorting after the cursor's"
    );
    let expected: Vec<u64> = (1..=40).filter(|&s| f.id(call, s) > cursor).collect();
    assert_eq!(replayed.len(), expected.len());
    assert!(
        !replayed.windows(2).all(|w| w[0] < w[1]),
        "one millisecond's events come out of order: {replayed:?}"
    );
    assert_ne!(
        expected,
        (11..=40).collect::<Vec<_>>(),
        "some event after the cursor is skipped, or one before it replayed"
    );
}

#[test]
fn rmcp_replays_the_cursors_own_event_again_and_forgets_past_sixteen() {
    let mut f = Fixture::new(Policy::Rmcp);
    let (call, c) = f.call();
    f.emit(call, 30, LabTime::ZERO);
    f.close(call, c);
    assert_eq!(f.id(call, 20), format!("20/{}", call.0));
    let resumed = f.get(Some(&f.id(call, 20)));
    assert_eq!(
        f.replayed(&resumed).0,
        (20..=30).collect::<Vec<_>>(),
        "20 twice"
    );
    // Event 10 is older than the last sixteen: as if never issued.
    let mut g = Fixture::new(Policy::Rmcp);
    let (call, c) = g.call();
    g.emit(call, 30, LabTime::ZERO);
    g.close(call, c);
    assert_eq!(answered(&g.get(Some(&g.id(call, 10)))), Some(Answer::EMPTY));
}

#[test]
fn rmcp_gives_a_resume_while_attached_a_shadow_and_a_second_get_the_stream() {
    let mut f = Fixture::new(Policy::Rmcp);
    f.emit(STANDALONE, 3, LabTime::ZERO);
    let cursor = f.id(STANDALONE, 2);
    assert_eq!(answered(&f.get(Some(&cursor))), Some(Answer::HELD_OPEN));
    match f.get(None) {
        ResumeDecision::Resume(r) => {
            assert_eq!(r.stream, STANDALONE);
            assert_eq!(
                r.detached,
                Some(ConnectionId(1)),
                "the first connection is closed"
            );
        }
        other => panic!("a second GET takes the stream over: {other:?}"),
    }
}

#[test]
fn python_with_a_store_replays_then_closes_while_the_stream_is_held() {
    let mut f = Fixture::new(Policy::PythonSdkStore);
    f.emit(STANDALONE, 5, LabTime::ZERO);
    let cursor = f.id(STANDALONE, 2);
    assert_eq!(cursor.len(), 36, "a uuid: {cursor}");
    let resumed = f.get(Some(&cursor));
    assert_eq!(
        f.replayed(&resumed),
        (vec![3, 4, 5], true),
        "replayed, then ended"
    );
    let held = f
        .server
        .session(f.session)
        .unwrap()
        .stream(STANDALONE)
        .unwrap();
    assert_eq!(
        held.connection(),
        Some(ConnectionId(1)),
        "the old connection keeps it"
    );
    // Once it is let go, the same cursor resumes it for good.
    f.close(STANDALONE, ConnectionId(1));
    let resumed = f.get(Some(&cursor));
    assert_eq!(f.replayed(&resumed), (vec![3, 4, 5], false));
}

#[test]
fn what_goes_to_a_connection_the_client_left_while_it_waits_on_a_silent_200_is_lost() {
    use forkscope_core::history::Record;
    use forkscope_core::{AnomalyKind, EventId};
    let mut f = Fixture::new(Policy::Rmcp);
    f.emit(STANDALONE, 3, LabTime::ZERO);
    // The lab's client reports what it applies: its session is judged for losses.
    f.history.record(
        LabTime::ZERO,
        Record::Delivered {
            session: f.session,
            event: EventId {
                stream: STANDALONE,
                seq: 1,
            },
            key: "k1-1".into(),
            applied: true,
        },
    );
    let cursor = f.id(STANDALONE, 2);
    assert_eq!(answered(&f.get(Some(&cursor))), Some(Answer::HELD_OPEN));
    f.emit(STANDALONE, 2, LabTime::ZERO);
    let lost = || f.history.checker().count(AnomalyKind::Lost);
    assert_eq!(
        lost(),
        2,
        "two emits went to the connection the client left"
    );
    // A GET that attaches the stream again: what follows reaches the client.
    assert!(matches!(f.get(None), ResumeDecision::Resume(_)));
    f.emit(STANDALONE, 1, LabTime::ZERO);
    assert_eq!(f.history.checker().count(AnomalyKind::Lost), 2);
}
