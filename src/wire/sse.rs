//! Server-Sent Events framing (write side) and an incremental parser (read side).
//!
//! Every frame forkscope writes may carry a comment line with the event's ground truth
//! (`: truth s2 5 <key>`): every SSE client ignores comments, so stock MCP clients are
//! unaffected, while forkscope's own client hands the truth to the checker — never to its
//! decisions.
//!
//! The parser is our own because the common crates drop an event whose data is empty, and with
//! it the priming event's `id` and `retry` — the very fields a resuming client needs. It follows
//! the WHATWG rules for fields and line endings, and never yields an event cut in half: an event
//! is dispatched only at its blank line, so a drop mid-event loses it whole.

use bytes::{BufMut, Bytes, BytesMut};
use forkscope_core::StreamId;
use forkscope_core::ids::parse_decimal;
use std::fmt::Write as _;

/// Ground truth about one event, carried in a comment line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Truth {
    pub stream: u32,
    pub seq: u64,
    /// The side-effect key; `None` on a priming event.
    pub key: Option<String>,
}

/// Writes one event: optional truth comment, `id`, optional `retry`, and `data` (split on
/// newlines, as the format requires).
pub fn frame(truth: Option<&Truth>, id: &str, retry_ms: Option<u64>, data: &str) -> Bytes {
    let mut out = String::with_capacity(data.len() + id.len() + 48);
    if let Some(t) = truth {
        let _ = write!(out, ": truth s{} {}", t.stream, t.seq);
        if let Some(key) = &t.key {
            out.push(' ');
            out.push_str(key);
        }
        out.push('\n');
    }
    let _ = writeln!(out, "id: {id}");
    if let Some(ms) = retry_ms {
        let _ = writeln!(out, "retry: {ms}");
    }
    for line in data.split('\n') {
        let _ = writeln!(out, "data: {line}");
    }
    out.push('\n');
    Bytes::from(out)
}

/// One event with no id and no truth: 2026-07-28's streams (a call's own response, a listen),
/// which nothing resumes.
pub fn unnumbered(data: &str) -> String {
    let mut out = BytesMut::with_capacity(data.len() + 8);
    write_frame_of(&mut out, None, "", None, (data, false));
    String::from_utf8(out.to_vec()).unwrap_or_default()
}

/// Appends one event to `out` as [`frame`] spells it, without building it separately: a
/// replay of a thousand events is rendered into one buffer. `truth` is (stream, seq, key).
pub fn write_frame(
    out: &mut BytesMut,
    truth: Option<(u32, u64, Option<&str>)>,
    id: &str,
    retry_ms: Option<u64>,
    data: &str,
) {
    write_frame_of(out, truth, id, retry_ms, (data, false));
}

/// [`write_frame`] for a body known to be one line or not (`one_line`), as the core says.
pub fn write_frame_of(
    out: &mut BytesMut,
    truth: Option<(u32, u64, Option<&str>)>,
    id: &str,
    retry_ms: Option<u64>,
    (data, one_line): (&str, bool),
) {
    write_truth(out, truth);
    // An event without an id (a server that keeps none) has no `id:` line: an empty one
    // would tell the client to forget its cursor.
    if !id.is_empty() {
        out.put_slice(b"id: ");
        out.put_slice(id.as_bytes());
        out.put_u8(b'\n');
    }
    if let Some(ms) = retry_ms {
        out.put_slice(b"retry: ");
        out.put_slice(Decimal::new().format(ms));
        out.put_u8(b'\n');
    }
    write_data(out, data, one_line);
}

/// A replayed event: `id: <prefix><seq><suffix>`, spelled straight into `out`.
pub fn write_replayed(
    out: &mut BytesMut,
    truth: Option<(u32, u64, Option<&str>)>,
    (prefix, seq, suffix): (&str, u64, &str),
    data: &str,
    one_line: bool,
) {
    write_truth(out, truth);
    out.put_slice(b"id: ");
    out.put_slice(prefix.as_bytes());
    out.put_slice(Decimal::new().format(seq));
    out.put_slice(suffix.as_bytes());
    out.put_u8(b'\n');
    write_data(out, data, one_line);
}

