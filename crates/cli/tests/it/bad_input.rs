//! Bad input over real HTTP, endpoint by endpoint: malformed and mistyped JSON, oversize fields and
//! bodies, invalid UTF-8, unknown sites, `#` and control characters where they could address
//! storage, and missing, wrong or another site's keys. Each row states the status and what the
//! answer must say. After the whole table, storage holds exactly the one valid event sent before it.

use std::time::{Duration, Instant};

use jiff::Timestamp;
use serde_json::{Value, json};

use crate::support::{Client, Server, add_site, tally, ua};

/// One request and what it must be answered.
struct Case {
    what: String,
    method: &'static str,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    status: u16,
    /// Substrings the answer's body must contain (compared without case).
    says: Vec<&'static str>,
}

fn case(what: &str, method: &'static str, path: &str, headers: &[(&str, &str)], body: impl Into<Vec<u8>>) -> Case {
    Case {
        what: what.to_owned(),
        method,
        path: path.to_owned(),
        headers: headers.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())).collect(),
        body: body.into(),
        status: 0,
        says: Vec::new(),
    }
}

impl Case {
    fn answers(mut self, status: u16, says: &[&'static str]) -> Case {
        self.status = status;
        self.says = says.to_vec();
        self
    }
}

/// A Plausible event body for `domain`, with `name` and `props`.
fn event(domain: &str, name: &str, url: &str, props: Value) -> Vec<u8> {
    json!({"n": name, "u": url, "d": domain, "r": null, "p": props}).to_string().into_bytes()
}

fn many_props(count: usize) -> Value {
    Value::Object((0..count).map(|i| (format!("k{i}"), json!("v"))).collect())
}

/// The totals of `site` over every day since 2020, or why there are none.
fn totals(addr: std::net::SocketAddr, key: &str, site: &str) -> Result<Vec<f64>, String> {
    let today = Timestamp::now().to_zoned(jiff::tz::TimeZone::UTC).date().to_string();
    let body = json!({"site_id": site, "date_range": ["2020-01-01", today],
                      "metrics": ["visitors", "visits", "pageviews", "events"]});
    let auth = format!("Bearer {key}");
    let response = Client::connect(addr).post_json("/api/v2/query", &[("authorization", &auth)], &body);
    if response.status != 200 {
        return Err(format!("status {}: {}", response.status, response.text()));
    }
    let answer: Value = serde_json::from_slice(&response.body).map_err(|e| format!("{e}: {}", response.text()))?;
    let results = answer["results"].as_array().ok_or_else(|| format!("no results in {answer}"))?;
    match results.as_slice() {
        // A site without any event may answer no row at all.
        [] => Ok(vec![0.0; 4]),
        [only] => only["metrics"]
            .as_array()
            .ok_or_else(|| format!("no metrics in {answer}"))?
            .iter()
            .map(|m| m.as_f64().ok_or_else(|| format!("{m} is not a number")))
            .collect(),
        _ => Err(format!("totals in several rows: {answer}")),
    }
}

#[test]
fn bad_input_is_refused_with_a_reason_and_changes_nothing() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = dir.path().join("data");
    let good = add_site(&store, "good.example", "UTC");
    let other = add_site(&store, "other.example", "UTC");
    let server = Server::start(&store);
    let mut failures = Vec::new();

