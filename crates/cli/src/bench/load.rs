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
                let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
                let response = connection.request("POST", "/api/event", &headers, body).await?;
                if response.status != 202 {
                    bail!(
                        "the server answered {} to an event: {}",
                        response.status,
                        String::from_utf8_lossy(&response.body)
                    );
                }
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
