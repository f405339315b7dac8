//! `POST /api/event`, `POST /api/send`, CORS and `/health`, as the trackers use them.

use analytics::pipeline::SiteSelector;
use axum::http::{Method, StatusCode};
use expect_test::expect;

use crate::{BROWSER, TestApp, UNKNOWN_WEBSITE};

#[tokio::test]
async fn plausible_tracker_request_is_accepted() {
    let app = TestApp::spawn().await;
    // The request Plausible's tracker makes: JSON with short names, labelled text/plain.
    let body = r#"{"n":"pageview","v":25,"u":"https://example.com/docs?utm_source=hn","d":"example.com","r":"https://news.ycombinator.com/"}"#;
    let answer = app
        .send(
            Method::POST,
            "/api/event",
            &[("content-type", "text/plain"), ("user-agent", BROWSER), ("origin", "https://example.com")],
            body,
        )
        .await;
    assert_eq!(answer.status, StatusCode::ACCEPTED);
    assert_eq!(answer.body, "ok");
    assert_eq!(answer.headers["access-control-allow-origin"], "*");
    let events = app.recorder.take();
    assert_eq!(events.len(), 1);
    let (raw, site) = &events[0];
    assert_eq!(*site, SiteSelector::Domain);
    assert_eq!(raw.name, "pageview");
    assert_eq!(raw.url, "https://example.com/docs?utm_source=hn");
    assert_eq!(raw.domain, "example.com");
    assert_eq!(raw.referrer.as_deref(), Some("https://news.ycombinator.com/"));
    assert_eq!(raw.user_agent, BROWSER);
    assert!(raw.peer_ip.is_loopback());
    assert!(raw.timestamp_ms > 1_700_000_000_000);
    assert_eq!(raw.headers.get("Origin"), Some("https://example.com"));
}

