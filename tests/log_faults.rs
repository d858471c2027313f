//! A stream's log that loses an entry, or holds one no replica wrote, is never resumed as if it
//! were whole, over real sockets on fenced replicas on a real `redis-server`. A resume whose
//! replay meets a garbage entry, or a hole the record does not explain (an entry deleted), is
//! refused with a terminal 500 `store_corrupt` naming the log; a live delivery that meets one
//! ends before the hole, so the client holds every event up to it once, none after it, and its
//! resume from there is refused the same way. Never a 200 that says resumed and ends empty,
//! never a silent gap.

mod common;

use common::replica_lab::{Backend, Lab, Sse, seqs_of};
use forkscope_core::Policy;
use serde_json::{Value, json};

/// The refusal a resume from `cursor` on the second replica gets: terminal, typed, saying
/// `what` (the log's key, or the events it lost).
async fn refused(lab: &Lab, session: &str, cursor: &str, what: &str) {
    let response = lab
        .get(&lab.url(1), session, Some(cursor))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 500);
    assert!(!response.headers().contains_key("retry-after"), "terminal");
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body.pointer("/error/data/reason"),
        Some(&json!("store_corrupt")),
        "{body}"
    );
    let message = body.pointer("/error/message").and_then(Value::as_str);
    assert!(message.unwrap().contains(what), "{body}");
}

/// The sequence an event id names (`s1-7.key` → 7).
fn seqs_of_ids(id: &str) -> u64 {
    id.split_once('-')
        .and_then(|(_, rest)| rest.split('.').next()?.parse().ok())
        .expect("an event id names its sequence")
}

/// The log's entry ids, oldest first.
fn entry_ids(lab: &Lab, log: &str) -> Vec<String> {
    let redis = lab.redis.as_ref().unwrap();
    redis
        .command(&["XRANGE", log, "-", "+"])
        .lines()
        .filter(|line| line.ends_with("-1"))
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_garbage_log_entry_refuses_the_resume_typed() {
    let Some(lab) = Lab::start(Backend::Redis, Policy::Fenced, None, 2_000).await else {
        return;
    };
    let (session, cursor) = lab.call_left(400, 20, 2).await;
    let log = format!("fs:{{{session}}}:log:1");
    let redis = lab.redis.as_ref().unwrap();
    assert!(!redis.command(&["XADD", &log, "*", "junk", "1"]).is_empty());
    refused(&lab, &session, &cursor, &log).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_log_entry_is_never_a_silent_gap() {
    let Some(lab) = Lab::start(Backend::Redis, Policy::Fenced, None, 2_000).await else {
        return;
    };
    // Steps far apart: each is an entry of its own, and the call runs on while the test reads.
    let (session, cursor) = lab.call_left(60, 100, 2).await;
    let log = format!("fs:{{{session}}}:log:1");
    let seq_of = |id: &str| -> u64 { seqs_of_ids(id) };
    let at_cursor = seq_of(&cursor);
    // Entries are named by their last event's sequence (`SEQ-1`). Wait until the log holds ten
    // entries past the cursor's, then delete one of them further on.
    let (ids, at) = loop {
        let ids = entry_ids(&lab, &log);
        let at = ids
            .iter()
            .position(|id| id.trim_end_matches("-1").parse() == Ok(at_cursor))
            .map(|i| i + 1);
        if let Some(at) = at
            && ids.len() >= at + 10
        {
            break (ids, at);
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let redis = lab.redis.as_ref().unwrap();
    assert_eq!(redis.command(&["XDEL", &log, &ids[at + 8]]), "1");
    // The delivery from the cursor ends before the hole: every event up to it once, none after.
    let mut resumed = Sse::open(lab.get(&lab.url(1), &session, Some(&cursor))).await;
    assert_eq!(resumed.header("mcp-stream-resumed"), Some("true"));
    resumed.read_to_end().await;
    let seqs = seqs_of(&resumed.events);
    let hole: u64 = ids[at + 8].trim_end_matches("-1").parse().unwrap();
    assert!(!seqs.is_empty(), "the events before the hole arrive");
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
    assert_eq!(*seqs.last().unwrap(), hole - 1, "{seqs:?}");
    // The resume from there meets the hole first: refused, typed.
    refused(
        &lab,
        &session,
        &resumed.last_id(),
        &format!("lost events {hole}–{hole}"),
    )
    .await;
    // A hole right after the cursor is refused before any answer.
    assert_eq!(redis.command(&["XDEL", &log, &ids[at]]), "1");
    refused(
        &lab,
        &session,
        &cursor,
        &format!("lost events {}", at_cursor + 1),
    )
    .await;
}
