//! The labs behind the dashboard: starting and replacing them (compare mode, a restart, new
//! knobs), what each had reached for the journal, "save what I did" (`w`), and the evidence
//! card pinned from what they showed.

use super::App;
use crate::lab::replicas::ReplicaState;
use crate::lab::{Action, Lab, LabOptions, Outcome, Refusal, ReplicaSetup, Snapshot};
use crate::scenario::journal::{self, Journal, Observed};
use crate::tui::keys::ReplicaKey;
use crate::tui::panes;
use crate::tui::panes::evidence::{self, EvidenceView};
use forkscope_core::revision::Protocols;
use forkscope_core::{Policy, ReplicaId};
use std::sync::Arc;

/// The evidence card, once something worth pinning happened.
#[derive(Debug, Default)]
pub(super) struct Evidence {
    pub card: Option<EvidenceView>,
    /// Enter took it down: it stays down until the labs are replaced.
    pub dismissed: bool,
    /// Pause the labs at the first violation, with the card up (for presenters).
    pub pause_at_violation: bool,
}

impl Evidence {
    /// The card to draw, unless dismissed.
    pub fn shown(&self) -> Option<&EvidenceView> {
        self.card.as_ref().filter(|_| !self.dismissed)
    }
}

impl App {
    /// What each lab had reached, for the journal.
    pub(super) fn observe(&self) -> Vec<Observed> {
        self.labs
            .iter()
            .map(|lab| {
                let core = lab.core();
                Observed {
                    at_ms: lab.clock().now().as_millis(),
                    applied: core.client.applied(),
                    connected: core.client.holds_stream(),
                    policy: core.server.policy(),
                }
            })
            .collect()
    }

    /// Pins the first violation (or, until one happens, the first typed rejection) in the
    /// evidence card; with `pause_at_violation`, pauses the labs on a violation.
    pub(super) fn pin_evidence(&mut self, panels: &[Snapshot]) {
        if self.evidence.dismissed {
            return;
        }
        // A violation outranks a rejection; among violations the fork leads (it explains
        // the duplicates that may reach the checker a moment before it).
        let rank = |e: &EvidenceView| (e.violation, std::cmp::Reverse(e.kind));
        let found = panels.iter().filter_map(evidence::of).max_by_key(rank);
        let Some(mut found) = found else { return };
        if let Some(pinned) = &self.evidence.card
            && pinned.violation
            && rank(&found) <= rank(pinned)
        {
            return;
        }
        if found.violation && self.evidence.pause_at_violation {
            self.halt();
            found.paused = true;
        }
        if self.evidence.card.as_ref() != Some(&found) {
            self.evidence.card = Some(found);
            self.dirty = true;
        }
    }

    /// Writes what was done since the labs started as a scenario file in the working
    /// directory (never over an existing file), with the labs' verdicts as its expectations.
    pub(super) fn save_scenario(&mut self) {
        if self.playback.is_some() {
            return self.say("a scenario is playing: its file already replays it");
        }
        let saved = self.observe();
        let outcomes: Vec<journal::Outcome> = self
            .labs
            .iter()
            .map(|lab| {
                let core = lab.core();
                journal::Outcome {
                    policy: lab.options().policy,
                    verdict: core.history.verdict(),
                    counters: core.history.checker().counters().clone(),
                    tool_results: core.client.tool_results(),
                }
            })
            .collect();
        let at = saved.first().map_or(0, |o| o.at_ms);
        let name = format!(
            "Saved from the dashboard ({} actions, {})",
            self.journal.actions(),
            panes::seconds(at)
        );
        let text = match self.journal.to_toml(&saved, &outcomes, &name) {
            Ok(text) => text,
            Err(e) => return self.say(format!("could not save the scenario: {e}")),
        };
        match crate::new_file::write_numbered(&self.save_dir, "forkscope-saved", &text) {
            Ok(path) => self.say(format!(
                "saved {} as {path} — forkscope run {path} replays it",
                match self.journal.actions() {
                    1 => "1 action".to_owned(),
                    n => format!("{n} actions"),
                },
                path = path.display()
            )),
            Err(e) => self.say(format!("could not save the scenario: {e}")),
        }
    }

