//! Analysis over real HTTP on hand-worked traffic: comparisons with the previous period and the
//! year before, filters and saved segments, and exports.
//!
//! The traffic, all UTC, on `cmp.test` (imported with `tally import` before the server starts):
//!
//! | range | visitor | events | visit |
//! | --- | --- | --- | --- |
//! | current, 8–14 Oct 2026 | a | 8 Oct 10:00 `/?utm_source=news`, 10:02 `/pricing`, 10:03 `Signup` (plan pro) | 2 pv, 180 s |
//! | | b | 9 Oct 09:00 `/` | bounce |
//! | | c | 10 Oct 12:00 `/pricing` (from google.com, plan free, seats 3) | bounce |
//! | previous, 1–7 Oct 2026 | d | 2 Oct 08:00 `/` | bounce |
//! | | e | 3 Oct 08:00 `/`, 08:01 `/about` | 2 pv, 60 s |
//! | a year before, 8–14 Oct 2025 | f | 8 Oct 2025 09:00 `/` | bounce |
//!
//! So the current week has 3 visitors, 3 visits, 4 page views and a bounce rate of 67 %; the
//! previous 2, 2, 3 and 50 %; the year before 1, 1, 1 and 100 %.

use serde_json::{Value, json};

use crate::support::{Client, Server, add_site, tally};

const UA: &str = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0";

pub(crate) struct Fixture {
    _dir: tempfile::TempDir,
    pub server: Server,
    pub key: String,
    /// A key with the `admin` scope (segments).
    pub admin: String,
}

/// The site with the table's traffic, and a server over it.
pub(crate) fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("data");
    let site = add_site(&store, "cmp.test", "UTC");
    crate::support::tally_ok(&store, &["goal", "add", "cmp.test", "--event", "Signup"]);
    let line = |ts: &str, path: &str, visitor: &str, extra: Value| {
        let mut l =
            json!({ "timestamp": ts, "url": format!("https://cmp.test{path}"), "user_agent": UA, "visitor": visitor });
        if let (Value::Object(l), Value::Object(extra)) = (&mut l, extra) {
            l.extend(extra);
        }
        l.to_string()
    };
    let lines = [
        line("2026-10-08T10:00:00Z", "/?utm_source=news", "a", json!({})),
        line("2026-10-08T10:02:00Z", "/pricing", "a", json!({})),
        line("2026-10-08T10:03:00Z", "/pricing", "a", json!({ "name": "Signup", "props": { "plan": "pro" } })),
        line("2026-10-09T09:00:00Z", "/", "b", json!({})),
        line(
            "2026-10-10T12:00:00Z",
            "/pricing",
            "c",
            json!({ "referrer": "https://www.google.com/", "props": { "plan": "free", "seats": "3" } }),
        ),
        line("2026-10-02T08:00:00Z", "/", "d", json!({})),
        line("2026-10-03T08:00:00Z", "/", "e", json!({})),
        line("2026-10-03T08:01:00Z", "/about", "e", json!({})),
        line("2025-10-08T09:00:00Z", "/", "f", json!({})),
    ];
    let file = dir.path().join("events.ndjson");
    std::fs::write(&file, lines.join("\n")).unwrap();
    let out = tally(&store, &["import", file.to_str().unwrap(), "--site", "cmp.test"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && stdout.contains("imported: 9"), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let admin = crate::support::field(
        &crate::support::tally_ok(&store, &["key", "create", "cmp.test", "--scope", "admin"]),
        "key:",
    );
    let server = Server::start(&store);
    Fixture { _dir: dir, server, key: site.key, admin }
}

impl Fixture {
    pub fn client(&self) -> Client {
        self.server.client()
    }

    /// `POST path` with the site key: status and JSON body.
    pub fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let auth = format!("Bearer {}", self.key);
        let r = self.client().post_json(path, &[("authorization", &auth)], body);
        let json = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
        (r.status, json)
    }

    /// `method path` with the admin key: status and JSON body.
    pub fn admin(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let auth = format!("Bearer {}", self.admin);
        let bytes = body.map(Value::to_string).unwrap_or_default();
        let headers = [("authorization", auth.as_str()), ("content-type", "application/json")];
        let r = self.client().request(method, path, &headers, bytes.as_bytes());
        (r.status, serde_json::from_slice(&r.body).unwrap_or(Value::Null))
    }

    /// `GET path` with the site key: status and JSON body.
    pub fn get(&self, path: &str) -> (u16, Value) {
        let auth = format!("Bearer {}", self.key);
        let r = self.client().request("GET", path, &[("authorization", &auth)], b"");
        (r.status, serde_json::from_slice(&r.body).unwrap_or(Value::Null))
    }

    pub fn query(&self, body: Value) -> Value {
        let (status, answer) = self.post("/api/v2/query", &body);
        assert_eq!(status, 200, "{body} => {answer}");
        answer
    }
}

