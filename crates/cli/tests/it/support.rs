//! What the acceptance tests share: `tally` commands on a fresh data directory, a `tally serve`
//! child that is killed when a test fails, and a small blocking HTTP/1.1 client that can send any
//! bytes (invalid UTF-8, oversize bodies) and still read the answer.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The User-Agent strings the tests send, each a real browser's (or bot's).
pub mod ua {
    /// Chrome 131 on Windows 10, desktop.
    pub const CHROME_WINDOWS: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36";
    /// Edge 131 on Windows 10, desktop.
    pub const EDGE_WINDOWS: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36 Edg/131.0.2903.86";
    /// Safari 18.2 on macOS, desktop.
    pub const SAFARI_MAC: &str = "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.2 Safari/605.1.15";
    /// Safari 18.1 on an iPhone, mobile.
    pub const SAFARI_IPHONE: &str = "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1";
    /// Safari 17.7 on an iPad, tablet.
    pub const SAFARI_IPAD: &str = "Mozilla/5.0 (iPad; CPU OS 17_7 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.7 Mobile/15E148 Safari/604.1";
    /// Chrome 131 on a Pixel 8, mobile.
    pub const CHROME_ANDROID: &str = "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.6778.104 Mobile Safari/537.36";
    /// Firefox 133 on Linux, desktop.
    pub const FIREFOX_LINUX: &str = "Mozilla/5.0 (X11; Ubuntu; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0";
    /// Google's crawler.
    pub const GOOGLEBOT: &str = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)";
    /// An HTTP library.
    pub const CURL: &str = "curl/8.5.0";
}

/// Runs `tally ARGS --store DIR` with no `TALLY_*` variable from the test's environment.
pub fn tally(store: &Path, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tally"));
    command.args(args).arg("--store").arg(store).env("TALLY_LOG_LEVEL", "warn");
    for (name, _) in std::env::vars().filter(|(name, _)| name.starts_with("TALLY_") && name != "TALLY_LOG_LEVEL") {
        command.env_remove(name);
    }
    command.output().expect("run tally")
}