fn write_truth(out: &mut BytesMut, truth: Option<(u32, u64, Option<&str>)>) {
    let Some((stream, seq, key)) = truth else {
        return;
    };
    let mut number = Decimal::new();
    out.put_slice(b": truth s");
    out.put_slice(number.format(u64::from(stream)));
    out.put_u8(b' ');
    out.put_slice(number.format(seq));
    if let Some(key) = key {
        out.put_u8(b' ');
        out.put_slice(key.as_bytes());
    }
    out.put_u8(b'\n');
}

/// `data:` lines and the blank line that ends the event. A body known to be one line
/// (`one_line`) is not scanned again: a replay writes a thousand of them.
fn write_data(out: &mut BytesMut, data: &str, one_line: bool) {
    if one_line {
        out.put_slice(b"data: ");
        out.put_slice(data.as_bytes());
        out.put_slice(b"\n\n");
        return;
    }
    for line in data.split('\n') {
        out.put_slice(b"data: ");
        out.put_slice(line.as_bytes());
        out.put_u8(b'\n');
    }
    out.put_u8(b'\n');
}

/// A small decimal formatter: no allocation, no UTF-8 check (its bytes are ASCII digits).
struct Decimal([u8; 20]);

impl Decimal {
    fn new() -> Self {
        Decimal([0; 20])
    }

    fn format(&mut self, mut n: u64) -> &[u8] {
        let mut i = self.0.len();
        loop {
            i -= 1;
            self.0[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        &self.0[i..]
    }
}

/// A bare `retry:` frame, sent before the server closes a stream so the client knows when to
/// come back.
pub fn retry_frame(retry_ms: u64) -> Bytes {
    let mut out = BytesMut::with_capacity(16);
    out.put_slice(format!("retry: {retry_ms}\n\n").as_bytes());
    out.freeze()
}

/// One dispatched event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `id` field of this event, if it had one (not the carried-over last id).
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
    pub retry_ms: Option<u64>,
    pub truth: Option<Truth>,
}

/// Incremental parser: feed it bytes as they arrive; it yields whole events only.
#[derive(Debug, Default)]
pub struct Parser {
    buffer: Vec<u8>,
    current: SseEvent,
    has_data: bool,
    has_field: bool,
    /// The previous chunk ended in `\r`: a `\n` starting the next chunk belongs to it.
    skip_lf: bool,
}

/// Longest line the parser accepts; a longer one is a broken stream, not an event.
pub const MAX_LINE: usize = 1 << 20;

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("an SSE line exceeded {MAX_LINE} bytes")]
    LineTooLong,
}

impl Parser {
    pub fn new() -> Self {
        Parser::default()
    }

    /// Feeds a chunk; returns the events it completed, in order.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<Vec<SseEvent>, ParseError> {
        let mut events = Vec::new();
        let mut rest = chunk;
        // A `\r` ended the last chunk: a `\n` opening this one belongs to it. An empty chunk
        // says nothing yet, so the flag waits for the next byte.
        if self.skip_lf && !rest.is_empty() {
            self.skip_lf = false;
            if let Some(stripped) = rest.strip_prefix(b"\n") {
                rest = stripped;
            }
        }
        while let Some(pos) = rest.iter().position(|b| *b == b'\n' || *b == b'\r') {
            let mut line = std::mem::take(&mut self.buffer);
            line.extend_from_slice(&rest[..pos]);
            let ending = rest[pos];
            rest = &rest[pos + 1..];
            if ending == b'\r' {
                match rest.first() {
                    Some(b'\n') => rest = &rest[1..],
                    None => self.skip_lf = true,
                    Some(_) => {}
                }
            }
            if let Some(event) = self.line(&line) {
                events.push(event);
            }
        }
        if self.buffer.len() + rest.len() > MAX_LINE {
            return Err(ParseError::LineTooLong);
        }
        self.buffer.extend_from_slice(rest);
        Ok(events)
    }

    fn line(&mut self, line: &[u8]) -> Option<SseEvent> {
        if line.is_empty() {
            return self.dispatch();
        }
        let line = String::from_utf8_lossy(line);
        if let Some(comment) = line.strip_prefix(':') {
            if let Some(truth) = parse_truth(comment.trim_start()) {
                self.current.truth = Some(truth);
            }
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line.as_ref(), ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.current.data.push('\n');
                }
                self.current.data.push_str(value);
                self.has_data = true;
            }
            "id" if !value.contains('\0') => self.current.id = Some(value.to_owned()),
            "event" => self.current.event = Some(value.to_owned()),
            "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                self.current.retry_ms = value.parse().ok();
            }
            _ => return None,
        }
        self.has_field = true;
        None
    }

    /// Unlike a browser, dispatches an event with an id or retry but no data (the priming
    /// event): a resuming client must see it.
    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = std::mem::take(&mut self.current);
        let had = std::mem::take(&mut self.has_field);
        self.has_data = false;
        had.then_some(event)
    }
}

