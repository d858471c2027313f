//! `serve --effects-file FILE`: each task step this process commits is a line appended to the
//! file — the tool's side effect, written once the store took it — so a prober's
//! `--effects-cmd 'wc -l < FILE'` counts how many times work happened, on one server or on
//! replicas sharing the file (each line one `write` with `O_APPEND`: lines never interleave).
//! The process's one sink, set once at start; a lab never sets it.

use std::io::Write as _;
use std::sync::OnceLock;

static SINK: OnceLock<std::fs::File> = OnceLock::new();

/// Appends this process's effects to `path` from now on (created if missing).
pub fn record_to(path: &std::path::Path) -> std::io::Result<()> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    let _ = SINK.set(file);
    Ok(())
}

/// One committed step of a task: a line, if effects are recorded.
pub(super) fn step_committed(task: &str, done: u64, of: u64, epoch: u64) {
    if let Some(mut file) = SINK.get() {
        let line = format!("task {task} step {done} of {of} epoch {epoch}\n");
        if let Err(e) = file.write_all(line.as_bytes()) {
            tracing::warn!("cannot record an effect: {e}");
        }
    }
}
