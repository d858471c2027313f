//! The battery's cases by name, in the order they run, each with what it does: the names
//! `--only`, `--expect` files and every report use.

/// Every case, in the order the probe runs them: (name, what it does).
pub const CASES: &[(&str, &str)] = &[
    (
        "standalone-resume",
        "break the standalone GET stream and resume it with Last-Event-ID",
    ),
    (
        "call-resume",
        "break a tool call's stream mid-call and resume it with Last-Event-ID",
    ),
    (
        "call-resume-after-result",
        "break a tool call's stream and resume it after the call finished",
    ),
    (
        "resume-while-old-open",
        "resume while the old connection is still open (half-open, as the server sees it)",
    ),
    (
        "plain-get-while-live",
        "open a second, plain GET while the standalone stream is live",
    ),
    (
        "two-resumes-at-once",
        "resume twice at once from the same cursor",
    ),
    (
        "resume-races-emission",
        "resume at once while events are being emitted fast (repeated)",
    ),
    (
        "cursor-of-another-stream",
        "resume a call's stream while the standalone stream is live",
    ),
    (
        "cursor-of-another-session",
        "resume in one session with a cursor from another session",
    ),
    (
        "bogus-cursor",
        "resume with a Last-Event-ID the server never issued",
    ),
    (
        "malformed-cursor",
        "resume with a Last-Event-ID of bytes no server issues",
    ),
    (
        "cursor-ahead",
        "resume with a cursor past the last event sent",
    ),
    ("huge-cursor", "resume with a 64 KiB Last-Event-ID"),
    (
        "burst-order",
        "a 500-step call on one connection: order, duplicates, gaps",
    ),
    (
        "past-replay-capacity",
        "break a call's stream at its first event, let it run 1000 more steps, resume",
    ),
    (
        "unknown-session",
        "GET with a session id the server never issued",
    ),
    (
        "unsupported-version",
        "GET with MCP-Protocol-Version 1999-01-01",
    ),
    (
        "foreign-origin",
        "GET with Origin: http://forkscope-probe.invalid",
    ),
    // 2026-07-28 (the tasks extension): run only when server/discover offers it.
    (
        "task-reissue-same-key",
        "2026-07-28: lose a task call's answer and re-issue it under the same idempotency key",
    ),
    (
        "task-key-other-arguments",
        "2026-07-28: call again under a task's idempotency key with other arguments",
    ),
    (
        "task-get-repeated",
        "2026-07-28: read a new task 8 times (behind a balancer, each read may land elsewhere)",
    ),
    (
        "task-cancel-after-complete",
        "2026-07-28: cancel a task that completed, then read it again",
    ),
    (
        "task-cancel-while-working",
        "2026-07-28: cancel a working task, then read it to its end and after",
    ),
    (
        "task-listen-gap",
        "2026-07-28: listen for a task, break the listen, let the task end, listen again",
    ),
    (
        "task-survives-restart",
        "2026-07-28: a finished and a working task across --restart-cmd: found, ended once, one run's effects",
    ),
    (
        "task-runner-killed",
        "2026-07-28: a working task across --kill-cmd of its runner (then --restart-cmd, if given)",
    ),
    (
        "task-runner-paused",
        "2026-07-28: a working task whose runner --pause-cmd stops past its lease, then --resume-cmd wakes",
    ),
];
