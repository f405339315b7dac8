//! Browser, operating system and device type from a User-Agent.
//!
//! **The patterns:** `uap-core`'s `regexes.yaml` (the same patterns as uap-python, uap-java,
//! Snowplow's enrichment and the `ua-parser` crate, the ua-parser project's own Rust
//! implementation), embedded in the binary (`data/uap-regexes.yaml`, Apache-2.0; see
//! `data/README.md`); they can be updated by replacing that one file. They are read by Tally's own
//! matcher ([`patterns`]), which compiles a pattern only when a User-Agent first needs it: the
//! `ua-parser` crate, which Tally used before and which the tests still compare every answer with,
//! compiles all of them up front, 22 MB of a server's memory for the few hundred patterns a
//! site's traffic ever reaches (BENCHMARKS.md, "seventh session: server memory"). The crate was
//! chosen over the alternatives, and its prefilter is still the one used here, because it is pure
//! Rust (`regex` plus a prefilter) and kept by the project that keeps the patterns. `woothee`
//! embeds its data but has had no release since 2022 and calls every iPad a smartphone; `uaparser`
//! and `user-agent-parser` read the same `regexes.yaml` but are kept by one person each;
//! `fast_uaparser` downloads the patterns in its build script, which Tally's builds may not do; the
//! `device-detector` port of Matomo's library is LGPL and unmaintained.
//!
//! `uap-core` names a device (`iPhone`, `Generic Smartphone`, `Spider`, a phone model) but not its
//! type, so [`DeviceType`] is derived from the device, the OS and the `Mobile`/`Tablet` tokens
//! browsers send, with one rule worth knowing: an Android User-Agent without `Mobile` is a tablet,
//! as Chrome and Firefox mark Android phones with it and tablets without. iPads whose Safari asks
//! for desktop pages send a macOS User-Agent and count as desktops; nothing in the header tells
//! them apart.
//!
//! Building the parser reads about 1,200 patterns and builds their prefilters, which takes a
//! fraction of a second; each pattern is compiled the first time the prefilter selects it. Build
//! one [`UserAgentParser`] per process and share it. Matching one User-Agent against them costs
//! about 8 µs (`cargo bench -p analytics --bench ingest`), most of an event's enrichment, while a
//! site sees the same few thousand User-Agents over and over; so [`UserAgentParser::parse`]
//! remembers its answers in a bounded cache, emptied whenever it fills.

mod patterns;
#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::sync::Arc;

use regex::Captures;

use patterns::PatternSet;

use crate::enrich::recent::Recent;

/// The embedded `uap-core` patterns.
const REGEXES: &str = include_str!("../../data/uap-regexes.yaml");

/// A browser (or app) and its version.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Browser {
    /// Family name, such as `Chrome` or `Firefox`; `Other` when unknown.
    pub name: String,
    /// `major.minor`, or `major`, when known.
    pub version: Option<String>,
}

/// An operating system and its version.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Os {
    /// Name, such as `Windows`, `macOS`, `iOS`, `Android`, `Linux`; `Other` when unknown.
    pub name: String,
    /// `major.minor`, or `major`, when known.
    pub version: Option<String>,
}

/// The kind of device, as the `visit:device` dimension shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum DeviceType {
    /// A desktop or laptop computer.
    Desktop,
    /// A phone.
    Mobile,
    /// A tablet.
    Tablet,
    /// A smart TV or streaming box.
    Tv,
    /// A games console.
    Console,
    /// A crawler, per the patterns (`Spider`); such events are dropped as bots.
    Bot,
    /// Anything else.
    Other,
}

impl DeviceType {
    /// The name the dashboard shows.
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceType::Desktop => "Desktop",
            DeviceType::Mobile => "Mobile",
            DeviceType::Tablet => "Tablet",
            DeviceType::Tv => "TV",
            DeviceType::Console => "Console",
            DeviceType::Bot => "Bot",
            DeviceType::Other => "Other",
        }
    }
}

/// What a User-Agent says about the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientInfo {
    /// The browser's family and version, from the User-Agent.
    pub browser: Browser,
    /// The operating system.
    pub os: Os,
    /// The device type.
    pub device: DeviceType,
}

/// Why the parser could not be built (the embedded patterns failed to load: a bug, caught by tests).
#[derive(Debug, thiserror::Error)]
#[error("the embedded User-Agent patterns do not load: {0}")]
pub struct UaParserError(String);

/// The embedded patterns file, as `uap-core` writes it (fields Tally does not read are skipped).
#[derive(serde::Deserialize)]
struct PatternsFile {
    user_agent_parsers: Vec<BrowserPattern>,
    os_parsers: Vec<OsPattern>,
    device_parsers: Vec<DevicePattern>,
}

/// A browser pattern: the family and versions replace the groups they name when given.
#[derive(serde::Deserialize)]
struct BrowserPattern {
    regex: String,
    family_replacement: Option<String>,
    v1_replacement: Option<String>,
    v2_replacement: Option<String>,
}

/// An operating system pattern.
#[derive(serde::Deserialize)]
struct OsPattern {
    regex: String,
    os_replacement: Option<String>,
    os_v1_replacement: Option<String>,
    os_v2_replacement: Option<String>,
}

