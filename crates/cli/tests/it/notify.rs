//! Reports and alerts end to end: a small SMTP server and a webhook receiver run in the test on
//! 127.0.0.1; `tally report` and `tally serve`'s own loop send the weekly report (plain text and
//! HTML) and a traffic-spike alert (mail and JSON), each once, with the site's numbers in them.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Server, add_site, field, tally, tally_ok};

const UA: &str = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0";

/// A mail server that accepts everything and hands each message (envelope recipients, then the
/// data with folded headers unfolded) to the test.
fn smtp_server() -> (u16, mpsc::Receiver<(Vec<String>, String)>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (send, recv) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let send = send.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                stream.write_all(b"220 test.local ESMTP\r\n").unwrap();
                let mut rcpt = Vec::new();
                let mut line = String::new();
                while reader.read_line(&mut line).unwrap_or(0) > 0 {
                    let upper = line.to_ascii_uppercase();
                    if upper.starts_with("EHLO") || upper.starts_with("HELO") {
                        stream.write_all(b"250-test.local\r\n250 8BITMIME\r\n").unwrap();
                    } else if upper.starts_with("RCPT TO:") {
                        rcpt.push(line[8..].trim().trim_matches(['<', '>']).to_owned());
                        stream.write_all(b"250 OK\r\n").unwrap();
                    } else if upper.starts_with("DATA") {
                        stream.write_all(b"354 go on\r\n").unwrap();
                        let mut data = String::new();
                        let mut l = String::new();
                        while reader.read_line(&mut l).unwrap_or(0) > 0 && l != ".\r\n" {
                            data.push_str(&l);
                            l.clear();
                        }
                        send.send((std::mem::take(&mut rcpt), data.replace("\r\n ", " ").replace("\r\n\t", " ")))
                            .unwrap();
                        stream.write_all(b"250 queued\r\n").unwrap();
                    } else if upper.starts_with("QUIT") {
                        stream.write_all(b"221 bye\r\n").unwrap();
                        return;
                    } else {
                        stream.write_all(b"250 OK\r\n").unwrap();
                    }
                    line.clear();
                }
            });
        }
    });
    (port, recv)
}

/// A webhook receiver: answers 200 and hands each JSON body to the test.
fn webhook_server() -> (u16, mpsc::Receiver<Value>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (send, recv) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let (mut line, mut length) = (String::new(), 0usize);
            while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap();
                }
                line.clear();
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok").unwrap();
            send.send(serde_json::from_slice(&body).unwrap()).unwrap();
        }
    });
    (port, recv)
}