    // The one valid event.
    let body = event("good.example", "pageview", "https://good.example/only", json!({}));
    let headers =
        [("content-type", "text/plain"), ("user-agent", ua::FIREFOX_LINUX), ("x-forwarded-for", "198.51.100.1")];
    let response = server.client().request("POST", "/api/event", &headers, &body);
    assert_eq!(response.status, 202, "the valid event: {}", response.text());
    let deadline = Instant::now() + Duration::from_secs(15);
    while totals(server.addr, &good.key, "good.example") != Ok(vec![1.0, 1.0, 1.0, 1.0]) {
        if Instant::now() > deadline {
            failures.push(format!(
                "the valid event never showed in the Stats API: {:?}",
                totals(server.addr, &good.key, "good.example")
            ));
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }

    let browser =
        [("content-type", "text/plain"), ("user-agent", ua::CHROME_WINDOWS), ("x-forwarded-for", "198.51.100.2")];
    let json_browser =
        [("content-type", "application/json"), ("user-agent", ua::CHROME_WINDOWS), ("x-forwarded-for", "198.51.100.3")];
    let page = "https://good.example/";
    let long_name = "n".repeat(121);
    let long_url = format!("https://good.example/{}", "a".repeat(2001));
    let long_key = "k".repeat(301);
    let long_value = "v".repeat(2001);
    let oversize =
        format!(r#"{{"n":"pageview","u":"{page}","d":"good.example","p":{{"x":"{}"}}}}"#, "x".repeat(70_000));
    let mut invalid_utf8 = br#"{"n":"page"#.to_vec();
    invalid_utf8.extend_from_slice(&[0xff, 0xfe]);
    invalid_utf8.extend_from_slice(br#"view","u":"https://good.example/","d":"good.example"}"#);

    let mut cases = vec![
        // POST /api/event: Plausible's endpoint answers 202 for dropped events and unknown sites, 400
        // with a JSON error for what is malformed.
        case("event: malformed JSON", "POST", "/api/event", &browser, r#"{"n":"pageview","#).answers(400, &["JSON"]),
        case("event: an array", "POST", "/api/event", &browser, "[1,2]").answers(400, &["object"]),
        case("event: name is a number", "POST", "/api/event", &browser, format!(r#"{{"n":5,"u":"{page}","d":"good.example"}}"#))
            .answers(400, &["must be"]),
        case("event: props is a list", "POST", "/api/event", &browser, format!(r#"{{"n":"x","u":"{page}","d":"good.example","p":[1]}}"#))
            .answers(400, &["must be"]),
        case("event: no url", "POST", "/api/event", &browser, r#"{"n":"pageview","d":"good.example"}"#)
            .answers(400, &["required"]),
        case("event: 121-character name", "POST", "/api/event", &browser, event("good.example", &long_name, page, json!({})))
            .answers(400, &["more than 120"]),
        case("event: 2 KB url", "POST", "/api/event", &browser, event("good.example", "pageview", &long_url, json!({})))
            .answers(400, &["more than 2000"]),
        case("event: 31 props", "POST", "/api/event", &browser, event("good.example", "x", page, many_props(31)))
            .answers(400, &["more than 30"]),
        case("event: 301-byte prop key", "POST", "/api/event", &browser, event("good.example", "x", page, Value::Object([(long_key.clone(), json!("v"))].into_iter().collect())))
            .answers(400, &["more than 300"]),
        case("event: 2001-byte prop value", "POST", "/api/event", &browser, event("good.example", "x", page, json!({"k": long_value.clone()})))
            .answers(400, &["more than 2000"]),
        case("event: a 70 KB body", "POST", "/api/event", &browser, oversize.clone()).answers(413, &["larger"]),
        case("event: invalid UTF-8", "POST", "/api/event", &browser, invalid_utf8.clone()).answers(400, &["JSON"]),
        case("event: unknown site", "POST", "/api/event", &browser, event("unknown.example", "pageview", page, json!({})))
            .answers(202, &["ok"]),
        case("event: # in the domain", "POST", "/api/event", &browser, event("good.example#AGG", "pageview", page, json!({})))
            .answers(400, &["domain"]),
        case("event: a control character in the domain", "POST", "/api/event", &browser, event("good\u{1}.example", "pageview", page, json!({})))
            .answers(400, &["domain"]),
        case("event: a control character in the name", "POST", "/api/event", &browser, event("good.example", "page\u{1}view", page, json!({})))
            .answers(400, &["control character"]),
        case("event: a control character in a prop key", "POST", "/api/event", &browser, event("good.example", "x", page, json!({"a\u{7}b": "v"})))
            .answers(400, &["control character"]),
        // Control characters in a url, referrer or prop value are data, not structure: sent to an
        // unknown site, they must be answered as usual and stored nowhere.
        case(
            "event: control characters and # everywhere, for an unknown site",
            "POST",
            "/api/event",
            &browser,
            json!({"n": "a#b", "u": "https://unknown.example/#\u{1}x", "d": "unknown.example", "r": "https://t.co/\u{1}#",
                   "p": {"k#": "v\u{1}#"}})
            .to_string(),
        )
        .answers(202, &["ok"]),
        // POST /api/send: Umami's answers.
        case("send: malformed JSON", "POST", "/api/send", &json_browser, r#"{"type":"event","payload":"#).answers(400, &["JSON"]),
        case("send: no payload", "POST", "/api/send", &json_browser, r#"{"type":"event"}"#).answers(400, &["payload"]),
        case("send: payload is a number", "POST", "/api/send", &json_browser, r#"{"type":"event","payload":5}"#)
            .answers(400, &["payload"]),
        case(
            "send: unknown website",
            "POST",
            "/api/send",
            &json_browser,
            json!({"type": "event", "payload": {"website": "00000000-0000-4000-8000-000000000000", "hostname": "good.example", "url": "/"}}).to_string(),
        )
        .answers(400, &["website"]),
        case(
            "send: # in the website",
            "POST",
            "/api/send",
            &json_browser,
            json!({"type": "event", "payload": {"website": format!("{}#AGG", good.umami_id), "hostname": "good.example", "url": "/"}}).to_string(),
        )
        .answers(400, &["website"]),
        case(
            "send: 121-character name",
            "POST",
            "/api/send",
            &json_browser,
            json!({"type": "event", "payload": {"website": good.umami_id, "hostname": "good.example", "url": "/", "name": &long_name}}).to_string(),
        )
        .answers(400, &["more than 120"]),
        case(
            "send: a control character in the name",
            "POST",
            "/api/send",
            &json_browser,
            json!({"type": "event", "payload": {"website": good.umami_id, "hostname": "good.example", "url": "/", "name": "a\u{1}b"}}).to_string(),
        )
        .answers(400, &["control character"]),
        case("send: a 70 KB body", "POST", "/api/send", &json_browser, oversize.clone()).answers(413, &["larger"]),
        case("send: invalid UTF-8", "POST", "/api/send", &json_browser, invalid_utf8.clone()).answers(400, &["JSON"]),
    ];

    // POST /api/import: the site comes from its key; bad lines are reported by number.
    let auth = |key: &str| format!("Bearer {key}");
    let (good_auth, wrong_auth, hash_auth) = (auth(&good.key), auth("tk_not-a-key"), auth(&format!("{}#x", good.key)));
    let now = Timestamp::now().as_millisecond();
    let line = |fields: Value| {
        let mut line = json!({"timestamp": now - 3_600_000, "name": "pageview", "url": page, "visitor": "v", "user_agent": ua::CHROME_WINDOWS});
        for (k, v) in fields.as_object().into_iter().flatten() {
            line[k] = v.clone();
        }
        format!("{line}\n")
    };
    let import = |what: &str, body: String, says: &[&'static str]| {
        case(
            what,
            "POST",
            "/api/import",
            &[("authorization", &good_auth), ("content-type", "application/x-ndjson")],
            body,
        )
        .answers(200, says)
    };
    cases.extend([
        case("import: no key", "POST", "/api/import", &[], line(json!({}))).answers(401, &["key"]),
        case("import: a wrong key", "POST", "/api/import", &[("authorization", &wrong_auth)], line(json!({})))
            .answers(401, &["key"]),
        case("import: # in the key", "POST", "/api/import", &[("authorization", &hash_auth)], line(json!({})))
            .answers(401, &["key"]),
        import("import: malformed JSON", "{\"timestamp\":\n".to_owned(), &[r#""imported":0"#, r#""line":1"#]),
        import("import: no timestamp", line(json!({"timestamp": null})), &[r#""imported":0"#, "timestamp"]),
        import("import: timestamp is a boolean", line(json!({"timestamp": true})), &[r#""imported":0"#, "timestamp"]),
        import(
            "import: timestamp past year 9999",
            line(json!({"timestamp": 253_402_300_800_001_i64})),
            &[r#""imported":0"#, "timestamp"],
        ),
        import("import: 121-character name", line(json!({"name": &long_name})), &[r#""imported":0"#, "more than 120"]),
        import("import: 2 KB url", line(json!({"url": &long_url})), &[r#""imported":0"#, "more than 2000"]),
        import("import: 31 props", line(json!({"props": many_props(31)})), &[r#""imported":0"#, "more than 30"]),
        import(
            "import: a control character in the name",
            line(json!({"name": "a\u{1}b"})),
            &[r#""imported":0"#, "control character"],
        ),
        import(
            "import: the second line bad",
            format!("{}{}", line(json!({"name": ""})), line(json!({"name": "x", "props": [1]}))),
            &[r#""imported":0"#, r#""line":2"#],
        ),
    ]);
    let csv = |what: &str, body: String, status: u16, says: &[&'static str]| {
        case(what, "POST", "/api/import", &[("authorization", &good_auth), ("content-type", "text/csv")], body)
            .answers(status, says)
    };
    let (hour_ago, good_url) = (now - 3_600_000, format!("https://good.example{page}"));
    cases.extend([
        csv("import csv: an unknown column", "timestamp,url,refferer\n".into(), 400, &["unknown column"]),
        csv("import csv: no url column", "timestamp,name\n".into(), 400, &["has no", "url"]),
        csv(
            "import csv: a record one field short",
            format!("timestamp,url,name\n{hour_ago},{good_url}\n"),
            200,
            &[r#""imported":0"#, r#""line":2"#, "fields"],
        ),
        csv(
            "import csv: a bad timestamp",
            format!("timestamp,url\nyesterday,{good_url}\n"),
            200,
            &[r#""imported":0"#, "timestamp"],
        ),
        csv(
            "import csv: a control character in the name",
            format!("timestamp,url,user_agent,name\n{hour_ago},{good_url},\"{}\",\"a\u{1}b\"\n", ua::CHROME_WINDOWS),
            200,
            &[r#""imported":0"#, "control character"],
        ),
        csv(
            "import csv: invalid UTF-8 header",
            "timestamp,url,\u{fffd}\n".replace('\u{fffd}', "x\u{7f}"),
            400,
            &["unknown column"],
        ),
        case(
            "import: an unknown format",
            "POST",
            "/api/import?format=xml",
            &[("authorization", &good_auth)],
            line(json!({})),
        )
        .answers(400, &["format"]),
    ]);
    let mut utf8_line = line(json!({"name": "NAME"})).into_bytes();
    if let Some(at) = utf8_line.windows(4).position(|w| w == b"NAME") {
        utf8_line.splice(at..at + 4, [0xff, 0xfe]);
    }
    cases.push(
        case("import: invalid UTF-8", "POST", "/api/import", &[("authorization", &good_auth)], utf8_line)
            .answers(200, &[r#""imported":0"#]),
    );

    // POST /api/v2/query: the Stats API, Bearer key of the site asked about.
    let today = Timestamp::now().to_zoned(jiff::tz::TimeZone::UTC).date().to_string();
    let q = |fields: Value| {
        let mut body = json!({"site_id": "good.example", "date_range": ["2020-01-01", today], "metrics": ["visitors"]});
        for (k, v) in fields.as_object().into_iter().flatten() {
            body[k] = v.clone();
        }
        body.to_string()
    };
    let query = |what: &str, key: &str, body: String, status: u16, says: &[&'static str]| {
        case(what, "POST", "/api/v2/query", &[("authorization", key), ("content-type", "application/json")], body)
            .answers(status, says)
    };
    let other_auth = auth(&other.key);
    cases.extend([
        case("query: no key", "POST", "/api/v2/query", &[("content-type", "application/json")], q(json!({})))
            .answers(401, &["key"]),
        query("query: a wrong key", &wrong_auth, q(json!({})), 401, &["key"]),
        query("query: # in the key", &hash_auth, q(json!({})), 401, &["key"]),
        query("query: another site's key", &other_auth, q(json!({})), 401, &["key"]),
        query("query: an unknown site", &good_auth, q(json!({"site_id": "unknown.example"})), 401, &["key"]),
        query("query: # in the site id", &good_auth, q(json!({"site_id": "good.example#AGG"})), 401, &["key"]),
        query("query: malformed JSON", &good_auth, r#"{"site_id":"#.to_owned(), 400, &["JSON"]),
        query("query: metrics is a string", &good_auth, q(json!({"metrics": "visitors"})), 400, &["metrics"]),
        query("query: an unknown metric", &good_auth, q(json!({"metrics": ["frobs"]})), 400, &["frobs"]),
        query(
            "query: an unknown dimension",
            &good_auth,
            q(json!({"dimensions": ["visit:frob"]})),
            400,
            &["visit:frob"],
        ),
        query(
            "query: a control character in a dimension",
            &good_auth,
            q(json!({"dimensions": ["event:props:a\u{1}"]})),
            400,
            &["dimension"],
        ),
        query(
            "query: an impossible date",
            &good_auth,
            q(json!({"date_range": ["2026-13-01", "2026-13-02"]})),
            400,
            &["date"],
        ),
        query(
            "query: an unknown filter operator",
            &good_auth,
            q(json!({"filters": [["resembles", "event:page", ["/"]]]})),
            400,
            &["resembles"],
        ),
        query(
            "query: a filter that is a string",
            &good_auth,
            q(json!({"filters": "event:page==/"})),
            400,
            &["filters"],
        ),
        query(
            "query: a negative limit",
            &good_auth,
            q(json!({"pagination": {"limit": -1, "offset": 0}})),
            400,
            &["limit"],
        ),
        query(
            "query: a 2 MB body",
            &good_auth,
            q(json!({"metrics": ["visitors"], "padding": "x".repeat(2_000_000)})),
            413,
            &["larger"],
        ),
        // A filter value with `#` is a value like any other: no page has it.
        query(
            "query: # in a filter value",
            &good_auth,
            q(json!({"dimensions": ["event:page"], "filters": [["is", "event:page", ["/only#AGG"]]]})),
            200,
            &[r#""results":[]"#],
        ),
    ]);
    let mut raw_invalid =
        br#"{"site_id":"good.example","date_range":["2020-01-01","2030-01-01"],"metrics":["visit"#.to_vec();
    raw_invalid.extend_from_slice(&[0xff, 0xfe]);
    raw_invalid.extend_from_slice(br#""]}"#);
    cases.push(
        case(
            "query: invalid UTF-8 in a metric",
            "POST",
            "/api/v2/query",
            &[("authorization", &good_auth)],
            raw_invalid,
        )
        .answers(400, &["JSON"]),
    );

    // The realtime and session routes: Bearer key of the site asked about.
    let live_routes = [
        ("GET", "/api/realtime"),
        ("GET", "/api/v1/stats/realtime/visitors"),
        ("GET", "/api/sessions"),
        ("GET", "/api/sessions/2026-11-22.3f2a9c0d1e4b5a67.01JDB3Y5C8M9V7T2X4K6P0QWER"),
        ("GET", "/api/visitors/3f2a9c0d1e4b5a67/sessions"),
        ("GET", "/api/visitors/3f2a9c0d1e4b5a67/events"),
        ("DELETE", "/api/visitors/3f2a9c0d1e4b5a67"),
    ];
    for (method, endpoint) in live_routes {
        let path = format!("{endpoint}?site_id=good.example");
        let name = |what: &str| format!("{method} {endpoint}: {what}");
        cases.extend([
            case(&name("no key"), method, &path, &[], "").answers(401, &["key"]),
            case(&name("a wrong key"), method, &path, &[("authorization", &wrong_auth)], "").answers(401, &["key"]),
            case(&name("another site's key"), method, &path, &[("authorization", &other_auth)], "")
                .answers(401, &["key"]),
            case(
                &name("# in the site id"),
                method,
                &format!("{endpoint}?site_id=good.example%23AGG"),
                &[("authorization", &good_auth)],
                "",
            )
            .answers(401, &["key"]),
            case(
                &name("an unknown site"),
                method,
                &format!("{endpoint}?site_id=unknown.example"),
                &[("authorization", &good_auth)],
                "",
            )
            .answers(401, &["key"]),
            case(&name("no site id"), method, endpoint, &[("authorization", &good_auth)], "")
                .answers(400, &["site_id"]),
            case(
                &name("a control character in the site id"),
                method,
                &format!("{endpoint}?site_id=good%01.example"),
                &[("authorization", &good_auth)],
                "",
            )
            .answers(401, &["key"]),
        ]);
    }

    // POST /api/funnel: the site's key, 2 to 8 steps, each a page pattern or an event name.
    let funnel = |what: &str, key: &str, body: Value, status: u16, says: &[&'static str]| {
        case(
            what,
            "POST",
            "/api/funnel",
            &[("authorization", key), ("content-type", "application/json")],
            body.to_string(),
        )
        .answers(status, says)
    };
    let two = json!([{ "page": "/" }, { "event": "Signup" }]);
    cases.extend([
        funnel("funnel: no key", "", json!({ "site_id": "good.example", "date_range": "7d", "steps": two }), 401, &["key"]),
        funnel("funnel: another site's key", &other_auth, json!({ "site_id": "good.example", "date_range": "7d", "steps": two }), 401, &["key"]),
        funnel("funnel: no steps", &good_auth, json!({ "site_id": "good.example", "date_range": "7d" }), 400, &["steps"]),
        funnel("funnel: one step", &good_auth, json!({ "site_id": "good.example", "date_range": "7d", "steps": [{ "page": "/" }] }), 400, &["2 to 8"]),
        funnel(
            "funnel: a step with both",
            &good_auth,
            json!({ "site_id": "good.example", "date_range": "7d", "steps": [{ "page": "/", "event": "x" }, { "page": "/" }] }),
            400,
            &["step 1"],
        ),
        funnel(
            "funnel: a control character in a step",
            &good_auth,
            json!({ "site_id": "good.example", "date_range": "7d", "steps": [{ "page": "/" }, { "event": "a\u{1}b" }] }),
            400,
            &["step 2"],
        ),
        funnel("funnel: no date range", &good_auth, json!({ "site_id": "good.example", "steps": two }), 400, &["date_range"]),
        funnel(
            "funnel: before the raw events kept",
            &good_auth,
            json!({ "site_id": "good.example", "date_range": ["2020-01-01", "2020-01-31"], "steps": two }),
            400,
            &["keeps for 730 days"],
        ),
    ]);

    // Their own parameters: a bad date, limit, session reference or visitor id is refused.
    let live = |what: &str, method: &'static str, path: &str, status: u16, says: &[&'static str]| {
        case(what, method, path, &[("authorization", &good_auth)], "").answers(status, says)
    };
    cases.extend([
        live("sessions: a malformed date", "GET", "/api/sessions?site_id=good.example&date=2026-13-01", 400, &["date"]),
        live(
            "sessions: a limit that is not a number",
            "GET",
            "/api/sessions?site_id=good.example&limit=many",
            400,
            &["limit"],
        ),
        live(
            "session: # in the reference",
            "GET",
            "/api/sessions/x%23AGG?site_id=good.example",
            400,
            &["not a session reference"],
        ),
        live(
            "session: a control character",
            "GET",
            "/api/sessions/x%01y?site_id=good.example",
            400,
            &["not a session reference"],
        ),
        live(
            "session: none such",
            "GET",
            "/api/sessions/2026-11-22.3f2a9c0d1e4b5a67.01JDB3Y5C8M9V7T2X4K6P0QWER?site_id=good.example",
            404,
            &["no such session"],
        ),
        live(
            "visitor: # in the id",
            "GET",
            "/api/visitors/a%23b/sessions?site_id=good.example",
            400,
            &["not a visitor id"],
        ),
        live(
            "visitor erase: # in the id",
            "DELETE",
            "/api/visitors/a%23V?site_id=good.example",
            400,
            &["not a visitor id"],
        ),
        live(
            "visitor erase: a malformed date",
            "DELETE",
            "/api/visitors/abc?site_id=good.example&date=yesterday",
            400,
            &["date"],
        ),
    ]);

    for case in &cases {
        let headers: Vec<(&str, &str)> = case.headers.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        // A fresh connection each: a refused request may close its connection.
        let response = Client::connect(server.addr).request(case.method, &case.path, &headers, &case.body);
        let text = response.text();
        let lower = text.to_lowercase();
        let missing: Vec<&str> = case.says.iter().copied().filter(|s| !lower.contains(&s.to_lowercase())).collect();
        if response.status != case.status || !missing.is_empty() {
            failures.push(format!(
                "{}: expected {} saying {:?}, got {} {}",
                case.what,
                case.status,
                case.says,
                response.status,
                text.chars().take(300).collect::<String>()
            ));
        }
        // A 4xx answer from our own endpoints is JSON saying what is wrong.
        let json_type = response.headers.iter().any(|(n, v)| n == "content-type" && v.starts_with("application/json"));
        let is_json = serde_json::from_slice::<Value>(&response.body).is_ok();
        if response.status == 400 && !case.path.starts_with("/api/send") && !(json_type && is_json) {
            failures.push(format!("{}: a 400 answer that is not JSON: {text}", case.what));
        }
    }

    // Nothing changed: the one valid event, and nothing on the other site.
    match totals(server.addr, &good.key, "good.example") {
        Ok(t) if t == [1.0, 1.0, 1.0, 1.0] => {}
        other => failures.push(format!("good.example after the table: expected [1, 1, 1, 1], got {other:?}")),
    }
    match totals(server.addr, &other.key, "other.example") {
        Ok(t) if t == [0.0, 0.0, 0.0, 0.0] => {}
        other => failures.push(format!("other.example after the table: expected nothing, got {other:?}")),
    }
    server.stop();
    for site in ["good.example", "other.example"] {
        let output = tally(&store, &["aggregate", "--rebuild", "--site", site, "--verify"]);
        let text = String::from_utf8_lossy(&output.stdout);
        let expected_events = if site == "good.example" { "events read: 1\n" } else { "events read: 0\n" };
        if !output.status.success() || !text.contains("differences: 0\n") || !text.contains(expected_events) {
            failures.push(format!(
                "aggregate --rebuild --verify of {site} ({}), expected {expected_events:?}:\n{text}{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            ));
        }
    }

    assert!(
        failures.is_empty(),
        "{} of {} expectations failed:\n\n{}",
        failures.len(),
        cases.len() + 4,
        failures.join("\n\n")
    );
}
