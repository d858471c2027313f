//! The replay memory of every stream together, held to `LabConfig::replay_budget_bytes`.
//!
//! Per-stream bounds alone multiply by the session and stream bounds; this one does not. Past
//! it, admissions are refused and an emit makes room in its own stream's buffer (a resume
//! from before what was evicted is then refused as `cursor_evicted`: never a silent gap).

use super::replay_buffer::ReplayBuffer;

#[derive(Clone, Debug)]
pub(crate) struct ReplayBudget {
    used: usize,
    max: usize,
    /// What one stream may come to hold: a new one is admitted only if that still fits.
    per_stream: usize,
}

impl ReplayBudget {
    pub fn new(max: usize, per_stream: usize) -> Self {
        ReplayBudget {
            used: 0,
            max,
            per_stream,
        }
    }

    pub fn used(&self) -> usize {
        self.used
    }

    pub fn max(&self) -> usize {
        self.max
    }

    /// No room for one more full stream: sessions and tool calls are refused.
    pub fn exhausted(&self) -> bool {
        self.used + self.per_stream > self.max
    }

    /// Runs `change` on a buffer and accounts for what it added or freed; past the budget the
    /// buffer sheds its own oldest events to make up for it.
    pub fn charge<R>(
        &mut self,
        buffer: &mut ReplayBuffer,
        change: impl FnOnce(&mut ReplayBuffer) -> R,
    ) -> R {
        let before = buffer.bytes();
        let out = change(buffer);
        self.used = self.used - before + buffer.bytes();
        if self.used > self.max {
            self.used -= buffer.shed(self.used - self.max);
        }
        out
    }

    /// A buffer was dropped or cleared.
    pub fn release(&mut self, bytes: usize) {
        self.used -= bytes;
    }
}