/// A device pattern; only the device's name is read (the brand and model are not used).
#[derive(serde::Deserialize)]
struct DevicePattern {
    regex: String,
    regex_flag: Option<String>,
    device_replacement: Option<String>,
}

/// The User-Agent parser, built once from the embedded patterns.
pub struct UserAgentParser {
    browsers: PatternSet,
    browser_patterns: Vec<BrowserPattern>,
    systems: PatternSet,
    os_patterns: Vec<OsPattern>,
    devices: PatternSet,
    device_patterns: Vec<DevicePattern>,
    cache: Recent<Arc<ClientInfo>, { UserAgentParser::CACHE_CAPACITY }>,
}

impl std::fmt::Debug for UserAgentParser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UserAgentParser")
    }
}

impl UserAgentParser {
    /// Reads the embedded patterns and builds their prefilters; patterns are compiled as
    /// User-Agents need them (see the module docs).
    pub fn new() -> Result<Self, UaParserError> {
        let file: PatternsFile = serde_yaml::from_str(REGEXES).map_err(|e| UaParserError(e.to_string()))?;
        // Atoms of at least 3 bytes for browsers and systems, 2 for devices (whose patterns hold
        // short brand names), as `ua-parser` builds them.
        let browsers = PatternSet::new(3, file.user_agent_parsers.iter().map(|p| (p.regex.as_str(), false)))
            .map_err(UaParserError)?;
        let systems =
            PatternSet::new(3, file.os_parsers.iter().map(|p| (p.regex.as_str(), false))).map_err(UaParserError)?;
        let devices = PatternSet::new(
            2,
            file.device_parsers.iter().map(|p| (p.regex.as_str(), p.regex_flag.as_deref() == Some("i"))),
        )
        .map_err(UaParserError)?;
        Ok(UserAgentParser {
            browsers,
            browser_patterns: file.user_agent_parsers,
            systems,
            os_patterns: file.os_parsers,
            devices,
            device_patterns: file.device_parsers,
            cache: Recent::new(),
        })
    }

    /// Most User-Agents remembered: at most about 5 MB, at the longest User-Agent events keep.
    pub const CACHE_CAPACITY: usize = 4096;

    /// Browser, OS and device type of `user_agent`, from the cache when it was seen lately
    /// (shared with it, not copied).
    pub fn parse(&self, user_agent: &str) -> Arc<ClientInfo> {
        self.cache.get_or(user_agent, |ua| Arc::new(self.parse_uncached(ua)))
    }

    /// Browser, OS and device type of `user_agent`, always matched against the patterns.
    pub fn parse_uncached(&self, user_agent: &str) -> ClientInfo {
        let Parts { browser, browser_major, browser_minor, os, os_major, os_minor, device } = self.parts(user_agent);
        let browser = match browser {
            Some(family) => {
                Browser { name: browser_name(&family).to_owned(), version: version(browser_major, browser_minor) }
            }
            None => Browser { name: "Other".into(), version: None },
        };
        let os = match os {
            Some(family) => {
                Os { name: os_name(&family).to_owned(), version: version(os_major.as_deref(), os_minor.as_deref()) }
            }
            None => Os { name: "Other".into(), version: None },
        };
        let device_family = device.unwrap_or(Cow::Borrowed("Other"));
        let device = device_type(user_agent, &device_family, &os.name);
        ClientInfo { browser, os, device }
    }

    /// What the patterns say of `user_agent`, before Tally names it: `uap-core`'s browser family
    /// and versions, operating system and versions, and device family, `None` where no pattern
    /// matches.
    fn parts<'a>(&'a self, user_agent: &'a str) -> Parts<'a> {
        let mut parts = Parts::default();
        if let Some((index, groups)) = self.browsers.first_match(user_agent) {
            let pattern = &self.browser_patterns[index];
            let count = patterns::group_count(&groups);
            // The family takes only `$1`; the versions take their replacement as it is.
            parts.browser = Some(match pattern.family_replacement.as_deref() {
                Some(family) if family.contains("$1") => {
                    Cow::Owned(family.replace("$1", patterns::group(&groups, 1).unwrap_or("")))
                }
                Some(family) if !family.is_empty() => Cow::Borrowed(family),
                _ => Cow::Borrowed(if count >= 1 { patterns::group(&groups, 1).unwrap_or("") } else { "" }),
            });
            let version = |replacement: &'a Option<String>, index: usize| match replacement.as_deref() {
                Some(replacement) if !replacement.is_empty() => Some(replacement),
                _ if count >= index => patterns::group(&groups, index),
                _ => None,
            };
            parts.browser_major = version(&pattern.v1_replacement, 2);
            parts.browser_minor = version(&pattern.v2_replacement, 3);
        }
        if let Some((index, groups)) = self.systems.first_match(user_agent) {
            let pattern = &self.os_patterns[index];
            parts.os = Some(required(pattern.os_replacement.as_deref(), &groups, 1));
            parts.os_major = optional(pattern.os_v1_replacement.as_deref(), &groups, 2);
            parts.os_minor = optional(pattern.os_v2_replacement.as_deref(), &groups, 3);
        }
        if let Some((index, groups)) = self.devices.first_match(user_agent) {
            parts.device = Some(required(self.device_patterns[index].device_replacement.as_deref(), &groups, 1));
        }
        parts
    }

    /// How many patterns have been compiled so far: browsers, systems and devices.
    pub fn compiled_patterns(&self) -> (usize, usize, usize) {
        (self.browsers.compiled(), self.systems.compiled(), self.devices.compiled())
    }
}

