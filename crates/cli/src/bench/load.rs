//! The HTTP load of `tally bench --http`: synthetic events posted as the Plausible tracker posts
//! them, over a pool of keep-alive connections, each sending one request after another.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use analytics::event::RawEvent;
use anyhow::{Result, bail};

use crate::http::Connection;

/// A Plausible Events API body for `event`, with the headers a browser sends (its User-Agent,
/// its address in `x-forwarded-for` for the trusted proxy in front of Tally, and any CDN header).
pub fn plausible_request(event: &RawEvent) -> (Vec<(String, String)>, Vec<u8>) {
    let props: serde_json::Map<String, serde_json::Value> =
        event.props.iter().map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone()))).collect();
    let mut body = serde_json::json!({ "n": event.name, "u": event.url, "d": event.domain, "r": event.referrer });
    if !props.is_empty() {
        body["p"] = serde_json::Value::Object(props);
    }
    let mut headers = vec![
        ("content-type".to_owned(), "text/plain".to_owned()),
        ("user-agent".to_owned(), event.user_agent.clone()),
        ("x-forwarded-for".to_owned(), event.peer_ip.to_string()),
    ];
    if let Some(country) = event.headers.get(analytics::synth::COUNTRY_HEADER) {
        headers.push((analytics::synth::COUNTRY_HEADER.to_owned(), country.to_owned()));
    }
    (headers, body.to_string().into_bytes())
}

/// What a load run measured.
#[derive(Debug, Clone)]
pub struct LoadResult {
    /// Requests answered 202.
    pub accepted: u64,
    /// Wall time from the first request to the last answer.
    pub elapsed: Duration,
}

/// A request to post: its headers and its body.
pub type Request = (Vec<(String, String)>, Vec<u8>);

