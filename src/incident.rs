//! The seed incident over real loopback HTTP: the shipped `scenarios/seed-incident.toml`,
//! embedded in the binary and played by the scenario player.

use crate::scenario::{self, format};
use forkscope_core::{Policy, RejectReason, Verdict};
use std::path::Path;

/// The seed incident's scenario file, built into the binary so it runs from any directory.
pub const SEED_SCENARIO: &str = include_str!("../scenarios/seed-incident.toml");

#[derive(Debug)]
pub struct IncidentReport {
    pub policy: Policy,
    pub verdict: Verdict,
    pub rejected_missing_token: u64,
    pub applied: u64,
    pub transcript: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum IncidentError {
    #[error("the built-in seed scenario does not load: {0}")]
    Scenario(#[from] scenario::ScenarioError),
    #[error(transparent)]
    Play(#[from] scenario::PlayError),
    #[error("the run ended without a verdict")]
    NoVerdict,
}

/// Plays: 41 events received, the NAT drops the connection, the retry loses its token header,
/// the background task emits 42–44.
pub async fn run(policy: Policy) -> Result<IncidentReport, IncidentError> {
    let seed = format::parse(SEED_SCENARIO, Path::new("scenarios/seed-incident.toml"))?;
    let run = scenario::play(&seed, policy).await;
    if let Some(error) = run.error {
        return Err(error.into());
    }
    let counters = run.counters.unwrap_or_default();
    Ok(IncidentReport {
        policy,
        verdict: run.verdict.ok_or(IncidentError::NoVerdict)?,
        rejected_missing_token: counters
            .resumes_rejected
            .get(&RejectReason::MissingToken)
            .copied()
            .unwrap_or(0),
        applied: counters.applied,
        transcript: run.transcript,
    })
}
