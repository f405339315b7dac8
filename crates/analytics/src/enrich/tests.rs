//! Enrichment tests: data-driven tables of real User-Agents, referrers, address ranges and
//! forwarding headers, and a small MMDB file built by the test itself.

use std::net::IpAddr;
use std::sync::{Arc, LazyLock};

use expect_test::{Expect, expect};

use super::*;
use crate::event::{Event, Limits, RawEvent, RequestHeaders};

/// One enricher for every test: compiling the User-Agent patterns is the slow part.
static ENRICHER: LazyLock<Enricher> = LazyLock::new(|| {
    let config = EnricherConfig {
        trusted_proxies: IpRanges::parse(["10.0.0.0/8", "fd00::/8"]).unwrap(),
        country_headers: vec!["cf-ipcountry".into()],
        ..EnricherConfig::default()
    };
    Enricher::new(config).unwrap().with_geo(GeoDb::from_bytes(mmdb::build()).unwrap())
});

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

/// Browser, OS and device of a User-Agent, or the reason it is dropped.
fn check_ua(user_agent: &str, expect: Expect) {
    let enricher = &*ENRICHER;
    let actual = match enricher.bots().check_user_agent(user_agent) {
        Some(reason) => format!("drop: {reason}"),
        None => {
            let c = enricher.user_agents().parse(user_agent);
            if c.device == DeviceType::Bot {
                "drop: bot (uap Spider)".to_owned()
            } else {
                let v = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
                format!(
                    "{} {} / {} {} / {}",
                    c.browser.name,
                    v(&c.browser.version),
                    c.os.name,
                    v(&c.os.version),
                    c.device.as_str()
                )
            }
        }
    };
    expect.assert_eq(&actual);
}

#[test]
fn user_agents() {
    // Desktop browsers.
    check_ua(
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
        expect![["Chrome 131.0 / Windows 10 / Desktop"]],
    );
    check_ua(
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:133.0) Gecko/20100101 Firefox/133.0",
        expect![["Firefox 133.0 / Windows 10 / Desktop"]],
    );
    check_ua(
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36 Edg/131.0.2903.86",
        expect![["Edge 131.0 / Windows 10 / Desktop"]],
    );
    check_ua(
        "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.2 Safari/605.1.15",
        expect![["Safari 18.2 / macOS 10.15 / Desktop"]],
    );
    check_ua(
        "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
        expect![["Chrome 131.0 / macOS 10.15 / Desktop"]],
    );
    check_ua(
        "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
        expect![["Chrome 131.0 / Linux - / Desktop"]],
    );
    check_ua(
        "Mozilla/5.0 (X11; Ubuntu; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0",
        expect![["Firefox 133.0 / Linux - / Desktop"]],
    );
    // Phones.
    check_ua(
        "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.6778.104 Mobile Safari/537.36",
        expect![["Chrome 131.0 / Android 14 / Mobile"]],
    );
    check_ua(
        "Mozilla/5.0 (Linux; Android 14; SM-S918B) AppleWebKit/537.36 (KHTML, like Gecko) SamsungBrowser/26.0 Chrome/122.0.0.0 Mobile Safari/537.36",
        expect![["Samsung Internet 26.0 / Android 14 / Mobile"]],
    );
    check_ua(
        "Mozilla/5.0 (Android 14; Mobile; rv:133.0) Gecko/133.0 Firefox/133.0",
        expect![["Firefox 133.0 / Android 14 / Mobile"]],
    );
    check_ua(
        "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1",
        expect![["Safari 18.1 / iOS 18.1 / Mobile"]],
    );
    check_ua(
        "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) CriOS/131.0.6778.73 Mobile/15E148 Safari/604.1",
        expect![["Chrome 131.0 / iOS 18.1 / Mobile"]],
    );
    // Tablets.
    check_ua(
        "Mozilla/5.0 (iPad; CPU OS 17_7 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.7 Mobile/15E148 Safari/604.1",
        expect![["Safari 17.7 / iOS 17.7 / Tablet"]],
    );
    check_ua(
        "Mozilla/5.0 (Linux; Android 13; SM-X710) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
        expect![["Chrome 131.0 / Android 13 / Tablet"]],
    );
    // Bots, HTTP libraries and headless browsers.
    check_ua("Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)", expect![["drop: bot"]]);
    check_ua(
        "Mozilla/5.0 (Linux; Android 6.0.1; Nexus 5X Build/MMB29P) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.6778.69 Mobile Safari/537.36 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
        expect![["drop: bot"]],
    );
    check_ua("Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)", expect![["drop: bot"]]);
    check_ua("curl/8.5.0", expect![["drop: bot"]]);
    check_ua("python-requests/2.32.3", expect![["drop: bot"]]);
    check_ua("Wget/1.21.4", expect![["drop: bot"]]);
    check_ua(
        "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/131.0.0.0 Safari/537.36",
        expect![["drop: headless_browser"]],
    );
    check_ua(
        "Mozilla/5.0 (Unknown; Linux x86_64) AppleWebKit/538.1 (KHTML, like Gecko) PhantomJS/2.1.1 Safari/538.1",
        expect![["drop: headless_browser"]],
    );
    check_ua(
        "Mozilla/5.0 (Linux; Android 11; moto g power (2022)) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Mobile Safari/537.36 Chrome-Lighthouse",
        expect![["drop: headless_browser"]],
    );
    check_ua("", expect![["drop: empty_user_agent"]]);
    check_ua("   ", expect![["drop: empty_user_agent"]]);
    // Odd input parses to something without failing.
    check_ua("\u{0}\u{ffff}", expect![["Other - / Other - / Other"]]);
}

