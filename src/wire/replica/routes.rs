//! `/mcp` on a replica. Each GET reads the stream's record from the store, asks the core
//! ([`forkscope_core::replica::decide_get`]), and commits the plan by compare-and-set on the
//! epoch it read; a conflict (another replica moved first) reads again and decides again.

// A refusal is the response itself, sent as soon as it is made: boxing it would buy nothing.
#![allow(clippy::result_large_err)]

use super::deliver::{self, Delivery};
use super::witness::Fact;
use super::work::{self, CallStart};
use super::{Replica, session_key};
use crate::store::{Adoption, CallSpec, NewStream, Resumed, SessionId, StoreError, new_session_id};
use crate::wire::headers;
use crate::wire::jsonrpc;
use crate::wire::mcp::message::method;
use crate::wire::server::handles::Handle;
use crate::wire::server::incoming::{self, Incoming, Routed};
use crate::wire::server::modern::Gate;
use crate::wire::server::refusal::{
    Refusal, Unavailable, accepts, check_protocol_version, identity_header, json_response,
    resume_rejected, session_error, store_corrupt, unavailable,
};
use axum::Extension;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use forkscope_core::replica::{GetPlan, LogHole, cursor_stream, decide_get, needs_standalone};
use forkscope_core::{Policy, SessionError, StreamId, StreamKind};
use serde_json::Value;
use std::sync::atomic::Ordering;
use tokio::sync::OwnedSemaphorePermit;

/// Reads and decisions one GET may take before the epoch stops moving under it.
const MAX_ATTEMPTS: usize = 8;

/// 503 for a store that does not answer: typed, with Retry-After, never a 500 or a silent
/// new stream.
fn store_unavailable(id: &Value, why: &StoreError) -> Response {
    tracing::warn!("store: {why}");
    unavailable(
        id,
        Unavailable::StoreUnreachable,
        &format!("this replica cannot reach the shared store: {why}"),
        1,
    )
}

fn gone() -> Response {
    Refusal::Session(SessionError::Unknown).into_response()
}

fn store_failure(id: &Value, why: StoreError) -> Response {
    match why {
        StoreError::SessionGone => gone(),
        StoreError::Full(_) => unavailable(id, Unavailable::TooManySessions, &why.to_string(), 60),
        StoreError::Corrupt(_) => {
            tracing::error!("store: {why}");
            store_corrupt(id, &why.to_string())
        }
        StoreError::Unavailable(_) => store_unavailable(id, &why),
    }
}

/// A revision this server speaks, and a session id spelled as replicas spell them; whether the
/// store holds the session is asked next ([`session_of`]), or answered by the first read.
fn session_named(headers: &HeaderMap) -> Result<SessionId, Response> {
    check_protocol_version(headers, axum::http::StatusCode::BAD_REQUEST)
        .map_err(IntoResponse::into_response)?;
    let raw = identity_header(headers, headers::SESSION_ID)
        .map_err(IntoResponse::into_response)?
        .ok_or_else(|| Refusal::MissingSession.into_response())?;
    session_key(raw).ok_or_else(gone)
}

/// The checks every request on a session passes: [`session_named`], and a session the store
/// holds.
async fn session_of(replica: &Replica, headers: &HeaderMap) -> Result<SessionId, Response> {
    let session = session_named(headers)?;
    match replica.store.session_exists(&session).await {
        Ok(true) => Ok(session),
        Ok(false) => Err(gone()),
        Err(why) => Err(store_failure(&Value::Null, why)),
    }
}

fn insert(headers: &mut HeaderMap, name: &'static str, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        headers.insert(HeaderName::from_static(name), value);
    }
}

fn permit(replica: &Replica, id: &Value) -> Result<OwnedSemaphorePermit, Response> {
    replica.deliveries.clone().try_acquire_owned().map_err(|_| {
        unavailable(
            id,
            Unavailable::TooManySessions,
            "this replica serves as many streams as it may; retry, or another replica",
            1,
        )
    })
}

/// The connection a request came on, as the accept loop hands it over: a delivery whose
/// writes stall closes it.
type Connection = Option<Extension<Handle>>;

