//! Accounts and access over real HTTP: the first-run setup link, sign-in and sign-out, cookies
//! and CSRF, the settings API, shared links with and without a password, and a table of every
//! non-ingestion route against every kind of caller that must be refused.

use serde_json::{Value, json};

use crate::support::{Client, Response, Server, add_site, field, tally, tally_ok};

const JSON: (&str, &str) = ("content-type", "application/json");

fn header<'a>(r: &'a Response, name: &str) -> Option<&'a str> {
    r.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

/// The `name=value` of a `Set-Cookie` answer.
fn cookie_of(r: &Response) -> String {
    header(r, "set-cookie").expect("a cookie").split(';').next().unwrap().to_owned()
}

/// A signed-in browser: a new connection per request, as idle keep-alive connections may be
/// closed while a test works elsewhere.
struct Browser {
    addr: std::net::SocketAddr,
    cookie: String,
    csrf: String,
}

impl Browser {
    fn get(&mut self, path: &str) -> Response {
        let (cookie, csrf) = (self.cookie.clone(), self.csrf.clone());
        Client::connect(self.addr).request("GET", path, &[("cookie", &cookie), ("x-tally-csrf", &csrf)], b"")
    }
    fn send(&mut self, method: &str, path: &str, body: &Value) -> Response {
        let (cookie, csrf) = (self.cookie.clone(), self.csrf.clone());
        Client::connect(self.addr).request(
            method,
            path,
            &[JSON, ("cookie", &cookie), ("x-tally-csrf", &csrf)],
            body.to_string().as_bytes(),
        )
    }
}