    pub(super) async fn toggle_compare(&mut self) {
        if self.labs.len() > 1 {
            let back = self.single_policy;
            self.replace_labs(&[back], self.options.clone()).await;
            self.say(format!(
                "compare mode off: a fresh {back} lab (the labs were stopped; m compares again)"
            ));
        } else {
            if let Some(lab) = self.labs.first() {
                self.single_policy = lab.core().server.policy();
            }
            if self.options.replicas.is_some() && !runs_on_replicas(&self.compare) {
                return self
                    .say("replicas run naive or fenced: L returns to one server to compare SDKs");
            }
            let compare = self.compare.clone();
            self.replace_labs(&compare, self.options.clone()).await;
            self.say(format!(
                "compare {}{}: fresh labs, every key to each",
                names(&compare),
                if compare.len() == 3 {
                    " · o picks the middle one's policy"
                } else {
                    ""
                }
            ));
        }
    }

    /// `n`: naive ⇄ fenced, the mission's toggle (from an SDK's policy: fenced). The SDKs'
    /// policies are `o`'s. In compare mode each lab keeps its policy (`o` picks the middle's).
    pub(super) async fn next_policy(&mut self) {
        match self.labs.as_slice() {
            [] => {}
            [one] => {
                let next = one.policy().toggled();
                self.choose_policy(next).await;
            }
            _ => self.say(format!(
                "compare mode keeps each lab's policy ({}): o picks the middle one's, m leaves it",
                names(&self.labs.iter().map(|l| l.policy()).collect::<Vec<_>>())
            )),
        }
    }

    /// A policy in force from now on, in a fresh lab: nothing judged under one policy is shown
    /// under another's header (its verdict, its evidence, its lanes). In compare mode of three,
    /// the middle lab's.
    pub(super) async fn choose_policy(&mut self, policy: Policy) {
        if self.playback.is_some() {
            return self.say("a scenario plays under its own policies: R returns to a live lab");
        }
        if self.options.replicas.is_some() && !runs_on_replicas(&[policy]) {
            return self.say("replicas run naive or fenced: L returns to one server");
        }
        let policies: Vec<Policy> = self.labs.iter().map(|l| l.policy()).collect();
        match policies.as_slice() {
            [_] => {
                self.replace_labs(&[policy], self.options.clone()).await;
                self.single_policy = policy;
                self.say(format!(
                    "{} · a fresh lab",
                    policy_words(policy, self.options.protocols)
                ));
            }
            [left, _, right] if policy == *left || policy == *right => {
                self.say(format!(
                    "{policy} is shown already: pick another for the middle"
                ));
            }
            [left, _, right] => {
                let compare = vec![*left, policy, *right];
                self.replace_labs(&compare, self.options.clone()).await;
                self.compare = compare;
                self.say(format!(
                    "middle lab: {}",
                    policy_words(policy, self.options.protocols)
                ));
            }
            many => self.say(format!(
                "compare mode runs {} (m leaves it); forkscope --compare naive,rmcp,fenced puts \
                 an SDK in the middle, where o picks its policy",
                names(many)
            )),
        }
    }

    pub(super) async fn stop_labs(&mut self) {
        // New labs, new evidence, a new run to travel through.
        self.evidence.card = None;
        self.evidence.dismissed = false;
        self.travel.restart(0);
        self.selected = None;
        self.live.clear();
        self.seen = None;
        self.dirty = true;
        if let Some(playback) = self.playback.take() {
            playback.task.abort();
            let _ = playback.task.await;
        }
        for lab in self.labs.drain(..) {
            // The playback task held the other references; it is gone now.
            if let Ok(lab) = Arc::try_unwrap(lab) {
                lab.stop().await;
            }
        }
    }

    pub(super) async fn replace_labs(&mut self, policies: &[Policy], options: LabOptions) {
        self.stop_labs().await;
        self.journal = Journal::new(&options, policies);
        for policy in policies {
            match Lab::start(LabOptions {
                policy: *policy,
                ..options.clone()
            })
            .await
            {
                Ok(lab) => self.labs.push(Arc::new(lab)),
                Err(e) => tracing::error!(error = %e, "could not start a lab"),
            }
        }
        if self.labs.is_empty() {
            self.quit = true;
        }
    }

