//! `tally import FILE`: backfilled events land in their own days, and a site stored before
//! weekly aggregates is marked by the import as by `tally serve`, so its statistics stay whole.

use std::path::Path;
use std::sync::Arc;

use analytics::sites::Sites;
use serde_json::json;

use crate::support::{Server, add_site};

/// Runs `f` on Tally's table in the store at `dir` (no `tally` process may have it open).
fn with_sites<T>(dir: &Path, f: impl AsyncFnOnce(&model::Table, &Sites) -> T) -> T {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let store = Arc::new(store_embedded::EmbeddedStore::open(dir).unwrap());
        let table = model::Table::new(store, analytics::schema::tally_schema(analytics::schema::TABLE_NAME));
        let sites = Sites::new(table.clone());
        f(&table, &sites).await
    })
}

#[test]
fn import_backfills_days_and_marks_a_site_stored_before_weekly_aggregates() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("data");
    let site = add_site(&store, "shop.test", "UTC");

    // Make the site look like one stored before weekly aggregates: no `weeks_from`.
    let site_id = with_sites(&store, async |table, sites| {
        let site = sites.by_domain("shop.test").await.unwrap().unwrap();
        let update = model::expr::Update::new().remove("weeks_from");
        table.update("Site", store::item! { "site_id" => site.site_id.as_str() }, update).await.unwrap();
        site.site_id
    });
    with_sites(&store, async |_, sites| {
        assert_eq!(sites.get(&site_id).await.unwrap().unwrap().weeks_from_ms, i64::MAX, "unmarked");
    });

    // Two visitors over three days of an earlier month (Mon 5 – Wed 7 October 2026, UTC), out of
    // order; one bad line is refused by number and imports nothing.
    let ua = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0";
    let line = |ts: &str, url: &str, visitor: &str| {
        json!({ "timestamp": ts, "url": url, "user_agent": ua, "visitor": visitor }).to_string()
    };
    let lines = [
        line("2026-10-07T09:00:00Z", "https://shop.test/cart", "b"),
        line("2026-10-05T10:00:00Z", "https://shop.test/", "a"),
        line("2026-10-05T10:05:00Z", "https://shop.test/pricing", "a"),
        "{\"timestamp\": true}".to_owned(),
        line("2026-10-06T12:00:00Z", "https://shop.test/", "b"),
    ];
    let file = dir.path().join("events.ndjson");
    std::fs::write(&file, lines.join("\n")).unwrap();
    let out = crate::support::tally(&store, &["import", file.to_str().unwrap(), "--site", "shop.test"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("imported: 4") && stdout.contains("refused: 1"), "{stdout}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 4"), "the bad line is named");

    // `aggregate --rebuild` over part of the time: a lost day item is found by a verify of a
    // range holding its day and by no other, and a rebuild of that range alone restores it.
    with_sites(&store, async |table, _| {
        let mut pages = table.scan().entity("Aggregate").consistent().pages();
        let mut key = None;
        while let Some(page) = futures::StreamExt::next(&mut pages).await {
            for r in page.unwrap().records {
                let field = |name: &str| r.string(name).unwrap().to_owned();
                if field("period") == "day" && field("bucket") == "2026-10-05" && field("dimension") == "event:page" {
                    key = Some(["site_id", "period", "dimension", "bucket", "value"].map(field));
                }
            }
        }
        let [site_id, period, dimension, bucket, value] = key.expect("a page item of 5 October");
        let key = store::item! {
            "site_id" => site_id, "period" => period, "dimension" => dimension, "bucket" => bucket, "value" => value,
        };
        table.delete("Aggregate", key).await.unwrap();
    });
    let rebuild = |from: &str, to: &str, verify: bool| {
        let mut args = vec!["aggregate", "--rebuild", "--site", "shop.test", "--from", from, "--to", to];
        if verify {
            args.push("--verify");
        }
        let out = crate::support::tally(&store, &args);
        (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let (clean, out) = rebuild("2026-10-06", "2026-10-07", true);
    assert!(clean && out.contains("differences: 0"), "5 October is outside: {out}");
    let (clean, out) = rebuild("2026-10-05", "2026-10-05", true);
    assert!(!clean && !out.contains("differences: 0"), "the lost item is found: {out}");
    let (clean, out) = rebuild("2026-10-05", "2026-10-05", false);
    assert!(clean, "{out}");
    let (clean, out) = rebuild("2026-10-01", "2026-10-31", true);
    assert!(clean && out.contains("differences: 0"), "restored: {out}");
    assert!(!rebuild("5 October", "2026-10-06", true).0, "a malformed date is refused");

    let marked = with_sites(&store, async |_, sites| sites.get(&site_id).await.unwrap().unwrap().weeks_from_ms);
    assert!(marked != i64::MAX && marked > 1_790_000_000_000, "import marks the site: {marked}");

    let server = Server::start(&store);
    let mut c = server.client();
    let auth = format!("Bearer {}", site.key);
    let mut query = |body: serde_json::Value| {
        let r = c.post_json("/api/v2/query", &[("authorization", &auth)], &body);
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["results"].clone()
    };
    let month = query(json!({
        "site_id": "shop.test", "metrics": ["visitors", "visits", "pageviews", "bounce_rate"],
        "date_range": ["2026-10-01", "2026-10-31"]
    }));
    assert_eq!(month[0]["metrics"], json!([2, 3, 4, 67]), "{month}");
    let days = query(json!({
        "site_id": "shop.test", "metrics": ["pageviews"], "date_range": ["2026-10-01", "2026-10-31"],
        "dimensions": ["time:day"]
    }));
    assert_eq!(
        days,
        json!([
            { "dimensions": ["2026-10-05"], "metrics": [2] },
            { "dimensions": ["2026-10-06"], "metrics": [1] },
            { "dimensions": ["2026-10-07"], "metrics": [1] },
        ])
    );
    server.stop();
}

/// Visits are made in time order whatever order a file or body lists its events in: the same
/// shuffled events through `tally import` as NDJSON and as CSV, and through `POST /api/import`
/// as CSV, give the visits they describe.
#[test]
fn shuffled_imports_make_the_visits_their_times_describe() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("data");
    let sites = ["ndjson.test", "csv.test", "http.test"].map(|d| add_site(&store, d, "UTC"));
    let ua = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0";
    // Visitor a: one visit of three pages, 40 minutes long. Visitor b: two bounces 45 minutes
    // apart. Listed latest first, then mixed.
    let events = [
        ("2026-10-05T10:40:00Z", "/c", "a"),
        ("2026-10-05T11:45:00Z", "/y", "b"),
        ("2026-10-05T10:00:00Z", "/a", "a"),
        ("2026-10-05T11:00:00Z", "/x", "b"),
        ("2026-10-05T10:20:00Z", "/b", "a"),
    ];
    let ndjson: Vec<String> = events
        .iter()
        .map(|(ts, path, v)| {
            json!({ "timestamp": ts, "url": format!("https://ndjson.test{path}"), "user_agent": ua, "visitor": v })
                .to_string()
        })
        .collect();
    let csv = |domain: &str| {
        let rows: Vec<String> =
            events.iter().map(|(ts, path, v)| format!("{ts},https://{domain}{path},\"{ua}\",{v}\r\n")).collect();
        format!("timestamp,url,user_agent,visitor\r\n{}", rows.concat())
    };
    let (ndjson_file, csv_file) = (dir.path().join("events.ndjson"), dir.path().join("events.csv"));
    std::fs::write(&ndjson_file, ndjson.join("\n")).unwrap();
    std::fs::write(&csv_file, csv("csv.test")).unwrap();
    for (file, site) in [(&ndjson_file, "ndjson.test"), (&csv_file, "csv.test")] {
        let out = crate::support::tally_ok(&store, &["import", file.to_str().unwrap(), "--site", site]);
        assert!(out.contains("imported: 5") && out.contains("refused: 0"), "{site}: {out}");
    }

    let server = Server::start(&store);
    let mut c = server.client();
    let auth = format!("Bearer {}", sites[2].key);
    let r = c.request(
        "POST",
        "/api/import?site_id=http.test",
        &[("authorization", &auth), ("content-type", "text/csv")],
        csv("http.test").as_bytes(),
    );
    assert_eq!((r.status, r.json()["imported"].clone()), (200, json!(5)), "{}", r.text());
    // The aggregator flushes within seconds; read until the last site's numbers are in.
    let metrics = json!(["visitors", "visits", "pageviews", "bounce_rate", "visit_duration"]);
    let expected = json!([2, 3, 5, 67, 800]);
    for site in &sites {
        let auth = format!("Bearer {}", site.key);
        let body = json!({ "site_id": site.domain, "metrics": metrics, "date_range": ["2026-10-05", "2026-10-05"] });
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let r = c.post_json("/api/v2/query", &[("authorization", &auth)], &body);
            assert_eq!(r.status, 200, "{}", r.text());
            let got = r.json()["results"][0]["metrics"].clone();
            if got == expected {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{}: {got} instead of {expected}", site.domain);
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }
    server.stop();
}

/// `tally export` writes events as `tally import` reads them: a site exported and imported into
/// two others (NDJSON and CSV) reads the same, sources and campaigns included; its daily
/// aggregates come out by dimension.
#[test]
fn an_export_imports_into_another_site_with_the_same_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("data");
    let sites = ["from.test", "ndjson.test", "csv.test"].map(|d| add_site(&store, d, "UTC"));
    let ua = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0";
    let lines = [
        json!({ "timestamp": "2026-10-05T10:00:00Z", "url": "https://from.test/?utm_source=mail&utm_campaign=fall",
                "referrer": "https://news.example/item", "user_agent": ua, "visitor": "a", "country": "DE",
                "language": "de-DE" }),
        json!({ "timestamp": "2026-10-05T10:01:00Z", "url": "https://from.test/pricing", "user_agent": ua, "visitor": "a" }),
        json!({ "timestamp": "2026-10-05T10:02:00Z", "url": "https://from.test/pricing", "name": "Signup",
                "props": { "plan": "pro, yearly" }, "revenue": { "amount": "19.99", "currency": "EUR" },
                "user_agent": ua, "visitor": "a" }),
        json!({ "timestamp": "2026-10-05T11:00:00Z", "url": "https://from.test/", "user_agent": ua, "visitor": "b" }),
        json!({ "timestamp": "2026-10-06T09:00:00Z", "url": "https://from.test/later", "user_agent": ua, "visitor": "b" }),
    ];
    let file = dir.path().join("events.ndjson");
    std::fs::write(&file, lines.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n")).unwrap();
    crate::support::tally_ok(&store, &["import", file.to_str().unwrap(), "--site", "from.test"]);

    let export = |args: &[&str], name: &str| {
        let path = dir.path().join(name);
        let mut all = vec!["export", "--site", "from.test", "--from", "2026-10-05", "--to", "2026-10-05"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--output", path.to_str().unwrap()]);
        crate::support::tally_ok(&store, &all);
        (path.clone(), std::fs::read_to_string(path).unwrap())
    };
    let (ndjson_path, ndjson) = export(&[], "out.ndjson");
    let events: Vec<serde_json::Value> = ndjson.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(events.len(), 4, "the range's four events, not the next day's: {ndjson}");
    let first = events.iter().find(|e| e["referrer"].is_string()).expect("a visit's first event names its referrer");
    assert_eq!(first["url"], json!("https://from.test/?utm_source=mail&utm_campaign=fall"));
    assert_eq!((first["country"].clone(), first["timestamp"].clone()), (json!("DE"), json!("2026-10-05T10:00:00Z")));
    assert!(ndjson.contains(r#""props":{"plan":"pro, yearly"}"#), "{ndjson}");
    assert!(!ndjson.contains(ua) && !ndjson.contains("\"ip\""), "no User-Agent or address is kept, so none leaves");
    let (csv_path, csv) = export(&["--format", "csv"], "out.csv");
    let header = "timestamp,url,name,referrer,visitor,country,interactive,language,revenue_amount,revenue_currency,\
                  browser,os,device";
    assert!(csv.starts_with(&format!("{header},props.plan\n")), "{csv}");
    assert_eq!(csv.lines().count(), 5);
    for (path, site) in [(&ndjson_path, "ndjson.test"), (&csv_path, "csv.test")] {
        let out = crate::support::tally_ok(&store, &["import", path.to_str().unwrap(), "--site", site]);
        assert!(out.contains("imported: 4") && out.contains("refused: 0"), "{site}: {out}");
    }
    // Regression: the CSV export once left out the visit's language and the revenue, so a site
    // imported from it lost both.
    let kept = |events: &[serde_json::Value]| {
        let field = |name: &str| events.iter().find_map(|e| e.get(name)).cloned();
        (field("language"), field("revenue"), field("browser"), field("os"), field("device"))
    };
    let (language, revenue, browser, os, device) = kept(&events);
    assert_eq!((language, revenue), (Some(json!("de-DE")), Some(json!({ "amount": "19.99", "currency": "EUR" }))));
    assert!(
        browser.is_some() && os.is_some() && device.is_some(),
        "a visit's first event names its browser, operating system and device: {ndjson}"
    );
    for site in ["ndjson.test", "csv.test"] {
        let path = dir.path().join(format!("{site}.ndjson"));
        let args = ["export", "--site", site, "--from", "2026-10-05", "--to", "2026-10-05", "--output"];
        crate::support::tally_ok(&store, &[&args[..], &[path.to_str().unwrap()]].concat());
        let again: Vec<serde_json::Value> =
            std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(kept(&again), kept(&events), "{site}");
    }
    let (_, days) = export(&["--aggregates", "--format", "csv"], "days.csv");
    assert!(
        days.starts_with("date,dimension,value,visitors,visits,pageviews,events,bounces,duration_ms,visit_pageviews\n")
    );
    assert!(days.contains("\n2026-10-05,total,,2,2,3,4,1,120000,3\n"), "{days}");
    assert!(days.contains("\n2026-10-05,visit:utm_campaign,fall,1,1,2,3,0,120000,2\n"), "{days}");

    let server = Server::start(&store);
    let mut c = server.client();
    let metrics = json!(["visitors", "visits", "pageviews", "events", "bounce_rate", "visit_duration"]);
    let mut answers = Vec::new();
    for site in &sites {
        let auth = format!("Bearer {}", site.key);
        let mut answer = Vec::new();
        for dimensions in [json!([]), json!(["visit:source"]), json!(["visit:utm_campaign"]), json!(["visit:country"])]
        {
            let body = json!({ "site_id": site.domain, "metrics": metrics, "dimensions": dimensions,
                               "date_range": ["2026-10-05", "2026-10-05"] });
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            let results = loop {
                let r = c.post_json("/api/v2/query", &[("authorization", &auth)], &body);
                assert_eq!(r.status, 200, "{}", r.text());
                let results = r.json()["results"].clone();
                if results.to_string().contains("[2,2,3,4,50,60]") || dimensions != json!([]) {
                    break results;
                }
                assert!(std::time::Instant::now() < deadline, "{}: {results}", site.domain);
                std::thread::sleep(std::time::Duration::from_millis(200));
            };
            answer.push(results);
        }
        answers.push(answer);
    }
    assert_eq!(answers[0][0], json!([{ "dimensions": [], "metrics": [2, 2, 3, 4, 50, 60] }]));
    assert_eq!(answers[1], answers[0], "the NDJSON export imports to the same numbers");
    assert_eq!(answers[2], answers[0], "the CSV export imports to the same numbers");
    server.stop();
}
