//! The lab's rollback fault: a session as the store held it at one instant, put back later, as
//! a Redis restored from an older RDB snapshot (or an async replica promoted by a failover) puts
//! back everything it had then. On Redis each of the session's keys is `DUMP`ed with its TTL and
//! `RESTORE`d in place, so the replicas meet exactly the records and logs an older store held,
//! over the same connections. Not on any request path: `forkscope serve` never calls it.

use super::redis::{RedisStore, unavailable};
use super::{Backend, Link, SessionId, Store, StoreError};

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

/// Every key of the session (they share its hash tag).
async fn keys_of(store: &RedisStore, session: &SessionId) -> Result<Vec<String>, StoreError> {
    let mut conn = store.conn();
    let pattern = format!("fs:{{{session}}}:*");
    let mut keys = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
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
    let mut conn = store.conn();
    let mut out = Vec::new();
    for key in keys_of(store, session).await? {
        let (dumped, ttl): (Option<Vec<u8>>, i64) = redis::pipe()
            .cmd("DUMP")
            .arg(&key)
            .cmd("PTTL")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .map_err(unavailable)?;
        // Gone between the scan and the dump: it was not there to keep.
        if let Some(dumped) = dumped {
            out.push((key, dumped, ttl));
        }
    }
    Ok(out)
}

async fn put_back(
    store: &RedisStore,
    session: &SessionId,
    keys: &[(String, Vec<u8>, i64)],
) -> Result<(), StoreError> {
    let now = keys_of(store, session).await?;
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
