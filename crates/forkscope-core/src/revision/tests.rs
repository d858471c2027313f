use super::*;

fn modern<'a>() -> PostHead<'a> {
    PostHead {
        header_version: Some(MODERN),
        header_method: Some("tools/call"),
        header_name: Some("progress_task"),
        method: Some("tools/call"),
        is_request: true,
        meta_version: Some(MODERN),
        has_capabilities: true,
        name: Some("progress_task"),
        initialize_version: None,
        conflicting: None,
    }
}

fn legacy_call<'a>() -> PostHead<'a> {
    PostHead {
        header_version: Some(LEGACY),
        method: Some("tools/call"),
        is_request: true,
        name: Some("progress_task"),
        ..PostHead::default()
    }
}

#[test]
fn a_request_with_the_modern_meta_is_served_statelessly_and_anything_else_is_legacy() {
    let served = Protocols::Both;
    assert_eq!(
        classify_post(served, &modern()),
        Ok(Era::Modern(ModernRequest::CallTool))
    );
    assert_eq!(classify_post(served, &legacy_call()), Ok(Era::Legacy));
    let initialize = PostHead {
        method: Some("initialize"),
        is_request: true,
        ..PostHead::default()
    };
    assert_eq!(classify_post(served, &initialize), Ok(Era::Legacy));
    for (method, wanted) in [
        ("server/discover", ModernRequest::Discover),
        ("tools/list", ModernRequest::ListTools),
        ("subscriptions/listen", ModernRequest::Listen),
    ] {
        let head = PostHead {
            method: Some(method),
            header_method: Some(method),
            header_name: None,
            name: None,
            ..modern()
        };
        assert_eq!(classify_post(served, &head), Ok(Era::Modern(wanted)));
    }
}

#[test]
fn the_version_header_must_mirror_the_body() {
    let missing = PostHead {
        header_version: None,
        ..modern()
    };
    let other = PostHead {
        header_version: Some(MODERN),
        meta_version: Some("2026-01-01"),
        ..modern()
    };
    for head in [missing, other] {
        let refused = classify_post(Protocols::Both, &head).unwrap_err();
        assert_eq!((refused.status(), refused.code()), (400, HEADER_MISMATCH));
    }
    // The header says modern, the body carries no version: the body is malformed.
    let no_meta = PostHead {
        meta_version: None,
        ..modern()
    };
    assert_eq!(
        classify_post(Protocols::Both, &no_meta),
        Err(Refusal::MissingMeta(META_VERSION))
    );
}

#[test]
fn an_unserved_version_is_refused_with_the_ones_served() {
    let old = PostHead {
        header_version: Some("1900-01-01"),
        meta_version: Some("1900-01-01"),
        ..modern()
    };
    let Err(Refusal::Unsupported {
        requested,
        supported,
        ..
    }) = classify_post(Protocols::Both, &old)
    else {
        panic!("refused as unsupported")
    };
    assert_eq!(requested, "1900-01-01");
    assert_eq!(supported, [MODERN, LEGACY, "2025-06-18", "2025-03-26"]);
    // A legacy-only endpoint refuses modern requests the same way, listing only legacy.
    let Err(refused) = classify_post(Protocols::Legacy, &modern()) else {
        panic!("a legacy-only endpoint serves no modern request")
    };
    assert_eq!(refused.code(), UNSUPPORTED_PROTOCOL_VERSION);
    // A modern-only endpoint names what it serves to a legacy client's initialize.
    let initialize = PostHead {
        method: Some("initialize"),
        initialize_version: Some(LEGACY),
        is_request: true,
        ..PostHead::default()
    };
    let Err(Refusal::Unsupported { supported, .. }) = classify_post(Protocols::Modern, &initialize)
    else {
        panic!("refused")
    };
    assert_eq!(supported, [MODERN]);
    assert!(classify_post(Protocols::Modern, &legacy_call()).is_err());
}

