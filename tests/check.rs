//! `forkscope check` from the outside: verdicts and exit codes, and a counterexample that
//! round-trips — check → scenario file → `forkscope run` over real sockets → the same anomaly.

use forkscope_core::Policy;
use forkscope_core::model::{self, Delivery, Step};
use std::path::PathBuf;
use std::process::Command;

fn forkscope() -> Command {
    Command::new(env!("CARGO_BIN_EXE_forkscope"))
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("forkscope-check-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn fenced_holds_and_exits_0() {
    let out = forkscope()
        .args([
            "check",
            "--policy",
            "fenced",
            "--depth",
            "7",
            "--delivery",
            "eager",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains("fenced: no fork, duplicate, gap, drift, loss or reused id in"),
        "{stdout}"
    );
    assert!(stdout.contains("resume accepted"), "{stdout}");
}

/// A deep search runs into its memory budget and stops cleanly: exit 3, and both reports say
/// to which depth every schedule holds and where the budget ran out. The process runs under
/// an address-space limit of 1 GiB: had the search ignored its budget (as `--depth 30` once
/// did, to 3.5 GB), the allocator would have aborted it. Address space, not resident memory:
/// each search thread's stack and allocator arena reserve far more than they touch (two
/// threads: 309 MB reserved for 46 MB resident).
#[cfg(unix)]
#[test]
fn a_memory_budget_stops_the_search_cleanly_and_exits_3() {
    let bounded = |format: &str| {
        Command::new("sh")
            .arg("-c")
            .arg(format!(
                "ulimit -v 1048576 && exec \"$0\" check --policy fenced --depth 30 \
                 --memory-budget 8MiB --format {format}"
            ))
            .arg(env!("CARGO_BIN_EXE_forkscope"))
            .output()
            .unwrap()
    };
    let out = bounded("json");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let fenced = &report[0];
    assert_eq!(fenced["holds"], true);
    assert_eq!(fenced["complete"], false);
    assert_eq!(fenced["limits"]["memory_budget"], 8 << 20);
    assert_eq!(fenced["limits"]["time_budget_secs"], 60);
    assert_eq!(fenced["stopped"]["limit"], "memory_budget");
    assert_eq!(fenced["stopped"]["budget"], 8 << 20);
    let proven = fenced["proven_depth"].as_u64().unwrap();
    assert!(proven >= 8, "{fenced}");
    assert_eq!(fenced["stopped"]["at_depth"].as_u64(), Some(proven + 1));
    assert!(fenced["estimated_peak_bytes"].as_u64().unwrap() <= 8 << 20);
    let levels = fenced["levels"].as_array().unwrap();
    assert_eq!(levels.len() as u64, proven + 1);
    assert_eq!(levels.last().unwrap()["complete"], false);

    let out = bounded("text");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "fenced: every schedule up to depth {proven} holds"
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "(memory budget 8 MiB reached at depth {})",
            proven + 1
        )),
        "{stdout}"
    );
}

