//! The single-server lab as a [`Model`] of the search: a whole [`Sim`] — the core's own
//! server, client and checker — stepped by [`Step`], judged by its checker.

use super::reached::{Marks, Reached};
use super::search::{Judged, Model};
use super::{Bounds, Step, in_alphabet, streams_minted, take};
use crate::policy::Policy;
use crate::sim::Sim;

impl Model for Sim {
    type Step = Step;
    type Rules = Bounds;
    type Marks = Marks;

    fn alphabet(bounds: &Bounds) -> Vec<Step> {
        Step::ALL
            .into_iter()
            .filter(|&step| in_alphabet(step, bounds))
            .collect()
    }

    fn enabled(&self, step: Step, _: &Bounds) -> bool {
        step.enabled(self)
    }

    fn take(&mut self, step: Step, bounds: &Bounds) {
        take(step, self, bounds.delivery);
    }

    fn fingerprint(&self) -> u128 {
        Sim::fingerprint(self)
    }

    fn judge(&self, bounds: &Bounds) -> Judged {
        if let Some(anomaly) = self.history().checker().first_wanted(bounds.target) {
            return Judged::Broken {
                anomaly: Box::new(anomaly.clone()),
                ends_run: false,
            };
        }
        // Exactly once, or told: where nothing more happens on its own, the run may end, and
        // what is still owed is judged as `run` judges a quiet lab.
        if at_rest(self) {
            let mut ended = self.clone();
            ended.end_run();
            let settled = ended.history().checker().first_wanted(bounds.target);
            if let Some(anomaly) = settled {
                return Judged::Broken {
                    anomaly: Box::new(anomaly.clone()),
                    ends_run: true,
                };
            }
        }
        if streams_minted(self) > bounds.streams {
            Judged::Pruned
        } else {
            Judged::Holds
        }
    }

    fn policy(&self) -> Policy {
        self.server().policy()
    }

    fn marks(&self) -> Marks {
        Marks::of(self)
    }

    fn reached(before: &Marks, after: &Marks) -> Reached {
        Reached::between(before, after)
    }
}

/// Nothing more happens on its own: no event on the wire, no timer due (a call's next step, a
/// client's retry, a grace window). A run may end here; `run` ends a quiet lab the same way.
fn at_rest(sim: &Sim) -> bool {
    sim.in_flight() == 0 && sim.call_in_flight() == 0 && sim.next_deadline().is_none()
}