/// The source and referrer of a page URL and a referrer on site `example.com`.
fn check_source(url: &str, referrer: Option<&str>, expect: Expect) {
    let mut raw = RawEvent::pageview(url, "example.com");
    raw.referrer = referrer.map(str::to_owned);
    let event = Event::parse(raw, &Limits::default()).unwrap();
    let domains = [Hostname::parse("example.com").unwrap()];
    let a = ENRICHER.referrers().attribute(&event.query, event.referrer.as_ref(), &domains);
    let show = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    expect.assert_eq(&format!("source={} referrer={}", show(a.source), show(a.referrer)));
}

#[test]
fn sources() {
    let page = "https://example.com/pricing";
    check_source(page, None, expect![["source=- referrer=-"]]);
    check_source(page, Some("https://www.google.com/"), expect![["source=Google referrer=google.com"]]);
    check_source(
        page,
        Some("https://www.google.de/search?q=tally"),
        expect![["source=Google referrer=google.de/search"]],
    );
    check_source(page, Some("https://t.co/abc123"), expect![["source=Twitter referrer=t.co/abc123"]]);
    check_source(
        page,
        Some("https://news.ycombinator.com/item?id=1"),
        expect![["source=Hacker News referrer=news.ycombinator.com/item"]],
    );
    check_source(
        page,
        Some("https://l.facebook.com/l.php?u=x"),
        expect![["source=Facebook referrer=l.facebook.com/l.php"]],
    );
    check_source(page, Some("https://duckduckgo.com/"), expect![["source=DuckDuckGo referrer=duckduckgo.com"]]);
    // An unknown host is its own source, without `www.`.
    check_source(
        page,
        Some("https://www.someblog.net/post/1"),
        expect![["source=someblog.net referrer=someblog.net/post/1"]],
    );
    // Self-referrals, from the domain or a subdomain, are ignored; a look-alike domain is not one.
    check_source(page, Some("https://example.com/"), expect![["source=- referrer=-"]]);
    check_source(page, Some("https://www.example.com/blog"), expect![["source=- referrer=-"]]);
    check_source(page, Some("https://docs.example.com/"), expect![["source=- referrer=-"]]);
    check_source(page, Some("https://notexample.com/"), expect![["source=notexample.com referrer=notexample.com"]]);
    // A tagged source wins over the referrer; `utm_source` over `source` over `ref`.
    check_source(
        "https://example.com/?utm_source=newsletter",
        Some("https://t.co/x"),
        expect![["source=newsletter referrer=t.co/x"]],
    );
    check_source(
        "https://example.com/?ref=hn&source=weekly&utm_source=mail",
        None,
        expect![["source=mail referrer=-"]],
    );
    check_source("https://example.com/?ref=hn&source=weekly", None, expect![["source=weekly referrer=-"]]);
    check_source("https://example.com/?ref=producthunt", None, expect![["source=producthunt referrer=-"]]);
    check_source(
        "https://example.com/?utm_source=",
        Some("https://t.co/x"),
        expect![["source=Twitter referrer=t.co/x"]],
    );
    // A tag naming a known source, by name in any case or by host, shows as that source.
    check_source("https://example.com/?utm_source=GOOGLE", None, expect![["source=Google referrer=-"]]);
    check_source("https://example.com/?utm_source=t.co", None, expect![["source=Twitter referrer=-"]]);
    check_source("https://example.com/?utm_source=fb", None, expect![["source=Facebook referrer=-"]]);
    // A tag beats a self-referral; a click id alone names its network.
    check_source(
        "https://example.com/?utm_source=app",
        Some("https://example.com/"),
        expect![["source=app referrer=-"]],
    );
    check_source("https://example.com/?gclid=abc", None, expect![["source=Google Ads referrer=-"]]);
    // Referrers that are not URLs are ignored.
    check_source(page, Some("not a url"), expect![["source=- referrer=-"]]);
    check_source(
        page,
        Some("android-app://com.google.android.gm"),
        expect![["source=Gmail referrer=com.google.android.gm"]],
    );
}

