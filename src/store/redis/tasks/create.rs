//! Making a task on Redis: the caps' admission (`admit.lua`, on `{tasks}`) and the create
//! (`create.lua`, on the task's own slot) are two scripts, as Redis Cluster needs, but one
//! round trip: both go out together on the one connection, and neither waits on the other.
//!
//! So the create runs before its admission is known (`'p'`). An unkeyed task is made all the
//! same: its id was drawn here and is answered to no one until the admission says yes, so a
//! task the caps refused is withdrawn (`withdraw.lua`) before anyone can know it. A keyed task
//! is named by its key the moment it exists (another create under the key would find it), so a
//! fresh one waits for its admission: the create answers -9, and runs again admitted (a second
//! round trip, as every create took before). A create that finds its key's task gives back the
//! admission it did not use, as before.

use super::super::replies::corrupt;
use super::{CREATE, HELD, RedisStore, WORKING, bad_reply, key_entry, task_key, task_of};
use crate::store::StoreError;
use forkscope_core::TaskId;
use forkscope_core::tasks::{
    CreateError, Created, Keyed, MAX_HELD, MAX_KEY_BYTES, MAX_TASKS, Runner, Task, Work, minted,
};
use redis::Script;
use std::sync::LazyLock;

static ADMIT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/tasks/admit.lua")));
static WITHDRAW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/tasks/withdraw.lua")));

/// One create's arguments, all but what the caller found under the key and the admission.
struct Making<'a> {
    new_id: TaskId,
    new_key: &'a str,
    entry: &'a str,
    work: Work,
    ttl_ms: u64,
    runner: Runner,
    key: &'a str,
    arguments: &'a str,
}

impl RedisStore {
    /// The caps' admission of a new task, `Ok(())` or the refusal.
    async fn admit(&self, task: &str, ttl_ms: u64) -> Result<Result<(), CreateError>, StoreError> {
        let mut invocation = ADMIT.prepare_invoke();
        invocation
            .key(HELD)
            .key(WORKING)
            .arg(task)
            .arg(ttl_ms)
            .arg(self.retention.task_retain_ms)
            .arg(MAX_TASKS)
            .arg(MAX_HELD);
        let reply = self.invoke(&invocation, &[HELD, WORKING]).await?;
        match reply.first().map(String::as_str) {
            Some("1") => Ok(Ok(())),
            Some("-2") => Ok(Err(CreateError::Full { max: MAX_TASKS })),
            Some("-7") => Ok(Err(CreateError::Held { max: MAX_HELD })),
            _ => Err(corrupt("admit reply", &reply)),
        }
    }

    /// `create.lua` once: `found`, the task the key's entry was read to name ('' for none);
    /// `admitted`, what the caps said ('1', '0', or 'p' while their answer is on its way).
    async fn create_once(
        &self,
        m: &Making<'_>,
        found: &str,
        admitted: &str,
    ) -> Result<Vec<String>, StoreError> {
        let found_key = match found {
            "" => m.new_key.to_owned(),
            id => task_key(TaskId::parse(id).ok_or_else(|| corrupt("a task id", id))?),
        };
        let keys: &[&str] = if m.key.is_empty() {
            &[m.new_key]
        } else {
            &[m.new_key, m.entry, &found_key]
        };
        let args = [
            m.work.steps.to_string(),
            m.ttl_ms.to_string(),
            m.runner.0.to_string(),
            m.key.to_owned(),
            m.arguments.to_owned(),
            m.new_id.to_string(),
            m.work.delay_ms.to_string(),
            found.to_owned(),
            admitted.to_owned(),
        ];
        self.task_script(&CREATE, keys, &args).await
    }

    /// An unkeyed task made beside an admission the caps refused: no one knows it yet, so it
    /// goes as if never made.
    async fn withdraw(&self, task: &str) -> Result<(), StoreError> {
        let mut invocation = WITHDRAW.prepare_invoke();
        invocation.key(task);
        self.invoke(&invocation, &[task]).await.map(drop)
    }