/// Posts every request of `requests` to `/api/event` on `addr` over `connections` keep-alive
/// connections; `progress` is told the number answered so far, now and then.
pub async fn post_all(
    addr: SocketAddr,
    requests: Vec<Request>,
    connections: usize,
    progress: Arc<dyn Fn(u64) + Send + Sync>,
) -> Result<LoadResult> {
    let requests = Arc::new(requests);
    let next = Arc::new(AtomicUsize::new(0));
    let accepted = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..connections.max(1) {
        let (requests, next, accepted, progress) = (requests.clone(), next.clone(), accepted.clone(), progress.clone());
        tasks.push(tokio::spawn(async move {
            let mut connection = Connection::connect(addr).await?;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((headers, body)) = requests.get(i) else { return Ok::<_, anyhow::Error>(()) };
                post_event(&mut connection, headers, body).await?;
                let done = accepted.fetch_add(1, Ordering::Relaxed) + 1;
                if done % 20_000 == 0 {
                    progress(done);
                }
            }
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(LoadResult { accepted: accepted.load(Ordering::Relaxed), elapsed: started.elapsed() })
}

/// What [`post_for`] posts: Plausible page views to one site, each from a new visitor (a random
/// client address in `x-forwarded-for`) with one of `user_agents`, one of a few pages and
/// referrers; the traffic `xtask/scripts/serve-memory.sh` measures the server's memory under.
#[derive(Debug, Clone)]
pub struct Traffic {
    /// The site's domain.
    pub domain: String,
    /// The User-Agents to pick from (at least one).
    pub user_agents: Vec<String>,
}

/// The pages and referrers [`Traffic`] picks from.
const PAGES: [&str; 7] = ["/", "/pricing", "/blog/a", "/blog/b", "/docs", "/about", "/signup"];
const REFERRERS: [&str; 4] = ["", "https://www.google.com/", "https://news.ycombinator.com/", "https://twitter.com/x"];

impl Traffic {
    /// Three browsers' User-Agents (desktop Chrome, desktop Safari, iPhone Safari).
    pub fn three_browsers(domain: &str) -> Traffic {
        let user_agents = [
            "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36",
            "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_1) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Safari/605.1.15",
            "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1",
        ];
        Traffic { domain: domain.to_owned(), user_agents: user_agents.map(str::to_owned).to_vec() }
    }

    /// The User-Agents of `text`, one a line: the non-empty ASCII ones (a header value must be
    /// ASCII to be sent as it is). An error when none is left.
    pub fn with_user_agents(domain: &str, text: &str) -> Result<Traffic> {
        let user_agents: Vec<String> =
            text.lines().map(str::trim).filter(|l| !l.is_empty() && l.is_ascii()).map(str::to_owned).collect();
        if user_agents.is_empty() {
            bail!("the User-Agents file has no non-empty ASCII line");
        }
        Ok(Traffic { domain: domain.to_owned(), user_agents })
    }

    /// One request: its headers and its body.
    pub fn request(&self, rng: &mut impl rand::Rng) -> Request {
        use rand::seq::IndexedRandom;
        let page = PAGES.choose(rng).copied().unwrap_or("/");
        let referrer = REFERRERS.choose(rng).copied().unwrap_or("");
        let user_agent = self.user_agents.choose(rng).cloned().unwrap_or_default();
        let ip =
            std::net::Ipv4Addr::new(rng.random_range(1..=223), rng.random(), rng.random(), rng.random_range(1..=254));
        let body = serde_json::json!({
            "n": "pageview",
            "u": format!("https://{}{page}", self.domain),
            "d": self.domain,
            "r": referrer,
        });
        let headers = vec![
            ("content-type".to_owned(), "text/plain".to_owned()),
            ("user-agent".to_owned(), user_agent),
            ("x-forwarded-for".to_owned(), ip.to_string()),
        ];
        (headers, body.to_string().into_bytes())
    }
}

/// How long [`post_for`] waits for an answer before it fails the load: a stalled server ends
/// the run with an error rather than keeping it past its duration.
const ANSWER_WITHIN: Duration = Duration::from_secs(30);

/// Posts [`Traffic`]'s requests to `/api/event` on `addr` over `connections` keep-alive
/// connections for `duration`, each connection sending one request after another; `every_10s`
/// is told the requests answered in each 10 seconds. Any answer but 202 fails the load.
pub async fn post_for(
    addr: SocketAddr,
    traffic: Arc<Traffic>,
    connections: usize,
    duration: Duration,
    every_10s: Arc<dyn Fn(Duration, u64) + Send + Sync>,
) -> Result<LoadResult> {
    let accepted = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = Vec::new();
    for _ in 0..connections.max(1) {
        let (traffic, accepted) = (traffic.clone(), accepted.clone());
        tasks.push(tokio::spawn(async move {
            let mut connection = Connection::connect(addr).await?;
            let mut rng = {
                use rand::SeedableRng;
                rand::rngs::StdRng::from_rng(&mut rand::rng())
            };
            while Instant::now() < deadline {
                let (headers, body) = traffic.request(&mut rng);
                let answer = tokio::time::timeout(ANSWER_WITHIN, post_event(&mut connection, &headers, &body));
                let Ok(answer) = answer.await else {
                    bail!("the server did not answer an event within {} s", ANSWER_WITHIN.as_secs());
                };
                answer?;
                accepted.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, anyhow::Error>(())
        }));
    }
    let reporter = {
        let accepted = accepted.clone();
        tokio::spawn(async move {
            let mut last = 0;
            let mut ticks =
                tokio::time::interval_at((started + Duration::from_secs(10)).into(), Duration::from_secs(10));
            loop {
                let now = ticks.tick().await;
                let done = accepted.load(Ordering::Relaxed);
                every_10s(now.into_std().duration_since(started), done - last);
                last = done;
            }
        })
    };
    let mut result = Ok(());
    for task in tasks {
        if let Err(e) = task.await.map_err(anyhow::Error::from).and_then(|r| r) {
            result = result.and(Err(e));
        }
    }
    reporter.abort();
    result?;
    Ok(LoadResult { accepted: accepted.load(Ordering::Relaxed), elapsed: started.elapsed() })
}

/// Posts one event to `/api/event` on `connection`; an answer other than 202 is an error.
async fn post_event(connection: &mut Connection, headers: &[(String, String)], body: &[u8]) -> Result<()> {
    let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    let response = connection.request("POST", "/api/event", &headers, body).await?;
    if response.status != 202 {
        bail!("the server answered {} to an event: {}", response.status, String::from_utf8_lossy(&response.body));
    }
    Ok(())
}

/// The `p`-th percentile (0–100) of `samples`, by the nearest-rank method; zero when empty.
pub fn percentile(samples: &[Duration], p: f64) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    let mut sorted = samples.to_vec();
    sorted.sort();
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_agents_file_keeps_its_ascii_lines_and_requests_are_plausible_page_views() {
        let traffic = Traffic::with_user_agents("example.com", "Agent/1\n\n  Agent/2  \nÄgent/3\n").unwrap();
        assert_eq!(traffic.user_agents, ["Agent/1", "Agent/2"]);
        assert!(Traffic::with_user_agents("example.com", "\nÄ\n").is_err());
        let mut rng = rand::rng();
        let mut addresses = std::collections::HashSet::new();
        for _ in 0..200 {
            let (headers, body) = traffic.request(&mut rng);
            let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(body["n"], "pageview");
            assert_eq!(body["d"], "example.com");
            let url = body["u"].as_str().unwrap();
            assert!(url.starts_with("https://example.com/") && PAGES.iter().any(|p| url.ends_with(p)), "{url}");
            assert!(REFERRERS.contains(&body["r"].as_str().unwrap()));
            let header = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone()).unwrap();
            assert!(traffic.user_agents.contains(&header("user-agent")));
            let ip: std::net::Ipv4Addr = header("x-forwarded-for").parse().unwrap();
            assert!((1..=223).contains(&ip.octets()[0]) && (1..=254).contains(&ip.octets()[3]), "{ip}");
            addresses.insert(ip);
        }
        assert!(addresses.len() > 190, "a new visitor a request: {} addresses of 200", addresses.len());
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let samples: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&samples, 50.0), Duration::from_millis(50));
        assert_eq!(percentile(&samples, 99.0), Duration::from_millis(99));
        assert_eq!(percentile(&samples, 100.0), Duration::from_millis(100));
        assert_eq!(percentile(&[], 50.0), Duration::ZERO);
        assert_eq!(percentile(&samples[..1], 99.0), Duration::from_millis(1));
    }

    #[test]
    fn a_synthetic_event_becomes_a_plausible_request() {
        let mut event = RawEvent::pageview("https://example.com/docs?utm_source=x", "example.com");
        event.name = "Signup".into();
        event.props = vec![("plan".into(), "pro".into())];
        event.user_agent = "Mozilla/5.0".into();
        event.peer_ip = [203, 0, 113, 9].into();
        let (headers, body) = plausible_request(&event);
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json["n"], "Signup");
        assert_eq!(json["u"], "https://example.com/docs?utm_source=x");
        assert_eq!(json["p"]["plan"], "pro");
        assert!(headers.contains(&("x-forwarded-for".to_owned(), "203.0.113.9".to_owned())));
        assert!(headers.contains(&("user-agent".to_owned(), "Mozilla/5.0".to_owned())));
    }
}