fn check_client_ip(peer: &str, headers: &[(&str, &str)], expect: Expect) {
    let headers: RequestHeaders = headers.iter().copied().collect();
    let trusted = IpRanges::parse(["10.0.0.0/8", "fd00::/8"]).unwrap();
    expect.assert_eq(&client_ip(ip(peer), &headers, &trusted).to_string());
}

#[test]
fn forwarding_headers_are_believed_only_from_trusted_proxies() {
    // An untrusted peer's headers are ignored, whatever they say.
    check_client_ip("203.0.113.7", &[("X-Forwarded-For", "198.51.100.1")], expect![["203.0.113.7"]]);
    check_client_ip("203.0.113.7", &[("CF-Connecting-IP", "198.51.100.1")], expect![["203.0.113.7"]]);
    // Behind a trusted proxy: the right-most untrusted address of X-Forwarded-For.
    check_client_ip("10.0.0.2", &[("X-Forwarded-For", "198.51.100.1")], expect![["198.51.100.1"]]);
    check_client_ip("10.0.0.2", &[("x-forwarded-for", "1.1.1.1, 198.51.100.1, 10.0.0.9")], expect![["198.51.100.1"]]);
    check_client_ip(
        "10.0.0.2",
        &[("X-Forwarded-For", "1.1.1.1"), ("X-Forwarded-For", "198.51.100.1")],
        expect![["198.51.100.1"]],
    );
    check_client_ip("10.0.0.2", &[("X-Forwarded-For", "198.51.100.1:4711, 10.1.1.1")], expect![["198.51.100.1"]]);
    check_client_ip("10.0.0.2", &[("X-Forwarded-For", "[2001:db8::5]:443")], expect![["2001:db8::5"]]);
    check_client_ip("10.0.0.2", &[("X-Forwarded-For", "10.0.0.5, 10.0.0.6")], expect![["10.0.0.5"]]);
    // A malformed entry stops the walk; the other headers, then the peer, answer.
    check_client_ip("10.0.0.2", &[("X-Forwarded-For", "198.51.100.1, garbage")], expect![["10.0.0.2"]]);
    check_client_ip(
        "10.0.0.2",
        &[("X-Forwarded-For", "unknown"), ("X-Real-IP", "198.51.100.3")],
        expect![["198.51.100.3"]],
    );
    check_client_ip("10.0.0.2", &[("CF-Connecting-IP", "2001:db8::1")], expect![["2001:db8::1"]]);
    check_client_ip("10.0.0.2", &[("X-Real-IP", "198.51.100.3")], expect![["198.51.100.3"]]);
    check_client_ip("10.0.0.2", &[], expect![["10.0.0.2"]]);
    // IPv6 proxies, and IPv4 peers reported as IPv4-mapped IPv6 by dual-stack sockets.
    check_client_ip("fd00::1", &[("X-Forwarded-For", "2001:db8::9")], expect![["2001:db8::9"]]);
    check_client_ip("::ffff:10.0.0.2", &[("X-Forwarded-For", "198.51.100.1")], expect![["198.51.100.1"]]);
    check_client_ip("::ffff:203.0.113.7", &[], expect![["203.0.113.7"]]);
}

