//! The store's faults in a lab of replicas: a restart that loses this lab's sessions and
//! tasks, and a rollback (a snapshot, then a restore from it) that forgets what was written
//! since. Each touches only this lab's sessions and tasks, so other labs and servers on the
//! same Redis keep theirs.

use super::{Replicas, lock};
use crate::lab::Refusal;
use crate::store::SessionId;
use crate::store::rollback::{SessionImage, TasksImage};

/// The last snapshot: this lab's sessions, and its tasks.
#[derive(Clone, Debug, Default)]
pub(super) struct Images {
    sessions: Vec<(SessionId, SessionImage)>,
    tasks: Option<TasksImage>,
}

impl Replicas {
    /// The store loses this lab's sessions, as a restart of a Redis without persistence loses
    /// everything: only this lab's, so other labs and servers on the same Redis keep theirs.
    pub fn restart_store(&self) {
        let sessions = self.lab_sessions();
        let tasks = lock(&self.watch).tasks.clone();
        {
            let mut watch = lock(&self.watch);
            // Cleared first: a store read that lands after this sees the sessions gone.
            watch.streams.clear();
            watch.stored.clear();
            watch.standalone_on = None;
            for seen in &mut watch.replicas {
                seen.holds.clear();
            }
        }
        let store = self.store.clone();
        let pending = self.pending();
        tokio::spawn(async move {
            let _pending = pending;
            for session in sessions {
                if let Err(e) = store.end_session(&session).await {
                    tracing::warn!("store restart: session {session} not ended: {e}");
                }
            }
            if let Err(e) = store.task_forget(&tasks).await {
                tracing::warn!("store restart: tasks not forgotten: {e}");
            }
        });
    }

    /// Keeps an image of this lab's sessions and tasks as the store holds them now.
    pub fn snapshot_store(&self) -> Result<(), Refusal> {
        let sessions = self.lab_sessions();
        let tasks = lock(&self.watch).tasks.clone();
        if sessions.is_empty() && tasks.is_empty() {
            return Err(Refusal::Store(
                "this lab has no session or task in the store yet".into(),
            ));
        }
        let (store, images, pending) = (self.store.clone(), self.images.clone(), self.pending());
        tokio::spawn(async move {
            let _pending = pending;
            let mut taken = Images::default();
            for session in sessions {
                match store.image(&session).await {
                    Ok(image) => taken.sessions.push((session, image)),
                    Err(e) => tracing::warn!("store snapshot: session {session} not kept: {e}"),
                }
            }
            match store.task_image(&tasks).await {
                Ok(image) => taken.tasks = Some(image),
                Err(e) => tracing::warn!("store snapshot: tasks not kept: {e}"),
            }
            *lock(&images) = taken;
        });
        Ok(())
    }

    /// Restores this lab's sessions from the last snapshot: the store forgets what was written
    /// since, as a Redis restored from an older RDB file does, while the replicas keep running.
    pub fn restore_store(&self) -> Result<(), Refusal> {
        let images = lock(&self.images).clone();
        if images.sessions.is_empty() && images.tasks.is_none() {
            return Err(Refusal::Store(
                "no snapshot to restore from (take one first: snapshot_store)".into(),
            ));
        }
        let (store, pending) = (self.store.clone(), self.pending());
        tokio::spawn(async move {
            let _pending = pending;
            for (session, image) in images.sessions {
                if let Err(e) = store.restore(&session, &image).await {
                    tracing::warn!("store restore: session {session} not restored: {e}");
                }
            }
            if let Some(tasks) = images.tasks
                && let Err(e) = store.task_restore(&tasks).await
            {
                tracing::warn!("store restore: tasks not restored: {e}");
            }
        });
        Ok(())
    }

    /// The sessions this lab has in the store.
    fn lab_sessions(&self) -> Vec<SessionId> {
        let watch = lock(&self.watch);
        let mut sessions: Vec<SessionId> = watch.streams.iter().map(|(k, _, _)| *k).collect();
        sessions.extend(watch.standalone_on.iter().map(|(k, _)| *k));
        sessions.sort();
        sessions.dedup();
        sessions
    }
}
