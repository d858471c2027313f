//! Who gets the next request: the rotation, a one-off override, the sessions and tasks learned
//! (sticky),
//! and the upstreams resting after they did not answer in time.

use super::MAX_SESSIONS;
use std::collections::{HashMap, VecDeque};

#[derive(Debug, Clone, Copy)]
pub(super) struct Slot {
    pub(super) in_rotation: bool,
    pub(super) forwarded: u64,
    /// Its last request got a response head in time (or it has had none yet). One that did not
    /// gets no new request while another in rotation answers, until a probe hears it again.
    pub(super) answering: bool,
}

/// Who gets the next request: the rotation, a one-off override, and the sessions learned.
#[derive(Debug)]
pub(super) struct Routing {
    pub(super) slots: Vec<Slot>,
    /// The upstream the rotation looks at first.
    pub(super) cursor: usize,
    pub(super) next: Option<usize>,
    pub(super) sessions: Sessions,
}

/// The upstreams to try for one request, in order, or that none is in rotation.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Plan {
    Try(Vec<usize>),
    AllOut,
}

impl Routing {
    pub(super) fn new(count: usize) -> Routing {
        Routing {
            slots: vec![
                Slot {
                    in_rotation: true,
                    forwarded: 0,
                    answering: true,
                };
                count
            ],
            cursor: 0,
            next: None,
            sessions: Sessions::default(),
        }
    }

    /// The first choice (an override, else the session's upstream if in rotation, else the
    /// rotation's next), then every other upstream in rotation after it, each once: where a
    /// refused connection goes next. An upstream that stopped answering is passed over while
    /// another in rotation answers (when none does, all are tried: better than refusing).
    pub(super) fn plan(&mut self, session: Option<&str>) -> Plan {
        let count = self.slots.len();
        let any_answering = self.slots.iter().any(|s| s.in_rotation && s.answering);
        let in_rotation = |slots: &[Slot], i: usize| {
            slots[i].in_rotation && (slots[i].answering || !any_answering)
        };
        let sticky = session
            .and_then(|id| self.sessions.upstream(id))
            .filter(|&i| in_rotation(&self.slots, i));
        let first = match self.next.take().or(sticky) {
            Some(i) => i,
            None => {
                let Some(i) = (0..count)
                    .map(|k| (self.cursor + k) % count)
                    .find(|&i| in_rotation(&self.slots, i))
                else {
                    return Plan::AllOut;
                };
                self.cursor = (i + 1) % count;
                i
            }
        };
        let mut order = vec![first];
        order.extend(
            (1..count)
                .map(|k| (first + k) % count)
                .filter(|&i| in_rotation(&self.slots, i)),
        );
        Plan::Try(order)
    }
}

/// Session id → the upstream whose response first carried it, at most [`MAX_SESSIONS`], the
/// oldest forgotten first.
#[derive(Debug, Default)]
pub(super) struct Sessions {
    pub(super) upstream_of: HashMap<String, usize>,
    pub(super) learned: VecDeque<String>,
}

impl Sessions {
    pub(super) fn upstream(&self, id: &str) -> Option<usize> {
        self.upstream_of.get(id).copied()
    }

    pub(super) fn learn(&mut self, id: &str, upstream: usize) {
        if self.upstream_of.contains_key(id) {
            return;
        }
        if self.learned.len() >= MAX_SESSIONS
            && let Some(oldest) = self.learned.pop_front()
        {
            self.upstream_of.remove(&oldest);
        }
        self.upstream_of.insert(id.to_owned(), upstream);
        self.learned.push_back(id.to_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_skips_what_is_out_and_falls_back_in_order() {
        let mut routing = Routing::new(3);
        assert_eq!(routing.plan(None), Plan::Try(vec![0, 1, 2]));
        assert_eq!(routing.plan(None), Plan::Try(vec![1, 2, 0]));
        routing.slots[2].in_rotation = false;
        assert_eq!(routing.plan(None), Plan::Try(vec![0, 1]));
        routing.next = Some(2);
        assert_eq!(routing.plan(None), Plan::Try(vec![2, 0, 1]));
        assert_eq!(routing.plan(None), Plan::Try(vec![1, 0]));
        for slot in &mut routing.slots {
            slot.in_rotation = false;
        }
        assert_eq!(routing.plan(None), Plan::AllOut);
    }

    #[test]
    fn sessions_stay_with_their_first_upstream_while_it_is_in() {
        let mut routing = Routing::new(2);
        routing.sessions.learn("s", 1);
        routing.sessions.learn("s", 0);
        assert_eq!(routing.plan(Some("s")), Plan::Try(vec![1, 0]));
        assert_eq!(routing.plan(Some("s")), Plan::Try(vec![1, 0]));
        routing.slots[1].in_rotation = false;
        assert_eq!(routing.plan(Some("s")), Plan::Try(vec![0]));
    }

    #[test]
    fn the_oldest_session_is_forgotten_past_the_bound() {
        let mut sessions = Sessions::default();
        for n in 0..=MAX_SESSIONS {
            sessions.learn(&n.to_string(), n % 2);
        }
        assert_eq!(sessions.upstream("0"), None);
        assert_eq!(sessions.upstream("1"), Some(1));
        assert_eq!(sessions.upstream_of.len(), MAX_SESSIONS);
    }
}
