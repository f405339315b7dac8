//! Tally's tracker script: served with its type and an ETag, revalidated with a 304, and small
//! enough (≤ 2 KB gzipped, the spec's budget, measured on exactly the bytes served).

use std::io::Write;

use axum::http::{Method, StatusCode, header};

use crate::TestApp;

#[tokio::test]
async fn the_tracker_is_served_with_an_etag_and_revalidated() {
    let app = TestApp::spawn().await;
    let first = app.send(Method::GET, "/js/script.js", &[], "").await;
    assert_eq!(first.status, StatusCode::OK);
    assert!(first.headers[header::CONTENT_TYPE].to_str().unwrap().starts_with("application/javascript"));
    let etag = first.headers[header::ETAG].to_str().unwrap().to_owned();
    assert!(etag.starts_with('"') && etag.len() > 4, "{etag}");
    let again = app.send(Method::GET, "/js/script.js", &[("if-none-match", etag.as_str())], "").await;
    assert_eq!(again.status, StatusCode::NOT_MODIFIED);
    assert!(again.body.is_empty());
    let stale = app.send(Method::GET, "/js/tally.js", &[("if-none-match", "\"0\"")], "").await;
    assert_eq!(stale.status, StatusCode::OK);
    assert_eq!(stale.body, first.body);
}

#[tokio::test]
async fn the_tracker_fits_in_two_kilobytes_gzipped() {
    let app = TestApp::spawn().await;
    let served = app.send(Method::GET, "/js/script.js", &[], "").await.body;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(served.as_bytes()).unwrap();
    let size = gz.finish().unwrap().len();
    eprintln!("tracker: {} bytes, {size} bytes gzipped", served.len());
    assert!(size <= 2048, "the tracker is {size} bytes gzipped, over the 2 KB budget");
}

#[tokio::test]
async fn the_tracker_sends_what_the_event_route_reads_without_a_preflight() {
    let app = TestApp::spawn().await;
    let script = app.send(Method::GET, "/js/script.js", &[], "").await.body;
    // The body shape it builds, with every field it may set.
    for field in [
        "n: n",
        "u: o.u || l.href",
        "d: dom",
        "r: d.referrer",
        "b.h = 1",
        "b.p = o.props",
        "b.$ = o.revenue",
        "b.i = false",
    ] {
        assert!(script.contains(field), "the tracker sets {field}");
    }
    assert!(script.contains(r#"type: "text/plain""#), "beacons are text/plain, so no CORS preflight");
    assert!(!script.contains("document.cookie") && !script.contains("setItem"), "no cookie, no stored id");
    let body = r#"{"n":"engagement","u":"https://example.com/a","d":"example.com","r":null,"i":false,"p":{"scroll_depth":"80","engaged_ms":"5300"}}"#;
    let answer = app.post("/api/event", "text/plain", body).await;
    assert_eq!(answer.status, StatusCode::ACCEPTED, "{}", answer.body);
    let events = app.recorder.take();
    assert_eq!(events.len(), 1);
    assert!(!events[0].0.interactive);
    assert!(events[0].0.props.contains(&("scroll_depth".to_owned(), "80".to_owned())));
}

#[test]
fn the_served_tracker_is_the_source_without_comments_or_indentation() {
    use server::tracker::{SCRIPT, SOURCE};
    assert!(SCRIPT.len() < SOURCE.len());
    let kept: Vec<&str> = SOURCE
        .lines()
        .map(str::trim_start)
        .filter(|l| !(l.is_empty() || l.starts_with("//") || (l.starts_with("/*") && l.ends_with("*/"))))
        .collect();
    assert_eq!(SCRIPT.lines().collect::<Vec<_>>(), kept);
    assert!(SOURCE.lines().any(|l| l.trim_start().starts_with("//")), "the source has comments to strip");
    assert!(!SCRIPT.lines().any(|l| l.starts_with(' ') || l.starts_with("//")));
}
