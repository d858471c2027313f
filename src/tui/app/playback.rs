//! A scenario playing in the dashboard: fresh labs for its policies, the script on its own
//! task paced by a [`Gate`] the person holds (space pauses, `s` steps), its progress told as a
//! [`Narration`]. Pausing is shared with help and time travel, which pause the script when one
//! plays and lab time otherwise.

use super::App;
use crate::lab::Lab;
use crate::scenario::narration::Narration;
use crate::scenario::player::{self, Gate, Pace};
use crate::scenario::{self, Scenario};
use crate::tui::DashboardError;
use forkscope_core::Policy;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::task::JoinHandle;

/// Real time between scenario steps while playing in the dashboard.
const STEP_DELAY_MS: u64 = 1_600;

#[derive(Debug)]
pub(super) struct Playback {
    pub gate: Arc<Gate>,
    narration: Arc<Mutex<Narration>>,
    pub task: JoinHandle<()>,
}

impl Playback {
    /// Where the script is, as the narration pane shows it.
    pub fn narration(&self) -> Narration {
        let mut n = self
            .narration
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        n.paused = self.paused();
        n
    }

    pub fn paused(&self) -> bool {
        self.gate.pace() == Pace::Paused
    }

    /// Space: pause a playing script, play a paused one.
    pub fn toggle(&self) {
        self.gate.set(if self.paused() {
            Pace::Playing
        } else {
            Pace::Paused
        });
    }
}

impl App {
    /// Starts a scenario: fresh labs (two side by side for "both"), then the script, paced.
    pub(super) async fn play(&mut self, scenario: Scenario) -> Result<(), DashboardError> {
        let policies = scenario.policy.list();
        let mut refused = Vec::new();
        let playable: Vec<Policy> = policies
            .iter()
            .copied()
            .filter(|p| match scenario.config.validate(*p) {
                Ok(()) => true,
                Err(e) => {
                    refused.push(format!("{p}: {e}"));
                    false
                }
            })
            .collect();
        if playable.is_empty() {
            return Err(DashboardError::ConfigRefused {
                scenario: scenario.name.clone(),
                why: refused.join("; "),
            });
        }
        self.stop_labs().await;
        for policy in &playable {
            let lab = Lab::start(player::lab_options(&scenario, *policy)).await?;
            self.labs.push(Arc::new(lab));
        }
        let narration = Arc::new(Mutex::new(Narration {
            name: scenario.name.clone(),
            teaches: scenario.teaches.replace('\n', " "),
            total: scenario.steps.len(),
            ..Narration::default()
        }));
        let gate = Arc::new(Gate::new(Pace::Playing, STEP_DELAY_MS));
        let task = {
            let labs = self.labs.clone();
            let narration = narration.clone();
            let gate = gate.clone();
            tokio::spawn(async move {
                let refs: Vec<&Lab> = labs.iter().map(|l| l.as_ref()).collect();
                let mut runs: Vec<_> = playable.iter().map(|p| player::new_run(*p)).collect();
                let progress = narration.clone();
                let watched = labs.clone();
                let mut seen: Vec<u64> = watched.iter().map(|l| l.core().history.total()).collect();
                let mut on_step = |index: usize, step: &scenario::format::Step| {
                    let mut n = progress.lock().unwrap_or_else(PoisonError::into_inner);
                    n.stepped(index, step);
                    // What each lab's server decided during the step, in the history's words.
                    n.decided_in(watched.iter().map(AsRef::as_ref), &mut seen);
                };
                let result =
                    player::drive_paced(&refs, &scenario, &mut runs, &mut on_step, Some(&gate))
                        .await;
                for lab in &refs {
                    player::finish(lab, scenario.quiesce_ms).await;
                }
                let mut n = narration.lock().unwrap_or_else(PoisonError::into_inner);
                n.finished = true;
                n.error = result.err().map(|e| e.to_string());
            })
        };
        if !refused.is_empty() {
            let mut n = narration.lock().unwrap_or_else(PoisonError::into_inner);
            n.said = Some((
                0,
                format!("refused before it started — {}", refused.join("; ")),
            ));
        }
        self.playback = Some(Playback {
            gate,
            narration,
            task,
        });
        self.dirty = true;
        Ok(())
    }

    /// Pauses lab time (or the script) if it runs; returns whether it did, so the caller
    /// resumes only what it paused.
    pub(super) fn pause_running(&self) -> bool {
        match &self.playback {
            Some(p) if !p.paused() => {
                p.gate.set(Pace::Paused);
                true
            }
            Some(_) => false,
            None => {
                let running: Vec<_> = self.labs.iter().filter(|l| !l.clock().paused()).collect();
                running.iter().for_each(|l| l.clock().set_paused(true));
                !running.is_empty()
            }
        }
    }

    /// Runs what [`Self::pause_running`] paused.
    pub(super) fn resume_paused(&self) {
        match &self.playback {
            Some(p) => p.gate.set(Pace::Playing),
            None => self.labs.iter().for_each(|l| l.clock().set_paused(false)),
        }
    }

    /// Stops whatever runs, script or lab time (the evidence card's pause at a violation).
    pub(super) fn halt(&self) {
        match &self.playback {
            Some(p) => p.gate.set(Pace::Paused),
            None => self.labs.iter().for_each(|l| l.clock().set_paused(true)),
        }
    }
}
