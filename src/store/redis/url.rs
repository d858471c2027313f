//! What `--store redis://…` names, checked before anything connects, and the client made from
//! it: its connections with Nagle off.

use super::ConnectError;
use redis::Client;

/// Checks a URL the way `--store` takes it: `redis://HOST:PORT[/DB]`, nothing else.
pub fn parse_url(url: &str) -> Result<Client, ConnectError> {
    let bad = |why: &str| ConnectError::BadUrl {
        url: url.to_owned(),
        why: why.to_owned(),
    };
    let rest = url
        .strip_prefix("redis://")
        .ok_or_else(|| bad("it must start with redis://"))?;
    let (authority, db) = rest.split_once('/').unwrap_or((rest, ""));
    if authority.is_empty() || authority.contains('@') {
        return Err(bad(
            "it must name HOST:PORT (credentials are not taken on the command line)",
        ));
    }
    if !db.is_empty() && db.parse::<u16>().is_err() {
        return Err(bad("the database after the / must be a number"));
    }
    if authority
        .rsplit_once(':')
        .is_none_or(|(_, p)| p.parse::<u16>().is_err())
    {
        return Err(bad("it must name a port (redis://HOST:PORT)"));
    }
    let info =
        redis::IntoConnectionInfo::into_connection_info(url).map_err(|e| bad(&e.to_string()))?;
    // Replicas write to one multiplexed connection from many tasks at once: with Nagle on, a
    // command waits for the ACK of the one before it (a delayed ACK: milliseconds per write).
    let tcp = info.tcp_settings().clone().set_nodelay(true);
    Client::open(info.set_tcp_settings(tcp)).map_err(|e| bad(&e.to_string()))
}