#[test]
fn required_meta_and_mirrored_headers_are_checked_before_the_method() {
    let no_capabilities = PostHead {
        has_capabilities: false,
        ..modern()
    };
    let refused = classify_post(Protocols::Both, &no_capabilities).unwrap_err();
    assert_eq!((refused.status(), refused.code()), (400, -32602));
    for head in [
        PostHead {
            header_method: None,
            ..modern()
        },
        PostHead {
            header_method: Some("tools/list"),
            ..modern()
        },
        PostHead {
            header_name: None,
            ..modern()
        },
        PostHead {
            header_name: Some("other_tool"),
            ..modern()
        },
        PostHead {
            header_name: Some("=?base64?!!?="),
            ..modern()
        },
    ] {
        let refused = classify_post(Protocols::Both, &head).unwrap_err();
        assert_eq!(refused.code(), HEADER_MISMATCH, "{head:?}: {refused}");
    }
    // The base64 form of the same name mirrors it.
    let encoded = PostHead {
        header_name: Some("=?base64?cHJvZ3Jlc3NfdGFzaw==?="),
        ..modern()
    };
    assert_eq!(
        classify_post(Protocols::Both, &encoded),
        Ok(Era::Modern(ModernRequest::CallTool))
    );
}

#[test]
fn an_unknown_method_is_404_and_a_notification_is_accepted() {
    let unknown = PostHead {
        method: Some("prompts/list"),
        header_method: Some("prompts/list"),
        ..modern()
    };
    let refused = classify_post(Protocols::Both, &unknown).unwrap_err();
    assert_eq!((refused.status(), refused.code()), (404, -32601));
    // `initialize` carrying the modern meta is a modern request for a method 2026 lacks.
    let modern_initialize = PostHead {
        method: Some("initialize"),
        header_method: Some("initialize"),
        ..modern()
    };
    assert_eq!(
        classify_post(Protocols::Both, &modern_initialize).map_err(|r| r.status()),
        Err(404)
    );
    let notification = PostHead {
        method: Some("notifications/cancelled"),
        header_method: Some("notifications/cancelled"),
        is_request: false,
        ..modern()
    };
    assert_eq!(
        classify_post(Protocols::Both, &notification),
        Ok(Era::Modern(ModernRequest::Notification))
    );
}

#[test]
fn get_and_delete_are_legacy_only() {
    assert_eq!(
        classify_get_or_delete(Protocols::Both, Some(LEGACY)),
        Ok(())
    );
    assert_eq!(classify_get_or_delete(Protocols::Both, None), Ok(()));
    assert_eq!(
        classify_get_or_delete(Protocols::Legacy, Some(MODERN)),
        Ok(())
    );
    for (served, header) in [
        (Protocols::Both, Some(MODERN)),
        (Protocols::Modern, None),
        (Protocols::Modern, Some(LEGACY)),
    ] {
        let refused = classify_get_or_delete(served, header).unwrap_err();
        assert_eq!(refused.status(), 405);
    }
}

#[test]
fn protocols_are_named_once() {
    for p in Protocols::ALL {
        assert_eq!(p.name().parse::<Protocols>(), Ok(p));
    }
    assert!("2027".parse::<Protocols>().is_err());
    assert_eq!(Protocols::default(), Protocols::Both);
}

#[test]
fn a_task_method_names_its_task_in_mcp_name() {
    let get = PostHead {
        method: Some("tasks/get"),
        header_method: Some("tasks/get"),
        header_name: Some("0123"),
        name: Some("0123"),
        ..modern()
    };
    assert_eq!(
        classify_post(Protocols::Both, &get),
        Ok(Era::Modern(ModernRequest::GetTask))
    );
    let unrouted = PostHead {
        header_name: None,
        ..get
    };
    assert_eq!(
        classify_post(Protocols::Both, &unrouted).map_err(|r| r.code()),
        Err(HEADER_MISMATCH)
    );
}

/// Two values of one routing header: refused before anything reads either, in both eras.
#[test]
fn a_header_sent_twice_with_different_values_is_a_header_mismatch() {
    for head in [modern(), legacy_call()] {
        let conflicting = PostHead {
            conflicting: Some("Mcp-Name"),
            ..head
        };
        let refused = classify_post(Protocols::Both, &conflicting).unwrap_err();
        assert_eq!((refused.status(), refused.code()), (400, HEADER_MISMATCH));
        assert!(refused.to_string().contains("Mcp-Name"), "{refused}");
    }
}
