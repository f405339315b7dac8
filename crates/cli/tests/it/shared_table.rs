//! Two `tally serve` processes on one DynamoDB table (moto, started by `cargo xtask test`), as a
//! deployment behind a load balancer runs them: a visitor whose requests alternate between the
//! processes makes one visit, each process flushes its own share of the aggregates, and the
//! aggregates equal a rebuild; with `--advertise-host`, the same with a visitor's events handed
//! to the process holding their session.
//!
//! The two processes flush the same aggregate items concurrently, each under a `version`
//! condition; that is only correct on an engine that applies a conditional write atomically.
//! moto's own server does not under load (`store-dynamodb`'s unsupported table, the concurrent
//! cases), so `cargo xtask test` runs moto with one request applied at a time
//! (`xtask/src/emulators.rs`, `MOTO_SERIAL`), which is the atomicity DynamoDB gives.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::Server;

/// Fake credentials: moto accepts any, and the AWS chain must not go looking for real ones.
const AWS: [(&str, &str); 3] = [
    ("AWS_ACCESS_KEY_ID", "tally-test"),
    ("AWS_SECRET_ACCESS_KEY", "tally-test"),
    ("AWS_EC2_METADATA_DISABLED", "true"),
];

fn tally(store: &str, args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_tally"))
        .args(args)
        .args(["--store", store])
        .envs(AWS)
        .env("TALLY_LOG_LEVEL", "warn")
        .output()
        .expect("run tally");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "tally {args:?}: {stdout}{}", String::from_utf8_lossy(&output.stderr));
    stdout
}

fn send(server: &Server, ip: &str, path: &str) {
    let body = json!({ "n": "pageview", "u": format!("https://shared.test{path}"), "d": "shared.test" });
    let r = server.client().request(
        "POST",
        "/api/event",
        &[
            ("content-type", "text/plain"),
            ("user-agent", "Mozilla/5.0 (X11; Linux x86_64; rv:132.0) Gecko/20100101 Firefox/132.0"),
            ("x-forwarded-for", ip),
        ],
        body.to_string().as_bytes(),
    );
    assert_eq!(r.status, 202, "{}", r.text());
}

#[test]
fn two_serve_processes_on_one_table_make_one_visit_of_a_visitor_they_share() {
    two_processes(false);
}

/// The same with `--advertise-host`: the process whose claim made it the holder of visitor a's
/// session takes a's event that reached the other, over HTTP (`/internal/handover`), and the
/// numbers are the same.
#[test]
fn two_processes_that_advertise_hand_a_visitors_events_to_the_holder_of_the_session() {
    two_processes(true);
}

fn two_processes(advertise: bool) {
    let endpoint = match std::env::var("TALLY_MOTO_ENDPOINT") {
        Ok(e) if !e.is_empty() => e,
        _ => {
            let required = std::env::var("TALLY_REQUIRE_EMULATORS").is_ok_and(|v| v == "1");
            assert!(!required, "TALLY_MOTO_ENDPOINT is not set but TALLY_REQUIRE_EMULATORS=1");
            eprintln!("\n!!!!! two processes on moto DID NOT RUN: TALLY_MOTO_ENDPOINT is not set !!!!!\n");
            return;
        }
    };
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let table = format!("tally-shared-{}-{nanos}", std::process::id());
    let store = format!("dynamodb://{table}?region=us-east-1&endpoint={endpoint}");
    tally(&store, &["site", "add", "shared.test"]);
    let key = tally(&store, &["key", "create", "shared.test"]);
    let key = crate::support::field(&key, "key:");

    let extra: &[&str] = if advertise { &["--advertise-host", "127.0.0.1"] } else { &[] };
    let one = Server::start_env(Path::new(&store), extra, &AWS);
    let two = Server::start_env(Path::new(&store), extra, &AWS);
    // Visitor a goes back and forth between the processes: /, /pricing, /docs. Visitor b: / once.
    send(&one, "192.0.2.10", "/");
    send(&two, "192.0.2.10", "/pricing");
    send(&one, "192.0.2.10", "/docs");
    send(&two, "198.51.100.20", "/");

    let auth = format!("Bearer {key}");
    let ask = |server: &Server, dimensions: Value| -> Value {
        let today = jiff::Timestamp::now().to_zoned(jiff::tz::TimeZone::UTC).date().to_string();
        let body = json!({
            "site_id": "shared.test", "date_range": [today, today], "dimensions": dimensions,
            "metrics": ["visitors", "visits", "pageviews", "bounce_rate"],
        });
        let r = server.client().post_json("/api/v2/query", &[("authorization", &auth)], &body);
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["results"].clone()
    };
    let exits = |server: &Server| -> Vec<(String, i64)> {
        let rows = ask(server, json!(["visit:exit_page"]));
        let mut exits: Vec<(String, i64)> = rows
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["dimensions"][0].as_str().unwrap().to_owned(), r["metrics"][1].as_i64().unwrap()))
            .collect();
        exits.sort();
        exits
    };
    // A flush writes its totals and its breakdowns as separate items, and each process flushes
    // its own share: wait until both are whole.
    let expected = json!([{ "dimensions": [], "metrics": [2, 2, 4, 50] }]);
    let expected_exits = [("/".to_owned(), 1), ("/docs".to_owned(), 1)];
    let deadline = Instant::now() + Duration::from_secs(30);
    while ask(&one, json!([])) != expected || exits(&one) != expected_exits {
        assert!(
            Instant::now() < deadline,
            "one visit of a, one bounce of b, a's visit ending where it ended: got {} and {:?}",
            ask(&one, json!([])),
            exits(&one)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(ask(&two, json!([])), expected, "both processes read the same numbers");
    assert_eq!(exits(&two), expected_exits, "both processes read the same numbers");
    let (handed, taken) = ("tally_events_handed_over_total", "tally_events_taken_over_total");
    if advertise {
        // a's second event reached two, which handed it to one, the holder since a's first.
        assert_eq!((two.metric(handed), one.metric(taken)), (1.0, 1.0));
        assert_eq!((one.metric(handed), two.metric(taken)), (0.0, 0.0));
    } else {
        assert_eq!(one.metric(handed) + two.metric(handed), 0.0, "nothing handed over without an address");
    }
    one.stop();
    two.stop();

    let verify = tally(&store, &["aggregate", "--rebuild", "--site", "shared.test", "--verify"]);
    assert!(verify.contains("events read: 4") && verify.contains("differences: 0"), "{verify}");
}