const WEEK: [&str; 2] = ["2026-10-08", "2026-10-14"];

#[test]
fn comparisons_with_the_previous_period_and_the_year_before() {
    let f = fixture();
    let top = |mode: &str| {
        f.query(json!({
            "site_id": "cmp.test", "date_range": WEEK,
            "metrics": ["visitors", "visits", "pageviews", "bounce_rate", "visit_duration"],
            "include": { "comparisons": { "mode": mode } },
        }))
    };
    let previous = top("previous_period");
    assert_eq!(previous["query"]["comparison_date_range"], json!(["2026-10-01", "2026-10-07"]), "{previous}");
    let row = &previous["results"][0];
    assert_eq!(row["metrics"], json!([3, 3, 4, 67, 60]), "{row}");
    assert_eq!(row["comparison"]["metrics"], json!([2, 2, 3, 50, 30]), "{row}");
    // 3 against 2 is +50 %, 4 against 3 +33 %, a bounce rate of 67 % against 50 % is 17 points,
    // 60 s against 30 s +100 %.
    assert_eq!(row["comparison"]["change"], json!([50.0, 50.0, 33.0, 17.0, 100.0]), "{row}");

    let yoy = top("year_over_year");
    assert_eq!(yoy["query"]["comparison_date_range"], json!(["2025-10-08", "2025-10-14"]), "{yoy}");
    assert_eq!(yoy["results"][0]["comparison"]["metrics"], json!([1, 1, 1, 100, 0]), "{yoy}");
    assert_eq!(yoy["results"][0]["comparison"]["change"], json!([200.0, 200.0, 300.0, -33.0, 100.0]), "{yoy}");

    // Matching weekdays: Thursday 8 October 2026 a year before was a Wednesday, so the comparison
    // starts on Thursday 9 October 2025, and f's visit of the 8th is outside it.
    let same_day = f.query(json!({
        "site_id": "cmp.test", "date_range": WEEK, "metrics": ["visitors"],
        "include": { "comparisons": { "mode": "year_over_year", "match_day_of_week": true } },
    }));
    assert_eq!(same_day["query"]["comparison_date_range"], json!(["2025-10-09", "2025-10-15"]), "{same_day}");
    assert_eq!(same_day["results"][0]["comparison"]["metrics"], json!([0]), "{same_day}");

    let custom = f.query(json!({
        "site_id": "cmp.test", "date_range": WEEK, "metrics": ["visitors"],
        "include": { "comparisons": { "mode": "custom", "date_range": ["2026-10-03", "2026-10-03"] } },
    }));
    assert_eq!(custom["results"][0]["comparison"]["metrics"], json!([1]), "{custom}");

    // A breakdown: each row compared with the same page; the second page of one row still finds
    // its comparison among every row of the other range.
    let pages = f.query(json!({
        "site_id": "cmp.test", "date_range": WEEK, "metrics": ["visitors", "pageviews"],
        "dimensions": ["event:page"], "include": { "comparisons": { "mode": "previous_period" } },
    }));
    let rows: Vec<(Value, Value, Value)> = pages["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["dimensions"].clone(), r["metrics"].clone(), r["comparison"].clone()))
        .collect();
    assert_eq!(
        rows,
        vec![
            (json!(["/"]), json!([2, 2]), json!({ "dimensions": ["/"], "metrics": [2, 2], "change": [0.0, 0.0] })),
            (
                json!(["/pricing"]),
                json!([2, 2]),
                json!({ "dimensions": ["/pricing"], "metrics": [0, 0], "change": [100.0, 100.0] })
            ),
        ],
        "{pages}"
    );
    let second = f.query(json!({
        "site_id": "cmp.test", "date_range": WEEK, "metrics": ["pageviews"], "dimensions": ["event:page"],
        "order_by": [["pageviews", "asc"], ["event:page", "desc"]], "pagination": { "limit": 1, "offset": 1 },
        "include": { "comparisons": { "mode": "previous_period" } },
    }));
    assert_eq!(
        second["results"],
        json!([{ "dimensions": ["/"], "metrics": [2],
        "comparison": { "dimensions": ["/"], "metrics": [2], "change": [0.0] } }]),
        "{second}"
    );

    // A series: day i against day i of the previous week, every day present.
    let days = f.query(json!({
        "site_id": "cmp.test", "date_range": WEEK, "metrics": ["pageviews"], "dimensions": ["time:day"],
        "include": { "comparisons": { "mode": "previous_period" } },
    }));
    let series: Vec<(String, i64, String, i64, f64)> = days["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["dimensions"][0].as_str().unwrap().to_owned(),
                r["metrics"][0].as_i64().unwrap(),
                r["comparison"]["dimensions"][0].as_str().unwrap().to_owned(),
                r["comparison"]["metrics"][0].as_i64().unwrap(),
                r["comparison"]["change"][0].as_f64().unwrap(),
            )
        })
        .collect();
    let day = |n: u32, pv: i64, before: i64, change: f64| {
        (format!("2026-10-{:02}", 8 + n), pv, format!("2026-10-{:02}", 1 + n), before, change)
    };
    assert_eq!(
        series,
        vec![
            day(0, 2, 0, 100.0),
            day(1, 1, 1, 0.0),
            day(2, 1, 2, -50.0),
            day(3, 0, 0, 0.0),
            day(4, 0, 0, 0.0),
            day(5, 0, 0, 0.0),
            day(6, 0, 0, 0.0)
        ],
        "{days}"
    );

    // Comparisons under a filter compare the filtered figures.
    let filtered = f.query(json!({
        "site_id": "cmp.test", "date_range": WEEK, "metrics": ["visitors"],
        "filters": [["is", "event:page", ["/"]]], "include": { "comparisons": { "mode": "previous_period" } },
    }));
    assert_eq!(filtered["results"][0]["metrics"], json!([2]), "{filtered}");
    assert_eq!(filtered["results"][0]["comparison"]["metrics"], json!([2]), "{filtered}");

    // Bad input: a clear 400.
    for (include, says) in [
        (json!({ "comparisons": { "mode": "last_tuesday" } }), "include.comparisons.mode"),
        (json!({ "comparisons": { "mode": "custom" } }), "date_range"),
        (json!({ "comparisons": { "mode": "year_over_year", "match_day_of_week": "yes" } }), "match_day_of_week"),
        (json!({ "comparisons": { "mode": "custom", "date_range": ["2026-10-09", "2026-10-01"] } }), "date_range"),
        (json!({ "comparisons": "previous_period" }), "include.comparisons"),
        (json!({ "colours": true }), "include.colours"),
        (json!([]), "`include` must be an object"),
    ] {
        let (status, answer) = f.post(
            "/api/v2/query",
            &json!({ "site_id": "cmp.test", "date_range": WEEK, "metrics": ["visitors"], "include": include }),
        );
        assert_eq!(status, 400, "{include} => {answer}");
        assert!(answer["error"].as_str().unwrap_or("").contains(says), "{include} => {answer}");
    }
}

