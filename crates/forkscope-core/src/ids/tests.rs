use super::*;

#[test]
fn cursor_parsing_accepts_only_the_two_spellings() {
    let scoped = WireCursor::parse("s2-41").unwrap();
    assert_eq!(
        scoped,
        WireCursor::Scoped(EventId {
            stream: StreamId(2),
            seq: 41
        })
    );
    assert_eq!(scoped.to_string(), "s2-41");
    assert_eq!(WireCursor::parse("41"), Some(WireCursor::Bare(41)));
    for bad in [
        "", "s", "s-1", "s2-", "s2_41", "-1", "+4", " 4", "4 ", "sx-1", "x", "s1-2-3",
    ] {
        assert_eq!(WireCursor::parse(bad), None, "{bad:?} must be malformed");
    }
    assert_eq!(WireCursor::parse(&"9".repeat(MAX_CURSOR_LEN + 1)), None);
    assert_eq!(
        WireCursor::parse("99999999999999999999999"),
        None,
        "overflow"
    );
}

#[test]
fn an_id_is_read_only_in_the_spelling_the_server_writes() {
    let key = "AAAAAAAAACr";
    // (spelling, the one the server writes for the same id, or `None`: no id at all)
    let cases: &[(&str, Option<&str>)] = &[
        ("s1-1", Some("s1-1")),
        ("s1-0", Some("s1-0")),
        ("s10-100", Some("s10-100")),
        ("0", Some("0")),
        ("41", Some("41")),
        ("s1-01", None),
        ("s1-00", None),
        ("s01-1", None),
        ("s00-1", None),
        ("s0010-100", None),
        ("041", None),
        ("00", None),
        ("s1-+1", None),
        ("s+1-1", None),
        ("s1--1", None),
        ("s-1-1", None),
        ("+41", None),
        ("-0", None),
        ("s1- 1", None),
        ("s 1-1", None),
        ("s1-1 ", None),
        (" s1-1", None),
        ("s1-1\t", None),
        ("4 1", None),
        ("S1-1", None),
        ("s1-\u{0661}", None), // a non-ASCII digit
    ];
    for (spelling, canonical) in cases {
        let parsed = WireCursor::parse(spelling);
        assert_eq!(
            parsed.map(|c| c.to_string()).as_deref(),
            *canonical,
            "{spelling:?}"
        );
        let keyed = format!("{spelling}.{key}");
        if spelling.starts_with('s') {
            assert_eq!(
                WireCursor::parse(&keyed).map(|c| c.to_string()),
                canonical.map(|c| format!("{c}.{key}")),
                "{keyed:?}"
            );
        }
    }
    let widest = format!("s{}-{}", u32::MAX, u64::MAX);
    assert_eq!(WireCursor::parse(&widest).unwrap().to_string(), widest);
}

#[test]
fn stream_names_and_hex_ids_have_one_spelling_each() {
    assert_eq!(StreamId::parse("s7"), Some(StreamId(7)));
    assert_eq!(StreamId::parse("s0"), Some(StreamId(0)));
    for bad in [
        "s07",
        "s+7",
        "s-7",
        "s 7",
        "s7 ",
        "7",
        "s",
        "S7",
        "s4294967296",
    ] {
        assert_eq!(StreamId::parse(bad), None, "{bad:?}");
    }
    let mut rng = SplitMix64::new(11);
    let session = SessionId::generate(&mut rng);
    let token = ResumptionToken::generate(&mut rng);
    let spelled = (session.to_string(), token.to_string());
    assert_eq!(SessionId::parse(&spelled.0), Some(session));
    assert_eq!(ResumptionToken::parse(&spelled.1), Some(token));
    // Hex ids are fixed width, so their zeros are part of the one spelling; case is not.
    assert_eq!(
        SessionId::parse("000000000000000000000000000000ab").map(|s| s.to_string()),
        Some("000000000000000000000000000000ab".to_owned())
    );
    for bad in [
        "000000000000000000000000000000AB".to_owned(),
        spelled.0.to_uppercase(),
        format!("+{}", &spelled.0[1..]),
        format!(" {}", &spelled.0[1..]),
    ] {
        assert_eq!(SessionId::parse(&bad), None, "{bad:?}");
        assert_eq!(ResumptionToken::parse(&bad), None, "{bad:?}");
    }
    assert_eq!(
        SessionId::parse_short(&session.short()),
        Some(session.short_bits())
    );
    for bad in ["ABCDEF", "+abcde", "abcde", "abcdef0", " abcde"] {
        assert_eq!(SessionId::parse_short(bad), None, "{bad:?}");
    }
}

