//! The crash test: `tally serve` is SIGKILLed during sustained ingestion, restarted on the same
//! data, and every acknowledged event is found stored and counted, with aggregates equal to a
//! rebuild from the raw events. Events are stored in event blocks, so the kill comes while
//! blocks of the four senders' events are being written: a block not yet durable was never
//! acknowledged, and the restarted process takes over the dead one's ingest lease (its pid is
//! gone) and its live sessions before it ingests.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{Server, add_site, field, tally, tally_ok};

const UAS: [&str; 3] = [
    "Mozilla/5.0 (X11; Linux x86_64; rv:132.0) Gecko/20100101 Firefox/132.0",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Mobile/15E148 Safari/604.1",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
];

fn total_pageviews(server: &Server, site: &str, key: &str) -> i64 {
    let body = json!({ "site_id": site, "metrics": ["pageviews"], "date_range": "day" });
    let response = server.client().post_json("/api/v2/query", &[("authorization", &format!("Bearer {key}"))], &body);
    assert_eq!(response.status, 200, "{}", response.text());
    response.json()["results"][0]["metrics"][0].as_i64().unwrap_or(0)
}

#[test]
fn sigkill_during_ingestion_loses_no_acknowledged_event_and_aggregates_equal_a_rebuild() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = dir.path().join("data");
    let site = add_site(&store, "crash.example", "Europe/Berlin");
    let server = Server::start(&store);
    let acknowledged = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let senders: Vec<_> = (0..4u8)
        .map(|t| {
            let (addr, acknowledged, stop) = (server.addr, acknowledged.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut i = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let body = format!(
                        r#"{{"n":"pageview","u":"https://crash.example/page/{}","d":"crash.example"}}"#,
                        i % 17
                    );
                    let ip = format!("10.{t}.{}.{}", (i / 250) % 250, i % 250);
                    let ua = UAS[(i % 3) as usize];
                    // The server may die mid-request: only a complete 202 counts as acknowledged.
                    let sent = std::panic::catch_unwind(AssertUnwindSafe(|| {
                        let mut client = crate::support::Client::connect(addr);
                        let headers =
                            [("content-type", "text/plain"), ("user-agent", ua), ("x-forwarded-for", ip.as_str())];
                        client.request("POST", "/api/event", &headers, body.as_bytes()).status
                    }));
                    match sent {
                        Ok(202) => {
                            acknowledged.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(status) => panic!("an event was answered {status}"),
                        Err(_) => return,
                    }
                }
            })
        })
        .collect();
    // Sustained ingestion across several flushes (every 200 ms), then SIGKILL mid-stream: after
    // 1,500 events, or after 3 s once there are a few hundred (a loaded machine's syncs may be
    // slow), and at the latest after 30 s.
    let started = Instant::now();
    loop {
        let (n, elapsed) = (acknowledged.load(Ordering::Relaxed), started.elapsed());
        if n >= 1500 || (n > 300 && elapsed > Duration::from_secs(3)) || elapsed > Duration::from_secs(30) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(server); // Drop sends SIGKILL and reaps the process.
    stop.store(true, Ordering::Relaxed);
    for s in senders {
        s.join().expect("a sender thread");
    }
    let acknowledged = acknowledged.load(Ordering::Relaxed) as i64;
    assert!(acknowledged > 100, "ingestion was sustained before the kill: {acknowledged} events");

    // Restart on the same data: the dead run is recovered (same host, its pid is gone).
    let server = Server::start(&store);
    // Recovery is done once the restarted server says so; only then is every event counted.
    assert_eq!(server.wait_for_metric("tally_runs_recovered_total", 1.0), 1.0);
    let counted = total_pageviews(&server, &site.domain, &site.key);
    assert!(counted >= acknowledged, "{acknowledged} events acknowledged, only {counted} counted");
    server.stop();

    let output = tally(&store, &["aggregate", "--rebuild", "--site", &site.domain, "--verify"]);
    let report = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "aggregates differ from a rebuild:\n{report}");
    let stored: i64 = field(&report, "events read:").parse().expect("a count");
    assert!(stored >= acknowledged, "{acknowledged} events acknowledged, only {stored} stored");
    assert_eq!(field(&report, "differences:"), "0");
    // Every stored event is counted exactly once, the unacknowledged ones that were stored too.
    assert_eq!(counted, stored, "aggregated page views equal the stored events");
    eprintln!("acknowledged {acknowledged}, stored {stored}, counted {counted}");
    let _ = tally_ok(&store, &["site", "list"]);
}