fn sse(
    replica: &Replica,
    delivery: Delivery,
    (permit, connection): (OwnedSemaphorePermit, Connection),
    resumed: bool,
) -> Response {
    let stream = delivery.stream;
    let body = deliver::body(replica, delivery, permit, connection.map(|c| c.0));
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if replica.policy == Policy::Fenced {
        insert(headers, headers::STREAM_ID, &stream.to_string());
        insert(
            headers,
            headers::STREAM_RESUMED,
            if resumed { "true" } else { "false" },
        );
    }
    response
}

pub(super) async fn post_mcp(
    State(replica): State<Replica>,
    connection: Connection,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let incoming = match Incoming::read(&headers, body) {
        Ok(incoming) => incoming,
        Err(refused) => return refused,
    };
    if let Gate::Answered(response) = replica.modern.gate_post(&headers, &incoming).await {
        return response;
    }
    let params = incoming.params();
    let (id, method) = (incoming.id, incoming.method.as_deref());
    if let (Some("initialize"), Some(id)) = (method, &id) {
        let version = incoming::negotiated_version(&incoming.message);
        let session = new_session_id();
        if let Err(why) = replica.store.open_session(&session).await {
            return store_failure(id, why);
        }
        tracing::info!(replica = %replica.name, %session, version, "session initialized");
        replica.tell(|| Fact::SessionOpened { session });
        let result = incoming::initialize_result(version);
        let mut response = json_response(StatusCode::OK, jsonrpc::result(id, result));
        insert(
            response.headers_mut(),
            headers::SESSION_ID,
            &session.to_string(),
        );
        return response;
    }
    let session = match session_of(&replica, &headers).await {
        Ok(session) => session,
        Err(refused) => return refused,
    };
    let (Some(method), Some(id)) = (method, id) else {
        if method == Some(method::CANCELLED) {
            cancel_call(&replica, &session, params.get("requestId")).await;
        }
        // A notification or a response: accepted, nothing to answer.
        return StatusCode::ACCEPTED.into_response();
    };
    if method == method::LOG_SET_LEVEL {
        let level = match incoming::log_level(&id, &params) {
            Ok(level) => level,
            Err(refused) => return refused,
        };
        return match replica.store.set_log_level(&session, level).await {
            Ok(()) => incoming::log_level_set(&id),
            Err(why) => store_failure(&id, why),
        };
    }
    match incoming::route(method, &id, &headers) {
        Routed::Answered { response, .. } => response,
        Routed::CallTool => call_tool(&replica, session, (id, connection), &params).await,
    }
}

/// `notifications/cancelled`: the call stops on whichever replica runs it (through the store),
/// sends no result, and its stream ends once what it wrote is sent. A notification is never
/// answered, so a store that cannot be reached is only logged.
async fn cancel_call(replica: &Replica, session: &SessionId, request_id: Option<&Value>) {
    let Some(request_id) = request_id else { return };
    match replica.store.cancel(session, &request_id.to_string()).await {
        Ok(Some(stream)) => {
            tracing::info!(replica = %replica.name, %session, %stream, request = %request_id, "tool call cancelled");
        }
        Ok(None) => {}
        Err(why) => {
            tracing::warn!(replica = %replica.name, %session, request = %request_id, "cannot cancel: {why}");
        }
    }
}

async fn call_tool(
    replica: &Replica,
    session: SessionId,
    (id, connection): (Value, Connection),
    params: &Value,
) -> Response {
    let (args, progress_token) = match incoming::tool_call(&id, params) {
        Ok(call) => call,
        Err(refused) => return refused,
    };
    let permit = match permit(replica, &id) {
        Ok(permit) => permit,
        Err(refused) => return refused,
    };
    let spec = CallSpec {
        steps: args.steps,
        delay_ms: args.delay_ms,
        request_id: id.to_string(),
        progress_token: progress_token.as_ref().map(Value::to_string),
    };
    let key = rand::random::<u64>();
    let new = NewStream {
        kind: StreamKind::Request,
        key,
        owner: replica.name.to_string(),
        call: Some(spec.clone()),
        fence: None,
    };
    let stream = match replica.store.open_stream(&session, &new).await {
        Ok(Ok(stream)) => stream,
        // A call's stream fences nothing, so no epoch can have moved under it.
        Ok(Err(epoch)) => {
            let why =
                StoreError::Corrupt(format!("a fence conflict at epoch {epoch} on a new call"));
            return store_failure(&id, why);
        }
        Err(why) => return store_failure(&id, why),
    };
    tracing::info!(replica = %replica.name, %session, %stream, steps = args.steps, "tool call started");
    replica.tell(|| Fact::StreamOpened {
        session,
        stream,
        kind: StreamKind::Request,
        flagged_new: replica.policy == Policy::Fenced,
        epoch: (replica.policy == Policy::Fenced).then_some(1),
        request: id.as_u64(),
    });
    work::start_call(
        replica,
        session,
        stream,
        spec,
        CallStart {
            lease: 1,
            done: 0,
            wrote: 0,
        },
    );
    let delivery = Delivery {
        session,
        stream,
        kind: StreamKind::Request,
        key,
        after: 0,
        live_after: 0,
        epoch: (replica.policy == Policy::Fenced).then_some(1),
        priming: true,
        first: None,
    };
    sse(replica, delivery, (permit, connection), false)
}