#[test]
fn first_run_sign_in_settings_and_shared_links() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("data");
    let other = add_site(&store, "other.test", "UTC");
    let server = Server::start(&store);
    let line = server.wait_for_log("/setup?token=");
    let token = line.split("token=").nth(1).unwrap().split_whitespace().next().unwrap().trim_matches('"').to_owned();
    let mut c = server.client();

    // No account yet: the page is told to ask for the setup link.
    assert_eq!(c.request("GET", "/api/auth", &[], b"").json()["setup_required"], true);
    let setup = json!({ "token": "0".repeat(32), "email": "owner@shop.test", "password": "correct horse" });
    assert_eq!(c.post_json("/api/setup", &[], &setup).status, 403, "a wrong setup token");
    let setup = json!({ "token": token, "email": "owner@shop.test", "password": "short" });
    assert_eq!(c.post_json("/api/setup", &[], &setup).status, 400, "a too short password");
    let setup = json!({ "token": token, "email": "owner@shop.test", "password": "correct horse" });
    let r = c.request("POST", "/api/setup", &[("content-type", "text/plain")], setup.to_string().as_bytes());
    assert_eq!(r.status, 415, "JSON only, so a cross-site form cannot post it");
    let r = c.post_json("/api/setup", &[], &setup);
    assert_eq!(r.status, 200, "{}", r.text());
    let set_cookie = header(&r, "set-cookie").unwrap().to_owned();
    for flag in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set_cookie.contains(flag), "{set_cookie} lacks {flag}");
    }
    assert!(!set_cookie.contains("Secure"), "plain HTTP: no Secure flag");
    assert_eq!(c.post_json("/api/setup", &[], &setup).status, 409, "setup works once");

    // Sign in; a wrong password says nothing about which part was wrong.
    let wrong = c.post_json("/api/login", &[], &json!({ "email": "owner@shop.test", "password": "wrong horse" }));
    let nobody = c.post_json("/api/login", &[], &json!({ "email": "nobody@shop.test", "password": "correct horse" }));
    assert_eq!((wrong.status, nobody.status), (401, 401));
    assert_eq!(wrong.json(), nobody.json());
    let behind_https = c.request(
        "POST",
        "/api/login",
        &[JSON, ("x-forwarded-proto", "https")],
        json!({ "email": "Owner@Shop.test", "password": "correct horse" }).to_string().as_bytes(),
    );
    assert!(header(&behind_https, "set-cookie").unwrap().contains("Secure"), "Secure behind HTTPS");
    let login = c.post_json("/api/login", &[], &json!({ "email": "owner@shop.test", "password": "correct horse" }));
    assert_eq!(login.status, 200);
    let mut b = Browser {
        addr: server.addr,
        cookie: cookie_of(&login),
        csrf: login.json()["csrf"].as_str().unwrap().to_owned(),
    };

    // The cookie alone is not enough: the CSRF header must come with it. Refused as everything
    // is refused (it was a 403 with its own message, which told a cookie was good).
    let refusal = c.request("GET", "/api/sites", &[], b"");
    assert_eq!(refusal.status, 401);
    let r = c.request("GET", "/api/sites", &[("cookie", &b.cookie)], b"");
    assert_eq!((r.status, r.json()), (401, refusal.json()), "{}", r.text());
    let r = c.request("GET", "/api/sites", &[("cookie", &b.cookie), ("x-tally-csrf", "0123")], b"");
    assert_eq!((r.status, r.json()), (401, refusal.json()));

    // Settings: add a site, change it, goals, keys (shown once), shared links.
    let r = b.send("POST", "/api/sites", &json!({ "domain": "shop.test", "timezone": "Europe/Berlin" }));
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(b.send("POST", "/api/sites", &json!({ "domain": "shop.test" })).status, 409);
    assert_eq!(b.send("POST", "/api/sites", &json!({ "domain": "not a domain" })).status, 400);
    let r =
        b.send("PATCH", "/api/sites/shop.test", &json!({ "timezone": "America/New_York", "retention_event_days": 60 }));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        (r.json()["timezone"].clone(), r.json()["retention_event_days"].clone()),
        (json!("America/New_York"), json!(60))
    );
    assert_eq!(b.send("PATCH", "/api/sites/shop.test", &json!({ "timezone": "Mars/Olympus" })).status, 400);
    assert_eq!(b.send("PATCH", "/api/sites/shop.test", &json!({ "retention_event_days": 0 })).status, 400);

    // Excluded addresses: events from them are dropped and counted, until the list is cleared.
    let excluded = |b: &mut Browser, ranges: Value| {
        b.send("PATCH", "/api/sites/shop.test", &json!({ "excluded_ip_ranges": ranges }))
    };
    let r = excluded(&mut b, json!(["127.0.0.1", "10.1.2.3/16"]));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["excluded_ip_ranges"], json!(["10.1.0.0/16", "127.0.0.1/32"]));
    assert_eq!(r.json()["timezone"], json!("America/New_York"), "other settings stay");
    for wrong in [json!(["not an address"]), json!("10.0.0.0/8"), json!([7]), json!(vec!["10.0.0.1"; 1001])] {
        let r = excluded(&mut b, wrong.clone());
        assert_eq!(r.status, 400, "{wrong}: {}", r.text());
    }
    let event = json!({ "n": "pageview", "u": "https://shop.test/", "d": "shop.test" });
    let ua = ("user-agent", "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0");
    let (excluded_before, accepted_before) = (
        server.metric("tally_events_dropped_total{reason=\"excluded_ip\"}"),
        server.metric("tally_events_accepted_total"),
    );
    assert_eq!(c.post_json("/api/event", &[ua], &event).status, 202);
    assert_eq!(server.metric("tally_events_dropped_total{reason=\"excluded_ip\"}"), excluded_before + 1.0);
    assert_eq!(server.metric("tally_events_accepted_total"), accepted_before);
    let r = excluded(&mut b, json!([]));
    assert_eq!(r.json()["excluded_ip_ranges"], json!([]), "{}", r.text());
    assert_eq!(c.post_json("/api/event", &[ua], &event).status, 202);
    assert_eq!(server.metric("tally_events_accepted_total"), accepted_before + 1.0);
    let more = b.send("POST", "/api/sites/shop.test/domains", &json!({ "domain": "shop-two.test" }));
    assert_eq!(more.status, 201, "{}", more.text());
    assert_eq!(more.json()["domains"], json!(["shop.test", "shop-two.test"]));
    assert_eq!(b.send("POST", "/api/sites/shop.test/domains", &json!({ "domain": "other.test" })).status, 409);
    let fewer = b.send("DELETE", "/api/sites/shop.test/domains/shop-two.test", &json!({}));
    assert_eq!(fewer.json()["domains"], json!(["shop.test"]));
    let goal = b.send("POST", "/api/sites/shop.test/goals", &json!({ "event_name": "Signup" }));
    assert_eq!(goal.status, 201);
    let page_goal = b.send("POST", "/api/sites/shop.test/goals", &json!({ "page_path": "/pricing*" })).json();
    assert_eq!(b.send("POST", "/api/sites/shop.test/goals", &json!({})).status, 400);
    let sites = b.get("/api/sites").json();
    let shop = sites["sites"].as_array().unwrap().iter().find(|s| s["domain"] == "shop.test").unwrap().clone();
    assert_eq!(shop["goals"].as_array().unwrap().len(), 2);
    let gone =
        b.send("DELETE", &format!("/api/sites/shop.test/goals/{}", page_goal["goal_id"].as_str().unwrap()), &json!({}));
    assert_eq!(gone.status, 200);
    // Saved funnels: listed with the site, whole; refused with a reason when malformed.
    let steps = json!([{ "page": "/" }, { "page": "/pricing*" }, { "event": "Signup" }]);
    let funnel = b.send("POST", "/api/sites/shop.test/funnels", &json!({ "name": " Signup path ", "steps": steps }));
    assert_eq!(funnel.status, 201, "{}", funnel.text());
    let funnel_id = funnel.json()["funnel_id"].as_str().unwrap().to_owned();
    for (body, says) in [
        (json!({ "name": "one", "steps": [{ "page": "/" }] }), "2 to 8 steps"),
        (json!({ "name": "", "steps": steps }), "name"),
        (json!({ "name": "x", "steps": [{ "page": "/" }, { "page": "/a", "event": "B" }] }), "step 2"),
        (json!({ "name": "x" }), "steps"),
        (json!({ "name": "x", "steps": [{ "page": "no-slash" }, { "event": "B" }] }), "step 1"),
    ] {
        let r = b.send("POST", "/api/sites/shop.test/funnels", &body);
        assert!(r.status == 400 && r.text().contains(says), "{body}: {} {}", r.status, r.text());
    }
    let sites = b.get("/api/sites").json();
    let shop = sites["sites"].as_array().unwrap().iter().find(|s| s["domain"] == "shop.test").unwrap().clone();
    assert_eq!(shop["funnels"], json!([{ "funnel_id": funnel_id, "name": "Signup path", "steps": steps }]));
    let path = format!("/api/sites/shop.test/funnels/{funnel_id}");
    assert_eq!(b.send("DELETE", &path, &json!({})).status, 200);
    assert_eq!(b.send("DELETE", &path, &json!({})).status, 404);
    let sites = b.get("/api/sites").json();
    let shop = sites["sites"].as_array().unwrap().iter().find(|s| s["domain"] == "shop.test").unwrap().clone();
    assert_eq!(shop["funnels"], json!([]));
    let key = b.send("POST", "/api/sites/shop.test/keys", &json!({ "name": "ci" })).json();
    let key_secret = key["key"].as_str().unwrap().to_owned();
    let listed = b.get("/api/sites/shop.test/keys").text();
    assert!(listed.contains("ci") && !listed.contains(&key_secret), "a key is shown once: {listed}");
    let open = b.send("POST", "/api/sites/shop.test/shares", &json!({ "name": "public" })).json();
    let open_token = open["token"].as_str().unwrap().to_owned();
    let locked =
        b.send("POST", "/api/sites/shop.test/shares", &json!({ "name": "team", "password": "open sesame" })).json();
    let locked_token = locked["token"].as_str().unwrap().to_owned();
    let listed = b.get("/api/sites/shop.test/shares").text();
    assert!(!listed.contains(&open_token) && !listed.contains(&locked_token), "links are shown once");

    let query = json!({ "site_id": "shop.test", "metrics": ["visitors"], "date_range": "7d" }).to_string();
    let other_query = json!({ "site_id": "other.test", "metrics": ["visitors"], "date_range": "7d" }).to_string();
    // A signed-in user reads every site.
    assert_eq!(b.send("POST", "/api/v2/query", &serde_json::from_str(&other_query).unwrap()).status, 200);

    // A shared link reads its site's statistics, and nothing else.
    let share = |t: &str| ("x-tally-share", t.to_owned());
    let (name, value) = share(&open_token);
    let mut s = server.client();
    assert_eq!(s.request("POST", "/api/v2/query", &[(name, &value)], query.as_bytes()).status, 200);
    assert_eq!(s.request("GET", "/api/realtime?site_id=shop.test", &[(name, &value)], b"").status, 200);
    let info = s.request("GET", &format!("/api/share/{open_token}"), &[], b"").json();
    assert_eq!((info["domain"].clone(), info["password_required"].clone()), (json!("shop.test"), json!(false)));
    // The password-protected link needs unlocking, once per browser.
    let (lname, lvalue) = share(&locked_token);
    // Refused with the one 401 (it had a body of its own); the link's page learns that it needs
    // its password from `GET /api/share/{token}`.
    let r = s.request("POST", "/api/v2/query", &[(lname, &lvalue)], query.as_bytes());
    assert_eq!((r.status, r.json()), (401, refusal.json()));
    let info = s.request("GET", &format!("/api/share/{locked_token}"), &[], b"").json();
    assert_eq!((info["password_required"].clone(), info["unlocked"].clone()), (json!(true), json!(false)));
    let unlock = format!("/api/share/{locked_token}/unlock");
    assert_eq!(s.post_json(&unlock, &[], &json!({ "password": "wrong" })).status, 401);
    let unlocked = s.post_json(&unlock, &[], &json!({ "password": "open sesame" }));
    assert_eq!(unlocked.status, 200);
    let share_cookie = cookie_of(&unlocked);
    let r = s.request("POST", "/api/v2/query", &[(lname, &lvalue), ("cookie", &share_cookie)], query.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    // An unlock of one link does not open another protected link.
    let third =
        b.send("POST", "/api/sites/shop.test/shares", &json!({ "name": "x", "password": "another one" })).json();
    let third_token = third["token"].as_str().unwrap().to_owned();
    let r = s.request("POST", "/api/v2/query", &[(lname, &third_token), ("cookie", &share_cookie)], query.as_bytes());
    assert_eq!(r.status, 401);

    // Every route that is not ingestion refuses the wrong caller.
    let (oname, ovalue) = share(&open_token);
    let anonymous: Vec<(&str, &str)> = vec![];
    let other_key = format!("Bearer {}", other.key);
    let shop_key = format!("Bearer {key_secret}");
    let wrong_csrf = vec![("cookie", b.cookie.as_str()), ("x-tally-csrf", "00000000000000000000000000000000")];
    let callers: Vec<(&str, Vec<(&str, &str)>)> = vec![
        ("anonymous", anonymous),
        ("wrong csrf", wrong_csrf),
        ("junk cookie", vec![("cookie", "tally_session=abc"), ("x-tally-csrf", "x")]),
        ("other site's key", vec![("authorization", other_key.as_str())]),
        ("junk key", vec![("authorization", "Bearer tly_0000")]),
        ("junk share", vec![("x-tally-share", "ffff")]),
    ];
    let routes: Vec<(&str, String, Vec<u8>)> = vec![
        ("POST", "/api/v2/query".into(), query.clone().into_bytes()),
        ("GET", "/api/realtime?site_id=shop.test".into(), vec![]),
        ("GET", "/api/v1/stats/realtime/visitors?site_id=shop.test".into(), vec![]),
        ("GET", "/api/sessions?site_id=shop.test".into(), vec![]),
        ("GET", "/api/visitors/abc/sessions?site_id=shop.test".into(), vec![]),
        ("DELETE", "/api/visitors/abc?site_id=shop.test".into(), vec![]),
        ("POST", "/api/import?site_id=shop.test".into(), b"{}".to_vec()),
        ("PATCH", "/api/sites/shop.test".into(), br#"{"timezone":"UTC"}"#.to_vec()),
        ("DELETE", "/api/sites/shop.test".into(), vec![]),
        ("POST", "/api/sites/shop.test/goals".into(), br#"{"event_name":"X"}"#.to_vec()),
        (
            "POST",
            "/api/sites/shop.test/funnels".into(),
            br#"{"name":"X","steps":[{"page":"/"},{"event":"Y"}]}"#.to_vec(),
        ),
        ("DELETE", "/api/sites/shop.test/funnels/01JDB3Y5C8M9V7T2X4K6P0QWER".into(), vec![]),
        ("POST", "/api/sites/shop.test/domains".into(), br#"{"domain":"evil-two.test"}"#.to_vec()),
        ("GET", "/api/sites/shop.test/keys".into(), vec![]),
        ("POST", "/api/sites/shop.test/keys".into(), b"{}".to_vec()),
        ("GET", "/api/sites/shop.test/shares".into(), vec![]),
        ("POST", "/api/sites/shop.test/shares".into(), b"{}".to_vec()),
        ("POST", "/api/sites".into(), br#"{"domain":"evil.test"}"#.to_vec()),
    ];
    let mut refused = 0;
    for (who, headers) in &callers {
        for (method, path, body) in &routes {
            let mut all = headers.clone();
            all.push(JSON);
            let r = c.request(method, path, &all, body);
            assert_eq!((r.status, r.json()), (401, refusal.json()), "{who}: {method} {path}");
            refused += 1;
        }
    }
    // A shared link and a site key may not manage the site, nor a shared link read visitors.
    for (method, path, body) in routes.iter().skip(3) {
        let r = c.request(method, path, &[JSON, (oname, &ovalue)], body);
        assert_eq!((r.status, r.json()), (401, refusal.json()), "shared link: {method} {path}");
        refused += 1;
    }
    // The key the settings API made has the default scope, statistics: visitors, imports and
    // settings are refused to it.
    for (method, path, body) in routes.iter().skip(3) {
        let r = c.request(method, path, &[JSON, ("authorization", shop_key.as_str())], body);
        assert_eq!((r.status, r.json()), (401, refusal.json()), "site key: {method} {path}");
        refused += 1;
    }
    eprintln!("{refused} wrong callers refused");
    let sites = b.get("/api/sites").json();
    assert_eq!(sites["sites"].as_array().unwrap().len(), 2, "nothing was added or removed: {sites}");

    // Revoking and signing out take effect (caches last at most 5 s).
    let r =
        b.send("DELETE", &format!("/api/sites/shop.test/shares/{}", open["share_id"].as_str().unwrap()), &json!({}));
    assert_eq!(r.status, 200);
    std::thread::sleep(std::time::Duration::from_millis(5_200));
    // Fresh connections: an idle keep-alive connection may have been closed meanwhile.
    let (mut s, mut c) = (server.client(), server.client());
    assert_eq!(s.request("POST", "/api/v2/query", &[(oname, &ovalue)], query.as_bytes()).status, 401, "a revoked link");
    assert_eq!(s.request("GET", &format!("/api/share/{open_token}"), &[], b"").status, 404);
    let out = b.send("POST", "/api/logout", &json!({}));
    assert_eq!(out.status, 200);
    assert!(header(&out, "set-cookie").unwrap().contains("Max-Age=0"));
    assert_eq!(b.get("/api/sites").status, 401, "signed out");
    assert_eq!(c.request("GET", "/api/auth", &[("cookie", &b.cookie)], b"").json()["signed_in"], false);
    server.stop();
}

#[test]
fn users_and_links_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("data");
    add_site(&store, "cli.test", "UTC");
    let out = tally_ok(&store, &["share", "create", "cli.test", "--name", "board"]);
    assert!(out.contains("link: /share/"), "{out}");
    let listed = tally_ok(&store, &["share", "list", "cli.test"]);
    assert!(listed.contains("open\tboard"), "{listed}");
    let id = listed.split('\t').next().unwrap().to_owned();
    tally_ok(&store, &["share", "revoke", "cli.test", &id]);
    assert!(tally_ok(&store, &["share", "list", "cli.test"]).contains("revoked\tboard"));
    assert!(tally_ok(&store, &["user", "list"]).trim().is_empty());
}

#[test]
fn site_settings_keys_and_removal_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("data");
    add_site(&store, "cli.test", "UTC");
    let line = |store: &std::path::Path| {
        let listed = tally_ok(store, &["site", "list"]);
        listed.lines().find(|l| l.contains("\tcli.test\t")).map(str::to_owned)
    };

    let args = ["site", "update", "cli.test", "--timezone", "Europe/Paris", "--exclude-ip", "192.0.2.9/24"];
    let out = tally_ok(&store, &[&args[..], &["--exclude-ip", "2001:db8::1"]].concat());
    assert_eq!(field(&out, "excluded addresses:"), "192.0.2.0/24, 2001:db8::1/128");
    let listed = line(&store).expect("the site is listed");
    assert!(listed.contains("\tEurope/Paris\t") && listed.ends_with("\t192.0.2.0/24,2001:db8::1/128"), "{listed}");
    // A bad range is refused whole and changes nothing.
    let refused = tally(&store, &["site", "update", "cli.test", "--timezone", "UTC", "--exclude-ip", "nonsense"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("\"nonsense\" is not an IP address"));
    assert_eq!(line(&store).as_deref(), Some(listed.as_str()));
    tally_ok(&store, &["site", "update", "cli.test", "--no-excluded-ips", "--retention-event-days", "10"]);
    let cleared = line(&store).unwrap();
    assert!(cleared.contains("\tEurope/Paris\t") && cleared.ends_with('\t'), "no ranges left: {cleared}");

    // A key answers until it is revoked.
    let created = tally_ok(&store, &["key", "create", "cli.test", "--name", "ci"]);
    let (key_id, bearer) = (field(&created, "key id:"), format!("Bearer {}", field(&created, "key:")));
    let query = json!({ "site_id": "cli.test", "metrics": ["visitors"], "date_range": "7d" });
    let status = |store: &std::path::Path| {
        let server = Server::start(store);
        let status = server.client().post_json("/api/v2/query", &[("authorization", &bearer)], &query).status;
        server.stop();
        status
    };
    assert_eq!(status(&store), 200);
    tally_ok(&store, &["key", "revoke", "cli.test", &key_id]);
    assert_eq!(status(&store), 401);

    let out = tally_ok(&store, &["site", "remove", "cli.test"]);
    assert!(out.starts_with("removed site cli.test"), "{out}");
    assert_eq!(line(&store), None);
    assert!(!tally(&store, &["site", "remove", "cli.test"]).status.success(), "a second removal finds no site");
}

/// The setup link's token, from the line `tally serve` logs while no account exists.
fn setup_token(server: &Server) -> String {
    let line = server.wait_for_log("/setup?token=");
    line.split("token=").nth(1).unwrap().split_whitespace().next().unwrap().trim_matches('"').to_owned()
}

/// A browser signed in as `email`.
fn sign_in(server: &Server, email: &str, password: &str) -> Browser {
    let login = server.client().post_json("/api/login", &[], &json!({ "email": email, "password": password }));
    assert_eq!(login.status, 200, "{}", login.text());
    Browser { addr: server.addr, cookie: cookie_of(&login), csrf: login.json()["csrf"].as_str().unwrap().to_owned() }
}

/// Regression: eight concurrent `POST /api/setup` with the valid token made eight admin
/// accounts. The first account is a conditional write: exactly one request makes it.
#[test]
fn racing_setup_requests_make_exactly_one_account() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("data");
    let server = Server::start(&store);
    let token = setup_token(&server);
    let statuses: Vec<u16> = std::thread::scope(|scope| {
        let racers: Vec<_> = (0..8)
            .map(|i| {
                let (addr, token) = (server.addr, token.clone());
                scope.spawn(move || {
                    let body =
                        json!({ "token": token, "email": format!("admin{i}@shop.test"), "password": "correct horse" });
                    Client::connect(addr).post_json("/api/setup", &[], &body).status
                })
            })
            .collect();
        racers.into_iter().map(|r| r.join().unwrap()).collect()
    });
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 1, "{statuses:?}");
    assert!(statuses.iter().all(|s| matches!(s, 200 | 409)), "{statuses:?}");
    server.stop();
    let users = tally_ok(&store, &["user", "list"]);
    assert_eq!(users.lines().count(), 1, "{users}");
}

/// Regression: a changed password did not end existing sign-ins, and there was no way to sign
/// out everywhere. `POST /api/logout/everywhere` ends every login of the account; other
/// accounts stay signed in.
#[test]
fn signing_out_everywhere_ends_every_login_of_the_account() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("data");
    for email in ["owner@shop.test", "other@shop.test"] {
        let mut add = std::process::Command::new(env!("CARGO_BIN_EXE_tally"));
        add.args(["user", "add", email, "--store"]).arg(&store).stdin(std::process::Stdio::piped());
        let mut child = add.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap();
        std::io::Write::write_all(child.stdin.as_mut().unwrap(), b"correct horse\n").unwrap();
        assert!(child.wait().unwrap().success());
    }
    let server = Server::start(&store);
    let (mut laptop, mut phone) =
        (sign_in(&server, "owner@shop.test", "correct horse"), sign_in(&server, "owner@shop.test", "correct horse"));
    let mut other = sign_in(&server, "other@shop.test", "correct horse");
    assert_eq!((laptop.get("/api/sites").status, phone.get("/api/sites").status), (200, 200));
    // The route needs the CSRF header like every other.
    let forged = server.client().request("POST", "/api/logout/everywhere", &[JSON, ("cookie", &phone.cookie)], b"{}");
    assert_eq!(forged.status, 401);
    assert_eq!(phone.get("/api/sites").status, 200);
    let out = phone.send("POST", "/api/logout/everywhere", &json!({}));
    assert_eq!(out.status, 200, "{}", out.text());
    assert!(header(&out, "set-cookie").unwrap().contains("Max-Age=0"));
    assert_eq!((laptop.get("/api/sites").status, phone.get("/api/sites").status), (401, 401), "both ended");
    assert_eq!(other.get("/api/sites").status, 200, "another account is not touched");
    let mut again = sign_in(&server, "owner@shop.test", "correct horse");
    assert_eq!(again.get("/api/sites").status, 200, "signing in again works");
    // Changing the password from the dashboard ends the other logins and keeps this browser in.
    let mut elsewhere = sign_in(&server, "owner@shop.test", "correct horse");
    let wrong = again.send("POST", "/api/password", &json!({ "current_password": "nope nope", "new_password": "x" }));
    assert_eq!(wrong.status, 401);
    let changed = again.send(
        "POST",
        "/api/password",
        &json!({ "current_password": "correct horse", "new_password": "staple battery" }),
    );
    assert_eq!(changed.status, 200, "{}", changed.text());
    assert_eq!(elsewhere.get("/api/sites").status, 401, "another browser is signed out");
    assert_eq!(again.get("/api/sites").status, 401, "this browser's old cookie too");
    again.cookie = cookie_of(&changed);
    again.csrf = changed.json()["csrf"].as_str().unwrap().to_owned();
    assert_eq!(again.get("/api/sites").status, 200, "this browser is signed in anew");
    server.stop();
    // A new password ends the sign-ins too (`tally user password`, on the stopped store).
    let browser_cookie = again.cookie.clone();
    // …and so does a new password set with `tally user password`.
    let mut pw = std::process::Command::new(env!("CARGO_BIN_EXE_tally"));
    pw.args(["user", "password", "owner@shop.test", "--store"]).arg(&store).stdin(std::process::Stdio::piped());
    let mut child = pw.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), b"battery staple\n").unwrap();
    assert!(child.wait().unwrap().success());
    let server = Server::start(&store);
    let mut stale = Browser { addr: server.addr, cookie: browser_cookie, csrf: again.csrf.clone() };
    assert_eq!(stale.get("/api/sites").status, 401, "a new password ends the old logins");
    assert_eq!(sign_in(&server, "owner@shop.test", "battery staple").get("/api/sites").status, 200);
    server.stop();
    tally_ok(&store, &["user", "sign-out", "other@shop.test"]);
}

