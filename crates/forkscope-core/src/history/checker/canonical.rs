//! The checker's canonical form: what later judgements read, for the explorer's dedupe.

use super::Checker;
use crate::ids::SessionId;

impl Checker {
    /// Canonical form ([`crate::canon`]): what later judgements read. The counters
    /// and anomalies are left out (an explored state has none), and so is what it knows about
    /// sessions the server no longer holds: none of their events can reach the client again.
    pub(crate) fn canonical(&self, c: &mut crate::canon::Canon) {
        let known = |c: &crate::canon::Canon, s: &SessionId| c.known(*s);
        let streams: Vec<_> = self
            .streams
            .iter()
            .filter(|((s, _), _)| known(c, s))
            .collect();
        c.unordered(streams, |c, ((session, stream), track)| {
            c.session(*session);
            c.stream(*stream);
            c.tag(track.kind as u8);
            c.tag(track.ids as u8);
            c.flag(track.accepting);
            c.number(track.high_water);
            c.number(track.seen);
            c.flag(track.flagged_new);
            c.number(track.pending.len() as u64);
            for (seq, key) in &track.pending {
                c.number(*seq);
                c.key(key);
            }
            // What the client still has coming of its call (the delivered keys only tell a
            // reused id apart, which one server never writes).
            match track.call {
                Some(call) => {
                    c.tag(1);
                    c.number(call.steps);
                    c.flag(call.end_emitted);
                    c.flag(call.settled);
                    c.flag(call.counted);
                    // The id names the call only while the client may still give it up.
                    let named = call.request.filter(|_| !call.settled);
                    c.number(named.map_or(0, |r| r.saturating_add(1)));
                }
                None => c.tag(0),
            }
        });
        let bound: Vec<_> = self.bound.iter().filter(|(s, _)| known(c, s)).collect();
        c.unordered(bound, |c, (session, stream)| {
            c.session(*session);
            c.stream(*stream);
        });
        let attached: Vec<_> = self
            .attached_on
            .iter()
            .filter(|((s, _), _)| known(c, s))
            .collect();
        c.unordered(attached, |c, ((session, stream), by)| {
            c.session(*session);
            c.stream(*stream);
            c.number(by.replica.index() as u64);
            c.number(by.epoch.map_or(0, |e| e + 1));
        });
        let across: Vec<_> = self
            .forked_across
            .iter()
            .filter(|(s, _, _)| known(c, s))
            .collect();
        c.unordered(across, |c, (session, stream, replica)| {
            c.session(*session);
            c.stream(*stream);
            c.number(replica.index() as u64);
        });
        match self.cursor {
            Some((session, event)) if known(c, &session) => {
                c.tag(1);
                c.session(session);
                c.stream(event.stream);
                c.number(event.seq);
            }
            Some(_) => c.tag(2),
            None => c.tag(0),
        }
        let applied: Vec<_> = self.applied.keys().filter(|k| c.key_known(k)).collect();
        c.unordered(applied, |c, key| c.key(key));
        let forked: Vec<_> = self.forked.iter().filter(|(s, _)| known(c, s)).collect();
        c.unordered(forked, |c, (session, stream)| {
            c.session(*session);
            c.stream(*stream);
        });
        let drifted: Vec<_> = self.drifted.iter().filter(|s| known(c, s)).collect();
        c.unordered(drifted, |c, session| c.session(*session));
        let counters: Vec<_> = self
            .session_counters
            .iter()
            .filter(|(s, _)| known(c, s))
            .collect();
        c.unordered(counters, |c, (session, n)| {
            c.session(*session);
            c.number(*n);
        });
        let witnessed: Vec<_> = self.witnessed.iter().filter(|s| known(c, s)).collect();
        c.unordered(witnessed, |c, session| c.session(*session));
        // Whether the client was told, not how: every way reads undelivered rather than lost
        // from here on (how, and the run of refusals that says it, are words in a verdict).
        let told: Vec<_> = self.told.keys().filter(|s| known(c, s)).collect();
        c.unordered(told, |c, session| c.session(*session));
        let unheard: Vec<_> = self
            .given_up_unheard
            .iter()
            .filter(|(s, calls)| known(c, s) && !calls.is_empty())
            .collect();
        c.unordered(unheard, |c, (session, calls)| {
            c.session(*session);
            c.unordered(calls.iter(), |c, (request, _)| c.number(*request));
        });
        match self.client_session {
            Some(session) if known(c, &session) => {
                c.tag(1);
                c.session(session);
            }
            Some(_) => c.tag(2),
            None => c.tag(0),
        }
    }
}
