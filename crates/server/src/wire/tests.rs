//! Unit tests for the wire parsers: one body per line, the event read (or the error) below it.

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
