//! `logging/setLevel` on the Redis store: the level a session's client set, kept in the
//! session's record (`fs:{S}:meta`, field `log`, as its rank), where `append.lua` compares a
//! background event's level with it.

use super::{RedisStore, SCRIPTS, classify, corrupt, meta};
use crate::store::{SessionId, StoreError};
use forkscope_core::vocabulary::LogLevel;

impl RedisStore {
    /// `logging/setLevel`: the level, as its rank, in the session's record, where `append.lua`
    /// reads it.
    pub async fn set_log_level(
        &self,
        session: &SessionId,
        level: LogLevel,
    ) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let reply: i64 = SCRIPTS
            .set_log_level
            .key(meta(session))
            .arg(level.rank())
            .arg(self.retention.session_idle_ms)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| classify(e, &meta(session)))?;
        match reply {
            1 => Ok(()),
            -1 => Err(StoreError::SessionGone),
            other => Err(corrupt("set_log_level reply", &other)),
        }
    }
}
