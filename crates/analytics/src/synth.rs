//! Synthetic traffic: a deterministic, seeded generator of realistic [`RawEvent`]s with explicit
//! timestamps, for `tally bench` and `tally demo`.
//!
//! Visitors arrive with a daily and weekly rhythm (busy office hours, quieter weekends), browse
//! sessions of one to eight page views with think times between them (about four in ten visits
//! bounce), come from search engines, social networks, newsletters tagged with UTM parameters,
//! other sites or nowhere, live in a spread of countries (sent as a CDN country header) and use
//! real desktop, mobile and tablet browsers. Some visits sign up, download a file or follow an
//! outbound link: custom events with properties that goals can match.
//!
//! ```
//! use analytics::synth::{Synth, SynthConfig};
//!
//! let config = SynthConfig::new(7, vec!["example.com".into()], 1_767_225_600_000, 3, 200.0);
//! let events: Vec<_> = Synth::new(config.clone()).take(500).collect();
//! let again: Vec<_> = Synth::new(config).take(500).collect();
//! assert_eq!(events, again);
//! assert!(events.windows(2).all(|w| w[0].timestamp_ms <= w[1].timestamp_ms));
//! ```
//!
//! The generator is an iterator in time order: it builds one day of sessions at a time, so a
//! million events never sit in memory at once. Events that spill past midnight wait for the next
//! day's batch. It stops after the configured number of days.

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::event::{RawEvent, RequestHeaders};

const MINUTE_MS: i64 = 60_000;
const DAY_MS: i64 = 86_400_000;

/// The CDN country header the generator sends; configure it as a trusted country header.
pub const COUNTRY_HEADER: &str = "cf-ipcountry";

/// The price of a pro plan's first month, sent as revenue with its signups.
pub const PRO_PRICE: &str = "19.00";
/// The currency of the synthetic revenue.
pub const CURRENCY: &str = "EUR";

/// The custom event names the generator sends, so a demo can define goals for them.
pub const EVENT_NAMES: [&str; 3] = ["Signup", "File Download", "Outbound Link: Click"];

/// A page path the generator visits before a signup, for a page-view goal.
pub const SIGNUP_PAGE: &str = "/signup";

/// What to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct SynthConfig {
    /// The seed: equal configurations generate equal events.
    pub seed: u64,
    /// The sites' domains; each session picks one, the first ones more often.
    pub domains: Vec<String>,
    /// The first day, in milliseconds since the Unix epoch (a UTC midnight, usually).
    pub start_ms: i64,
    /// How many days of traffic.
    pub days: u32,
    /// The average number of events per day over all sites; the daily rhythm varies it.
    pub events_per_day: f64,
}

impl SynthConfig {
    /// A configuration of `days` days from `start_ms` with about `events_per_day` events a day.
    pub fn new(seed: u64, domains: Vec<String>, start_ms: i64, days: u32, events_per_day: f64) -> Self {
        SynthConfig { seed, domains, start_ms, days, events_per_day }
    }
}

/// The generator: an iterator of [`RawEvent`]s in timestamp order.
#[derive(Debug)]
pub struct Synth {
    config: SynthConfig,
    rng: StdRng,
    day: u32,
    /// What scales [`weekly`] to a mean of one over the configured days.
    weekly_norm: f64,
    ready: VecDeque<RawEvent>,
    /// Events of sessions that ran past the end of the day just generated.
    spill: Vec<RawEvent>,
    /// Visitors seen so far, so some come back (a returning visitor keeps address and browser).
    visitors: Vec<Visitor>,
}

#[derive(Debug, Clone)]
struct Visitor {
    ip: IpAddr,
    user_agent: &'static str,
    country: &'static str,
    screen_width: u32,
    language: &'static str,
}

impl Synth {
    /// A generator for `config`.
    pub fn new(config: SynthConfig) -> Self {
        let rng = StdRng::seed_from_u64(config.seed);
        // The weekly rhythm's mean over the configured days is one, so the days hold
        // `events_per_day` a day on average whichever weekdays they are.
        let days = (0..config.days).map(|d| weekly(config.start_ms.saturating_add(i64::from(d) * DAY_MS)));
        let sum: f64 = days.sum();
        let weekly_norm = if sum > 0.0 { f64::from(config.days) / sum } else { 1.0 };
        Synth { config, rng, day: 0, weekly_norm, ready: VecDeque::new(), spill: Vec::new(), visitors: Vec::new() }
    }

