//! Which of the server's tools the probe drives, read from `tools/list`: a server names its
//! tools as it likes, so the probe picks by each tool's input schema — an integer that sets how
//! many notifications a call sends, one that paces them — and by what a tool says it does.
//! Flags name what the schema cannot tell; the report says what was chosen and why. And who
//! the server is: a 2025-11-25 session's `initialize`, or a 2026-07-28-only server's
//! `server/discover` ([`server`]).

use super::ProbeError;
use super::http::{HttpError, Target};
use crate::wire::mcp::modern::ModernCall;
use crate::wire::mcp::{Call, method};
use forkscope_core::revision::{LEGACY, MODERN};
use serde_json::{Map, Value, json};

/// Argument names that set how many notifications a call sends.
const COUNT_NAMES: &[&str] = &[
    "steps",
    "count",
    "n",
    "total",
    "iterations",
    "num",
    "number",
    "times",
    "repeat",
    "repeats",
    "events",
    "messages",
    "notifications",
    "ticks",
];

/// Argument names that pace a call's notifications.
const PACE_NAMES: &[&str] = &[
    "delay_ms",
    "delay",
    "interval_ms",
    "interval",
    "sleep_ms",
    "sleep",
    "pause_ms",
    "pause",
    "period_ms",
    "period",
    "wait_ms",
    "every_ms",
    "tick_ms",
];

/// Words in a tool's name or description that say it notifies on its own (on the standalone
/// stream), strongest first.
const STANDALONE_WORDS: &[&str] = &[
    "standalone",
    "broadcast",
    "background",
    "emit",
    "notify",
    "notification",
    "push",
    "publish",
    "announce",
    "ping",
];

/// String arguments the probe fills with the session's label, so events are told apart per
/// session.
const LABEL_NAMES: &[&str] = &["label", "tag", "prefix"];

/// An argument that paces notifications, and its unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pace {
    pub arg: String,
    /// The argument is in seconds, not milliseconds.
    pub seconds: bool,
}

/// A tool the probe calls, and how it fills the tool's arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolPlan {
    pub name: String,
    /// `--args` / `--standalone-args`, or `{}`; what they set is never overridden.
    pub base: Value,
    pub count_arg: Option<String>,
    pub pace: Option<Pace>,
    pub label_arg: Option<String>,
    /// Why this tool, in words.
    pub because: String,
}

impl ToolPlan {
    /// Arguments for `count` notifications, one every `delay_ms`, labelled `label`; and the
    /// count the call will send, if the probe set or knows it.
    pub fn args(&self, count: u64, delay_ms: u64, label: &str) -> (Value, Option<u64>) {
        let mut args = self.base.clone();
        if let Value::Object(map) = &mut args {
            if let Some(arg) = &self.count_arg {
                map.entry(arg.clone()).or_insert(json!(count));
            }
            if let Some(pace) = &self.pace {
                let value = if pace.seconds {
                    json!(delay_ms as f64 / 1000.0)
                } else {
                    json!(delay_ms)
                };
                map.entry(pace.arg.clone()).or_insert(value);
            }
            if let Some(arg) = &self.label_arg {
                map.entry(arg.clone()).or_insert(json!(label));
            }
        }
        let count = self
            .count_arg
            .as_ref()
            .and_then(|arg| args.get(arg))
            .and_then(Value::as_u64);
        (args, count)
    }

    /// The probe can make a call longer: it sets the count or the pace.
    pub fn can_lengthen(&self) -> bool {
        self.count_arg.is_some() || self.pace.is_some()
    }

    /// The header line: the tool, the arguments it fills, and why it was chosen.
    pub fn describe(&self) -> String {
        let mut args = Vec::new();
        if let Some(arg) = &self.count_arg {
            args.push(format!("count arg `{arg}`"));
        }
        if let Some(pace) = &self.pace {
            args.push(format!(
                "pace arg `{}`{}",
                pace.arg,
                if pace.seconds { " in seconds" } else { "" }
            ));
        }
        if let Some(arg) = &self.label_arg {
            args.push(format!("label arg `{arg}`"));
        }
        if self.base.as_object().is_some_and(|m| !m.is_empty()) {
            args.push(format!("with {}", self.base));
        }
        let args = if args.is_empty() {
            String::new()
        } else {
            format!(" ({})", args.join(", "))
        };
        format!("{}{args}: chosen because {}", self.name, self.because)
    }
}