/// `--max-states` stops a search the same way, and says so the same way.
#[test]
fn a_state_limit_is_reported_as_incomplete_with_exit_3() {
    let out = forkscope()
        .args(["check", "--policy", "fenced", "--depth", "20"])
        .args(["--max-states", "1000"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{stdout}");
    assert!(
        stdout.contains("fenced: every schedule up to depth "),
        "{stdout}"
    );
    assert!(
        stdout.contains("(state limit 1000 reached at depth "),
        "{stdout}"
    );
    // A counterexample still wins: naive forks before any limit is reached.
    let both = forkscope()
        .args(["check", "--depth", "20", "--max-states", "1000"])
        .output()
        .unwrap();
    assert_eq!(both.status.code(), Some(1));
}

/// One set of limits for both models: a time budget stops either search the way the memory
/// budget does (exit 3, the depth proven named), and `--max-states` bounds the replica model
/// too. The budget is a second: what is asserted is the reason and the exit, not a duration.
#[test]
fn a_time_budget_stops_either_model_with_exit_3() {
    for replicas in [None, Some("2")] {
        let mut check = forkscope();
        check.args(["check", "--policy", "fenced", "--depth", "40"]);
        check.args(["--time-budget", "1", "--format", "json"]);
        if let Some(n) = replicas {
            check.args(["--replicas", n]);
        }
        let out = check.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(3), "{replicas:?}: {stdout}");
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let fenced = &report[0];
        assert_eq!(fenced["stopped"]["limit"], "time_budget", "{fenced}");
        assert_eq!(fenced["stopped"]["secs"], 1);
        let proven = fenced["proven_depth"].as_u64().unwrap();
        assert_eq!(fenced["stopped"]["at_depth"].as_u64(), Some(proven + 1));
        assert!(
            fenced["verdict"].as_str().unwrap().ends_with(&format!(
                "(time budget of 1 s reached at depth {})",
                proven + 1
            )),
            "{fenced}"
        );
    }
    let out = forkscope()
        .args(["check", "--replicas", "2", "--policy", "fenced"])
        .args(["--depth", "20", "--max-states", "5000"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{stdout}");
    assert!(
        stdout.contains("(state limit 5000 reached at depth "),
        "{stdout}"
    );
    let out = forkscope()
        .args(["check", "--time-budget", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// Every class of anomaly the checker names: `check` finds a shortest naive schedule for it,
/// writes it as a scenario, and `run` replays it over real sockets with that anomaly — with
/// foreign GETs in the alphabet and without.
/// `forkscope run` plays every file over real sockets: each passes and shows its anomaly.
fn replay_each_shows_its_kind(files: &[(&str, PathBuf)]) {
    let run = forkscope()
        .args(["run", "--format", "json"])
        .args(files.iter().map(|(_, f)| f))
        .output()
        .unwrap();
    let played: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    let shown = serde_json::to_string_pretty(&played).unwrap();
    assert_eq!(run.status.code(), Some(0), "{shown}");
    for (i, (kind, _)) in files.iter().enumerate() {
        let counts = &played[i]["runs"][0]["verdict"]["counts"];
        assert!(counts[*kind].as_u64().unwrap_or(0) >= 1, "{kind}: {shown}");
    }
}

#[test]
fn every_naive_counterexample_round_trips_over_real_sockets() {
    use forkscope_core::AnomalyKind;
    let dir = scratch("roundtrip");
    let mut files = Vec::new();
    // One server under naive reuses no id on a stream (only a store rolled back does), runs
    // every call to its end (only a dead replica stops one), and tells the client nothing.
    // 2026-07-28's kinds are not the 2025-11-25 model's to reach.
    let unreachable = [
        AnomalyKind::ReusedId,
        AnomalyKind::CallLost,
        AnomalyKind::Undelivered,
        AnomalyKind::TwoRunners,
        AnomalyKind::EffectTwice,
        AnomalyKind::TerminalTwice,
        AnomalyKind::StaleRead,
        AnomalyKind::OrphanTask,
        AnomalyKind::CutHalfway,
        AnomalyKind::TaskLost,
    ];
    for kind in
        <AnomalyKind as strum::IntoEnumIterator>::iter().filter(|k| !unreachable.contains(k))
    {
        for client_only in [false, true] {
            let file = dir.join(format!(
                "{}{}.toml",
                kind.as_str(),
                if client_only { "-client" } else { "" }
            ));
            let mut check = forkscope();
            check.args([
                "check",
                "--policy",
                "naive",
                "--format",
                "json",
                "--anomaly",
            ]);
            check.arg(kind.as_str());
            if client_only {
                check.arg("--client-only");
            }
            let out = check.arg("--emit-scenario").arg(&file).output().unwrap();
            assert_eq!(out.status.code(), Some(1), "a counterexample exits 1");
            let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(report[0]["holds"], false);
            assert_eq!(report[0]["counterexample"]["anomaly"], kind.as_str());
            files.push((kind, file));
        }
    }
    // Every file replays over real sockets and shows its class of anomaly.
    let files: Vec<_> = files.into_iter().map(|(k, f)| (k.as_str(), f)).collect();
    replay_each_shows_its_kind(&files);
    std::fs::remove_dir_all(&dir).ok();
}

/// Exactly once, or told, proven and replayed: the shortest silent loss under two SDK
/// policies, and the shortest loss fenced tells the client of (a typed 410), each replayed over
/// real sockets with the same verdict; naive never tells, and fenced never loses silently.
#[test]
fn losses_silent_and_told_round_trip_under_sdk_policies() {
    let dir = scratch("owed");
    let cases = [
        ("ts-sdk", "lost"),
        ("rmcp", "lost"),
        ("python-sdk", "undelivered"),
    ];
    let mut files = Vec::new();
    for (policy, kind) in cases {
        let file = dir.join(format!("{policy}-{kind}.toml"));
        let out = forkscope()
            .args([
                "check",
                "--policy",
                policy,
                "--format",
                "json",
                "--anomaly",
                kind,
            ])
            .arg("--emit-scenario")
            .arg(&file)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(1),
            "{policy} {kind}: a counterexample"
        );
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report[0]["counterexample"]["anomaly"], kind);
        files.push((kind, file));
    }
    replay_each_shows_its_kind(&files);
    for (policy, kind, code) in [("naive", "undelivered", 0), ("fenced", "lost", 0)] {
        let out = forkscope()
            .args(["check", "--policy", policy, "--anomaly", kind])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(code), "{policy} {kind}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_tool_call_schedule_replays_clean_under_fenced() {
    // A call cut mid-way with the token stripped; the client resumes it with Last-Event-ID.
    let steps = [
        Step::CallTool,
        Step::DeliverCall,
        Step::Advance,
        Step::DeliverCall,
        Step::StripToken,
        Step::DropConnection,
        Step::Advance,
        Step::Advance,
        Step::Advance,
        Step::DeliverCall,
        Step::DeliverCall,
    ];
    let told = model::trace(
        model::config(),
        Policy::Fenced,
        &steps,
        Delivery::Interleaved,
        false,
    )
    .unwrap();
    assert!(
        told.iter().any(|t| t
            .happened
            .iter()
            .any(|h| h.contains("client applies call") && h.contains("result"))),
        "{told:#?}"
    );
    let toml = forkscope::check::schedule_toml(
        model::config(),
        Policy::Fenced,
        &steps,
        Delivery::Interleaved,
        &told,
        None,
    )
    .unwrap();
    let dir = scratch("tool");
    let file = dir.join("tool.toml");
    std::fs::write(&file, toml).unwrap();
    let run = forkscope().arg("run").arg(&file).output().unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert_eq!(run.status.code(), Some(0), "{stdout}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_input_exits_2_and_nothing_is_overwritten() {
    let out = forkscope()
        .args(["check", "--depth", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = forkscope()
        .args(["check", "--policy", "sideways"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let dir = scratch("exists");
    let file = dir.join("mine.toml");
    std::fs::write(&file, "precious").unwrap();
    let out = forkscope()
        .args(["check", "--policy", "naive", "--emit-scenario"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not overwriting"));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "precious");
    std::fs::remove_dir_all(&dir).ok();
}

/// `--replicas 2 --policy naive --write F`: the shortest fork across replicas, exit 1, written
/// as a scenario of two replicas that parses back, expecting the fork under naive and none
/// under fenced, in the replica lab's own steps.
#[test]
fn replicas_naive_writes_its_fork_across_replicas_as_a_scenario() {
    use forkscope::lab::Action;
    use forkscope::scenario::file::ScenarioFile;
    use forkscope_core::AnomalyKind;
    let dir = scratch("replicas");
    let file = dir.join("fork.toml");
    let out = forkscope()
        .args(["check", "--replicas", "2", "--policy", "naive", "--write"])
        .arg(&file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("naive across 2 replicas: counterexample in 3 steps: fork"),
        "{stdout}"
    );
    assert!(stdout.contains("from replica A"), "{stdout}");
    let text = std::fs::read_to_string(&file).unwrap();
    let scenario: ScenarioFile = toml::from_str(&text).unwrap();
    assert_eq!(scenario.replicas, Some(2));
    let naive = scenario.expect.get(forkscope_core::Policy::Naive).unwrap();
    assert!(naive.anomalies.contains_key(&AnomalyKind::Fork), "{text}");
    let fenced = scenario.expect.get(forkscope_core::Policy::Fenced).unwrap();
    assert_eq!(fenced.anomalies.len(), 1, "{text}");
    let actions: Vec<Action> = scenario
        .steps
        .iter()
        .filter_map(|s| s.get_ref().action)
        .collect();
    let (a, b) = (
        forkscope_core::ReplicaId::new(0).unwrap(),
        forkscope_core::ReplicaId::new(1).unwrap(),
    );
    assert_eq!(
        actions,
        [
            Action::DropConnection,
            Action::RouteNext(b),
            Action::ReconnectNow,
            Action::EmitOn(a),
        ],
        "{text}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Fenced holds across replicas to a small depth (exit 0); a lab of three is refused (exit 2).
#[test]
fn replicas_fenced_holds_and_other_counts_are_refused() {
    let out = forkscope()
        .args([
            "check",
            "--replicas",
            "2",
            "--policy",
            "fenced",
            "--depth",
            "8",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains(
            "fenced across 2 replicas: no fork, duplicate, gap, drift, loss or reused id"
        ),
        "{stdout}"
    );
    let out = forkscope()
        .args(["check", "--replicas", "3"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("exactly 2 replicas"));
}

/// `--protocol 2026-07-28`: the fence holds in every reachable state (by depth 38 of the
/// default 40), time and renewals explored and every run's end judged (exit 0 alone); naive's
/// shortest
/// violation is the orphan a lost answer leaves, and asked for the double effect it finds it
/// (exit 1); what the model cannot do is refused with exit 2.
#[test]
fn the_2026_model_holds_fenced_and_finds_naives_double_effect() {
    let run = |args: &[&str]| {
        let out = forkscope()
            .args(["check", "--protocol", "2026-07-28"])
            .args(args)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.code(), text)
    };
    let (code, text) = run(&["--policy", "fenced"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("fenced under 2026-07-28: no step applied twice, no second runner")
            && text.contains("(every reachable state)"),
        "{text}"
    );
    let (code, text) = run(&["--policy", "naive"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("counterexample in 3 steps: orphan_task"),
        "{text}"
    );
    let (code, text) = run(&["--policy", "naive", "--anomaly", "effect_twice"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("counterexample in 4 steps: effect_twice"),
        "{text}"
    );
    assert!(text.contains("was applied twice"), "{text}");
    let (code, json) = run(&["--policy", "fenced", "--format", "json"]);
    assert_eq!(code, Some(0), "{json}");
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(report[0]["protocol"], "2026-07-28");
    assert_eq!(report[0]["holds"], true);
    // The double effect, written as a scenario, replays over real sockets: naive shows it,
    // fenced is clean; the file is not overwritten by a second run.
    let dir = scratch("modern");
    let file = dir.join("double.toml");
    let path = file.to_str().unwrap();
    let (code, text) = run(&[
        "--policy",
        "naive",
        "--anomaly",
        "effect_twice",
        "--write",
        path,
    ]);
    assert_eq!(code, Some(1), "{text}");
    let replay = forkscope().args(["run", path]).output().unwrap();
    let said = String::from_utf8_lossy(&replay.stdout);
    assert_eq!(replay.status.code(), Some(0), "{said}");
    assert!(
        said.contains("PASS  naive") && said.contains("effect_twice"),
        "{said}"
    );
    assert!(said.contains("PASS  fenced  clean"), "{said}");
    for refused in [
        &["--policy", "rmcp"][..],
        &["--replicas", "2"],
        &["--write", path],
        &["--protocol", "2027-01-01"],
        &["--anomaly", "fork"],
        &["--anomaly", "cut_halfway"],
    ] {
        let (code, text) = run(refused);
        assert_eq!(code, Some(2), "{refused:?}: {text}");
    }
    // And the 2025-11-25 model refuses a 2026 kind, naming the kinds it looks for.
    let out = forkscope()
        .args(["check", "--anomaly", "effect_twice"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("looks for fork, duplicate"), "{said}");
}

/// The mutation the fence must not survive: runners that renew their lease only with their
/// steps (`--mutate no-renewal`). `check` finds it at once (TASK LOST: every poll past the
/// lease adopts the task and no runner lives long enough to end it), and the scenario it
/// writes replays it over real sockets on two replicas: the task is adopted again and again and
/// never ends. The same file without its `mutate` line is the fence as it serves: the task
/// completes, nothing is adopted, and the file's livelock wait fails. `--mutate` outside the
/// 2026-07-28 model is refused.
#[test]
fn the_no_renewal_mutation_is_found_and_replays_over_sockets() {
    let dir = scratch("mutation");
    let file = dir.join("no-renewal.toml");
    let path = file.to_str().unwrap();
    let out = forkscope()
        .args(["check", "--protocol", "2026-07-28", "--policy", "fenced"])
        .args(["--mutate", "no-renewal", "--write", path])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("counterexample in 2 steps: task_lost"),
        "{text}"
    );
    let written = std::fs::read_to_string(&file).unwrap();
    assert!(written.contains("mutate = \"no-renewal\""), "{written}");
    let replay = forkscope().args(["run", path]).output().unwrap();
    let said = String::from_utf8_lossy(&replay.stdout);
    assert_eq!(replay.status.code(), Some(0), "{said}");
    assert!(said.contains("PASS  fenced  task_lost"), "{said}");
    let healthy = dir.join("renewing.toml");
    std::fs::write(&healthy, written.replace("mutate = \"no-renewal\"\n", "")).unwrap();
    let replay = forkscope().args(["run"]).arg(&healthy).output().unwrap();
    let said = String::from_utf8_lossy(&replay.stdout);
    assert_ne!(replay.status.code(), Some(0), "{said}");
    assert!(
        said.contains("waiting for the server to adopt 3 tasks"),
        "{said}"
    );
    let refused = forkscope()
        .args(["check", "--mutate", "no-renewal"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("needs --protocol 2026-07-28"));
}
