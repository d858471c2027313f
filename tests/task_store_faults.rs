//! A store that fails under a task ends it typed, never silently. A task record the store
//! corrupts is a terminal, typed error on every path a client reaches,
//! over real sockets on fenced replicas on a real `redis-server`: `tasks/get` and `tasks/cancel`
//! answer 500 `store_corrupt` naming the task's key, with no `Retry-After` (a retry reads the
//! same record), and an outcome that is not JSON is corrupt, never `completed` without a result.
//! `store_unavailable` (503) stays for what a retry cures. A store restored from an older
//! snapshot under a running task refuses the runner's next write (it holds fewer steps than the
//! runner wrote), and the task ends `failed` with `store_rolled_back`: no step runs again.

mod common;

use common::replica_lab::{Backend, Lab};
use forkscope::wire::mcp::modern::ModernCall;
use forkscope_core::Policy;
use serde_json::{Value, json};

async fn request(lab: &Lab, method: &str, params: Value) -> (u16, Option<String>, Value) {
    let call = ModernCall {
        id: 1,
        method,
        params,
        tasks: true,
        key: None,
    };
    let response = call.post(&lab.http, &lab.url(0)).send().await.unwrap();
    let status = response.status().as_u16();
    let retry = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, retry, response.json().await.unwrap())
}

async fn task(lab: &Lab, steps: u64, delay_ms: u64) -> String {
    let params =
        json!({ "name": "progress_task", "arguments": { "steps": steps, "delay_ms": delay_ms } });
    let (_, _, created) = request(lab, "tools/call", params).await;
    created["result"]["taskId"].as_str().unwrap().to_owned()
}

