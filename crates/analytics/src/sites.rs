//! Sites, their domains and goals, and site API keys, on Tally's table.
//!
//! Ingestion resolves every event's domain (or Umami website id) to a site, and the Stats API
//! authenticates every request by its key, so both are cached for a few seconds: a steady stream
//! of events costs no reads. A change (a new goal, a revoked key) is seen by every process within
//! [`CACHE_TTL`].
//!
//! API keys are random 32-byte values shown once; the table keeps only their SHA-256, so a copy
//! of the table gives no usable key.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use model::ops::TxWrite;
use model::{Record, Table};
use sha2::{Digest, Sha256};
use store::{AttributeValue, item};

use crate::aggregate::{AggregateError, SiteSettings, SiteSettingsSource};
use crate::enrich::IpRanges;
use crate::event::Hostname;
use crate::goal::{Goal, GoalError};
use crate::period::SiteZone;
use crate::ttl_cache::Cached;
use crate::visitor::Salt;

/// How long a cached site or key is trusted.
pub const CACHE_TTL: Duration = Duration::from_secs(5);

/// The prefix of Tally's API keys, so a leaked key is recognisable in logs and scanners.
pub const KEY_PREFIX: &str = "tly_";

/// Most excluded address ranges one site keeps (every event is checked against them).
pub const MAX_EXCLUDED_RANGES: usize = 1000;

