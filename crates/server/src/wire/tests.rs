//! Unit tests for the wire formats. The parsers: one body per line, the event read (or the
//! error) below it. The answers: one answer made from `analytics` values per line, its exact
//! JSON below it (key order, integers against floats, `null`s and left-out keys included).

use analytics::event::RawEvent;
use expect_test::{Expect, expect};

use super::umami::SendKind;
use super::{RequestMeta, WireError, plausible, umami};

fn render(raw: &RawEvent) -> String {
    let mut out = format!("{} {} domain={:?}", raw.name, raw.url, raw.domain);
    if let Some(r) = &raw.referrer {
        out += &format!(" referrer={r:?}");
    }
    if !raw.props.is_empty() {
        out += &format!(" props={:?}", raw.props);
    }
    if let Some(r) = &raw.revenue {
        out += &format!(" revenue={} {}", r.amount, r.currency);
    }
    if !raw.interactive {
        out += " non-interactive";
    }
    if raw.hash_mode {
        out += " hash";
    }
    if let Some(w) = raw.screen_width {
        out += &format!(" width={w}");
    }
    if let Some(l) = &raw.language {
        out += &format!(" language={l:?}");
    }
    out
}

fn error(e: &WireError) -> String {
    format!("error[{}]: {e}", e.field())
}

fn check(body: &str, expect: Expect) {
    let actual = match plausible::parse(body.as_bytes(), RequestMeta::default()) {
        Ok(raw) => render(&raw),
        Err(e) => error(&e),
    };
    expect.assert_eq(&actual);
}

fn check_umami(body: &str, expect: Expect) {
    let actual = match umami::parse(body.as_bytes(), RequestMeta::default()) {
        Ok(send) => match send.kind {
            SendKind::Event(raw) => format!("{} {}", send.website, render(&raw)),
            other => format!("{} {other:?}", send.website),
        },
        Err(e) => error(&e),
    };
    expect.assert_eq(&actual);
}

