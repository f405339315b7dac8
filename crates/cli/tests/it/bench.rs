//! `tally bench` and `tally capacity`, run small: every figure the bench promises is printed and
//! is a number, the costs file it writes prices a traffic level, and nothing is left behind in
//! the working directory.

use std::process::Command;

/// The number after `label` on the line starting with `line`.
fn figure(out: &str, line: &str, label: &str) -> f64 {
    let text = out.lines().find(|l| l.starts_with(line)).unwrap_or_else(|| panic!("no {line:?} line in:\n{out}"));
    let rest = text.split(label).nth(1).unwrap_or_else(|| panic!("no {label:?} in {text:?}"));
    let number: String = rest.trim_start().chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
    number.parse().unwrap_or_else(|_| panic!("not a number after {label:?} in {text:?}"))
}

#[test]
fn bench_prints_every_figure_and_capacity_prices_them() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_tally"))
            .args(args)
            .current_dir(dir.path())
            .env("TALLY_LOG_LEVEL", "warn")
            .output()
            .expect("run tally");
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(output.status.success(), "tally {args:?}: {text}{}", String::from_utf8_lossy(&output.stderr));
        text
    };
    let out = run(&[
        "bench",
        "--events",
        "2000",
        "--dashboards",
        "3",
        "--concurrency",
        "8",
        "--http",
        "--output",
        "costs.json",
    ]);
    let generated = figure(&out, "events:", "events:");
    let accepted = figure(&out, "events:", "generated,");
    // About the number asked, not exactly: a day's traffic follows its weekday and chance, so
    // 30 days with more weekend days than a month's share come out short (1,822 of 2,000 for
    // the 30 days before 2026-12-07).
    assert!(generated > 1500.0 && generated <= 2000.0 && accepted == generated, "{out}");
    assert!(figure(&out, "in process:", "in process:") > 0.0);
    let units = figure(&out, "write units per event:", "write units per event:");
    assert!((1.0..100.0).contains(&units), "at least the raw event's unit: {units}");
    let p50 = figure(&out, "dashboard (", "p50");
    let p99 = figure(&out, "dashboard (", "p99");
    assert!(p50 > 0.0 && p99 >= p50, "{out}");
    assert!(figure(&out, "dashboard lag", "at most") >= 0.0);
    // Where aggregates' write units go: every event writes its day's items.
    let day_units = figure(&out, "aggregate writes", "writes, ");
    assert!(day_units > 0.0, "{out}");
    assert!(figure(&out, "over HTTP", "connections):") > 0.0);
    // The engine's group commits, in process and over HTTP, with their journal syncs' time (a
    // number; on a file system in memory it rounds to nothing).
    let engines: Vec<&str> = out.lines().filter(|l| l.starts_with("engine:")).collect();
    assert_eq!(engines.len(), 2, "{out}");
    for line in engines {
        assert!(figure(line, "engine:", "engine:") >= 1.0, "{line}");
        assert!(figure(line, "engine:", "and sync") >= 0.0, "{line}");
    }
    // What sessions leaving memory cost, in process and over HTTP (2,000 events fill no cache).
    let sessions: Vec<&str> = out.lines().filter(|l| l.starts_with("sessions leaving memory:")).collect();
    assert_eq!(sessions.len(), 2, "{out}");
    for line in sessions {
        assert_eq!(figure(line, "sessions leaving memory:", "memory:"), 0.0, "{line}");
        assert!(figure(line, "sessions leaving memory:", "while live (") >= 0.0, "{line}");
        assert!(figure(line, "sessions leaving memory:", "), ") >= 0.0, "{line}");
    }
    let rounds = figure(&out, "event blocks:", "written in");
    assert!(rounds >= 1.0 && rounds <= accepted, "{out}");

    let costs: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("costs.json")).unwrap()).expect("the costs file is JSON");
    let written = costs["write_units_per_event"].as_f64().expect("write units in the costs file");
    assert!((written - units).abs() < 0.001, "the file holds the printed figure: {written} against {units}");
    let priced = run(&["capacity", "--events-per-day", "1000000", "--from-bench", "costs.json"]);
    assert!(priced.contains("measured costs (costs.json)"), "{priced}");
    let total = figure(&priced, "  total", "$");
    assert!(total > 0.0, "{priced}");
    let entries: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(entries, ["costs.json"], "the bench's store was temporary");
}

