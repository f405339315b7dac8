//! Realtime and sessions over real HTTP, with numbers worked out by hand: what a visitor did a
//! moment ago shows in `/api/realtime` and its bare-number twin, and the session routes list,
//! replay, hand over (GDPR access) and erase it.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Client, Server, add_site};

const FIREFOX: &str = "Mozilla/5.0 (X11; Linux x86_64; rv:132.0) Gecko/20100101 Firefox/132.0";
const SAFARI: &str = "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Safari/605.1.15";

fn send(c: &mut Client, ip: &str, ua: &str, name: &str, path: &str) {
    let body = json!({ "n": name, "u": format!("https://live.test{path}"), "d": "live.test", "r": null });
    let r = c.request(
        "POST",
        "/api/event",
        &[("content-type", "text/plain"), ("user-agent", ua), ("x-forwarded-for", ip)],
        body.to_string().as_bytes(),
    );
    assert_eq!(r.status, 202, "{}", r.text());
}

/// Asks `path` until `done` holds of the answer (aggregates are flushed every 200 ms).
fn until(c: &mut Client, auth: &str, path: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = c.request("GET", path, &[("authorization", auth)], b"");
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        let answer = r.json();
        if done(&answer) {
            return answer;
        }
        assert!(Instant::now() < deadline, "{path} never got there: {answer}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn realtime_and_sessions_show_what_visitors_just_did() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("data");
    let site = add_site(&store, "live.test", "UTC");
    let other = add_site(&store, "other.test", "UTC");
    let server = Server::start(&store);
    let mut c = server.client();
    let auth = format!("Bearer {}", site.key);
    let health = c.request("GET", "/health", &[], b"");
    assert_eq!((health.status, health.text()), (200, r#"{"status":"ok"}"#.to_owned()), "the store answers");

    // Visitor a: the home page, the pricing page, then a Signup there. Visitor b: the home page.
    send(&mut c, "192.0.2.1", FIREFOX, "pageview", "/");
    send(&mut c, "192.0.2.1", FIREFOX, "pageview", "/pricing");
    send(&mut c, "192.0.2.1", FIREFOX, "Signup", "/pricing");
    send(&mut c, "198.51.100.2", SAFARI, "pageview", "/");

    let pageviews = |rt: &Value| -> i64 {
        rt["pageviews_per_minute"].as_array().unwrap().iter().map(|m| m["pageviews"].as_i64().unwrap()).sum()
    };
    // One flush writes the minute's totals and its pages as separate items, so a reader may see
    // one before the other: wait for the whole panel.
    let top_pages =
        json!([{ "page": "/", "visitors": 2, "pageviews": 2 }, { "page": "/pricing", "visitors": 1, "pageviews": 1 }]);
    let rt = until(&mut c, &auth, "/api/realtime?site_id=live.test", |rt| {
        rt["current_visitors"] == 2 && pageviews(rt) == 3 && rt["top_pages"] == top_pages
    });
    let minutes = rt["pageviews_per_minute"].as_array().unwrap();
    assert_eq!(minutes.len(), 30, "thirty minutes, the quiet ones at 0: {rt}");
    let r = c.request("GET", "/api/v1/stats/realtime/visitors?site_id=live.test", &[("authorization", &auth)], b"");
    assert_eq!((r.status, r.text()), (200, "2".to_owned()));
    // Another site's key sees nothing of this one.
    let theirs = format!("Bearer {}", other.key);
    assert_eq!(c.request("GET", "/api/realtime?site_id=live.test", &[("authorization", &theirs)], b"").status, 401);

    // A funnel: the home page, then pricing, then a signup, in one visit each.
    let steps = json!([{ "page": "/" }, { "page": "/pricing*" }, { "event": "Signup" }]);
    let body = json!({ "site_id": "live.test", "date_range": "day", "steps": steps });
    let r = c.post_json("/api/funnel", &[("authorization", &auth)], &body);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json()["steps"],
        json!([
            { "step": "Visit /", "visitors": 2, "conversion_rate": 100.0, "conversion_rate_step": 100.0, "dropoff": 0,
              "dropoff_percentage": 0.0 },
            { "step": "Visit /pricing*", "visitors": 1, "conversion_rate": 50.0, "conversion_rate_step": 50.0, "dropoff": 1,
              "dropoff_percentage": 50.0 },
            { "step": "Signup", "visitors": 1, "conversion_rate": 50.0, "conversion_rate_step": 100.0, "dropoff": 0,
              "dropoff_percentage": 0.0 },
        ])
    );
    assert_eq!(c.post_json("/api/funnel", &[("authorization", &theirs)], &body).status, 401);

    // Recent sessions: two, a's with its three events, entry and exit pages.
    let list =
        until(&mut c, &auth, "/api/sessions?site_id=live.test", |l| l["sessions"].as_array().unwrap().len() == 2);
    let sessions = list["sessions"].as_array().unwrap();
    let a = sessions.iter().find(|s| s["events"] == 3).unwrap_or_else(|| panic!("a's session: {list}"));
    assert_eq!(
        (a["pageviews"].clone(), a["entry_page"].clone(), a["exit_page"].clone(), a["browser"].clone()),
        (json!(2), json!("/"), json!("/pricing"), json!("Firefox"))
    );
    let b = sessions.iter().find(|s| s["events"] == 1).unwrap();
    assert_eq!((b["browser"].clone(), b["entry_page"].clone()), (json!("Safari"), json!("/")));

    // One session's events, in order.
    let reference = a["session"].as_str().unwrap().to_owned();
    let replay = until(&mut c, &auth, &format!("/api/sessions/{reference}?site_id=live.test"), |_| true);
    let steps: Vec<(String, String)> = replay["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["name"].as_str().unwrap().to_owned(), e["path"].as_str().unwrap().to_owned()))
        .collect();
    let expected = [("pageview", "/"), ("pageview", "/pricing"), ("Signup", "/pricing")];
    assert_eq!(steps, expected.map(|(n, p)| (n.to_owned(), p.to_owned())));

    // One visitor's sessions, then erased: gone from the list and the replay.
    let visitor = a["visitor_id"].as_str().unwrap().to_owned();
    let mine = until(&mut c, &auth, &format!("/api/visitors/{visitor}/sessions?site_id=live.test"), |_| true);
    assert_eq!(mine["sessions"].as_array().unwrap().len(), 1);
    assert_eq!(mine["sessions"][0]["session"], json!(reference));
    // Everything kept about them (a GDPR access request), then erased.
    let access = format!("/api/visitors/{visitor}/events?site_id=live.test");
    let kept = until(&mut c, &auth, &access, |_| true);
    let names: Vec<&str> = kept["events"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["pageview", "pageview", "Signup"]);
    assert_eq!(
        (kept["events"][2]["browser"].clone(), kept["events"][2]["session"].clone()),
        (json!("Firefox"), json!(reference))
    );
    assert_eq!(c.request("GET", &access, &[("authorization", &theirs)], b"").status, 401);
    let erase = format!("/api/visitors/{visitor}?site_id=live.test");
    assert_eq!(c.request("DELETE", &erase, &[("authorization", &theirs)], b"").status, 401);
    let r = c.request("DELETE", &erase, &[("authorization", &auth)], b"");
    assert_eq!((r.status, r.json()["deleted_events"].clone()), (200, json!(3)), "{}", r.text());
    let list = until(&mut c, &auth, "/api/sessions?site_id=live.test", |_| true);
    assert_eq!(list["sessions"].as_array().unwrap().len(), 1, "{list}");
    let r = c.request("GET", &format!("/api/sessions/{reference}?site_id=live.test"), &[("authorization", &auth)], b"");
    assert_eq!(r.status, 404);
    assert_eq!(until(&mut c, &auth, &access, |_| true)["events"], json!([]), "nothing is left of them");
    server.stop();
}
