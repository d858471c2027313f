//! Which policy is in force in a lab, and switching it: one server changes policy in place
//! (fencing what naive left emitting), a lab of replicas asks to be started again.

use super::{Lab, Outcome, Refusal};

impl Lab {
    /// The policy in force now (the dashboard's `n` switches it).
    pub fn policy(&self) -> forkscope_core::Policy {
        self.core().server.policy()
    }

    /// Puts `policy` in force. Replicas run the policy they started with: the lab asks to be
    /// started again under the new one (naive or fenced: replicas model no SDK).
    pub(super) fn switch_policy(&self, policy: forkscope_core::Policy) -> Outcome {
        self.switch_policies(&[policy])
    }

    /// Puts each of `policies` in force in turn under one hold of the core's lock, so no
    /// request is served between them: naive and back leaves naive no window to fork in.
    pub fn switch_policies(&self, policies: &[forkscope_core::Policy]) -> Outcome {
        if self.replicas.is_some() {
            if let Some(sdk) = policies
                .iter()
                .find(|p| forkscope_core::replica::ReplicaPolicy::try_from(**p).is_err())
            {
                return Outcome::Refused(Refusal::SdkOnReplicas(*sdk));
            }
        }
        let mut guard = self.shared.lock();
        let core = &mut *guard;
        let now = self.clock.now();
        for &policy in policies {
            match core.server.set_policy(now, policy, &mut core.history) {
                Ok(fenced) => {
                    core.client.set_policy(policy);
                    for (session, stream) in fenced {
                        tracing::info!(session = %session.short(), %stream, "fenced: the naive orphan stops receiving");
                        core.io.close_stream(session, stream);
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "policy not changed");
                    return Outcome::Refused(e.into());
                }
            }
        }
        if self.replicas.is_some() {
            return Outcome::RestartRequested;
        }
        Outcome::Done
    }
}
