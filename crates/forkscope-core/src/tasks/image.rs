//! Tasks as the table held them at one instant, put back later: the lab's store faults (a
//! rollback to an older snapshot, a restart that loses everything) for the tasks a lab made,
//! as [`crate::replica::store::SessionImage`] is for its sessions.

use super::{Task, TaskTable};
use crate::ids::TaskId;

/// Some tasks, each as it was (or absent), with the idempotency keys that named them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskImage {
    tasks: Vec<(TaskId, Option<Task>)>,
    /// (key, arguments, task) for every key that named one of the tasks.
    keys: Vec<(String, String, TaskId)>,
}

impl TaskImage {
    /// No task at all: what a store that restarted empty holds of `ids`.
    pub fn empty(ids: &[TaskId]) -> TaskImage {
        TaskImage {
            tasks: ids.iter().map(|id| (*id, None)).collect(),
            keys: Vec::new(),
        }
    }
}

impl TaskTable {
    /// The tasks `ids` as the table holds them now.
    pub fn image(&self, ids: &[TaskId]) -> TaskImage {
        TaskImage {
            tasks: ids
                .iter()
                .map(|id| (*id, self.tasks.get(id).cloned()))
                .collect(),
            keys: self
                .keys
                .iter()
                .filter(|(_, (_, id))| ids.contains(id))
                .map(|(key, (arguments, id))| (key.clone(), arguments.clone(), *id))
                .collect(),
        }
    }

    /// Puts the image's tasks back as it held them: what was written to them since is
    /// forgotten; one absent from it is gone, with no tombstone (the store never knew it).
    pub fn restore(&mut self, image: &TaskImage) {
        for (id, task) in &image.tasks {
            self.keys.retain(|_, (_, named)| named != id);
            self.tombstones.retain(|(gone, _)| gone != id);
            match task {
                Some(task) => self.tasks.insert(*id, task.clone()),
                None => self.tasks.remove(id),
            };
        }
        for (key, arguments, id) in &image.keys {
            self.keys.insert(key.clone(), (arguments.clone(), *id));
        }
    }
}
