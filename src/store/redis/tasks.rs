//! The task table on Redis: `lua/tasks.lua`, one script whose first argument names the
//! [`TaskTable`](forkscope_core::tasks::TaskTable) method it does. Keys: `fs:task:{ID}` (a
//! task: its fields, or a tombstone's `gone`), `fs:taskkey:{KEY}` (an idempotency key: the
//! arguments it was made with and its task), `fs:tasks`, the tasks held by when each is
//! deleted (the bound on memory counts it), and `fs:tasks:working`, the working tasks by when
//! their TTL fails them (the cap counts it).

use super::RedisStore;
use super::replies::{classify, corrupt, text};
use crate::store::StoreError;
use forkscope_core::tasks::{
    CreateError, Created, EndedBy, Keyed, MAX_HELD, MAX_TASKS, Missing, RETAIN_MS, Runner, Settled,
    Status, TOMBSTONE_MS, Task, Work, WriteRefused,
};
use forkscope_core::{LabTime, TaskId};
use redis::{Script, Value};
use std::sync::{Arc, LazyLock};

static TASKS: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/tasks.lua")));

const LIVE: &str = "fs:tasks";
const WORKING: &str = "fs:tasks:working";

fn task_key(id: TaskId) -> String {
    format!("fs:task:{{{id}}}")
}

fn key_entry(key: &str) -> String {
    format!("fs:taskkey:{{{key}}}")
}

/// The reply's items as text (numbers spelled).
fn items(reply: &Value) -> Result<Vec<String>, StoreError> {
    let Value::Array(items) = reply else {
        return Err(corrupt("tasks.lua reply", reply));
    };
    items
        .iter()
        .map(|v| match v {
            Value::Nil => Some(String::new()),
            other => text(other),
        })
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| corrupt("tasks.lua reply", reply))
}

/// A task from the script's field list (`FIELDS` in `tasks.lua`, in order). A record no
/// runner writes (a status outside the vocabulary, a number that is not one, an outcome that
/// is not JSON) is corrupt, named by its key: never a task read as something it is not.
fn task_of(id: TaskId, f: &[String]) -> Result<Task, StoreError> {
    let bad = || corrupt(&format!("task record {}", task_key(id)), f);
    let n = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).ok_or_else(bad);
    let [status, .., outcome, ended, _delay] = f else {
        return Err(bad());
    };
    Ok(Task {
        id,
        status: Status::parse(status).ok_or_else(bad)?,
        created_at: LabTime::from_millis(n(1)?),
        updated_at: LabTime::from_millis(n(2)?),
        ttl_ms: n(3)?,
        steps: n(4)?,
        delay_ms: n(11)?,
        done: n(5)?,
        runner: Runner(u32::try_from(n(6)?).map_err(|_| bad())?),
        epoch: n(7)?,
        lease_until: LabTime::from_millis(n(8)?),
        outcome: match outcome.as_str() {
            "" => None,
            json if serde_json::from_str::<serde_json::Value>(json).is_ok() => {
                Some(Arc::from(json))
            }
            _ => return Err(bad()),
        },
        ended_by: match ended.as_str() {
            "" => None,
            "cancel" => Some(EndedBy::Cancel),
            "ttl" => Some(EndedBy::Ttl),
            _ => return Err(bad()),
        },
    })
}

fn missing(code: &str, rest: &[String]) -> Option<Missing> {
    match code {
        "-3" => Some(Missing::Unknown),
        "-4" => rest
            .first()
            .and_then(|at| at.parse().ok())
            .map(|at| Missing::Expired {
                at: LabTime::from_millis(at),
            }),
        _ => None,
    }
}

/// A refused write's reply; `wrote`: the steps the writer's own writes left in the store (what
/// a rolled-back store is held to).
fn refused(code: &str, rest: &[String], epoch: u64, wrote: u64) -> Option<WriteRefused> {
    match code {
        "-8" => rest
            .first()
            .and_then(|h| h.parse().ok())
            .map(|holds| WriteRefused::RolledBack { holds, wrote }),
        "-5" => rest
            .first()
            .and_then(|s| Status::parse(s))
            .map(WriteRefused::Terminal),
        "-6" => rest
            .first()
            .and_then(|h| h.parse().ok())
            .map(|held| WriteRefused::Stale { epoch, held }),
        _ => missing(code, rest).map(WriteRefused::Missing),
    }
}

