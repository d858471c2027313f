//! A scenario's progress as it is told while it plays: the step reached, the step's own words,
//! and what each lab's server decided. The player's callers fill it in; the dashboard's
//! narration pane and the recordings draw it.

use crate::lab::Lab;

/// Where a scenario's playback is, for the pane.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Narration {
    pub name: String,
    pub teaches: String,
    pub total: usize,
    /// Steps already run.
    pub done: usize,
    /// The last step's narration and its line in the file.
    pub said: Option<(usize, String)>,
    /// What the step running now does, when the file says nothing about it (a wait).
    pub doing: Option<String>,
    /// What each lab's server decided in its latest step that decided something:
    /// `(policy, facts)`.
    pub decided: Vec<(String, String)>,
    pub paused: bool,
    pub finished: bool,
    pub error: Option<String>,
}

impl Narration {
    /// Takes in what a lab's server decided, keeping the other labs' latest.
    pub fn decided_by(&mut self, policy: &str, facts: String) {
        match self.decided.iter_mut().find(|(p, _)| p == policy) {
            Some(entry) => entry.1 = facts,
            None => {
                self.decided.push((policy.to_owned(), facts));
                // Naive above fenced, as the columns are left and right.
                self.decided.sort_by(|a, b| b.0.cmp(&a.0));
            }
        }
    }

    /// Takes in what each lab's server decided since `seen` (one count per lab, moved on).
    pub fn decided_in<'a>(&mut self, labs: impl IntoIterator<Item = &'a Lab>, seen: &mut [u64]) {
        for (lab, seen) in labs.into_iter().zip(seen.iter_mut()) {
            let facts = lab.decided_since(seen).join(" · ");
            if !facts.is_empty() {
                self.decided_by(lab.policy().name(), facts);
            }
        }
    }

    /// A step ran: its own words become the story line; a step without any (a wait) shows
    /// what it does beside the progress instead of repeating the last line.
    pub fn stepped(&mut self, index: usize, step: &super::format::Step) {
        self.done = index + 1;
        match &step.say {
            Some(say) => {
                self.said = Some((step.line, say.clone()));
                self.doing = None;
            }
            None => self.doing = Some(step.kind.describe()),
        }
    }
}