/// What the patterns say of a User-Agent (see [`UserAgentParser::parts`]).
#[derive(Debug, Default, PartialEq, Eq)]
struct Parts<'a> {
    browser: Option<Cow<'a, str>>,
    browser_major: Option<&'a str>,
    browser_minor: Option<&'a str>,
    os: Option<Cow<'a, str>>,
    os_major: Option<Cow<'a, str>>,
    os_minor: Option<Cow<'a, str>>,
    device: Option<Cow<'a, str>>,
}

/// A value a match always has (a system's or device's name): the replacement, expanded when it
/// names groups; without one, group `index`; else empty.
fn required<'a>(replacement: Option<&'a str>, groups: &Captures<'a>, index: usize) -> Cow<'a, str> {
    match replacement.filter(|r| !r.trim().is_empty()) {
        Some(template) if patterns::is_template(template) => Cow::Owned(patterns::expand(template, groups)),
        Some(replacement) => Cow::Borrowed(replacement),
        None if patterns::group_count(groups) >= index => Cow::Borrowed(patterns::group(groups, index).unwrap_or("")),
        None => Cow::Borrowed(""),
    }
}

/// A value a match may lack (a system's version): as [`required`], but `None` for an empty
/// expansion or a missing group.
fn optional<'a>(replacement: Option<&'a str>, groups: &Captures<'a>, index: usize) -> Option<Cow<'a, str>> {
    match replacement.filter(|r| !r.trim().is_empty()) {
        Some(template) if patterns::is_template(template) => {
            Some(patterns::expand(template, groups)).filter(|s| !s.is_empty()).map(Cow::Owned)
        }
        Some(replacement) => Some(Cow::Borrowed(replacement)),
        None if patterns::group_count(groups) >= index => patterns::group(groups, index).map(Cow::Borrowed),
        None => None,
    }
}

fn version(major: Option<&str>, minor: Option<&str>) -> Option<String> {
    let major = major.filter(|m| !m.is_empty())?;
    Some(match minor.filter(|m| !m.is_empty()) {
        Some(minor) => format!("{major}.{minor}"),
        None => major.to_owned(),
    })
}

/// Folds `uap-core`'s mobile variants into one browser name, as Plausible's dashboard shows them:
/// Chrome on a phone is Chrome.
fn browser_name(family: &str) -> &str {
    match family {
        "Chrome Mobile" | "Chrome Mobile iOS" | "Chrome Mobile WebView" | "HeadlessChrome" => "Chrome",
        "Mobile Safari" | "Mobile Safari UI/WKWebView" => "Safari",
        "Firefox Mobile" | "Firefox iOS" => "Firefox",
        "Edge Mobile" => "Edge",
        "Opera Mobile" => "Opera",
        other => other,
    }
}

fn os_name(family: &str) -> &str {
    match family {
        "Mac OS X" | "Mac OS" => "macOS",
        "Chrome OS" => "ChromeOS",
        "Ubuntu" | "Fedora" | "Debian" | "Arch Linux" | "Linux Mint" | "Red Hat" | "SUSE" | "Gentoo" => "Linux",
        other => other,
    }
}

fn device_type(user_agent: &str, device: &str, os: &str) -> DeviceType {
    let has = |token: &str| user_agent.contains(token);
    if device == "Spider" {
        return DeviceType::Bot;
    }
    if ["PlayStation", "Xbox", "Nintendo"].iter().any(|c| device.contains(c) || has(c)) {
        return DeviceType::Console;
    }
    if ["SmartTV", "SMART-TV", "Smart-TV", "AppleTV", "GoogleTV", "CrKey", "BRAVIA", "Web0S", "Tizen TV"]
        .iter()
        .any(|t| has(t))
        || device.contains("TV")
    {
        return DeviceType::Tv;
    }
    if device.contains("iPad") || device.contains("Tablet") || device.contains("Kindle") || has("Tablet") {
        return DeviceType::Tablet;
    }
    if device.contains("iPhone")
        || device.contains("iPod")
        || device == "Generic Smartphone"
        || device == "Generic Feature Phone"
        || has("Mobi")
        || has("Windows Phone")
    {
        return DeviceType::Mobile;
    }
    match os {
        // Android without `Mobile` is a tablet (see the module docs); an Android phone was caught
        // above by its `Mobile` token.
        "Android" => DeviceType::Tablet,
        "iOS" => DeviceType::Mobile,
        "Windows" | "macOS" | "Linux" | "ChromeOS" | "FreeBSD" | "OpenBSD" | "NetBSD" | "Solaris" => {
            DeviceType::Desktop
        }
        _ => DeviceType::Other,
    }
}