impl RedisStore {
    /// The waiters on a task's change, subscribed to the store's channel on first use.
    pub(in crate::store) fn task_changes(&self) -> Arc<crate::store::changes::ChangeFeed> {
        crate::store::changes::ChangeFeed::subscribe(&self.task_changes, &self.client);
        self.task_changes.clone()
    }

    async fn tasks(
        &self,
        op: &str,
        keys: [&str; 2],
        args: &[String],
    ) -> Result<Vec<String>, StoreError> {
        let mut conn = self.conn();
        let mut invocation = TASKS.prepare_invoke();
        invocation
            .key(keys[0])
            .key(keys[1])
            .key(LIVE)
            .key(WORKING)
            .arg(op)
            .arg(self.retention.lease_ms)
            .arg(RETAIN_MS)
            .arg(TOMBSTONE_MS)
            .arg(MAX_TASKS)
            .arg(MAX_HELD);
        for arg in args {
            invocation.arg(arg);
        }
        // A failing script names every key it touches: any of them may be the bad one.
        let touched = keys
            .iter()
            .filter(|k| !k.is_empty())
            .chain([&LIVE, &WORKING])
            .copied()
            .collect::<Vec<_>>()
            .join(", ");
        let reply: Value = invocation
            .invoke_async(&mut conn)
            .await
            .map_err(|e| classify(e, &touched))?;
        items(&reply)
    }

    pub(in crate::store) async fn task_create(
        &self,
        new_id: TaskId,
        work: Work,
        ttl_ms: u64,
        keyed: Option<Keyed>,
        runner: Runner,
    ) -> Result<Result<(Created, Task), CreateError>, StoreError> {
        if keyed
            .as_ref()
            .is_some_and(|k| k.key.len() > forkscope_core::tasks::MAX_KEY_BYTES)
        {
            return Ok(Err(CreateError::KeyTooLong));
        }
        let (key, arguments) =
            keyed.map_or((String::new(), String::new()), |k| (k.key, k.arguments));
        let entry = if key.is_empty() {
            String::new()
        } else {
            key_entry(&key)
        };
        let reply = self
            .tasks(
                "create",
                [&task_key(new_id), &entry],
                &[
                    work.steps.to_string(),
                    ttl_ms.to_string(),
                    runner.0.to_string(),
                    key,
                    arguments,
                    new_id.to_string(),
                    work.delay_ms.to_string(),
                ],
            )
            .await?;
        let id_of = |s: &str| TaskId::parse(s).ok_or_else(|| corrupt("a task id", s));
        match reply.split_first() {
            Some((code, rest)) if code == "1" || code == "0" => {
                let (id, fields) = rest
                    .split_first()
                    .ok_or_else(|| bad_reply(new_id, "create", &reply))?;
                let id = id_of(id)?;
                let task = task_of(id, fields)?;
                let created = Created {
                    id,
                    epoch: task.epoch,
                    fresh: code == "1",
                };
                Ok(Ok((created, task)))
            }
            Some((code, rest)) if code == "-1" => {
                let task = id_of(rest.first().map_or("", String::as_str))?;
                Ok(Err(CreateError::KeyReused { task }))
            }
            Some((code, _)) if code == "-2" => Ok(Err(CreateError::Full { max: MAX_TASKS })),
            Some((code, _)) if code == "-7" => Ok(Err(CreateError::Held { max: MAX_HELD })),
            _ => Err(bad_reply(new_id, "create", &reply)),
        }
    }

    pub(in crate::store) async fn task_get(
        &self,
        id: TaskId,
    ) -> Result<Result<Task, Missing>, StoreError> {
        let reply = self.tasks("get", [&task_key(id), ""], &[]).await?;
        match reply.split_first() {
            Some((code, fields)) if code == "1" => Ok(Ok(task_of(id, fields)?)),
            Some((code, rest)) => missing(code, rest)
                .map(Err)
                .ok_or_else(|| bad_reply(id, "get", &reply)),
            None => Err(bad_reply(id, "get", &reply)),
        }
    }

    pub(in crate::store) async fn task_step(
        &self,
        id: TaskId,
        epoch: u64,
        done: u64,
    ) -> Result<Result<(), WriteRefused>, StoreError> {
        let wrote = done.saturating_sub(1);
        self.runner_write(id, "step", (epoch, wrote), &[done.to_string()])
            .await
    }

    pub(in crate::store) async fn task_renew(
        &self,
        id: TaskId,
        epoch: u64,
        wrote: u64,
    ) -> Result<Result<(), WriteRefused>, StoreError> {
        self.runner_write(id, "renew", (epoch, wrote), &[wrote.to_string()])
            .await
    }