const BOTH: [&str; 2] = ["2026-10-01", "2026-10-14"];

#[test]
fn filters_segments_funnels_and_realtime() {
    let f = fixture();
    let visitors = |filters: Value| -> Value {
        let answer =
            f.query(json!({ "site_id": "cmp.test", "date_range": BOTH, "metrics": ["visitors"], "filters": filters }));
        answer["results"][0]["metrics"][0].clone()
    };
    // Several values are OR: `/` or `/about` was viewed by a, b, d and e.
    assert_eq!(visitors(json!([["is", "event:page", ["/", "/about"]]])), json!(4));
    // Several dimensions are AND: /pricing and from Google is c alone.
    assert_eq!(visitors(json!([["is", "event:page", ["/pricing"]], ["is", "visit:source", ["Google"]]])), json!(1));
    assert_eq!(visitors(json!([["contains", "event:page", ["pric"]]])), json!(2));
    assert_eq!(visitors(json!([["matches", "event:page", ["^/(about|pricing)$"]]])), json!(3));
    assert_eq!(visitors(json!([["is_not", "visit:source", ["Google"]]])), json!(4));

    // A saved segment, listed, used as Plausible's `["is", "segment", [id]]`, removed.
    let (status, made) = f.admin(
        "POST",
        "/api/sites/cmp.test/segments",
        Some(&json!({ "name": "From Google", "filters": [["is", "visit:source", ["Google"]]] })),
    );
    assert_eq!(status, 201, "{made}");
    let id = made["segment_id"].as_str().unwrap().to_owned();
    let (status, list) = f.get("/api/sites/cmp.test/segments");
    assert_eq!(status, 200);
    assert_eq!(
        list["segments"],
        json!([{ "segment_id": id, "name": "From Google", "filters": [["is", "visit:source", ["Google"]]] }])
    );
    assert_eq!(visitors(json!([["is", "segment", [id]]])), json!(1));
    // With another filter: AND.
    assert_eq!(visitors(json!([["is", "segment", [id]], ["is", "event:page", ["/"]]])), json!(0));
    let pages = f.query(json!({ "site_id": "cmp.test", "date_range": BOTH, "metrics": ["visitors"],
        "dimensions": ["event:page"], "filters": [["is", "segment", [id]]] }));
    assert_eq!(pages["results"], json!([{ "dimensions": ["/pricing"], "metrics": [1] }]), "{pages}");
    for (body, says) in [
        (json!({ "name": "Nested", "filters": [["is", "segment", [id]]] }), "another segment"),
        (json!({ "name": "Empty", "filters": [] }), "at least one filter"),
        (json!({ "name": "Bad op", "filters": [["near", "event:page", ["/"]]] }), "unknown filter operator"),
        (json!({ "name": "Bad regex", "filters": [["matches", "event:page", ["("]]] }), "not a regular expression"),
        (json!({ "name": "Bad dimension", "filters": [["is", "visit:shoe_size", ["9"]]] }), "unknown filter dimension"),
        (json!({ "name": "", "filters": [["is", "event:page", ["/"]]] }), "name"),
    ] {
        let (status, answer) = f.admin("POST", "/api/sites/cmp.test/segments", Some(&body));
        assert_eq!(status, 400, "{body} => {answer}");
        assert!(answer["error"].as_str().unwrap_or("").contains(says), "{body} => {answer}");
    }
    // A stats key lists segments but does not make them.
    let (status, _) =
        f.post("/api/sites/cmp.test/segments", &json!({ "name": "x", "filters": [["is", "event:page", ["/"]]] }));
    assert_eq!(status, 401);
    let (_, list) = f.get("/api/sites/cmp.test/segments");
    assert_eq!(list["segments"].as_array().unwrap().len(), 1, "bad input changed nothing: {list}");
    let (status, answer) = f.post(
        "/api/v2/query",
        &json!({ "site_id": "cmp.test", "date_range": BOTH,
        "metrics": ["visitors"], "filters": [["is", "segment", ["01JUNKNOWNSEGMENT0000000000"]]] }),
    );
    assert!(status == 400 && answer["error"].as_str().unwrap().contains("no segment"), "{answer}");
    assert_eq!(f.admin("DELETE", &format!("/api/sites/cmp.test/segments/{id}"), None).0, 200);
    let (status, _) = f.post(
        "/api/v2/query",
        &json!({ "site_id": "cmp.test", "date_range": BOTH,
        "metrics": ["visitors"], "filters": [["is", "segment", [id]]] }),
    );
    assert_eq!(status, 400, "a removed segment is no filter");

    // Funnels under filters count the visits the filters select.
    let funnel = |filters: Value| -> Vec<i64> {
        let (status, answer) = f.post(
            "/api/funnel",
            &json!({ "site_id": "cmp.test", "date_range": BOTH,
            "steps": [{ "page": "/" }, { "page": "/pricing" }], "filters": filters }),
        );
        assert_eq!(status, 200, "{answer}");
        answer["steps"].as_array().unwrap().iter().map(|s| s["visitors"].as_i64().unwrap()).collect()
    };
    assert_eq!(funnel(json!([])), vec![4, 1]);
    // Of the 4 who viewed `/`, 1 went on to /pricing: 25 % from the step before, 3 (75 %) lost.
    let (_, whole) = f.post(
        "/api/funnel",
        &json!({ "site_id": "cmp.test", "date_range": BOTH,
        "steps": [{ "page": "/" }, { "page": "/pricing" }] }),
    );
    assert_eq!(
        whole["steps"],
        json!([
            { "step": "Visit /", "visitors": 4, "conversion_rate": 100.0, "conversion_rate_step": 100.0, "dropoff": 0, "dropoff_percentage": 0.0 },
            { "step": "Visit /pricing", "visitors": 1, "conversion_rate": 25.0, "conversion_rate_step": 25.0, "dropoff": 3, "dropoff_percentage": 75.0 },
        ]),
        "{whole}"
    );
    assert_eq!(funnel(json!([["is", "visit:utm_source", ["news"]]])), vec![1, 1]);
    assert_eq!(funnel(json!([["is", "event:page", ["/about"]]])), vec![1, 0]);
    assert_eq!(funnel(json!([["is_not", "event:page", ["/about"]]])), vec![3, 1]);
    let (status, _) = f.post(
        "/api/funnel",
        &json!({ "site_id": "cmp.test", "date_range": BOTH,
        "steps": [{ "page": "/" }, { "page": "/pricing" }], "filters": [["matches", "event:page", ["("]]] }),
    );
    assert_eq!(status, 400);

    // Realtime under a filter: two visitors now, one from Google.
    let now = jiff::Timestamp::now();
    let lines: String = [
        json!({ "timestamp": now.to_string(), "url": "https://cmp.test/live", "user_agent": UA, "visitor": "g",
                "referrer": "https://www.google.com/" }),
        json!({ "timestamp": now.to_string(), "url": "https://cmp.test/live-too", "user_agent": UA, "visitor": "h" }),
    ]
    .iter()
    .map(|l| format!("{l}\n"))
    .collect();
    let auth = format!("Bearer {}", f.key);
    let r = f.client().request(
        "POST",
        "/api/import",
        &[("authorization", &auth), ("content-type", "application/x-ndjson")],
        lines.as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let filters = "%5B%5B%22is%22%2C%22visit%3Asource%22%2C%5B%22Google%22%5D%5D%5D";
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (_, all) = f.get("/api/realtime?site_id=cmp.test");
        let (status, google) = f.get(&format!("/api/realtime?site_id=cmp.test&filters={filters}"));
        assert_eq!(status, 200, "{google}");
        if all["current_visitors"] == json!(2) {
            assert_eq!(google["current_visitors"], json!(1), "{google}");
            assert_eq!(google["top_pages"], json!([{ "page": "/live", "visitors": 1, "pageviews": 1 }]), "{google}");
            let minutes: i64 = google["pageviews_per_minute"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["pageviews"].as_i64().unwrap())
                .sum();
            assert_eq!(minutes, 1, "{google}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "realtime never showed the two visitors: {all}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    // Every panel over the last 30 minutes: the Stats API's `30m`.
    let last30 = |metrics: Value, dimensions: Value, filters: Value| {
        f.query(json!({ "site_id": "cmp.test", "date_range": "30m", "metrics": metrics, "dimensions": dimensions,
            "filters": filters }))["results"]
            .clone()
    };
    assert_eq!(
        last30(json!(["visitors", "visits", "pageviews", "bounce_rate"]), json!([]), json!([])),
        json!([{ "dimensions": [], "metrics": [2, 2, 2, 100] }])
    );
    assert_eq!(
        last30(json!(["visitors", "pageviews"]), json!(["event:page"]), json!([])),
        json!([{ "dimensions": ["/live"], "metrics": [1, 1] }, { "dimensions": ["/live-too"], "metrics": [1, 1] }])
    );
    assert_eq!(
        last30(json!(["visitors"]), json!(["visit:source"]), json!([])),
        json!([{ "dimensions": ["Direct / None"], "metrics": [1] }, { "dimensions": ["Google"], "metrics": [1] }])
    );
    assert_eq!(
        last30(json!(["visitors"]), json!(["event:page"]), json!([["is", "visit:source", ["Google"]]])),
        json!([{ "dimensions": ["/live"], "metrics": [1] }])
    );
    for body in [
        json!({ "site_id": "cmp.test", "date_range": "30m", "metrics": ["visitors"], "dimensions": ["time:day"] }),
        json!({ "site_id": "cmp.test", "date_range": "30m", "metrics": ["visitors"],
                "include": { "comparisons": { "mode": "previous_period" } } }),
        json!({ "site_id": "cmp.test", "date_range": "30m", "metrics": ["bananas"] }),
    ] {
        let (status, answer) = f.post("/api/v2/query", &body);
        assert_eq!(status, 400, "{body} => {answer}");
    }
    let (status, answer) = f.get("/api/realtime?site_id=cmp.test&filters=not-json");
    assert!(status == 400 && answer["error"].as_str().unwrap().contains("filters"), "{answer}");
}

#[test]
fn exports_of_a_panel_and_of_the_whole_dashboard() {
    let f = fixture();
    let export = |body: Value| {
        let auth = format!("Bearer {}", f.key);
        f.client().post_json("/api/export", &[("authorization", &auth)], &body)
    };
    let header = |r: &crate::support::Response, name: &str| {
        r.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone()).unwrap_or_default()
    };
    let pages = export(json!({ "site_id": "cmp.test", "date_range": WEEK, "panel": "pages" }));
    assert_eq!(pages.status, 200, "{}", pages.text());
    assert!(header(&pages, "content-type").starts_with("text/csv"));
    assert_eq!(
        header(&pages, "content-disposition"),
        "attachment; filename=\"tally-cmp.test-2026-10-08-2026-10-14-pages.csv\""
    );
    assert_eq!(pages.text(), "name,visitors,pageviews\n/,2,2\n/pricing,2,2\n");
    // The filters apply: from Google, c viewed /pricing once.
    let google = export(json!({ "site_id": "cmp.test", "date_range": WEEK, "panel": "pages",
        "filters": [["is", "visit:source", ["Google"]]] }));
    assert_eq!(google.text(), "name,visitors,pageviews\n/pricing,1,1\n");
    let goals = export(json!({ "site_id": "cmp.test", "date_range": WEEK, "panel": "conversions" }));
    assert_eq!(goals.text(), "name,visitors,events,conversion_rate\nSignup,1,1,33.33\n");
    let series = "day,visitors,visits,pageviews,views_per_visit,bounce_rate,visit_duration\n\
                  2026-10-08,1,1,2,2,0,180\n2026-10-09,1,1,1,1,100,0\n2026-10-10,1,1,1,1,100,0\n\
                  2026-10-11,0,0,0,0,0,0\n2026-10-12,0,0,0,0,0,0\n2026-10-13,0,0,0,0,0,0\n2026-10-14,0,0,0,0,0,0\n";
    let visitors = export(json!({ "site_id": "cmp.test", "date_range": WEEK, "panel": "visitors" }));
    assert_eq!(visitors.text(), series);

    // The whole dashboard: a zip of every panel's file.
    let all = export(json!({ "site_id": "cmp.test", "date_range": WEEK }));
    assert_eq!(all.status, 200, "{}", all.text());
    assert_eq!(header(&all, "content-type"), "application/zip");
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(all.body.clone())).expect("a zip");
    let names: Vec<String> = zip.file_names().map(|n| n.expect("a name").into_owned()).collect();
    for name in
        ["visitors.csv", "pages.csv", "sources.csv", "countries.csv", "conversions.csv", "operating_systems.csv"]
    {
        assert!(names.iter().any(|n| n == name), "{name} in {names:?}");
    }
    let read = |zip: &mut zip::ZipArchive<_>, name: &str| {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut zip.by_name(name).unwrap(), &mut text).unwrap();
        text
    };
    assert_eq!(read(&mut zip, "visitors.csv"), series);
    assert_eq!(read(&mut zip, "pages.csv"), "name,visitors,pageviews\n/,2,2\n/pricing,2,2\n");

    // Bad input: a clear 400.
    for (body, says) in [
        (json!({ "site_id": "cmp.test", "date_range": WEEK, "panel": "weather" }), "unknown panel"),
        (json!({ "site_id": "cmp.test", "date_range": WEEK, "panel": 3 }), "`panel`"),
        (json!({ "site_id": "cmp.test", "date_range": "fortnight" }), "date_range"),
        (
            json!({ "site_id": "cmp.test", "date_range": WEEK, "filters": [["is", "visit:shoe", ["9"]]] }),
            "unknown filter",
        ),
    ] {
        let r = export(body.clone());
        assert_eq!(r.status, 400, "{body} => {}", r.text());
        assert!(r.text().contains(says), "{body} => {}", r.text());
    }
    let r = f.client().post_json("/api/export", &[], &json!({ "site_id": "cmp.test", "date_range": WEEK }));
    assert_eq!(r.status, 401, "no key, no export");
}

