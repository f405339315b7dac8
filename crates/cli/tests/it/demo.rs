//! `tally demo` and `tally serve --demo`: a demo site with months of realistic traffic, filled
//! once, readable through a printed shared link without signing in.

use serde_json::json;

use crate::support::{Server, field, tally_ok};

#[test]
fn the_demo_fills_a_site_once_and_serve_demo_prints_a_working_link() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("data");
    let out = tally_ok(&store, &["demo", "--days", "20", "--events-per-day", "150"]);
    assert_eq!(field(&out, "domain:"), "demo.tally.example");
    let key = field(&tally_ok(&store, &["key", "create", "demo.tally.example"]), "key:");
    let goals = tally_ok(&store, &["site", "list"]);
    assert!(goals.contains("demo.tally.example"), "{goals}");

    let server = Server::start_with(&store, &["--demo"]);
    let line = server.wait_for_log("/share/");
    let link = line.split("http://").nth(1).unwrap().split_whitespace().next().unwrap().trim_matches('"').to_owned();
    let share = link.split("/share/").nth(1).unwrap().to_owned();
    let mut c = server.client();
    let auth = format!("Bearer {key}");
    let query = |c: &mut crate::support::Client, body: serde_json::Value| {
        let r = c.post_json("/api/v2/query", &[("authorization", &auth)], &body);
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["results"].clone()
    };
    let top = query(
        &mut c,
        json!({ "site_id": "demo.tally.example", "metrics": ["visitors", "pageviews", "bounce_rate"], "date_range": "30d" }),
    );
    let m = top[0]["metrics"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect::<Vec<_>>();
    assert!(m[0] > 100.0 && m[1] > m[0], "visitors and pageviews: {m:?}");
    assert!(m[2] > 10.0 && m[2] < 90.0, "some visits bounce, not all: {m:?}");
    for (dimension, at_least) in
        [("visit:source", 4), ("visit:country", 5), ("visit:device", 2), ("visit:browser", 3), ("event:goal", 2)]
    {
        let rows = query(
            &mut c,
            json!({ "site_id": "demo.tally.example", "metrics": ["visitors"], "date_range": "30d", "dimensions": [dimension] }),
        );
        assert!(rows.as_array().unwrap().len() >= at_least, "{dimension}: {rows}");
    }
    let days = query(
        &mut c,
        json!({ "site_id": "demo.tally.example", "metrics": ["visitors"], "date_range": "30d", "dimensions": ["time:day"] }),
    );
    assert!(days.as_array().unwrap().len() >= 20, "every day of the history has traffic: {days}");
    // The demo's saved funnel counts visitors, fewer at each step.
    let sites = c.request("GET", "/api/sites", &[("authorization", &auth)], b"").json();
    let funnel = sites["sites"][0]["funnels"][0].clone();
    assert_eq!(funnel["steps"].as_array().map(Vec::len), Some(4), "{sites}");
    let body = json!({ "site_id": "demo.tally.example", "date_range": "30d", "steps": funnel["steps"] });
    let steps = c.post_json("/api/funnel", &[("authorization", &auth)], &body).json()["steps"].clone();
    let visitors: Vec<i64> = steps.as_array().unwrap().iter().map(|s| s["visitors"].as_i64().unwrap()).collect();
    assert!(visitors[0] > 50 && visitors.windows(2).all(|w| w[0] >= w[1]), "{steps}");

    // The printed link opens the demo's statistics without signing in.
    let r = c.request(
        "POST",
        "/api/v2/query",
        &[("x-tally-share", &share)],
        json!({ "site_id": "demo.tally.example", "metrics": ["pageviews"], "date_range": "30d" })
            .to_string()
            .as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    // `serve --demo` keeps adding live page views, so the link sees at least what the key saw.
    let shared = r.json()["results"][0]["metrics"][0].as_f64().unwrap();
    assert!(shared >= m[1] && shared < m[1] * 1.2, "{shared} through the link, {} with the key", m[1]);
    server.stop();

    // Again: the site is kept as it is, not filled twice.
    let again = tally_ok(&store, &["demo", "--days", "20", "--events-per-day", "150"]);
    assert_eq!(field(&again, "domain:"), "demo.tally.example");
    let server = Server::start(&store);
    let mut c = server.client();
    let top = query(&mut c, json!({ "site_id": "demo.tally.example", "metrics": ["pageviews"], "date_range": "30d" }));
    let pageviews = top[0]["metrics"][0].as_f64().unwrap();
    // serve --demo added a few live page views, never a second history.
    assert!(pageviews >= m[1] && pageviews < m[1] * 1.2, "{pageviews} vs {}", m[1]);
    server.stop();
}

/// A year of traffic: a filtered question no aggregate holds ("sources of visitors from Germany
/// over the last 12 months") is answered from the event blocks, not refused, and agrees with the
/// aggregates where they overlap: every visit and page view from Germany has one source, so the
/// rows add up to Germany's totals, which the country aggregates hold.
#[test]
fn a_twelve_month_filtered_query_reads_the_blocks_and_agrees_with_the_aggregates() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("data");
    tally_ok(&store, &["demo", "--days", "365", "--events-per-day", "30"]);
    let key = field(&tally_ok(&store, &["key", "create", "demo.tally.example"]), "key:");
    let server = Server::start(&store);
    let mut c = server.client();
    let auth = format!("Bearer {key}");
    let mut query = |body: serde_json::Value| {
        let r = c.post_json("/api/v2/query", &[("authorization", &auth)], &body);
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["results"].as_array().unwrap().clone()
    };
    let metrics = json!(["visitors", "visits", "pageviews"]);
    let germany = json!([["is", "visit:country", ["DE"]]]);
    let by_source = query(json!({
        "site_id": "demo.tally.example", "metrics": metrics, "date_range": "12mo",
        "dimensions": ["visit:source"], "filters": germany,
    }));
    let totals = query(json!({
        "site_id": "demo.tally.example", "metrics": metrics, "date_range": "12mo", "filters": germany,
    }));
    let total = |i: usize| totals[0]["metrics"][i].as_i64().unwrap();
    let sum = |i: usize| by_source.iter().map(|r| r["metrics"][i].as_i64().unwrap()).sum::<i64>();
    assert!(by_source.len() >= 3 && total(2) > 100, "a year of German traffic from several sources: {by_source:?}");
    assert_eq!((sum(1), sum(2)), (total(1), total(2)), "visits and page views add up to Germany's: {by_source:?}");
    for row in &by_source {
        // Both are sketch estimates (exact while small), so allow the sketch's error.
        let bound = total(0) + total(0) / 50 + 1;
        assert!(row["metrics"][0].as_i64().unwrap() <= bound, "no source has more visitors than Germany: {row}");
    }
    server.stop();
}
