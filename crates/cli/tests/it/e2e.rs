//! End to end over real HTTP: two sites and their goals made with the command line, a scripted
//! traffic set sent to `tally serve` (mostly backfilled through `POST /api/import` with explicit
//! timestamps, plus live Plausible and Umami tracker requests), and every metric and dimension of
//! the Stats API checked against numbers worked out by hand. Then the aggregates are verified and
//! rebuilt from the raw events, and no number may change.
//!
//! The traffic of site A (`shop.example`, `Europe/Berlin`), day `D` a few days ago, `T` today;
//! times are Berlin time:
//!
//! | visitor | UA (device)              | country | session | events                                                             |
//! |---------|--------------------------|---------|---------|--------------------------------------------------------------------|
//! | alice   | Chrome/Windows (Desktop) | DE      | S1      | D 10:00 `/` (from google.com), 10:05 `/product/1`, 10:06 Signup{plan=pro} |
//! | alice   |                          |         | S2      | D 10:37 `/pricing` (31 min after 10:06: a new visit; direct; a bounce) |
//! | bob     | Safari/macOS (Desktop)   | FR      | B       | D 23:50 `/blog/post?utm=newsletter/email/launch/hero/analytics`, D+1 00:10 `/product/2` (crosses midnight) |
//! | carol   | Safari/iOS (Mobile)      | US      | C       | D 12:00 `/` (from t.co), 12:02 Scroll{depth=50} non-interactive (a bounce of 120 s) |
//! | dave    | Chrome/Android (Mobile)  | DE      | Dv      | D+1 09:00 `/pricing` (self-referral: direct), 09:01 Signup{plan=free} |
//! | crawler | Googlebot                | –       | –       | dropped                                                            |
//! | L1      | Safari/iPad (Tablet)     | JP      | L1      | T `/product/9` live through `/api/event`, from duckduckgo.com       |
//! | L2      | Edge/Windows (Desktop)   | GB      | L2      | T `/pricing` live through Umami's `/api/send`                       |
//!
//! Goals of A: `Visit /product/*` and `Signup`. Site B (`blog.example`, UTC) gets one imported
//! and one live page view, which must not show in A's numbers. Two bot requests to `/api/event`
//! are dropped and counted in `/metrics`.

use std::path::Path;
use std::time::Duration;

use jiff::civil::{Date, Weekday};
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};
use serde_json::{Value, json};

use crate::support::{Client, Server, add_site, tally, tally_ok, ua};

/// An expected row: dimension labels and metric values, in the query's order.
type Row = (Vec<String>, Vec<f64>);

fn row(dimensions: &[&str], metrics: &[f64]) -> Row {
    (dimensions.iter().map(|d| (*d).to_owned()).collect(), metrics.to_vec())
}

/// How far a reported metric may be from its exact value: the Stats API rounds views per visit to
/// 2 decimals, conversion rates to 1, bounce rates and durations to whole numbers (as Plausible's
/// does). Counts are exact.
fn tolerance(metric: &str) -> f64 {
    match metric {
        "views_per_visit" => 0.005 + 1e-9,
        "conversion_rate" => 0.05 + 1e-9,
        "bounce_rate" | "visit_duration" => 0.5 + 1e-9,
        _ => 0.0,
    }
}

/// A Stats API query body.
fn query(site: &str, range: [&str; 2], metrics: &[&str], dimensions: &[&str]) -> Value {
    json!({"site_id": site, "date_range": range, "metrics": metrics, "dimensions": dimensions})
}

/// Runs Stats API queries, compares their rows with expectations and keeps every failure (so one
/// run reports all that is wrong), and remembers each query to run it again after the rebuild.
struct Stats {
    addr: std::net::SocketAddr,
    failures: Vec<String>,
    asked: Vec<(String, Value)>,
}

impl Stats {
    /// Posts `body` with `key`; the parsed answer, or why there is none.
    fn post(addr: std::net::SocketAddr, key: &str, body: &Value) -> Result<Value, String> {
        let auth = format!("Bearer {key}");
        let response = Client::connect(addr).post_json("/api/v2/query", &[("authorization", &auth)], body);
        if response.status != 200 {
            return Err(format!("status {}: {}", response.status, response.text()));
        }
        serde_json::from_slice(&response.body).map_err(|e| format!("not JSON ({e}): {}", response.text()))
    }

    /// The rows of an answer, or why it has none in the v2 shape.
    fn rows(answer: &Value, metrics: usize) -> Result<Vec<Row>, String> {
        let results = answer["results"].as_array().ok_or_else(|| format!("no results array in {answer}"))?;
        results
            .iter()
            .map(|result| {
                let dimensions = result["dimensions"]
                    .as_array()
                    .ok_or_else(|| format!("no dimensions in {result}"))?
                    .iter()
                    .map(|d| d.as_str().map(str::to_owned).unwrap_or_else(|| d.to_string()))
                    .collect();
                let values: Vec<f64> = result["metrics"]
                    .as_array()
                    .ok_or_else(|| format!("no metrics in {result}"))?
                    .iter()
                    .map(|m| m.as_f64().ok_or_else(|| format!("metric {m} is not a number in {result}")))
                    .collect::<Result<_, _>>()?;
                if values.len() != metrics {
                    return Err(format!("{} metrics asked, {} in {result}", metrics, values.len()));
                }
                Ok((dimensions, values))
            })
            .collect()
    }