#[test]
fn a_shared_link_is_framed_only_when_its_owner_lets_it() {
    let f = fixture();
    let page = |path: &str| {
        let r = f.client().request("GET", path, &[], b"");
        assert_eq!(r.status, 200, "{path}");
        let header = |name: &str| r.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
        (header("content-security-policy").unwrap_or_default(), header("x-frame-options"))
    };
    let refused = |path: &str| {
        let (csp, xfo) = page(path);
        assert!(csp.contains("frame-ancestors 'none'"), "{path}: {csp}");
        assert_eq!(xfo.as_deref(), Some("DENY"), "{path}");
    };
    let framed = |path: &str| {
        let (csp, xfo) = page(path);
        assert!(csp.contains("frame-ancestors *"), "{path}: {csp}");
        assert_eq!(xfo, None, "{path}");
    };
    let (status, open) =
        f.admin("POST", "/api/sites/cmp.test/shares", Some(&json!({ "name": "embed", "embed": true })));
    assert_eq!(status, 201, "{open}");
    assert_eq!(open["embed"], json!(true));
    let (status, closed) = f.admin("POST", "/api/sites/cmp.test/shares", Some(&json!({ "name": "plain" })));
    assert_eq!(status, 201, "{closed}");
    let (open_path, closed_path) = (open["path"].as_str().unwrap(), closed["path"].as_str().unwrap());
    framed(open_path);
    framed(&format!("{open_path}?embed=true&theme=dark"));
    refused(closed_path);
    refused("/");
    refused("/settings");
    refused(&format!("/share/{}", "0".repeat(64)));

    // Turned off, then on, from the API.
    let share = open["share_id"].as_str().unwrap();
    let (status, _) =
        f.admin("PATCH", &format!("/api/sites/cmp.test/shares/{share}"), Some(&json!({ "embed": false })));
    assert_eq!(status, 200);
    refused(open_path);
    let closed_id = closed["share_id"].as_str().unwrap();
    assert_eq!(
        f.admin("PATCH", &format!("/api/sites/cmp.test/shares/{closed_id}"), Some(&json!({ "embed": true }))).0,
        200
    );
    framed(closed_path);
    let (_, list) = f.admin("GET", "/api/sites/cmp.test/shares", None);
    let embeds: Vec<(String, bool)> = list["shares"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["name"].as_str().unwrap().to_owned(), s["embed"].as_bool().unwrap()))
        .collect();
    assert!(embeds.contains(&("embed".into(), false)) && embeds.contains(&("plain".into(), true)), "{list}");

    // Bad input changes nothing.
    let (status, with_password) = f.admin(
        "POST",
        "/api/sites/cmp.test/shares",
        Some(&json!({ "name": "secret", "password": "correct horse battery", "embed": true })),
    );
    assert!(status == 400 && with_password["error"].as_str().unwrap().contains("password"), "{with_password}");
    for body in [json!({ "embed": "yes" }), json!({})] {
        let (status, answer) = f.admin("PATCH", &format!("/api/sites/cmp.test/shares/{share}"), Some(&body));
        assert_eq!(status, 400, "{body} => {answer}");
    }
    let (status, _) =
        f.admin("PATCH", "/api/sites/cmp.test/shares/01JNOSUCHSHARE000000000000", Some(&json!({ "embed": true })));
    assert_eq!(status, 404);
    refused(open_path);
    let (_, after) = f.admin("GET", "/api/sites/cmp.test/shares", None);
    assert_eq!(after["shares"].as_array().unwrap().len(), 2, "{after}");
    // A password-protected link cannot be made embeddable later either.
    let (_, secret) = f.admin(
        "POST",
        "/api/sites/cmp.test/shares",
        Some(&json!({ "name": "secret", "password": "correct horse battery" })),
    );
    let secret_id = secret["share_id"].as_str().unwrap();
    let (status, _) =
        f.admin("PATCH", &format!("/api/sites/cmp.test/shares/{secret_id}"), Some(&json!({ "embed": true })));
    assert_eq!(status, 400);
    refused(secret["path"].as_str().unwrap());
}