#[test]
fn weekly_reports_and_spike_alerts_are_mailed_and_posted_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("data");
    let site = add_site(&store, "mail.test", "UTC");
    let (smtp, mail) = smtp_server();
    let (hook, posts) = webhook_server();
    let config = dir.path().join("tally.toml");
    std::fs::write(
        &config,
        format!(
            "check_every_secs = 1\n\
             [smtp]\nhost = \"127.0.0.1\"\nport = {smtp}\nsecurity = \"none\"\nfrom = \"Tally <tally@mail.test>\"\n\
             [[reports]]\nsite = \"mail.test\"\nevery = \"week\"\nto = [\"team@mail.test\"]\n\
             [[alerts]]\nsite = \"mail.test\"\nspike_percent = 100\nmin_visitors = 4\nto = [\"oncall@mail.test\"]\n\
             webhook = \"http://127.0.0.1:{hook}/hook\"\n"
        ),
    )
    .unwrap();
    let cfg = config.to_str().unwrap();

    // Last complete week: three visitors on its Wednesday, two of them on /pricing, one from Google.
    let today = jiff::Timestamp::now().to_zoned(jiff::tz::TimeZone::UTC).date();
    let week = analytics::report::Every::Week.last_complete(today).unwrap();
    let wednesday = week.first().checked_add(jiff::Span::new().days(2)).unwrap();
    let line = |h: u32, url: &str, v: &str, referrer: &str| {
        json!({ "timestamp": format!("{wednesday}T{h:02}:00:00Z"), "url": url, "visitor": v, "user_agent": UA, "referrer": referrer }).to_string()
    };
    let events = dir.path().join("week.ndjson");
    std::fs::write(
        &events,
        [
            line(9, "https://mail.test/pricing", "a", "https://www.google.com/"),
            line(10, "https://mail.test/pricing", "b", ""),
            line(11, "https://mail.test/", "c", ""),
        ]
        .join("\n"),
    )
    .unwrap();
    assert_eq!(
        field(&tally_ok(&store, &["import", events.to_str().unwrap(), "--site", "mail.test"]), "imported:"),
        "3"
    );

    // Bad settings are refused before anything is sent.
    let bad = dir.path().join("bad.toml");
    let smtp_table =
        format!("[smtp]\nhost = \"127.0.0.1\"\nport = {smtp}\nsecurity = \"none\"\nfrom = \"tally@mail.test\"\n");
    std::fs::write(
        &bad,
        format!("{smtp_table}[[reports]]\nsite = \"mail.test\"\nevery = \"fortnight\"\nto = [\"team@mail.test\"]\n"),
    )
    .unwrap();
    let out = tally(&store, &["report", "--site", "mail.test", "--config", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("week or month"), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::write(&bad, "[[alerts]]\nsite = \"mail.test\"\nspike_percent = 50\nto = [\"oncall@mail.test\"]\n")
        .unwrap();
    let out = tally(&store, &["report", "--site", "mail.test", "--config", bad.to_str().unwrap()]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no [smtp] table"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // `tally report` sends it now.
    let out = tally_ok(&store, &["report", "--site", "mail.test", "--config", cfg]);
    assert!(field(&out, "sent:").contains("3 visitors"), "{out}");
    let (to, message) = mail.recv_timeout(Duration::from_secs(20)).expect("the report");
    assert_eq!(to, ["team@mail.test"]);
    let subject =
        format!("Subject: Tally weekly report for mail.test: 3 visitors, {} to {}", week.first(), week.last());
    assert!(message.contains(&subject), "{message}");
    assert!(
        message.contains("multipart/alternative") && message.contains("text/plain") && message.contains("text/html")
    );
    for text in ["Visitors", "/pricing", "Google", "Top sources", "<h3>Top pages</h3>"] {
        assert!(message.contains(text), "{text:?} in the report:\n{message}");
    }

    // `tally serve` sends the week's report once by itself, and a spike alert once four visitors
    // come within the hour (the day before had none).
    let server = Server::start_with(&store, &["--config", cfg]);
    let (to, message) = mail.recv_timeout(Duration::from_secs(20)).expect("the scheduled report");
    assert_eq!(to, ["team@mail.test"]);
    assert!(message.contains(&subject));
    for i in 0..4 {
        let ip = format!("10.9.0.{i}");
        let headers = [("content-type", "text/plain"), ("user-agent", UA), ("x-forwarded-for", ip.as_str())];
        let body = br#"{"n":"pageview","u":"https://mail.test/launch","d":"mail.test"}"#;
        assert_eq!(server.client().request("POST", "/api/event", &headers, body).status, 202);
    }
    let posted = posts.recv_timeout(Duration::from_secs(20)).expect("the webhook");
    assert_eq!(posted["kind"], "spike");
    assert_eq!(posted["site"], "mail.test");
    assert_eq!(posted["last_hour_visitors"], 4);
    assert!(posted["text"].as_str().unwrap().contains("Traffic spike on mail.test: 4 visitors"), "{posted}");
    let (to, alert) = mail.recv_timeout(Duration::from_secs(5)).expect("the alert mail");
    assert_eq!(to, ["oncall@mail.test"]);
    assert!(alert.contains("Subject: Tally: traffic spike on mail.test") && alert.contains("4 visitors"), "{alert}");
    // Several more rounds: nothing is sent twice.
    let quiet = Instant::now() + Duration::from_secs(3);
    while Instant::now() < quiet {
        assert!(mail.recv_timeout(Duration::from_millis(200)).is_err(), "a report or alert was sent twice");
        assert!(posts.try_recv().is_err(), "an alert was posted twice");
    }
    server.stop();
    let _ = site;
}
