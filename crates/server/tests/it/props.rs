//! Property test: no body makes an ingestion route (`/api/event`, `/api/send`, `/api/batch`)
//! panic or answer 5xx.

use axum::http::StatusCode;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use crate::TestApp;

/// Bodies near the real ones, so the cases reach past the JSON parser.
fn body() -> impl Strategy<Value = Vec<u8>> {
    let value = prop_oneof![
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("false".to_owned()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|n| n.to_string()),
        ".{0,40}".prop_map(|s| serde_json::Value::String(s).to_string()),
        Just(r#""https://example.com/a?utm_source=x#h""#.to_owned()),
        Just(r#""/path""#.to_owned()),
        Just(r#""example.com,www.example.com""#.to_owned()),
        Just(r#""c37edc28-ee5f-4c62-9ce3-377fa6f600a8""#.to_owned()),
        Just(r#"{"currency":"EUR","amount":"1.5"}"#.to_owned()),
        Just(r#"{"a":"b","c":1,"d":{"e":[1]}}"#.to_owned()),
        Just(r#""{\"a\":\"b\"}""#.to_owned()),
        Just("[]".to_owned()),
    ];
    let key = prop_oneof![
        Just("n"),
        Just("name"),
        Just("u"),
        Just("url"),
        Just("d"),
        Just("domain"),
        Just("r"),
        Just("p"),
        Just("props"),
        Just("h"),
        Just("i"),
        Just("revenue"),
        Just("$"),
        Just("type"),
        Just("website"),
        Just("hostname"),
        Just("data"),
    ];
    let object = proptest::collection::vec((key, value), 0..8).prop_map(|fields| {
        let inner: Vec<String> = fields.iter().map(|(k, v)| format!("{k:?}:{v}")).collect();
        format!("{{{}}}", inner.join(","))
    });
    let send = prop_oneof![
        object.clone(),
        (Just("event"), object.clone()).prop_map(|(t, p)| format!(r#"{{"type":"{t}","payload":{p}}}"#)),
        Just("[]".to_owned()),
        Just("null".to_owned()),
    ];
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..256),
        object.clone().prop_map(String::into_bytes),
        (Just("event"), object).prop_map(|(t, p)| format!(r#"{{"type":"{t}","payload":{p}}}"#).into_bytes()),
        // Umami's batches: lists of /api/send bodies.
        proptest::collection::vec(send, 0..5).prop_map(|items| format!("[{}]", items.join(",")).into_bytes()),
    ]
}

#[test]
fn arbitrary_bodies_never_5xx() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let app = runtime.block_on(TestApp::spawn());
    let cases = std::sync::atomic::AtomicU32::new(0);
    let mut runner = TestRunner::new(Config { cases: 256, ..Config::default() });
    runner
        .run(&body(), |bytes| {
            cases.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            for path in ["/api/event", "/api/send", "/api/batch"] {
                let answer = runtime.block_on(app.post(path, "text/plain", bytes.clone()));
                prop_assert!(
                    answer.status.is_success() || answer.status.is_client_error(),
                    "{path} answered {}",
                    answer.status
                );
                if answer.status == StatusCode::BAD_REQUEST {
                    prop_assert!(answer.body.starts_with(r#"{"error":"#), "{}", answer.body);
                }
            }
            Ok(())
        })
        .unwrap();
    assert!(cases.into_inner() >= 256);
}