pub(super) async fn get_mcp(
    State(replica): State<Replica>,
    connection: Connection,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = replica.modern.gate_get_or_delete(&headers) {
        return refused;
    }
    if !accepts(&headers, "text/event-stream") {
        return session_error(
            StatusCode::NOT_ACCEPTABLE,
            "GET /mcp answers text/event-stream only",
        );
    }
    // The session's existence is answered by the GET's first store read (a gone session is a
    // 404 there): one round trip fewer on every resume.
    let session = match session_named(&headers) {
        Ok(session) => session,
        Err(refused) => return refused,
    };
    let cursor = match identity_header(&headers, headers::LAST_EVENT_ID) {
        Ok(cursor) => cursor,
        Err(refusal) => return refusal.into_response(),
    };
    let permit = match permit(&replica, &Value::Null) {
        Ok(permit) => permit,
        Err(refused) => return refused,
    };
    for _ in 0..MAX_ATTEMPTS {
        match attempt_get(&replica, &session, cursor).await {
            Ok(Some((delivery, resumed))) => {
                return sse(&replica, delivery, (permit, connection), resumed);
            }
            Ok(None) => continue,
            Err(refused) => return refused,
        }
    }
    unavailable(
        &Value::Null,
        Unavailable::StoreContended,
        "the stream's epoch kept moving under this resume (other replicas resuming it at once); retry",
        1,
    )
}