pub fn name_of(tool: &Value) -> &str {
    tool.get("name").and_then(Value::as_str).unwrap_or_default()
}

fn description_of(tool: &Value) -> String {
    tool.get("description")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_lowercase()
}

fn properties(tool: &Value) -> Option<&Map<String, Value>> {
    tool.pointer("/inputSchema/properties")
        .and_then(Value::as_object)
}

fn is_integer(schema: &Value) -> bool {
    let kind = schema.get("type");
    let one = |t: &Value| matches!(t.as_str(), Some("integer" | "number"));
    kind.is_some_and(|k| one(k) || k.as_array().is_some_and(|ts| ts.iter().any(one)))
        || schema
            .get("anyOf")
            .and_then(Value::as_array)
            .is_some_and(|alts| alts.iter().any(is_integer))
}

fn is_string(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("string")
}

/// The tool's integer argument that sets how many notifications it sends.
pub fn count_arg(tool: &Value) -> Option<String> {
    let props = properties(tool)?;
    let looks_like_count = |name: &str| {
        let name = name.to_lowercase();
        COUNT_NAMES.contains(&name.as_str())
            || name.starts_with("num_")
            || name.ends_with("_count")
            || name.ends_with("_steps")
    };
    // In the order the names above rank them, so `steps` wins over `total`.
    COUNT_NAMES
        .iter()
        .find_map(|want| {
            props
                .iter()
                .find(|(name, schema)| name.to_lowercase() == *want && is_integer(schema))
        })
        .or_else(|| {
            props
                .iter()
                .find(|(name, schema)| looks_like_count(name) && is_integer(schema))
        })
        .map(|(name, _)| name.clone())
}

/// The tool's argument that paces its notifications, and its unit.
pub fn pace(tool: &Value) -> Option<Pace> {
    let props = properties(tool)?;
    let (arg, schema) = PACE_NAMES
        .iter()
        .find_map(|want| {
            props
                .iter()
                .find(|(name, schema)| name.to_lowercase() == *want && is_integer(schema))
        })
        .or_else(|| {
            props.iter().find(|(name, schema)| {
                let name = name.to_lowercase();
                ["delay", "interval", "sleep"]
                    .iter()
                    .any(|w| name.contains(w))
                    && is_integer(schema)
            })
        })?;
    let lower = arg.to_lowercase();
    let said = schema
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_lowercase();
    let seconds = !lower.ends_with("ms")
        && (lower.ends_with("_s")
            || lower.ends_with("seconds")
            || lower.ends_with("secs")
            || (said.contains("second") && !said.contains("milli")));
    Some(Pace {
        arg: arg.clone(),
        seconds,
    })
}

fn label_arg(tool: &Value) -> Option<String> {
    let props = properties(tool)?;
    LABEL_NAMES.iter().find_map(|want| {
        props
            .iter()
            .find(|(name, schema)| name.as_str() == *want && is_string(schema))
            .map(|(name, _)| name.clone())
    })
}

/// How strongly a tool's name and description say it notifies on its own; 0: not at all.
pub fn standalone_score(tool: &Value) -> usize {
    let name = name_of(tool).to_lowercase();
    let said = description_of(tool);
    STANDALONE_WORDS
        .iter()
        .enumerate()
        .map(|(rank, word)| {
            let weight = STANDALONE_WORDS.len() - rank;
            if name.contains(word) {
                2 * weight
            } else if said.contains(word) {
                weight
            } else {
                0
            }
        })
        .sum::<usize>()
        + usize::from(said.contains("standalone stream") || said.contains("get stream")) * 10
}

fn plan(tool: &Value, base: Value, count_arg: Option<String>, because: String) -> ToolPlan {
    ToolPlan {
        name: name_of(tool).to_owned(),
        base,
        count_arg,
        pace: pace(tool),
        label_arg: label_arg(tool),
        because,
    }
}

