//! History imports: Plausible's CSV export (a zip of `imported_*` tables, fixtures written to
//! its published column lists) stored as imported days and merged into the Stats API when a
//! query asks for them, cut over at the first day of the site's own data so no day counts twice;
//! Umami's CSV of `website_event` rows imported as events; every file imported twice changes
//! nothing; bad files are refused whole with their line, and change nothing.

use std::io::Write;
use std::path::Path;

use serde_json::{Value, json};

use crate::support::{Server, add_site, field, tally, tally_ok};

const UA: &str = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0";

fn zip(path: &Path, files: &[(&str, &str)]) {
    let mut w = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    for (name, body) in files {
        w.start_file(*name, options).unwrap();
        w.write_all(body.as_bytes()).unwrap();
    }
    w.finish().unwrap();
}

/// Plausible CE's export tables, with the columns its CSV importer lists.
const VISITORS: &str = "date,visitors,pageviews,bounces,visits,visit_duration\n\
2026-09-01,10,20,4,12,600\n\
2026-09-09,5,8,1,6,120\n\
2026-09-10,100,300,10,120,9000\n";
const PAGES: &str = "date,hostname,page,visits,visitors,pageviews,scroll_depth,pageleave_visitors\n\
2026-09-01,hist.test,/a,8,7,15,,0\n\
2026-09-01,hist.test,/b,4,3,5,,0\n\
2026-09-09,hist.test,/a,3,3,5,,0\n\
2026-09-10,hist.test,/a,50,50,50,,0\n";
const SOURCES: &str = "date,source,referrer,utm_source,utm_medium,utm_campaign,utm_content,utm_term,pageviews,visitors,visits,visit_duration,bounces\n\
2026-09-01,Google,google.com,,,,,,12,6,7,300,2\n\
2026-09-01,,,,,,,,8,4,5,300,2\n\
2026-09-09,Newsletter,,newsletter,email,autumn,,,8,5,6,120,1\n";
const CUSTOM_EVENTS: &str = "date,name,link_url,path,visitors,events\n\
2026-09-09,Signup,,,2,3\n";

struct World {
    _dir: tempfile::TempDir,
    dir: std::path::PathBuf,
    store: std::path::PathBuf,
    key: String,
}

fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    let store = path.join("data");
    let site = add_site(&store, "hist.test", "UTC");
    World { _dir: dir, dir: path, store, key: site.key }
}

/// Tally's own events: two page views of one visitor on 10 September, the cut-over day.
fn own_events(w: &World) {
    let line =
        |ts: &str, url: &str| json!({ "timestamp": ts, "url": url, "user_agent": UA, "visitor": "own" }).to_string();
    let file = w.dir.join("own.ndjson");
    std::fs::write(
        &file,
        [line("2026-09-10T09:00:00Z", "https://hist.test/a"), line("2026-09-10T09:01:00Z", "https://hist.test/c")]
            .join("\n"),
    )
    .unwrap();
    let out = tally_ok(&w.store, &["import", file.to_str().unwrap(), "--site", "hist.test"]);
    assert_eq!(field(&out, "imported:"), "2");
}

fn query(server: &Server, key: &str, body: Value) -> Value {
    let response = server.client().post_json("/api/v2/query", &[("authorization", &format!("Bearer {key}"))], &body);
    assert_eq!(response.status, 200, "{}", response.text());
    response.json()
}