/// Regression: the `Secure` flag followed `X-Forwarded-Proto` from any client. It follows it only
/// from a trusted proxy.
#[test]
fn secure_cookies_follow_only_a_trusted_proxy() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("data");
    let server = Server::start_with(&store, &["--trusted-proxy", "10.9.9.9"]);
    let token = setup_token(&server);
    let setup = json!({ "token": token, "email": "owner@shop.test", "password": "correct horse" });
    let r = server.client().request(
        "POST",
        "/api/setup",
        &[JSON, ("x-forwarded-proto", "https")],
        setup.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(!header(&r, "set-cookie").unwrap().contains("Secure"), "loopback is no trusted proxy here");
    server.stop();
    let server = Server::start(&store);
    let login = json!({ "email": "owner@shop.test", "password": "correct horse" }).to_string();
    let r = server.client().request("POST", "/api/login", &[JSON, ("x-forwarded-proto", "https")], login.as_bytes());
    assert!(header(&r, "set-cookie").unwrap().contains("Secure"), "a trusted proxy says HTTPS");
    server.stop();
}

/// Regression: there was no limit on sign-in attempts, and failures were logged without the
/// client's address. Attempts are limited per address and per account (`429` with
/// `Retry-After`), and each failure is logged with the address as the server determines it —
/// behind a trusted proxy, the forwarded one — in a line fail2ban can match.
#[test]
fn sign_in_attempts_are_limited_and_logged_with_the_client_address() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("data");
    let server = Server::start_with(&store, &["--auth-attempts-per-minute", "3"]);
    let token = setup_token(&server);
    let setup = json!({ "token": token, "email": "owner@shop.test", "password": "correct horse" });
    assert_eq!(server.client().post_json("/api/setup", &[], &setup).status, 200);
    let attempt = |forwarded: &str, email: &str| {
        let body = json!({ "email": email, "password": "wrong horse" });
        server.client().post_json("/api/login", &[("x-forwarded-for", forwarded)], &body)
    };
    let statuses: Vec<u16> = (0..5).map(|_| attempt("198.51.100.7", "owner@shop.test").status).collect();
    assert_eq!(statuses, [401, 401, 401, 429, 429], "a burst of 3, then refused");
    let refused = attempt("198.51.100.7", "owner@shop.test");
    assert!(header(&refused, "retry-after").is_some_and(|s| s.parse::<u64>().unwrap() >= 1));
    let line = server.wait_for_log("authentication failure; client=198.51.100.7 kind=login");
    assert!(line.contains("account=\"owner@shop.test\""), "{line}");
    server.wait_for_log("authentication throttled; client=198.51.100.7 kind=login");
    // Another address is limited separately, but the account's own limit is spent by now.
    assert_eq!(attempt("203.0.113.9", "someone@shop.test").status, 401);
    assert_eq!(attempt("192.0.2.1", "owner@shop.test").status, 429, "the account's limit is spent");
    server.stop();
}

