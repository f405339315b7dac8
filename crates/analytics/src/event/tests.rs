//! Event validation tests: each limit at its boundary, URL and query parsing, and a property test
//! that no input makes parsing panic.

use expect_test::{Expect, expect};
use proptest::prelude::*;

use super::*;

fn raw(url: &str) -> RawEvent {
    let mut raw = RawEvent::pageview(url, "example.com");
    raw.user_agent = "Mozilla/5.0".into();
    raw
}

/// A one-line summary of a parsed event, or its error and the field at fault.
fn check(raw: RawEvent, expect: Expect) {
    let actual = match Event::parse(raw, &Limits::default()) {
        Ok(e) => {
            let mut out = format!("{} {}{}", e.name.as_str(), e.hostname, e.pathname);
            let domains: Vec<&str> = e.domains.iter().map(Hostname::as_str).collect();
            out += &format!(" domains={}", domains.join(","));
            let q = &e.query;
            for (k, v) in [
                ("utm_source", &q.utm.source),
                ("utm_medium", &q.utm.medium),
                ("utm_campaign", &q.utm.campaign),
                ("utm_term", &q.utm.term),
                ("utm_content", &q.utm.content),
                ("ref", &q.ref_param),
                ("source", &q.source),
            ] {
                if let Some(v) = v {
                    out += &format!(" {k}={v}");
                }
            }
            for (kind, id) in &q.click_ids {
                out += &format!(" {}={id}", kind.param());
            }
            if let Some(r) = &e.referrer {
                out += &format!(" referrer={}", r.url());
            }
            for (k, v) in &e.props {
                out += &format!(" prop:{}={}", k.as_str(), v.as_str());
            }
            if let Some(r) = &e.revenue {
                out += &format!(" revenue={} {}", r.amount, r.currency);
            }
            out
        }
        Err(err) => format!("error({}): {err}", err.field()),
    };
    expect.assert_eq(&actual);
}