/// What can go wrong with sites and keys.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SitesError {
    /// The table could not be read or written.
    #[error(transparent)]
    Model(#[from] model::Error),
    /// The domain is not a host name.
    #[error("{0:?} is not a domain name (write it as example.com, without scheme or path)")]
    InvalidDomain(String),
    /// The time zone is not an IANA zone.
    #[error("{0:?} is not an IANA time zone (such as Europe/Berlin)")]
    InvalidTimezone(String),
    /// Another site already has the domain.
    #[error("the domain {0} already belongs to a site")]
    DomainTaken(String),
    /// A retention is out of range.
    #[error("{name} must be between 1 and a few thousand days, not {days}")]
    InvalidRetention {
        /// The setting.
        name: &'static str,
        /// The value given.
        days: u32,
    },
    /// An excluded address range does not parse.
    #[error(transparent)]
    InvalidIpRange(#[from] crate::enrich::ip::IpRangeError),
    /// More excluded address ranges than a site keeps.
    #[error("a site excludes at most {MAX_EXCLUDED_RANGES} address ranges, not {0}")]
    TooManyIpRanges(usize),
    /// No site has this id or domain.
    #[error("no site {0:?}")]
    NoSuchSite(String),
    /// The goal is not valid.
    #[error(transparent)]
    Goal(#[from] GoalError),
    /// A funnel or a segment is not valid.
    #[error("{0}")]
    InvalidFunnel(String),
    /// A revenue goal's currency is not three letters.
    #[error("a revenue goal's currency is an ISO 4217 code of three letters, not {0:?}")]
    InvalidCurrency(String),
    /// No key of the site has this id.
    #[error("the site has no API key {0:?}")]
    NoSuchKey(String),
    /// An item in the table does not read back.
    #[error("a stored {entity} is malformed: {message}")]
    Corrupt {
        /// The name of the schema entity whose item is malformed (`Site`, `Funnel`, …).
        entity: &'static str,
        /// What is wrong.
        message: String,
    },
}

/// Settings to change on a site; `None` leaves one as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SiteChanges {
    /// A new IANA time zone.
    pub timezone: Option<String>,
    /// Days raw events are kept.
    pub retention_event_days: Option<u32>,
    /// Days hourly aggregates are kept.
    pub retention_hourly_days: Option<u32>,
    /// Days daily aggregates are kept.
    pub retention_daily_days: Option<u32>,
    /// Client addresses whose events are dropped (counted as `excluded_ip`): addresses or CIDR
    /// ranges, replacing the site's list; an empty list clears it.
    pub excluded_ip_ranges: Option<Vec<String>>,
}

/// A site's id: a ULID for every site Tally creates, kept as the text the table holds. Events,
/// cached sessions and blocks each carry their site's, so it is shared, not copied: a clone
/// is a reference count.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SiteId(Arc<str>);

impl SiteId {
    /// The id `text`.
    pub fn new(text: &str) -> SiteId {
        SiteId(Arc::from(text))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for SiteId {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for SiteId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for SiteId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl From<&str> for SiteId {
    fn from(text: &str) -> SiteId {
        SiteId::new(text)
    }
}

impl From<String> for SiteId {
    fn from(text: String) -> SiteId {
        SiteId(Arc::from(text))
    }
}

impl PartialEq<str> for SiteId {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for SiteId {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl PartialEq<String> for SiteId {
    fn eq(&self, other: &String) -> bool {
        *self.0 == **other
    }
}

impl PartialEq<SiteId> for str {
    fn eq(&self, other: &SiteId) -> bool {
        self == &*other.0
    }
}

impl PartialEq<SiteId> for &str {
    fn eq(&self, other: &SiteId) -> bool {
        *self == &*other.0
    }
}

impl PartialEq<SiteId> for String {
    fn eq(&self, other: &SiteId) -> bool {
        **self == *other.0
    }
}

impl std::fmt::Display for SiteId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::fmt::Debug for SiteId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

/// Written as its text.
impl serde::Serialize for SiteId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

/// A tracked site.
#[derive(Debug, Clone)]
pub struct Site {
    /// Its id (a ULID).
    pub site_id: SiteId,
    /// Its main domain.
    pub domain: String,
    /// The domains whose referrers are self-referrals (the main domain).
    pub domains: Vec<Hostname>,
    /// The Umami website id (a UUID) Umami's tracker sends for it.
    pub umami_id: String,
    /// Its time zone.
    pub zone: SiteZone,
    /// Days raw events are kept.
    pub retention_event_days: u32,
    /// Days hourly aggregates are kept.
    pub retention_hourly_days: u32,
    /// Days daily aggregates are kept.
    pub retention_daily_days: u32,
    /// The first instant (epoch ms) from which its weekly aggregates hold every event: 0 for a
    /// site created with them, the first start of a Tally that writes them for an older site
    /// ([`Sites::mark_weekly_aggregates`]), `i64::MAX` until then. Ranges read weeks only from here.
    pub weeks_from_ms: i64,
    /// Client ranges whose events are dropped.
    pub excluded_ips: IpRanges,
    /// The pages and events that count as its conversions.
    pub goals: Vec<SiteGoal>,
    /// Its saved funnels, oldest first.
    pub funnels: Vec<SiteFunnel>,
    /// Its saved segments, oldest first.
    pub segments: Vec<SiteSegment>,
    /// The secret imported events' visitor ids are hashed under (their days' salts are gone):
    /// random per site, never shown. `None` for a site stored before imports had one, until its
    /// first import ([`Sites::import_salt`]).
    pub import_salt: Option<Salt>,
}

/// A goal of a site.
#[derive(Debug, Clone)]
pub struct SiteGoal {
    /// Its id (a ULID).
    pub goal_id: String,
    /// What completes it: a page visited or an event of a name.
    pub goal: Goal,
    /// For a revenue goal, the ISO 4217 currency its revenue is counted in (upper-case); events
    /// completing it with revenue in another currency add none (Tally converts no currencies).
    pub currency: Option<String>,
}

/// A saved funnel of a site.
#[derive(Debug, Clone)]
pub struct SiteFunnel {
    /// Its id (a ULID).
    pub funnel_id: String,
    /// What its owner called it.
    pub name: String,
    /// Its steps in order: page patterns and event names, as goals are.
    pub steps: Vec<Goal>,
}

/// A saved segment of a site: filters under a name.
#[derive(Debug, Clone)]
pub struct SiteSegment {
    /// Its id (a ULID).
    pub segment_id: String,
    /// What its owner called it.
    pub name: String,
    /// The filters it stands for (none names a segment).
    pub filters: Vec<crate::stats::Filter>,
}

/// The most segments a site keeps.
pub const MAX_SEGMENTS: usize = 100;

/// The most funnels a site keeps.
pub const MAX_FUNNELS: usize = 50;

/// The longest funnel name, in characters.
pub const MAX_FUNNEL_NAME: usize = 120;

/// What a site API key may do on its site. A key holds one or more; `Admin` allows everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Scope {
    /// Read statistics: the Stats API, funnels, realtime. The default of a new key.
    Stats,
    /// Read, export and erase visitors' sessions and events.
    Visitors,
    /// Import events with their own timestamps.
    Import,
    /// Everything on the key's site, settings, goals, keys and shared links included.
    Admin,
}

impl Scope {
    /// Every scope, in order.
    pub const ALL: [Scope; 4] = [Scope::Stats, Scope::Visitors, Scope::Import, Scope::Admin];

    /// What keys stored before scopes existed may do: what every key could then — all but
    /// `Admin`, which no key could do — so an upgrade breaks no integration. Revoke and re-issue
    /// such keys with the scopes they need.
    pub const LEGACY: [Scope; 3] = [Scope::Stats, Scope::Visitors, Scope::Import];

    /// Its name: `stats`, `visitors`, `import` or `admin`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Stats => "stats",
            Scope::Visitors => "visitors",
            Scope::Import => "import",
            Scope::Admin => "admin",
        }
    }

    /// The scope named `name` (any case).
    pub fn parse(name: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|s| s.as_str().eq_ignore_ascii_case(name.trim()))
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A site API key, without the key itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyInfo {
    /// Its id (a ULID), for revoking.
    pub key_id: String,
    /// The site it opens.
    pub site_id: String,
    /// What its owner called it.
    pub name: String,
    /// Whether it was revoked.
    pub revoked: bool,
    /// What it may do, sorted, never empty.
    pub scopes: Vec<Scope>,
    /// Whether it was stored before keys had scopes, so holds [`Scope::LEGACY`].
    pub legacy: bool,
}

impl ApiKeyInfo {
    /// Whether the key may do what `scope` allows.
    pub fn allows(&self, scope: Scope) -> bool {
        self.scopes.contains(&Scope::Admin) || self.scopes.contains(&scope)
    }
}

/// Sites, goals and keys, with short-lived caches. Share it behind an `Arc`.
#[derive(Debug)]
pub struct Sites {
    table: Table,
    by_id: Cached<Arc<Site>>,
    by_domain: Cached<Arc<str>>,
    by_key: Cached<ApiKeyInfo>,
}

/// Most answers each of the sites, domains and keys caches keeps.
const CACHE_CAP: usize = 100_000;

fn corrupt(entity: &'static str) -> impl Fn(model::Error) -> SitesError {
    move |e| SitesError::Corrupt { entity, message: e.to_string() }
}

fn hash_key(key: &str) -> String {
    let digest = Sha256::digest(key.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

fn u32_of(record: &Record, name: &str, default: u32) -> u32 {
    record.opt_i64(name).ok().flatten().and_then(|v| u32::try_from(v).ok()).unwrap_or(default)
}

/// The key under which an Umami website id maps to its site, beside the domains.
fn umami_alias(uuid: &str) -> String {
    format!("umami:{}", uuid.to_ascii_lowercase())
}

impl Sites {
    /// Sites on `table`.
    pub fn new(table: Table) -> Self {
        Sites {
            table,
            by_id: Cached::new(CACHE_TTL, CACHE_CAP),
            by_domain: Cached::new(CACHE_TTL, CACHE_CAP),
            by_key: Cached::new(CACHE_TTL, CACHE_CAP),
        }
    }

    /// Adds a site for `domain` in time zone `timezone`.
    pub async fn add(&self, domain: &str, timezone: &str) -> Result<Site, SitesError> {
        let host = Hostname::parse(domain)
            .filter(|h| h.as_str().contains('.') || h.as_str() == "localhost")
            .ok_or_else(|| SitesError::InvalidDomain(domain.to_owned()))?;
        SiteZone::new(timezone).map_err(|_| SitesError::InvalidTimezone(timezone.to_owned()))?;
        let site_id = ulid::Ulid::new().to_string();
        let umami_id = uuid_v4();
        let writes = vec![
            TxWrite::create(
                "Site",
                item! {
                    "site_id" => site_id.as_str(),
                    "domain" => host.as_str(),
                    "timezone" => timezone,
                    "umami_id" => umami_id.as_str(),
                    // Created with weekly aggregates: every week of it is complete.
                    "weeks_from" => 0,
                    "import_salt" => Salt::random().as_bytes().to_vec(),
                },
            ),
            TxWrite::create("SiteDomain", item! { "domain" => host.as_str(), "site_id" => site_id.as_str() }),
            TxWrite::create(
                "SiteDomain",
                item! { "domain" => umami_alias(&umami_id).as_str(), "site_id" => site_id.as_str() },
            ),
        ];
        match self.table.transact_write(writes).await {
            Ok(_) => {}
            Err(e) if e.is_condition_failed() || e.is_already_exists() || e.is_transaction_canceled() => {
                return Err(SitesError::DomainTaken(host.as_str().to_owned()));
            }
            Err(e) => return Err(e.into()),
        }
        // This process may have cached "no such site" for the domain a moment ago.
        self.by_domain.remove(host.as_str());
        self.by_domain.remove(&umami_alias(&umami_id));
        self.get(&site_id).await?.ok_or(SitesError::NoSuchSite(site_id))
    }

    /// Every site.
    pub async fn list(&self) -> Result<Vec<Site>, SitesError> {
        let records = self.table.query("Site").index("gsi1").key(item! {}).all().await?;
        let mut sites = Vec::with_capacity(records.len());
        for r in records {
            let id = r.string("site_id").map_err(corrupt("Site"))?.to_owned();
            if let Some(site) = self.load(&id).await? {
                sites.push(site);
            }
        }
        Ok(sites)
    }

    /// Reads a site and its goals (one Query), bypassing the cache.
    async fn load(&self, site_id: &str) -> Result<Option<Site>, SitesError> {
        let records = self
            .table
            .collection(&["Site", "Goal", "Funnel", "Segment"])
            .key(item! { "site_id" => site_id })
            .all()
            .await?;
        let Some(site) = records.iter().find(|r| r.entity() == "Site") else {
            return Ok(None);
        };
        let domain = site.string("domain").map_err(corrupt("Site"))?.to_owned();
        let timezone = site.opt_string("timezone").ok().flatten().unwrap_or("UTC");
        let zone =
            SiteZone::new(timezone).map_err(|e| SitesError::Corrupt { entity: "Site", message: e.to_string() })?;
        let excluded: Vec<String> =
            site.string_set("excluded_ip_ranges").map(|s| s.into_iter().collect()).unwrap_or_default();
        let excluded_ips = IpRanges::parse(excluded.iter().map(String::as_str))
            .map_err(|e| SitesError::Corrupt { entity: "Site", message: e.to_string() })?;
        let mut goals = Vec::new();
        for g in records.iter().filter(|r| r.entity() == "Goal") {
            let goal_id = g.string("goal_id").map_err(corrupt("Goal"))?.to_owned();
            let goal = match g.string("kind").map_err(corrupt("Goal"))? {
                "page" => Goal::page(g.string("page_path").map_err(corrupt("Goal"))?)?,
                _ => Goal::event(g.string("event_name").map_err(corrupt("Goal"))?)?,
            };
            let currency = g.opt_string("currency").map_err(corrupt("Goal"))?.map(str::to_owned);
            goals.push(SiteGoal { goal_id, goal, currency });
        }
        let mut funnels = Vec::new();
        for f in records.iter().filter(|r| r.entity() == "Funnel") {
            let steps = match f.get("steps") {
                Some(AttributeValue::L(list)) => list.iter().map(step_from_value).collect::<Result<Vec<_>, _>>()?,
                _ => return Err(SitesError::Corrupt { entity: "Funnel", message: "no steps".into() }),
            };
            funnels.push(SiteFunnel {
                funnel_id: f.string("funnel_id").map_err(corrupt("Funnel"))?.to_owned(),
                name: f.string("name").map_err(corrupt("Funnel"))?.to_owned(),
                steps,
            });
        }
        let mut segments = Vec::new();
        for g in records.iter().filter(|r| r.entity() == "Segment") {
            let filters = match g.get("filters") {
                Some(AttributeValue::L(list)) => list.iter().map(filter_from_value).collect::<Result<Vec<_>, _>>(),
                _ => Err(SitesError::Corrupt { entity: "Segment", message: "no filters".into() }),
            };
            // A segment this Tally cannot read (written by hand, or by a later version with a
            // dimension this one lacks) is left out, not the whole site: the site's
            // ingestion and every other question go on, and the log says which.
            let filters = match filters {
                Ok(filters) => filters,
                Err(e) => {
                    tracing::warn!(site = %site_id, segment = ?g.opt_string("segment_id").ok().flatten(), error = %e, "a saved segment cannot be read; it is left out");
                    continue;
                }
            };
            segments.push(SiteSegment {
                segment_id: g.string("segment_id").map_err(corrupt("Segment"))?.to_owned(),
                name: g.string("name").map_err(corrupt("Segment"))?.to_owned(),
                filters,
            });
        }
        let mut extra: Vec<String> =
            site.string_set("extra_domains").map(|s| s.into_iter().collect()).unwrap_or_default();
        extra.sort();
        Ok(Some(Site {
            site_id: SiteId::new(site_id),
            domains: std::iter::once(domain.as_str())
                .chain(extra.iter().map(String::as_str))
                .filter_map(Hostname::parse)
                .collect(),
            domain,
            umami_id: site.opt_string("umami_id").ok().flatten().unwrap_or_default().to_owned(),
            zone,
            retention_event_days: u32_of(site, "retention_event_days", 730),
            retention_hourly_days: u32_of(site, "retention_hourly_days", 90),
            retention_daily_days: u32_of(site, "retention_daily_days", 730),
            weeks_from_ms: site.opt_i64("weeks_from").ok().flatten().unwrap_or(i64::MAX),
            excluded_ips,
            goals,
            funnels,
            segments,
            import_salt: site.bytes("import_salt").ok().and_then(|b| Salt::from_bytes(b).ok()),
        }))
    }

    /// The site `site_id` (cached for [`CACHE_TTL`]).
    pub async fn get(&self, site_id: &str) -> Result<Option<Site>, SitesError> {
        Ok(self.get_shared(site_id).await?.map(|s| (*s).clone()))
    }

    /// [`Sites::get`], shared with the cache rather than copied: ingestion looks its site up for
    /// every event, and a site with goals, funnels and segments is not small.
    pub async fn get_shared(&self, site_id: &str) -> Result<Option<Arc<Site>>, SitesError> {
        self.by_id.get_or_load(site_id, || async { Ok(self.load(site_id).await?.map(Arc::new)) }).await
    }

    async fn site_of_alias(&self, alias: &str) -> Result<Option<Arc<Site>>, SitesError> {
        let site_id = self
            .by_domain
            .get_or_load(alias, || async {
                match self.table.get("SiteDomain", item! { "domain" => alias }).await? {
                    Some(r) => Ok(Some(r.string("site_id").map_err(corrupt("SiteDomain"))?.into())),
                    None => Ok::<_, SitesError>(None),
                }
            })
            .await?;
        match site_id {
            Some(id) => self.get_shared(&id).await,
            None => Ok(None),
        }
    }

    /// The site of `domain` (without `www.`), if any.
    pub async fn by_domain(&self, domain: &str) -> Result<Option<Site>, SitesError> {
        Ok(self.by_domain_shared(domain).await?.map(|s| (*s).clone()))
    }

    /// [`Sites::by_domain`], shared with the cache (see [`Sites::get_shared`]).
    pub async fn by_domain_shared(&self, domain: &str) -> Result<Option<Arc<Site>>, SitesError> {
        match Hostname::parse(domain) {
            Some(host) => self.site_of_alias(host.as_str()).await,
            None => Ok(None),
        }
    }

    /// [`Sites::by_domain_shared`] of a host name parsed already (an event's domains): not parsed
    /// again where that would give it back unchanged.
    pub async fn by_hostname_shared(&self, host: &Hostname) -> Result<Option<Arc<Site>>, SitesError> {
        if host.is_canonical() {
            self.site_of_alias(host.as_str()).await
        } else {
            self.by_domain_shared(host.as_str()).await
        }
    }

    /// The site of an Umami website id.
    pub async fn by_umami_id(&self, uuid: &str) -> Result<Option<Site>, SitesError> {
        Ok(self.by_umami_id_shared(uuid).await?.map(|s| (*s).clone()))
    }

    /// [`Sites::by_umami_id`], shared with the cache (see [`Sites::get_shared`]).
    pub async fn by_umami_id_shared(&self, uuid: &str) -> Result<Option<Arc<Site>>, SitesError> {
        if uuid.len() > 64 {
            return Ok(None);
        }
        self.site_of_alias(&umami_alias(uuid)).await
    }

    /// The site named by its id or its domain.
    pub async fn resolve(&self, id_or_domain: &str) -> Result<Option<Site>, SitesError> {
        if id_or_domain.len() == 26
            && let Some(site) = self.get(id_or_domain).await?
        {
            return Ok(Some(site));
        }
        self.by_domain(id_or_domain).await
    }

    /// Removes a site, its domains, goals and keys. Its events and aggregates are left to expire
    /// by their TTLs (monthly aggregates are kept; a site added again gets a new id).
    pub async fn remove(&self, site_id: &str) -> Result<bool, SitesError> {
        let Some(site) = self.load(site_id).await? else {
            return Ok(false);
        };
        for key in self.keys(site_id).await? {
            let _ = self.revoke_key(site_id, &key.key_id).await;
            if let Some(hash) = self.key_hash_of(site_id, &key.key_id).await? {
                self.table.delete("ApiKey", item! { "key_hash" => hash.as_str() }).await?;
            }
        }
        for goal in &site.goals {
            self.table.delete("Goal", item! { "site_id" => site_id, "goal_id" => goal.goal_id.as_str() }).await?;
        }
        for segment in &site.segments {
            self.table
                .delete("Segment", item! { "site_id" => site_id, "segment_id" => segment.segment_id.as_str() })
                .await?;
        }
        for funnel in &site.funnels {
            self.table
                .delete("Funnel", item! { "site_id" => site_id, "funnel_id" => funnel.funnel_id.as_str() })
                .await?;
        }
        for domain in &site.domains {
            self.table.delete("SiteDomain", item! { "domain" => domain.as_str() }).await?;
        }
        if !site.umami_id.is_empty() {
            self.table.delete("SiteDomain", item! { "domain" => umami_alias(&site.umami_id).as_str() }).await?;
        }
        self.table.delete("Site", item! { "site_id" => site_id }).await?;
        self.by_id.remove(site_id);
        self.by_domain.clear();
        Ok(true)
    }

    /// Adds a goal to a site.
    pub async fn add_goal(&self, site_id: &str, goal: Goal) -> Result<SiteGoal, SitesError> {
        self.add_goal_with_currency(site_id, goal, None).await
    }

    /// Adds a goal to a site; with a currency (three letters, ISO 4217), a revenue goal.
    pub async fn add_goal_with_currency(
        &self,
        site_id: &str,
        goal: Goal,
        currency: Option<&str>,
    ) -> Result<SiteGoal, SitesError> {
        let currency = match currency.map(str::trim) {
            None => None,
            Some(c) if c.len() == 3 && c.bytes().all(|b| b.is_ascii_alphabetic()) => Some(c.to_ascii_uppercase()),
            Some(c) => return Err(SitesError::InvalidCurrency(c.to_owned())),
        };
        if self.load(site_id).await?.is_none() {
            return Err(SitesError::NoSuchSite(site_id.to_owned()));
        }
        let goal_id = ulid::Ulid::new().to_string();
        let mut fields = item! {
            "site_id" => site_id,
            "goal_id" => goal_id.as_str(),
            "display_name" => goal.display_name(),
        };
        match &goal {
            Goal::Page(pattern) => {
                fields.insert("kind".into(), "page".into());
                fields.insert("page_path".into(), pattern.as_str().into());
            }
            Goal::Event(name) => {
                fields.insert("kind".into(), "event".into());
                fields.insert("event_name".into(), name.as_str().into());
            }
        }
        if let Some(c) = &currency {
            fields.insert("currency".into(), c.as_str().into());
        }
        self.table.create("Goal", fields).await?;
        self.by_id.remove(site_id);
        Ok(SiteGoal { goal_id, goal, currency })
    }

    /// Adds another domain to a site: its events are taken, and its referrers are self-referrals.
    pub async fn add_domain(&self, site_id: &str, domain: &str) -> Result<Site, SitesError> {
        let host = Hostname::parse(domain)
            .filter(|h| h.as_str().contains('.') || h.as_str() == "localhost")
            .ok_or_else(|| SitesError::InvalidDomain(domain.to_owned()))?;
        if self.load(site_id).await?.is_none() {
            return Err(SitesError::NoSuchSite(site_id.to_owned()));
        }
        let add = store::AttributeValue::Ss([host.as_str().to_owned()].into());
        let writes = vec![
            TxWrite::create("SiteDomain", item! { "domain" => host.as_str(), "site_id" => site_id }),
            TxWrite::update(
                "Site",
                item! { "site_id" => site_id },
                model::expr::Update::new().add("extra_domains", add),
            ),
        ];
        match self.table.transact_write(writes).await {
            Ok(_) => {}
            Err(e) if e.is_condition_failed() || e.is_already_exists() || e.is_transaction_canceled() => {
                return Err(SitesError::DomainTaken(host.as_str().to_owned()));
            }
            Err(e) => return Err(e.into()),
        }
        self.forget(site_id, host.as_str());
        self.get(site_id).await?.ok_or_else(|| SitesError::NoSuchSite(site_id.to_owned()))
    }

    /// Removes a domain added with [`Sites::add_domain`] (the main domain stays).
    pub async fn remove_domain(&self, site_id: &str, domain: &str) -> Result<Site, SitesError> {
        let site = self.load(site_id).await?.ok_or_else(|| SitesError::NoSuchSite(site_id.to_owned()))?;
        let host = Hostname::parse(domain).ok_or_else(|| SitesError::InvalidDomain(domain.to_owned()))?;
        if host.as_str() == site.domain || !site.domains.iter().any(|d| d.as_str() == host.as_str()) {
            return Err(SitesError::InvalidDomain(format!("{domain} (not an added domain of this site)")));
        }
        let remove = store::AttributeValue::Ss([host.as_str().to_owned()].into());
        self.table
            .update("Site", item! { "site_id" => site_id }, model::expr::Update::new().delete("extra_domains", remove))
            .await?;
        self.table.delete("SiteDomain", item! { "domain" => host.as_str() }).await?;
        self.forget(site_id, host.as_str());
        self.get(site_id).await?.ok_or_else(|| SitesError::NoSuchSite(site_id.to_owned()))
    }

    /// The site's import salt ([`Site::import_salt`]), created on first use for a site stored
    /// without one; every process gets the same one.
    pub async fn import_salt(&self, site: &Site) -> Result<Salt, SitesError> {
        if let Some(salt) = &site.import_salt {
            return Ok(salt.clone());
        }
        let fresh = Salt::random().as_bytes().to_vec();
        let update =
            model::expr::Update::new().set("import_salt", model::expr::SetOperand::if_not_exists("import_salt", fresh));
        let record = self.table.update("Site", item! { "site_id" => site.site_id.as_str() }, update).await?;
        let salt = record
            .bytes("import_salt")
            .ok()
            .and_then(|b| Salt::from_bytes(b).ok())
            .ok_or(SitesError::Corrupt { entity: "Site", message: "the import salt does not read back".into() })?;
        self.forget(&site.site_id, &site.domain);
        Ok(salt)
    }

    /// One uncached read of the table (a domain no site has), for health checks.
    pub async fn ping(&self) -> Result<(), SitesError> {
        self.table.get_with("SiteDomain", item! { "domain" => "health-check.invalid" }, false).await?;
        Ok(())
    }

    fn forget(&self, site_id: &str, domain: &str) {
        self.by_id.remove(site_id);
        self.by_domain.remove(domain);
    }

    /// Saves a funnel of 2 to 8 steps under `name` (trimmed; 1 to [`MAX_FUNNEL_NAME`]
    /// characters, no control characters); a site keeps at most [`MAX_FUNNELS`].
    pub async fn add_funnel(&self, site_id: &str, name: &str, steps: Vec<Goal>) -> Result<SiteFunnel, SitesError> {
        use crate::stats::{MAX_FUNNEL_STEPS, MIN_FUNNEL_STEPS};
        let site = self.load(site_id).await?.ok_or_else(|| SitesError::NoSuchSite(site_id.to_owned()))?;
        let name = name.trim();
        if name.is_empty() || name.chars().count() > MAX_FUNNEL_NAME || name.chars().any(char::is_control) {
            return Err(SitesError::InvalidFunnel(format!(
                "a funnel's name is 1 to {MAX_FUNNEL_NAME} characters without control characters"
            )));
        }
        if !(MIN_FUNNEL_STEPS..=MAX_FUNNEL_STEPS).contains(&steps.len()) {
            return Err(SitesError::InvalidFunnel(format!(
                "a funnel has {MIN_FUNNEL_STEPS} to {MAX_FUNNEL_STEPS} steps, not {}",
                steps.len()
            )));
        }
        if site.funnels.len() >= MAX_FUNNELS {
            return Err(SitesError::InvalidFunnel(format!("a site keeps at most {MAX_FUNNELS} funnels")));
        }
        let funnel_id = ulid::Ulid::new().to_string();
        let fields = item! {
            "site_id" => site_id,
            "funnel_id" => funnel_id.as_str(),
            "name" => name,
            "steps" => AttributeValue::L(steps.iter().map(step_to_value).collect()),
        };
        self.table.create("Funnel", fields).await?;
        self.by_id.remove(site_id);
        Ok(SiteFunnel { funnel_id, name: name.to_owned(), steps })
    }

    /// Saves a segment: `filters` (checked by the caller as a query's are, none naming a segment)
    /// under `name` (trimmed; 1 to [`MAX_FUNNEL_NAME`] characters, no control characters); a
    /// site keeps at most [`MAX_SEGMENTS`].
    pub async fn add_segment(
        &self,
        site_id: &str,
        name: &str,
        filters: Vec<crate::stats::Filter>,
    ) -> Result<SiteSegment, SitesError> {
        let site = self.load(site_id).await?.ok_or_else(|| SitesError::NoSuchSite(site_id.to_owned()))?;
        let name = name.trim();
        if name.is_empty() || name.chars().count() > MAX_FUNNEL_NAME || name.chars().any(char::is_control) {
            return Err(SitesError::InvalidFunnel(format!(
                "a segment's name is 1 to {MAX_FUNNEL_NAME} characters without control characters"
            )));
        }
        if filters.is_empty() || filters.len() > crate::stats::MAX_FILTERS {
            return Err(SitesError::InvalidFunnel(format!(
                "a segment has 1 to {} filters, not {}",
                crate::stats::MAX_FILTERS,
                filters.len()
            )));
        }
        if site.segments.len() >= MAX_SEGMENTS {
            return Err(SitesError::InvalidFunnel(format!("a site keeps at most {MAX_SEGMENTS} segments")));
        }
        let segment_id = ulid::Ulid::new().to_string();
        let fields = item! {
            "site_id" => site_id,
            "segment_id" => segment_id.as_str(),
            "name" => name,
            "filters" => AttributeValue::L(filters.iter().map(filter_to_value).collect()),
        };
        self.table.create("Segment", fields).await?;
        self.by_id.remove(site_id);
        Ok(SiteSegment { segment_id, name: name.to_owned(), filters })
    }

    /// Removes a saved segment; whether it existed.
    pub async fn remove_segment(&self, site_id: &str, segment_id: &str) -> Result<bool, SitesError> {
        self.remove_member("Segment", item! { "site_id" => site_id, "segment_id" => segment_id }, site_id).await
    }

    /// Removes a saved funnel; whether it existed.
    pub async fn remove_funnel(&self, site_id: &str, funnel_id: &str) -> Result<bool, SitesError> {
        self.remove_member("Funnel", item! { "site_id" => site_id, "funnel_id" => funnel_id }, site_id).await
    }

    /// Removes a goal from a site. Its past conversions stay in the aggregates under its name.
    pub async fn remove_goal(&self, site_id: &str, goal_id: &str) -> Result<bool, SitesError> {
        self.remove_member("Goal", item! { "site_id" => site_id, "goal_id" => goal_id }, site_id).await
    }

    /// Deletes an item of a site's collection (a goal, a funnel); whether it existed.
    async fn remove_member(&self, entity: &str, key: store::Item, site_id: &str) -> Result<bool, SitesError> {
        let existed = self.table.get(entity, key.clone()).await?.is_some();
        self.table.delete(entity, key).await?;
        self.by_id.remove(site_id);
        Ok(existed)
    }

    /// Changes a site's time zone and retention. A new time zone applies to events from now on;
    /// buckets already written keep the zone they were counted in until rebuilt
    /// (`tally aggregate --rebuild`).
    pub async fn update(&self, site_id: &str, changes: &SiteChanges) -> Result<Site, SitesError> {
        if self.load(site_id).await?.is_none() {
            return Err(SitesError::NoSuchSite(site_id.to_owned()));
        }
        let mut update = model::expr::Update::new();
        if let Some(tz) = &changes.timezone {
            SiteZone::new(tz).map_err(|_| SitesError::InvalidTimezone(tz.clone()))?;
            update = update.set("timezone", tz.as_str());
        }
        if let Some(ranges) = &changes.excluded_ip_ranges {
            if ranges.len() > MAX_EXCLUDED_RANGES {
                return Err(SitesError::TooManyIpRanges(ranges.len()));
            }
            let parsed = IpRanges::parse(ranges.iter().map(String::as_str))?;
            update = if parsed.is_empty() {
                update.remove("excluded_ip_ranges")
            } else {
                update.set("excluded_ip_ranges", store::AttributeValue::Ss(parsed.texts().into_iter().collect()))
            };
        }
        for (name, value, range) in [
            ("retention_event_days", changes.retention_event_days, 1..=3650),
            ("retention_hourly_days", changes.retention_hourly_days, 1..=3650),
            ("retention_daily_days", changes.retention_daily_days, 1..=36500),
        ] {
            if let Some(days) = value {
                if !range.contains(&days) {
                    return Err(SitesError::InvalidRetention { name, days });
                }
                update = update.set(name, i64::from(days));
            }
        }
        self.table.update("Site", item! { "site_id" => site_id }, update).await?;
        self.by_id.remove(site_id);
        self.get(site_id).await?.ok_or_else(|| SitesError::NoSuchSite(site_id.to_owned()))
    }

    /// Marks every site stored before weekly aggregates existed: its weeks are complete from
    /// `now_ms` on (events aggregated from now include them; earlier weeks are read as days).
    /// Idempotent, and a site already marked keeps its mark. Returns how many were marked.
    /// `tally serve` calls it at start.
    pub async fn mark_weekly_aggregates(&self, now_ms: i64) -> Result<usize, SitesError> {
        let mut marked = 0;
        for site in self.list().await? {
            if site.weeks_from_ms != i64::MAX {
                continue;
            }
            let update = model::expr::Update::new().set_if_absent("weeks_from", now_ms);
            match self.table.update("Site", item! { "site_id" => site.site_id.as_str() }, update).await {
                Ok(_) => marked += 1,
                // Removed meanwhile: nothing to mark.
                Err(model::Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
            self.by_id.remove(&site.site_id);
        }
        Ok(marked)
    }

    /// Creates an API key for a site with `scopes` (none is [`Scope::Stats`] alone): returns the
    /// key (shown once, never stored) and its record.
    pub async fn create_key(
        &self,
        site_id: &str,
        name: &str,
        scopes: &[Scope],
    ) -> Result<(String, ApiKeyInfo), SitesError> {
        let mut scopes = scopes.to_vec();
        if scopes.is_empty() {
            scopes.push(Scope::Stats);
        }
        scopes.sort();
        scopes.dedup();
        if self.load(site_id).await?.is_none() {
            return Err(SitesError::NoSuchSite(site_id.to_owned()));
        }
        let mut secret = [0u8; 32];
        rand::fill(&mut secret);
        let key = format!("{KEY_PREFIX}{}", secret.iter().map(|b| format!("{b:02x}")).collect::<String>());
        let key_id = ulid::Ulid::new().to_string();
        self.table
            .create(
                "ApiKey",
                item! {
                    "key_hash" => hash_key(&key).as_str(),
                    "key_id" => key_id.as_str(),
                    "site_id" => site_id,
                    "name" => name,
                    "scopes" => store::AttributeValue::Ss(scopes.iter().map(|s| s.as_str().to_owned()).collect()),
                },
            )
            .await?;
        let info = ApiKeyInfo {
            key_id,
            site_id: site_id.to_owned(),
            name: name.to_owned(),
            revoked: false,
            scopes,
            legacy: false,
        };
        Ok((key, info))
    }

    /// A site's keys.
    pub async fn keys(&self, site_id: &str) -> Result<Vec<ApiKeyInfo>, SitesError> {
        let records = self.table.query("ApiKey").index("gsi1").key(item! { "site_id" => site_id }).all().await?;
        records.iter().map(key_info).collect()
    }

    async fn key_hash_of(&self, site_id: &str, key_id: &str) -> Result<Option<String>, SitesError> {
        let records = self
            .table
            .query("ApiKey")
            .index("gsi1")
            .key(item! { "site_id" => site_id, "key_id" => key_id })
            .all()
            .await?;
        Ok(records.first().and_then(|r| r.string("key_hash").ok()).map(str::to_owned))
    }

    /// Revokes a key; it is refused from then on (within [`CACHE_TTL`] on other processes).
    pub async fn revoke_key(&self, site_id: &str, key_id: &str) -> Result<(), SitesError> {
        let hash = self.key_hash_of(site_id, key_id).await?.ok_or_else(|| SitesError::NoSuchKey(key_id.to_owned()))?;
        let now = jiff::Timestamp::now().as_millisecond();
        self.table
            .update("ApiKey", item! { "key_hash" => hash.as_str() }, model::expr::Update::new().set("revoked_at", now))
            .await?;
        self.by_key.clear();
        Ok(())
    }

    /// The key behind a Bearer token, unless unknown or revoked.
    pub async fn authenticate(&self, bearer: &str) -> Result<Option<ApiKeyInfo>, SitesError> {
        // Only the shape `create_key` makes is looked up (and its answer cached), so junk
        // costs no read and no cache entry.
        let shaped = bearer
            .strip_prefix(KEY_PREFIX)
            .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()));
        if !shaped {
            return Ok(None);
        }
        let hash = hash_key(bearer);
        self.by_key
            .get_or_load(&hash, || async {
                match self.table.get("ApiKey", item! { "key_hash" => hash.as_str() }).await? {
                    Some(r) => Ok(Some(key_info(&r)?).filter(|k| !k.revoked)),
                    None => Ok(None),
                }
            })
            .await
    }
}

fn key_info(r: &Record) -> Result<ApiKeyInfo, SitesError> {
    let stored = r.string_set("scopes").map_err(corrupt("ApiKey"))?;
    // A scope this version does not know (written by a newer one) allows nothing here.
    let mut scopes: Vec<Scope> = stored.iter().filter_map(|name| Scope::parse(name)).collect();
    let legacy = stored.is_empty();
    if legacy {
        scopes = Scope::LEGACY.to_vec();
    }
    scopes.sort();
    Ok(ApiKeyInfo {
        key_id: r.string("key_id").map_err(corrupt("ApiKey"))?.to_owned(),
        site_id: r.string("site_id").map_err(corrupt("ApiKey"))?.to_owned(),
        name: r.opt_string("name").ok().flatten().unwrap_or_default().to_owned(),
        revoked: r.opt_i64("revoked_at").ok().flatten().is_some(),
        scopes,
        legacy,
    })
}

/// A random (version 4) UUID in its lower-case text form.
fn uuid_v4() -> String {
    let mut b = [0u8; 16];
    rand::fill(&mut b);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &hex[0..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32])
}

#[async_trait]
impl SiteSettingsSource for Sites {
    async fn site_settings(&self, site_id: &str) -> Result<Option<SiteSettings>, AggregateError> {
        let site = self.get(site_id).await.map_err(AggregateError::sites)?;
        Ok(site.map(|s| SiteSettings {
            zone: s.zone,
            retention_event_days: s.retention_event_days,
            retention_hourly_days: s.retention_hourly_days,
            retention_daily_days: s.retention_daily_days,
            weeks_from_ms: s.weeks_from_ms,
        }))
    }
}

/// A funnel step as stored: `{page: pattern}` or `{event: name}`.
fn step_to_value(step: &Goal) -> AttributeValue {
    let (kind, target) = match step {
        Goal::Page(pattern) => ("page", pattern.as_str()),
        Goal::Event(name) => ("event", name.as_str()),
    };
    AttributeValue::M([(kind.to_owned(), AttributeValue::from(target))].into_iter().collect())
}

fn step_from_value(value: &AttributeValue) -> Result<Goal, SitesError> {
    let bad = || SitesError::Corrupt { entity: "Funnel", message: "a step is not {page} or {event}".into() };
    let AttributeValue::M(map) = value else { return Err(bad()) };
    match (map.get("page").and_then(AttributeValue::as_s), map.get("event").and_then(AttributeValue::as_s)) {
        (Some(page), None) => Ok(Goal::page(page)?),
        (None, Some(event)) => Ok(Goal::event(event)?),
        _ => Err(bad()),
    }
}

fn filter_to_value(f: &crate::stats::Filter) -> AttributeValue {
    let mut m = std::collections::BTreeMap::new();
    m.insert("op".to_owned(), AttributeValue::S(f.op.name().to_owned()));
    m.insert("dimension".to_owned(), AttributeValue::S(f.dimension.name().into_owned()));
    m.insert("values".to_owned(), AttributeValue::L(f.values.iter().cloned().map(AttributeValue::S).collect()));
    AttributeValue::M(m.into_iter().collect())
}

fn filter_from_value(v: &AttributeValue) -> Result<crate::stats::Filter, SitesError> {
    let bad = || SitesError::Corrupt { entity: "Segment", message: "a filter is not {op, dimension, values}".into() };
    let AttributeValue::M(m) = v else { return Err(bad()) };
    let text = |k: &str| match m.get(k) {
        Some(AttributeValue::S(s)) => Ok(s.clone()),
        _ => Err(bad()),
    };
    let op = crate::stats::FilterOp::parse(&text("op")?).ok_or_else(bad)?;
    let values = match m.get("values") {
        Some(AttributeValue::L(list)) => list
            .iter()
            .map(|v| match v {
                AttributeValue::S(s) => Ok(s.clone()),
                _ => Err(bad()),
            })
            .collect::<Result<Vec<_>, _>>()?,
        _ => return Err(bad()),
    };
    crate::stats::Filter::new(op, &text("dimension")?, values).map_err(|_| bad())
}