    /// Builds the sessions starting on the next day and moves the events of that day to `ready`.
    fn generate_day(&mut self) {
        let day_start = self.config.start_ms.saturating_add(i64::from(self.day) * DAY_MS);
        let day_end = day_start.saturating_add(DAY_MS);
        let jitter = 0.85 + 0.3 * self.rng.random::<f64>();
        let expected_sessions = self.config.events_per_day.max(0.0) * weekly(day_start) * self.weekly_norm * jitter
            / MEAN_EVENTS_PER_SESSION;
        let sessions = expected_sessions.round().min(1e9) as u64;
        let mut batch = std::mem::take(&mut self.spill);
        for _ in 0..sessions {
            let hour = pick_weighted(&mut self.rng, &HOURLY_WEIGHTS);
            let offset = hour as i64 * 60 * MINUTE_MS + self.rng.random_range(0..60 * MINUTE_MS);
            let start = day_start.saturating_add(offset);
            self.session(start, &mut batch);
        }
        batch.sort_by_key(|e| e.timestamp_ms);
        let split = batch.partition_point(|e| e.timestamp_ms < day_end);
        self.spill = batch.split_off(split);
        self.ready.extend(batch);
        self.day += 1;
        if self.day >= self.config.days {
            self.ready.extend(std::mem::take(&mut self.spill));
        }
    }

    fn visitor(&mut self) -> Visitor {
        if !self.visitors.is_empty() && self.rng.random::<f64>() < 0.3 {
            let i = self.rng.random_range(0..self.visitors.len());
            return self.visitors[i].clone();
        }
        // Public-looking IPv4 addresses: the first octet avoids 0, 10, 127 and everything from 224.
        let first = [23u8, 31, 45, 62, 81, 88, 93, 104, 151, 176, 185, 193, 203, 212][self.rng.random_range(0..14)];
        let ip = IpAddr::V4(Ipv4Addr::new(first, self.rng.random(), self.rng.random(), self.rng.random_range(1..255)));
        let user_agent = USER_AGENTS[pick_weighted(&mut self.rng, &USER_AGENT_WEIGHTS)].1;
        let country = COUNTRIES[pick_weighted(&mut self.rng, &COUNTRY_WEIGHTS)].0;
        // Widths that fit the device the User-Agent names, so the screen sizes agree with the devices.
        let widths: &[u32] = if user_agent.contains("iPad") || user_agent.contains("Tablet") {
            &[768, 820, 1024]
        } else if user_agent.contains("Mobile") {
            &[360, 390, 412, 430]
        } else {
            &[1280, 1366, 1440, 1536, 1920, 2560]
        };
        let screen_width = widths[self.rng.random_range(0..widths.len())];
        let language = match country {
            "DE" => "de-DE",
            "GB" => "en-GB",
            "FR" => "fr-FR",
            "IN" => "en-IN",
            "NL" => "nl-NL",
            "CA" => "en-CA",
            "BR" => "pt-BR",
            "JP" => "ja-JP",
            "PL" => "pl-PL",
            "SE" => "sv-SE",
            "AU" => "en-AU",
            _ => "en-US",
        };
        let visitor = Visitor { ip, user_agent, country, screen_width, language };
        if self.visitors.len() < 100_000 {
            self.visitors.push(visitor.clone());
        }
        visitor
    }

    /// One visit: page views with think times, maybe a custom event.
    fn session(&mut self, start: i64, out: &mut Vec<RawEvent>) {
        let Some(domain) = self.domain() else { return };
        let visitor = self.visitor();
        let views = 1 + pick_weighted(&mut self.rng, &PAGE_COUNT_WEIGHTS);
        let (referrer, query) = self.arrival();
        let mut at = start;
        let mut previous: Option<String> = None;
        for view in 0..views {
            let path = if view > 0 && self.rng.random::<f64>() < 0.15 {
                SIGNUP_PAGE
            } else {
                PAGES[pick_weighted(&mut self.rng, &PAGE_WEIGHTS)].0
            };
            let page_url = format!("https://{domain}{path}");
            let url = if view == 0 { format!("{page_url}{query}") } else { page_url.clone() };
            let referrer = if view == 0 { referrer.clone() } else { previous.clone() };
            out.push(event("pageview", url, &domain, referrer, Vec::new(), at, &visitor));
            if let Some(custom) = self.custom_event(path) {
                let (name, props) = custom;
                // A pro plan's signup pays for its first month: revenue for a revenue goal.
                let paid = name == EVENT_NAMES[0] && props.iter().any(|(k, v)| k == "plan" && v == "pro");
                let mut e = event(name, page_url.clone(), &domain, None, props, at.saturating_add(2_000), &visitor);
                if paid {
                    e.revenue = Some(crate::event::RawRevenue { amount: PRO_PRICE.into(), currency: CURRENCY.into() });
                }
                out.push(e);
            }
            previous = Some(page_url);
            // Think time: mostly tens of seconds, sometimes minutes; always under the 30-minute gap.
            let think = 5_000.0 + 60_000.0 * -self.rng.random::<f64>().max(1e-9).ln();
            at = at.saturating_add((think as i64).min(20 * MINUTE_MS));
        }
    }