/// The tool whose calls stream progress: `named` by `--tool`, else the best by schema — a count
/// argument first, a pace argument and progress in its name next, a tool that notifies on its
/// own last. `count_flag` (`--count-arg`) names the count argument.
pub fn call_tool(
    tools: &[Value],
    named: Option<&str>,
    base: Option<Value>,
    count_flag: Option<&str>,
) -> Result<Option<ToolPlan>, Unknown> {
    let base = base.unwrap_or_else(|| json!({}));
    let count_of = |t: &Value| match count_flag {
        Some(flag) => properties(t)
            .is_some_and(|p| p.contains_key(flag))
            .then(|| flag.to_owned()),
        None => count_arg(t),
    };
    if let Some(name) = named {
        let tool = find(tools, name)?;
        let count = count_flag.map(str::to_owned).or_else(|| count_arg(tool));
        return Ok(Some(plan(tool, base, count, "--tool names it".into())));
    }
    let score = |t: &Value| {
        let progress = name_of(t).to_lowercase().contains("progress")
            || description_of(t).contains("progress");
        4 + 2 * usize::from(pace(t).is_some())
            + 3 * usize::from(progress)
            + usize::from(standalone_score(t) == 0) * 6
    };
    let best = tools
        .iter()
        .filter(|t| count_of(t).is_some())
        .enumerate()
        .max_by_key(|(i, t)| (score(t), std::cmp::Reverse(*i)))
        .map(|(_, t)| t);
    Ok(best.map(|tool| {
        let count = count_of(tool);
        let arg = count.clone().unwrap_or_default();
        let mut because = match count_flag {
            Some(_) => format!("it takes `{arg}`, which --count-arg names"),
            None => format!(
                "its schema has an integer `{arg}` that sets how many notifications a call sends"
            ),
        };
        if let Some(pace) = pace(tool) {
            because.push_str(&format!(", and `{}` to pace them", pace.arg));
        }
        plan(tool, base, count, because)
    }))
}

/// Tools that may notify on the standalone stream, most likely first (`except` is the call
/// tool). Each is a guess until a trial call puts an event on the stream.
pub fn standalone_candidates<'a>(tools: &'a [Value], except: Option<&str>) -> Vec<&'a Value> {
    let mut found: Vec<(usize, usize, &Value)> = tools
        .iter()
        .enumerate()
        .filter(|(_, t)| Some(name_of(t)) != except)
        .map(|(i, t)| (standalone_score(t), i, t))
        .filter(|(score, _, _)| *score > 0)
        .collect();
    found.sort_by_key(|(score, i, _)| (std::cmp::Reverse(*score), *i));
    found.into_iter().map(|(_, _, t)| t).take(3).collect()
}

/// A plan for a standalone notifier: `--standalone-tool`'s, or a candidate's. Its count
/// argument: `count_flag` (`--standalone-count-arg`), else the one its schema names, else an
/// integer the arguments given already set under a count's name (a tool with no schema for it):
/// a run of known length lets a lost event be told from a quiet source.
pub fn standalone_plan(
    tool: &Value,
    base: Option<Value>,
    because: String,
    count_flag: Option<&str>,
) -> ToolPlan {
    let base = base.unwrap_or_else(|| json!({}));
    let count = count_flag
        .map(str::to_owned)
        .or_else(|| count_arg(tool))
        .or_else(|| count_given(&base));
    plan(tool, base, count, because)
}

/// A count the given arguments set: a name a count goes by, with a whole number.
fn count_given(base: &Value) -> Option<String> {
    let given = base.as_object()?;
    COUNT_NAMES
        .iter()
        .find(|name| given.get(**name).is_some_and(Value::is_u64))
        .map(|name| (*name).to_owned())
}

pub fn find<'a>(tools: &'a [Value], name: &str) -> Result<&'a Value, Unknown> {
    tools
        .iter()
        .find(|t| name_of(t) == name)
        .ok_or_else(|| Unknown {
            name: name.to_owned(),
            offered: tools.iter().map(name_of).collect::<Vec<_>>().join(", "),
        })
}

/// A tool a flag named that `tools/list` does not offer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unknown {
    pub name: String,
    pub offered: String,
}