    /// A runner's write `op` under `epoch`, its writes having left `wrote` steps, with its own
    /// arguments after the epoch: taken, or refused (stale, terminal, missing, rolled back).
    async fn runner_write(
        &self,
        id: TaskId,
        op: &str,
        (epoch, wrote): (u64, u64),
        rest: &[String],
    ) -> Result<Result<(), WriteRefused>, StoreError> {
        let mut args = vec![epoch.to_string()];
        args.extend_from_slice(rest);
        let reply = self.tasks(op, [&task_key(id), ""], &args).await?;
        match reply.split_first() {
            Some((code, _)) if code == "1" => Ok(Ok(())),
            Some((code, more)) => refused(code, more, epoch, wrote)
                .map(Err)
                .ok_or_else(|| bad_reply(id, op, &reply)),
            None => Err(bad_reply(id, op, &reply)),
        }
    }

    pub(in crate::store) async fn task_settle(
        &self,
        id: TaskId,
        epoch: Option<u64>,
        to: Status,
        outcome: Option<Arc<str>>,
    ) -> Result<Result<Settled, WriteRefused>, StoreError> {
        let args = [
            epoch.map_or(String::new(), |e| e.to_string()),
            to.name().to_owned(),
            outcome.as_deref().unwrap_or_default().to_owned(),
        ];
        let reply = self.tasks("settle", [&task_key(id), ""], &args).await?;
        settled(id, &reply, to, epoch.unwrap_or_default())
    }

    pub(in crate::store) async fn task_cancel(
        &self,
        id: TaskId,
    ) -> Result<Result<Settled, Missing>, StoreError> {
        let reply = self.tasks("cancel", [&task_key(id), ""], &[]).await?;
        match settled(id, &reply, Status::Cancelled, 0)? {
            Ok(settled) => Ok(Ok(settled)),
            Err(WriteRefused::Missing(m)) => Ok(Err(m)),
            Err(_) => Err(bad_reply(id, "cancel", &reply)),
        }
    }

    pub(in crate::store) async fn task_read(
        &self,
        id: TaskId,
        adopter: Runner,
    ) -> Result<Result<(Task, bool), Missing>, StoreError> {
        let reply = self
            .tasks("read", [&task_key(id), ""], &[adopter.0.to_string()])
            .await?;
        match reply.split_first() {
            Some((code, rest)) if code == "1" => {
                let (adopted, fields) = rest
                    .split_first()
                    .ok_or_else(|| bad_reply(id, "read", &reply))?;
                Ok(Ok((task_of(id, fields)?, adopted == "1")))
            }
            Some((code, rest)) => missing(code, rest)
                .map(Err)
                .ok_or_else(|| bad_reply(id, "read", &reply)),
            None => Err(bad_reply(id, "read", &reply)),
        }
    }

    pub(in crate::store) async fn task_adopt(
        &self,
        id: TaskId,
        runner: Runner,
    ) -> Result<Option<Task>, StoreError> {
        let reply = self
            .tasks("adopt", [&task_key(id), ""], &[runner.0.to_string()])
            .await?;
        match reply.split_first() {
            Some((code, fields)) if code == "1" => Ok(Some(task_of(id, fields)?)),
            Some((code, _)) if code == "0" => Ok(None),
            _ => Err(bad_reply(id, "adopt", &reply)),
        }
    }

    pub(in crate::store) async fn task_now(&self) -> Result<u64, StoreError> {
        let reply = self.tasks("now", [LIVE, ""], &[]).await?;
        reply
            .first()
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| corrupt("now reply", &reply))
    }
}

/// A script's reply no script sends, named by the task's key.
fn bad_reply(id: TaskId, op: &str, reply: &[String]) -> StoreError {
    corrupt(&format!("{op} reply for {}", task_key(id)), reply)
}

fn settled(
    id: TaskId,
    reply: &[String],
    to: Status,
    epoch: u64,
) -> Result<Result<Settled, WriteRefused>, StoreError> {
    match reply.split_first() {
        Some((code, _)) if code == "1" => Ok(Ok(Settled::Won(to))),
        Some((code, rest)) if code == "2" => rest
            .first()
            .and_then(|s| Status::parse(s))
            .map(|s| Ok(Settled::Lost(s)))
            .ok_or_else(|| bad_reply(id, "settle", reply)),
        Some((code, rest)) => refused(code, rest, epoch, 0)
            .map(Err)
            .ok_or_else(|| bad_reply(id, "settle", reply)),
        None => Err(bad_reply(id, "settle", reply)),
    }
}
