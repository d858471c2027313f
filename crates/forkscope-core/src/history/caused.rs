//! What the checker concluded from one history entry, kept on the entry: the anomalies it
//! caused — which kind, on which stream, against which earlier delivery.
//!
//! A fork across replicas is counted once per orphan and replica, but tags every send it
//! carries, so each lands as `╳` where it happened.
//!
//! The views draw and explain these tags and nothing else, so a fork or a duplicate is judged
//! in one place (the checker) and the lanes can never tell a different story than the verdict.

use super::anomaly::{Anomaly, AnomalyKinds};
use serde::Serialize;
use std::sync::Arc;

/// The anomalies one entry caused, in the order the checker reported them. Almost every entry
/// caused none, and then this holds nothing on the heap; one that did shares its list when
/// the entry is copied (the dashboard keeps a copy of the whole run).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Caused(Option<Arc<[Anomaly]>>);

impl Caused {
    pub const NOTHING: Caused = Caused(None);

    pub(crate) fn new(anomalies: Vec<Anomaly>) -> Caused {
        if anomalies.is_empty() {
            Caused::NOTHING
        } else {
            Caused(Some(anomalies.into()))
        }
    }

    pub fn anomalies(&self) -> &[Anomaly] {
        self.0.as_deref().unwrap_or_default()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    pub fn kinds(&self) -> AnomalyKinds {
        self.anomalies().iter().map(Anomaly::kind).collect()
    }
}
