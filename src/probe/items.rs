//! Reduces an SSE event's JSON-RPC message to the [`Item`] the judge reasons about.
//!
//! Progress notifications are numbered by `progress`; a response by its request id. Any other
//! notification is numbered by the first integer in its params (or a number ending a string,
//! as in `urn:…:7`): that is how the probe tells one emitted event from the next on a server
//! it knows nothing about. The text around the number names the event's channel.

use forkscope_core::probe::Item;
use serde_json::Value;

pub fn item_of(data: &str) -> Item {
    if data.trim().is_empty() {
        return Item::Priming;
    }
    let Ok(message) = serde_json::from_str::<Value>(data) else {
        return Item::Other {
            text: data.chars().take(60).collect(),
        };
    };
    if let Some(method) = message.get("method").and_then(Value::as_str) {
        let params = message.get("params").unwrap_or(&Value::Null);
        if method == "notifications/progress" {
            if let (Some(token), Some(n)) = (
                params.get("progressToken"),
                params.get("progress").and_then(progress),
            ) {
                return Item::Progress {
                    token: token.to_string(),
                    n,
                };
            }
        }
        if let Some((path, n)) = first_number(params, String::new()) {
            return Item::Numbered {
                channel: format!("{method} {path}"),
                n,
            };
        }
        return Item::Other {
            text: method.to_string(),
        };
    }
    if let Some(id) = message.get("id") {
        if message.get("result").is_some() || message.get("error").is_some() {
            return Item::Response {
                request: id.to_string(),
            };
        }
    }
    Item::Other {
        text: data.chars().take(60).collect(),
    }
}

/// A progress value as a position: a whole value as itself (`3`, `3.0`), a fraction (`0.25`,
/// which the transport allows) scaled by a million — positions that still order, whose steps
/// are not 1, so the judge checks their order but not for gaps.
fn progress(v: &Value) -> Option<u64> {
    whole(v).or_else(|| {
        v.as_f64()
            .filter(|f| f.is_finite() && *f >= 0.0 && *f < 9.0e9)
            .map(|f| (f * 1_000_000.0).round() as u64)
    })
}

/// A JSON number that is a whole, non-negative value (progress may be sent as `3.0`).
fn whole(v: &Value) -> Option<u64> {
    v.as_u64().or_else(|| {
        v.as_f64()
            .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 9.0e15)
            .map(|f| f as u64)
    })
}

fn first_number(v: &Value, path: String) -> Option<(String, u64)> {
    match v {
        Value::Number(_) => whole(v).map(|n| (path, n)),
        Value::String(s) => {
            let digits = s.len() - s.trim_end_matches(|c: char| c.is_ascii_digit()).len();
            if digits == 0 || digits > 18 {
                return None;
            }
            let (head, tail) = s.split_at(s.len() - digits);
            tail.parse().ok().map(|n| (format!("{path} {head}"), n))
        }
        Value::Object(map) => map
            .iter()
            .find_map(|(k, v)| first_number(v, format!("{path}/{k}"))),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, v)| first_number(v, format!("{path}/{i}"))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_become_items() {
        assert_eq!(item_of(""), Item::Priming);
        assert_eq!(
            item_of(
                r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":3.0,"total":5}}"#
            ),
            Item::Progress {
                token: "\"t\"".into(),
                n: 3
            }
        );
        assert_eq!(
            item_of(r#"{"jsonrpc":"2.0","id":4,"result":{}}"#),
            Item::Response {
                request: "4".into()
            }
        );
        assert_eq!(
            item_of(
                r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":{"background":12}}}"#
            ),
            Item::Numbered {
                channel: "notifications/message /data/background".into(),
                n: 12
            }
        );
        assert_eq!(
            item_of(
                r#"{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"urn:forkscope-probe:ab:7"}}"#
            ),
            Item::Numbered {
                channel: "notifications/resources/updated /uri urn:forkscope-probe:ab:".into(),
                n: 7
            }
        );
        assert!(matches!(item_of("not json"), Item::Other { .. }));
        // Fractional progress stays progress, ordered.
        assert_eq!(
            item_of(
                r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t7","progress":0.25}}"#
            ),
            Item::Progress {
                token: "\"t7\"".into(),
                n: 250_000
            }
        );
    }
}