    /// Admitted and made in one round trip (see the module's comment); a key whose entry names
    /// a task is read again under that task's name, so the script declares it. What the caps
    /// admitted for a task never made is released.
    pub(in crate::store) async fn task_create(
        &self,
        drawn: TaskId,
        work: Work,
        ttl_ms: u64,
        keyed: Option<Keyed>,
        runner: Runner,
    ) -> Result<Result<(Created, Task), CreateError>, StoreError> {
        if keyed.as_ref().is_some_and(|k| k.key.len() > MAX_KEY_BYTES) {
            return Ok(Err(CreateError::KeyTooLong));
        }
        let new_id = minted(drawn, keyed.as_ref());
        let new_key = task_key(new_id);
        let (key, arguments) =
            keyed.map_or((String::new(), String::new()), |k| (k.key, k.arguments));
        let entry = key_entry(new_id.home(), &key);
        let m = Making {
            new_id,
            new_key: &new_key,
            entry: &entry,
            work,
            ttl_ms,
            runner,
            key: &key,
            arguments: &arguments,
        };
        let (admission, first) =
            tokio::join!(self.admit(&new_key, ttl_ms), self.create_once(&m, "", "p"));
        let made = |reply: &Result<Vec<String>, StoreError>| matches!(reply, Ok(r) if r.first().is_some_and(|c| c == "1"));
        // A half that failed leaves the other's work undone: best effort, as the scores would.
        let admission = match admission {
            Ok(admission) => admission,
            Err(e) => {
                if made(&first) {
                    let _ = self.withdraw(&new_key).await;
                }
                return Err(e);
            }
        };
        let admitted = admission.is_ok();
        if first.is_err() && admitted {
            let _ = self.release(&new_key, "unused").await;
        }
        let mut reply = first?;
        // The entry changes under us only when another create makes or deletes its task: a
        // few rounds settle it.
        let mut found = String::new();
        for round in 0..4 {
            match reply.split_first() {
                Some((code, rest)) if code == "1" || code == "0" => {
                    let (id, fields) = rest
                        .split_first()
                        .ok_or_else(|| bad_reply(new_id, "create", &reply))?;
                    let id = TaskId::parse(id).ok_or_else(|| corrupt("a task id", id))?;
                    let task = task_of(id, fields)?;
                    if let (true, Err(refused)) = (code == "1", &admission) {
                        self.withdraw(&new_key).await?;
                        return Ok(Err(refused.clone()));
                    }
                    if code == "0" && admitted {
                        self.release(&new_key, "unused").await?;
                    }
                    let created = Created {
                        id,
                        epoch: task.epoch,
                        fresh: code == "1",
                    };
                    return Ok(Ok((created, task)));
                }
                Some((code, rest)) if code == "-1" => {
                    if admitted {
                        self.release(&new_key, "unused").await?;
                    }
                    let task = rest.first().map_or("", String::as_str);
                    let task = TaskId::parse(task).ok_or_else(|| corrupt("a task id", task))?;
                    return Ok(Err(CreateError::KeyReused { task }));
                }
                Some((code, rest)) if code == "-10" => {
                    found = rest.first().cloned().unwrap_or_default();
                }
                // A fresh keyed task waits for its admission: refused, or made now it is known.
                Some((code, _)) if code == "-9" => {
                    if let Err(refused) = &admission {
                        return Ok(Err(refused.clone()));
                    }
                }
                _ => return Err(bad_reply(new_id, "create", &reply)),
            }
            if round < 3 {
                reply = self
                    .create_once(&m, &found, if admitted { "1" } else { "0" })
                    .await?;
            }
        }
        if admitted {
            self.release(&new_key, "unused").await?;
        }
        Err(StoreError::Unavailable(format!(
            "the idempotency key's entry {entry} kept changing under a create"
        )))
    }
}