/// Like [`tally`], asserting success; returns standard output.
pub fn tally_ok(store: &Path, args: &[&str]) -> String {
    let output = tally(store, args);
    assert!(
        output.status.success(),
        "tally {} failed ({}):\n{}{}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("utf-8 output")
}

/// The value after `label` on a line of `text`, such as the id after `site id: `.
pub fn field(text: &str, label: &str) -> String {
    text.lines()
        .find_map(|line| line.trim().strip_prefix(label))
        .unwrap_or_else(|| panic!("no {label:?} in:\n{text}"))
        .trim()
        .to_owned()
}

/// A site made with the command line: its ids and an API key.
pub struct SiteSetup {
    /// The domain, also the Stats API's `site_id`.
    pub domain: String,
    /// The Umami website id.
    pub umami_id: String,
    /// A site API key (Bearer).
    pub key: String,
}

/// `tally site add DOMAIN --timezone TZ` and `tally key create` with the scopes the tests use
/// (statistics, visitors and imports; not settings).
pub fn add_site(store: &Path, domain: &str, timezone: &str) -> SiteSetup {
    let added = tally_ok(store, &["site", "add", domain, "--timezone", timezone]);
    let key = tally_ok(store, &["key", "create", domain, "--scope", "stats,visitors,import"]);
    SiteSetup { domain: domain.to_owned(), umami_id: field(&added, "umami website id:"), key: field(&key, "key:") }
}

/// The `/metrics` token of every test server.
pub const METRICS_TOKEN: &str = "test-metrics-token-0123456789";

/// A running `tally serve`, killed when dropped (so a failing test leaves no server behind).
pub struct Server {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
    logs: mpsc::Receiver<String>,
}

impl Server {
    /// Starts `tally serve` on `store` and port 0, trusting loopback's forwarding headers and the
    /// `cf-ipcountry` header, flushing aggregates every 200 ms; waits for `listening on`.
    pub fn start(store: &Path) -> Server {
        Server::start_with(store, &[])
    }

    /// Like [`Server::start`], with more `tally serve` arguments.
    pub fn start_with(store: &Path, extra: &[&str]) -> Server {
        Server::start_env(store, extra, &[])
    }

    /// Like [`Server::start_with`], with environment variables (AWS credentials, say). Loopback
    /// is a trusted proxy unless `extra` names trusted proxies itself.
    pub fn start_env(store: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let mut command = Command::new(env!("CARGO_BIN_EXE_tally"));
        command.arg("serve").args(extra).arg("--store").arg(store);
        if !extra.contains(&"--trusted-proxy") {
            command.args(["--trusted-proxy", "127.0.0.1"]);
        }
        command
            .args(["--listen", "127.0.0.1:0", "--country-header", "cf-ipcountry"])
            .args(["--flush-interval", "200ms", "--log-level", "info", "--metrics-token", METRICS_TOKEN])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (name, _) in std::env::vars().filter(|(name, _)| name.starts_with("TALLY_")) {
            command.env_remove(name);
        }
        command.envs(env.iter().copied());
        let mut child = command.spawn().expect("spawn tally serve");
        let stderr = child.stderr.take().expect("stderr");
        let (send, logs) = mpsc::channel();
        // A thread keeps reading the logs, so the server never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let mut seen = Vec::new();
        let addr = loop {
            match logs.recv_timeout(Duration::from_secs(20)) {
                Ok(line) => {
                    if let Some(rest) = line.split("listening on http://").nth(1) {
                        let addr = rest.split_whitespace().next().unwrap_or_default();
                        break addr.trim_matches('"').parse().expect("a socket address");
                    }
                    seen.push(line);
                }
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("tally serve did not start:\n{}", seen.join("\n"));
                }
            }
        };
        Server { child, addr, logs }
    }

    /// The first log line from now on that contains `needle` (within 20 s).
    pub fn wait_for_log(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.logs.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return line,
                Ok(_) => {}
                Err(_) => break,
            }
        }
        panic!("tally serve never logged {needle:?}");
    }

    /// Waits (up to 60 s) until the `/metrics` sample `sample` reaches `at_least`; returns it.
    pub fn wait_for_metric(&self, sample: &str, at_least: f64) -> f64 {
        // A minute: a restarted server recovers a killed one's run at once when its pid is gone,
        // but only after `dead_after` (30 s) when another process took that pid meanwhile.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let value = self.metric(sample);
            if value >= at_least {
                return value;
            }
            assert!(Instant::now() < deadline, "{sample} stayed at {value}, below {at_least}, for 60 s");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The server's process id (for `/proc/{pid}/status`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A new connection to the server.
    pub fn client(&self) -> Client {
        Client::connect(self.addr)
    }

    /// Stops the server with SIGTERM and asserts that it exits 0 within 30 s.
    pub fn stop(mut self) {
        let pid = self.child.id().to_string();
        let status = Command::new("kill").args(["-TERM", &pid]).status().expect("kill -TERM");
        assert!(status.success(), "kill -TERM {pid}");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                let logs: Vec<String> = self.logs.try_iter().collect();
                assert_eq!(status.code(), Some(0), "tally serve stopped badly:\n{}", logs.join("\n"));
                return;
            }
            assert!(Instant::now() < deadline, "tally serve did not stop within 30 s of SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The value of a `/metrics` sample such as `tally_events_dropped_total{reason="bot"}`; 0 when
    /// the sample is not there yet (a labelled counter appears with its first count).
    pub fn metric(&self, sample: &str) -> f64 {
        let auth = format!("Bearer {METRICS_TOKEN}");
        let response = self.client().request("GET", "/metrics", &[("authorization", &auth)], b"");
        assert_eq!(response.status, 200, "/metrics: {}", response.text());
        response
            .text()
            .lines()
            .find_map(|line| line.strip_prefix(sample).and_then(|rest| rest.strip_prefix(' ')))
            .map(|value| value.trim().parse().unwrap_or_else(|_| panic!("{sample} is not a number: {value}")))
            .unwrap_or(0.0)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP response.
#[derive(Debug, Clone)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// Header names (lower case) and values.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON; panics with the body when it is not.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}), status {}: {}", self.status, self.text()))
    }
}

const CLOSED_BEFORE_STATUS: &str = "connection closed before the status line";

/// A blocking HTTP/1.1 client on one keep-alive connection.
pub struct Client {
    addr: SocketAddr,
    reader: BufReader<TcpStream>,
}

impl Client {
    /// Connects to `addr`.
    pub fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
        stream.set_nodelay(true).expect("nodelay");
        Client { addr, reader: BufReader::new(stream) }
    }

    /// Sends a request and reads its response. A write that fails part way (a server refusing an
    /// oversize body may answer and close before reading it all) is not an error as long as a
    /// response can be read.
    pub fn request(&mut self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Response {
        let mut head = format!("{method} {path} HTTP/1.1\r\nhost: test\r\ncontent-length: {}\r\n", body.len());
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        let stream = self.reader.get_mut();
        let _ = stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(body));
        match self.read_response() {
            Ok(response) => response,
            // The server closed this keep-alive connection while it sat idle, before reading the
            // request: send it again on a new one.
            Err(e) if e.to_string() == CLOSED_BEFORE_STATUS => {
                *self = Client::connect(self.addr);
                let stream = self.reader.get_mut();
                let _ = stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(body));
                self.read_response().unwrap_or_else(|e| panic!("{method} {path}: no response: {e}"))
            }
            Err(e) => panic!("{method} {path}: no response: {e}"),
        }
    }

    /// POSTs a JSON value.
    pub fn post_json(&mut self, path: &str, headers: &[(&str, &str)], body: &Value) -> Response {
        let mut all = vec![("content-type", "application/json")];
        all.extend_from_slice(headers);
        self.request("POST", path, &all, body.to_string().as_bytes())
    }

    fn read_response(&mut self) -> std::io::Result<Response> {
        let broken = |what: &str| std::io::Error::new(std::io::ErrorKind::UnexpectedEof, what.to_owned());
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(broken(CLOSED_BEFORE_STATUS));
        }
        let status = line.split(' ').nth(1).and_then(|s| s.parse().ok()).ok_or_else(|| broken("a bad status line"))?;
        let mut headers = Vec::new();
        loop {
            line.clear();
            if self.reader.read_line(&mut line)? == 0 {
                return Err(broken("connection closed in the headers"));
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
            }
        }
        let header = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
        let mut body = Vec::new();
        if let Some(length) = header("content-length") {
            let length: usize = length.parse().map_err(|_| broken("a bad content-length"))?;
            body.resize(length, 0);
            self.reader.read_exact(&mut body)?;
        } else if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
            loop {
                line.clear();
                self.reader.read_line(&mut line)?;
                let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                    .map_err(|_| broken("a bad chunk size"))?;
                let mut chunk = vec![0; size + 2];
                self.reader.read_exact(&mut chunk)?;
                if size == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..size]);
            }
        }
        Ok(Response { status, headers, body })
    }
}