#[test]
fn ip_ranges() {
    let ranges = IpRanges::parse(["192.0.2.0/24", "198.51.100.7", "2001:db8::/32", " 10.1.2.3/8 "]).unwrap();
    let check = |addr: &str, inside: bool| assert_eq!(ranges.contains(ip(addr)), inside, "{addr}");
    check("192.0.2.0", true);
    check("192.0.2.255", true);
    check("192.0.3.0", false);
    check("198.51.100.7", true);
    check("198.51.100.8", false);
    check("2001:db8:ffff::1", true);
    check("2001:db9::1", false);
    check("10.200.0.1", true);
    check("::ffff:192.0.2.9", true);
    assert!(IpRanges::parse(["300.0.0.0/8"]).is_err());
    assert!(IpRanges::parse(["10.0.0.0/33"]).is_err());
    assert!(IpRanges::parse(["example.com"]).is_err());
    assert!(!IpRanges::new().contains(ip("192.0.2.1")));
    // Stored as written back: truncated to the network, sorted, each once.
    assert_eq!(
        ranges.texts(),
        ["10.0.0.0/8", "192.0.2.0/24", "198.51.100.7/32", "2001:db8::/32"].map(String::from).to_vec()
    );
    assert_eq!(IpRanges::parse(["10.0.0.1/8", "10.9.9.9/8"]).unwrap().texts(), ["10.0.0.0/8"]);
}

#[test]
fn countries_from_headers_and_mmdb() {
    let countries = |peer: &str, headers: &[(&str, &str)]| {
        let headers: RequestHeaders = headers.iter().copied().collect();
        ENRICHER.countries.country(ip(peer), &headers).map(|c| c.to_string()).unwrap_or_else(|| "-".into())
    };
    assert_eq!(countries("192.0.2.77", &[]), "DE");
    assert_eq!(countries("198.51.100.1", &[]), "FR");
    assert_eq!(countries("2001:db8::1", &[]), "JP");
    assert_eq!(countries("::ffff:192.0.2.1", &[]), "DE");
    assert_eq!(countries("203.0.113.1", &[]), "-");
    // A configured CDN header wins; placeholders fall through to the file.
    assert_eq!(countries("192.0.2.77", &[("CF-IPCountry", "us")]), "US");
    assert_eq!(countries("192.0.2.77", &[("CF-IPCountry", "XX")]), "DE");
    assert_eq!(countries("192.0.2.77", &[("CF-IPCountry", "T1")]), "DE");
    // A header that is not configured is ignored.
    assert_eq!(countries("192.0.2.77", &[("CloudFront-Viewer-Country", "US")]), "DE");
    assert!(GeoDb::from_bytes(b"not an mmdb".to_vec()).is_err());
}

#[test]
fn regions_and_cities_from_a_city_database() {
    let place = |peer: &str, headers: &[(&str, &str)]| {
        let headers: RequestHeaders = headers.iter().copied().collect();
        let p = ENRICHER.countries.place(ip(peer), &headers);
        format!(
            "{} {} {}",
            p.country.map(|c| c.to_string()).unwrap_or_default(),
            p.region.unwrap_or_default(),
            p.city.unwrap_or_default()
        )
    };
    assert_eq!(place("100.64.0.9", &[]), "DE DE-BE Berlin");
    assert_eq!(place("100.64.1.9", &[]), "FR Île-de-France Paris");
    // A country database knows countries only.
    assert_eq!(place("192.0.2.77", &[]), "DE  ");
    // A CDN that agrees keeps the region and city; one that does not leaves them out.
    assert_eq!(place("100.64.0.9", &[("CF-IPCountry", "DE")]), "DE DE-BE Berlin");
    assert_eq!(place("100.64.0.9", &[("CF-IPCountry", "AT")]), "AT  ");
}