/// Who the server is and what it offers.
pub(super) struct Discovered {
    /// `serverInfo`, as `name version`.
    pub server: String,
    pub protocol: String,
    pub tools: Result<Value, HttpError>,
    /// It speaks 2025-11-25: it answered `initialize`, sessions, streams to resume.
    pub legacy: bool,
    /// Sessions `initialize` made that the next request did not know, and sessions tried.
    pub lost_sessions: (u64, u64),
}

/// Fresh sessions discovery opens, at most, while each is lost: enough that a balancer's
/// rotation (or chance) lands one session's two requests on one process if it ever does.
const SESSION_TRIES: u64 = 4;

/// A 2025-11-25 session's `initialize` and `tools/list`; or, for a server that answers no
/// `initialize` but offers 2026-07-28 in `server/discover` (a server of that revision alone),
/// a stateless `tools/list`. A server that answers `initialize` and then does not know the
/// session it made speaks 2025-11-25 all the same (its sessions are lost, a finding the cases
/// report), never "2026-07-28 alone". Neither: the server is not one the probe can talk to,
/// and the `initialize` refusal says why.
pub(super) async fn server(target: &Target, run: &str) -> Result<Discovered, ProbeError> {
    let mut lost = 0;
    let mut tries = 0;
    let mut who = None;
    let refused = loop {
        tries += 1;
        match target.open_session(format!("{run}d{tries}")).await {
            Ok(session) => {
                let tools = target
                    .request(method::TOOLS_LIST, &session, Call::ToolsList {})
                    .await;
                target.end_session(&session).await;
                return Ok(Discovered {
                    server: session.server.clone(),
                    protocol: session.version.clone(),
                    tools,
                    legacy: true,
                    lost_sessions: (lost, tries),
                });
            }
            Err(HttpError::SessionLost {
                server, version, ..
            }) => {
                lost += 1;
                who = Some((server, version));
                if tries >= SESSION_TRIES {
                    break None;
                }
            }
            Err(refused) => break Some(refused),
        }
    };
    let offer = modern_offer(target).await;
    if let Some((server, version)) = who.filter(|_| refused.is_none()) {
        // Every session was lost: the tools come from a stateless 2026-07-28 `tools/list`
        // when the server offers that revision too, else none can be listed.
        let modern = offer.as_ref().is_some_and(|f| f.modern);
        let tools = if modern {
            modern_tools(target).await
        } else {
            Err(HttpError::Protocol {
                what: method::TOOLS_LIST,
                why: "no session lived long enough to list the tools".into(),
            })
        };
        return Ok(Discovered {
            server,
            protocol: version,
            tools,
            legacy: true,
            lost_sessions: (lost, tries),
        });
    }
    let refused = refused.unwrap_or(HttpError::Protocol {
        what: method::INITIALIZE,
        why: "no session".into(),
    });
    // 2026-07-28 alone: a server that lists 2025-11-25 too and refused `initialize` anyway is
    // broken, not modern, and its refusal is what to say.
    let Some(offer) = offer.filter(|f| f.modern && !f.legacy) else {
        return Err(ProbeError::Unreachable(refused));
    };
    Ok(Discovered {
        server: offer.server,
        protocol: MODERN.to_owned(),
        tools: modern_tools(target).await,
        legacy: false,
        lost_sessions: (0, 0),
    })
}

/// What `server/discover` offers.
struct Offer {
    modern: bool,
    legacy: bool,
    /// Its `serverInfo`, as `name version`.
    server: String,
}

fn modern_call(id: u64, method: &str) -> ModernCall<'_> {
    ModernCall {
        id,
        method,
        params: json!({}),
        tasks: false,
        key: None,
    }
}

/// `server/discover`, if the server answers it.
async fn modern_offer(target: &Target) -> Option<Offer> {
    let discover = target
        .modern("server/discover", &modern_call(0, "server/discover"))
        .await;
    let Ok(Ok(found)) = discover else {
        return None;
    };
    let versions = found.get("supportedVersions").and_then(Value::as_array);
    let offers = |version: &str| versions.is_some_and(|v| v.iter().any(|v| v == version));
    let info = found.pointer("/_meta/io.modelcontextprotocol~1serverInfo");
    let field = |name: &str| {
        info.and_then(|i| i.get(name))
            .and_then(Value::as_str)
            .unwrap_or("?")
            .chars()
            .take(60)
            .collect::<String>()
    };
    Some(Offer {
        modern: offers(MODERN),
        legacy: offers(LEGACY),
        server: format!("{} {}", field("name"), field("version")),
    })
}