    /// A fault or control key: to every lab (journalled), or to the script when one plays.
    pub(super) async fn lab_action(&mut self, action: Action) {
        // The labs live in the present: a fault key leaves time travel first.
        if self.travel.at.is_some() {
            self.go_live();
            return self.say("back to live (the labs live in the present); press again to act");
        }
        match (action, &self.playback) {
            // While a scenario plays, space and s pace the script: its clock is scripted.
            (Action::TogglePause, Some(p)) => return p.toggle(),
            (Action::Step, Some(p)) => return p.gate.set(crate::scenario::player::Pace::StepOnce),
            (Action::ToggleNaive | Action::SetPolicy(_), _) if self.labs.len() > 1 => {
                return self.say("compare mode keeps each lab's policy; m leaves it");
            }
            _ => {}
        }
        let before = self.labs.first().map(|l| l.policy());
        if self.playback.is_none() {
            let observed = self.observe();
            self.journal.record(action, observed);
        }
        let mut restart = false;
        let mut refused = None;
        for lab in &self.labs {
            match lab.apply(action) {
                Outcome::RestartRequested => restart = true,
                Outcome::Refused(e) => refused = Some(e),
                Outcome::Done => {}
            }
        }
        if let Some(e) = refused {
            // The way to a lab of replicas first: a narrow status line cuts the end.
            let way = if e == Refusal::NotReplicas {
                "L runs replicas · "
            } else {
                ""
            };
            self.say(format!("{way}not done: {e}"));
        } else if restart {
            // The policy in force now, not the launch one: a presenter who pressed `n` and
            // then `R` expects the lab they were looking at, fresh.
            let policies: Vec<Policy> = self.labs.iter().map(|l| l.policy()).collect();
            self.replace_labs(&policies, self.options.clone()).await;
            match (action, policies.first()) {
                // Replicas take a new policy by starting again under it.
                (Action::SetPolicy(_) | Action::ToggleNaive, Some(now)) => {
                    self.say(format!(
                        "{} · the replicas started again",
                        policy_words(*now, self.options.protocols)
                    ));
                }
                _ => self.say("lab restarted"),
            }
        } else if let Some(words) = self.replica_done(action) {
            self.say(words);
        } else if let Action::SetPolicy(policy) = action {
            self.say(policy_words(policy, self.options.protocols));
        } else {
            self.say(
                before.map_or_else(|| action.describe().to_owned(), |p| action.describe_from(p)),
            );
        }
    }

    /// `L`: the labs start again as a lab of replicas on the in-memory store (or the setup
    /// they were launched with), or back as one server.
    pub(super) async fn toggle_replicas(&mut self) {
        let setup = match self.options.replicas.take() {
            Some(setup) => {
                self.parked_replicas = Some(setup);
                None
            }
            None => Some(self.parked_replicas.take().unwrap_or_default()),
        };
        let policies: Vec<Policy> = self.labs.iter().map(|l| l.policy()).collect();
        if setup.is_some() && !runs_on_replicas(&policies) {
            self.parked_replicas = setup;
            return self.say(format!(
                "replicas run naive or fenced, not {}: n or m first",
                names(&policies)
            ));
        }
        self.options.replicas = setup.clone();
        if setup.is_some() {
            // A lab of replicas speaks both revisions.
            self.options.protocols = forkscope_core::revision::Protocols::Both;
        }
        self.replace_labs(&policies, self.options.clone()).await;
        self.replica = crate::tui::panes::replicas::first();
        self.say(match setup {
            Some(ReplicaSetup { count, .. }) => format!(
                "{count} replicas behind a balancer, one store · A–D choose · K kills · N routes · \
                 L: one server"
            ),
            None => "a lab of one server (L runs replicas again)".to_owned(),
        });
    }

    /// Restarts the labs on the next revision set (`Y`): both, 2026-07-28 alone, 2025-11-25
    /// alone. A lab of replicas speaks both: it is left as it is.
    pub(super) async fn next_revision(&mut self) {
        use forkscope_core::revision::Protocols;
        if self.options.replicas.is_some() {
            return self.say("a lab of replicas speaks both revisions: L for one server first");
        }
        let next = match self.options.protocols {
            Protocols::Both => Protocols::Modern,
            Protocols::Modern => Protocols::Legacy,
            Protocols::Legacy => Protocols::Both,
        };
        self.options.protocols = next;
        let policies: Vec<Policy> = self.labs.iter().map(|l| l.policy()).collect();
        self.replace_labs(&policies, self.options.clone()).await;
        self.say(match next {
            Protocols::Both => {
                "both revisions: the 2025-11-25 client and X's 2026-07-28 tasks side by side · Y: 2026-07-28 alone"
            }
            Protocols::Modern => {
                "2026-07-28 alone: no session, no stream; X calls a task, a loses its answer · Y: 2025-11-25 alone"
            }
            Protocols::Legacy => "2025-11-25 alone: X is refused · Y: both",
        });
    }

    /// The replicas of the first lab as its last snapshot showed them.
    fn replicas_shown(&self) -> Option<&crate::lab::ReplicasView> {
        self.live.first().and_then(|s| s.replicas.as_ref())
    }