/// With no database configured, countries come from the one compiled in.
#[test]
fn the_bundled_database_knows_countries_with_no_setup() {
    let db = GeoDb::bundled();
    assert_eq!(db.country(ip("8.8.8.8")).map(|c| c.to_string()).as_deref(), Some("US"));
    assert_eq!(db.country(ip("193.0.6.139")).map(|c| c.to_string()).as_deref(), Some("NL"));
    assert_eq!(db.country(ip("2001:4860:4860::8888")).map(|c| c.to_string()).as_deref(), Some("US"));
    assert_eq!(db.country(ip("127.0.0.1")), None);
    assert_eq!(db.place(ip("8.8.8.8")).city, None, "a country database names no city");
    let enricher = Enricher::new(EnricherConfig::default()).unwrap();
    let headers = RequestHeaders::new();
    assert_eq!(enricher.countries.country(ip("8.8.8.8"), &headers).map(|c| c.to_string()).as_deref(), Some("US"));
    assert_eq!(
        Enricher::new(EnricherConfig::default()).unwrap().without_geo().countries.country(ip("8.8.8.8"), &headers),
        None
    );
}

/// The bundled database names countries only, so a CDN's country, which wins over it, leaves it
/// nothing to add: the resolver answers from the header without a lookup, and the answer is the
/// one a lookup would have given, whatever the address and the header.
#[test]
fn the_bundled_database_names_countries_only() {
    let bundled = GeoDb::bundled();
    let bytes =
        miniz_oxide::inflate::decompress_to_vec_with_limit(include_bytes!("../../data/country.mmdb.deflate"), 64 << 20)
            .expect("the bundled database inflates");
    let asked = Arc::new(GeoDb::from_bytes(bytes).expect("it reads"));
    let headers = vec!["cf-ipcountry".to_owned()];
    let skipping = CountryResolver { db: Some(bundled.clone()), headers: headers.clone() };
    let looking = CountryResolver { db: Some(asked.clone()), headers };
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut known = 0;
    for i in 0..20_000 {
        let ip = if i % 4 == 0 {
            IpAddr::from(std::net::Ipv6Addr::from(u128::from(next()) << 64 | u128::from(next())))
        } else {
            IpAddr::from((next() as u32).to_be_bytes())
        };
        let place = asked.place(ip);
        assert_eq!((place.region.as_deref(), place.city.as_deref()), (None, None), "{ip}");
        known += usize::from(place.country.is_some());
        for header in ["DE", "US", "zz", ""] {
            let mut sent = RequestHeaders::new();
            sent.push("CF-IPCountry", header);
            assert_eq!(skipping.place(ip, &sent), looking.place(ip, &sent), "{ip} {header}");
        }
    }
    assert!(known > 10_000, "most addresses have a country ({known})");
}

#[test]
fn screen_classes_follow_plausible_bounds() {
    let classes: Vec<&str> = [0, 375, 575, 576, 991, 992, 1439, 1440, 3840].into_iter().map(screen_class).collect();
    assert_eq!(classes, ["Mobile", "Mobile", "Mobile", "Tablet", "Tablet", "Laptop", "Laptop", "Desktop", "Desktop"]);
}

#[test]
fn enrich_drops_and_enriches() {
    let domains = [Hostname::parse("example.com").unwrap()];
    let excluded = IpRanges::parse(["198.51.100.0/24"]).unwrap();
    let site = SiteContext { domains: &domains, excluded_ips: &excluded };
    let firefox = "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0";
    let run = |peer: &str, headers: &[(&str, &str)], ua: &str| {
        let mut raw = RawEvent::pageview("https://example.com/a", "example.com");
        raw.peer_ip = ip(peer);
        raw.user_agent = ua.into();
        raw.referrer = Some("https://github.com/tally".into());
        raw.headers = headers.iter().copied().collect();
        ENRICHER.enrich(&Event::parse(raw, &Limits::default()).unwrap(), &site)
    };
    let e = run("10.0.0.2", &[("X-Forwarded-For", "192.0.2.5")], firefox).unwrap();
    assert_eq!(e.client_ip, ip("192.0.2.5"));
    assert_eq!(e.country.map(|c| c.to_string()).as_deref(), Some("DE"));
    assert_eq!((e.client.browser.name.as_str(), e.client.device), ("Firefox", DeviceType::Desktop));
    assert_eq!((e.source.as_deref(), e.referrer.as_deref()), (Some("GitHub"), Some("github.com/tally")));
    // The excluded range applies to the client behind the proxy, and before the User-Agent.
    assert_eq!(run("10.0.0.2", &[("X-Forwarded-For", "198.51.100.9")], "").unwrap_err(), DropReason::ExcludedIp);
    assert_eq!(run("198.51.100.9", &[], firefox).unwrap_err(), DropReason::ExcludedIp);
    assert_eq!(run("192.0.2.5", &[], "").unwrap_err(), DropReason::EmptyUserAgent);
    assert_eq!(run("192.0.2.5", &[], "curl/8.5.0").unwrap_err(), DropReason::Bot);
    // An import naming its visitor may lack a User-Agent; a bot's is still a bot's, and an
    // excluded address still excluded.
    let import = |peer: &str, ua: &str| {
        let mut raw = RawEvent::pageview("https://example.com/a", "example.com");
        raw.peer_ip = ip(peer);
        raw.user_agent = ua.into();
        ENRICHER.enrich_import(&Event::parse(raw, &Limits::default()).unwrap(), &site)
    };
    let e = import("0.0.0.0", "").unwrap();
    assert_eq!((e.client.browser.name.as_str(), e.client.device), ("Other", DeviceType::Other), "{e:?}");
    assert_eq!(import("0.0.0.0", "curl/8.5.0").unwrap_err(), DropReason::Bot);
    assert_eq!(import("198.51.100.9", "").unwrap_err(), DropReason::ExcludedIp);
    let labels: Vec<&str> = DropReason::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(labels, ["empty_user_agent", "headless_browser", "bot", "excluded_ip"]);
}

