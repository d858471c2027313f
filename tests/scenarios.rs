//! The scenario format and runner: every shipped file loads, bad files are reported with file
//! and line and exit 2, and the seed incident plays to its expected verdicts.

mod common;

use forkscope::scenario::{self, play};
use forkscope_core::Policy;
use std::path::Path;
use std::process::Command;

#[test]
fn every_shipped_scenario_loads_and_says_what_it_teaches() {
    let files = common::shipped_scenarios();
    assert!(files.len() >= 10, "{files:?}");
    for file in files {
        let s = scenario::load(&file).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            s.teaches.len() > 80,
            "{}: say what it teaches",
            file.display()
        );
        assert!(
            s.expect.get(Policy::Naive).is_some() || s.expect.get(Policy::Fenced).is_some(),
            "{}: no expectations",
            file.display()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_scenario_plays_to_its_verdicts() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/seed-incident.toml");
    let s = scenario::load(&path).unwrap();
    for policy in [Policy::Naive, Policy::Fenced] {
        let run = play(&s, policy).await;
        assert!(run.ok(), "{policy}: {:?} {:?}", run.error, run.checks);
        assert!(!run.checks.is_empty());
    }
}

#[test]
fn bad_input_exits_2_with_file_and_line() {
    let dir = std::env::temp_dir().join(format!("forkscope-scenario-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        "name = \"x\"\nteaches = \"y\"\n[[step]]\naction = \"explode\"\n",
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_forkscope"))
        .arg("run")
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("bad.toml:4"), "{stderr}");
    assert!(stderr.contains("explode"), "{stderr}");
    let missing = Command::new(env!("CARGO_BIN_EXE_forkscope"))
        .args(["run", "/nonexistent/x.toml"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
    std::fs::remove_dir_all(&dir).ok();
}

/// The inputs that once kept `forkscope run` busy for ever, or read until memory ran out, are
/// refused before anything plays: each with its file and line, exit 2, and nothing on stdout.
#[test]
fn unbounded_input_is_refused_before_playing() {
    let dir =
        std::env::temp_dir().join(format!("forkscope-scenario-bounds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let head = "name = \"x\"\nteaches = \"y\"\n[[step]]\naction = \"emit_background\"\n";
    let half = i64::MAX;
    let cases = [
        (
            "end-of-time",
            format!("{head}[[step]]\nadvance_ms = {}\n", u64::MAX),
            ":5: step 2",
        ),
        // The first 2⁶³−1 ms is past the week already.
        (
            "two-halves",
            format!("{head}[[step]]\nadvance_ms = {half}\n[[step]]\nadvance_ms = {half}\n"),
            ":5: step 2",
        ),
        (
            "billion",
            format!("{head}[[step]]\naction = \"emit_background\"\nrepeat = 1000000000\n"),
            ":5: step 2",
        ),
    ];
    for (name, text, at) in cases {
        let file = dir.join(format!("{name}.toml"));
        std::fs::write(&file, text).unwrap();
        let output = Command::new(env!("CARGO_BIN_EXE_forkscope"))
            .arg("run")
            .arg(&file)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{name}: {stderr}");
        assert!(
            stderr.contains(&format!("{name}.toml{at}")),
            "{name}: {stderr}"
        );
        assert!(output.stdout.is_empty(), "{name} played");
    }
    #[cfg(unix)]
    {
        let output = Command::new(env!("CARGO_BIN_EXE_forkscope"))
            .args(["run", "/dev/zero"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("/dev/zero: larger than 1 MiB"), "{stderr}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// A wait that times out stops the run with a typed error that names the step, its line and
/// what it waited for; reports show its sentence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_that_times_out_is_a_typed_error_at_its_step() {
    use forkscope::scenario::format::WaitFor;
    use forkscope::scenario::player::{PlayError, WaitFailed};
    let text = "name = \"x\"\nteaches = \"y\"\npolicy = \"fenced\"\n[[step]]\naction = \"emit_background\"\n[[step]]\nwait = \"applied\"\ncount = 99\ntimeout_ms = 200\n";
    let s = scenario::format::parse(text, Path::new("stuck.toml")).unwrap();
    let run = play(&s, Policy::Fenced).await;
    let error = run.error.clone().expect("the wait cannot be met");
    assert!(
        matches!(
            &error,
            PlayError::Step {
                step: 2,
                line: 6,
                failed: WaitFailed {
                    what: WaitFor::Applied,
                    count: 99,
                    ..
                },
            }
        ),
        "{error:?}"
    );
    let said = error.to_string();
    assert!(
        said.starts_with(
            "step 2 (line 6): waiting for the client to apply 99 side effects \
             (`wait = \"applied\"`): not reached within"
        ),
        "{said}"
    );
    // A sentence, never a debug print of the lab's state.
    assert!(!said.contains("Some(") && !said.contains(" {"), "{said}");
    let report = scenario::report::json(&s, std::slice::from_ref(&run));
    assert_eq!(report["runs"][0]["error"], said.as_str());
}

#[test]
fn a_failed_expectation_exits_1_and_json_reports_it() {
    let dir = std::env::temp_dir().join(format!("forkscope-scenario-fail-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let wrong = dir.join("wrong.toml");
    // The fenced policy never forks: expecting one must fail.
    std::fs::write(
        &wrong,
        "name = \"wrong\"\nteaches = \"t\"\npolicy = \"fenced\"\n[[step]]\naction = \"emit_background\"\n[[step]]\nwait = \"applied\"\n[expect.fenced]\nanomalies = { fork = 1 }\n",
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_forkscope"))
        .args(["run", "--format", "json"])
        .arg(&wrong)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report[0]["ok"], false);
    assert_eq!(report[0]["runs"][0]["checks"][0]["what"], "fork = 1");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn every_scenario_reports_parseable_json_under_both_policies() {
    for policy in ["naive", "fenced"] {
        let output = Command::new(env!("CARGO_BIN_EXE_forkscope"))
            .args(["run", "--format", "json", "--policy", policy])
            .args(common::shipped_scenarios())
            .output()
            .unwrap();
        let code = output.status.code();
        assert!(
            matches!(code, Some(0 | 1)),
            "{policy}: exit {code:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let report: serde_json::Value = serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|e| panic!("{policy}: the JSON report does not parse: {e}"));
        assert!(!report.is_null());
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(!text.contains("number out of range"));
    }
}

/// Rounds a replica scenario is played in [`every_scenario_holds_on_every_run`].
const REPLICA_REPEATS: usize = 5;

/// "Same verdict on every run": every shipped scenario, both policies, played over real
/// sockets `FORKSCOPE_SCENARIO_REPEATS` times (default 20); every expectation holds every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scenario_holds_on_every_run() {
    let repeats: usize = std::env::var("FORKSCOPE_SCENARIO_REPEATS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let scenarios: Vec<_> = common::shipped_scenarios()
        .iter()
        .map(|f| (f.clone(), scenario::load(f).unwrap()))
        .collect();
    let mut failures = Vec::new();
    for round in 0..repeats {
        for (file, s) in &scenarios {
            // A replica story waits out leases in real time (seconds): five rounds here, and
            // five more on each store in interop/check-replica-scenarios.sh.
            if s.replicas.is_some() && round >= REPLICA_REPEATS {
                continue;
            }
            for policy in Policy::ALL {
                if s.expect.get(policy).is_none() {
                    continue;
                }
                // python-sdk-store's replay-then-close loop reconnects about 80 times while a
                // run quiesces (some 7 s a play): as many rounds as a replica story.
                if policy == Policy::PythonSdkStore && round >= REPLICA_REPEATS {
                    continue;
                }
                let run = play(s, policy).await;
                if !run.ok() {
                    failures.push(format!(
                        "round {round} {} {policy}: {:?} {:?}",
                        file.display(),
                        run.error,
                        run.checks.iter().filter(|c| !c.ok).collect::<Vec<_>>()
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// A policy the file states no expectation for is played, and says it checked nothing: never
/// a PASS.
#[test]
fn a_run_with_no_expectations_does_not_read_as_a_pass() {
    let dir = std::env::temp_dir().join(format!("forkscope-noexpect-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("naive-only.toml");
    std::fs::write(
        &file,
        "name = \"naive only\"\nteaches = \"y\"\npolicy = \"naive\"\n[[step]]\nadvance_ms = 100\n[expect.naive]\nclean = true\n",
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_forkscope"))
        .args(["run", "--policy", "fenced"])
        .arg(&file)
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("no expectations for fenced"), "{stdout}");
    assert!(!stdout.contains("PASS"), "{stdout}");
}