#[test]
fn property_keys_breakdowns_and_goals_by_property() {
    let f = fixture();
    // The keys the week's events carry, most used first.
    let (status, keys) = f.post("/api/properties", &json!({ "site_id": "cmp.test", "date_range": WEEK }));
    assert_eq!(status, 200, "{keys}");
    assert_eq!(keys["keys"], json!([{ "key": "plan", "events": 2 }, { "key": "seats", "events": 1 }]));
    let (_, before) =
        f.post("/api/properties", &json!({ "site_id": "cmp.test", "date_range": ["2026-10-01", "2026-10-07"] }));
    assert_eq!(before["keys"], json!([]), "no properties the week before");
    let (status, _) = f.post("/api/properties", &json!({ "site_id": "cmp.test", "date_range": "fortnight" }));
    assert_eq!(status, 400);

    let plans = f.query(json!({ "site_id": "cmp.test", "date_range": WEEK, "metrics": ["visitors", "events"],
        "dimensions": ["event:props:plan"] }));
    assert_eq!(
        plans["results"],
        json!([{ "dimensions": ["free"], "metrics": [1, 1] }, { "dimensions": ["pro"], "metrics": [1, 1] }])
    );
    // Goals filtered by a property: the Signup of plan pro converts 1 of its 1 visitor; plan free
    // has no Signup.
    let goals = |plan: &str| {
        f.query(
            json!({ "site_id": "cmp.test", "date_range": WEEK, "metrics": ["visitors", "events", "conversion_rate"],
            "dimensions": ["event:goal"], "filters": [["is", "event:props:plan", [plan]]] }),
        )["results"]
            .clone()
    };
    assert_eq!(goals("pro"), json!([{ "dimensions": ["Signup"], "metrics": [1, 1, 100.0] }]));
    assert_eq!(goals("free"), json!([]));
}

