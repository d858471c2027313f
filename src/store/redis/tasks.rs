//! The task table on Redis: one Lua script per [`TaskTable`](forkscope_core::tasks::TaskTable)
//! method, in `lua/tasks/` (each put after `lib.lua`, what they share), each doing what the
//! method of the same name does, at Redis's clock.
//!
//! Keys, each script's declared: a task and its idempotency key's entry share the hash tag of
//! the task's home (`fs:{t:HOME}:task:ID`, `fs:{t:HOME}:key:KEY`; a keyed task is minted at its
//! key's home, [`forkscope_core::tasks::minted`]), so every task script runs on one slot and
//! the table would run on a Redis Cluster as it is. The caps count two sets on a slot of their
//! own, `fs:{tasks}:held` (by when each task is deleted: the bound on memory) and
//! `fs:{tasks}:working` (by when each TTL fails it: the cap): `admit.lua` admits a new task
//! beside `create.lua` making it (the two sent together, `tasks/create.rs`), and `release.lua`
//! takes back what a task that ended early, or was never made, held. Between two scripts
//! nothing is lost: an entry that is never released leaves by its score.

mod create;

use super::RedisStore;
use super::replies::{classify, corrupt, text};
use crate::store::StoreError;
use forkscope_core::tasks::{
    EndedBy, Holder, Missing, Runner, Seen, Settled, Status, TOMBSTONE_MS, Task, WriteRefused,
};
use forkscope_core::{LabTime, TaskId};
use redis::{Script, Value};
use std::sync::{Arc, LazyLock};

/// One script per operation, each after the rules they share.
macro_rules! task_script {
    ($name:ident, $file:literal) => {
        static $name: LazyLock<Script> = LazyLock::new(|| {
            Script::new(concat!(
                include_str!("../lua/tasks/lib.lua"),
                include_str!(concat!("../lua/tasks/", $file))
            ))
        });
    };
}
task_script!(CREATE, "create.lua");
task_script!(GET, "get.lua");
task_script!(READ, "read.lua");
task_script!(ADOPT, "adopt.lua");
task_script!(STEP, "step.lua");
task_script!(FINISH, "finish.lua");
task_script!(RENEW, "renew.lua");
task_script!(SETTLE, "settle.lua");
task_script!(CANCEL, "cancel.lua");
static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/tasks/release.lua")));

const HELD: &str = "fs:{tasks}:held";
const WORKING: &str = "fs:{tasks}:working";

/// A task's key: under its home's hash tag.
pub fn task_key(id: TaskId) -> String {
    format!("fs:{{t:{:04x}}}:task:{id}", id.home())
}

/// An idempotency key's entry: under the home of the tasks it makes.
pub(super) fn key_entry(home: u16, key: &str) -> String {
    format!("fs:{{t:{home:04x}}}:key:{key}")
}

/// The reply's items as text (numbers spelled).
fn items(reply: &Value) -> Result<Vec<String>, StoreError> {
    let Value::Array(items) = reply else {
        return Err(corrupt("task script reply", reply));
    };
    items
        .iter()
        .map(|v| match v {
            Value::Nil => Some(String::new()),
            other => text(other),
        })
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| corrupt("task script reply", reply))
}

/// A task from the script's field list (`FIELDS` in `lua/tasks/lib.lua`, in order). A record no
/// runner writes (a status outside the vocabulary, a number that is not one, an outcome that
/// is not JSON) is corrupt, named by its key: never a task read as something it is not.
pub(super) fn task_of(id: TaskId, f: &[String]) -> Result<Task, StoreError> {
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
            other => Some(rolled_back(other).ok_or_else(bad)?),
        },
    })
}

