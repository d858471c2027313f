//! The headless demonstration: the seed incident played in the core under both policies, with
//! a narration of each step and the checker's verdict.

use forkscope_core::sim::Sim;
use forkscope_core::{LabConfig, Policy, ResumeDecision, StreamIdentity};
use std::fmt::Write as _;

/// Plays the incident under `policy` and returns the narrated transcript.
pub fn seed_incident(policy: Policy) -> String {
    let mut out = String::new();
    // The seed's model: stream identity travels only in the token header, so the stripped
    // header is the whole incident.
    let config = LabConfig {
        identity: StreamIdentity::TokenHeader,
        ..LabConfig::default()
    };
    let mut sim = Sim::new(config, policy, 41).expect("the default config is valid");
    let mut say = |sim: &Sim, line: String| {
        let _ = writeln!(out, "  {:>7}  {line}", sim.now().to_string());
    };
    sim.start();
    let session = sim.session().map(|s| s.short()).unwrap_or_default();
    say(
        &sim,
        format!("client initializes session {session} and opens its standalone stream s1"),
    );
    for _ in 0..41 {
        sim.emit_background();
    }
    sim.deliver_all();
    say(
        &sim,
        format!(
            "41 background events delivered and applied; client cursor {}",
            sim.client().cursor().unwrap_or("-")
        ),
    );
    sim.drop_connection();
    say(
        &sim,
        "a NAT drops the TCP connection; the server is not told and keeps s1 live".into(),
    );
    sim.advance(100);
    let cursor = sim.client().cursor().unwrap_or("-").to_owned();
    sim.strip_token();
    let decision = sim.reconnect(true);
    say(
        &sim,
        format!(
            "client retries with Last-Event-ID {cursor}, but its HTTP library drops the token header"
        ),
    );
    say(
        &sim,
        format!("  server decides: {}", describe(decision.as_ref())),
    );
    sim.deliver_all();
    for _ in 0..3 {
        sim.emit_background();
        sim.advance(100);
    }
    sim.deliver_all();
    say(
        &sim,
        "the background task emits three more events (42–44)".into(),
    );
    let verdict = sim.history().verdict();
    let _ = writeln!(out, "  verdict: {}", verdict.summary());
    let _ = writeln!(out, "           {}", verdict.headline);
    out
}

fn describe(decision: Option<&ResumeDecision>) -> String {
    match decision {
        None => "nothing (no reconnect was due)".to_owned(),
        Some(ResumeDecision::Answered(a)) => format!("answered {} {}", a.status, a.message),
        Some(ResumeDecision::Reject(r)) => {
            format!("reject {} (HTTP {}): {r}", r.reason(), r.http_status())
        }
        Some(ResumeDecision::NewStream(n)) => format!(
            "new stream {}{}, replaying {} events from its own index 0{}",
            n.stream,
            if n.echo.is_some() {
                " flagged new"
            } else {
                ", not flagged as new"
            },
            n.replay_len,
            n.orphaned
                .map(|o| format!("; {o} stays live for its grace window"))
                .unwrap_or_default()
        ),
        Some(ResumeDecision::Resume(r)) => {
            format!(
                "resume {} after {} ({} events replayed)",
                r.stream, r.after, r.replay_len
            )
        }
    }
}

/// Both policies, one after the other.
pub fn run() -> String {
    let mut out = String::from(
        "forkscope — the seed incident, replayed in the invariant core\n\
         (MCP Streamable HTTP 2025-11-25; see README.md)\n\n",
    );
    for policy in [Policy::Naive, Policy::Fenced] {
        let _ = writeln!(out, "{}", policy.name().to_uppercase());
        out.push_str(&seed_incident(policy));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demonstration_shows_the_fork_and_its_prevention() {
        let naive = seed_incident(Policy::Naive);
        assert!(naive.contains("verdict: fork ×1"), "{naive}");
        assert!(naive.contains("not flagged as new"), "{naive}");
        let fenced = seed_incident(Policy::Fenced);
        assert!(
            fenced.contains("reject missing_token (HTTP 428)"),
            "{fenced}"
        );
        assert!(fenced.contains("verdict: clean"), "{fenced}");
    }
}
