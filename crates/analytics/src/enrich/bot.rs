//! Bot detection, and the reasons an event is dropped.
//!
//! Known crawlers come from two maintained lists rather than a hand-made pattern: the `isbot`
//! crate (a port of the `isbot` npm package's list of bot User-Agent patterns, compiled into one
//! regular expression) and `uap-core`'s `Spider` device patterns, read by the User-Agent parser.
//! Headless and automation browsers are matched by the product tokens they announce, checked first
//! so that the drop reason says what they are.

use std::net::IpAddr;

use crate::enrich::ip::IpRanges;
use crate::enrich::recent::Recent;

/// Why an event was dropped; the server counts drops by [`DropReason::as_str`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum DropReason {
    /// No User-Agent, or only spaces.
    EmptyUserAgent,
    /// A headless or automated browser (HeadlessChrome, PhantomJS, Lighthouse…).
    HeadlessBrowser,
    /// A known crawler, bot or HTTP library.
    Bot,
    /// The client address is in one of the site's excluded ranges.
    ExcludedIp,
}

impl DropReason {
    /// Every reason, for metrics that list each one from the start.
    pub const ALL: [DropReason; 4] =
        [DropReason::EmptyUserAgent, DropReason::HeadlessBrowser, DropReason::Bot, DropReason::ExcludedIp];

    /// A stable label, for metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::EmptyUserAgent => "empty_user_agent",
            DropReason::HeadlessBrowser => "headless_browser",
            DropReason::Bot => "bot",
            DropReason::ExcludedIp => "excluded_ip",
        }
    }
}

impl std::fmt::Display for DropReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Product tokens of headless and automation browsers, compared without regard to case.
const HEADLESS_TOKENS: &[&str] = &[
    "headlesschrome",
    "headlessedg",
    "phantomjs",
    "slimerjs",
    "lighthouse",
    "puppeteer",
    "playwright",
    "selenium",
    "webdriver",
];

/// The bot list, compiled once, and the verdicts on the User-Agents seen lately: a site's
/// visitors send a few thousand distinct User-Agents, each many times, and the list is one large
/// regular expression (about a microsecond a User-Agent).
pub struct BotDetector {
    bots: isbot::Bots,
    verdicts: Recent<Option<DropReason>, { BotDetector::CACHE_CAPACITY }>,
}

impl std::fmt::Debug for BotDetector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BotDetector")
    }
}

impl Default for BotDetector {
    fn default() -> Self {
        Self::new()
    }
}

impl BotDetector {
    /// Compiles the `isbot` list.
    pub fn new() -> Self {
        BotDetector { bots: isbot::Bots::default(), verdicts: Recent::new() }
    }

    /// Most verdicts remembered: at most about 5 MB, at the longest User-Agent events keep.
    pub const CACHE_CAPACITY: usize = 4096;

    /// Why `user_agent` is not a person's browser, if it is not: empty, headless, or a listed
    /// bot. From the cache when it was seen lately.
    pub fn check_user_agent(&self, user_agent: &str) -> Option<DropReason> {
        self.verdicts.get_or(user_agent, |ua| self.check_user_agent_uncached(ua))
    }

    /// [`BotDetector::check_user_agent`], always matched against the lists.
    pub fn check_user_agent_uncached(&self, user_agent: &str) -> Option<DropReason> {
        if user_agent.trim().is_empty() {
            return Some(DropReason::EmptyUserAgent);
        }
        let lower = user_agent.to_ascii_lowercase();
        if HEADLESS_TOKENS.iter().any(|t| lower.contains(t)) {
            return Some(DropReason::HeadlessBrowser);
        }
        if self.bots.is_bot(user_agent) {
            return Some(DropReason::Bot);
        }
        None
    }
}

/// [`DropReason::ExcludedIp`] when `client` is in the site's `excluded` ranges.
pub fn check_ip(client: IpAddr, excluded: &IpRanges) -> Option<DropReason> {
    excluded.contains(client).then_some(DropReason::ExcludedIp)
}