#[test]
fn missing_mmdb_file_is_a_start_up_error() {
    let config = EnricherConfig { mmdb_path: Some("/nonexistent/tally.mmdb".into()), ..EnricherConfig::default() };
    assert!(matches!(Enricher::new(config), Err(EnrichError::Geo(_))));
}

/// A minimal MaxMind DB writer, enough for a test database: an IPv6 tree with 24-bit records, a
/// data section of maps and strings, and the metadata the reader requires. It follows the format
/// specification (MaxMind DB File Format 2.0).
mod mmdb {
    /// Records: a node index, "no data", or an offset into the data section.
    #[derive(Clone, Copy)]
    enum Rec {
        Node(usize),
        Empty,
        Data(usize),
    }

    /// The test networks: two IPv4 ranges (stored under `::/96`), one IPv6 range, and one record
    /// in each of the two shapes readers see: GeoLite2's `country.iso_code` and ip-location-db's
    /// `country_code`.
    pub fn build() -> Vec<u8> {
        let mut data = Vec::new();
        let de = data.len();
        data.extend(map(&[("country", map(&[("iso_code", string("DE"))]))]));
        let fr = data.len();
        data.extend(map(&[("country_code", string("FR"))]));
        let jp = data.len();
        data.extend(map(&[("country", map(&[("iso_code", string("JP"))]))]));
        // A city database's record, as GeoLite2-City writes one.
        let berlin = data.len();
        data.extend(map(&[
            ("city", map(&[("names", map(&[("de", string("Berlin")), ("en", string("Berlin"))]))])),
            ("country", map(&[("iso_code", string("DE"))])),
            (
                "subdivisions",
                array(&[map(&[("iso_code", string("BE")), ("names", map(&[("en", string("Land Berlin"))]))])]),
            ),
        ]));
        // DB-IP's Lite city shape: subdivisions named, with no code.
        let paris = data.len();
        data.extend(map(&[
            ("city", map(&[("names", map(&[("en", string("Paris"))]))])),
            ("country", map(&[("iso_code", string("FR"))])),
            ("subdivisions", array(&[map(&[("names", map(&[("en", string("Île-de-France"))]))])])),
        ]));

        let mut nodes: Vec<[Rec; 2]> = vec![[Rec::Empty, Rec::Empty]];
        let v4 = |a: [u8; 4]| {
            let mut b = [0u8; 16];
            b[12..].copy_from_slice(&a);
            b
        };
        insert(&mut nodes, v4([192, 0, 2, 0]), 96 + 24, de);
        insert(&mut nodes, v4([198, 51, 100, 0]), 96 + 24, fr);
        insert(&mut nodes, v4([100, 64, 0, 0]), 96 + 24, berlin);
        insert(&mut nodes, v4([100, 64, 1, 0]), 96 + 24, paris);
        let jp_net: std::net::Ipv6Addr = "2001:db8::".parse().unwrap();
        insert(&mut nodes, jp_net.octets(), 32, jp);

        let count = nodes.len();
        let value = |r: Rec| -> u32 {
            match r {
                Rec::Node(i) => i as u32,
                Rec::Empty => count as u32,
                Rec::Data(offset) => (count + 16 + offset) as u32,
            }
        };
        let mut out = Vec::new();
        for [left, right] in &nodes {
            out.extend(&value(*left).to_be_bytes()[1..]);
            out.extend(&value(*right).to_be_bytes()[1..]);
        }
        out.extend([0u8; 16]);
        out.extend(data);
        out.extend(b"\xAB\xCD\xEFMaxMind.com");
        out.extend(map(&[
            ("binary_format_major_version", uint16(2)),
            ("binary_format_minor_version", uint16(0)),
            ("build_epoch", uint64(1_700_000_000)),
            ("database_type", string("Tally-Test-Country")),
            ("description", map(&[("en", string("Tally test database"))])),
            ("ip_version", uint16(6)),
            ("languages", array(&[string("en")])),
            ("node_count", uint32(count as u32)),
            ("record_size", uint16(24)),
        ]));
        out
    }