    /// `A`–`D`: the replica the replica keys act on.
    pub(super) fn pick_replica(&mut self, index: u8) {
        let Some(view) = self.replicas_shown() else {
            return self.say(format!(
                "L runs replicas · not done: {}",
                Refusal::NotReplicas
            ));
        };
        let count = view.replicas.len();
        match ReplicaId::new(index).filter(|r| r.index() < count) {
            Some(r) => {
                self.replica = r;
                self.say(format!(
                    "replica {r} chosen: K kills it, I cuts it off, N routes to it, E emits on it"
                ));
            }
            None => self.say(format!(
                "this lab runs {count} replicas, A to {}",
                ReplicaId::new(u8::try_from(count).unwrap_or(1).saturating_sub(1))
                    .map_or_else(String::new, |r| r.to_string())
            )),
        }
    }

    /// The action a replica key means for the chosen replica: a toggle reads its state.
    pub(super) fn replica_action(&self, key: ReplicaKey) -> Action {
        let r = self.replica;
        let state = self
            .replicas_shown()
            .and_then(|v| v.replicas.iter().find(|x| x.id == r))
            .map(|x| x.state);
        match key {
            ReplicaKey::KillOrStart if state == Some(ReplicaState::Killed) => {
                Action::ReviveReplica(r)
            }
            ReplicaKey::KillOrStart => Action::KillReplica(r),
            ReplicaKey::IsolateOrHeal if state == Some(ReplicaState::Partitioned) => {
                Action::Heal(r)
            }
            ReplicaKey::IsolateOrHeal => Action::Partition(r),
            ReplicaKey::RouteNext => Action::RouteNext(r),
            ReplicaKey::Emit => Action::EmitOn(r),
        }
    }

    /// What a replica action did, in words naming the replica.
    fn replica_done(&self, action: Action) -> Option<String> {
        Some(match action {
            Action::KillReplica(r) => format!(
                "replica {r} killed: stopped at once, its connections half-open (K starts it)"
            ),
            Action::ReviveReplica(r) => {
                format!("replica {r} starting again, with nothing in memory")
            }
            Action::Partition(r) => format!(
                "replica {r} cut from the store: it serves on, its store calls fail (I heals)"
            ),
            Action::Heal(r) => format!("replica {r} reaches the store again"),
            Action::ToggleRouting => {
                let routing = self.labs.first().and_then(|l| l.replicas())?.routing();
                format!("routing: {}", routing.as_str())
            }
            Action::RouteNext(r) => {
                format!("the balancer sends the next request to replica {r} (c reconnects now)")
            }
            Action::EmitOn(r) => format!("replica {r}'s emitters emitted once"),
            Action::RestartStore => "the store restarted: this lab's sessions are gone".to_owned(),
            Action::SnapshotStore => "the store's snapshot is taken".to_owned(),
            Action::RestoreStore => {
                "the store is restored from its snapshot: what was written since is forgotten"
                    .to_owned()
            }
            _ => return None,
        })
    }
}

/// `naive | rmcp | fenced`: the labs side by side, left to right.
fn names(policies: &[Policy]) -> String {
    let names: Vec<&str> = policies.iter().map(|p| p.name()).collect();
    names.join(" | ")
}

/// The status line once `policy` is in force: its name first (a narrow line keeps it), and for
/// an SDK what goes wrong on a resume — or, in a lab of 2026-07-28 alone, what it does with
/// tasks.
pub(super) fn policy_words(policy: Policy, protocols: Protocols) -> String {
    if protocols == Protocols::Modern {
        let quirks = forkscope_core::tasks::sdk::ModernQuirks::of(policy);
        return match quirks.cites.first() {
            Some((what, _)) => format!("policy {policy}: {what}"),
            None if quirks.honours_keys => format!(
                "policy {policy}: the five guarantees hold (a re-issue finds its task by key)"
            ),
            None => {
                format!("policy {policy}: no key is read: a re-issued call makes a second task")
            }
        };
    }
    match forkscope_core::resume::sdk::quirks(policy) {
        Some(q) => format!("policy {policy}: {} ({})", q.summary, q.sdk),
        None if policy.fences() => format!("policy {policy}: the five conditions hold"),
        None => format!("policy {policy}: the seed incident (reproduces the fork)"),
    }
}

/// Whether every one of `policies` runs on replicas: the core's rule ([`ReplicaPolicy`]).
///
/// [`ReplicaPolicy`]: forkscope_core::replica::ReplicaPolicy
fn runs_on_replicas(policies: &[Policy]) -> bool {
    policies
        .iter()
        .all(|p| forkscope_core::replica::ReplicaPolicy::try_from(*p).is_ok())
}