    fn domain(&mut self) -> Option<String> {
        let count = self.config.domains.len();
        if count == 0 {
            return None;
        }
        // The first site gets the most traffic: a geometric share, like a real portfolio of sites.
        let mut i = 0;
        while i + 1 < count && self.rng.random::<f64>() < 0.35 {
            i += 1;
        }
        self.config.domains.get(i).cloned()
    }

    /// Where a visit comes from: a referrer and the landing page's query string.
    fn arrival(&mut self) -> (Option<String>, String) {
        let roll = self.rng.random::<f64>();
        let pick = |rng: &mut StdRng, list: &[&'static str]| list[rng.random_range(0..list.len())];
        if roll < 0.40 {
            (None, String::new())
        } else if roll < 0.70 {
            (Some(pick(&mut self.rng, SEARCH).to_owned()), String::new())
        } else if roll < 0.85 {
            (Some(pick(&mut self.rng, SOCIAL).to_owned()), String::new())
        } else if roll < 0.95 {
            let campaign = pick(&mut self.rng, CAMPAIGNS);
            (None, format!("?utm_source=newsletter&utm_medium=email&utm_campaign={campaign}"))
        } else {
            (Some(pick(&mut self.rng, OTHER_SITES).to_owned()), String::new())
        }
    }

    fn custom_event(&mut self, path: &str) -> Option<(&'static str, Vec<(String, String)>)> {
        let roll = self.rng.random::<f64>();
        if path == SIGNUP_PAGE && roll < 0.4 {
            let plan = if self.rng.random::<f64>() < 0.7 { "free" } else { "pro" };
            Some((EVENT_NAMES[0], vec![("plan".into(), plan.into())]))
        } else if path.starts_with("/docs") && roll < 0.1 {
            let file = ["guide.pdf", "tally-linux-x86_64.tar.gz", "brochure.pdf"][self.rng.random_range(0..3)];
            Some((EVENT_NAMES[1], vec![("url".into(), format!("https://files.example.net/{file}"))]))
        } else if path.starts_with("/blog") && roll < 0.08 {
            let link =
                ["https://github.com/", "https://en.wikipedia.org/wiki/Web_analytics"][self.rng.random_range(0..2)];
            Some((EVENT_NAMES[2], vec![("url".into(), link.into())]))
        } else {
            None
        }
    }
}

impl Iterator for Synth {
    type Item = RawEvent;