    fn insert(nodes: &mut Vec<[Rec; 2]>, addr: [u8; 16], prefix: usize, data: usize) {
        let mut node = 0;
        for i in 0..prefix {
            let bit = usize::from((addr[i / 8] >> (7 - i % 8)) & 1);
            if i + 1 == prefix {
                nodes[node][bit] = Rec::Data(data);
                return;
            }
            node = match nodes[node][bit] {
                Rec::Node(next) => next,
                _ => {
                    nodes.push([Rec::Empty, Rec::Empty]);
                    let next = nodes.len() - 1;
                    nodes[node][bit] = Rec::Node(next);
                    next
                }
            };
        }
    }

    /// A control byte for `kind` (1 to 7; 8 and up are extended types) and a size below 29.
    fn control(kind: u8, size: usize) -> Vec<u8> {
        assert!(size < 29);
        if kind <= 7 { vec![kind << 5 | size as u8] } else { vec![size as u8, kind - 7] }
    }

    fn string(s: &str) -> Vec<u8> {
        let mut out = control(2, s.len());
        out.extend(s.as_bytes());
        out
    }

    fn uint(kind: u8, value: u64) -> Vec<u8> {
        let bytes = value.to_be_bytes();
        let skip = bytes.iter().take_while(|&&b| b == 0).count();
        let mut out = control(kind, 8 - skip);
        out.extend(&bytes[skip..]);
        out
    }

    fn uint16(value: u16) -> Vec<u8> {
        uint(5, value.into())
    }

    fn uint32(value: u32) -> Vec<u8> {
        uint(6, value.into())
    }

    fn uint64(value: u64) -> Vec<u8> {
        uint(9, value)
    }

    fn map(entries: &[(&str, Vec<u8>)]) -> Vec<u8> {
        let mut out = control(7, entries.len());
        for (key, value) in entries {
            out.extend(string(key));
            out.extend(value);
        }
        out
    }

    fn array(items: &[Vec<u8>]) -> Vec<u8> {
        let mut out = control(11, items.len());
        for item in items {
            out.extend(item);
        }
        out
    }
}

