//! A tracing layer that keeps the last log lines in a ring for the log pane: nothing may write
//! to stdout or stderr while the dashboard owns the terminal.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

const KEPT: usize = 500;

#[derive(Clone, Debug, Default)]
pub struct LogRing(Arc<Mutex<Ring>>);

#[derive(Debug, Default)]
struct Ring {
    lines: VecDeque<(Level, String)>,
    version: u64,
}

impl LogRing {
    pub fn push(&self, level: Level, line: String) {
        let mut ring = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if ring.lines.len() == KEPT {
            ring.lines.pop_front();
        }
        ring.lines.push_back((level, line));
        ring.version += 1;
    }

    /// The last `n` lines, oldest first.
    pub fn tail(&self, n: usize) -> Vec<(Level, String)> {
        let ring = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        ring.lines
            .iter()
            .skip(ring.lines.len().saturating_sub(n))
            .cloned()
            .collect()
    }

    /// Changes whenever a line is added: the dashboard redraws on change only.
    pub fn version(&self) -> u64 {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .version
    }
}

#[derive(Default)]
struct Line {
    message: String,
    fields: String,
}

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.fields, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.fields, " {}={value}", field.name());
        }
    }
}

impl<S: Subscriber> Layer<S> for LogRing {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let mut line = Line::default();
        event.record(&mut line);
        self.push(
            *event.metadata().level(),
            format!("{}{}", line.message, line.fields),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    #[test]
    fn events_land_in_the_ring_with_their_fields() {
        let ring = LogRing::default();
        let subscriber = tracing_subscriber::registry().with(ring.clone());
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(stream = "s1", after = 41, "resumed");
        });
        let tail = ring.tail(5);
        assert_eq!(
            tail,
            vec![(Level::INFO, "resumed stream=s1 after=41".to_owned())]
        );
        assert_eq!(ring.version(), 1);
    }
}