fn totals(server: &Server, key: &str, imports: bool) -> Vec<i64> {
    let answer = query(
        server,
        key,
        json!({
            "site_id": "hist.test", "metrics": ["visitors", "pageviews", "visits", "events"],
            "date_range": ["2026-09-01", "2026-09-11"], "include": { "imports": imports }
        }),
    );
    answer["results"][0]["metrics"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect()
}

fn breakdown(server: &Server, key: &str, dimension: &str, metric: &str) -> Vec<(String, i64)> {
    let answer = query(
        server,
        key,
        json!({
            "site_id": "hist.test", "metrics": [metric], "dimensions": [dimension],
            "date_range": ["2026-09-01", "2026-09-11"], "include": { "imports": true },
            "order_by": [[dimension, "asc"]]
        }),
    );
    answer["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["dimensions"][0].as_str().unwrap().to_owned(), r["metrics"][0].as_i64().unwrap()))
        .collect()
}

#[test]
fn a_plausible_export_merges_into_answers_before_the_cutover_and_a_rerun_changes_nothing() {
    let w = world();
    own_events(&w);
    let export = w.dir.join("plausible-export.zip");
    zip(
        &export,
        &[
            ("imported_visitors_20260901_20260910.csv", VISITORS),
            ("imported_pages_20260901_20260910.csv", PAGES),
            ("imported_sources_20260901_20260910.csv", SOURCES),
            ("imported_custom_events_20260901_20260910.csv", CUSTOM_EVENTS),
        ],
    );
    let out = tally_ok(&w.store, &["import", export.to_str().unwrap(), "--site", "hist.test"]);
    assert_eq!(field(&out, "format:"), "plausible export (plausible)");
    assert_eq!(field(&out, "tables:"), "4");
    assert_eq!(field(&out, "cutover:"), "2026-09-10", "the first day of the site's own data");
    assert_eq!(field(&out, "skipped on or after the cutover:"), "2", "{out}");

    let server = Server::start(&w.store);
    // Without the toggle, Tally's own numbers only: 1 visitor, 2 page views, 1 visit.
    let own = totals(&server, &w.key, false);
    assert_eq!(own[1..3], [2, 1], "{own:?}");
    // With it, the history before the cut-over is added: visitors 10 + 5, page views 20 + 8,
    // visits 12 + 6; 10 September's imported row is not (the site's own data covers it).
    let merged = totals(&server, &w.key, true);
    assert_eq!(merged[0], own[0] + 15, "{merged:?}");
    assert_eq!(merged[1], 2 + 28);
    assert_eq!(merged[2], 1 + 18);
    assert_eq!(
        breakdown(&server, &w.key, "event:page", "pageviews"),
        [("/a".into(), 15 + 5 + 1), ("/b".into(), 5), ("/c".into(), 1)]
    );
    let sources = breakdown(&server, &w.key, "visit:source", "visits");
    assert!(sources.contains(&("Google".into(), 7)) && sources.contains(&("Newsletter".into(), 6)), "{sources:?}");
    assert!(sources.iter().any(|(s, v)| s == "Direct / None" && *v >= 5), "{sources:?}");
    assert_eq!(breakdown(&server, &w.key, "visit:utm_campaign", "visits"), [("autumn".into(), 6)]);
    assert!(breakdown(&server, &w.key, "event:name", "events").contains(&("Signup".into(), 3)));
    // A daily series shows the imported days as days.
    let series = query(
        &server,
        &w.key,
        json!({ "site_id": "hist.test", "metrics": ["pageviews"], "dimensions": ["time:day"],
                "date_range": ["2026-09-01", "2026-09-10"], "include": { "imports": true } }),
    );
    let day = |d: &str| {
        series["results"].as_array().unwrap().iter().find(|r| r["dimensions"][0] == d).map(|r| r["metrics"][0].clone())
    };
    assert_eq!(day("2026-09-01"), Some(json!(20)));
    assert_eq!(day("2026-09-10"), Some(json!(2)), "the cut-over day is the site's own");
    assert_eq!(series["meta"]["imports_included"], true);
    // An hourly series cannot use daily history, and says so.
    let hourly = query(
        &server,
        &w.key,
        json!({ "site_id": "hist.test", "metrics": ["pageviews"], "dimensions": ["time:hour"],
                "date_range": ["2026-09-09", "2026-09-09"], "include": { "imports": true } }),
    );
    assert_eq!(hourly["meta"]["imports_skip_reason"], "unsupported_interval");
    server.stop();

    // The same files again, and bad ones: nothing changes.
    let own_again = tally_ok(&w.store, &["import", w.dir.join("own.ndjson").to_str().unwrap(), "--site", "hist.test"]);
    assert_eq!(field(&own_again, "already imported:"), "yes (nothing changed)");
    let again = tally_ok(&w.store, &["import", export.to_str().unwrap(), "--site", "hist.test"]);
    assert_eq!(field(&again, "cutover:"), "2026-09-10");
    let bad = w.dir.join("bad.zip");
    zip(
        &bad,
        &[
            (
                "imported_visitors_20260901_20260910.csv",
                "date,visitors,pageviews,bounces,visits,visit_duration\n2026-09-02,1,1,0,1,0\n",
            ),
            (
                "imported_pages_20260901_20260910.csv",
                "date,hostname,page,visits,visitors,pageviews\n2026-09-02,hist.test,/z,1,lots,1\n",
            ),
        ],
    );
    let out = tally(&w.store, &["import", bad.to_str().unwrap(), "--site", "hist.test"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("imported_pages_20260901_20260910.csv, line 2") && stderr.contains("lots"), "{stderr}");
    let unknown = w.dir.join("unknown.zip");
    zip(&unknown, &[("imported_visitors_20260901_20260910.csv", VISITORS), ("notes.csv", "a,b\n1,2\n")]);
    let out = tally(&w.store, &["import", unknown.to_str().unwrap(), "--site", "hist.test"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not one of Plausible's imported tables"));
    let moved =
        tally(&w.store, &["import", export.to_str().unwrap(), "--site", "hist.test", "--cutover", "2026-09-05"]);
    assert!(!moved.status.success(), "the cut-over cannot move once history is imported");

    let server = Server::start(&w.store);
    assert_eq!(totals(&server, &w.key, true), merged, "a rerun and refused files changed nothing");
    assert_eq!(totals(&server, &w.key, false), own);
    server.stop();
}

/// Umami's `website_event` columns, as its CSV export writes them.
const UMAMI: &str = "event_id,website_id,session_id,visit_id,created_at,url_path,url_query,referrer_path,referrer_query,referrer_domain,page_title,event_type,event_name,tag,hostname\n\
0b1c9f34-0000-4000-8000-000000000001,5a1f0000-0000-4000-8000-00000000abcd,7e57a000-0000-4000-8000-000000000001,9a000000-0000-4000-8000-000000000001,2026-10-05 10:00:00.000,/,,/search,q=tally,www.google.com,Home,1,,,hist.test\n\
0b1c9f34-0000-4000-8000-000000000002,5a1f0000-0000-4000-8000-00000000abcd,7e57a000-0000-4000-8000-000000000001,9a000000-0000-4000-8000-000000000001,2026-10-05 10:02:00.000,/pricing,plan=pro,,,,Pricing,1,,,hist.test\n\
0b1c9f34-0000-4000-8000-000000000003,5a1f0000-0000-4000-8000-00000000abcd,7e57a000-0000-4000-8000-000000000001,9a000000-0000-4000-8000-000000000001,2026-10-05 10:03:00.000,/pricing,,,,,Pricing,2,Signup,,hist.test\n\
0b1c9f34-0000-4000-8000-000000000004,5a1f0000-0000-4000-8000-00000000abcd,7e57a000-0000-4000-8000-000000000002,9a000000-0000-4000-8000-000000000002,2026-10-06T08:00:00Z,/blog,,,,,Blog,1,,,hist.test\n";

#[test]
fn an_umami_export_imports_as_events_once() {
    let w = world();
    let file = w.dir.join("website_event.csv");
    std::fs::write(&file, UMAMI).unwrap();
    let out = tally_ok(&w.store, &["import", file.to_str().unwrap(), "--site", "hist.test"]);
    assert_eq!(field(&out, "imported:"), "4", "{out}");
    let id = field(&out, "import id:");
    let again = tally_ok(&w.store, &["import", file.to_str().unwrap(), "--site", "hist.test"]);
    assert_eq!(field(&again, "import id:"), id);
    assert_eq!(field(&again, "already imported:"), "yes (nothing changed)");

    let server = Server::start(&w.store);
    let answer = query(
        &server,
        &w.key,
        json!({ "site_id": "hist.test", "metrics": ["visitors", "pageviews", "visits", "events"],
                "date_range": ["2026-10-05", "2026-10-06"] }),
    );
    assert_eq!(answer["results"][0]["metrics"], json!([2, 3, 2, 4]), "two sessions, three page views, one Signup");
    let sources = query(
        &server,
        &w.key,
        json!({ "site_id": "hist.test", "metrics": ["visits"], "dimensions": ["visit:source"],
                "date_range": ["2026-10-05", "2026-10-06"], "order_by": [["visit:source", "asc"]] }),
    );
    assert_eq!(sources["results"][1]["dimensions"][0], "Google", "{sources}");
    let names = query(
        &server,
        &w.key,
        json!({ "site_id": "hist.test", "metrics": ["events"], "dimensions": ["event:name"],
                "date_range": ["2026-10-05", "2026-10-06"], "order_by": [["event:name", "asc"]] }),
    );
    assert!(names["results"].as_array().unwrap().iter().any(|r| r["dimensions"][0] == "Signup"), "{names}");
    server.stop();

    // A row whose time does not read is refused by its line; the others are imported.
    let broken = w.dir.join("broken.csv");
    std::fs::write(&broken, UMAMI.replace("2026-10-06T08:00:00Z", "yesterday")).unwrap();
    let out = tally(&w.store, &["import", broken.to_str().unwrap(), "--site", "hist.test", "--format", "umami"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 5"), "{}", String::from_utf8_lossy(&out.stderr));
}