/// `rolled_back:HOLDS:APPLIED` (`lib.lua`), the `ended` of a task a rollback ended.
fn rolled_back(ended: &str) -> Option<EndedBy> {
    let mut counts = ended.strip_prefix("rolled_back:")?.split(':');
    let (holds, applied) = (counts.next()?.parse().ok()?, counts.next()?.parse().ok()?);
    counts
        .next()
        .is_none()
        .then_some(EndedBy::RolledBack { holds, applied })
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

    /// Runs a task script on `keys` (the task first) with the table's settings, then `args`.
    pub(super) async fn task_script(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[String],
    ) -> Result<Vec<String>, StoreError> {
        let mut invocation = script.prepare_invoke();
        for key in keys {
            invocation.key(*key);
        }
        invocation
            .arg(self.retention.lease_ms)
            .arg(self.retention.task_retain_ms)
            .arg(TOMBSTONE_MS);
        for arg in args {
            invocation.arg(arg);
        }
        self.invoke(&invocation, keys).await
    }

    /// A failing script names every key it touches: any of them may be the bad one.
    pub(super) async fn invoke(
        &self,
        invocation: &redis::ScriptInvocation<'_>,
        keys: &[&str],
    ) -> Result<Vec<String>, StoreError> {
        let mut conn = self.conn();
        let reply: Value = invocation
            .invoke_async(&mut conn)
            .await
            .map_err(|e| classify(e, &keys.join(", ")))?;
        items(&reply)
    }

    /// `task` leaves the working set (`ended`), or both sets (admitted, never made).
    pub(super) async fn release(&self, task: &str, why: &str) -> Result<(), StoreError> {
        let mut invocation = RELEASE.prepare_invoke();
        invocation.key(HELD).key(WORKING).arg(task).arg(why);
        self.invoke(&invocation, &[HELD, WORKING]).await.map(drop)
    }

    pub(in crate::store) async fn task_get(
        &self,
        id: TaskId,
    ) -> Result<Result<Task, Missing>, StoreError> {
        let reply = self.task_script(&GET, &[&task_key(id)], &[]).await?;
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
        self.runner_write(id, &STEP, (epoch, wrote), &[done.to_string()])
            .await
    }

    /// The last step and the result in one script; a win leaves the working set the cap
    /// counts.
    pub(in crate::store) async fn task_finish(
        &self,
        id: TaskId,
        epoch: u64,
        done: u64,
        outcome: Arc<str>,
    ) -> Result<Result<(), WriteRefused>, StoreError> {
        let wrote = done.saturating_sub(1);
        let args = [done.to_string(), outcome.to_string()];
        let finished = self
            .runner_write(id, &FINISH, (epoch, wrote), &args)
            .await?;
        if finished.is_ok() {
            self.release(&task_key(id), "ended").await?;
        }
        Ok(finished)
    }

    pub(in crate::store) async fn task_renew(
        &self,
        id: TaskId,
        epoch: u64,
        wrote: u64,
    ) -> Result<Result<(), WriteRefused>, StoreError> {
        self.runner_write(id, &RENEW, (epoch, wrote), &[wrote.to_string()])
            .await
    }

    /// A runner's write `op` under `epoch`, its writes having left `wrote` steps, with its own
    /// arguments after the epoch: taken, or refused (stale, terminal, missing, rolled back).
    async fn runner_write(
        &self,
        id: TaskId,
        script: &Script,
        (epoch, wrote): (u64, u64),
        rest: &[String],
    ) -> Result<Result<(), WriteRefused>, StoreError> {
        let mut args = vec![epoch.to_string()];
        args.extend_from_slice(rest);
        let reply = self.task_script(script, &[&task_key(id)], &args).await?;
        match reply.split_first() {
            Some((code, _)) if code == "1" => Ok(Ok(())),
            Some((code, more)) => refused(code, more, epoch, wrote)
                .map(Err)
                .ok_or_else(|| bad_reply(id, "runner write", &reply)),
            None => Err(bad_reply(id, "runner write", &reply)),
        }
    }

    pub(in crate::store) async fn task_settle(
        &self,
        id: TaskId,
        by: Option<Holder>,
        to: Status,
        outcome: Option<Arc<str>>,
    ) -> Result<Result<Settled, WriteRefused>, StoreError> {
        self.settle(id, by, to, outcome, None).await
    }

    pub(in crate::store) async fn task_seal_rolled_back(
        &self,
        id: TaskId,
        by: Holder,
        applied: u64,
    ) -> Result<Result<Settled, WriteRefused>, StoreError> {
        self.settle(id, Some(by), Status::Failed, None, Some(applied))
            .await
    }

    /// `settle.lua`: a settle, or with `applied` the end of a task found rolled back.
    async fn settle(
        &self,
        id: TaskId,
        by: Option<Holder>,
        to: Status,
        outcome: Option<Arc<str>>,
        applied: Option<u64>,
    ) -> Result<Result<Settled, WriteRefused>, StoreError> {
        let args = [
            by.map_or(String::new(), |w| w.epoch.to_string()),
            to.name().to_owned(),
            outcome.as_deref().unwrap_or_default().to_owned(),
            by.map_or(0, |w| w.wrote).to_string(),
            applied.map_or(String::new(), |a| a.to_string()),
        ];
        let reply = self.task_script(&SETTLE, &[&task_key(id)], &args).await?;
        let settled = settled(id, &reply, to, by.unwrap_or(Holder { epoch: 0, wrote: 0 }))?;
        self.ended(id, &settled).await?;
        Ok(settled)
    }

    pub(in crate::store) async fn task_cancel(
        &self,
        id: TaskId,
    ) -> Result<Result<Settled, Missing>, StoreError> {
        let reply = self.task_script(&CANCEL, &[&task_key(id)], &[]).await?;
        let settled = settled(id, &reply, Status::Cancelled, Holder { epoch: 0, wrote: 0 })?;
        self.ended(id, &settled).await?;
        match settled {
            Ok(settled) => Ok(Ok(settled)),
            Err(WriteRefused::Missing(m)) => Ok(Err(m)),
            Err(_) => Err(bad_reply(id, "cancel", &reply)),
        }
    }

    pub(in crate::store) async fn task_read(
        &self,
        id: TaskId,
        adopter: Option<Runner>,
        seen: Option<Seen>,
    ) -> Result<Result<(Task, bool), Missing>, StoreError> {
        let args = [
            adopter.map_or(String::new(), |a| a.0.to_string()),
            seen.map_or(String::new(), |s| s.done.to_string()),
            if seen.is_some_and(|s| s.ended) {
                "1"
            } else {
                "0"
            }
            .to_owned(),
        ];
        let reply = self.task_script(&READ, &[&task_key(id)], &args).await?;
        match reply.split_first() {
            Some((code, rest)) if code == "-11" => {
                let forgotten = rest.first().and_then(|h| h.parse().ok()).zip(seen);
                let (holds, seen) = forgotten.ok_or_else(|| bad_reply(id, "read", &reply))?;
                // The read ended the task: it leaves the working set the cap counts.
                self.release(&task_key(id), "ended").await?;
                Ok(Err(Missing::Forgotten { holds, seen }))
            }
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
            .task_script(&ADOPT, &[&task_key(id)], &[runner.0.to_string()])
            .await?;
        match reply.split_first() {
            Some((code, fields)) if code == "1" => Ok(Some(task_of(id, fields)?)),
            Some((code, _)) if code == "0" => Ok(None),
            _ => Err(bad_reply(id, "adopt", &reply)),
        }
    }

    /// A task that ended here leaves the working set the cap counts.
    async fn ended(
        &self,
        id: TaskId,
        settled: &Result<Settled, WriteRefused>,
    ) -> Result<(), StoreError> {
        if matches!(settled, Ok(Settled::Won(_))) {
            self.release(&task_key(id), "ended").await?;
        }
        Ok(())
    }

    /// Redis's `TIME`, in the milliseconds every task script reads.
    pub(in crate::store) async fn task_now(&self) -> Result<u64, StoreError> {
        let (secs, micros): (u64, u64) = redis::cmd("TIME")
            .query_async(&mut self.conn())
            .await
            .map_err(|e| classify(e, "TIME"))?;
        Ok(secs * 1_000 + micros / 1_000)
    }
}

/// A script's reply no script sends, named by the task's key.
pub(super) fn bad_reply(id: TaskId, op: &str, reply: &[String]) -> StoreError {
    corrupt(&format!("{op} reply for {}", task_key(id)), reply)
}

fn settled(
    id: TaskId,
    reply: &[String],
    to: Status,
    by: Holder,
) -> Result<Result<Settled, WriteRefused>, StoreError> {
    match reply.split_first() {
        Some((code, _)) if code == "1" => Ok(Ok(Settled::Won(to))),
        Some((code, rest)) if code == "2" => rest
            .first()
            .and_then(|s| Status::parse(s))
            .map(|s| Ok(Settled::Lost(s)))
            .ok_or_else(|| bad_reply(id, "settle", reply)),
        Some((code, rest)) => refused(code, rest, by.epoch, by.wrote)
            .map(Err)
            .ok_or_else(|| bad_reply(id, "settle", reply)),
        None => Err(bad_reply(id, "settle", reply)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use forkscope_core::SplitMix64;
    use forkscope_core::tasks::{Keyed, key_home, minted};

    /// The part of a key Redis Cluster hashes: the first `{…}` with something inside.
    fn hash_tag(key: &str) -> &str {
        key.find('{')
            .and_then(|open| {
                let close = key[open + 1..].find('}')? + open + 1;
                (close > open + 1).then(|| &key[open + 1..close])
            })
            .unwrap_or(key)
    }

    /// A keyed task and its key's entry hash alike, whatever the key holds (braces too): every
    /// task script, create included, runs on one slot.
    #[test]
    fn a_task_and_its_key_share_one_slot() {
        let mut rng = SplitMix64::new(9);
        for key in ["order-1", "{evil}", "}{", "a{b}c", ""] {
            let keyed = Keyed {
                key: key.into(),
                arguments: "{}".into(),
            };
            let id = minted(TaskId::generate(&mut rng), Some(&keyed));
            assert_eq!(id.home(), key_home(key));
            assert_eq!(
                hash_tag(&task_key(id)),
                hash_tag(&key_entry(id.home(), key))
            );
        }
        assert_eq!(hash_tag(HELD), hash_tag(WORKING));
    }

    /// Every key a task script touches is one it was given (`KEYS[n]`): no script spells a key,
    /// and none reads one from a field.
    #[test]
    fn no_task_script_spells_a_key() {
        let scripts = [
            include_str!("../lua/tasks/lib.lua"),
            include_str!("../lua/tasks/create.lua"),
            include_str!("../lua/tasks/get.lua"),
            include_str!("../lua/tasks/read.lua"),
            include_str!("../lua/tasks/adopt.lua"),
            include_str!("../lua/tasks/step.lua"),
            include_str!("../lua/tasks/finish.lua"),
            include_str!("../lua/tasks/renew.lua"),
            include_str!("../lua/tasks/settle.lua"),
            include_str!("../lua/tasks/cancel.lua"),
            include_str!("../lua/tasks/admit.lua"),
            include_str!("../lua/tasks/release.lua"),
            include_str!("../lua/tasks/withdraw.lua"),
        ];
        for script in scripts {
            for call in script.split("redis.call(").skip(1) {
                let call = call.split(')').next().unwrap_or_default();
                let args = call.split(',').nth(1).unwrap_or_default().trim();
                assert!(
                    args.starts_with("task")
                        || args.starts_with("KEYS[")
                        || call.starts_with("'PUBLISH'")
                        || call.starts_with("'TIME'"),
                    "a key spelled in a script: redis.call({call:.60}"
                );
            }
        }
    }
}
