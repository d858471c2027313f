//! Why a resume was refused, as one word, and what the refusal asks of the client. The sentence
//! and the data behind each reason are [`crate::resume::ResumeRejected`]'s; this is what is
//! counted, recorded and sent as the wire's `data.reason`.

use serde::{Deserialize, Serialize};
use strum::{Display, EnumString, IntoStaticStr, VariantArray};

/// The reason alone, for counting and for the wire's `data.reason`. Its snake_case spelling is
/// the one users see: in the wire's JSON, in scenario expectations and in the verdict.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    Display,
    EnumString,
    IntoStaticStr,
    VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum RejectReason {
    MissingToken,
    MissingLastEventId,
    MalformedCursor,
    UnknownToken,
    TokenOfAnotherSession,
    CursorNotOnStream,
    StreamFenced,
    StreamClosed,
    CursorAhead,
    CursorEvicted,
    OrphanStillLive,
    TooManyStreams,
    StoreRolledBack,
}

impl RejectReason {
    pub const ALL: &'static [RejectReason] = <RejectReason as VariantArray>::VARIANTS;

    pub fn as_str(self) -> &'static str {
        self.into()
    }

    pub fn parse(s: &str) -> Option<Self> {
        s.parse().ok()
    }

    /// The HTTP status the wire answers with.
    ///
    /// | status | reasons | why |
    /// |---|---|---|
    /// | 400 | malformed_cursor, cursor_not_on_stream | the request itself is wrong |
    /// | 403 | token_of_another_session | a credential used outside its session |
    /// | 409 | orphan_still_live, too_many_streams | the session's state conflicts; retry later |
    /// | 410 | unknown_token, stream_fenced, stream_closed, cursor_evicted, store_rolled_back | what it names is gone |
    /// | 416 | cursor_ahead | the position was never served |
    /// | 428 | missing_token, missing_last_event_id | a resume must carry both |
    pub fn http_status(self) -> u16 {
        match self {
            RejectReason::MalformedCursor | RejectReason::CursorNotOnStream => 400,
            RejectReason::TokenOfAnotherSession => 403,
            RejectReason::OrphanStillLive | RejectReason::TooManyStreams => 409,
            RejectReason::UnknownToken
            | RejectReason::StreamFenced
            | RejectReason::StreamClosed
            | RejectReason::CursorEvicted
            | RejectReason::StoreRolledBack => 410,
            RejectReason::CursorAhead => 416,
            RejectReason::MissingToken | RejectReason::MissingLastEventId => 428,
        }
    }

    /// What a client that respects the rejection does next.
    pub fn client_action(self) -> ClientAction {
        match self {
            RejectReason::OrphanStillLive | RejectReason::TooManyStreams => {
                ClientAction::RetryLater
            }
            _ => ClientAction::StartNewSession,
        }
    }
}

/// What a rejection asks of the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, IntoStaticStr)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum ClientAction {
    /// The conflict clears by itself (a grace window ends): back off and try again.
    RetryLater,
    /// Continuity cannot be proven: abandon the session and initialize a new one.
    StartNewSession,
}

impl ClientAction {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The spellings users see, written out once so a renamed variant cannot change them.
    #[test]
    fn reasons_keep_their_spelling() {
        let words: Vec<&str> = RejectReason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(
            words,
            [
                "missing_token",
                "missing_last_event_id",
                "malformed_cursor",
                "unknown_token",
                "token_of_another_session",
                "cursor_not_on_stream",
                "stream_fenced",
                "stream_closed",
                "cursor_ahead",
                "cursor_evicted",
                "orphan_still_live",
                "too_many_streams",
                "store_rolled_back",
            ]
        );
        for reason in RejectReason::ALL {
            assert_eq!(reason.to_string(), reason.as_str());
            let json = serde_json::to_string(reason).unwrap();
            assert_eq!(json, format!("\"{}\"", reason.as_str()), "serde agrees");
        }
        assert_eq!(RejectReason::parse("MissingToken"), None);
        assert_eq!(ClientAction::RetryLater.as_str(), "retry_later");
        assert_eq!(ClientAction::StartNewSession.as_str(), "start_new_session");
    }

    #[test]
    fn reasons_roundtrip_and_never_use_404() {
        for &reason in RejectReason::ALL {
            assert_eq!(RejectReason::parse(reason.as_str()), Some(reason));
            assert_ne!(
                reason.http_status(),
                404,
                "{reason}: 404 makes stock clients re-initialize"
            );
            assert!((400..500).contains(&reason.http_status()));
        }
    }
}