#[tokio::test]
async fn plausible_long_names_domains_props_and_revenue() {
    let app = TestApp::spawn().await;
    let cases = [
        r#"{"name":"Signup","url":"https://example.com/","domain":"example.com","props":{"plan":"pro"}}"#,
        r#"{"n":"pageview","u":"https://blog.example.com/","d":"example.com,blog.example.com"}"#,
        r#"{"n":"Signup","u":"https://example.com/","d":"example.com","p":"{\"plan\":\"pro\",\"seats\":3}"}"#,
        r#"{"n":"Purchase","u":"https://example.com/","d":"example.com","revenue":{"currency":"EUR","amount":"19.99"}}"#,
        r#"{"n":"Purchase","u":"https://example.com/","d":"example.com","revenue":{"currency":"USD","amount":5}}"#,
    ];
    for body in cases {
        let answer = app.post("/api/event", "application/json", body).await;
        assert_eq!((answer.status, answer.body.as_str()), (StatusCode::ACCEPTED, "ok"), "{body}");
    }
    let events = app.recorder.take();
    let summary: Vec<_> =
        events.iter().map(|(e, _)| format!("{} {} {:?} {:?}", e.name, e.domain, e.props, e.revenue)).collect();
    expect![[r#"
        [
            "Signup example.com [(\"plan\", \"pro\")] None",
            "pageview example.com,blog.example.com [] None",
            "Signup example.com [(\"plan\", \"pro\"), (\"seats\", \"3\")] None",
            "Purchase example.com [] Some(RawRevenue { amount: \"19.99\", currency: \"EUR\" })",
            "Purchase example.com [] Some(RawRevenue { amount: \"5\", currency: \"USD\" })",
        ]
    "#]]
    .assert_debug_eq(&summary);
}

/// Plausible's tracker sends a page's scroll depth and engaged time as `sd` and `e` of an
/// `engagement` event; they are kept as the properties Tally's tracker uses, so both trackers'
/// engagement reads alike (and another event's `sd` means nothing).
#[tokio::test]
async fn plausible_engagement_keeps_scroll_depth_and_engaged_time() {
    let app = TestApp::spawn().await;
    let cases = [
        r#"{"n":"engagement","u":"https://example.com/a","d":"example.com","sd":73,"e":5120,"i":false}"#,
        r#"{"n":"engagement","u":"https://example.com/a","d":"example.com","sd":-4,"e":"x","p":{"scroll_depth":"40"}}"#,
        r#"{"n":"pageview","u":"https://example.com/a","d":"example.com","sd":73}"#,
    ];
    for body in cases {
        let answer = app.post("/api/event", "text/plain", body).await;
        assert_eq!(answer.status, StatusCode::ACCEPTED, "{body}");
    }
    let props: Vec<_> = app.recorder.take().iter().map(|(e, _)| e.props.clone()).collect();
    let pairs =
        |list: &[(&str, &str)]| list.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect::<Vec<_>>();
    assert_eq!(
        props,
        vec![pairs(&[("scroll_depth", "73"), ("engaged_ms", "5120")]), pairs(&[("scroll_depth", "40")]), pairs(&[])]
    );
}

#[tokio::test]
async fn plausible_dropped_and_unknown_site_still_202() {
    let app = TestApp::spawn().await;
    let dropped =
        app.post("/api/event", "text/plain", r#"{"n":"Bot","u":"https://example.com/","d":"example.com"}"#).await;
    assert_eq!((dropped.status, dropped.body.as_str()), (StatusCode::ACCEPTED, "ok"));
    let unknown =
        app.post("/api/event", "text/plain", r#"{"n":"pageview","u":"https://x.com/","d":"unknown.example"}"#).await;
    assert_eq!((unknown.status, unknown.body.as_str()), (StatusCode::ACCEPTED, "ok"));
}

#[tokio::test]
async fn plausible_malformed_bodies_are_400_with_a_message() {
    let app = TestApp::spawn().await;
    let cases = [
        "{not json",
        "[]",
        r#"{"u":"https://example.com/","d":"example.com"}"#,
        r#"{"n":"pageview","u":42,"d":"example.com"}"#,
        r#"{"n":"pageview","u":"ftp://example.com/","d":"example.com"}"#,
        r#"{"n":"pageview","u":"https://example.com/","d":"exa mple.com"}"#,
    ];
    let mut answers = Vec::new();
    for body in cases {
        let answer = app.post("/api/event", "text/plain", body).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(answer.headers["content-type"], "application/json");
        answers.push(answer.body);
    }
    expect![[r#"
        [
            "{\"error\":\"body is not valid JSON: key must be a string at line 1 column 2\",\"field\":\"body\"}",
            "{\"error\":\"body must be a JSON object, not an array\",\"field\":\"body\"}",
            "{\"error\":\"name is required\",\"field\":\"name\"}",
            "{\"error\":\"url must be a string, not a number\",\"field\":\"url\"}",
            "{\"error\":\"url scheme must be http or https, not \\\"ftp\\\"\",\"field\":\"url\"}",
            "{\"error\":\"domain \\\"exa mple.com\\\" is not a valid host name\",\"field\":\"domain\"}",
        ]
    "#]]
    .assert_debug_eq(&answers);
}

#[tokio::test]
async fn oversized_body_is_rejected_with_json() {
    let app = TestApp::spawn().await;
    let padding = "x".repeat(server::MAX_BODY_BYTES);
    let body = format!(r#"{{"n":"pageview","u":"https://example.com/","d":"example.com","p":{{"a":"{padding}"}}}}"#);
    for path in ["/api/event", "/api/send"] {
        let answer = app.post(path, "text/plain", body.clone()).await;
        assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(answer.body, r#"{"error":"body is larger than 65536 bytes","field":"body"}"#);
    }
    assert!(app.recorder.take().is_empty());
}

#[tokio::test]
async fn cors_preflight_is_answered() {
    let app = TestApp::spawn().await;
    for path in ["/api/event", "/api/send"] {
        let answer = app
            .send(
                Method::OPTIONS,
                path,
                &[
                    ("origin", "https://example.com"),
                    ("access-control-request-method", "POST"),
                    (
                        "access-control-request-headers",
                        "content-type,x-umami-cache,x-umami-hostname,x-umami-website-id",
                    ),
                ],
                "",
            )
            .await;
        assert!(answer.status.is_success(), "{path}: {}", answer.status);
        assert_eq!(answer.headers["access-control-allow-origin"], "*");
        assert_eq!(answer.headers["access-control-allow-methods"], "POST, OPTIONS");
        assert_eq!(
            answer.headers["access-control-allow-headers"],
            "content-type,x-umami-cache,x-umami-hostname,x-umami-website-id"
        );
        assert_eq!(answer.headers["access-control-max-age"], "86400");
    }
}

#[tokio::test]
async fn pipeline_failure_is_a_generic_500() {
    let app = TestApp::spawn().await;
    app.recorder.failing.store(true, std::sync::atomic::Ordering::Relaxed);
    let plausible =
        app.post("/api/event", "text/plain", r#"{"n":"pageview","u":"https://example.com/","d":"example.com"}"#).await;
    let umami = app
        .post(
            "/api/send",
            "application/json",
            format!(r#"{{"type":"event","payload":{{"website":"{WEBSITE}","hostname":"example.com"}}}}"#),
        )
        .await;
    for answer in [plausible, umami] {
        // The cause is logged, never sent to the client.
        assert_eq!(answer.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(answer.body, r#"{"error":"internal server error"}"#);
    }
}

const WEBSITE: &str = "c37edc28-ee5f-4c62-9ce3-377fa6f600a8";

#[tokio::test]
async fn umami_tracker_request_is_accepted_with_a_cache_token() {
    let app = TestApp::spawn().await;
    // The request Umami's tracker makes for a page view.
    let body = format!(
        r#"{{"type":"event","payload":{{"website":"{WEBSITE}","hostname":"example.com","screen":"1920x1080","language":"en-US","title":"Pricing","url":"/pricing?plan=pro","referrer":"https://www.google.com/"}}}}"#
    );
    let answer = app.post("/api/send", "application/json", body.clone()).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.headers["access-control-allow-origin"], "*");
    let json: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
    let token = json["cache"].as_str().unwrap().to_owned();
    // The tracker sends the token back on its next request; its newest version sends an absolute
    // URL and names the website and host in headers too.
    let body = format!(
        r#"{{"type":"event","payload":{{"website":"{WEBSITE}","screen":"390x844","language":"de-DE","title":"Pricing","hostname":"example.com","url":"https://example.com/pricing?plan=pro","referrer":"https://example.com/","name":"Signup","data":{{"plan":"pro"}}}}}}"#
    );
    let again = app
        .send(
            Method::POST,
            "/api/send",
            &[
                ("content-type", "application/json"),
                ("user-agent", BROWSER),
                ("x-umami-cache", &token),
                ("x-umami-website-id", WEBSITE),
                ("x-umami-hostname", "example.com"),
            ],
            body,
        )
        .await;
    assert_eq!(again.status, StatusCode::OK);
    let events = app.recorder.take();
    assert_eq!(events.len(), 2);
    let (raw, site) = &events[0];
    assert_eq!(*site, SiteSelector::UmamiWebsite(WEBSITE.into()));
    assert_eq!(raw.url, "https://example.com/pricing?plan=pro");
    assert_eq!(raw.domain, "example.com");
    assert_eq!(raw.name, "pageview");
    assert_eq!(raw.user_agent, BROWSER);
    let (raw, _) = &events[1];
    assert_eq!((raw.name.as_str(), raw.url.as_str()), ("Signup", "https://example.com/pricing?plan=pro"));
    assert_eq!(raw.props, [("plan".to_owned(), "pro".to_owned())]);
}

#[tokio::test]
async fn umami_answers() {
    let app = TestApp::spawn().await;
    let send = |kind: &str, payload: &str| format!(r#"{{"type":"{kind}","payload":{{{payload}}}}}"#);
    let cases = [
        send("event", &format!(r#""website":"{WEBSITE}","hostname":"example.com","url":"/","name":"Bot""#)),
        send("event", &format!(r#""website":"{UNKNOWN_WEBSITE}","hostname":"example.com","url":"/""#)),
        send("identify", &format!(r#""website":"{WEBSITE}","data":{{"plan":"pro"}}"#)),
        send("event", r#""website":"nope""#),
        "{".to_owned(),
    ];
    let mut answers = Vec::new();
    for body in cases {
        let answer = app.post("/api/send", "application/json", body).await;
        answers.push(format!("{} {}", answer.status.as_u16(), answer.body));
    }
    expect![[r#"
        [
            "200 {\"beep\":\"boop\"}",
            "400 {\"error\":\"Website not found.\"}",
            "200 {\"cache\":\"tally.c37edc28-ee5f-4c62-9ce3-377fa6f600a8\"}",
            "400 {\"error\":\"payload.website must be a UUID\",\"field\":\"payload.website\"}",
            "400 {\"error\":\"body is not valid JSON: EOF while parsing an object at line 1 column 1\",\"field\":\"body\"}",
        ]
    "#]]
    .assert_debug_eq(&answers);
}

#[tokio::test]
async fn health() {
    let app = TestApp::spawn().await;
    let answer = app.send(Method::GET, "/health", &[], "").await;
    assert_eq!((answer.status, answer.body.as_str()), (StatusCode::OK, r#"{"status":"ok"}"#));
}

/// A health check that fails until told otherwise.
struct Switch(std::sync::atomic::AtomicBool);

#[async_trait::async_trait]
impl server::HealthCheck for Switch {
    async fn check(&self) -> Result<(), String> {
        if self.0.load(std::sync::atomic::Ordering::Relaxed) {
            Ok(())
        } else {
            Err("the store at 10.0.0.7 is down".into())
        }
    }
}

/// `/health` says unavailable, and only that: the check's reason (here as a store's error would
/// name a host) is logged, never answered (it was, to anyone).
#[tokio::test]
async fn health_answers_unavailable_while_its_check_fails() {
    let switch = std::sync::Arc::new(Switch(false.into()));
    let check = switch.clone();
    let app = TestApp::spawn_with(move |state| state.with_health(check)).await;
    let answer = app.send(Method::GET, "/health", &[], "").await;
    assert_eq!((answer.status, answer.body.as_str()), (StatusCode::SERVICE_UNAVAILABLE, r#"{"status":"unavailable"}"#));
    switch.0.store(true, std::sync::atomic::Ordering::Relaxed);
    let answer = app.send(Method::GET, "/health", &[], "").await;
    assert_eq!((answer.status, answer.body.as_str()), (StatusCode::OK, r#"{"status":"ok"}"#));
}

#[tokio::test]
async fn umami_batch_takes_each_body_in_order_and_reports_the_failures() {
    let app = TestApp::spawn().await;
    let website = "c37edc28-ee5f-4c62-9ce3-377fa6f600a8";
    let event = |url: &str| serde_json::json!({ "type": "event", "payload": { "website": website, "hostname": "example.com", "url": url } });
    let batch = serde_json::json!([
        event("/a"),
        event("/b"),
        { "type": "event", "payload": { "hostname": "example.com", "url": "/no-website" } },
        event("/c"),
        { "type": "event", "payload": { "website": UNKNOWN_WEBSITE, "hostname": "example.com", "url": "/x" } },
    ]);
    let answer = app
        .send(
            Method::POST,
            "/api/batch",
            &[("content-type", "application/json"), ("user-agent", BROWSER)],
            batch.to_string(),
        )
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(answer.headers["access-control-allow-origin"], "*");
    expect![[r#"{"size":5,"processed":3,"errors":2,"details":[{"index":2,"response":{"error":"payload.website is required","field":"payload.website"}},{"index":4,"response":{"error":"Website not found."}}]}"#]]
        .assert_eq(&answer.body);
    let events = app.recorder.take();
    let urls: Vec<_> = events.iter().map(|(e, _)| e.url.as_str()).collect();
    assert_eq!(
        urls,
        ["https://example.com/a", "https://example.com/b", "https://example.com/c", "https://example.com/x"]
    );
    assert!(events[..3].iter().all(|(_, site)| *site == SiteSelector::UmamiWebsite(website.into())));
}

#[tokio::test]
async fn umami_batch_refuses_a_body_that_is_not_a_list_or_too_long_and_takes_nothing() {
    let app = TestApp::spawn().await;
    let one = serde_json::json!({ "type": "event", "payload": { "website": "c37edc28-ee5f-4c62-9ce3-377fa6f600a8", "hostname": "example.com", "url": "/" } });
    let too_many = serde_json::Value::Array(vec![one.clone(); 1001]).to_string();
    for (body, says) in [
        (one.to_string(), "body must be an array of /api/send bodies, not an object"),
        ("[{".to_owned(), "body is not valid JSON"),
        (too_many, "a batch holds at most 1000 events, not 1001"),
    ] {
        let answer = app.post("/api/batch", "application/json", body.clone()).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", answer.body);
        assert!(answer.body.contains(says), "{}", answer.body);
    }
    assert!(app.recorder.take().is_empty());
    let preflight = app
        .send(
            Method::OPTIONS,
            "/api/batch",
            &[("origin", "https://example.com"), ("access-control-request-method", "POST")],
            "",
        )
        .await;
    assert_eq!(preflight.status, StatusCode::NO_CONTENT);
    assert_eq!(preflight.headers["access-control-allow-origin"], "*");
}