#[test]
fn urls_and_hosts() {
    check(raw("https://example.com/"), expect![["pageview example.com/ domains=example.com"]]);
    check(raw("https://WWW.Example.COM/Pricing/"), expect![["pageview example.com/Pricing/ domains=example.com"]]);
    check(raw("http://example.com"), expect![["pageview example.com/ domains=example.com"]]);
    check(raw("https://example.com/caf%C3%A9?x=1#top"), expect![["pageview example.com/café domains=example.com"]]);
    check(raw("https://example.com/%FF"), expect![["pageview example.com/%FF domains=example.com"]]);
    check(raw("https://bücher.example/"), expect![["pageview xn--bcher-kva.example/ domains=example.com"]]);
    check(raw("https://127.0.0.1:8080/x"), expect![["pageview 127.0.0.1/x domains=example.com"]]);
    check(raw("https://[::1]/x"), expect![["pageview [::1]/x domains=example.com"]]);
    check(raw("ftp://example.com/"), expect![[r#"error(url): url scheme must be http or https, not "ftp""#]]);
    check(raw("file:///etc/passwd"), expect![[r#"error(url): url scheme must be http or https, not "file""#]]);
    check(raw("/relative"), expect![["error(url): url is not a valid URL: relative URL without a base"]]);
    check(raw(""), expect![["error(url): url is not a valid URL: relative URL without a base"]]);
    check(raw("javascript:alert(1)"), expect![[r#"error(url): url scheme must be http or https, not "javascript""#]]);
}

#[test]
fn hash_mode_keeps_the_fragment() {
    let mut r = raw("https://example.com/app#/settings/profile");
    r.hash_mode = true;
    check(r, expect![["pageview example.com/app#/settings/profile domains=example.com"]]);
    check(raw("https://example.com/app#/settings"), expect![["pageview example.com/app domains=example.com"]]);
}

#[test]
fn query_parameters() {
    check(
        raw(
            "https://example.com/?utm_source=news&utm_medium=email&utm_campaign=launch&utm_term=rust&utm_content=hero&ref=hn&source=x",
        ),
        expect![[
            "pageview example.com/ domains=example.com utm_source=news utm_medium=email utm_campaign=launch utm_term=rust utm_content=hero ref=hn source=x"
        ]],
    );
    check(
        raw("https://example.com/?fbclid=F&gclid=G&msclkid=M&li_fat_id=L&unrelated=1"),
        expect![["pageview example.com/ domains=example.com gclid=G fbclid=F msclkid=M li_fat_id=L"]],
    );
    // Encoded values are decoded; empty values are absent; the first of repeats wins.
    check(
        raw("https://example.com/?utm_source=Hello%20World&utm_medium=&utm_campaign=a&utm_campaign=b&utm_term=+"),
        expect![["pageview example.com/ domains=example.com utm_source=Hello World utm_campaign=a"]],
    );
}

#[test]
fn domains() {
    let with_domain = |d: &str| {
        let mut r = raw("https://example.com/");
        r.domain = d.into();
        r
    };
    check(
        with_domain("example.com,Example.org, www.example.net"),
        expect![["pageview example.com/ domains=example.com,example.org,example.net"]],
    );
    check(with_domain("example.com,example.com"), expect![["pageview example.com/ domains=example.com"]]);
    check(with_domain(""), expect![["error(domain): domain is empty"]]);
    check(with_domain(" , ,"), expect![["error(domain): domain is empty"]]);
    check(
        with_domain("https://example.com"),
        expect![[r#"error(domain): domain "https://example.com" is not a valid host name"#]],
    );
    check(with_domain("exa mple.com"), expect![[r#"error(domain): domain "exa mple.com" is not a valid host name"#]]);
    check(with_domain("a#b.com"), expect![[r##"error(domain): domain "a#b.com" is not a valid host name"##]]);
    check(with_domain(&["a.com"; 10].join(",")), expect![["pageview example.com/ domains=a.com"]]);
    let eleven: Vec<String> = (0..11).map(|i| format!("d{i}.com")).collect();
    check(with_domain(&eleven.join(",")), expect![["error(domain): domain lists 11 domains, more than 10"]]);
}

#[test]
fn names() {
    let named = |n: &str| {
        let mut r = raw("https://example.com/");
        r.name = n.into();
        r
    };
    check(named("Signup"), expect![["Signup example.com/ domains=example.com"]]);
    let long = "é".repeat(120);
    assert_eq!(Event::parse(named(&long), &Limits::default()).unwrap().name.as_str(), long);
    check(named(&"é".repeat(121)), expect![["error(name): name has 121 characters, more than 120"]]);
    check(named(&"a".repeat(121)), expect![["error(name): name has 121 characters, more than 120"]]);
    check(named(""), expect![["error(name): name is empty"]]);
    check(named("a\u{0}b"), expect![["error(name): name contains a control character"]]);
    check(named("line\nbreak"), expect![["error(name): name contains a control character"]]);
    check(named("Goal #1"), expect![["Goal #1 example.com/ domains=example.com"]]);
}

#[test]
fn url_length_limit() {
    let base = "https://example.com/";
    let at_limit = format!("{base}{}", "a".repeat(2000 - base.len()));
    let over = format!("{at_limit}a");
    assert!(Event::parse(raw(&at_limit), &Limits::default()).is_ok());
    check(raw(&over), expect![["error(url): url has 2001 bytes, more than 2000"]]);
}

#[test]
fn props_limits() {
    let with_props = |props: Vec<(String, String)>| {
        let mut r = raw("https://example.com/");
        r.props = props;
        r
    };
    let n = |count: usize| (0..count).map(|i| (format!("k{i}"), "v".to_owned())).collect::<Vec<_>>();
    assert_eq!(Event::parse(with_props(n(30)), &Limits::default()).unwrap().props.len(), 30);
    check(with_props(n(31)), expect![["error(props): props has 31 entries, more than 30"]]);
    let key = |len: usize| vec![("k".repeat(len), "v".to_owned())];
    assert!(Event::parse(with_props(key(300)), &Limits::default()).is_ok());
    check(with_props(key(301)), expect![["error(props): props key has 301 bytes, more than 300"]]);
    let value = |len: usize| vec![("k".to_owned(), "v".repeat(len))];
    assert!(Event::parse(with_props(value(2000)), &Limits::default()).is_ok());
    check(with_props(value(2001)), expect![[r#"error(props): props value of "k" has 2001 bytes, more than 2000"#]]);
    check(with_props(vec![("".into(), "v".into())]), expect![["error(props): props has an empty key"]]);
    check(with_props(vec![("a\tb".into(), "v".into())]), expect![["error(props): props contains a control character"]]);
    check(
        with_props(vec![("plan".into(), "pro".into()), ("plan".into(), "free".into())]),
        expect![[r#"error(props): props key "plan" appears twice"#]],
    );
    check(
        with_props(vec![("author".into(), "Jane #1\nDoe".into())]),
        expect![["pageview example.com/ domains=example.com prop:author=Jane #1\nDoe"]],
    );
}

#[test]
fn revenue() {
    let with_revenue = |amount: &str, currency: &str| {
        let mut r = raw("https://example.com/");
        r.revenue = Some(RawRevenue { amount: amount.into(), currency: currency.into() });
        r
    };
    check(with_revenue("19.99", "eur"), expect![["pageview example.com/ domains=example.com revenue=19.99 EUR"]]);
    check(with_revenue(" 1000 ", "USD"), expect![["pageview example.com/ domains=example.com revenue=1000 USD"]]);
    check(with_revenue("abc", "USD"), expect![[r#"error(revenue): revenue amount "abc" is not a decimal number"#]]);
    check(with_revenue("NaN", "USD"), expect![[r#"error(revenue): revenue amount "NaN" is not a decimal number"#]]);
    check(
        with_revenue("1", "EURO"),
        expect![[r#"error(revenue): revenue currency "EURO" is not a three-letter ISO 4217 code"#]],
    );
    check(
        with_revenue("1", "E1R"),
        expect![[r#"error(revenue): revenue currency "E1R" is not a three-letter ISO 4217 code"#]],
    );
}

#[test]
fn referrers() {
    let with_referrer = |r: &str| {
        let mut e = raw("https://example.com/");
        e.referrer = Some(r.into());
        e
    };
    check(
        with_referrer("https://user:pw@www.google.com/search?q=secret#frag"),
        expect![["pageview example.com/ domains=example.com referrer=https://www.google.com/search"]],
    );
    check(with_referrer(""), expect![["pageview example.com/ domains=example.com"]]);
    check(with_referrer("nonsense"), expect![["pageview example.com/ domains=example.com"]]);
    check(
        with_referrer(&format!("https://a.com/{}", "x".repeat(9000))),
        expect![["pageview example.com/ domains=example.com"]],
    );
}

#[test]
fn timestamps_and_user_agent() {
    let mut r = raw("https://example.com/");
    r.timestamp_ms = -1;
    check(r, expect![["error(timestamp): timestamp -1 ms is outside 1970..10000"]]);
    let mut r = raw("https://example.com/");
    r.user_agent = "é".repeat(1000);
    let e = Event::parse(r, &Limits::default()).unwrap();
    assert_eq!(e.user_agent.len(), 1024);
    assert!(e.interactive);
}

#[test]
fn hostname_is_within() {
    let h = |s: &str| Hostname::parse(s).unwrap();
    assert!(h("example.com").is_within(&h("example.com")));
    assert!(h("a.b.example.com").is_within(&h("example.com")));
    assert!(h("www.example.com").is_within(&h("example.com")));
    assert!(!h("badexample.com").is_within(&h("example.com")));
    assert!(!h("example.com").is_within(&h("a.example.com")));
}

#[test]
fn headers_are_case_insensitive() {
    let headers: RequestHeaders =
        [("X-Forwarded-For", "a"), ("x-forwarded-for", "b"), ("Other", "c")].into_iter().collect();
    assert_eq!(headers.get("X-FORWARDED-FOR"), Some("a"));
    assert_eq!(headers.get_all("x-forwarded-for").collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(headers.get("missing"), None);
}

fn any_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[a-z#:/?&=%.@\\[\\] ,\u{0}\u{7f}é]{0,40}",
        "(https?|ftp|javascript)://[a-zA-Z0-9.\\-\\[\\]:@%]{0,30}(/[^ ]{0,30})?(\\?[a-z_=&%]{0,40})?(#.{0,10})?",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Regression guard for the invariant "no input makes parsing panic": every field arbitrary.
    #[test]
    fn parse_never_panics(
        name in any_text(),
        url in any_text(),
        domain in any_text(),
        referrer in proptest::option::of(any_text()),
        props in proptest::collection::vec((any_text(), any_text()), 0..40),
        revenue in proptest::option::of((any_text(), any_text())),
        hash_mode in any::<bool>(),
        timestamp_ms in any::<i64>(),
        user_agent in any_text(),
    ) {
        let raw = RawEvent {
            name,
            url,
            domain,
            referrer,
            props,
            revenue: revenue.map(|(amount, currency)| RawRevenue { amount, currency }),
            interactive: true,
            hash_mode,
            screen_width: None,
            language: None,
            timestamp_ms,
            user_agent,
            peer_ip: IpAddr::from([127, 0, 0, 1]),
            headers: RequestHeaders::new(),
        };
        if let Ok(event) = Event::parse(raw, &Limits::default()) {
            prop_assert!(event.name.as_str().chars().count() <= 120);
            prop_assert!(event.url.as_str().len() <= 2000 * 3);
            prop_assert!(event.pathname.as_str().starts_with('/'));
            prop_assert!(!event.domains.is_empty());
            prop_assert!(event.props.len() <= 30);
        }
    }
}

#[test]
fn languages_read_as_tags_or_not_at_all() {
    for (sent, kept) in [
        ("en-US", Some("en-US")),
        ("EN_us", Some("en-US")),
        ("zh-Hant-TW", Some("zh-Hant-TW")),
        ("de", Some("de")),
        (" fr-CA ", Some("fr-CA")),
        ("", None),
        ("en--US", None),
        ("<script>", None),
        ("en US", None),
    ] {
        assert_eq!(language_tag(sent).as_deref(), kept, "{sent:?}");
    }
    assert_eq!(language_tag(&"a".repeat(36)), None);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]
    /// The page's host name is taken from the parsed URL rather than parsed again: for any host a
    /// URL may carry (cases, `www.`, trailing dots, international names, punycode, numbers that
    /// are IPv4 addresses or are not, IPv6), it is what parsing the URL's host text gives, and so
    /// are a domain sent as that same text and a referrer's host.
    #[test]
    fn a_urls_host_is_what_parsing_its_text_gives(
        host in prop_oneof![
            "(www\\.)?[a-zA-Z0-9-]{1,12}(\\.[a-zA-Z0-9-]{1,8}){0,3}\\.?",
            "[a-zA-Z0-9]{0,6}\\PC{1,6}(\\.[a-z]{2,4})?",
            "xn--[a-z0-9-]{1,12}\\.[a-z]{2,4}",
            "(0x[0-9a-f]{1,4}|[0-9]{1,4})(\\.[0-9]{1,4}){0,3}\\.{0,3}",
            "[a-z]{1,6}\\.(0x)?[0-9]{1,3}\\.{1,3}",
            "\\[[0-9a-f:]{2,20}\\]",
            "(WWW|www)\\.(WWW|www)\\.[a-z]{1,8}\\.[a-z]{2,4}",
        ],
    ) {
        let Ok(url) = url::Url::parse(&format!("https://{host}/p")) else { return Ok(()) };
        let Some(text) = url.host_str() else { return Ok(()) };
        if text.contains(',') {
            // A list of domains, not one.
            return Ok(());
        }
        let reparsed = Hostname::parse(text);
        prop_assert_eq!(url.host().and_then(Hostname::from_url_host), reparsed.clone());
        // A host that says it is canonical parses back to itself (lookups then skip the parse).
        if let Some(host) = reparsed.as_ref().filter(|h| h.is_canonical()) {
            let again = Hostname::parse(host.as_str());
            prop_assert_eq!(again.as_ref(), Some(host));
        }
        // A referrer's host likewise, whatever its scheme (a web URL's taken as parsed).
        for scheme in ["http", "https", "android-app"] {
            let referrer = format!("{scheme}://{host}/p");
            let expected = url::Url::parse(&referrer).ok().and_then(|u| u.host_str().and_then(Hostname::parse));
            prop_assert_eq!(Referrer::parse(&referrer).map(|r| r.host().clone()), expected);
        }
        let mut raw = raw(url.as_str());
        raw.domain = text.to_owned();
        match Event::parse(raw, &Limits::default()) {
            Ok(e) => prop_assert_eq!(e.domains, vec![reparsed.expect("a host")]),
            Err(e) => prop_assert!(reparsed.is_none() || text.contains(['/', ':', '@', '?', '#']), "{e}"),
        }
    }
}

proptest! {
    /// Headers kept in one text answer as a plain list of lines would: every value of a name, in
    /// the order received, whatever the case of the name asked for.
    #[test]
    fn request_headers_answer_as_a_list_of_lines(
        lines in prop::collection::vec(("[a-cA-C-]{0,3}", "\\PC{0,8}"), 0..12),
        asked in prop::collection::vec("[a-cA-C-]{0,3}", 1..6),
    ) {
        let headers: RequestHeaders = lines.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        for name in &asked {
            let expected: Vec<&str> =
                lines.iter().filter(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str()).collect();
            prop_assert_eq!(headers.get_all(name).collect::<Vec<_>>(), expected.clone());
            prop_assert_eq!(headers.get(name), expected.first().copied());
        }
    }
}
