//! One delivery's own connection to Redis, for `XREAD BLOCK`: a blocked read would stall every
//! other command on a shared one.

use super::*;

/// A connection of one delivery's own, for `XREAD BLOCK`.
pub struct RedisReader {
    pub(super) conn: MultiplexedConnection,
}

impl std::fmt::Debug for RedisReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RedisReader")
    }
}

impl RedisReader {
    pub async fn read(
        &mut self,
        session: &SessionId,
        stream: StreamId,
        after: u64,
        max: usize,
    ) -> Result<Events, StoreError> {
        let reply: Value = redis::cmd("XREAD")
            .arg("COUNT")
            .arg(max)
            .arg("BLOCK")
            .arg(READ_BLOCK.as_millis() as u64)
            .arg("STREAMS")
            .arg(log_key(session, stream))
            .arg(format!("{after}-1"))
            .query_async(&mut self.conn)
            .await
            .map_err(|e| classify(e, &stream_key(session, stream)))?;
        read_entries(reply, after)
    }
}
