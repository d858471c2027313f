//! The seed incident over real loopback HTTP: a lab (server, proxy, client) driven through the
//! write-up's steps with actions, synchronised on observed state.

use crate::lab::{Action, Lab, LabError, LabOptions};
use forkscope_core::client::Phase;
use forkscope_core::{Policy, RejectReason, Verdict};
use std::time::Duration;

/// A guard against a wedged run, never a measurement.
const STEP_LIMIT: Duration = Duration::from_secs(20);

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
    #[error(transparent)]
    Lab(#[from] LabError),
    #[error("the run stalled: {0}")]
    Stalled(String),
}

/// Plays: 41 events received, the NAT drops the connection, the retry loses its token header,
/// the background task emits 42–44.
pub async fn run(policy: Policy) -> Result<IncidentReport, IncidentError> {
    let options = LabOptions {
        policy,
        background_every_ms: None,
        ..LabOptions::default()
    };
    let lab = Lab::start(options).await?;
    let result = play(&lab, policy).await;
    lab.stop().await;
    result
}

async fn play(lab: &Lab, policy: Policy) -> Result<IncidentReport, IncidentError> {
    let mut transcript = Vec::new();
    let stalled = IncidentError::Stalled;
    lab.wait_for(STEP_LIMIT, |core| {
        core.client.phase() == Phase::Connected && core.client.cursor().is_some()
    })
    .await
    .map_err(stalled)?;
    transcript.push("client initialized and holds its standalone stream (primed)".to_owned());
    for _ in 0..41 {
        lab.apply(Action::EmitBackground);
    }
    lab.wait_for(STEP_LIMIT, |core| core.client.applied() >= 41)
        .await
        .map_err(stalled)?;
    let cursor = lab.core().client.cursor().unwrap_or("-").to_owned();
    transcript.push(format!(
        "41 background events applied; Last-Event-ID {cursor}"
    ));
    lab.apply(Action::StripToken);
    lab.apply(Action::DropConnection);
    transcript
        .push("NAT drop: the proxy cut the client side; the server's side stays open".to_owned());
    // The reconnect lands as a new stream (naive) or a typed rejection (fenced).
    lab.wait_for(STEP_LIMIT, |core| {
        let counters = core.history.checker().counters();
        counters.new_streams_silent >= 2 || counters.rejected_total() >= 1
    })
    .await
    .map_err(stalled)?;
    // Whatever it was, the client ends up holding a stream again.
    lab.wait_for(STEP_LIMIT, |core| {
        core.client.phase() == Phase::Connected && core.client.cursor().is_some()
    })
    .await
    .map_err(stalled)?;
    let applied_before = lab.core().client.applied();
    let holds = match lab.core().client.bound_stream() {
        Some(stream) => format!("stream {stream}, named by the server's identity echo"),
        None => "a stream nothing names (no identity echo): it assumes continuity".to_owned(),
    };
    transcript.push(format!(
        "client reconnected without its token; it now holds {holds}"
    ));
    for _ in 0..3 {
        lab.apply(Action::EmitBackground);
    }
    let emits_target = lab.core().history.checker().counters().emits;
    // Quiescence: all emits recorded, and the client has applied whatever reached it.
    lab.wait_for(STEP_LIMIT, |core| {
        core.history.checker().counters().emits >= emits_target
    })
    .await
    .map_err(stalled)?;
    if policy == Policy::Fenced {
        lab.wait_for(STEP_LIMIT, |core| {
            core.client.applied() >= applied_before + 3
        })
        .await
        .map_err(stalled)?;
    } else {
        // The backlog replay of the new stream is what the client applies; wait for all of it.
        lab.wait_for(STEP_LIMIT, |core| core.client.applied() >= 82)
            .await
            .map_err(stalled)?;
    }
    transcript.push("background task emitted 42–44".to_owned());
    let core = lab.core();
    let counters = core.history.checker().counters();
    Ok(IncidentReport {
        policy,
        verdict: core.history.verdict(),
        rejected_missing_token: counters
            .resumes_rejected
            .get(&RejectReason::MissingToken)
            .copied()
            .unwrap_or(0),
        applied: core.client.applied(),
        transcript,
    })
}