    fn next(&mut self) -> Option<RawEvent> {
        while self.ready.is_empty() {
            if self.day >= self.config.days {
                return None;
            }
            self.generate_day();
        }
        self.ready.pop_front()
    }
}

fn event(
    name: &str,
    url: String,
    domain: &str,
    referrer: Option<String>,
    props: Vec<(String, String)>,
    timestamp_ms: i64,
    visitor: &Visitor,
) -> RawEvent {
    let mut headers = RequestHeaders::new();
    headers.push("user-agent", visitor.user_agent);
    headers.push(COUNTRY_HEADER, visitor.country);
    RawEvent {
        name: name.to_owned(),
        url,
        domain: domain.to_owned(),
        referrer,
        props,
        revenue: None,
        interactive: true,
        hash_mode: false,
        screen_width: Some(visitor.screen_width),
        language: Some(visitor.language.to_owned()),
        timestamp_ms,
        user_agent: visitor.user_agent.to_owned(),
        peer_ip: visitor.ip,
        headers,
    }
}

/// An index drawn with probability proportional to `weights` (all of them non-negative).
fn pick_weighted(rng: &mut StdRng, weights: &[u32]) -> usize {
    let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
    if total == 0 {
        return 0;
    }
    let mut roll = rng.random_range(0..total);
    for (i, &w) in weights.iter().enumerate() {
        if roll < u64::from(w) {
            return i;
        }
        roll -= u64::from(w);
    }
    weights.len() - 1
}

/// Page views per visit, from one (a bounce) to eight.
const PAGE_COUNT_WEIGHTS: [u32; 8] = [42, 20, 13, 9, 6, 4, 3, 3];

/// The weekly rhythm: the day starting at `day_start_ms` (a UTC midnight) against the others,
/// weekends at a little over half a weekday's traffic.
fn weekly(day_start_ms: i64) -> f64 {
    // 1970-01-01 was a Thursday, so days 2 and 3 after it are Saturday and Sunday.
    match day_start_ms.div_euclid(DAY_MS).rem_euclid(7) {
        2 | 3 => 0.6,
        _ => 1.1,
    }
}

/// The mean of events per session implied by the weights above and the custom-event odds, so a
/// day holds about the configured number of events.
const MEAN_EVENTS_PER_SESSION: f64 = 2.7;

/// Relative traffic per UTC hour: quiet nights, a morning climb, busy afternoons.
const HOURLY_WEIGHTS: [u32; 24] = [3, 2, 2, 2, 2, 3, 5, 8, 11, 13, 14, 14, 13, 14, 14, 13, 12, 11, 10, 9, 8, 7, 5, 4];

const PAGES: [(&str, u32); 14] = [
    ("/", 30),
    ("/pricing", 10),
    ("/features", 8),
    ("/blog", 6),
    ("/blog/privacy-first-analytics", 7),
    ("/blog/single-table-design", 5),
    ("/blog/counting-visitors-with-sketches", 3),
    ("/docs", 6),
    ("/docs/getting-started", 6),
    ("/docs/tracker", 3),
    ("/docs/api", 3),
    ("/about", 3),
    ("/contact", 2),
    ("/changelog", 2),
];

const PAGE_WEIGHTS: [u32; 14] = {
    let mut weights = [0; 14];
    let mut i = 0;
    while i < PAGES.len() {
        weights[i] = PAGES[i].1;
        i += 1;
    }
    weights
};

const SEARCH: &[&str] = &[
    "https://www.google.com/",
    "https://www.google.com/",
    "https://www.google.de/",
    "https://www.bing.com/",
    "https://duckduckgo.com/",
    "https://search.brave.com/",
    "https://www.ecosia.org/",
];

const SOCIAL: &[&str] = &[
    "https://t.co/",
    "https://www.reddit.com/r/selfhosted/",
    "https://news.ycombinator.com/",
    "https://www.linkedin.com/",
    "https://www.facebook.com/",
    "https://mastodon.social/",
];

const OTHER_SITES: &[&str] =
    &["https://github.com/", "https://dev.to/", "https://stackoverflow.com/questions", "https://lobste.rs/"];

const CAMPAIGNS: &[&str] = &["weekly-digest", "spring-launch", "product-update"];

const COUNTRIES: [(&str, u32); 12] = [
    ("US", 30),
    ("DE", 14),
    ("GB", 9),
    ("FR", 7),
    ("IN", 7),
    ("NL", 5),
    ("CA", 5),
    ("BR", 5),
    ("JP", 4),
    ("PL", 4),
    ("SE", 3),
    ("AU", 3),
];

const COUNTRY_WEIGHTS: [u32; 12] = {
    let mut weights = [0; 12];
    let mut i = 0;
    while i < COUNTRIES.len() {
        weights[i] = COUNTRIES[i].1;
        i += 1;
    }
    weights
};

/// Real User-Agent strings (desktop, mobile and tablet browsers) with their share of visits.
const USER_AGENTS: [(u32, &str); 12] = [
    (
        24,
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
    ),
    (
        10,
        "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
    ),
    (
        8,
        "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Safari/605.1.15",
    ),
    (6, "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:133.0) Gecko/20100101 Firefox/133.0"),
    (3, "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0"),
    (
        5,
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36 Edg/131.0.0.0",
    ),
    (
        16,
        "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1",
    ),
    (
        14,
        "Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Mobile Safari/537.36",
    ),
    (
        3,
        "Mozilla/5.0 (Linux; Android 14; SM-S918B) AppleWebKit/537.36 (KHTML, like Gecko) SamsungBrowser/26.0 Chrome/122.0.0.0 Mobile Safari/537.36",
    ),
    (
        4,
        "Mozilla/5.0 (iPad; CPU OS 17_7 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.7 Mobile/15E148 Safari/604.1",
    ),
    (
        2,
        "Mozilla/5.0 (Linux; Android 13; SM-X710) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
    ),
    (5, "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"),
];

const USER_AGENT_WEIGHTS: [u32; 12] = {
    let mut weights = [0; 12];
    let mut i = 0;
    while i < USER_AGENTS.len() {
        weights[i] = USER_AGENTS[i].0;
        i += 1;
    }
    weights
};

#[cfg(test)]
mod tests;
