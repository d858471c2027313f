//! Who waits on a task's change hears of it from the store, not from a tick: the memory store
//! wakes its waiters on every task write; on Redis every task write in `lua/tasks/`
//! publishes its key on [`TASK_CHANGES`], and one subscription per store handle wakes them, so
//! a listen on any replica hears another replica's write at once.

use futures_util::StreamExt as _;
use redis::Client;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::Notify;

/// The channel every task write is published on (its message: the task's key).
pub const TASK_CHANGES: &str = "fs:tasks:changed";

/// How long a lost subscription waits before it subscribes again.
const RESUBSCRIBE: Duration = Duration::from_millis(200);

/// Wakes every waiter when a task changed.
#[derive(Debug, Default)]
pub struct ChangeFeed {
    notify: Notify,
    /// Redis only: the subscription is made on the first wait, so a store no one listens on
    /// holds no second connection.
    subscribed: std::sync::OnceLock<()>,
}

impl ChangeFeed {
    /// Wakes whoever waits now.
    pub fn changed(&self) {
        self.notify.notify_waiters();
    }

    /// Resolves at the next change after it was first polled (enable it before reading what
    /// it guards, as `tokio::sync::Notify` says).
    pub fn next(&self) -> tokio::sync::futures::Notified<'_> {
        self.notify.notified()
    }

    /// Subscribes `feed` to Redis's [`TASK_CHANGES`] through `client`, once, in the background:
    /// each message wakes the waiters; a lost subscription is made again (and wakes them, as
    /// anything may have changed meanwhile). It ends once the store's last handle is gone.
    pub fn subscribe(feed: &Arc<ChangeFeed>, client: &Client) {
        feed.subscribed.get_or_init(|| {
            tokio::spawn(forward(client.clone(), Arc::downgrade(feed)));
        });
    }
}

async fn forward(client: Client, feed: Weak<ChangeFeed>) {
    loop {
        if let Ok(mut pubsub) = client.get_async_pubsub().await
            && pubsub.subscribe(TASK_CHANGES).await.is_ok()
        {
            let Some(awake) = feed.upgrade() else { return };
            awake.changed();
            drop(awake);
            let mut messages = pubsub.on_message();
            while messages.next().await.is_some() {
                let Some(awake) = feed.upgrade() else { return };
                awake.changed();
            }
        }
        if feed.strong_count() == 0 {
            return;
        }
        tokio::time::sleep(RESUBSCRIBE).await;
    }
}

#[cfg(test)]
mod tests {
    /// The channel is spelled twice, in Rust and in the script that publishes on it.
    #[test]
    fn the_script_publishes_on_the_channel_listens_subscribe_to() {
        let script = include_str!("lua/tasks/lib.lua");
        assert!(script.contains(&format!("'{}'", super::TASK_CHANGES)));
    }
}
