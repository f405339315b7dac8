//! `tally backup` while `tally serve` ingests, and `tally restore`: every event acknowledged
//! before the backup began is in the restored store, and its aggregates, once the restored
//! server has recovered the runs the snapshot caught mid-flight, equal a rebuild. Bad targets
//! and bad backups are refused with a clear error and change nothing.

use std::collections::BTreeSet;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{Client, Server, add_site, field, tally, tally_ok};

const UA: &str = "Mozilla/5.0 (X11; Linux x86_64; rv:132.0) Gecko/20100101 Firefox/132.0";

fn total_pageviews(server: &Server, site: &str, key: &str) -> i64 {
    let body = json!({ "site_id": site, "metrics": ["pageviews"], "date_range": "day" });
    let response = server.client().post_json("/api/v2/query", &[("authorization", &format!("Bearer {key}"))], &body);
    assert_eq!(response.status, 200, "{}", response.text());
    response.json()["results"][0]["metrics"][0].as_i64().unwrap_or(0)
}

#[test]
fn a_backup_taken_during_ingestion_restores_every_acknowledged_event_and_aggregates_equal_a_rebuild() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (store, copy, restored) = (dir.path().join("data"), dir.path().join("backup"), dir.path().join("restored"));
    let site = add_site(&store, "backup.example", "Europe/Berlin");
    let server = Server::start(&store);

    let acknowledged = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let senders: Vec<_> = (0..4u8)
        .map(|t| {
            let (addr, acknowledged, stop) = (server.addr, acknowledged.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut i = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let page = format!("/p/{t}-{i}-x");
                    let body = format!(r#"{{"n":"pageview","u":"https://backup.example{page}","d":"backup.example"}}"#);
                    let ip = format!("10.{t}.{}.{}", (i / 250) % 250, i % 250);
                    let sent = std::panic::catch_unwind(AssertUnwindSafe(|| {
                        let headers =
                            [("content-type", "text/plain"), ("user-agent", UA), ("x-forwarded-for", ip.as_str())];
                        Client::connect(addr).request("POST", "/api/event", &headers, body.as_bytes()).status
                    }));
                    match sent {
                        Ok(202) => acknowledged.lock().unwrap().push(page),
                        Ok(status) => panic!("an event was answered {status}"),
                        Err(_) => return,
                    }
                }
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while acknowledged.lock().unwrap().len() < 600 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    // Every event acknowledged by now must be in the backup; ingestion goes on during it.
    let before: Vec<String> = acknowledged.lock().unwrap().clone();
    assert!(before.len() > 100, "ingestion was sustained before the backup: {} events", before.len());
    let report = tally_ok(&store, &["backup", copy.to_str().unwrap()]);
    assert!(field(&report, "entries:").parse::<u64>().unwrap() > 0, "{report}");
    // Ingestion goes on after it: new events are acknowledged (how many came in while the backup
    // ran depends on the machine's load, so that is only reported).
    let during = acknowledged.lock().unwrap().len();
    let deadline = Instant::now() + Duration::from_secs(20);
    while acknowledged.lock().unwrap().len() <= during && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    for s in senders {
        s.join().expect("a sender thread");
    }
    let after = acknowledged.lock().unwrap().len();
    assert!(after > during, "ingestion went on after the backup: {after} events acknowledged, {during} before");
    eprintln!(
        "acknowledged: {} before the backup, {} while it ran, {} after",
        before.len(),
        during - before.len(),
        after - during
    );
    let log = server.wait_for_log("backup written");
    assert!(log.contains(copy.to_str().unwrap()), "{log}");
    server.stop();

    let restore = tally_ok(&restored, &["restore", copy.to_str().unwrap()]);
    assert_eq!(field(&restore, "restored:"), restored.display().to_string());
    // The restored server recovers the run the snapshot caught mid-flight, as after a crash
    // (its pid is gone from this host); only then do its aggregates count every event.
    let server = Server::start(&restored);
    assert_eq!(server.wait_for_metric("tally_runs_recovered_total", 1.0), 1.0);
    let counted = total_pageviews(&server, &site.domain, &site.key);
    server.stop();

    let exported = tally_ok(&restored, &["export", "--site", &site.domain]);
    let pages: BTreeSet<&str> = exported
        .lines()
        .filter_map(|l| l.split("https://backup.example").nth(1))
        .filter_map(|rest| rest.split('"').next())
        .collect();
    for page in &before {
        assert!(pages.contains(page.as_str()), "event {page}, acknowledged before the backup, is not in it");
    }
    let output = tally(&restored, &["aggregate", "--rebuild", "--site", &site.domain, "--verify"]);
    let report = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "aggregates differ from a rebuild:\n{report}");
    assert_eq!(field(&report, "differences:"), "0");
    let stored: i64 = field(&report, "events read:").parse().expect("a count");
    assert_eq!(stored, pages.len() as i64);
    assert_eq!(counted, stored, "every restored event is counted once");
    eprintln!("acknowledged before the backup {}, in it {stored}, in all {after}", before.len());
}

#[test]
fn backup_and_restore_refuse_bad_targets_and_bad_backups_and_change_nothing() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = dir.path().join("data");
    let site = add_site(&store, "offline.example", "UTC");

    // No server running: the command opens the store itself.
    let copy = dir.path().join("copy");
    let report = tally_ok(&store, &["backup", copy.to_str().unwrap()]);
    assert!(field(&report, "tables:") == "1", "{report}");

    // A backup into a directory that holds something is refused, and the directory is kept.
    let busy = dir.path().join("busy");
    std::fs::create_dir(&busy).unwrap();
    std::fs::write(busy.join("notes.txt"), "mine").unwrap();
    let out = tally(&store, &["backup", busy.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not empty"), "{out:?}");
    assert_eq!(std::fs::read_dir(&busy).unwrap().count(), 1);

    // A restore over an existing store is refused; the store still works.
    let out = tally(&store, &["restore", copy.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("never overwrites a store"), "{out:?}");
    assert!(tally_ok(&store, &["site", "list"]).contains(&site.domain));

    // A directory that is not a backup is refused, and no store is created.
    let target = dir.path().join("target");
    let out = tally(&target, &["restore", busy.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a Tally backup"), "{out:?}");
    assert!(!target.exists());

    // Backing up a directory with no store says so rather than creating one.
    let out = tally(&target, &["backup", dir.path().join("other").to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no embedded store"), "{out:?}");
    assert!(!target.exists());

    // The good backup restores, and the site is there.
    tally_ok(&target, &["restore", copy.to_str().unwrap()]);
    assert!(tally_ok(&target, &["site", "list"]).contains(&site.domain));
}