/// `method` on `task` is a terminal 500 `store_corrupt` that names the task's key.
async fn corrupt_on(lab: &Lab, method: &str, task: &str) {
    let (status, retry, body) = request(lab, method, json!({ "taskId": task })).await;
    assert_eq!(status, 500, "{method}: {body}");
    assert_eq!(retry, None, "{method}: a retry would read the same record");
    assert_eq!(body["error"]["data"]["reason"], "store_corrupt", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&forkscope::store::redis::tasks::task_key(
            forkscope_core::TaskId::parse(task).unwrap()
        )),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_task_records_are_a_terminal_typed_error_that_names_the_key() {
    let Some(lab) = Lab::start(Backend::Redis, Policy::Fenced, None, 2_000).await else {
        return;
    };
    let redis = lab.redis.as_ref().unwrap();
    let fields: [(&str, &str); 3] = [("status", "bogus"), ("done", "x"), ("epoch", "x")];
    for (field, value) in fields {
        let task = task(&lab, 50, 1_000).await;
        let key =
            forkscope::store::redis::tasks::task_key(forkscope_core::TaskId::parse(&task).unwrap());
        assert_eq!(redis.command(&["HSET", &key, field, value]), "0");
        corrupt_on(&lab, "tasks/get", &task).await;
        corrupt_on(&lab, "tasks/cancel", &task).await;
    }
    // A task key of the wrong type.
    let task = task(&lab, 50, 1_000).await;
    let key =
        forkscope::store::redis::tasks::task_key(forkscope_core::TaskId::parse(&task).unwrap());
    redis.command(&["DEL", &key]);
    redis.command(&["SET", &key, "not a hash"]);
    corrupt_on(&lab, "tasks/get", &task).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_that_is_not_json_is_corrupt_never_completed_without_a_result() {
    let Some(lab) = Lab::start(Backend::Redis, Policy::Fenced, None, 2_000).await else {
        return;
    };
    let redis = lab.redis.as_ref().unwrap();
    let task = task(&lab, 50, 1_000).await;
    let key =
        forkscope::store::redis::tasks::task_key(forkscope_core::TaskId::parse(&task).unwrap());
    redis.command(&["HSET", &key, "status", "completed", "outcome", "{not json"]);
    corrupt_on(&lab, "tasks/get", &task).await;
    // Made whole again, the same read answers the task.
    redis.command(&["HSET", &key, "outcome", "{\"content\":[]}"]);
    let (status, _, body) = request(&lab, "tasks/get", json!({ "taskId": task })).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"]["status"], "completed");
    assert_eq!(body["result"]["result"], json!({ "content": [] }));
}

/// Polls the task on the first replica until `done` says so; every answer read.
async fn poll_until(lab: &Lab, task: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (_, _, read) = request(lab, "tasks/get", json!({ "taskId": task })).await;
        if done(&read) {
            return read;
        }
        assert!(tokio::time::Instant::now() < deadline, "{read}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// How a store comes back holding fewer steps than its runner wrote.
#[derive(Clone, Copy, Debug)]
enum Rollback {
    /// Restored from an RDB snapshot taken at step 4.
    Rdb,
    /// Its append-only file cut back to where it was at step 4 (every write fsynced).
    Aof,
    /// A replica that stopped replicating at step 4, promoted where the master was.
    Promoted,
}

/// A store rolled back under a running task, as `rollback` does it, `FORKSCOPE_ROLLBACK_RUNS`
/// times (default 20): the runner's next write is refused (the store holds fewer steps than it
/// wrote), and the task ends `failed`, `store_rolled_back`, with both counts. The tool's own
/// effect counter (each replica's steps committed) says no step ran twice, and the task never
/// reads back as working from its forgotten steps.
async fn rolled_back_under_a_task(rollback: Rollback) {
    let Some(mut lab) = Lab::start(Backend::Redis, Policy::Fenced, None, 1_000).await else {
        return;
    };
    if let Rollback::Aof = rollback {
        lab.redis.as_mut().unwrap().enable_aof();
    }
    let runs: usize = std::env::var("FORKSCOPE_ROLLBACK_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    for run in 0..runs {
        let committed = |lab: &Lab| -> u64 {
            lab.replicas
                .iter()
                .map(|r| {
                    r.tasks()
                        .counters
                        .steps_committed
                        .load(std::sync::atomic::Ordering::Relaxed)
                })
                .sum()
        };
        let before = committed(&lab);
        let replica = match rollback {
            Rollback::Promoted => lab.redis.as_ref().unwrap().start_replica(),
            _ => None,
        };
        // Long enough that the rollback lands while its runner still runs, however slow the host.
        let task = task(&lab, 60, 100).await;
        poll_until(&lab, &task, |r| {
            common::steps_done(r).is_some_and(|d| d >= 4)
        })
        .await;
        let redis = lab.redis.as_ref().unwrap();
        let snapshot = match rollback {
            Rollback::Rdb => Some(redis.save_snapshot(&format!("at-4-{run}"))),
            _ => None,
        };
        let mark = match rollback {
            Rollback::Aof => redis.aof_tail(),
            _ => None,
        };
        if let Some(replica) = &replica {
            replica.stop_replicating();
        }
        poll_until(&lab, &task, |r| {
            common::steps_done(r).is_some_and(|d| d >= 9)
        })
        .await;
        let redis = lab.redis.as_mut().unwrap();
        match rollback {
            Rollback::Rdb => redis.restore(snapshot.as_ref().unwrap()),
            Rollback::Aof => redis.truncate_aof(mark.as_ref().expect("an AOF part")),
            Rollback::Promoted => redis.fail_over_to(replica.as_ref().unwrap()),
        }
        let ended = poll_until(&lab, &task, |r| {
            r.get("error").is_none() && r["result"]["status"] != "working"
        })
        .await;
        let result = &ended["result"];
        assert_eq!(
            result["status"], "failed",
            "{rollback:?} run {run}: {ended}"
        );
        let data = &result["error"]["data"];
        assert_eq!(
            data["reason"], "store_rolled_back",
            "{rollback:?} run {run}: {ended}"
        );
        let (holds, applied) = (
            data["holds"].as_u64().unwrap(),
            data["applied"].as_u64().unwrap(),
        );
        assert!(
            holds < applied && applied >= 9,
            "{rollback:?} run {run}: {ended}"
        );
        assert_eq!(
            committed(&lab) - before,
            applied,
            "{rollback:?} run {run}: each step once, none again"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_restored_from_an_rdb_snapshot_under_a_task_ends_it_typed() {
    rolled_back_under_a_task(Rollback::Rdb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_whose_aof_lost_its_tail_under_a_task_ends_it_typed() {
    rolled_back_under_a_task(Rollback::Aof).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_replica_promoted_under_a_task_ends_it_typed() {
    rolled_back_under_a_task(Rollback::Promoted).await;
}

/// A store restored after a task's end meets the task's cursor. The client read the task
/// completed (8 steps); the store comes back from a snapshot taken at step 2, holding it working.
/// The read that says what it was told (`_meta["io.forkscope/seen"]`) is refused, 500
/// `store_rolled_back` with the steps held and told, and ends the task in the same script:
/// `failed`, `store_rolled_back`, with both counts, as a runner's refused write ends it. Every
/// later read, the cursor's or a stock one that says nothing, reads that end; none adopts the
/// task, even once the lease the snapshot holds has run out by the store's clock, and no step
/// runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_restored_after_a_tasks_end_refuses_a_read_that_was_told_more_and_ends_the_task() {
    let Some(mut lab) = Lab::start(Backend::Redis, Policy::Fenced, None, 1_000).await else {
        return;
    };
    let counter = |lab: &Lab, which: fn(&forkscope::wire::server::tasks::TaskCounters) -> u64| {
        lab.replicas
            .iter()
            .map(|r| which(&r.tasks().counters))
            .sum::<u64>()
    };
    use std::sync::atomic::Ordering::Relaxed;
    let steps = |c: &forkscope::wire::server::tasks::TaskCounters| c.steps_committed.load(Relaxed);
    let adopted = |c: &forkscope::wire::server::tasks::TaskCounters| c.adopted.load(Relaxed);
    let task = task(&lab, 8, 50).await;
    poll_until(&lab, &task, |r| {
        common::steps_done(r).is_some_and(|d| d >= 2)
    })
    .await;
    let snapshot = lab.redis.as_ref().unwrap().save_snapshot("after-2");
    let ended = poll_until(&lab, &task, |r| r["result"]["status"] == "completed").await;
    assert_eq!(ended["result"]["_meta"]["io.forkscope/done"], 8, "{ended}");
    let ran = counter(&lab, steps);
    assert_eq!(ran, 8);
    lab.redis.as_mut().unwrap().restore(&snapshot);
    let told = json!({ "taskId": task,
        "_meta": { "io.forkscope/seen": { "done": 8, "ended": true } } });
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    let (status, refused) = loop {
        let (status, _, refused) = request(&lab, "tasks/get", told.clone()).await;
        // The restart behind the restore: the replica's connection comes back (503 until then).
        if status != 503 {
            break (status, refused);
        }
        assert!(tokio::time::Instant::now() < deadline, "{refused}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(status, 500, "{refused}");
    let data = &refused["error"]["data"];
    assert_eq!(data["reason"], "store_rolled_back", "{refused}");
    let holds = data["holds"].as_u64().unwrap();
    assert!((2..8).contains(&holds), "{refused}");
    assert_eq!(
        data["seen"],
        json!({ "done": 8, "ended": true }),
        "{refused}"
    );
    // Malformed, it is refused as invalid params, not read as nothing told.
    let bad = json!({ "taskId": task, "_meta": { "io.forkscope/seen": { "done": "x" } } });
    let (_, _, invalid) = request(&lab, "tasks/get", bad).await;
    assert_eq!(invalid["error"]["code"], -32602, "{invalid}");
    // The end every later read gets, whatever it says it was told.
    let sealed = |read: &Value| {
        let result = &read["result"];
        assert_eq!(result["status"], "failed", "{read}");
        let error = &result["error"];
        assert_eq!(
            error["data"],
            json!({ "reason": "store_rolled_back", "holds": holds, "applied": 8 }),
            "{read}"
        );
        assert!(
            error["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("the store was rolled back under this task")),
            "{read}"
        );
    };
    let (_, _, again) = request(&lab, "tasks/get", told.clone()).await;
    sealed(&again);
    // Stock reads say nothing: before the seal, one past the snapshot's lease adopted the task
    // and ran the forgotten steps again. Read until the store's own clock is past that lease.
    let redis = lab.redis.as_ref().unwrap();
    let key =
        forkscope::store::redis::tasks::task_key(forkscope_core::TaskId::parse(&task).unwrap());
    let lease: u64 = redis.command(&["HGET", &key, "lease"]).parse().unwrap();
    let store_now = || {
        let time = redis.command(&["TIME"]);
        let (secs, micros) = time.split_once('\n').unwrap();
        secs.parse::<u64>().unwrap() * 1_000 + micros.parse::<u64>().unwrap() / 1_000
    };
    let mut stock_reads = 0;
    loop {
        let past_lease = store_now() > lease;
        let (status, _, read) = request(&lab, "tasks/get", json!({ "taskId": task })).await;
        assert_eq!(status, 200, "{read}");
        sealed(&read);
        stock_reads += 1;
        if past_lease && stock_reads >= 3 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{read}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(counter(&lab, adopted), 0, "no read adopts an ended task");
    assert_eq!(counter(&lab, steps), ran, "no step ran again");
}