#[test]
fn more_user_agents() {
    check_ua(
        "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) FxiOS/133.0 Mobile/15E148 Safari/605.1.15",
        expect!["Firefox 133.0 / iOS 18.1 / Mobile"],
    );
    check_ua(
        "Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Mobile Safari/537.36 EdgA/131.0.0.0",
        expect!["Edge 131.0 / Android 10 / Mobile"],
    );
    check_ua(
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36 OPR/115.0.0.0",
        expect!["Opera 115.0 / Windows 10 / Desktop"],
    );
    check_ua(
        "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148 [FBAN/FBIOS;FBAV/450.0.0.38.108;FBBV/1;FBDV/iPhone14,5;FBMD/iPhone;FBSN/iOS;FBSV/17.5;FBSS/3;FBCR/;FBID/phone;FBLC/en_US;FBOP/80]",
        expect!["Facebook 450.0 / iOS 17.5 / Mobile"],
    );
    check_ua(
        "Mozilla/5.0 (SMART-TV; LINUX; Tizen 6.0) AppleWebKit/537.36 (KHTML, like Gecko) 76.0.3809.146/6.0 TV Safari/537.36",
        expect!["Safari - / Tizen 6.0 / TV"],
    );
    check_ua(
        "Mozilla/5.0 (PlayStation; PlayStation 5/2.26) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/13.0 Safari/605.1.15",
        expect!["Safari 13.0 / Other - / Console"],
    );
    check_ua(
        "Mozilla/5.0 (X11; CrOS x86_64 14541.0.0) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
        expect!["Chrome 131.0 / ChromeOS 14541.0 / Desktop"],
    );
    check_ua("Mozilla/5.0 (compatible; YandexBot/3.0; +http://yandex.com/bots)", expect!["drop: bot"]);
    check_ua("Mozilla/5.0 (compatible; AhrefsBot/7.0; +http://ahrefs.com/robot/)", expect!["drop: bot"]);
    check_ua("facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)", expect!["drop: bot"]);
    check_ua("Go-http-client/2.0", expect!["drop: bot"]);
    check_ua("node-fetch/1.0 (+https://github.com/bitinn/node-fetch)", expect!["drop: bot"]);
    check_ua(
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36 Edg/131.0.0.0 PTST/240201.144907",
        expect!["drop: bot"],
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// Enrichment never panics, whatever the User-Agent, referrer and headers.
    #[test]
    fn enrich_never_panics(
        user_agent in proptest::prelude::any::<String>(),
        referrer in proptest::option::of(proptest::prelude::any::<String>()),
        forwarded in "[0-9a-f.:\\[\\], ]{0,60}",
        country in proptest::prelude::any::<String>(),
        peer in proptest::prelude::any::<[u8; 16]>(),
    ) {
        let mut raw = RawEvent::pageview("https://example.com/", "example.com");
        raw.user_agent = user_agent;
        raw.referrer = referrer;
        raw.peer_ip = IpAddr::from(peer);
        raw.headers = [("x-forwarded-for", forwarded), ("cf-ipcountry", country)].into_iter().collect();
        let event = Event::parse(raw, &Limits::default()).unwrap();
        let domains = [Hostname::parse("example.com").unwrap()];
        let site = SiteContext { domains: &domains, excluded_ips: &IpRanges::new() };
        let _ = ENRICHER.enrich(&event, &site);
    }
}

#[test]
fn cached_and_uncached_user_agent_answers_agree() {
    let parser = UserAgentParser::new().unwrap();
    for i in 0..(UserAgentParser::CACHE_CAPACITY + 10) {
        let ua = format!("Mozilla/5.0 (Windows NT 10.0; Win64; x64) Chrome/{}.0.0.0 Safari/537.36", i % 200);
        assert_eq!(*parser.parse(&ua), parser.parse_uncached(&ua));
    }
    let ua =
        "Mozilla/5.0 (iPad; CPU OS 17_7 like Mac OS X) AppleWebKit/605.1.15 Version/17.7 Mobile/15E148 Safari/604.1";
    assert_eq!(parser.parse(ua), parser.parse(ua));
}

#[test]
fn cached_and_uncached_bot_verdicts_agree() {
    let bots = BotDetector::new();
    let kinds = [
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64) Chrome/{}.0.0.0 Safari/537.36",
        "Mozilla/5.0 (compatible; Googlebot/2.{}; +http://www.google.com/bot.html)",
        "Mozilla/5.0 (X11; Linux x86_64) HeadlessChrome/{}.0.0.0 Safari/537.36",
        "curl/8.{}",
        "  ",
    ];
    // Past the cache's capacity, so it empties and fills again, each User-Agent asked twice.
    for i in 0..(BotDetector::CACHE_CAPACITY + 10) {
        let ua = kinds[i % kinds.len()].replace("{}", &(i % 1_000).to_string());
        let uncached = bots.check_user_agent_uncached(&ua);
        assert_eq!(bots.check_user_agent(&ua), uncached, "{ua}");
        assert_eq!(bots.check_user_agent(&ua), uncached, "{ua} (remembered)");
    }
    assert_eq!(bots.check_user_agent("curl/8.1"), Some(DropReason::Bot));
    assert_eq!(bots.check_user_agent(""), Some(DropReason::EmptyUserAgent));
}

#[test]
fn the_enricher_can_be_shared_across_threads() {
    fn shared<T: Send + Sync>() {}
    shared::<Enricher>();
}
