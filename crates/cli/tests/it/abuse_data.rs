//! The abuse suite, data side: what clients may send that reaches storage or a query — the
//! longest value of every field in every ingestion format, values just over the limits, deeply
//! nested and huge JSON, 10,000 small requests for random sites and paths, and the giant
//! `time:hour` query. After each, the server must still answer `/health` within a second, a
//! fresh event must still reach the Stats API (aggregation advances, no flush error), and its
//! peak resident memory must stay under [`MAX_RSS_KB`].
//!
//! Regression suite for the hardening issue: a page URL of about 1,100 bytes used to stop
//! aggregation for every site, and one `time:hour` query over five centuries took 1.2 GB.

use std::time::{Duration, Instant};

use jiff::Timestamp;
use serde_json::{Value, json};

use crate::support::{Client, Response, Server, SiteSetup, add_site, ua};

/// The most a `tally serve` (debug build) may hold resident at its peak (`VmHWM`) through any of
/// these: the spec's 150 MB for sustained ingestion, with room for the debug build and the
/// test's own embedded-engine cache; one giant query used to take 1.2 GB.
const MAX_RSS_KB: u64 = 300 * 1024;

/// How long a fresh event may take to reach the Stats API: generous, for a loaded machine
/// (flushes run every 200 ms here).
const ADVANCE_DEADLINE: Duration = Duration::from_secs(60);

/// A peak resident memory figure of the server, from `/proc/{pid}/status`, in KiB.
fn peak_rss_kb(server: &Server) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.pid())).expect("the server's status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/{pid}/status")
}

fn today() -> jiff::civil::Date {
    Timestamp::now().to_zoned(jiff::tz::TimeZone::UTC).date()
}

/// A Stats API query for `site`.
fn query(server: &Server, site: &SiteSetup, body: &Value) -> Response {
    let auth = format!("Bearer {}", site.key);
    server.client().post_json("/api/v2/query", &[("authorization", &auth)], body)
}

/// What each scenario must leave behind: `/health` answered within a second (the best of three
/// tries, so one stall of a loaded machine is not a failure), a fresh page view counted by the
/// Stats API, no flush error, and the peak resident memory under the bound.
fn still_healthy(server: &Server, site: &SiteSetup, after: &str) {
    let fastest = (0..3)
        .map(|_| {
            let started = Instant::now();
            let response = server.client().request("GET", "/health", &[], b"");
            assert_eq!(response.status, 200, "after {after}: /health answered {}", response.text());
            started.elapsed()
        })
        .min()
        .unwrap_or_default();
    assert!(fastest < Duration::from_secs(1), "after {after}: /health took {fastest:?}");

    let path = format!("/fresh/{}", rand::random::<u64>());
    let body = json!({"n": "pageview", "u": format!("https://{}{path}", site.domain), "d": site.domain});
    let headers =
        [("content-type", "text/plain"), ("user-agent", ua::FIREFOX_LINUX), ("x-forwarded-for", "198.51.100.7")];
    let response = server.client().request("POST", "/api/event", &headers, body.to_string().as_bytes());
    assert_eq!(response.status, 202, "after {after}: the fresh event: {}", response.text());
    let yesterday = today().yesterday().expect("a date").to_string();
    let tomorrow = today().tomorrow().expect("a date").to_string();
    let q = json!({"site_id": site.domain, "metrics": ["pageviews"], "date_range": [yesterday, tomorrow],
                   "dimensions": ["event:page"], "filters": [["is", "event:page", [path]]]});
    let deadline = Instant::now() + ADVANCE_DEADLINE;
    loop {
        let answer = query(server, site, &q);
        assert_eq!(answer.status, 200, "after {after}: the Stats API: {}", answer.text());
        if answer.json()["results"].as_array().is_some_and(|rows| !rows.is_empty()) {
            break;
        }
        assert!(Instant::now() < deadline, "after {after}: a fresh event never reached the Stats API");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(server.metric("tally_flush_item_errors_total"), 0.0, "after {after}: an item could not be flushed");
    assert_eq!(server.metric("tally_flush_errors_total"), 0.0, "after {after}: a flush failed");
    let peak = peak_rss_kb(server);
    eprintln!("after {after}: peak resident {peak} KiB");
    assert!(peak < MAX_RSS_KB, "after {after}: the server peaked at {peak} KiB resident, over {MAX_RSS_KB}");
}

/// `n` bytes of `unit` repeated (whole units).
fn fill(unit: &str, bytes: usize) -> String {
    unit.repeat(bytes / unit.len())
}

/// The longest page URL accepted (2,000 bytes), its path of characters a storage key escapes to
/// three bytes each, with every `utm_*` parameter.
fn longest_url(domain: &str) -> String {
    let base = format!("https://{domain}/");
    let query = ["utm_source", "utm_medium", "utm_campaign", "utm_content", "utm_term"]
        .iter()
        .map(|p| format!("{p}={}", fill("!", 150)))
        .collect::<Vec<_>>()
        .join("&");
    let path = fill("!", 2000 - base.len() - query.len() - 1);
    let url = format!("{base}{path}?{query}");
    assert_eq!(url.len(), 2000);
    url
}

/// 30 properties with 300-byte keys and values as long as `value_bytes`.
fn widest_props(value_bytes: usize) -> Value {
    Value::Object((0..30).map(|i| (format!("{i:02}{}", fill("#", 298)), json!(fill("#", value_bytes)))).collect())
}

fn browser() -> [(&'static str, &'static str); 3] {
    [("user-agent", ua::CHROME_WINDOWS), ("x-forwarded-for", "203.0.113.50"), ("cf-ipcountry", "DE")]
}

fn post(server: &Server, path: &str, content_type: &str, extra: &[(&str, &str)], body: &[u8]) -> Response {
    let mut headers = vec![("content-type", content_type)];
    headers.extend_from_slice(&browser());
    headers.extend_from_slice(extra);
    server.client().request("POST", path, &headers, body)
}

fn setup() -> (tempfile::TempDir, SiteSetup, Server) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = dir.path().join("data");
    let site = add_site(&store, "abuse.example", "UTC");
    let server = Server::start(&store);
    (dir, site, server)
}

