//! When the lab's own task work has taken a step of its clock in full: what a scenario's wait
//! on task work and a test stepping a paused lab wait for (`clock::turns` says whose turn it is
//! at each instant).

use super::Lab;
use std::sync::atomic::Ordering;
use std::time::Duration;

impl Lab {
    /// Whether this lab's tasks, and its 2026 client's polls, step on its clock: one server,
    /// whose store is its own. Replicas run theirs on real time (their store may be a
    /// `redis-server`, with a clock of its own).
    pub fn tasks_run_on_lab_time(&self) -> bool {
        self.replicas.is_none()
    }

    /// Whether the lab's own task work has taken every step of its clock so far: each task
    /// runner and client intent asleep until a time still ahead. (A call made plainly, as
    /// python-sdk makes one, runs on real time: its fate is its response stream's, which a
    /// slow link delays in real time.) `false` for replicas, whose tasks run on real time.
    pub fn tasks_at_rest(&self) -> bool {
        let Some(server) = &self.server else {
            return false;
        };
        let working = server.task_hub().runners_running()
            + self.task_client.counters.at_work.load(Ordering::SeqCst);
        self.clock.resting() == working
    }

    /// Waits until [`Lab::tasks_at_rest`]; whether it came (within 10 s of real time, a
    /// guard against a hung runner, never a measure).
    pub async fn until_tasks_at_rest(&self) -> bool {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !self.tasks_at_rest() {
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!("the lab's task work did not come to rest within 10 s");
                return false;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        true
    }
}