/// Regression: API keys had no scope: any key could read visitors, erase and import. A key
/// holds scopes, chosen when it is made (statistics by default), listed by `tally key list`,
/// and checked per route; `admin` may also change its own site's settings.
#[test]
fn key_scopes_are_checked_per_route() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("data");
    add_site(&store, "shop.test", "UTC");
    add_site(&store, "other.test", "UTC");
    let key = |scopes: &[&str]| {
        let mut args = vec!["key", "create", "shop.test", "--name", "scoped"];
        for s in scopes {
            args.extend(["--scope", s]);
        }
        let out = tally_ok(&store, &args);
        format!("Bearer {}", field(&out, "key:"))
    };
    let (stats, visitors, import, admin) = (key(&[]), key(&["visitors"]), key(&["import"]), key(&["admin"]));
    assert!(!tally(&store, &["key", "create", "shop.test", "--scope", "root"]).status.success());
    let listed = tally_ok(&store, &["key", "list", "shop.test"]);
    for scopes in ["\tstats\tactive\tscoped", "\tvisitors\tactive", "\timport\tactive", "\tadmin\tactive"] {
        assert!(listed.contains(scopes), "{scopes:?} in:\n{listed}");
    }
    let server = Server::start(&store);
    let query = json!({ "site_id": "shop.test", "metrics": ["visitors"], "date_range": "7d" }).to_string();
    let line = json!({ "timestamp": "2024-05-01T10:00:00Z", "url": "https://shop.test/" }).to_string();
    let routes: [(&str, &str, &[u8]); 5] = [
        ("POST", "/api/v2/query", query.as_bytes()),
        ("GET", "/api/sessions?site_id=shop.test", b""),
        ("POST", "/api/import?site_id=shop.test", line.as_bytes()),
        ("POST", "/api/sites/shop.test/goals", br#"{"event_name":"Signup"}"#),
        ("POST", "/api/sites/other.test/goals", br#"{"event_name":"Signup"}"#),
    ];
    // Which routes each key may use: stats, sessions, import, its site's settings, another site.
    for (bearer, allowed) in [
        (&stats, [true, false, false, false, false]),
        (&visitors, [false, true, false, false, false]),
        (&import, [false, false, true, false, false]),
        (&admin, [true, true, true, true, false]),
    ] {
        for ((method, path, body), allowed) in routes.iter().zip(allowed) {
            let r = server.client().request(method, path, &[JSON, ("authorization", bearer)], body);
            assert_eq!(r.status != 401, allowed, "{method} {path}: {} {}", r.status, r.text());
        }
    }
    // The settings API makes keys with scopes too (an admin key may, on its site).
    let made = server.client().post_json(
        "/api/sites/shop.test/keys",
        &[("authorization", &admin)],
        &json!({ "name": "importer", "scopes": ["import", "stats"] }),
    );
    assert_eq!(made.status, 201, "{}", made.text());
    assert_eq!(made.json()["scopes"], json!(["stats", "import"]));
    let bad = server.client().post_json(
        "/api/sites/shop.test/keys",
        &[("authorization", &admin)],
        &json!({ "scopes": ["root"] }),
    );
    assert_eq!(bad.status, 400);
    let keys = server.client().request("GET", "/api/sites/shop.test/keys", &[("authorization", &admin)], b"").json();
    assert!(
        keys["keys"]
            .as_array()
            .unwrap()
            .iter()
            .any(|k| k["name"] == "importer" && k["scopes"] == json!(["stats", "import"]))
    );
    server.stop();
}

/// Regression: `/metrics` answered anyone with every site's counters, and `/health` answered the
/// store's error text. `/metrics` needs its token (or is served on an address of its own);
/// `/health` says ok or not.
#[test]
fn metrics_need_a_token_or_their_own_address() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("data");
    let server = Server::start(&store);
    let mut c = server.client();
    assert_eq!(c.request("GET", "/metrics", &[], b"").status, 401);
    assert_eq!(c.request("GET", "/metrics", &[("authorization", "Bearer wrong-token-0123456789")], b"").status, 401);
    let auth = format!("Bearer {}", crate::support::METRICS_TOKEN);
    assert_eq!(c.request("GET", "/metrics", &[("authorization", &auth)], b"").status, 200);
    assert_eq!(c.request("GET", "/health", &[], b"").text(), r#"{"status":"ok"}"#);
    server.stop();

    let server = Server::start_with(&store, &["--metrics-listen", "127.0.0.1:0"]);
    let line = server.wait_for_log("metrics: http://");
    let addr: std::net::SocketAddr =
        line.split("http://").nth(1).unwrap().split('/').next().unwrap().parse().expect("an address");
    assert_eq!(
        server.client().request("GET", "/metrics", &[("authorization", &auth)], b"").status,
        404,
        "not on the main address"
    );
    let r = Client::connect(addr).request("GET", "/metrics", &[("authorization", &auth)], b"");
    assert!(r.status == 200 && r.text().contains("tally_events_accepted_total"), "{}", r.text());
    assert_eq!(Client::connect(addr).request("GET", "/metrics", &[], b"").status, 401, "and still behind its token");
    assert_eq!(Client::connect(addr).request("GET", "/health", &[], b"").status, 200);
    server.stop();
}

/// What a route needs, for the role matrix.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Needs {
    /// Statistics: every role.
    Stats,
    /// Visitors' sessions: owners, admins, viewers granted them.
    Visitors,
    /// Imports, settings, goals, keys, links: owners and admins.
    Manage,
    /// People and deleting the site: owners.
    Own,
    /// Adding a site: instance administrators only.
    Instance,
}