/// Regression (critical): a page URL or property value of about 1,100 bytes was accepted, its
/// aggregate key was too long for DynamoDB, the flush failed silently and no dashboard moved
/// again. Every format's longest values are accepted and aggregated, and the values just over
/// the limits are refused without harm.
#[test]
fn the_longest_values_of_every_ingestion_format_are_aggregated_and_over_long_ones_refused() {
    let (_dir, site, server) = setup();
    let d = site.domain.as_str();
    let url = longest_url(d);
    let name = fill("#", 120);
    let referrer = format!("https://ref.example/{}", fill("!", 1970));

    // Plausible's Events API, JSON; the widest props fit the 64 KB body with 1,500-byte values.
    let body = json!({"n": name, "u": url, "d": d, "r": referrer, "p": widest_props(1500)});
    let answer = post(&server, "/api/event", "application/json", &[], body.to_string().as_bytes());
    assert_eq!(answer.status, 202, "Plausible: {}", answer.text());
    // The longest property value, and a page view.
    let body = json!({"n": "pageview", "u": url, "d": d, "r": referrer, "p": {fill("#", 300): fill("#", 2000)}});
    let answer = post(&server, "/api/event", "application/json", &[], body.to_string().as_bytes());
    assert_eq!(answer.status, 202, "Plausible: {}", answer.text());
    // Tally's tracker: text/plain beacons, hash routing with the longest fragment.
    let hashed = format!("https://{d}/#{}", fill(" ", 2000 - d.len() - 10));
    let body = json!({"n": "pageview", "u": hashed, "d": d, "r": null, "h": 1});
    let answer = post(&server, "/api/event", "text/plain", &[], body.to_string().as_bytes());
    assert_eq!(answer.status, 202, "tracker: {}", answer.text());
    // Umami's /api/send: a page view and a custom event with the widest data.
    // Umami sends the path; the page URL it makes with the hostname is the longest accepted.
    let umami_url = format!("/{}", fill("!", 2000 - format!("https://{d}/").len()));
    for (name, data) in [(None, Value::Null), (Some(fill("#", 50)), widest_props(1500))] {
        let mut payload = json!({"website": site.umami_id, "hostname": d, "screen": "1920x1080", "language": "en",
                                 "title": fill("t", 500), "url": umami_url, "referrer": referrer});
        if let Some(name) = name {
            payload["name"] = json!(name);
            payload["data"] = data;
        }
        let body = json!({"type": "event", "payload": payload});
        let answer = post(&server, "/api/send", "application/json", &[], body.to_string().as_bytes());
        assert_eq!(answer.status, 200, "Umami: {}", answer.text());
    }
    // /api/import, NDJSON and CSV.
    let auth = format!("Bearer {}", site.key);
    let now = Timestamp::now().as_millisecond();
    let line = json!({"timestamp": now - 60_000, "url": url, "name": name, "referrer": referrer,
                      "user_agent": ua::SAFARI_MAC, "visitor": "v1", "props": widest_props(2000)});
    let answer = post(
        &server,
        "/api/import",
        "application/x-ndjson",
        &[("authorization", &auth)],
        format!("{line}\n").as_bytes(),
    );
    assert_eq!(answer.status, 200, "import NDJSON: {}", answer.text());
    assert_eq!(
        (answer.json()["imported"].as_u64(), answer.json()["errors"].as_array().map(Vec::len)),
        (Some(1), Some(0))
    );
    let csv = format!(
        "timestamp,url,name,referrer,user_agent,visitor,props.{key}\n{ts},\"{url}\",\"{name}\",\"{referrer}\",\"{ua}\",v2,\"{value}\"\n",
        key = fill("#", 300),
        ts = now - 30_000,
        ua = ua::SAFARI_MAC,
        value = fill("#", 2000),
    );
    let answer = post(&server, "/api/import?format=csv", "text/csv", &[("authorization", &auth)], csv.as_bytes());
    assert_eq!(answer.status, 200, "import CSV: {}", answer.text());
    assert_eq!(answer.json()["imported"].as_u64(), Some(1), "import CSV: {}", answer.text());
    still_healthy(&server, &site, "the longest values");

    // The long page is a row of its own, shown as its start.
    let q = json!({"site_id": d, "metrics": ["pageviews"], "date_range": "day", "dimensions": ["event:page"]});
    let rows = query(&server, &site, &q).json()["results"].clone();
    assert!(
        rows.as_array()
            .into_iter()
            .flatten()
            .any(|r| r["dimensions"][0].as_str().is_some_and(|p| p.starts_with("/!!!!"))),
        "{rows}"
    );

    // Just over the limits: refused with a reason, nothing stored, nothing broken.
    let over = [
        json!({"n": fill("#", 121), "u": format!("https://{d}/"), "d": d}),
        json!({"n": "pageview", "u": format!("{url}x"), "d": d}),
        json!({"n": "x", "u": format!("https://{d}/"), "d": d, "p": {fill("#", 301): "v"}}),
        json!({"n": "x", "u": format!("https://{d}/"), "d": d, "p": {"k": fill("#", 2001)}}),
        json!({"n": "x", "u": format!("https://{d}/"), "d": d,
               "p": Value::Object((0..31).map(|i| (format!("k{i}"), json!("v"))).collect())}),
    ];
    for body in &over {
        let answer = post(&server, "/api/event", "application/json", &[], body.to_string().as_bytes());
        assert_eq!(answer.status, 400, "{}: {}", &body.to_string()[..60.min(body.to_string().len())], answer.text());
    }
    let line = json!({"timestamp": now, "url": format!("{url}x"), "visitor": "v3"});
    let answer = post(
        &server,
        "/api/import",
        "application/x-ndjson",
        &[("authorization", &auth)],
        format!("{line}\n").as_bytes(),
    );
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(answer.json()["imported"].as_u64(), Some(0));
    assert!(answer.text().contains("more than 2000"), "{}", answer.text());
    still_healthy(&server, &site, "values just over the limits");
}