/// Engagement, worked by hand: a read `/` to 80 % for 40 s and `/pricing` to 50 % then 70 % for
/// 20 s and 10 s; b read `/` to 40 % for 20 s. So `/` has a scroll depth of (80 + 40) / 2 = 60 %
/// and a time on page of (40 + 20) / 2 = 30 s, `/pricing` 70 % and 30 s, and the site, over its
/// three (visitor, page) pairs, (80 + 40 + 70) / 3 = 63 % and (40 + 20 + 30) / 3 = 30 s.
#[test]
fn scroll_depth_and_time_on_page() {
    let f = fixture();
    let engagement = |ts: &str, path: &str, visitor: &str, depth: &str, ms: &str| {
        json!({ "timestamp": ts, "url": format!("https://cmp.test{path}"), "user_agent": UA, "visitor": visitor,
                "name": "engagement", "interactive": false, "props": { "scroll_depth": depth, "engaged_ms": ms } })
    };
    let lines: String = [
        engagement("2026-10-08T10:01:00Z", "/", "a", "80", "40000"),
        engagement("2026-10-08T10:02:30Z", "/pricing", "a", "50", "20000"),
        engagement("2026-10-08T10:02:50Z", "/pricing", "a", "70", "10000"),
        engagement("2026-10-09T09:00:30Z", "/", "b", "40", "20000"),
    ]
    .iter()
    .map(|l| format!("{l}\n"))
    .collect();
    let auth = format!("Bearer {}", f.key);
    let r = f.client().request(
        "POST",
        "/api/import",
        &[("authorization", &auth), ("content-type", "application/x-ndjson")],
        lines.as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["imported"], json!(4), "{}", r.text());

    let pages = f.query(json!({ "site_id": "cmp.test", "date_range": WEEK,
        "metrics": ["visitors", "scroll_depth", "time_on_page"], "dimensions": ["event:page"] }));
    assert_eq!(
        pages["results"],
        json!([{ "dimensions": ["/"], "metrics": [2, 60, 30] }, { "dimensions": ["/pricing"], "metrics": [2, 70, 30] }]),
        "{pages}"
    );
    let site =
        f.query(json!({ "site_id": "cmp.test", "date_range": WEEK, "metrics": ["scroll_depth", "time_on_page"] }));
    assert_eq!(site["results"], json!([{ "dimensions": [], "metrics": [63, 30] }]), "{site}");
    let pricing = f
        .query(json!({ "site_id": "cmp.test", "date_range": WEEK, "metrics": ["time_on_page", "scroll_depth"],
        "filters": [["is", "event:page", ["/pricing"]]] }));
    assert_eq!(pricing["results"][0]["metrics"], json!([30, 70]), "{pricing}");
    // The week before had no engagement: null, and no change.
    let compared = f.query(json!({ "site_id": "cmp.test", "date_range": WEEK, "metrics": ["visitors", "scroll_depth"],
        "dimensions": ["event:page"], "include": { "comparisons": { "mode": "previous_period" } } }));
    assert_eq!(
        compared["results"][0],
        json!({ "dimensions": ["/"], "metrics": [2, 60],
                "comparison": { "dimensions": ["/"], "metrics": [2, null], "change": [0.0, null] } }),
        "{compared}"
    );
    for (body, says) in [
        (json!({ "metrics": ["scroll_depth"], "dimensions": ["visit:source"] }), "event:page"),
        (json!({ "metrics": ["scroll_depth"], "filters": [["is", "visit:source", ["Google"]]] }), "event:page only"),
        (
            json!({ "metrics": ["scroll_depth"], "dimensions": ["event:page"], "order_by": [["scroll_depth", "desc"]] }),
            "ordered",
        ),
        (json!({ "metrics": ["time_on_page"], "date_range": "30m" }), "30 minutes"),
    ] {
        let mut body = body;
        body["site_id"] = json!("cmp.test");
        if body.get("date_range").is_none() {
            body["date_range"] = json!(WEEK);
        }
        let (status, answer) = f.post("/api/v2/query", &body);
        assert_eq!(status, 400, "{body} => {answer}");
        assert!(answer["error"].as_str().unwrap_or("").contains(says), "{body} => {answer}");
    }
}

