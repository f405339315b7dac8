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

    // A row whose time does not read is refused by its line; the others were imported before
    // (another file, the same rows: their event ids), so nothing changes.
    let broken = w.dir.join("broken.csv");
    std::fs::write(&broken, UMAMI.replace("2026-10-06T08:00:00Z", "yesterday")).unwrap();
    let out = tally(&w.store, &["import", broken.to_str().unwrap(), "--site", "hist.test", "--format", "umami"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 5"), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!((field(&stdout, "imported:"), field(&stdout, "skipped (imported before):")), ("0".into(), "3".into()));
    let server = Server::start(&w.store);
    assert_eq!(october(&server, &w.key), json!([2, 3, 4]), "nothing counted twice");
    server.stop();
}

/// Page views and events of `hist.test` from 2026-10-05 to 2026-10-11: visitors, page views, events.
fn october(server: &Server, key: &str) -> Value {
    query(
        server,
        key,
        json!({ "site_id": "hist.test", "metrics": ["visitors", "pageviews", "events"],
                "date_range": ["2026-10-05", "2026-10-11"] }),
    )["results"][0]["metrics"]
        .clone()
}

/// `n` NDJSON lines: page views of 10 visitors on 10 October, a second apart.
fn lines(n: usize) -> Vec<String> {
    let start = jiff::Timestamp::from_second(1_791_619_200).unwrap(); // 2026-10-10T08:00:00Z
    (0..n)
        .map(|i| {
            let at = start + jiff::SignedDuration::from_secs(i as i64);
            json!({ "timestamp": at.to_string(), "url": format!("https://hist.test/p{}", i % 7),
                    "user_agent": UA, "visitor": format!("v{}", i % 10) })
            .to_string()
        })
        .collect()
}

#[test]
fn a_part_of_a_file_then_the_whole_then_force_import_each_line_once() {
    let w = world();
    let all = lines(40);
    let part = w.dir.join("part.ndjson");
    std::fs::write(&part, all[..15].join("\n")).unwrap();
    let whole = w.dir.join("whole.ndjson");
    std::fs::write(&whole, all.join("\n") + "\n").unwrap();
    let out = tally_ok(&w.store, &["import", part.to_str().unwrap(), "--site", "hist.test"]);
    assert_eq!(field(&out, "imported:"), "15", "{out}");
    // Another file (another file id) holding those 15 lines and 25 more: only the 25 are new.
    let out = tally_ok(&w.store, &["import", whole.to_str().unwrap(), "--site", "hist.test"]);
    assert_eq!((field(&out, "imported:"), field(&out, "skipped (imported before):")), ("25".into(), "15".into()));
    let again = tally_ok(&w.store, &["import", whole.to_str().unwrap(), "--site", "hist.test"]);
    assert_eq!(field(&again, "already imported:"), "yes (nothing changed)");
    // --force reads the file again; every line is known by its id.
    let forced = tally_ok(&w.store, &["import", whole.to_str().unwrap(), "--site", "hist.test", "--force"]);
    assert_eq!((field(&forced, "imported:"), field(&forced, "skipped (imported before):")), ("0".into(), "40".into()));
    let server = Server::start(&w.store);
    assert_eq!(october(&server, &w.key), json!([10, 40, 40]), "each of the 40 lines counted once");
    server.stop();
}

/// Regression: `--force` after an import stopped partway counted the lines it had stored twice.
/// Now the chunks it was ingesting (a few at once) are settled from the event blocks its run wrote.
#[test]
fn an_import_killed_midway_is_finished_by_a_rerun_without_counting_twice() {
    kill_midway_then_finish(lines(40_000));
}

/// The same with four lines to a second, so lines of one time could straddle two chunks in
/// flight at the kill (a run keeps one time's lines in one chunk), over four chunks.
#[test]
fn an_import_killed_with_chunks_in_flight_whose_lines_share_times_counts_each_line_once() {
    let start = jiff::Timestamp::from_second(1_791_619_200).unwrap(); // 2026-10-10T08:00:00Z
    let lines = (0..60_000)
        .map(|i| {
            let at = start + jiff::SignedDuration::from_secs(i as i64 / 4);
            json!({ "timestamp": at.to_string(), "url": format!("https://hist.test/p{}", i % 7),
                    "user_agent": UA, "visitor": format!("v{}", i % 10) })
            .to_string()
        })
        .collect();
    kill_midway_then_finish(lines);
}

/// Imports `lines` (10 visitors on 10 October), kills the import at its first progress line,
/// imports the file again with `--force`, and checks every line counted once.
fn kill_midway_then_finish(lines: Vec<String>) {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let w = world();
    let n = lines.len();
    let file = w.dir.join("big.ndjson");
    std::fs::write(&file, lines.join("\n")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tally"))
        .args(["import", file.to_str().unwrap(), "--site", "hist.test", "--store"])
        .arg(&w.store)
        .env("TALLY_LOG_LEVEL", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Killed at its first progress line: 10,000 events in, with its first chunks in flight.
    let of_n = format!(" of {n} events");
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let mut seen = Vec::new();
    for line in stderr.lines() {
        let line = line.unwrap();
        let progress = line.contains(&of_n);
        seen.push(line);
        if progress {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(seen.last().is_some_and(|l| l.contains(&of_n)), "no progress before the kill: {seen:?}");
    let out = tally(&w.store, &["import", file.to_str().unwrap(), "--site", "hist.test", "--force"]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}{stderr}");
    let imported: usize = field(&stdout, "imported:").parse().unwrap();
    let skipped: usize = field(&stdout, "skipped (imported before):").parse().unwrap();
    assert!(imported > 0 && imported < n, "the kill came midway: {stdout}{stderr}");
    assert!(stderr.contains("stopped in chunk"), "the chunks in doubt were settled: {stderr}");
    eprintln!("rerun: {imported} imported, {skipped} skipped");
    let server = Server::start(&w.store);
    assert_eq!(october(&server, &w.key), json!([10, n, n]), "every line counted once: {stderr}");
    server.stop();
}

/// A PostgreSQL server of its own for one test: `initdb` in a temporary directory, `pg_ctl
/// start` on a free loopback port (as the `postgres` user when the test runs as root, since
/// PostgreSQL refuses to), stopped when dropped.
struct Postgres {
    bin: std::path::PathBuf,
    data: std::path::PathBuf,
    port: u16,
    user: Option<String>,
    _dir: tempfile::TempDir,
}

impl Postgres {
    /// The server, or `None` (the test skipped) when `TALLY_PG_BIN` is not set and
    /// `TALLY_REQUIRE_POSTGRES=1` does not say it must run.
    fn start() -> Option<Postgres> {
        let Ok(bin) = std::env::var("TALLY_PG_BIN") else {
            let required = std::env::var("TALLY_REQUIRE_POSTGRES").is_ok_and(|v| v == "1");
            assert!(!required, "TALLY_REQUIRE_POSTGRES=1 but TALLY_PG_BIN is not set");
            eprintln!("skipped: set TALLY_PG_BIN to PostgreSQL's bin directory (`cargo xtask test` does)");
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        let root = std::process::Command::new("id").arg("-u").output().unwrap().stdout.starts_with(b"0");
        let user = root.then(|| "postgres".to_owned());
        if root {
            let status = std::process::Command::new("chown").arg("postgres:").arg(dir.path()).status().unwrap();
            assert!(status.success(), "chown postgres: {} (is Debian's postgresql installed?)", dir.path().display());
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let pg = Postgres { bin: bin.into(), data: dir.path().join("pg"), port, user, _dir: dir };
        pg.run("initdb", &["-D", pg.data.to_str().unwrap(), "-A", "trust", "-U", "umami", "--no-sync"]);
        let options = format!("-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off", pg.sockets());
        let log = pg.data.with_file_name("pg.log");
        pg.run(
            "pg_ctl",
            &["-D", pg.data.to_str().unwrap(), "-o", &options, "-l", log.to_str().unwrap(), "-w", "start"],
        );
        pg.run("createdb", &["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "umami", "umami"]);
        Some(pg)
    }

    fn sockets(&self) -> String {
        self.data.parent().unwrap().display().to_string()
    }

    /// Runs one of PostgreSQL's programs (as its user when root), failing the test loudly.
    fn run(&self, program: &str, args: &[&str]) -> String {
        let path = self.bin.join(program);
        let mut command = match &self.user {
            Some(user) => {
                let mut c = std::process::Command::new("runuser");
                c.args(["-u", user, "--"]).arg(&path);
                c
            }
            None => std::process::Command::new(&path),
        };
        let out =
            command.args(args).current_dir(self.data.parent().unwrap()).output().expect("run a PostgreSQL program");
        let log = std::fs::read_to_string(self.data.with_file_name("pg.log")).unwrap_or_default();
        assert!(
            out.status.success(),
            "{program} {args:?} failed: {}{}\n{log}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn sql(&self, script: &str) {
        let file = self.data.with_file_name("script.sql");
        std::fs::write(&file, script).unwrap();
        let port = self.port.to_string();
        let args = ["-h", "127.0.0.1", "-p", &port, "-U", "umami", "-d", "umami", "-v", "ON_ERROR_STOP=1", "-q", "-f"];
        let mut args = args.to_vec();
        args.push(file.to_str().unwrap());
        self.run("psql", &args);
    }

    fn url(&self) -> String {
        format!("postgres://umami@127.0.0.1:{}/umami", self.port)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let path = self.bin.join("pg_ctl");
        let mut command = match &self.user {
            Some(user) => {
                let mut c = std::process::Command::new("runuser");
                c.args(["-u", user, "--"]).arg(&path);
                c
            }
            None => std::process::Command::new(&path),
        };
        let _ = command.args(["-D", self.data.to_str().unwrap(), "-m", "immediate", "-w", "stop"]).output();
    }
}

/// Umami's tables in PostgreSQL, with the columns and types of its published Prisma schema
/// (`db/postgresql/schema.prisma`, Umami 2), and one website's rows: two sessions, five events
/// (a custom event with two properties), and another website's event that must not be read.
const UMAMI_SQL: &str = r#"
CREATE TABLE website (
  website_id uuid PRIMARY KEY, name varchar(100) NOT NULL, domain varchar(500), share_id varchar(50) UNIQUE,
  reset_at timestamptz(6), user_id uuid, team_id uuid, created_by uuid, created_at timestamptz(6) DEFAULT now(),
  updated_at timestamptz(6), deleted_at timestamptz(6));
CREATE TABLE session (
  session_id uuid PRIMARY KEY, website_id uuid NOT NULL, hostname varchar(100), browser varchar(20), os varchar(20),
  device varchar(20), screen varchar(11), language varchar(35), country char(2), subdivision1 varchar(20),
  subdivision2 varchar(50), city varchar(50), ip varchar(100), created_at timestamptz(6) DEFAULT now());
CREATE TABLE website_event (
  event_id uuid PRIMARY KEY, website_id uuid NOT NULL, session_id uuid NOT NULL, visit_id uuid NOT NULL,
  created_at timestamptz(6) DEFAULT now(), url_path varchar(500) NOT NULL, url_query varchar(500),
  referrer_path varchar(500), referrer_query varchar(500), referrer_domain varchar(500), page_title varchar(500),
  event_type integer NOT NULL DEFAULT 1, event_name varchar(50), tag varchar(50));
CREATE TABLE event_data (
  event_data_id uuid PRIMARY KEY, website_id uuid NOT NULL, website_event_id uuid NOT NULL, data_key varchar(500) NOT NULL,
  string_value varchar(500), number_value decimal(19,4), date_value timestamptz(6), data_type integer NOT NULL,
  created_at timestamptz(6) DEFAULT now());
INSERT INTO website (website_id, name, domain) VALUES
  ('5a1f0000-0000-4000-8000-00000000abcd', 'Hist', 'hist.test'),
  ('5a1f0000-0000-4000-8000-00000000ffff', 'Other', 'other.test');
INSERT INTO session (session_id, website_id, hostname, browser, os, device, screen, language, country) VALUES
  ('7e57a000-0000-4000-8000-000000000001', '5a1f0000-0000-4000-8000-00000000abcd', 'hist.test', 'firefox', 'Linux', 'desktop', '1920x1080', 'de-DE', 'DE'),
  ('7e57a000-0000-4000-8000-000000000002', '5a1f0000-0000-4000-8000-00000000abcd', 'hist.test', 'ios', 'iOS', 'mobile', '390x844', 'fr-FR', 'FR'),
  ('7e57a000-0000-4000-8000-000000000009', '5a1f0000-0000-4000-8000-00000000ffff', 'other.test', 'chrome', 'Windows 10', 'desktop', '1920x1080', 'en-US', 'US');
INSERT INTO website_event (event_id, website_id, session_id, visit_id, created_at, url_path, url_query, referrer_path, referrer_query, referrer_domain, page_title, event_type, event_name) VALUES
  ('0b1c9f34-0000-4000-8000-000000000001', '5a1f0000-0000-4000-8000-00000000abcd', '7e57a000-0000-4000-8000-000000000001', '9a000000-0000-4000-8000-000000000001', '2026-10-05 10:00:00+00', '/', NULL, '/search', 'q=tally', 'www.google.com', 'Home', 1, NULL),
  ('0b1c9f34-0000-4000-8000-000000000002', '5a1f0000-0000-4000-8000-00000000abcd', '7e57a000-0000-4000-8000-000000000001', '9a000000-0000-4000-8000-000000000001', '2026-10-05 10:02:00+00', '/pricing', 'plan=pro', NULL, NULL, NULL, 'Pricing', 1, NULL),
  ('0b1c9f34-0000-4000-8000-000000000003', '5a1f0000-0000-4000-8000-00000000abcd', '7e57a000-0000-4000-8000-000000000001', '9a000000-0000-4000-8000-000000000001', '2026-10-05 12:03:00+02', '/pricing', NULL, NULL, NULL, NULL, 'Pricing', 2, 'Signup'),
  ('0b1c9f34-0000-4000-8000-000000000004', '5a1f0000-0000-4000-8000-00000000abcd', '7e57a000-0000-4000-8000-000000000002', '9a000000-0000-4000-8000-000000000002', '2026-10-06 08:00:00+00', '/blog', NULL, NULL, NULL, NULL, 'Blog', 1, NULL),
  ('0b1c9f34-0000-4000-8000-000000000005', '5a1f0000-0000-4000-8000-00000000abcd', '7e57a000-0000-4000-8000-000000000002', '9a000000-0000-4000-8000-000000000002', '2026-10-06 08:01:00+00', '/blog/post', NULL, NULL, NULL, NULL, 'Post', 1, NULL),
  ('0b1c9f34-0000-4000-8000-000000000009', '5a1f0000-0000-4000-8000-00000000ffff', '7e57a000-0000-4000-8000-000000000009', '9a000000-0000-4000-8000-000000000009', '2026-10-06 09:00:00+00', '/elsewhere', NULL, NULL, NULL, NULL, 'Other', 1, NULL);
INSERT INTO event_data (event_data_id, website_id, website_event_id, data_key, string_value, number_value, data_type) VALUES
  ('e0000000-0000-4000-8000-000000000001', '5a1f0000-0000-4000-8000-00000000abcd', '0b1c9f34-0000-4000-8000-000000000003', 'plan', 'pro', NULL, 1),
  ('e0000000-0000-4000-8000-000000000002', '5a1f0000-0000-4000-8000-00000000abcd', '0b1c9f34-0000-4000-8000-000000000003', 'seats', NULL, 5, 2);
"#;

#[test]
fn umami_events_are_read_from_its_postgresql_database_once() {
    let Some(pg) = Postgres::start() else { return };
    pg.sql(UMAMI_SQL);
    let w = world();
    let url = pg.url();
    // Two websites: which one must be said, unless one has the site's domain (it has).
    let out = tally_ok(&w.store, &["import", "--umami-postgres", &url, "--site", "hist.test"]);
    assert_eq!((field(&out, "imported:"), field(&out, "refused:")), ("5".into(), "0".into()), "{out}");
    let again = tally_ok(
        &w.store,
        &[
            "import",
            "--umami-postgres",
            &url,
            "--site",
            "hist.test",
            "--umami-website",
            "5A1F0000-0000-4000-8000-00000000ABCD",
        ],
    );
    assert_eq!((field(&again, "imported:"), field(&again, "skipped (imported before):")), ("0".into(), "5".into()));
    // Umami's CSV export of the same rows: the same event ids, nothing new.
    let csv = w.dir.join("website_event.csv");
    std::fs::write(&csv, UMAMI).unwrap();
    let export = tally_ok(&w.store, &["import", csv.to_str().unwrap(), "--site", "hist.test"]);
    assert_eq!((field(&export, "imported:"), field(&export, "skipped (imported before):")), ("0".into(), "4".into()));

    let server = Server::start(&w.store);
    assert_eq!(october(&server, &w.key), json!([2, 4, 5]), "two sessions, four page views, one Signup");
    let by = |dimension: &str| {
        let answer = query(
            &server,
            &w.key,
            json!({ "site_id": "hist.test", "metrics": ["visitors"], "dimensions": [dimension],
                    "date_range": ["2026-10-05", "2026-10-11"], "order_by": [[dimension, "asc"]] }),
        );
        answer["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["dimensions"][0].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(by("visit:country"), ["DE", "FR"]);
    assert_eq!(by("visit:browser"), ["Firefox", "Safari"]);
    assert_eq!(by("visit:os"), ["Linux", "iOS"]);
    assert_eq!(by("visit:device"), ["Desktop", "Mobile"]);
    assert_eq!(by("visit:source"), ["Direct / None", "Google"]);
    let props = query(
        &server,
        &w.key,
        json!({ "site_id": "hist.test", "metrics": ["events"], "dimensions": ["event:props:seats"],
                "date_range": ["2026-10-05", "2026-10-11"], "filters": [["is", "event:name", ["Signup"]]] }),
    );
    assert_eq!(props["results"][0]["dimensions"][0], "5", "{props}");
    server.stop();

    // A database that cannot be reached is an error naming it.
    let out =
        tally(&w.store, &["import", "--umami-postgres", "postgres://umami@127.0.0.1:1/umami", "--site", "hist.test"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot connect to Umami's database"));
}