fn parse_truth(comment: &str) -> Option<Truth> {
    let mut parts = comment.strip_prefix("truth ")?.splitn(3, ' ');
    let stream = StreamId::parse(parts.next()?)?.0;
    let seq = parse_decimal(parts.next()?)?;
    let key = parts.next().map(str::to_owned);
    Some(Truth { stream, seq, key })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An event with no id carries no `id:` line (an empty one would reset a client's cursor),
    /// and its data reads back whole, newlines and all.
    #[test]
    fn an_unnumbered_event_has_no_id_and_reads_back_whole() {
        let framed = unnumbered("{\"a\":1}\nsecond");
        assert_eq!(framed, "data: {\"a\":1}\ndata: second\n\n");
        let events = Parser::new().feed(framed.as_bytes()).unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].data, "{\"a\":1}\nsecond");
        assert_eq!(events[0].id, None);
    }

    #[test]
    fn an_empty_chunk_between_cr_and_lf_is_no_blank_line() {
        // Found by tests/fuzz.rs: the empty chunk used to clear the pending CR, so the LF
        // after it read as a blank line and dispatched the event early.
        let mut parser = Parser::new();
        assert!(parser.feed(b"id: s1-1\r").unwrap().is_empty());
        assert!(parser.feed(b"").unwrap().is_empty());
        assert!(
            parser.feed(b"\n").unwrap().is_empty(),
            "CRLF is one line ending"
        );
        let events = parser.feed(b"data: x\n\n").unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(
            (events[0].id.as_deref(), events[0].data.as_str()),
            (Some("s1-1"), "x")
        );
    }

    #[test]
    fn a_truth_comment_is_read_only_as_the_server_writes_it() {
        let written = frame(
            Some(&Truth {
                stream: 2,
                seq: 10,
                key: Some("k".into()),
            }),
            "s2-10",
            None,
            "x",
        );
        let events = Parser::new().feed(&written).unwrap();
        assert_eq!(
            events[0].truth,
            Some(Truth {
                stream: 2,
                seq: 10,
                key: Some("k".into())
            })
        );
        for odd in ["s02 10", "s2 010", "s+2 10", "s2 +10", "s2  10", "2 10"] {
            let text = format!(": truth {odd} k\nid: s2-10\ndata: x\n\n");
            let events = Parser::new().feed(text.as_bytes()).unwrap();
            assert_eq!(events[0].truth, None, "{odd:?}");
        }
    }

    #[test]
    fn a_replayed_frame_is_spelled_as_a_live_one() {
        for (seq, data) in [(0, ""), (7, "{\"a\":1}"), (1_234_567_890, "two\nlines")] {
            for truth in [None, Some((3, seq, Some("k")))] {
                let one_line = !data.contains('\n');
                let mut replayed = BytesMut::new();
                write_replayed(&mut replayed, truth, ("s3-", seq, ".AAAA"), data, one_line);
                let mut live = BytesMut::new();
                write_frame(&mut live, truth, &format!("s3-{seq}.AAAA"), None, data);
                assert_eq!(replayed, live, "seq {seq} data {data:?}");
                if !one_line {
                    // A body not known to be one line is scanned, whatever the flag says.
                    let mut unknown = BytesMut::new();
                    write_replayed(&mut unknown, truth, ("s3-", seq, ".AAAA"), data, false);
                    assert_eq!(unknown, live);
                }
            }
        }
    }

    #[test]
    fn write_frame_spells_exactly_what_frame_does() {
        let truth = Truth {
            stream: 7,
            seq: 1_234_567,
            key: Some("abc:bg:9".into()),
        };
        for (retry, data) in [(None, "{\"a\":1}"), (Some(250), ""), (None, "two\nlines")] {
            let mut out = BytesMut::new();
            write_frame(
                &mut out,
                Some((7, 1_234_567, Some("abc:bg:9"))),
                "s7-1234567.00ff",
                retry,
                data,
            );
            assert_eq!(
                out.freeze(),
                frame(Some(&truth), "s7-1234567.00ff", retry, data)
            );
        }
        let mut out = BytesMut::new();
        write_frame(&mut out, Some((0, 0, None)), "0", None, "");
        assert_eq!(
            out.freeze(),
            frame(
                Some(&Truth {
                    stream: 0,
                    seq: 0,
                    key: None
                }),
                "0",
                None,
                ""
            )
        );
    }

    fn parse_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut parser = Parser::new();
        chunks
            .iter()
            .flat_map(|c| parser.feed(c).unwrap())
            .collect()
    }

    #[test]
    fn frames_roundtrip_through_the_parser_byte_by_byte() {
        let truth = Truth {
            stream: 2,
            seq: 5,
            key: Some("abc:bg:5".into()),
        };
        let bytes = frame(Some(&truth), "s2-5", Some(250), "{\"a\":1}\nsecond");
        let chunks: Vec<&[u8]> = bytes.chunks(1).collect();
        let events = parse_all(&chunks);
        assert_eq!(
            events,
            vec![SseEvent {
                id: Some("s2-5".into()),
                event: None,
                data: "{\"a\":1}\nsecond".into(),
                retry_ms: Some(250),
                truth: Some(truth),
            }]
        );
    }

    #[test]
    fn a_priming_event_with_empty_data_is_dispatched() {
        let truth = Truth {
            stream: 1,
            seq: 0,
            key: None,
        };
        let events = parse_all(&[&frame(Some(&truth), "s1-0", Some(500), "")]);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].id.as_deref(), Some("s1-0"));
        assert_eq!(events[0].retry_ms, Some(500));
        assert_eq!(events[0].truth, Some(truth));
    }

    #[test]
    fn an_event_cut_in_half_is_never_delivered() {
        let whole = frame(None, "7", None, "payload");
        let mut parser = Parser::new();
        let cut = &whole[..whole.len() - 1]; // everything but the blank line
        assert!(parser.feed(cut).unwrap().is_empty());
        // The connection drops here: the parser is thrown away with its half event.
    }

    #[test]
    fn handles_crlf_cr_and_lf_line_endings_split_anywhere() {
        let events = parse_all(&[b"id: 1\r", b"\ndata: a\r\rid: 2\ndata: b\n", b"\n"]);
        let ids: Vec<_> = events.iter().map(|e| e.id.clone().unwrap()).collect();
        assert_eq!(ids, vec!["1", "2"]);
        assert_eq!(events[1].data, "b");
    }

    #[test]
    fn ignores_unknown_fields_bad_retry_and_plain_comments() {
        let events = parse_all(&[b": keep-alive\nfoo: bar\nretry: 12x\ndata: x\n\n"]);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].retry_ms, None);
        assert_eq!(events[0].truth, None);
        assert!(parse_all(&[b": just a comment\n\n"]).is_empty());
    }

    #[test]
    fn a_runaway_line_is_an_error_not_unbounded_memory() {
        let mut parser = Parser::new();
        let chunk = vec![b'x'; MAX_LINE / 2 + 1];
        assert!(parser.feed(&chunk).is_ok());
        assert_eq!(parser.feed(&chunk), Err(ParseError::LineTooLong));
    }
}
