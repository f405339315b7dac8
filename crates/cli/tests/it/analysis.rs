//! Analysis over real HTTP on hand-worked traffic: comparisons with the previous period and the
//! year before, filters and saved segments, and exports.
//!
//! The traffic, all UTC, on `cmp.test` (imported with `tally import` before the server starts):
//!
//! | range | visitor | events | visit |
//! | --- | --- | --- | --- |
//! | current, 8–14 Oct 2026 | a | 8 Oct 10:00 `/?utm_source=news`, 10:02 `/pricing`, 10:03 `Signup` | 2 pv, 180 s |
//! | | b | 9 Oct 09:00 `/` | bounce |
//! | | c | 10 Oct 12:00 `/pricing` (from google.com) | bounce |
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
        line("2026-10-08T10:03:00Z", "/pricing", "a", json!({ "name": "Signup" })),
        line("2026-10-09T09:00:00Z", "/", "b", json!({})),
        line("2026-10-10T12:00:00Z", "/pricing", "c", json!({ "referrer": "https://www.google.com/" })),
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
    let server = Server::start(&store);
    Fixture { _dir: dir, server, key: site.key }
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