/// Invites `email` to `site` with `role` through the settings API, and accepts the link.
fn invite_and_accept(server: &Server, inviter: &mut Browser, site: &str, email: &str, role: &str, visitors: bool) {
    let made = inviter.send(
        "POST",
        &format!("/api/sites/{site}/invitations"),
        &json!({ "email": email, "role": role, "visitors": visitors }),
    );
    assert_eq!(made.status, 201, "{}", made.text());
    let link = made.json()["link"].as_str().unwrap().to_owned();
    let page = server.client().request("GET", &link, &[], b"");
    assert_eq!(page.status, 200);
    assert!(page.text().contains(email), "the page names the invited account");
    let form = [("content-type", "application/x-www-form-urlencoded")];
    let accepted = server.client().request("POST", &link, &form, b"password=correct+horse+battery");
    assert_eq!(accepted.status, 303, "{}", accepted.text());
    assert_eq!(header(&accepted, "location"), Some("/login"));
    let again = server.client().request("POST", &link, &form, b"password=correct+horse+battery");
    assert_eq!(again.status, 404, "an invitation is used once");
}

/// Every site role × every route that reads or changes a site: owners, admins, viewers (with
/// and without visitors' sessions), an owner of another site, and the instance administrator.
#[test]
fn every_site_role_is_checked_on_every_route() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("data");
    add_site(&store, "shop.test", "UTC");
    add_site(&store, "other.test", "UTC");
    // Many sign-ins from one address: the attempt limits (tested elsewhere) are raised.
    let server = Server::start_with(&store, &["--auth-attempts-per-minute", "1000"]);
    let token = setup_token(&server);
    let setup = json!({ "token": token, "email": "root@shop.test", "password": "correct horse" });
    assert_eq!(server.client().post_json("/api/setup", &[], &setup).status, 200);
    let mut root = sign_in(&server, "root@shop.test", "correct horse");

    // Bad invitations are refused and make nothing.
    let bad = root.send("POST", "/api/sites/shop.test/invitations", &json!({ "email": "x@shop.test", "role": "god" }));
    assert_eq!(bad.status, 400, "{}", bad.text());
    let bad =
        root.send("POST", "/api/sites/shop.test/invitations", &json!({ "email": "not an address", "role": "viewer" }));
    assert_eq!(bad.status, 400);
    let junk = server.client().request("GET", &format!("/invite/{}", "0".repeat(64)), &[], b"");
    assert_eq!(junk.status, 404);

    invite_and_accept(&server, &mut root, "shop.test", "owner@shop.test", "owner", false);
    let mut owner = sign_in(&server, "owner@shop.test", "correct horse battery");
    // An owner invites the others.
    invite_and_accept(&server, &mut owner, "shop.test", "admin@shop.test", "admin", false);
    invite_and_accept(&server, &mut owner, "shop.test", "viewer@shop.test", "viewer", false);
    invite_and_accept(&server, &mut owner, "shop.test", "peeker@shop.test", "viewer", true);
    invite_and_accept(&server, &mut root, "other.test", "stranger@shop.test", "owner", false);
    let members = owner.get("/api/sites/shop.test/members").json();
    assert_eq!(members["members"].as_array().unwrap().len(), 4, "{members}");

    let query = json!({ "site_id": "shop.test", "metrics": ["visitors"], "date_range": "7d" });
    let funnel = json!({ "site_id": "shop.test", "date_range": "7d", "steps": [{ "page": "/" }, { "page": "/b" }] });
    let line = json!({ "timestamp": "2026-11-01T10:00:00Z", "url": "https://shop.test/", "visitor": "v" });
    let routes: Vec<(&str, String, Value, Needs)> = vec![
        ("POST", "/api/v2/query".into(), query, Needs::Stats),
        ("POST", "/api/funnel".into(), funnel, Needs::Stats),
        ("GET", "/api/realtime?site_id=shop.test".into(), Value::Null, Needs::Stats),
        ("GET", "/api/v1/stats/realtime/visitors?site_id=shop.test".into(), Value::Null, Needs::Stats),
        ("GET", "/api/sessions?site_id=shop.test".into(), Value::Null, Needs::Visitors),
        ("GET", "/api/sessions/abc?site_id=shop.test".into(), Value::Null, Needs::Visitors),
        ("GET", "/api/visitors/abc/sessions?site_id=shop.test".into(), Value::Null, Needs::Visitors),
        ("GET", "/api/visitors/abc/events?site_id=shop.test".into(), Value::Null, Needs::Visitors),
        ("DELETE", "/api/visitors/abc?site_id=shop.test".into(), Value::Null, Needs::Visitors),
        ("POST", "/api/import?site_id=shop.test".into(), line, Needs::Manage),
        ("PATCH", "/api/sites/shop.test".into(), json!({ "timezone": "UTC" }), Needs::Manage),
        ("POST", "/api/sites/shop.test/domains".into(), json!({ "domain": "alias.shop.test" }), Needs::Manage),
        ("DELETE", "/api/sites/shop.test/domains/none.shop.test".into(), Value::Null, Needs::Manage),
        ("POST", "/api/sites/shop.test/goals".into(), json!({ "event_name": "Signup" }), Needs::Manage),
        ("DELETE", "/api/sites/shop.test/goals/none".into(), Value::Null, Needs::Manage),
        (
            "POST",
            "/api/sites/shop.test/funnels".into(),
            json!({ "name": "f", "steps": [{ "page": "/" }, { "page": "/b" }] }),
            Needs::Manage,
        ),
        ("DELETE", "/api/sites/shop.test/funnels/none".into(), Value::Null, Needs::Manage),
        ("GET", "/api/sites/shop.test/keys".into(), Value::Null, Needs::Manage),
        ("POST", "/api/sites/shop.test/keys".into(), json!({ "name": "k" }), Needs::Manage),
        ("DELETE", "/api/sites/shop.test/keys/none".into(), Value::Null, Needs::Manage),
        ("GET", "/api/sites/shop.test/shares".into(), Value::Null, Needs::Manage),
        ("POST", "/api/sites/shop.test/shares".into(), json!({ "name": "s" }), Needs::Manage),
        ("DELETE", "/api/sites/shop.test/shares/none".into(), Value::Null, Needs::Manage),
        ("GET", "/api/sites/shop.test/members".into(), Value::Null, Needs::Manage),
        (
            "POST",
            "/api/sites/shop.test/invitations".into(),
            json!({ "email": "new@shop.test", "role": "viewer" }),
            Needs::Own,
        ),
        ("PUT", "/api/sites/shop.test/members/viewer@shop.test".into(), json!({ "role": "viewer" }), Needs::Own),
        ("DELETE", "/api/sites/shop.test/members/nobody@shop.test".into(), Value::Null, Needs::Own),
        ("POST", "/api/sites".into(), json!({ "domain": "added.test" }), Needs::Instance),
    ];
    let roles = ["root", "owner", "admin", "viewer", "peeker", "stranger"];
    let allowed = |role: &str, need: Needs| match role {
        "root" => true,
        "owner" => need != Needs::Instance,
        "admin" => matches!(need, Needs::Stats | Needs::Visitors | Needs::Manage),
        "viewer" => need == Needs::Stats,
        "peeker" => matches!(need, Needs::Stats | Needs::Visitors),
        _ => false,
    };
    for role in roles {
        let mut b = if role == "root" {
            sign_in(&server, "root@shop.test", "correct horse")
        } else {
            sign_in(&server, &format!("{role}@shop.test"), "correct horse battery")
        };
        for (method, path, body, need) in &routes {
            let r = if method == &"GET" { b.get(path) } else { b.send(method, path, body) };
            let expect = allowed(role, *need);
            assert_eq!(r.status != 401, expect, "{role}: {method} {path} answered {} {}", r.status, r.text());
        }
        // The site list shows an invited account its own sites only.
        let sites: Vec<String> = b.get("/api/sites").json()["sites"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["domain"].as_str().unwrap().to_owned())
            .collect();
        match role {
            "root" => assert!(sites.contains(&"other.test".to_owned()) && sites.contains(&"shop.test".to_owned())),
            "stranger" => assert_eq!(sites, ["other.test"]),
            _ => assert_eq!(sites, ["shop.test"], "{role}"),
        }
    }
    // Deleting the site: not an admin, an owner may.
    let mut admin = sign_in(&server, "admin@shop.test", "correct horse battery");
    assert_eq!(admin.send("DELETE", "/api/sites/shop.test", &Value::Null).status, 401);
    // A removed member loses the site at once.
    assert_eq!(owner.send("DELETE", "/api/sites/shop.test/members/admin@shop.test", &Value::Null).status, 200);
    assert_eq!(
        admin
            .send(
                "POST",
                "/api/v2/query",
                &json!({ "site_id": "shop.test", "metrics": ["visitors"], "date_range": "7d" })
            )
            .status,
        401
    );
    assert_eq!(owner.send("DELETE", "/api/sites/shop.test", &Value::Null).status, 200);
    server.stop();
}

