//! The lab's rollback fault: a session as the store held it at one instant, put back later, as
//! a Redis restored from an older RDB snapshot (or an async replica promoted by a failover) puts
//! back everything it had then. On Redis each of the session's keys is `DUMP`ed with its TTL and
//! `RESTORE`d in place, so the replicas meet exactly the records and logs an older store held,
//! over the same connections. Not on any request path: `forkscope serve` never calls it.

use super::redis::{RedisStore, tasks::task_key, unavailable};
use super::{Backend, Link, SessionId, Store, StoreError};
use forkscope_core::TaskId;
use forkscope_core::tasks::TaskImage;

/// One session's records and logs at an instant.
#[derive(Clone, Debug)]
pub struct SessionImage(Image);

#[derive(Clone, Debug)]
enum Image {
    Memory(forkscope_core::replica::store::SessionImage),
    /// Each key with its `DUMP` and its `PTTL` (negative: no expiry).
    Redis(Vec<(String, Vec<u8>, i64)>),
}

impl Store {
    /// The session's records and logs as they are now.
    pub async fn image(&self, session: &SessionId) -> Result<SessionImage, StoreError> {
        Link::check(self.link.as_ref()).await?;
        Ok(SessionImage(match &self.backend {
            Backend::Memory(s) => Image::Memory(s.image(session)),
            Backend::Redis(s) => Image::Redis(dump(s, session).await?),
        }))
    }

    /// Puts the session back as `image` held it: what was written since is forgotten.
    pub async fn restore(
        &self,
        session: &SessionId,
        image: &SessionImage,
    ) -> Result<(), StoreError> {
        Link::check(self.link.as_ref()).await?;
        match (&self.backend, &image.0) {
            (Backend::Memory(s), Image::Memory(held)) => {
                s.restore(session, held);
                Ok(())
            }
            (Backend::Redis(s), Image::Redis(keys)) => put_back(s, session, keys).await,
            _ => Err(StoreError::Corrupt(
                "an image taken from another kind of store".into(),
            )),
        }
    }
}

/// Some tasks' records and the idempotency keys that name them, at an instant: a lab's tasks,
/// for the same faults.
#[derive(Clone, Debug)]
pub struct TasksImage(TaskPicture);

#[derive(Clone, Debug)]
enum TaskPicture {
    Memory(TaskImage),
    Redis(Vec<TaskId>, Vec<(String, Vec<u8>, i64)>),
}

impl Store {
    /// The tasks `ids` as the store holds them now.
    pub async fn task_image(&self, ids: &[TaskId]) -> Result<TasksImage, StoreError> {
        Link::check(self.link.as_ref()).await?;
        Ok(TasksImage(match &self.backend {
            Backend::Memory(s) => TaskPicture::Memory(s.task_image(ids)),
            Backend::Redis(s) => {
                let mut keys = Vec::new();
                for key in task_keys(s, ids).await? {
                    keys.extend(dump_key(s, key).await?);
                }
                TaskPicture::Redis(ids.to_vec(), keys)
            }
        }))
    }

    /// Puts the tasks back as `image` held them: what was written to them since is forgotten.
    pub async fn task_restore(&self, image: &TasksImage) -> Result<(), StoreError> {
        Link::check(self.link.as_ref()).await?;
        match (&self.backend, &image.0) {
            (Backend::Memory(s), TaskPicture::Memory(held)) => {
                s.task_restore(held);
                Ok(())
            }
            (Backend::Redis(s), TaskPicture::Redis(ids, keys)) => {
                replace(s, task_keys(s, ids).await?, keys).await
            }
            _ => Err(StoreError::Corrupt(
                "an image taken from another kind of store".into(),
            )),
        }
    }

    /// The store forgets the tasks `ids`, as a Redis without persistence does when it restarts.
    pub async fn task_forget(&self, ids: &[TaskId]) -> Result<(), StoreError> {
        Link::check(self.link.as_ref()).await?;
        match &self.backend {
            Backend::Memory(s) => {
                s.task_restore(&TaskImage::empty(ids));
                Ok(())
            }
            Backend::Redis(s) => replace(s, task_keys(s, ids).await?, &[]).await,
        }
    }
}

/// The tasks' keys, and the entries of every idempotency key that names one (under its home).
async fn task_keys(store: &RedisStore, ids: &[TaskId]) -> Result<Vec<String>, StoreError> {
    let mut keys: Vec<String> = ids.iter().map(|id| task_key(*id)).collect();
    let mut homes: Vec<u16> = ids.iter().map(TaskId::home).collect();
    homes.sort_unstable();
    homes.dedup();
    let mut conn = store.conn();
    for home in homes {
        for entry in scan(store, &format!("fs:{{t:{home:04x}}}:key:*")).await? {
            let named: Option<String> = redis::cmd("HGET")
                .arg(&entry)
                .arg("task")
                .query_async(&mut conn)
                .await
                .map_err(unavailable)?;
            if named.is_some_and(|n| ids.iter().any(|id| id.to_string() == n)) {
                keys.push(entry);
            }
        }
    }
    Ok(keys)
}

/// Every key of the session (they share its hash tag).
async fn keys_of(store: &RedisStore, session: &SessionId) -> Result<Vec<String>, StoreError> {
    scan(store, &format!("fs:{{{session}}}:*")).await
}

async fn scan(store: &RedisStore, pattern: &str) -> Result<Vec<String>, StoreError> {
    let mut conn = store.conn();
    let mut keys = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1_000)
            .query_async(&mut conn)
            .await
            .map_err(unavailable)?;
        keys.extend(batch);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    keys.sort();
    keys.dedup();
    Ok(keys)
}

async fn dump(
    store: &RedisStore,
    session: &SessionId,
) -> Result<Vec<(String, Vec<u8>, i64)>, StoreError> {
    let mut out = Vec::new();
    for key in keys_of(store, session).await? {
        out.extend(dump_key(store, key).await?);
    }
    Ok(out)
}

/// The key's `DUMP` and `PTTL`; `None` when it is gone (between a scan and the dump: it was
/// not there to keep).
async fn dump_key(
    store: &RedisStore,
    key: String,
) -> Result<Option<(String, Vec<u8>, i64)>, StoreError> {
    let (dumped, ttl): (Option<Vec<u8>>, i64) = redis::pipe()
        .cmd("DUMP")
        .arg(&key)
        .cmd("PTTL")
        .arg(&key)
        .query_async(&mut store.conn())
        .await
        .map_err(unavailable)?;
    Ok(dumped.map(|d| (key, d, ttl)))
}

async fn put_back(
    store: &RedisStore,
    session: &SessionId,
    keys: &[(String, Vec<u8>, i64)],
) -> Result<(), StoreError> {
    replace(store, keys_of(store, session).await?, keys).await
}

/// Deletes `now` and restores `keys`, in one transaction.
async fn replace(
    store: &RedisStore,
    now: Vec<String>,
    keys: &[(String, Vec<u8>, i64)],
) -> Result<(), StoreError> {
    let mut pipe = redis::pipe();
    pipe.atomic();
    for key in &now {
        pipe.cmd("DEL").arg(key).ignore();
    }
    for (key, dumped, ttl) in keys {
        pipe.cmd("RESTORE")
            .arg(key)
            .arg((*ttl).max(0))
            .arg(dumped.as_slice())
            .arg("REPLACE")
            .ignore();
    }
    let mut conn = store.conn();
    pipe.query_async::<()>(&mut conn).await.map_err(unavailable)
}