    /// Checks that `body` answers exactly `expected` (in that order when `ordered`).
    fn check(&mut self, what: &str, key: &str, body: Value, expected: &[Row], ordered: bool) {
        self.asked.push((key.to_owned(), body.clone()));
        let metrics: Vec<String> =
            body["metrics"].as_array().into_iter().flatten().filter_map(|m| m.as_str().map(str::to_owned)).collect();
        let outcome = Stats::post(self.addr, key, &body).and_then(|answer| {
            let mut actual = Stats::rows(&answer, metrics.len())?;
            let mut expected = expected.to_vec();
            if !ordered {
                actual.sort_by(|a, b| a.0.cmp(&b.0));
                expected.sort_by(|a, b| a.0.cmp(&b.0));
            }
            let same = actual.len() == expected.len()
                && actual.iter().zip(&expected).all(|(a, e)| {
                    a.0 == e.0 && a.1.iter().zip(&e.1).zip(&metrics).all(|((a, e), m)| (a - e).abs() <= tolerance(m))
                });
            if same { Ok(()) } else { Err(format!("expected {expected:?}\n     got {actual:?}")) }
        });
        if let Err(why) = outcome {
            self.failures.push(format!("{what}: {why}\n     query {body}"));
        }
    }

    /// Like [`Stats::check`] for answers whose metrics are not all numbers (revenue): the
    /// results, rows sorted by their dimensions, must equal `expected` exactly.
    fn check_json(&mut self, what: &str, key: &str, body: Value, expected: Value) {
        self.asked.push((key.to_owned(), body.clone()));
        let sorted = |v: &Value| {
            let mut rows: Vec<Value> = v.as_array().cloned().unwrap_or_default();
            rows.sort_by_key(|r| r["dimensions"].to_string());
            rows
        };
        match Stats::post(self.addr, key, &body) {
            Ok(answer) if sorted(&answer["results"]) == sorted(&expected) => {}
            Ok(answer) => self
                .failures
                .push(format!("{what}: expected {expected}\n     got {}\n     query {body}", answer["results"])),
            Err(why) => self.failures.push(format!("{what}: {why}\n     query {body}")),
        }
    }

    /// The answers to every query asked so far, rows in a canonical order.
    fn snapshot(&self) -> Vec<String> {
        self.asked
            .iter()
            .map(|(key, body)| match Stats::post(self.addr, key, body) {
                Ok(answer) => {
                    let mut rows: Vec<String> =
                        answer["results"].as_array().into_iter().flatten().map(Value::to_string).collect();
                    rows.sort();
                    format!("{body} => {}", rows.join(", "))
                }
                Err(why) => format!("{body} => {why}"),
            })
            .collect()
    }
}

/// Epoch milliseconds of `date` at `hh:mm` in `zone`.
fn at(zone: &TimeZone, date: Date, hour: i8, minute: i8) -> i64 {
    date.at(hour, minute, 0, 0).to_zoned(zone.clone()).expect("a time in the zone").timestamp().as_millisecond()
}

/// RFC 3339 with the zone's offset, such as `2026-11-19T10:00:00+01:00`.
fn rfc3339(zone: &TimeZone, ms: i64) -> String {
    let ts = Timestamp::from_millisecond(ms).expect("a timestamp");
    ts.to_zoned(zone.clone()).strftime("%Y-%m-%dT%H:%M:%S%:z").to_string()
}

/// `POST /api/import` of `lines` with `key`; the answer.
fn import(client: &mut Client, key: &str, lines: &[Value]) -> Value {
    let body: String = lines.iter().map(|line| format!("{line}\n")).collect();
    let auth = format!("Bearer {key}");
    let headers = [("authorization", auth.as_str()), ("content-type", "application/x-ndjson")];
    let response = client.request("POST", "/api/import", &headers, body.as_bytes());
    assert_eq!(response.status, 200, "import: {}", response.text());
    response.json()
}

/// A Plausible tracker's request: `text/plain` JSON, a browser's User-Agent, and the visitor's
/// address in `X-Forwarded-For` (the test's loopback peer is a trusted proxy).
fn plausible(client: &mut Client, body: &Value, user_agent: &str, ip: &str, country: &str) -> u16 {
    let headers = [
        ("content-type", "text/plain"),
        ("user-agent", user_agent),
        ("x-forwarded-for", ip),
        ("cf-ipcountry", country),
    ];
    let response = client.request("POST", "/api/event", &headers, body.to_string().as_bytes());
    response.status
}

/// Picks day `D`: three days or more before today in `zone`, and such that `D` and `D+1` share an
/// ISO week and a month (so the week and month rows of `[D, D+1]` are one row each).
fn pick_day(zone: &TimeZone) -> Date {
    let today = Timestamp::now().to_zoned(zone.clone()).date();
    let mut day = today.checked_sub(3.days()).expect("a date");
    while day.weekday() == Weekday::Sunday || day.tomorrow().expect("a date").day() == 1 {
        day = day.yesterday().expect("a date");
    }
    day
}

fn today(zone: &TimeZone) -> Date {
    Timestamp::now().to_zoned(zone.clone()).date()
}