/// The code an authenticator app shows for base32 `secret` at `unix` seconds.
fn code_at(secret: &str, unix: u64) -> String {
    let secret = totp_rs::Secret::try_from_base32(secret).unwrap();
    totp_rs::Builder::new().with_secret(secret).build().unwrap().generate(unix).to_string()
}

fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}

/// Two-factor sign-in: set up with a code, then every sign-in needs one; a code works once, a
/// recovery code works once; turning it off needs the password.
#[test]
fn two_factor_sign_in_needs_a_fresh_code_or_a_recovery_code() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("data");
    let server = Server::start_with(&store, &["--auth-attempts-per-minute", "1000"]);
    let setup = json!({ "token": setup_token(&server), "email": "me@shop.test", "password": "correct horse" });
    assert_eq!(server.client().post_json("/api/setup", &[], &setup).status, 200);
    let mut me = sign_in(&server, "me@shop.test", "correct horse");
    assert_eq!(server.client().post_json("/api/2fa/setup", &[], &json!({})).status, 401, "signed in only");
    assert_eq!(me.send("POST", "/api/2fa/enable", &json!({ "code": "123456" })).status, 400, "no setup begun");

    let begun = me.send("POST", "/api/2fa/setup", &json!({})).json();
    let secret = begun["secret"].as_str().unwrap().to_owned();
    assert!(begun["otpauth_url"].as_str().unwrap().starts_with("otpauth://totp/Tally%3Ame%40shop.test?secret="));
    let wrong = code_at(&secret, now_secs() + 3600);
    assert_eq!(me.send("POST", "/api/2fa/enable", &json!({ "code": wrong })).status, 400);
    let login = |code: Option<&str>| {
        let mut body = json!({ "email": "me@shop.test", "password": "correct horse" });
        if let Some(c) = code {
            body["code"] = json!(c);
        }
        server.client().post_json("/api/login", &[], &body)
    };
    assert_eq!(login(None).status, 200, "not on yet: the pending secret asks nothing");
    let enabled = me.send("POST", "/api/2fa/enable", &json!({ "code": code_at(&secret, now_secs()) }));
    assert_eq!(enabled.status, 200, "{}", enabled.text());
    let recovery: Vec<String> =
        enabled.json()["recovery_codes"].as_array().unwrap().iter().map(|c| c.as_str().unwrap().to_owned()).collect();
    assert_eq!(recovery.len(), 10);

    let asked = login(None);
    assert_eq!((asked.status, asked.json()["two_factor"].clone()), (401, json!(true)));
    let bad_password = server.client().post_json(
        "/api/login",
        &[],
        &json!({ "email": "me@shop.test", "password": "wrong horse", "code": code_at(&secret, now_secs()) }),
    );
    assert_eq!((bad_password.status, bad_password.json()["two_factor"].clone()), (401, Value::Null));
    assert_eq!(login(Some(&wrong)).status, 401);
    // The next step's code (within the allowed skew) is fresh: accepted once, then a replay.
    let next = code_at(&secret, now_secs() + 30);
    assert_eq!(login(Some(&next)).status, 200);
    assert_eq!(login(Some(&next)).status, 401, "a code is accepted once");
    assert_eq!(login(Some(&recovery[0].to_uppercase())).status, 200, "a recovery code, any case");
    assert_eq!(login(Some(&recovery[0])).status, 401, "a recovery code works once");
    assert_eq!(login(Some(&recovery[1])).status, 200);

    assert_eq!(me.send("POST", "/api/2fa/disable", &json!({ "password": "wrong horse" })).status, 401);
    assert_eq!(me.send("POST", "/api/2fa/disable", &json!({ "password": "correct horse" })).status, 200);
    assert_eq!(login(None).status, 200);
    server.stop();
}