/// Reads, decides, commits. `Ok(None)`: the epoch moved since the read; read again.
async fn attempt_get(
    replica: &Replica,
    session: &SessionId,
    cursor: Option<&str>,
) -> Result<Option<(Delivery, bool)>, Response> {
    let fail = |why| store_failure(&Value::Null, why);
    let read = |stream: Option<StreamId>| async move {
        match stream {
            Some(stream) => replica.store.snapshot(session, stream).await,
            None => Ok(None),
        }
    };
    let standalone = if needs_standalone(replica.policy, cursor) {
        read(replica.store.standalone(session).await.map_err(fail)?)
            .await
            .map_err(fail)?
    } else {
        None
    };
    let named_stream = cursor.and_then(cursor_stream);
    let named = read(named_stream).await.map_err(fail)?;
    // Nothing was read (a cursor that names no stream, under fenced): ask whether the session
    // is there, so an unknown session is a 404 before any other answer.
    if !needs_standalone(replica.policy, cursor)
        && named_stream.is_none()
        && !replica.store.session_exists(session).await.map_err(fail)?
    {
        return Err(gone());
    }
    let plan = decide_get(
        replica.policy,
        cursor,
        named.as_ref().map(|s| &s.record),
        standalone.as_ref().map(|s| &s.record),
    );
    match plan {
        GetPlan::Reject(rejected) => {
            tracing::info!(replica = %replica.name, %session, reason = %rejected.reason(), "resume rejected");
            replica.tell(|| Fact::Rejected {
                session: *session,
                reason: rejected.reason(),
            });
            Err(resume_rejected(&rejected))
        }
        GetPlan::Open { fence } => {
            let key = rand::random::<u64>();
            let new = NewStream {
                kind: StreamKind::Standalone,
                key,
                owner: replica.name.to_string(),
                call: None,
                fence,
            };
            let Ok(stream) = replica
                .store
                .open_stream(session, &new)
                .await
                .map_err(fail)?
            else {
                return Ok(None);
            };
            tracing::info!(replica = %replica.name, %session, %stream, "new standalone stream");
            replica.tell(|| Fact::StreamOpened {
                session: *session,
                stream,
                kind: StreamKind::Standalone,
                flagged_new: replica.policy == Policy::Fenced,
                epoch: (replica.policy == Policy::Fenced).then_some(1),
                request: None,
            });
            work::start_emitter(replica, *session, stream, 1);
            let delivery = Delivery {
                session: *session,
                stream,
                kind: StreamKind::Standalone,
                key,
                after: 0,
                live_after: 0,
                epoch: (replica.policy == Policy::Fenced).then_some(1),
                priming: true,
                first: None,
            };
            Ok(Some((delivery, false)))
        }
        GetPlan::Resume {
            stream,
            after,
            expect_epoch,
            adopt,
            proof,
        } => {
            let Some(snapshot) = named.or(standalone).filter(|s| s.record.stream == stream) else {
                return Ok(None);
            };
            // Attach and adopt are one store step: a replica holds a call's stream only with
            // its one chance at the call.
            let adopt = adopt.filter(|_| snapshot.call.is_some());
            let resumed = if expect_epoch.is_some() || adopt.is_some() {
                let resumed = replica
                    .store
                    .resume(session, stream, expect_epoch, adopt, &replica.name)
                    .await
                    .map_err(fail)?;
                let Ok(resumed) = resumed else {
                    return Ok(None);
                };
                resumed
            } else {
                Resumed {
                    epoch: None,
                    adoption: None,
                }
            };
            let epoch = resumed.epoch;
            if epoch.is_some() {
                replica.counters.resumes.fetch_add(1, Ordering::Relaxed);
            }
            tracing::info!(replica = %replica.name, %session, %stream, after, ?epoch, "resumed");
            let high_water = snapshot.record.high_water;
            replica.tell(|| Fact::Resumed {
                session: *session,
                stream,
                after,
                replay: high_water.saturating_sub(after),
                epoch,
                proof,
            });
            if let (Some(Adoption::Adopted { lease, done }), Some(spec)) =
                (resumed.adoption, snapshot.call.clone())
            {
                replica
                    .counters
                    .calls_adopted
                    .fetch_add(1, Ordering::Relaxed);
                replica.tell(|| Fact::Adopted {
                    session: *session,
                    stream,
                    lease,
                    done,
                });
                work::start_call(
                    replica,
                    *session,
                    stream,
                    spec,
                    CallStart {
                        lease,
                        done,
                        wrote: snapshot.record.high_water,
                    },
                );
            }
            if snapshot.record.kind == StreamKind::Standalone {
                work::start_emitter(replica, *session, stream, epoch.unwrap_or(1));
            }
            let mut first = None;
            if epoch.is_some() {
                // The resume's first hand-off, read before it is answered: a log that lost an
                // entry the client is owed is refused, typed (500 store_corrupt), never a 200
                // that says resumed and then ends empty. The delivery starts from it.
                let (read, events) = replica
                    .store
                    .replay(session, stream, after, deliver::FIRST_BATCH)
                    .await
                    .map_err(fail)?
                    .ok_or_else(gone)?;
                let seqs = events.iter().map(|(seq, _)| *seq);
                if let Some(LogHole::Missing(from, to)) = read.record.hole_in(after, seqs) {
                    return Err(fail(deliver::lost(stream, from, to)));
                }
                first = Some((read, events));
            }
            let delivery = Delivery {
                session: *session,
                stream,
                kind: snapshot.record.kind,
                key: snapshot.record.key,
                after,
                live_after: high_water.max(after),
                epoch,
                priming: false,
                first,
            };
            Ok(Some((delivery, true)))
        }
    }
}

pub(super) async fn delete_mcp(State(replica): State<Replica>, headers: HeaderMap) -> Response {
    if let Some(refused) = replica.modern.gate_get_or_delete(&headers) {
        return refused;
    }
    let session = match session_of(&replica, &headers).await {
        Ok(session) => session,
        Err(refused) => return refused,
    };
    match replica.store.end_session(&session).await {
        Ok(true) => {
            tracing::info!(replica = %replica.name, %session, "session ended by DELETE");
            StatusCode::NO_CONTENT.into_response()
        }
        Ok(false) => gone(),
        Err(why) => store_failure(&Value::Null, why),
    }
}