proptest::proptest! {
    #[test]
    fn every_issued_id_reads_back_as_itself(
        stream in proptest::prelude::any::<u32>(),
        seq in proptest::prelude::any::<u64>(),
        token in proptest::prelude::any::<u128>(),
    ) {
        let id = EventId { stream: StreamId(stream), seq };
        let token = ResumptionToken(token);
        let expected = [
            (IdScheme::Scoped, WireCursor::Scoped(id)),
            (IdScheme::Bare, WireCursor::Bare(seq)),
            (IdScheme::Keyed, WireCursor::Keyed { event: id, key: token.stream_key() }),
        ];
        for (scheme, cursor) in expected {
            let spelled = scheme.encode(id, token);
            proptest::prop_assert_eq!(WireCursor::parse(&spelled), Some(cursor));
            proptest::prop_assert_eq!(cursor.to_string(), spelled);
        }
        proptest::prop_assert_eq!(StreamId::parse(&id.stream.to_string()), Some(id.stream));
    }

    /// Whatever a client sends, an accepted cursor is the very string the server would
    /// write for it: no second spelling gets through.
    #[test]
    fn every_accepted_cursor_is_spelled_as_the_server_writes_it(
        raw in "(s(0|00|[+ -])?[0-9]{1,3}-)?(0|00|[+ -])?[0-9]{1,4}[ \t]?(\\.[A-Za-z0-9_-]{11})?",
    ) {
        if let Some(cursor) = WireCursor::parse(&raw) {
            proptest::prop_assert_eq!(cursor.to_string(), raw);
        }
    }
}

#[test]
fn tokens_and_sessions_roundtrip_and_reject_garbage() {
    let mut rng = SplitMix64::new(7);
    let token = ResumptionToken::generate(&mut rng);
    assert_eq!(ResumptionToken::parse(&token.to_string()), Some(token));
    assert_eq!(ResumptionToken::parse("abc"), None);
    assert_eq!(ResumptionToken::parse(&"g".repeat(32)), None);
    assert!(!format!("{token:?}").contains(&token.to_string()));
    let session = SessionId::generate(&mut rng);
    assert_eq!(SessionId::parse(&session.to_string()), Some(session));
    assert_ne!(SessionId::generate(&mut rng), session);
}

#[test]
fn wide_ids_serialize_as_hex_strings() {
    let mut rng = SplitMix64::new(3);
    let session = SessionId::generate(&mut rng);
    let json = serde_json::to_string(&session).unwrap();
    assert_eq!(json, format!("\"{session}\""));
    assert_eq!(serde_json::from_str::<SessionId>(&json).unwrap(), session);
    let token = ResumptionToken::generate(&mut rng);
    assert_eq!(
        serde_json::to_string(&token).unwrap(),
        format!("\"{token}\"")
    );
    assert!(serde_json::from_str::<SessionId>("\"zz\"").is_err());
}

#[test]
fn schemes_spell_ids_differently() {
    let id = EventId {
        stream: StreamId(3),
        seq: 9,
    };
    let token = ResumptionToken(0xab);
    assert_eq!(IdScheme::Scoped.encode(id, token), "s3-9");
    assert_eq!(IdScheme::Bare.encode(id, token), "9");
    let keyed = IdScheme::Keyed.encode(id, token);
    assert_eq!(keyed, "s3-9.AAAAAAAAACr");
    assert_eq!(
        WireCursor::parse(&keyed),
        Some(WireCursor::Keyed {
            event: id,
            key: token.stream_key()
        })
    );
    assert_eq!(WireCursor::parse(&keyed).unwrap().to_string(), keyed);
}

#[test]
fn keyed_cursors_need_a_whole_token() {
    for bad in [
        "s3-9.",
        "s3-9.abc",
        "s3-9.zz",
        "s3.1-9",
        "9.00",
        "s3-9.QAAAAAAAAAA",  // past 64 bits
        "s3-9.AAAAAAAAAA=",  // not base64url
        "s3-9.AAAAAAAAAAAA", // one too many
    ] {
        assert_eq!(WireCursor::parse(bad), None, "{bad:?} must be malformed");
    }
    let longest = format!("s{}-{}.{}", u32::MAX, u64::MAX, "P__________");
    assert!(longest.len() <= MAX_CURSOR_LEN);
    assert!(matches!(
        WireCursor::parse(&longest),
        Some(WireCursor::Keyed { .. })
    ));
}