#[test]
fn scripted_traffic_gives_hand_computed_numbers_and_survives_a_rebuild() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = dir.path().join("data");
    let a = add_site(&store, "shop.example", "Europe/Berlin");
    let b = add_site(&store, "blog.example", "UTC");
    tally_ok(&store, &["goal", "add", "shop.example", "--page", "/product/*"]);
    tally_ok(&store, &["goal", "add", "shop.example", "--event", "Signup", "--currency", "EUR"]);

    let berlin = TimeZone::get("Europe/Berlin").expect("the Berlin zone");
    let utc = TimeZone::UTC;
    let d = pick_day(&berlin);
    let d1 = d.tomorrow().expect("a date");

    let server = Server::start(&store);
    let mut client = server.client();

    // Site A's backfill. Alice's times are RFC 3339 with Berlin's offset, carol's in UTC, bob's and
    // dave's epoch milliseconds: the import takes all three.
    let url = |path: &str| format!("https://shop.example{path}");
    let alice = |ms: i64| rfc3339(&berlin, ms);
    let carol = |ms: i64| Timestamp::from_millisecond(ms).expect("a timestamp").to_string();
    let mut lines = vec![
        json!({"timestamp": alice(at(&berlin, d, 10, 0)), "name": "pageview", "url": url("/"),
               "referrer": "https://www.google.com/", "visitor": "alice", "user_agent": ua::CHROME_WINDOWS, "country": "DE",
               "screen_width": 1280, "language": "de-DE"}),
        json!({"timestamp": alice(at(&berlin, d, 10, 5)), "name": "pageview", "url": url("/product/1"),
               "referrer": "https://www.google.com/", "visitor": "alice", "user_agent": ua::CHROME_WINDOWS, "country": "DE"}),
        json!({"timestamp": alice(at(&berlin, d, 10, 6)), "name": "Signup", "url": url("/product/1"),
               "props": {"plan": "pro"}, "visitor": "alice", "user_agent": ua::CHROME_WINDOWS, "country": "DE",
               "revenue": {"currency": "EUR", "amount": "19.99"}}),
        json!({"timestamp": alice(at(&berlin, d, 10, 37)), "name": "pageview", "url": url("/pricing"),
               "visitor": "alice", "user_agent": ua::CHROME_WINDOWS, "country": "DE", "screen_width": "1280", "language": "de_de"}),
        json!({"timestamp": at(&berlin, d, 23, 50), "name": "pageview",
               "url": url("/blog/post?utm_source=newsletter&utm_medium=email&utm_campaign=launch&utm_content=hero&utm_term=analytics"),
               "visitor": "bob", "user_agent": ua::SAFARI_MAC, "country": "FR", "screen_width": 1920, "language": "fr-FR"}),
        json!({"timestamp": at(&berlin, d1, 0, 10), "name": "pageview", "url": url("/product/2"),
               "visitor": "bob", "user_agent": ua::SAFARI_MAC, "country": "FR"}),
        json!({"timestamp": carol(at(&berlin, d, 12, 0)), "name": "pageview", "url": url("/"),
               "referrer": "https://t.co/abc123", "visitor": "carol", "user_agent": ua::SAFARI_IPHONE, "country": "US",
               "screen_width": 390, "language": "en-US"}),
        json!({"timestamp": carol(at(&berlin, d, 12, 2)), "name": "Scroll", "url": url("/"), "props": {"depth": "50"},
               "interactive": false, "visitor": "carol", "user_agent": ua::SAFARI_IPHONE, "country": "US"}),
        json!({"timestamp": at(&berlin, d1, 9, 0), "name": "pageview", "url": url("/pricing"),
               "referrer": "https://shop.example/pricing", "visitor": "dave", "user_agent": ua::CHROME_ANDROID, "country": "DE",
               "screen_width": 412, "language": "de-DE"}),
        // Revenue in another currency than the goal's: not counted in its revenue.
        json!({"timestamp": at(&berlin, d1, 9, 1), "name": "Signup", "url": url("/pricing"), "props": {"plan": "free"},
               "visitor": "dave", "user_agent": ua::CHROME_ANDROID, "country": "DE",
               "revenue": {"currency": "USD", "amount": 5.02}}),
        json!({"timestamp": at(&berlin, d, 11, 0), "name": "pageview", "url": url("/"),
               "visitor": "crawler", "user_agent": ua::GOOGLEBOT}),
    ];
    // Lines in time order, as a backfill of a log would be.
    lines.sort_by_key(|line| {
        line["timestamp"].as_i64().unwrap_or_else(|| {
            line["timestamp"]
                .as_str()
                .and_then(|t| t.parse::<Timestamp>().ok())
                .map(Timestamp::as_millisecond)
                .unwrap_or_default()
        })
    });
    let answer = import(&mut client, &a.key, &lines);
    assert_eq!(
        answer,
        json!({"imported": 10, "dropped": 1, "errors": [], "errors_total": 0, "errors_omitted": 0}),
        "site A's import"
    );

    // Site B's backfill: one page view that must stay on site B.
    let db = pick_day(&utc);
    let line = json!({"timestamp": at(&utc, db, 12, 0), "name": "pageview", "url": "https://blog.example/hello",
                      "visitor": "erin", "user_agent": ua::FIREFOX_LINUX, "country": "NL"});
    assert_eq!(
        import(&mut client, &b.key, &[line]),
        json!({"imported": 1, "dropped": 0, "errors": [], "errors_total": 0, "errors_omitted": 0}),
        "site B's import"
    );

    // Live traffic, now: L1 through the Plausible tracker's endpoint, L2 through Umami's.
    let bots_before = server.metric("tally_events_dropped_total{reason=\"bot\"}");
    let body = json!({"n": "pageview", "u": "https://shop.example/product/9", "d": "shop.example", "r": "https://duckduckgo.com/", "w": 820});
    assert_eq!(plausible(&mut client, &body, ua::SAFARI_IPAD, "203.0.113.10", "JP"), 202);
    let umami = json!({"type": "event", "payload": {"website": a.umami_id, "hostname": "shop.example",
        "screen": "1920x1080", "language": "en-GB", "title": "Pricing", "url": "/pricing", "referrer": ""}});
    let headers = [
        ("content-type", "application/json"),
        ("user-agent", ua::EDGE_WINDOWS),
        ("x-forwarded-for", "203.0.113.11"),
        ("cf-ipcountry", "GB"),
    ];
    let response = client.request("POST", "/api/send", &headers, umami.to_string().as_bytes());
    assert_eq!(response.status, 200, "Umami send: {}", response.text());
    assert!(response.json()["cache"].is_string(), "Umami's answer has a cache token: {}", response.text());
    let body = json!({"n": "pageview", "u": "https://blog.example/live", "d": "blog.example", "r": null});
    assert_eq!(plausible(&mut client, &body, ua::FIREFOX_LINUX, "203.0.113.12", "NL"), 202);
    // Bots are answered like anyone, and dropped.
    let body = json!({"n": "pageview", "u": "https://shop.example/", "d": "shop.example"});
    assert_eq!(plausible(&mut client, &body, ua::GOOGLEBOT, "203.0.113.20", "US"), 202);
    assert_eq!(plausible(&mut client, &body, ua::CURL, "203.0.113.21", "US"), 202);
    let bots = server.metric("tally_events_dropped_total{reason=\"bot\"}") - bots_before;
    let t = today(&berlin);
    let tb = today(&utc);

    let (ds, d1s, ts) = (d.to_string(), d1.to_string(), t.to_string());
    let all = [ds.as_str(), ts.as_str()];
    let mut stats = Stats { addr: server.addr, failures: Vec::new(), asked: Vec::new() };
    if bots != 2.0 {
        stats.failures.push(format!("/metrics: 2 bot events dropped, the counter moved by {bots}"));
    }

    // Aggregation lags ingestion by a flush: wait until the totals are all there.
    const TOTALS: [&str; 7] =
        ["visitors", "visits", "pageviews", "views_per_visit", "bounce_rate", "visit_duration", "events"];
    let totals_a = [
        // alice, bob, carol, dave, L1, L2.
        6.0,
        // S1, S2, bob's, carol's, dave's, L1's, L2's.
        7.0,
        // /, /product/1, /pricing (alice); /blog/post, /product/2; / (carol); /pricing (dave); L1; L2.
        9.0,
        9.0 / 7.0,
        // Bounces: S2, carol (her Scroll is not interactive), L1, L2.
        400.0 / 7.0,
        // S1 6 min, bob 20 min, carol 2 min, dave 1 min; the bounces 0.
        (360.0 + 1200.0 + 120.0 + 60.0) / 7.0,
        // 9 page views, 2 Signups, 1 Scroll.
        12.0,
    ];
    let totals_query = query(&a.domain, all, &TOTALS, &[]);
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let reached = Stats::post(server.addr, &a.key, &totals_query)
            .and_then(|answer| Stats::rows(&answer, TOTALS.len()))
            .is_ok_and(|rows| rows.len() == 1 && rows[0].1.first() == Some(&6.0) && rows[0].1.get(6) == Some(&12.0));
        if reached || std::time::Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // A flush writes its items concurrently, so the totals can be in while other items of the
    // same flush are still being written: wait until no acknowledged event is left unflushed.
    let settle = || {
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while server.metric("tally_pending_events") > 0.0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    settle();

    stats.check("A totals", &a.key, totals_query.clone(), &[row(&[], &totals_a)], true);
    let tb_s = tb.to_string();
    let dbs = db.to_string();
    // Site B's live page view may fall in a later flush than A's last events: wait for it too.
    let totals_b = query(&b.domain, [dbs.as_str(), tb_s.as_str()], &TOTALS, &[]);
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let reached = Stats::post(server.addr, &b.key, &totals_b)
            .and_then(|answer| Stats::rows(&answer, TOTALS.len()))
            .is_ok_and(|rows| rows.len() == 1 && rows[0].1.get(6) == Some(&2.0));
        if reached || std::time::Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    settle();
    stats.check(
        "B totals (erin and the live page view; nothing of A's)",
        &b.key,
        query(&b.domain, [dbs.as_str(), tb_s.as_str()], &TOTALS, &[]),
        &[row(&[], &[2.0, 2.0, 2.0, 1.0, 100.0, 0.0, 2.0])],
        true,
    );
    stats.check(
        "B pages",
        &b.key,
        query(&b.domain, [dbs.as_str(), tb_s.as_str()], &["visitors", "pageviews"], &["event:page"]),
        &[row(&["/hello"], &[1.0, 1.0]), row(&["/live"], &[1.0, 1.0])],
        false,
    );

    // Event dimensions.
    stats.check(
        "event:page",
        &a.key,
        query(&a.domain, all, &["visitors", "pageviews"], &["event:page"]),
        &[
            row(&["/"], &[2.0, 2.0]),          // alice S1, carol.
            row(&["/product/1"], &[1.0, 1.0]), // alice.
            row(&["/pricing"], &[3.0, 3.0]),   // alice S2, dave, L2.
            row(&["/blog/post"], &[1.0, 1.0]), // bob (the query string is not part of the path).
            row(&["/product/2"], &[1.0, 1.0]), // bob.
            row(&["/product/9"], &[1.0, 1.0]), // L1.
        ],
        false,
    );
    stats.check(
        "event:name",
        &a.key,
        query(&a.domain, all, &["visitors", "pageviews", "events"], &["event:name"]),
        &[
            row(&["pageview"], &[6.0, 9.0, 9.0]),
            row(&["Signup"], &[2.0, 0.0, 2.0]), // alice, dave.
            row(&["Scroll"], &[1.0, 0.0, 1.0]), // carol.
        ],
        false,
    );
    stats.check(
        "event:hostname",
        &a.key,
        query(&a.domain, all, &["visitors", "pageviews", "events"], &["event:hostname"]),
        &[row(&["shop.example"], &[6.0, 9.0, 12.0])],
        false,
    );
    stats.check(
        "event:goal",
        &a.key,
        query(&a.domain, all, &["visitors", "events", "conversion_rate"], &["event:goal"]),
        &[
            // /product/1 (alice), /product/2 (bob), /product/9 (L1): 3 of 6 visitors.
            row(&["Visit /product/*"], &[3.0, 3.0, 50.0]),
            // alice and dave: 2 of 6.
            row(&["Signup"], &[2.0, 2.0, 100.0 / 3.0]),
        ],
        false,
    );
    stats.check(
        "event:props:plan",
        &a.key,
        query(&a.domain, all, &["visitors", "events"], &["event:props:plan"]),
        &[row(&["pro"], &[1.0, 1.0]), row(&["free"], &[1.0, 1.0])],
        false,
    );
    stats.check(
        "event:props:depth",
        &a.key,
        query(&a.domain, all, &["visitors", "events"], &["event:props:depth"]),
        &[row(&["50"], &[1.0, 1.0])],
        false,
    );

    // Visit dimensions: visitors, visits, page views, bounce rate, visit duration.
    const VISIT: [&str; 5] = ["visitors", "visits", "pageviews", "bounce_rate", "visit_duration"];
    stats.check(
        "visit:entry_page",
        &a.key,
        query(&a.domain, all, &VISIT, &["visit:entry_page"]),
        &[
            row(&["/"], &[2.0, 2.0, 3.0, 50.0, 240.0]), // S1 (360 s), carol (bounce, 120 s).
            row(&["/pricing"], &[3.0, 3.0, 3.0, 200.0 / 3.0, 20.0]), // S2, dave (60 s), L2.
            row(&["/blog/post"], &[1.0, 1.0, 2.0, 0.0, 1200.0]), // bob.
            row(&["/product/9"], &[1.0, 1.0, 1.0, 100.0, 0.0]), // L1.
        ],
        false,
    );
    stats.check(
        "visit:exit_page",
        &a.key,
        query(&a.domain, all, &["visits", "bounce_rate", "visit_duration"], &["visit:exit_page"]),
        &[
            row(&["/product/1"], &[1.0, 0.0, 360.0]), // S1: the Signup after it is no page view.
            row(&["/pricing"], &[3.0, 200.0 / 3.0, 20.0]), // S2, dave, L2.
            row(&["/product/2"], &[1.0, 0.0, 1200.0]), // bob.
            row(&["/"], &[1.0, 100.0, 120.0]),        // carol.
            row(&["/product/9"], &[1.0, 100.0, 0.0]), // L1.
        ],
        false,
    );
    // Direct traffic is labelled as Plausible labels it; dave's self-referral is direct.
    stats.check(
        "visit:source",
        &a.key,
        query(&a.domain, all, &VISIT, &["visit:source"]),
        &[
            row(&["Direct / None"], &[3.0, 3.0, 3.0, 200.0 / 3.0, 20.0]), // S2, dave, L2.
            row(&["Google"], &[1.0, 1.0, 2.0, 0.0, 360.0]),
            row(&["newsletter"], &[1.0, 1.0, 2.0, 0.0, 1200.0]), // utm_source wins.
            row(&["Twitter"], &[1.0, 1.0, 1.0, 100.0, 120.0]),
            row(&["DuckDuckGo"], &[1.0, 1.0, 1.0, 100.0, 0.0]),
        ],
        false,
    );
    stats.check(
        "visit:referrer",
        &a.key,
        query(&a.domain, all, &VISIT, &["visit:referrer"]),
        &[
            // S2, bob, dave (self-referral), L2.
            row(&["Direct / None"], &[4.0, 4.0, 5.0, 50.0, 315.0]),
            row(&["google.com"], &[1.0, 1.0, 2.0, 0.0, 360.0]),
            row(&["t.co/abc123"], &[1.0, 1.0, 1.0, 100.0, 120.0]),
            row(&["duckduckgo.com"], &[1.0, 1.0, 1.0, 100.0, 0.0]),
        ],
        false,
    );
    // UTM breakdowns list tagged visits only, as Plausible's do.
    for (dimension, value) in [
        ("visit:utm_source", "newsletter"),
        ("visit:utm_medium", "email"),
        ("visit:utm_campaign", "launch"),
        ("visit:utm_content", "hero"),
        ("visit:utm_term", "analytics"),
    ] {
        stats.check(
            dimension,
            &a.key,
            query(&a.domain, all, &VISIT, &[dimension]),
            &[row(&[value], &[1.0, 1.0, 2.0, 0.0, 1200.0])],
            false,
        );
    }
    stats.check(
        "visit:country",
        &a.key,
        query(&a.domain, all, &VISIT, &["visit:country"]),
        &[
            row(&["DE"], &[2.0, 3.0, 4.0, 100.0 / 3.0, 140.0]), // alice S1 and S2, dave.
            row(&["FR"], &[1.0, 1.0, 2.0, 0.0, 1200.0]),
            row(&["US"], &[1.0, 1.0, 1.0, 100.0, 120.0]),
            row(&["JP"], &[1.0, 1.0, 1.0, 100.0, 0.0]), // L1, from the CDN header.
            row(&["GB"], &[1.0, 1.0, 1.0, 100.0, 0.0]), // L2.
        ],
        false,
    );
    stats.check(
        "visit:device",
        &a.key,
        query(&a.domain, all, &VISIT, &["visit:device"]),
        &[
            row(&["Desktop"], &[3.0, 4.0, 6.0, 50.0, 390.0]), // alice S1 S2, bob, L2.
            row(&["Mobile"], &[2.0, 2.0, 2.0, 50.0, 90.0]),   // carol, dave.
            row(&["Tablet"], &[1.0, 1.0, 1.0, 100.0, 0.0]),   // L1.
        ],
        false,
    );
    stats.check(
        "visit:browser",
        &a.key,
        query(&a.domain, all, &VISIT, &["visit:browser"]),
        &[
            row(&["Chrome"], &[2.0, 3.0, 4.0, 100.0 / 3.0, 140.0]), // alice S1 S2, dave.
            row(&["Safari"], &[3.0, 3.0, 4.0, 200.0 / 3.0, 440.0]), // bob, carol, L1.
            row(&["Edge"], &[1.0, 1.0, 1.0, 100.0, 0.0]),           // L2.
        ],
        false,
    );
    stats.check(
        "visit:os",
        &a.key,
        query(&a.domain, all, &VISIT, &["visit:os"]),
        &[
            row(&["Windows"], &[2.0, 3.0, 4.0, 200.0 / 3.0, 120.0]), // alice S1 S2, L2.
            row(&["macOS"], &[1.0, 1.0, 2.0, 0.0, 1200.0]),          // bob.
            row(&["iOS"], &[2.0, 2.0, 2.0, 100.0, 60.0]),            // carol, L1.
            row(&["Android"], &[1.0, 1.0, 1.0, 0.0, 60.0]),          // dave.
        ],
        false,
    );

    // Devices in full. Screen sizes are Plausible's classes of the width sent: alice 1280
    // (Laptop), bob 1920 and L2's Umami screen 1920x1080 (Desktop), carol 390 and dave 412
    // (Mobile), L1's Plausible window width 820 (Tablet).
    stats.check(
        "visit:screen",
        &a.key,
        query(&a.domain, all, &VISIT, &["visit:screen"]),
        &[
            row(&["Laptop"], &[1.0, 2.0, 3.0, 50.0, 180.0]), // alice S1 (360 s) and S2 (a bounce).
            row(&["Desktop"], &[2.0, 2.0, 3.0, 50.0, 600.0]), // bob (1200 s), L2.
            row(&["Mobile"], &[2.0, 2.0, 2.0, 50.0, 90.0]),  // carol (a bounce of 120 s), dave (60 s).
            row(&["Tablet"], &[1.0, 1.0, 1.0, 100.0, 0.0]),  // L1.
        ],
        false,
    );
    // Languages as sent (alice's second visit sent `de_de`, read as de-DE); L1's Plausible
    // tracker sends none, and a breakdown lists no empty value.
    stats.check(
        "visit:language",
        &a.key,
        query(&a.domain, all, &VISIT, &["visit:language"]),
        &[
            row(&["de-DE"], &[2.0, 3.0, 4.0, 100.0 / 3.0, 140.0]), // alice S1 S2, dave.
            row(&["fr-FR"], &[1.0, 1.0, 2.0, 0.0, 1200.0]),
            row(&["en-US"], &[1.0, 1.0, 1.0, 100.0, 120.0]),
            row(&["en-GB"], &[1.0, 1.0, 1.0, 100.0, 0.0]), // L2, from Umami.
        ],
        false,
    );
    // Browser versions, major and minor: Chrome/131.0.… and Edg/131.0.… are 131.0; Safari's
    // Version/ tokens are 18.2 (bob), 18.1 (carol) and 17.7 (L1).
    stats.check(
        "visit:browser_version",
        &a.key,
        query(&a.domain, all, &["visitors", "visits"], &["visit:browser_version"]),
        &[
            row(&["131.0"], &[3.0, 4.0]), // alice S1 S2, dave (Chrome), L2 (Edge).
            row(&["18.2"], &[1.0, 1.0]),
            row(&["18.1"], &[1.0, 1.0]),
            row(&["17.7"], &[1.0, 1.0]),
        ],
        false,
    );
    // No city database is configured: no region or city is made up (a breakdown lists no
    // empty value, so none at all).
    for dimension in ["visit:region", "visit:city"] {
        stats.check(
            dimension,
            &a.key,
            query(&a.domain, all, &["visitors", "visits", "pageviews"], &[dimension]),
            &[],
            false,
        );
    }
    // A filter on a new dimension reads event blocks (the screen size of visits by country).
    stats.check(
        "visit:country of Mobile screens",
        &a.key,
        {
            let mut body = query(&a.domain, all, &["visitors", "visits"], &["visit:country"]);
            body["filters"] = json!([["is", "visit:screen", ["Mobile"]]]);
            body
        },
        &[row(&["US"], &[1.0, 1.0]), row(&["DE"], &[1.0, 1.0])],
        false,
    );

    // A negated filter counts the visits with no value too (L1 sent no language), as the raw
    // events tell: no aggregate item holds an empty language.
    stats.check(
        "is_not visit:language de-DE",
        &a.key,
        {
            let mut body = query(&a.domain, all, &["visitors", "visits", "pageviews"], &[]);
            body["filters"] = json!([["is_not", "visit:language", ["de-DE"]]]);
            body
        },
        &[row(&[], &[4.0, 4.0, 5.0])], // bob (2 page views), carol, L1, L2.
        true,
    );

    // Revenue: the Signup goal counts EUR; alice's 19.99 EUR counts, dave's USD does not.
    // `Visit /product/*` is no revenue goal: null.
    stats.check_json(
        "total_revenue and average_revenue by goal",
        &a.key,
        query(&a.domain, all, &["visitors", "total_revenue", "average_revenue"], &["event:goal"]),
        json!([
            {"dimensions": ["Signup"], "metrics": [2,
                {"value": 19.99, "amount": "19.99", "currency": "EUR"},
                {"value": 19.99, "amount": "19.99", "currency": "EUR"}]},
            {"dimensions": ["Visit /product/*"], "metrics": [3, null, null]},
        ]),
    );
    stats.check_json(
        "total_revenue of the site",
        &a.key,
        query(&a.domain, all, &["total_revenue", "average_revenue", "events"], &[]),
        json!([{"dimensions": [], "metrics": [
            {"value": 19.99, "amount": "19.99", "currency": "EUR"},
            {"value": 19.99, "amount": "19.99", "currency": "EUR"}, 12]}]),
    );

    // Time dimensions, in Berlin time: bob's 23:50 is day D and his 00:10 day D+1 (in UTC both
    // would be D). Visit counters count in the day the visit started.
    const TIME: [&str; 6] = ["visitors", "visits", "pageviews", "events", "bounce_rate", "visit_duration"];
    stats.check(
        "time:day",
        &a.key,
        query(&a.domain, all, &TIME, &["time:day"]),
        &[
            // alice, bob, carol; S1, S2, bob's, carol's; bounces S2 and carol; 360+1200+120 s.
            row(&[ds.as_str()], &[3.0, 4.0, 5.0, 7.0, 50.0, 420.0]),
            // bob, dave; dave's visit (bob's started on D).
            row(&[d1s.as_str()], &[2.0, 1.0, 2.0, 3.0, 0.0, 60.0]),
            // L1, L2.
            row(&[ts.as_str()], &[2.0, 2.0, 2.0, 2.0, 100.0, 0.0]),
        ],
        false,
    );
    let hour = |h: &str| format!("{ds} {h}:00:00");
    let (h10, h12, h23) = (hour("10"), hour("12"), hour("23"));
    stats.check(
        "time:hour",
        &a.key,
        query(&a.domain, [ds.as_str(), ds.as_str()], &["visitors", "visits", "pageviews", "events"], &["time:hour"]),
        &[
            row(&[h10.as_str()], &[1.0, 2.0, 3.0, 4.0]), // alice: S1 and S2 both start in this hour.
            row(&[h12.as_str()], &[1.0, 1.0, 1.0, 2.0]), // carol.
            row(&[h23.as_str()], &[1.0, 1.0, 1.0, 1.0]), // bob's first page view.
        ],
        false,
    );
    let two_days = [ds.as_str(), d1s.as_str()];
    let monday = d.checked_sub(i64::from(d.weekday().to_monday_zero_offset()).days()).expect("a date").to_string();
    let month = d.first_of_month().to_string();
    // alice, bob, carol, dave; 5 visits, 2 of them bounces; 1740 s over 5 visits.
    let two_days_row = [4.0, 5.0, 7.0, 10.0, 40.0, 348.0];
    stats.check(
        "time:week",
        &a.key,
        query(&a.domain, two_days, &TIME, &["time:week"]),
        &[row(&[monday.as_str()], &two_days_row)],
        false,
    );
    stats.check(
        "time:month",
        &a.key,
        query(&a.domain, two_days, &TIME, &["time:month"]),
        &[row(&[month.as_str()], &two_days_row)],
        false,
    );

    // Filters.
    let filtered = |metrics: &[&str], dimensions: &[&str], filters: Value| {
        let mut body = query(&a.domain, all, metrics, dimensions);
        body["filters"] = filters;
        body
    };
    stats.check(
        "is visit:country DE",
        &a.key,
        filtered(
            &["visitors", "visits", "pageviews", "events", "bounce_rate"],
            &[],
            json!([["is", "visit:country", ["DE"]]]),
        ),
        &[row(&[], &[2.0, 3.0, 4.0, 6.0, 100.0 / 3.0])],
        true,
    );
    stats.check(
        "is visit:country FR or US",
        &a.key,
        filtered(&["visitors", "visits"], &["visit:country"], json!([["is", "visit:country", ["FR", "US"]]])),
        &[row(&["FR"], &[1.0, 1.0]), row(&["US"], &[1.0, 1.0])],
        false,
    );
    stats.check(
        "is_not visit:browser Chrome",
        &a.key,
        filtered(&["visitors", "visits"], &["visit:browser"], json!([["is_not", "visit:browser", ["Chrome"]]])),
        &[row(&["Safari"], &[3.0, 3.0]), row(&["Edge"], &[1.0, 1.0])],
        false,
    );
    stats.check(
        "contains event:page product",
        &a.key,
        filtered(&["visitors", "pageviews"], &["event:page"], json!([["contains", "event:page", ["product"]]])),
        &[row(&["/product/1"], &[1.0, 1.0]), row(&["/product/2"], &[1.0, 1.0]), row(&["/product/9"], &[1.0, 1.0])],
        false,
    );
    stats.check(
        "sources of mobile visits (a filter on another dimension)",
        &a.key,
        filtered(&["visitors", "visits"], &["visit:source"], json!([["is", "visit:device", ["Mobile"]]])),
        &[row(&["Twitter"], &[1.0, 1.0]), row(&["Direct / None"], &[1.0, 1.0])],
        false,
    );
    stats.check(
        "is event:goal Signup",
        &a.key,
        filtered(&["visitors", "events", "conversion_rate"], &[], json!([["is", "event:goal", ["Signup"]]])),
        &[row(&[], &[2.0, 2.0, 100.0 / 3.0])],
        true,
    );
    stats.check(
        "is event:goal Visit /product/*",
        &a.key,
        filtered(&["visitors", "events", "conversion_rate"], &[], json!([["is", "event:goal", ["Visit /product/*"]]])),
        &[row(&[], &[3.0, 3.0, 50.0])],
        true,
    );

    // Ordering and pagination: page views descending, ties by path.
    let page_order = |offset: u64| {
        let mut body = query(&a.domain, all, &["visitors", "pageviews"], &["event:page"]);
        body["order_by"] = json!([["pageviews", "desc"], ["event:page", "asc"]]);
        body["pagination"] = json!({"limit": 2, "offset": offset});
        body
    };
    let pages = [
        row(&["/pricing"], &[3.0, 3.0]),
        row(&["/"], &[2.0, 2.0]),
        row(&["/blog/post"], &[1.0, 1.0]),
        row(&["/product/1"], &[1.0, 1.0]),
        row(&["/product/2"], &[1.0, 1.0]),
        row(&["/product/9"], &[1.0, 1.0]),
    ];
    stats.check("pages, first page", &a.key, page_order(0), &pages[0..2], true);
    stats.check("pages, second page", &a.key, page_order(2), &pages[2..4], true);
    stats.check("pages, third page", &a.key, page_order(4), &pages[4..6], true);
    stats.check("pages, past the end", &a.key, page_order(6), &[], true);
    let mut body = query(&a.domain, all, &["visitors"], &["visit:browser"]);
    body["order_by"] = json!([["visitors", "asc"], ["visit:browser", "asc"]]);
    stats.check(
        "browsers by visitors ascending",
        &a.key,
        body,
        &[row(&["Edge"], &[1.0]), row(&["Chrome"], &[2.0]), row(&["Safari"], &[3.0])],
        true,
    );

    // Graceful stop, then the aggregates equal a rebuild from the raw events, before and after a
    // rebuild that replaces them, and no answer changes.
    let before = stats.snapshot();
    drop(client);
    server.stop();
    verify(&store, &a.domain, &mut stats.failures);
    verify(&store, &b.domain, &mut stats.failures);
    let replaced = tally_ok(&store, &["aggregate", "--rebuild", "--site", &a.domain]);
    if !replaced.contains("mode: replace") || !replaced.contains("weeks and months across the range's ends:") {
        stats.failures.push(format!("aggregate --rebuild (replace) said:\n{replaced}"));
    }
    verify(&store, &a.domain, &mut stats.failures);
    let server = Server::start(&store);
    stats.addr = server.addr;
    let after = stats.snapshot();
    for (before, after) in before.iter().zip(&after) {
        if before != after {
            stats.failures.push(format!("an answer changed across the rebuild:\n  before {before}\n  after  {after}"));
        }
    }
    server.stop();

    assert!(
        stats.failures.is_empty(),
        "{} expectations failed:\n\n{}",
        stats.failures.len(),
        stats.failures.join("\n\n")
    );
}

/// `tally aggregate --rebuild --site SITE --verify` exits 0 with no difference.
fn verify(store: &Path, site: &str, failures: &mut Vec<String>) {
    let output = tally(store, &["aggregate", "--rebuild", "--site", site, "--verify"]);
    let text = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() || !text.contains("differences: 0\n") {
        failures.push(format!(
            "aggregate --rebuild --verify of {site} ({}):\n{text}{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
}
