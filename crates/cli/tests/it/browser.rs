//! The trackers and the dashboard in headless Chromium (`../browser/run.mjs`, driven by
//! playwright-core): Tally's tracker and Plausible's and Umami's official ones send page views, an SPA
//! navigation, custom events, an outbound click and an engagement event that the Stats API then
//! reports; the dashboard signs in, shows the Stats API's numbers for its range, filters by a
//! clicked page, draws its chart (a screenshot that is not blank), fits a phone, and opens from a
//! shared link. A second page set (`../browser/tracker.mjs`) checks the tracker's extensions —
//! tagged events, form submissions, 404 pages, excluded paths, manual page views — against the
//! events the server stored.
//!
//! `cargo xtask test` installs Chromium and playwright-core and sets `TALLY_CHROMIUM` and
//! `TALLY_NODE_MODULES`; without them the test is skipped with a message, unless
//! `TALLY_REQUIRE_BROWSER=1` says it must run (as the test command does).

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::support::{Server, add_site, field, tally_ok};

const EMAIL: &str = "owner@shop.test";
const PASSWORD: &str = "correct horse battery staple";

fn browser_env() -> Option<(String, String)> {
    match (std::env::var("TALLY_CHROMIUM"), std::env::var("TALLY_NODE_MODULES")) {
        (Ok(chromium), Ok(modules)) => Some((chromium, modules)),
        _ => {
            let required = std::env::var("TALLY_REQUIRE_BROWSER").is_ok_and(|v| v == "1");
            assert!(!required, "TALLY_REQUIRE_BROWSER=1 but TALLY_CHROMIUM or TALLY_NODE_MODULES is not set");
            eprintln!("skipped: set TALLY_CHROMIUM and TALLY_NODE_MODULES (`cargo xtask browser` prints them)");
            None
        }
    }
}

/// `tally user add EMAIL` with the password on standard input.
fn add_user(store: &std::path::Path, email: &str, password: &str) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tally"))
        .args(["user", "add", email, "--store"])
        .arg(store)
        .env("TALLY_LOG_LEVEL", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tally user add");
    writeln!(child.stdin.take().expect("stdin"), "{password}").expect("write the password");
    let out = child.wait_with_output().expect("tally user add");
    assert!(out.status.success(), "tally user add: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn trackers_and_dashboard_in_headless_chromium() {
    let Some((chromium, modules)) = browser_env() else { return };
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("data");
    let site = add_site(&store, "shop.test", "UTC");
    tally_ok(&store, &["goal", "add", "shop.test", "--event", "Signup", "--currency", "EUR"]);
    // One visit to /pricing 35 days ago: in the previous period of the dashboard's 30 days, so
    // the comparisons it shows are more than zeros.
    let then = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(35 * 24);
    let old = serde_json::json!({ "timestamp": then.to_string(), "url": "https://shop.test/pricing", "visitor": "earlier",
        "user_agent": "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0" });
    let file = dir.path().join("earlier.ndjson");
    std::fs::write(&file, old.to_string()).unwrap();
    tally_ok(&store, &["import", file.to_str().unwrap(), "--site", "shop.test"]);
    add_user(&store, EMAIL, PASSWORD);
    let share = field(&tally_ok(&store, &["share", "create", "shop.test", "--name", "public"]), "link:");
    let server = Server::start(&store);
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("browser");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/browser/run.mjs");
    let run = Command::new("node")
        .arg(&script)
        .env("TALLY_URL", format!("http://{}", server.addr))
        .env("TALLY_KEY", &site.key)
        .env("TALLY_METRICS_TOKEN", crate::support::METRICS_TOKEN)
        .env("TALLY_SITE", &site.domain)
        .env("TALLY_UMAMI_ID", &site.umami_id)
        .env("TALLY_EMAIL", EMAIL)
        .env("TALLY_PASSWORD", PASSWORD)
        .env("TALLY_SHARE_PATH", &share)
        .env("TALLY_CHROMIUM", &chromium)
        .env("TALLY_NODE_MODULES", &modules)
        .env("TALLY_OUT", &out)
        .output()
        .expect("run node");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "the browser test failed:\n{stdout}\n{}", String::from_utf8_lossy(&run.stderr));
    let found: serde_json::Value = serde_json::from_str(stdout.trim()).expect("the script's findings as JSON");
    let shot = PathBuf::from(found["screenshot"].as_str().expect("a screenshot path"));
    let size = std::fs::metadata(&shot).expect("the screenshot exists").len();
    assert!(size > 20_000, "the dashboard screenshot is {size} bytes");
    eprintln!("browser findings: {found}");
    eprintln!("dashboard screenshot: {}", shot.display());
    server.stop();
}

#[test]
fn tracker_extensions_in_headless_chromium() {
    let Some((chromium, modules)) = browser_env() else { return };
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("data");
    let site = add_site(&store, "ext.test", "UTC");
    let server = Server::start(&store);
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/browser/tracker.mjs");
    let run = Command::new("node")
        .arg(&script)
        .env("TALLY_URL", format!("http://{}", server.addr))
        .env("TALLY_KEY", &site.key)
        .env("TALLY_METRICS_TOKEN", crate::support::METRICS_TOKEN)
        .env("TALLY_SITE", &site.domain)
        .env("TALLY_CHROMIUM", &chromium)
        .env("TALLY_NODE_MODULES", &modules)
        .output()
        .expect("run node");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "the tracker test failed:\n{stdout}\n{}", String::from_utf8_lossy(&run.stderr));
    let found: serde_json::Value = serde_json::from_str(stdout.trim()).expect("the script's findings as JSON");
    assert_eq!(found["stored"].as_array().map(Vec::len), Some(13), "{found}");
    eprintln!("tracker findings: {found}");
    server.stop();
}