/// Deeply nested and huge JSON to every JSON endpoint: refused (400 or 413), never a 5xx, and
/// the server is none the worse.
#[test]
fn deeply_nested_and_huge_json_is_refused_without_harm() {
    let (_dir, site, server) = setup();
    let d = site.domain.as_str();
    let auth = format!("Bearer {}", site.key);
    let nested = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    let deep_props =
        format!(r#"{{"n":"x","u":"https://{d}/","d":"{d}","p":{}1{}}}"#, "{\"a\":".repeat(30_000), "}".repeat(30_000));
    let huge = format!(r#"{{"n":"x","u":"https://{d}/","d":"{d}","p":{{"k":"{}"}}}}"#, "x".repeat(8 * 1024 * 1024));
    let wide = format!("[{}0]", "0,".repeat(30_000));
    let bodies: Vec<(&str, String)> =
        vec![("nested arrays", nested(32_000)), ("nested props", deep_props), ("a wide array", wide), ("8 MB", huge)];
    for (what, body) in &bodies {
        for (path, extra) in [
            ("/api/event", vec![]),
            ("/api/send", vec![]),
            ("/api/v2/query", vec![("authorization", auth.as_str())]),
            ("/api/funnel", vec![("authorization", auth.as_str())]),
            ("/api/import", vec![("authorization", auth.as_str())]),
        ] {
            let answer = post(&server, path, "application/json", &extra, body.as_bytes());
            // An import reads line by line: a line that is not an event is reported, not fatal.
            let reported = path == "/api/import" && answer.status == 200 && answer.json()["imported"] == json!(0);
            let refused = (400..500).contains(&answer.status);
            assert!(refused || reported, "{what} to {path}: {} {}", answer.status, answer.text());
        }
    }
    still_healthy(&server, &site, "deeply nested and huge JSON");
}

/// 10,000 small requests for random sites (most unknown) and random paths (many on the real
/// site, each a new aggregate row): caches stay bounded and aggregation keeps up.
#[test]
fn ten_thousand_requests_for_random_sites_and_paths_leave_the_server_well() {
    let (_dir, site, server) = setup();
    let addr = server.addr;
    let domain = site.domain.clone();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let domain = domain.clone();
            std::thread::spawn(move || {
                let mut client = Client::connect(addr);
                for i in 0..2500 {
                    let r: u64 = rand::random();
                    let d = if i % 4 == 0 { domain.clone() } else { format!("s{r:x}.example") };
                    let body = json!({"n": "pageview", "u": format!("https://{d}/p/{r:x}/{t}"), "d": d});
                    let ip = format!("10.{}.{}.{}", t, (i / 250) % 250, i % 250);
                    let headers = [
                        ("content-type", "text/plain"),
                        ("user-agent", ua::FIREFOX_LINUX),
                        ("x-forwarded-for", ip.as_str()),
                    ];
                    let answer = client.request("POST", "/api/event", &headers, body.to_string().as_bytes());
                    assert_eq!(answer.status, 202, "{}", answer.text());
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("a sending thread");
    }
    assert!(server.metric("tally_events_accepted_total") >= 2500.0);
    still_healthy(&server, &site, "10,000 requests for random sites and paths");
}

/// Regression: one `time:hour` query over `["1901-01-01", "2400-12-30"]` took 11.7 s and 1.2 GB.
/// It, and its cousins, are refused naming the bound.
#[test]
fn the_giant_hourly_query_is_refused_naming_its_bound() {
    let (_dir, site, server) = setup();
    let d = site.domain.as_str();
    let cases = [
        (
            json!({"site_id": d, "metrics": ["visitors"], "date_range": ["1901-01-01", "2400-12-30"], "dimensions": ["time:hour"]}),
            "1970 to 2100",
        ),
        (
            json!({"site_id": d, "metrics": ["visitors"], "date_range": ["1970-01-01", "2100-12-31"], "dimensions": ["time:hour"]}),
            "20000 hours",
        ),
        (
            json!({"site_id": d, "metrics": ["visitors"], "date_range": ["1970-01-01", "2100-12-31"], "dimensions": ["time:day", "event:page"]}),
            "20000 days",
        ),
        (
            json!({"site_id": d, "metrics": ["visitors"], "date_range": "day", "pagination": {"limit": 1_000_000}}),
            "10000",
        ),
    ];
    for (body, says) in &cases {
        let answer = query(&server, &site, body);
        assert_eq!(answer.status, 400, "{body}: {}", answer.text());
        assert!(answer.text().contains(says), "{body}: {}", answer.text());
    }
    let auth = format!("Bearer {}", site.key);
    let funnel =
        json!({"site_id": d, "date_range": ["1901-01-01", "2400-12-30"], "steps": [{"page": "/"}, {"page": "/a"}]});
    let answer = server.client().post_json("/api/funnel", &[("authorization", &auth)], &funnel);
    assert_eq!(answer.status, 400, "{}", answer.text());
    still_healthy(&server, &site, "the giant hourly query");
}