#[test]
fn plausible_short_and_long_names() {
    // What Plausible's tracker sends.
    check(
        r#"{"n":"pageview","u":"https://example.com/a?x=1","d":"example.com","r":"https://google.com/","v":25}"#,
        expect![[r#"pageview https://example.com/a?x=1 domain="example.com" referrer="https://google.com/""#]],
    );
    check(
        r#"{"name":"Signup","url":"https://example.com/","domain":"example.com","referrer":null}"#,
        expect![[r#"Signup https://example.com/ domain="example.com""#]],
    );
    check(
        r#"{"n":"short","name":"long","u":"https://a.com/","url":"https://b.com/","d":"a.com"}"#,
        expect![[r#"short https://a.com/ domain="a.com""#]],
    );
    check(
        r#"{"n":"pageview","u":"https://a.com/","d":"a.com,b.com"}"#,
        expect![[r#"pageview https://a.com/ domain="a.com,b.com""#]],
    );
    check(
        r#"{"n":"pageview","u":"https://www.a.com/x"}"#,
        expect![[r#"pageview https://www.a.com/x domain="www.a.com""#]],
    );
    check(r#"{"n":"pageview","u":"not a url"}"#, expect![[r#"pageview not a url domain="""#]]);
    // A field sent twice keeps its last value, as JSON readers do (the body is read again
    // through a JSON value when it does not read straight into its fields).
    check(
        r#"{"n":"first","u":"https://a.com/","n":"pageview","d":"a.com","x":1,"x":2}"#,
        expect![[r#"pageview https://a.com/ domain="a.com""#]],
    );
    check(
        r#"{"n":"pageview","u":"https://a.com/","d":"a.com","d":7}"#,
        expect!["error[domain]: domain must be a string, not a number"],
    );
}

/// A body that is not UTF-8 is refused as JSON wherever the bad bytes are, in a field the route
/// reads or in one it skips (reading a body straight into its fields does not look inside the
/// strings of the fields it skips).
#[test]
fn bodies_not_utf8_are_refused_whatever_field_holds_the_bytes() {
    let body = |before: &str, after: &str| [before.as_bytes(), &[0xff, 0xfe], after.as_bytes()].concat();
    let unread = body(r#"{"n":"pageview","u":"https://a.com/","d":"a.com","x":""#, r#""}"#);
    let read = body(r#"{"n":"page"#, r#"view","u":"https://a.com/","d":"a.com"}"#);
    for bytes in [&unread, &read] {
        let plausible = plausible::parse(bytes, RequestMeta::default()).map(|_| ()).unwrap_err();
        assert!(matches!(plausible, WireError::Json(_)), "{plausible}");
        let umami = umami::parse(bytes, RequestMeta::default()).map(|_| ()).unwrap_err();
        assert!(matches!(umami, WireError::Json(_)), "{umami}");
    }
}

/// What serde_json cannot hold (a number past f64's range, a lone surrogate's escape) refuses a
/// body in a field the route reads, and is passed over in a field it skips, as any other value
/// of a skipped field is.
#[test]
fn values_serde_json_cannot_hold_are_refused_where_read_and_passed_over_where_skipped() {
    for value in ["1e400", r#""\ud800""#] {
        let skipped = format!(r#"{{"n":"pageview","u":"https://a.com/","d":"a.com","x":{value}}}"#);
        assert!(plausible::parse(skipped.as_bytes(), RequestMeta::default()).is_ok(), "{skipped}");
        let read = format!(r#"{{"n":{value},"u":"https://a.com/","d":"a.com"}}"#);
        let error = plausible::parse(read.as_bytes(), RequestMeta::default()).map(|_| ()).unwrap_err();
        assert!(matches!(error, WireError::Json(_)), "{read}: {error}");
    }
}

#[test]
fn plausible_props() {
    check(
        r#"{"n":"Buy","u":"https://a.com/","d":"a.com","p":{"plan":"pro","seats":3,"trial":false,"x":null,"y":"","z":[1],"w":{}}}"#,
        expect![[r#"Buy https://a.com/ domain="a.com" props=[("plan", "pro"), ("seats", "3"), ("trial", "false")]"#]],
    );
    check(
        r#"{"n":"Buy","u":"https://a.com/","d":"a.com","p":"{\"plan\":\"pro\"}"}"#,
        expect![[r#"Buy https://a.com/ domain="a.com" props=[("plan", "pro")]"#]],
    );
    // Plausible looks for `m` and `meta` (the older names) before `p` and `props`.
    check(
        r#"{"n":"Buy","u":"https://a.com/","d":"a.com","props":{"a":"1"},"meta":{"b":"2"}}"#,
        expect![[r#"Buy https://a.com/ domain="a.com" props=[("b", "2")]"#]],
    );
    check(
        r#"{"n":"Buy","u":"https://a.com/","d":"a.com","m":{"b":"2"}}"#,
        expect![[r#"Buy https://a.com/ domain="a.com" props=[("b", "2")]"#]],
    );
    check(
        r#"{"n":"Buy","u":"https://a.com/","d":"a.com","p":"not json"}"#,
        expect![[r#"Buy https://a.com/ domain="a.com""#]],
    );
    check(
        r#"{"n":"Buy","u":"https://a.com/","d":"a.com","p":[1,2]}"#,
        expect!["error[props]: props must be an object, not an array"],
    );
}

#[test]
fn plausible_window_width() {
    check(
        r#"{"n":"pageview","u":"https://a.com/","d":"a.com","w":1280}"#,
        expect![[r#"pageview https://a.com/ domain="a.com" width=1280"#]],
    );
    check(
        r#"{"n":"pageview","u":"https://a.com/","d":"a.com","w":390.5}"#,
        expect![[r#"pageview https://a.com/ domain="a.com" width=390"#]],
    );
    check(
        r#"{"n":"pageview","u":"https://a.com/","d":"a.com","w":"wide"}"#,
        expect![[r#"pageview https://a.com/ domain="a.com""#]],
    );
    check(
        r#"{"n":"pageview","u":"https://a.com/","d":"a.com","w":-3}"#,
        expect![[r#"pageview https://a.com/ domain="a.com""#]],
    );
}

#[test]
fn plausible_flags_and_revenue() {
    check(
        r#"{"n":"pageview","u":"https://a.com/#/x","d":"a.com","h":1,"i":false}"#,
        expect![[r#"pageview https://a.com/#/x domain="a.com" non-interactive hash"#]],
    );
    check(
        r#"{"n":"pageview","u":"https://a.com/","d":"a.com","hashMode":true,"interactive":false}"#,
        expect![[r#"pageview https://a.com/ domain="a.com" non-interactive hash"#]],
    );
    check(
        r#"{"n":"pageview","u":"https://a.com/","d":"a.com","h":0,"i":true}"#,
        expect![[r#"pageview https://a.com/ domain="a.com""#]],
    );
    check(
        r#"{"n":"Purchase","u":"https://a.com/","d":"a.com","revenue":{"currency":"EUR","amount":19.99}}"#,
        expect![[r#"Purchase https://a.com/ domain="a.com" revenue=19.99 EUR"#]],
    );
    check(
        r#"{"n":"Purchase","u":"https://a.com/","d":"a.com","$":{"currency":"usd","amount":"1322.22"}}"#,
        expect![[r#"Purchase https://a.com/ domain="a.com" revenue=1322.22 usd"#]],
    );
    check(
        r#"{"n":"Purchase","u":"https://a.com/","d":"a.com","revenue":"{\"currency\":\"EUR\",\"amount\":5}"}"#,
        expect![[r#"Purchase https://a.com/ domain="a.com" revenue=5 EUR"#]],
    );
}

#[test]
fn plausible_malformed() {
    check("", expect!["error[body]: body is not valid JSON: EOF while parsing a value at line 1 column 0"]);
    check("{", expect!["error[body]: body is not valid JSON: EOF while parsing an object at line 1 column 1"]);
    check("[1]", expect!["error[body]: body must be a JSON object, not an array"]);
    check("\u{0}", expect!["error[body]: body is not valid JSON: expected value at line 1 column 1"]);
    check(r#"{"u":"https://a.com/","d":"a.com"}"#, expect!["error[name]: name is required"]);
    check(r#"{"n":"pageview","d":"a.com"}"#, expect!["error[url]: url is required"]);
    check(r#"{"n":7,"u":"https://a.com/"}"#, expect!["error[name]: name must be a string, not a number"]);
    check(r#"{"n":"x","u":["https://a.com/"]}"#, expect!["error[url]: url must be a string, not an array"]);
    check(r#"{"n":"x","u":"https://a.com/","d":1}"#, expect!["error[domain]: domain must be a string, not a number"]);
    check(
        r#"{"n":"x","u":"https://a.com/","r":{}}"#,
        expect!["error[referrer]: referrer must be a string, not an object"],
    );
    check(
        r#"{"n":"x","u":"https://a.com/","revenue":5}"#,
        expect!["error[revenue]: revenue must be an object with currency and amount, not a number"],
    );
    check(
        r#"{"n":"x","u":"https://a.com/","revenue":{"amount":5}}"#,
        expect!["error[revenue.currency]: revenue.currency is required"],
    );
    check(
        r#"{"n":"x","u":"https://a.com/","revenue":{"currency":"EUR","amount":true}}"#,
        expect!["error[revenue.amount]: revenue.amount must be a number or a decimal string, not a boolean"],
    );
}

const SITE: &str = "c37edc28-ee5f-4c62-9ce3-377fa6f600a8";

#[test]
fn umami_events() {
    // What Umami's tracker sends for a page view.
    check_umami(
        &format!(
            r#"{{"type":"event","payload":{{"website":"{SITE}","hostname":"example.com","screen":"1920x1080","language":"en-US","title":"Home","url":"/pricing?utm_source=x","referrer":"https://news.ycombinator.com/"}}}}"#
        ),
        expect![[
            r#"c37edc28-ee5f-4c62-9ce3-377fa6f600a8 pageview https://example.com/pricing?utm_source=x domain="example.com" referrer="https://news.ycombinator.com/" width=1920 language="en-US""#
        ]],
    );
    check_umami(
        &format!(
            r#"{{"type":"event","payload":{{"website":"{SITE}","hostname":"example.com","url":"/b","referrer":"/a","name":"Signup","data":{{"plan":"pro","n":2,"cart":{{"total":9.5,"items":[1,2]}}}}}}}}"#
        ),
        expect![[
            r#"c37edc28-ee5f-4c62-9ce3-377fa6f600a8 Signup https://example.com/b domain="example.com" referrer="https://example.com/a" props=[("plan", "pro"), ("n", "2"), ("cart.total", "9.5"), ("cart.items", "[1,2]")]"#
        ]],
    );
    check_umami(
        &format!(r#"{{"type":"event","payload":{{"website":"{SITE}","url":"https://other.org/x"}}}}"#),
        expect![[r#"c37edc28-ee5f-4c62-9ce3-377fa6f600a8 pageview https://other.org/x domain="other.org""#]],
    );
    check_umami(
        &format!(r#"{{"type":"event","payload":{{"website":"{SITE}"}}}}"#),
        expect![[r#"c37edc28-ee5f-4c62-9ce3-377fa6f600a8 pageview https://localhost/ domain="localhost""#]],
    );
    check_umami(
        &format!(r#"{{"type":"identify","payload":{{"website":"{SITE}","data":{{"plan":"pro"}}}}}}"#),
        expect!["c37edc28-ee5f-4c62-9ce3-377fa6f600a8 Identify"],
    );
    check_umami(
        &format!(r#"{{"type":"performance","payload":{{"website":"{SITE}","lcp":1.5}}}}"#),
        expect![[r#"c37edc28-ee5f-4c62-9ce3-377fa6f600a8 Ignored("performance")"#]],
    );
}

#[test]
fn umami_malformed() {
    check_umami("nope", expect!["error[body]: body is not valid JSON: expected ident at line 1 column 2"]);
    check_umami(r#"{"payload":{}}"#, expect!["error[type]: type is required"]);
    check_umami(r#"{"type":"event"}"#, expect!["error[payload]: payload is required"]);
    check_umami(r#"{"type":"event","payload":[]}"#, expect!["error[payload]: payload must be an object, not an array"]);
    check_umami(r#"{"type":"event","payload":{}}"#, expect!["error[payload.website]: payload.website is required"]);
    check_umami(
        r#"{"type":"event","payload":{"website":"abc"}}"#,
        expect!["error[payload.website]: payload.website must be a UUID"],
    );
    check_umami(
        &format!(r#"{{"type":"click","payload":{{"website":"{SITE}"}}}}"#),
        expect!["error[type]: type must be event, identify, performance or engagement"],
    );
    check_umami(
        &format!(r#"{{"type":"event","payload":{{"website":"{SITE}","data":"x"}}}}"#),
        expect!["error[payload.data]: payload.data must be an object, not a string"],
    );
    check_umami(
        &format!(r#"{{"type":"event","payload":{{"website":"{SITE}","hostname":"a b/c"}}}}"#),
        expect!["error[payload.hostname]: payload.hostname is not a host name: invalid international domain name"],
    );
}

fn check_answer(answer: impl serde::Serialize, expect: Expect) {
    expect.assert_eq(&serde_json::to_string(&answer).unwrap());
}

fn row(dimensions: &[&str], metrics: Vec<analytics::stats::Value>) -> analytics::stats::Row {
    analytics::stats::Row { dimensions: dimensions.iter().map(|d| (*d).to_owned()).collect(), metrics }
}

#[test]
fn query_rows_keep_integers_floats_and_nulls() {
    use super::query::{MetricValue, ResultRow};
    use analytics::stats::{Comparison, Value};

    let now = row(&["/a"], vec![Value::Int(3), Value::Float(41.5), Value::Float(5.0), Value::Float(f64::NAN)]);
    check_answer(ResultRow::new(&now), expect![[r#"{"metrics":[3,41.5,5.0,null],"dimensions":["/a"]}"#]]);
    let c = Comparison {
        dimensions: vec!["/a".into()],
        metrics: vec![Value::Int(0), Value::Float(0.0), Value::Float(4.0), Value::Float(1.0)],
        change: vec![Some(100.0), None, Some(25.0), Some(-3.0)],
    };
    check_answer(
        ResultRow::compared(&now, &c),
        expect![[
            r#"{"metrics":[3,41.5,5.0,null],"dimensions":["/a"],"comparison":{"metrics":[0,0.0,4.0,1.0],"dimensions":["/a"],"change":[100.0,null,25.0,-3.0]}}"#
        ]],
    );
    check_answer(ResultRow::new(&row(&[], Vec::new())), expect![[r#"{"metrics":[],"dimensions":[]}"#]]);
    check_answer(
        [MetricValue::measured(Some(40)), MetricValue::measured(None), MetricValue::Null],
        expect!["[40,null,null]"],
    );
}

#[test]
fn paired_metrics_take_their_asked_places() {
    use super::query::{MetricValue, Paired};
    use analytics::stats::{Comparison, Value};

    let asked: Vec<String> = ["scroll_depth", "visitors", "time_on_page", "bounce_rate"].map(String::from).to_vec();
    let paired = Paired { asked: &asked, names: ["scroll_depth", "time_on_page"] };
    let engine = row(&["/pricing"], vec![Value::Int(7), Value::Float(50.0)]);
    let measured = |m: &str| MetricValue::measured((m == "scroll_depth").then_some(62));
    check_answer(paired.row(&engine, measured), expect![[r#"{"metrics":[62,7,null,50.0],"dimensions":["/pricing"]}"#]]);
    // The engine's comparison may have fewer values than asked: the rest are `null`.
    let c = Comparison { dimensions: vec!["/pricing".into()], metrics: vec![Value::Int(5)], change: vec![Some(40.0)] };
    check_answer(
        paired.compared((&engine, &c), measured, |_| MetricValue::Null, |m| (m == "time_on_page").then_some(-12.5)),
        expect![[
            r#"{"metrics":[62,7,null,50.0],"dimensions":["/pricing"],"comparison":{"metrics":[null,5,null,null],"dimensions":["/pricing"],"change":[null,40.0,-12.5,null]}}"#
        ]],
    );
    // With no metric of the engine's asked, the engine's row (of visitors) gives only dimensions.
    let asked = ["total_revenue".to_owned()];
    let revenue = Paired { asked: &asked, names: ["total_revenue", "average_revenue"] };
    let amount = |_: &str| MetricValue::money(Some("1322.20".parse().unwrap()), "EUR");
    check_answer(
        revenue.row(&row(&["Purchase"], vec![Value::Int(4)]), amount),
        expect![[r#"{"metrics":[{"value":1322.2,"amount":"1322.2","currency":"EUR"}],"dimensions":["Purchase"]}"#]],
    );
    check_answer(MetricValue::money(None, "EUR"), expect!["null"]);
}

#[test]
fn query_meta_says_whether_imports_are_in() {
    use super::query::Meta;

    check_answer(Meta::imports(false, Some("unsupported_query")), expect!["{}"]);
    check_answer(Meta::imports(true, None), expect![[r#"{"imports_included":true}"#]]);
    check_answer(
        Meta::imports(true, Some("unsupported_interval")),
        expect![[r#"{"imports_included":false,"imports_skip_reason":"unsupported_interval"}"#]],
    );
}

#[test]
fn umami_answers() {
    use super::ErrorBody;
    use super::umami::{BatchAnswer, BatchRefusal, SendAnswer};

    check_answer(SendAnswer::taken(SITE), expect![[r#"{"cache":"tally.c37edc28-ee5f-4c62-9ce3-377fa6f600a8"}"#]]);
    check_answer(SendAnswer::dropped(), expect![[r#"{"beep":"boop"}"#]]);
    check_answer(BatchAnswer::new(2, Vec::new()), expect![[r#"{"size":2,"processed":2,"errors":0,"details":[]}"#]]);
    let details = vec![
        BatchRefusal { index: 0, response: ErrorBody { error: "payload is required".into(), field: Some("payload") } },
        BatchRefusal { index: 2, response: ErrorBody { error: "Website not found.".into(), field: None } },
    ];
    check_answer(
        BatchAnswer::new(3, details),
        expect![[
            r#"{"size":3,"processed":1,"errors":2,"details":[{"index":0,"response":{"error":"payload is required","field":"payload"}},{"index":2,"response":{"error":"Website not found."}}]}"#
        ]],
    );
}
