//! Enrichment of a validated [`Event`]: the client's address, bots dropped by reason, browser, OS
//! and device type, source and referrer, and country. Pure computation over data compiled into the
//! binary or read at start-up; nothing here touches the network.
//!
//! ```
//! use analytics::enrich::{Enricher, EnricherConfig, SiteContext};
//! use analytics::event::{Event, Hostname, Limits, RawEvent};
//!
//! let enricher = Enricher::new(EnricherConfig::default()).unwrap();
//! let mut raw = RawEvent::pageview("https://example.com/?utm_source=google", "example.com");
//! raw.user_agent = "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0".into();
//! let event = Event::parse(raw, &Limits::default()).unwrap();
//! let domains = [Hostname::parse("example.com").unwrap()];
//! let site = SiteContext { domains: &domains, excluded_ips: &Default::default() };
//! let e = enricher.enrich(&event, &site).unwrap();
//! assert_eq!((e.client.browser.name.as_str(), e.client.os.name.as_str(), e.source.as_deref()), ("Firefox", "Linux", Some("Google")));
//! ```
//!
//! The order of the checks is the cheapest first: the client address and the site's excluded
//! ranges, then the User-Agent against the bot lists, and only then the User-Agent patterns.

pub mod bot;
pub mod geo;
pub mod ip;
mod recent;
pub mod referrer;
pub mod ua;

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

pub use bot::{BotDetector, DropReason};
pub use geo::{CountryCode, CountryResolver, GeoDb, Place};
pub use ip::{IpRanges, client_ip};
pub use referrer::{Attribution, ReferrerDb};
pub use ua::{Browser, ClientInfo, DeviceType, Os, UserAgentParser};

use crate::event::{Event, Hostname};

/// Process-wide enrichment settings, from Tally's configuration.
#[derive(Debug, Clone, Default)]
pub struct EnricherConfig {
    /// An MMDB country or city database to read at start-up; `None` uses the bundled country
    /// database ([`GeoDb::bundled`]).
    pub mmdb_path: Option<PathBuf>,
    /// CDN country headers to trust (lower-case names, see [`geo::CDN_COUNTRY_HEADERS`]); empty
    /// to ignore them.
    pub country_headers: Vec<String>,
    /// Proxies whose forwarding headers are believed.
    pub trusted_proxies: IpRanges,
}

/// Why the enricher could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EnrichError {
    /// The User-Agent patterns did not load.
    #[error(transparent)]
    UserAgents(#[from] ua::UaParserError),
    /// The referrer list did not load.
    #[error(transparent)]
    Referrers(#[from] referrer::ReferrerDbError),
    /// The MMDB file could not be read.
    #[error(transparent)]
    Geo(#[from] geo::GeoError),
}

/// What enrichment needs to know about the event's site.
#[derive(Debug, Clone, Copy)]
pub struct SiteContext<'a> {
    /// The site's domains; referrers on them or their subdomains are self-referrals.
    pub domains: &'a [Hostname],
    /// Client ranges whose events the site drops.
    pub excluded_ips: &'a IpRanges,
}

/// What enrichment adds to an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enrichment {
    /// The client's address (for the visitor id only; never stored).
    pub client_ip: IpAddr,
    /// The browser, operating system and device type, from the User-Agent: shared with the
    /// parser's cache of recent User-Agents, so an event costs no copy of them.
    pub client: Arc<ClientInfo>,
    /// The source; `None` is direct.
    pub source: Option<String>,
    /// The referrer as `host/path`, unless absent or a self-referral.
    pub referrer: Option<String>,
    /// The country, when known.
    pub country: Option<CountryCode>,
    /// The region, when a city database knows it.
    pub region: Option<String>,
    /// The city, when a city database knows it.
    pub city: Option<String>,
}

/// The screen size class of a window or screen `width` wide, by Plausible's bounds: `Mobile`
/// below 576 pixels, `Tablet` below 992, `Laptop` below 1440, `Desktop` from 1440.
pub fn screen_class(width: u32) -> &'static str {
    match width {
        0..576 => "Mobile",
        576..992 => "Tablet",
        992..1440 => "Laptop",
        _ => "Desktop",
    }
}

/// Everything enrichment loads once per process; share it behind an `Arc`.
#[derive(Debug)]
pub struct Enricher {
    user_agents: UserAgentParser,
    bots: BotDetector,
    referrers: ReferrerDb,
    countries: CountryResolver,
    trusted_proxies: IpRanges,
}

impl Enricher {
    /// Loads the embedded lists and the configured MMDB file.
    pub fn new(config: EnricherConfig) -> Result<Self, EnrichError> {
        let db = match config.mmdb_path.as_deref() {
            Some(path) => Arc::new(GeoDb::open(path)?),
            None => GeoDb::bundled(),
        };
        Ok(Enricher {
            user_agents: UserAgentParser::new()?,
            bots: BotDetector::new(),
            referrers: ReferrerDb::new()?,
            countries: CountryResolver { db: Some(db), headers: config.country_headers },
            trusted_proxies: config.trusted_proxies,
        })
    }

    /// Uses an MMDB database already loaded, in place of the configured file.
    pub fn with_geo(mut self, db: GeoDb) -> Self {
        self.countries.db = Some(Arc::new(db));
        self
    }

    /// Knows no place but what CDN headers say (tests that want no country from addresses).
    pub fn without_geo(mut self) -> Self {
        self.countries.db = None;
        self
    }

    /// The client's address of `event`.
    pub fn client_ip(&self, event: &Event) -> IpAddr {
        client_ip(event.peer_ip, &event.headers, &self.trusted_proxies)
    }

    /// Enriches `event` for `site`, or says why it is dropped.
    pub fn enrich(&self, event: &Event, site: &SiteContext<'_>) -> Result<Enrichment, DropReason> {
        self.enrich_with(event, site, false)
    }

    /// Like [`Enricher::enrich`] for an imported event that names its visitor: one without a
    /// User-Agent is kept (the source told people from bots already, and a Tally export has
    /// none); one with a User-Agent is checked as any other.
    pub fn enrich_import(&self, event: &Event, site: &SiteContext<'_>) -> Result<Enrichment, DropReason> {
        self.enrich_with(event, site, true)
    }

    fn enrich_with(&self, event: &Event, site: &SiteContext<'_>, named: bool) -> Result<Enrichment, DropReason> {
        let client_ip = self.client_ip(event);
        if let Some(reason) = bot::check_ip(client_ip, site.excluded_ips) {
            return Err(reason);
        }
        if !(named && event.user_agent.is_empty())
            && let Some(reason) = self.bots.check_user_agent(&event.user_agent)
        {
            return Err(reason);
        }
        let client = self.user_agents.parse(&event.user_agent);
        if client.device == DeviceType::Bot {
            return Err(DropReason::Bot);
        }
        let attribution = self.referrers.attribute(&event.query, event.referrer.as_ref(), site.domains);
        let place = self.countries.place(client_ip, &event.headers);
        Ok(Enrichment {
            client_ip,
            client,
            source: attribution.source,
            referrer: attribution.referrer,
            country: place.country,
            region: place.region,
            city: place.city,
        })
    }

    /// The User-Agent parser.
    pub fn user_agents(&self) -> &UserAgentParser {
        &self.user_agents
    }

    /// The bot lists.
    pub fn bots(&self) -> &BotDetector {
        &self.bots
    }

    /// The referrer list.
    pub fn referrers(&self) -> &ReferrerDb {
        &self.referrers
    }
}

#[cfg(test)]
mod tests;