/// Journeys over both weeks, by hand: the visits' page views are a `/ → /pricing`, b `/`,
/// c `/pricing`, d `/`, e `/ → /about`.
#[test]
fn journeys_through_a_page() {
    let f = fixture();
    let journeys = |page: &str, filters: Value| {
        let (status, answer) = f.post(
            "/api/journeys",
            &json!({ "site_id": "cmp.test", "date_range": BOTH, "page": page, "filters": filters }),
        );
        assert_eq!(status, 200, "{answer}");
        answer
    };
    let home = journeys("/", json!([]));
    assert_eq!(home["before"], json!([{ "page": "(entrance)", "visitors": 4 }]), "{home}");
    assert_eq!(
        home["after"],
        json!([{ "page": "(exit)", "visitors": 2 }, { "page": "/about", "visitors": 1 }, { "page": "/pricing", "visitors": 1 }]),
        "{home}"
    );
    assert_eq!(
        home["paths"],
        json!([{ "pages": ["/", "/about"], "visitors": 1 }, { "pages": ["/", "/pricing"], "visitors": 1 }]),
        "{home}"
    );
    let pricing = journeys("/pricing", json!([]));
    assert_eq!(
        pricing["before"],
        json!([{ "page": "(entrance)", "visitors": 1 }, { "page": "/", "visitors": 1 }]),
        "{pricing}"
    );
    assert_eq!(pricing["after"], json!([{ "page": "(exit)", "visitors": 2 }]), "{pricing}");
    assert_eq!(pricing["paths"], json!([]), "{pricing}");
    // Under a filter: only a's visit came from the newsletter.
    let news = journeys("/", json!([["is", "visit:utm_source", ["news"]]]));
    assert_eq!(news["after"], json!([{ "page": "/pricing", "visitors": 1 }]), "{news}");
    for body in [
        json!({ "site_id": "cmp.test", "date_range": BOTH }),
        json!({ "site_id": "cmp.test", "date_range": BOTH, "page": "" }),
        json!({ "site_id": "cmp.test", "date_range": BOTH, "page": "/", "filters": [["matches", "event:page", ["("]]] }),
    ] {
        let (status, answer) = f.post("/api/journeys", &body);
        assert_eq!(status, 400, "{body} => {answer}");
    }
}
