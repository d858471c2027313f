//! What each official SDK's server does on 2026-07-28, as `--policy ts-sdk|python-sdk|rmcp`
//! reproduces it: whether it speaks the revision at all, whether it runs the tasks extension, and
//! whether it reads an idempotency key (none does: the key is forkscope's extension). Each row
//! cites where it was read, as `resume/sdk/` does for 2025-11-25; `forkscope probe` holds the
//! lab to the same findings files as the SDKs' own servers (`interop/check-probe.sh`).

use super::listen::TaskListen;
use crate::policy::Policy;

/// One SDK's 2026-07-28 behaviour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModernQuirks {
    /// It answers `server/discover` and 2026-07-28 requests.
    pub speaks: bool,
    /// It declares the tasks extension and answers a `tools/call` with a task.
    pub runs_tasks: bool,
    /// It reads `_meta["io.forkscope/idempotencyKey"]`: only the fence does.
    pub honours_keys: bool,
    /// What it does with a listen's `taskIds` (`notifications/tasks`).
    pub listen: TaskListen,
    /// (the quirk, where it was read).
    pub cites: &'static [(&'static str, &'static str)],
}

/// The fence: both revisions, tasks, one task per key.
const FENCED: ModernQuirks = ModernQuirks {
    speaks: true,
    runs_tasks: true,
    honours_keys: true,
    listen: TaskListen::CurrentFirst,
    cites: &[],
};

/// The incident's server on the new wire: tasks as the extension's wire alone gives them.
const NAIVE: ModernQuirks = ModernQuirks {
    honours_keys: false,
    listen: TaskListen::ChangesOnly,
    ..FENCED
};

const TYPESCRIPT: ModernQuirks = ModernQuirks {
    speaks: false,
    runs_tasks: false,
    honours_keys: false,
    listen: TaskListen::NoTaskIds,
    cites: &[(
        "the v1 SDK (1.32.2) answers no 2026-07-28 request: server/discover without a session is a 400",
        "https://www.npmjs.com/package/@modelcontextprotocol/sdk/v/1.32.2",
    )],
};

const PYTHON: ModernQuirks = ModernQuirks {
    speaks: true,
    runs_tasks: false,
    honours_keys: false,
    listen: TaskListen::NoTaskIds,
    cites: &[(
        "mcp 2.3.0 speaks 2026-07-28 but has no tasks extension (no CreateTaskResult in the package)",
        "https://pypi.org/project/mcp/2.3.0/",
    )],
};

const RMCP: ModernQuirks = ModernQuirks {
    speaks: true,
    runs_tasks: true,
    honours_keys: false,
    listen: TaskListen::NotServed,
    cites: &[
        (
            "TaskManager keeps tasks in one process's HashMap, mints every id itself, and aborts the work at its TTL",
            "https://docs.rs/rmcp/3.11.0/rmcp/task_manager/struct.TaskManager.html",
        ),
        (
            "its SubscriptionFilter has no taskIds (model.rs, SUBSCRIPTIONS), and a handler that does not implement listen answers subscriptions/listen with method not found: no notifications/tasks",
            "https://docs.rs/rmcp/3.11.0/rmcp/model/struct.SubscriptionFilter.html",
        ),
    ],
};

impl ModernQuirks {
    pub fn of(policy: Policy) -> &'static ModernQuirks {
        match policy {
            Policy::Fenced => &FENCED,
            Policy::Naive => &NAIVE,
            Policy::TsSdk => &TYPESCRIPT,
            Policy::PythonSdk | Policy::PythonSdkStore => &PYTHON,
            Policy::Rmcp => &RMCP,
        }
    }
}
