//! The HTTP exchanges the dashboard lists: what the lab's client sent and got back, with only
//! the headers worth showing. A view type: the wire reports every exchange through
//! [`crate::wire::client::ExchangeLog`]; this file decides what is kept and shown.

use crate::wire::headers;
use forkscope_core::LabTime;
use reqwest::header::HeaderMap;
use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

/// How many exchanges the lab keeps for display.
pub const EXCHANGES_KEPT: usize = 64;

/// The headers a person wants to see in an exchange list.
pub const SHOWN_HEADERS: [&str; 6] = [
    headers::SESSION_ID,
    headers::LAST_EVENT_ID,
    headers::RESUMPTION_TOKEN,
    headers::STREAM_ID,
    headers::STREAM_RESUMED,
    "retry-after",
];

/// One HTTP exchange, as the dashboard shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exchange {
    pub at: LabTime,
    pub method: &'static str,
    pub what: String,
    pub status: u16,
    /// The headers that matter, `name: value`, in the order sent/received.
    pub headers: Vec<(String, String)>,
}

/// The last [`EXCHANGES_KEPT`] exchanges of one lab.
#[derive(Debug, Default)]
pub struct Exchanges(Mutex<VecDeque<Exchange>>);

impl Exchanges {
    pub fn list(&self) -> Vec<Exchange> {
        self.lock().iter().cloned().collect()
    }

    /// How many were recorded and when the last one was: changes whenever the list does.
    pub fn fingerprint(&self) -> (usize, Option<LabTime>) {
        let list = self.lock();
        (list.len(), list.back().map(|e| e.at))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Exchange>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl crate::wire::client::ExchangeLog for Exchanges {
    fn exchange(
        &self,
        at: LabTime,
        method: &'static str,
        what: String,
        status: u16,
        sent: &[(&str, String)],
        received: &HeaderMap,
    ) {
        let mut shown: Vec<(String, String)> = sent
            .iter()
            .map(|(n, v)| (format!("→ {n}"), v.clone()))
            .collect();
        for name in SHOWN_HEADERS {
            if let Some(v) = received.get(name).and_then(|v| v.to_str().ok()) {
                shown.push((format!("← {name}"), v.to_owned()));
            }
        }
        let mut list = self.lock();
        if list.len() == EXCHANGES_KEPT {
            list.pop_front();
        }
        list.push_back(Exchange {
            at,
            method,
            what,
            status,
            headers: shown,
        });
    }
}