/// A stateless 2026-07-28 `tools/list`.
async fn modern_tools(target: &Target) -> Result<Value, HttpError> {
    match target
        .modern("tools/list", &modern_call(1, "tools/list"))
        .await
    {
        Ok(Ok(tools)) => Ok(tools),
        Ok(Err(error)) => Err(HttpError::Protocol {
            what: "tools/list",
            why: format!("JSON-RPC error {error}"),
        }),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, description: &str, props: Value) -> Value {
        json!({ "name": name, "description": description,
                "inputSchema": { "type": "object", "properties": props } })
    }

    /// A standalone tool whose schema does not declare its count still runs a known length when
    /// its arguments give one, or when `--standalone-count-arg` names it.
    #[test]
    fn a_standalone_count_comes_from_the_schema_the_flag_or_the_arguments() {
        let bare = json!({ "name": "push_standalone", "description": "Pushes" });
        let plan = standalone_plan(&bare, Some(json!({ "count": 200 })), "named".into(), None);
        assert_eq!(plan.count_arg.as_deref(), Some("count"));
        assert_eq!(
            plan.args(5, 10, "s1").1,
            Some(200),
            "what was given is kept"
        );
        let plan = standalone_plan(&bare, None, "named".into(), Some("events"));
        assert_eq!(plan.args(7, 10, "s1"), (json!({ "events": 7 }), Some(7)));
        let plan = standalone_plan(&bare, None, "named".into(), None);
        assert_eq!(
            plan.args(7, 10, "s1").1,
            None,
            "no count known: not judged for loss"
        );
        let schema = tool("ping", "Pings", json!({ "n": { "type": "integer" } }));
        let plan = standalone_plan(&schema, None, "named".into(), None);
        assert_eq!(plan.count_arg.as_deref(), Some("n"));
    }

    #[test]
    fn the_call_tool_is_picked_by_schema_under_any_name() {
        let tools = vec![
            tool("echo", "Echoes", json!({ "text": { "type": "string" } })),
            tool(
                "ping_all",
                "Notifies every client on the standalone stream",
                json!({ "count": { "type": "integer" }, "delay_ms": { "type": "integer" } }),
            ),
            tool(
                "countdown",
                "Counts down",
                json!({ "count": { "type": "integer" }, "delay_ms": { "type": "integer" } }),
            ),
        ];
        let plan = call_tool(&tools, None, None, None).unwrap().unwrap();
        assert_eq!(plan.name, "countdown");
        assert_eq!(plan.count_arg.as_deref(), Some("count"));
        assert_eq!(plan.pace.as_ref().map(|p| p.arg.as_str()), Some("delay_ms"));
        let (args, count) = plan.args(20, 15, "s1");
        assert_eq!(args, json!({ "count": 20, "delay_ms": 15 }));
        assert_eq!(count, Some(20));
        assert!(plan.describe().starts_with(
            "countdown (count arg `count`, pace arg `delay_ms`): chosen because its schema has an integer `count`"
        ));
        let standalone = standalone_candidates(&tools, Some("countdown"));
        assert_eq!(name_of(standalone[0]), "ping_all");
        // What --args sets is kept; seconds are written as seconds.
        let slow = tool(
            "tick",
            "",
            json!({ "iterations": { "type": "integer" }, "interval_s": { "type": "number" } }),
        );
        let plan = call_tool(&[slow], None, Some(json!({ "iterations": 3 })), None)
            .unwrap()
            .unwrap();
        assert_eq!(
            plan.args(20, 500, "x").0,
            json!({ "iterations": 3, "interval_s": 0.5 })
        );
        assert!(call_tool(&tools[..1], None, None, None).unwrap().is_none());
        assert!(call_tool(&tools, Some("nope"), None, None).is_err());
    }
}