/// Two pipelines sharing the table (`--ingesters 2`) over a year of traffic (`--days 365`): every
/// event is accepted, the shared path's write units are reported, and the questions read from
/// event blocks are timed over 12 months as well as 30 days.
#[test]
fn bench_measures_two_ingesters_and_a_year_of_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_tally"))
        .args(["bench", "--events", "1500", "--dashboards", "1", "--concurrency", "8", "--days", "365"])
        .args(["--ingesters", "2"])
        .current_dir(dir.path())
        .env("TALLY_LOG_LEVEL", "warn")
        .output()
        .expect("run tally");
    let out = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "{out}{}", String::from_utf8_lossy(&output.stderr));
    assert!(String::from_utf8_lossy(&output.stderr).contains("2 ingesting process(es)"), "{out}");
    let generated = figure(&out, "events:", "events:");
    let accepted = figure(&out, "events:", "generated,");
    assert!(generated > 1000.0 && accepted == generated, "{out}");
    let units = figure(&out, "write units per event:", "write units per event:");
    assert!((1.0..100.0).contains(&units), "shared, every event claims its session's item: {units}");
    for span in ["30 days", "12 months"] {
        let line = format!("  filtered breakdown (country is DE, by source), {span}:");
        assert!(figure(&out, &line, &format!("{span}:")) > 0.0, "{out}");
    }
    let refused = Command::new(env!("CARGO_BIN_EXE_tally"))
        .args(["bench", "--events", "10", "--ingesters", "3"])
        .current_dir(dir.path())
        .output()
        .expect("run tally");
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("one or two"));
}

/// `--keep-store DIR` keeps the bench's store, and a second run on it ingests nothing and times
/// the queries against what the first one stored; it refuses `--output`, which needs ingestion.
#[test]
fn bench_keeps_its_store_and_times_queries_against_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_tally"))
            .args(["bench", "--dashboards", "2", "--concurrency", "8", "--keep-store", "kept"])
            .args(args)
            .current_dir(dir.path())
            .env("TALLY_LOG_LEVEL", "warn")
            .output()
            .expect("run tally")
    };
    let first = run(&["--events", "1500"]);
    let out = String::from_utf8_lossy(&first.stdout).into_owned();
    assert!(first.status.success(), "{out}{}", String::from_utf8_lossy(&first.stderr));
    assert!(figure(&out, "events:", "generated,") > 1000.0, "{out}");
    // The read units a dashboard took, the number before "read units".
    let read = |out: &str| -> f64 {
        let line = out.lines().find(|l| l.starts_with("dashboard (")).expect("a dashboard line");
        let before = line.split(" read units").next().unwrap_or_default();
        before.rsplit(' ').next().unwrap_or_default().parse().unwrap_or_else(|_| panic!("read units in {line:?}"))
    };
    let units = read(&out);
    assert!(units > 0.0, "{out}");
    assert!(dir.path().join("kept/tally.redb").exists(), "the store is kept");

    let again = run(&[]);
    let (out, err) = (String::from_utf8_lossy(&again.stdout), String::from_utf8_lossy(&again.stderr));
    assert!(again.status.success(), "{out}{err}");
    assert!(err.contains("filled earlier"), "{err}");
    assert!(!out.lines().any(|l| l.starts_with("events:")), "nothing ingested: {out}");
    assert!(figure(&out, "dashboard (", "p50") > 0.0, "{out}");
    assert_eq!(read(&out), units, "the same dashboards over the same aggregates: {out}");

    let refused = run(&["--output", "costs.json"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--output"));
}

/// `tally bench --against ADDR` posts a running server page views for a while, each from a new
/// visitor: every request it counts as answered is an event the server stored, and the
/// User-Agents come from the file it names (its non-ASCII line left out).
#[test]
fn bench_against_a_running_server_posts_what_the_server_then_counts() {
    use crate::support::{Client, Server, add_site, tally_ok};
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("data");
    let site = add_site(&store, "load.test", "UTC");
    let server = Server::start(&store);
    let agents = dir.path().join("agents.txt");
    let firefox = "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0";
    std::fs::write(&agents, format!("{firefox}\nÄgent/1.0\n")).unwrap();
    let addr = server.addr.to_string();
    let args = ["bench", "--against", &addr, "--seconds", "2", "--concurrency", "4", "--domain", "load.test"];
    let out = tally_ok(&store, &[&args[..], &["--user-agents", agents.to_str().unwrap()]].concat());
    let posted = figure(&out, "over HTTP", "requests/s (");
    assert!(posted >= 4.0, "{out}");

    assert_eq!(server.wait_for_metric("tally_events_accepted_total", posted), posted, "{out}");
    let query = serde_json::json!({
        "site_id": "load.test", "date_range": "day", "metrics": ["pageviews"], "dimensions": ["visit:browser"],
    });
    let auth = format!("Bearer {}", site.key);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let answer = Client::connect(server.addr).post_json("/api/v2/query", &[("authorization", &auth)], &query);
        assert_eq!(answer.status, 200, "{}", answer.text());
        let expected = serde_json::json!([{ "dimensions": ["Firefox"], "metrics": [posted as u64] }]);
        if answer.json()["results"] == expected {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{} against {expected}", answer.text());
        std::thread::sleep(std::time::Duration::from_millis(100));
    }

    server.stop();
    // Nothing listening (port 1 is never an ephemeral port another test's server could take):
    // a clear error, not a hang.
    let refused = crate::support::tally(&store, &["bench", "--against", "127.0.0.1:1", "--seconds", "1"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("connecting to"), "{refused:?}");
}
