//! An incoming event, validated: [`RawEvent`] is what the server parsed out of a request body and its
//! headers; [`Event::parse`] checks it against the spec's [`Limits`] and turns it into typed values
//! (name, hostname, pathname, domains, referrer, campaign parameters, props, revenue).
//!
//! ```
//! use analytics::event::{Event, Limits, RawEvent};
//!
//! let mut raw = RawEvent::pageview("https://www.example.com/pricing?utm_source=newsletter", "example.com");
//! raw.user_agent = "Mozilla/5.0".into();
//! let event = Event::parse(raw, &Limits::default()).unwrap();
//! assert_eq!(event.hostname.as_str(), "example.com");
//! assert_eq!(event.pathname.as_str(), "/pricing");
//! assert_eq!(event.query.utm.source.as_deref(), Some("newsletter"));
//! ```
//!
//! Parsing never panics and never allocates more than a small multiple of its input: every field is
//! measured before it is parsed. A referrer that cannot be understood is dropped rather than refused,
//! as Plausible does, because browsers send odd referrers (`android-app://…`) and losing the whole
//! event over one would lose a page view.

use std::net::IpAddr;
use std::str::FromStr;

use store::Number;
use url::Url;

/// The spec's ingestion limits; [`Limits::default`] holds the spec's numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Longest event name, in characters.
    pub max_name_chars: usize,
    /// Longest page URL, in bytes.
    pub max_url_bytes: usize,
    /// Most custom properties on one event.
    pub max_props: usize,
    /// Longest property key, in bytes.
    pub max_prop_key_bytes: usize,
    /// Longest property value, in bytes.
    pub max_prop_value_bytes: usize,
    /// Most domains in one comma-separated `domain` field.
    pub max_domains: usize,
    /// Longest User-Agent kept; a longer one is cut at a character boundary.
    pub max_user_agent_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_name_chars: 120,
            max_url_bytes: 2000,
            max_props: 30,
            max_prop_key_bytes: 300,
            max_prop_value_bytes: 2000,
            max_domains: 10,
            max_user_agent_bytes: 1024,
        }
    }
}

/// Request headers that matter to enrichment (forwarding, CDN country), in the order received.
///
/// Names are compared without regard to case, as HTTP requires. A header sent on several lines is
/// several entries; [`RequestHeaders::get_all`] sees them all. Every line is kept in one text, so
/// a request's headers cost two allocations, not two per line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestHeaders {
    /// Each line's name and value, one after the other.
    text: String,
    /// Where each line's name starts, its value starts, and its value ends, in `text`.
    lines: Vec<(usize, usize, usize)>,
}

impl RequestHeaders {
    /// No headers.
    pub fn new() -> Self {
        RequestHeaders::default()
    }

    /// Adds one header line.
    pub fn push(&mut self, name: impl AsRef<str>, value: impl AsRef<str>) {
        let start = self.text.len();
        self.text.push_str(name.as_ref());
        let middle = self.text.len();
        self.text.push_str(value.as_ref());
        self.lines.push((start, middle, self.text.len()));
    }

    /// The first value of header `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.get_all(name).next()
    }

    /// Every value of header `name`, in the order received.
    pub fn get_all<'a, 'n>(&'a self, name: &'n str) -> impl Iterator<Item = &'a str> + use<'a, 'n> {
        // Every offset is a boundary `push` recorded between whole strings.
        self.lines
            .iter()
            .filter(move |(start, middle, _)| self.text[*start..*middle].eq_ignore_ascii_case(name))
            .map(|(_, middle, end)| &self.text[*middle..*end])
    }
}

impl<N: AsRef<str>, V: AsRef<str>> FromIterator<(N, V)> for RequestHeaders {
    fn from_iter<I: IntoIterator<Item = (N, V)>>(iter: I) -> Self {
        let mut headers = RequestHeaders::new();
        for (name, value) in iter {
            headers.push(name, value);
        }
        headers
    }
}

/// Revenue as sent: an amount in decimal text and an ISO 4217 currency code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRevenue {
    /// Decimal amount, such as `"19.99"`.
    pub amount: String,
    /// Currency code, such as `"EUR"`.
    pub currency: String,
}

/// An event as the server read it from a request: plain values, nothing checked yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawEvent {
    /// Event name: `pageview` or a custom name.
    pub name: String,
    /// The page URL.
    pub url: String,
    /// The site's domain, or several separated by commas.
    pub domain: String,
    /// The `document.referrer`, if any.
    pub referrer: Option<String>,
    /// Custom properties, in the order sent.
    pub props: Vec<(String, String)>,
    /// Revenue attached to a goal, if any.
    pub revenue: Option<RawRevenue>,
    /// Whether the event counts against bounces (Plausible's `interactive`, true unless sent false).
    pub interactive: bool,
    /// Hash-based routing (Plausible's `h`): the URL fragment is part of the page path.
    pub hash_mode: bool,
    /// The window's (Plausible's `w`) or screen's (Umami's `screen`) width in CSS pixels, if sent.
    pub screen_width: Option<u32>,
    /// The browser's language (Umami's `language`), if sent.
    pub language: Option<String>,
    /// When the event happened, in milliseconds since the Unix epoch (the receive time, or the
    /// explicit time of an imported event).
    pub timestamp_ms: i64,
    /// The User-Agent header, empty when absent.
    pub user_agent: String,
    /// The address of the TCP peer that sent the request.
    pub peer_ip: IpAddr,
    /// Headers that enrichment reads.
    pub headers: RequestHeaders,
}

impl RawEvent {
    /// A page view of `url` on `domain`, received from an unspecified peer at time zero; tests and
    /// examples fill in the rest.
    pub fn pageview(url: &str, domain: &str) -> Self {
        RawEvent {
            name: "pageview".into(),
            url: url.into(),
            domain: domain.into(),
            referrer: None,
            props: Vec::new(),
            revenue: None,
            interactive: true,
            hash_mode: false,
            screen_width: None,
            language: None,
            timestamp_ms: 0,
            user_agent: String::new(),
            peer_ip: IpAddr::from([0, 0, 0, 0]),
            headers: RequestHeaders::new(),
        }
    }
}

/// Why an event was refused. Each variant names the field at fault ([`EventError::field`]), so the
/// server can answer 400 with a message saying what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EventError {
    /// The event name is empty.
    #[error("name is empty")]
    NameEmpty,
    /// The event name is longer than the limit.
    #[error("name has {chars} characters, more than {max}")]
    NameTooLong {
        /// Its length.
        chars: usize,
        /// The limit.
        max: usize,
    },
    /// A name or property key holds a control character.
    #[error("{field} contains a control character")]
    ControlCharacter {
        /// `name` or `props`.
        field: &'static str,
    },
    /// The URL is longer than the limit.
    #[error("url has {bytes} bytes, more than {max}")]
    UrlTooLong {
        /// Its length.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// The URL does not parse.
    #[error("url is not a valid URL: {0}")]
    UrlInvalid(String),
    /// The URL is not `http` or `https`.
    #[error("url scheme must be http or https, not {0:?}")]
    UrlScheme(String),
    /// The URL has no host.
    #[error("url has no host")]
    UrlNoHost,
    /// No domain was given.
    #[error("domain is empty")]
    DomainMissing,
    /// A domain is not a valid host name.
    #[error("domain {0:?} is not a valid host name")]
    DomainInvalid(String),
    /// More domains than the limit.
    #[error("domain lists {count} domains, more than {max}")]
    TooManyDomains {
        /// How many were sent.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// More properties than the limit.
    #[error("props has {count} entries, more than {max}")]
    TooManyProps {
        /// How many were sent.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// A property key is empty.
    #[error("props has an empty key")]
    PropKeyEmpty,
    /// A property key is longer than the limit.
    #[error("props key has {bytes} bytes, more than {max}")]
    PropKeyTooLong {
        /// Its length.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// A property value is longer than the limit.
    #[error("props value of {key:?} has {bytes} bytes, more than {max}")]
    PropValueTooLong {
        /// The key whose value is too long.
        key: String,
        /// Its length.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// The same property key appears twice.
    #[error("props key {0:?} appears twice")]
    DuplicatePropKey(String),
    /// The revenue amount is not a decimal number.
    #[error("revenue amount {0:?} is not a decimal number")]
    RevenueAmount(String),
    /// The revenue currency is not a three-letter code.
    #[error("revenue currency {0:?} is not a three-letter ISO 4217 code")]
    RevenueCurrency(String),
    /// The timestamp is before 1970 or after 9999.
    #[error("timestamp {0} ms is outside 1970..10000")]
    TimestampOutOfRange(i64),
}

impl EventError {
    /// The request field at fault, as the Plausible Events API names it.
    pub fn field(&self) -> &'static str {
        match self {
            EventError::NameEmpty | EventError::NameTooLong { .. } => "name",
            EventError::ControlCharacter { field } => field,
            EventError::UrlTooLong { .. } | EventError::UrlInvalid(_) => "url",
            EventError::UrlScheme(_) | EventError::UrlNoHost => "url",
            EventError::DomainMissing | EventError::DomainInvalid(_) | EventError::TooManyDomains { .. } => "domain",
            EventError::TooManyProps { .. } | EventError::PropKeyEmpty | EventError::PropKeyTooLong { .. } => "props",
            EventError::PropValueTooLong { .. } | EventError::DuplicatePropKey(_) => "props",
            EventError::RevenueAmount(_) | EventError::RevenueCurrency(_) => "revenue",
            EventError::TimestampOutOfRange(_) => "timestamp",
        }
    }
}

/// An event name: 1 to 120 characters, no control characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventName(String);

impl EventName {
    /// The name of a page view.
    pub const PAGEVIEW: &'static str = "pageview";

    /// Checks `name` against `limits`.
    pub fn parse(name: &str, limits: &Limits) -> Result<Self, EventError> {
        if name.is_empty() {
            return Err(EventError::NameEmpty);
        }
        let chars = name.chars().count();
        if chars > limits.max_name_chars {
            return Err(EventError::NameTooLong { chars, max: limits.max_name_chars });
        }
        if name.chars().any(char::is_control) {
            return Err(EventError::ControlCharacter { field: "name" });
        }
        Ok(EventName(name.to_owned()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is a page view.
    pub fn is_pageview(&self) -> bool {
        self.0 == Self::PAGEVIEW
    }
}

/// A host name, lower-case, IDNA-encoded, without a leading `www.`.
///
/// Plausible strips `www.` so that `www.example.com` and `example.com` count as one hostname; so
/// does Tally.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Hostname(String);

impl Hostname {
    /// Parses a host name (or IP address literal) as a URL parser would.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        if text.is_empty() || text.len() > 253 {
            return None;
        }
        match url::Host::parse(text).ok()? {
            url::Host::Domain(d) => Some(Self::from_domain(&d)),
            url::Host::Ipv4(ip) => Some(Hostname(ip.to_string())),
            url::Host::Ipv6(ip) => Some(Hostname(format!("[{ip}]"))),
        }
    }

    /// The host of a URL the `url` crate parsed (lower-case, mapped to ASCII already): what
    /// [`Hostname::parse`] makes of its `host_str`, without parsing it a second time
    /// (`a_urls_host_is_what_parsing_its_text_gives`).
    pub fn from_url_host(host: url::Host<&str>) -> Option<Self> {
        match host {
            url::Host::Domain(d) if d.is_empty() || d.len() > 253 => None,
            url::Host::Domain(d) => Some(Self::from_domain(d)),
            url::Host::Ipv4(ip) => Some(Hostname(ip.to_string())),
            url::Host::Ipv6(ip) => Some(Hostname(format!("[{ip}]"))),
        }
    }

    fn from_domain(domain: &str) -> Self {
        let lower = domain.trim_end_matches('.').to_ascii_lowercase();
        match lower.strip_prefix("www.") {
            Some(rest) if !rest.is_empty() => Hostname(rest.to_owned()),
            _ => Hostname(lower),
        }
    }

    /// The host name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether parsing this host name's text gives it back (`Hostname::parse(self.as_str())`
    /// is `self`), so a lookup that would parse it may take it as it is. A parsed name is already
    /// lower-case ASCII without a final dot, and an address literal already in its shortest
    /// form; only a leading `www.` (left by `www.www.…`) would be taken off once more, and the
    /// empty name (of the host `.`) does not parse at all. A name whose last label starts with a
    /// digit is not claimed canonical either: the final dots taken off a domain such as `0..`
    /// leave `0`, which parses as the address `0.0.0.0` (and an address literal costs only a
    /// parse). Property-tested in `a_urls_host_is_what_parsing_its_text_gives`.
    pub fn is_canonical(&self) -> bool {
        let last_label = self.0.rsplit('.').next().unwrap_or_default();
        !self.0.is_empty() && !self.0.starts_with("www.") && !last_label.starts_with(|c: char| c.is_ascii_digit())
    }

    /// Whether this host is `domain` or one of its subdomains.
    pub fn is_within(&self, domain: &Hostname) -> bool {
        match self.0.strip_suffix(domain.as_str()) {
            Some("") => true,
            Some(prefix) => prefix.ends_with('.'),
            None => false,
        }
    }
}

impl std::fmt::Display for Hostname {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A page path: starts with `/`, percent-decoded where that yields UTF-8, with the fragment
/// appended in hash mode.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pathname(String);

impl Pathname {
    /// The path of `url`; with `hash_mode`, `#fragment` is kept as part of it.
    pub fn from_url(url: &Url, hash_mode: bool) -> Self {
        let path = decode_percent(url.path());
        let mut path = if path.starts_with('/') { path } else { format!("/{path}") };
        if hash_mode && let Some(fragment) = url.fragment().filter(|f| !f.is_empty()) {
            path.push('#');
            path.push_str(&decode_percent(fragment));
        }
        Pathname(path)
    }

    /// The path.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Pathname {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Percent-decodes `text` when the result is UTF-8, and keeps it as it is otherwise, so a path
/// like `/caf%C3%A9` reads `/café` while `/%FF` stays readable and distinct.
fn decode_percent(text: &str) -> String {
    String::from_utf8(percent_decode(text.as_bytes())).unwrap_or_else(|_| text.to_owned())
}

fn percent_decode(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(h), Some(l)) = (bytes.get(i + 1).and_then(|&b| hex(b)), bytes.get(i + 2).and_then(|&b| hex(b)))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    out
}

/// The five `utm_*` campaign parameters of the page URL.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Utm {
    /// The `utm_source` parameter.
    pub source: Option<String>,
    /// The `utm_medium` parameter.
    pub medium: Option<String>,
    /// The `utm_campaign` parameter.
    pub campaign: Option<String>,
    /// The `utm_term` parameter.
    pub term: Option<String>,
    /// The `utm_content` parameter.
    pub content: Option<String>,
}

/// An ad network's click identifier parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ClickIdKind {
    /// Google Ads `gclid`.
    Gclid,
    /// Google Ads `gbraid` (iOS app campaigns).
    Gbraid,
    /// Google Ads `wbraid` (iOS web campaigns).
    Wbraid,
    /// Google Display & Video `dclid`.
    Dclid,
    /// Meta `fbclid`.
    Fbclid,
    /// Microsoft Ads `msclkid`.
    Msclkid,
    /// TikTok `ttclid`.
    Ttclid,
    /// X (Twitter) `twclid`.
    Twclid,
    /// LinkedIn `li_fat_id`.
    LiFatId,
    /// Yandex `yclid`.
    Yclid,
}

impl ClickIdKind {
    /// Every kind, in a fixed order.
    pub const ALL: [ClickIdKind; 10] = [
        ClickIdKind::Gclid,
        ClickIdKind::Gbraid,
        ClickIdKind::Wbraid,
        ClickIdKind::Dclid,
        ClickIdKind::Fbclid,
        ClickIdKind::Msclkid,
        ClickIdKind::Ttclid,
        ClickIdKind::Twclid,
        ClickIdKind::LiFatId,
        ClickIdKind::Yclid,
    ];

    /// The query parameter's name.
    pub fn param(self) -> &'static str {
        match self {
            ClickIdKind::Gclid => "gclid",
            ClickIdKind::Gbraid => "gbraid",
            ClickIdKind::Wbraid => "wbraid",
            ClickIdKind::Dclid => "dclid",
            ClickIdKind::Fbclid => "fbclid",
            ClickIdKind::Msclkid => "msclkid",
            ClickIdKind::Ttclid => "ttclid",
            ClickIdKind::Twclid => "twclid",
            ClickIdKind::LiFatId => "li_fat_id",
            ClickIdKind::Yclid => "yclid",
        }
    }

    /// The ad network the click came from, as a source name.
    pub fn network(self) -> &'static str {
        match self {
            ClickIdKind::Gclid | ClickIdKind::Gbraid | ClickIdKind::Wbraid | ClickIdKind::Dclid => "Google Ads",
            ClickIdKind::Fbclid => "Facebook",
            ClickIdKind::Msclkid => "Microsoft Ads",
            ClickIdKind::Ttclid => "TikTok",
            ClickIdKind::Twclid => "Twitter",
            ClickIdKind::LiFatId => "LinkedIn",
            ClickIdKind::Yclid => "Yandex",
        }
    }
}

/// The attribution parameters of the page URL's query string. Empty values count as absent; when a
/// parameter repeats, the first non-empty value wins.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueryParams {
    /// The `utm_*` parameters.
    pub utm: Utm,
    /// The `ref` parameter: a source, after `utm_source` and `source` ([`QueryParams::tagged_source`]).
    pub ref_param: Option<String>,
    /// The `source` parameter: a source, after `utm_source`.
    pub source: Option<String>,
    /// Click identifiers present, in [`ClickIdKind::ALL`] order.
    pub click_ids: Vec<(ClickIdKind, String)>,
}

impl QueryParams {
    /// Reads the parameters of `url`.
    pub fn from_url(url: &Url) -> Self {
        let mut params = QueryParams::default();
        for (key, value) in url.query_pairs() {
            let value = value.trim();
            if value.is_empty() {
                continue;
            }
            let slot = match key.as_ref() {
                "utm_source" => &mut params.utm.source,
                "utm_medium" => &mut params.utm.medium,
                "utm_campaign" => &mut params.utm.campaign,
                "utm_term" => &mut params.utm.term,
                "utm_content" => &mut params.utm.content,
                "ref" => &mut params.ref_param,
                "source" => &mut params.source,
                other => {
                    if let Some(kind) = ClickIdKind::ALL.into_iter().find(|k| k.param() == other)
                        && !params.click_ids.iter().any(|(k, _)| *k == kind)
                    {
                        params.click_ids.push((kind, value.to_owned()));
                    }
                    continue;
                }
            };
            if slot.is_none() {
                *slot = Some(value.to_owned());
            }
        }
        params.click_ids.sort_by_key(|(k, _)| *k);
        params
    }

    /// The source the page's own link names: `utm_source`, then `source`, then `ref`, as Plausible
    /// resolves it; a tagged source wins over the referrer.
    pub fn tagged_source(&self) -> Option<&str> {
        self.utm.source.as_deref().or(self.source.as_deref()).or(self.ref_param.as_deref())
    }
}

/// A referrer URL that parsed and has a host, kept without its query and fragment (which can hold
/// search terms and tokens: nothing the dashboard shows, and personal data Tally does not keep).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Referrer {
    url: Url,
    host: Hostname,
}

impl Referrer {
    /// Longest referrer Tally looks at; a longer one is ignored rather than parsed.
    pub const MAX_BYTES: usize = 8 * 1024;

    /// Parses `text`; `None` when it is empty, too long, not a URL, or has no host.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        if text.is_empty() || text.len() > Self::MAX_BYTES {
            return None;
        }
        let mut url = Url::parse(text).ok()?;
        // A web URL's host is parsed already (lower-case, mapped to ASCII); another scheme's is
        // opaque text, which `Hostname::parse` reads as a host name.
        let host = match url.scheme() {
            "http" | "https" => Hostname::from_url_host(url.host()?)?,
            _ => Hostname::parse(url.host_str()?)?,
        };
        url.set_query(None);
        url.set_fragment(None);
        // Credentials in a referrer are never Tally's to keep.
        let _ = url.set_username("");
        let _ = url.set_password(None);
        Some(Referrer { url, host })
    }

    /// The referrer's host, without `www.`.
    pub fn host(&self) -> &Hostname {
        &self.host
    }

    /// The referrer URL, without query and fragment.
    pub fn url(&self) -> &Url {
        &self.url
    }

    /// `host/path` without scheme and trailing slash, as the `visit:referrer` dimension shows it.
    pub fn display(&self) -> String {
        let path = self.url.path().trim_end_matches('/');
        format!("{}{}", self.host, path)
    }
}

/// A property key: 1 to 300 bytes, no control characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PropKey(String);

impl PropKey {
    /// Checks `key` against `limits`.
    pub fn parse(key: &str, limits: &Limits) -> Result<Self, EventError> {
        if key.is_empty() {
            return Err(EventError::PropKeyEmpty);
        }
        if key.len() > limits.max_prop_key_bytes {
            return Err(EventError::PropKeyTooLong { bytes: key.len(), max: limits.max_prop_key_bytes });
        }
        if key.chars().any(char::is_control) {
            return Err(EventError::ControlCharacter { field: "props" });
        }
        Ok(PropKey(key.to_owned()))
    }

    /// The key.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A property value: at most 2000 bytes. Values are free text, so control characters are kept.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PropValue(String);

impl PropValue {
    /// Checks `value` (the value of `key`) against `limits`.
    pub fn parse(key: &PropKey, value: &str, limits: &Limits) -> Result<Self, EventError> {
        if value.len() > limits.max_prop_value_bytes {
            return Err(EventError::PropValueTooLong {
                key: key.0.clone(),
                bytes: value.len(),
                max: limits.max_prop_value_bytes,
            });
        }
        Ok(PropValue(value.to_owned()))
    }

    /// The value.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Revenue: an exact decimal amount and an upper-case ISO 4217 currency code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revenue {
    /// The amount, exact.
    pub amount: Number,
    /// The currency, three upper-case ASCII letters.
    pub currency: String,
}

impl Revenue {
    /// Parses an amount and currency.
    pub fn parse(raw: &RawRevenue) -> Result<Self, EventError> {
        let amount_text = raw.amount.trim();
        // Forty characters hold any amount DynamoDB can store; more is refused before parsing.
        if amount_text.len() > 40 {
            return Err(EventError::RevenueAmount(truncate(amount_text, 40).to_owned()));
        }
        let amount = Number::from_str(amount_text).map_err(|_| EventError::RevenueAmount(amount_text.to_owned()))?;
        let currency = raw.currency.trim();
        if currency.len() != 3 || !currency.bytes().all(|b| b.is_ascii_alphabetic()) {
            return Err(EventError::RevenueCurrency(truncate(currency, 16).to_owned()));
        }
        Ok(Revenue { amount, currency: currency.to_ascii_uppercase() })
    }
}

/// An event that passed every check: each field is a parsed value that is valid everywhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The event name.
    pub name: EventName,
    /// The page URL.
    pub url: Url,
    /// The page's host name, without `www.`.
    pub hostname: Hostname,
    /// The page's path.
    pub pathname: Pathname,
    /// The domains the event is for (at least one, no duplicates, in the order sent).
    pub domains: Vec<Hostname>,
    /// The referrer, when one was sent and could be read.
    pub referrer: Option<Referrer>,
    /// The page URL's attribution parameters.
    pub query: QueryParams,
    /// Custom properties, in the order sent.
    pub props: Vec<(PropKey, PropValue)>,
    /// Revenue, if any.
    pub revenue: Option<Revenue>,
    /// Whether the event counts against bounces.
    pub interactive: bool,
    /// The window or screen width sent, in CSS pixels.
    pub screen_width: Option<u32>,
    /// The browser's language sent, when it reads as a language tag ([`language_tag`]).
    pub language: Option<String>,
    /// Milliseconds since the Unix epoch.
    pub timestamp_ms: i64,
    /// The User-Agent, cut to the limit; empty when absent.
    pub user_agent: String,
    /// The TCP peer's address.
    pub peer_ip: IpAddr,
    /// Headers for enrichment.
    pub headers: RequestHeaders,
}

/// The first millisecond of the year 10000, past which no timestamp is accepted.
const MAX_TIMESTAMP_MS: i64 = 253_402_300_800_000;

impl Event {
    /// Validates `raw` against `limits`.
    pub fn parse(raw: RawEvent, limits: &Limits) -> Result<Event, EventError> {
        let name = EventName::parse(&raw.name, limits)?;

        if raw.url.len() > limits.max_url_bytes {
            return Err(EventError::UrlTooLong { bytes: raw.url.len(), max: limits.max_url_bytes });
        }
        let url = Url::parse(raw.url.trim()).map_err(|e| EventError::UrlInvalid(e.to_string()))?;
        if url.scheme() != "http" && url.scheme() != "https" {
            return Err(EventError::UrlScheme(truncate(url.scheme(), 32).to_owned()));
        }
        let hostname = url.host().and_then(Hostname::from_url_host).ok_or(EventError::UrlNoHost)?;
        let pathname = Pathname::from_url(&url, raw.hash_mode);
        let query = QueryParams::from_url(&url);

        // The domain is usually the page's own host, parsed already.
        let domains = parse_domains(&raw.domain, limits, url.host_str().map(|text| (text, &hostname)))?;
        let referrer = raw.referrer.as_deref().and_then(Referrer::parse);

        if raw.props.len() > limits.max_props {
            return Err(EventError::TooManyProps { count: raw.props.len(), max: limits.max_props });
        }
        let mut props: Vec<(PropKey, PropValue)> = Vec::with_capacity(raw.props.len());
        for (key, value) in &raw.props {
            let key = PropKey::parse(key, limits)?;
            let value = PropValue::parse(&key, value, limits)?;
            // At most thirty props, so the quadratic check costs less than a hash set would.
            if props.iter().any(|(k, _)| *k == key) {
                return Err(EventError::DuplicatePropKey(key.0));
            }
            props.push((key, value));
        }

        let revenue = raw.revenue.as_ref().map(Revenue::parse).transpose()?;

        if !(0..MAX_TIMESTAMP_MS).contains(&raw.timestamp_ms) {
            return Err(EventError::TimestampOutOfRange(raw.timestamp_ms));
        }

        let mut user_agent = raw.user_agent;
        let cut = truncate(&user_agent, limits.max_user_agent_bytes).len();
        user_agent.truncate(cut);

        Ok(Event {
            name,
            url,
            hostname,
            pathname,
            domains,
            referrer,
            query,
            props,
            revenue,
            interactive: raw.interactive,
            // A width no screen has (over 100,000 pixels) is no width rather than a refusal: the
            // event still counts.
            screen_width: raw.screen_width.filter(|w| *w <= 100_000),
            language: raw.language.as_deref().and_then(language_tag),
            timestamp_ms: raw.timestamp_ms,
            user_agent,
            peer_ip: raw.peer_ip,
            headers: raw.headers,
        })
    }
}

/// A browser language as a tag of letters, digits and hyphens (`en-US`, `zh-Hant-TW`): at most
/// 35 bytes (BCP 47's longest common tags), `_` read as `-`, the primary subtag lower-case and a
/// two-letter region upper-case, as browsers report them. Anything else is no language: the event
/// still counts.
pub fn language_tag(text: &str) -> Option<String> {
    let text = text.trim();
    if text.is_empty() || text.len() > 35 || !text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return None;
    }
    let mut out = String::with_capacity(text.len());
    for (i, part) in text.split(['-', '_']).enumerate() {
        if part.is_empty() {
            return None;
        }
        if i > 0 {
            out.push('-');
        }
        match (i, part.len()) {
            (0, _) => out.extend(part.chars().map(|c| c.to_ascii_lowercase())),
            (_, 2) => out.extend(part.chars().map(|c| c.to_ascii_uppercase())),
            _ => out.push_str(part),
        }
    }
    Some(out)
}

/// The domains of `text`, comma-separated; `known` is a host's text with its [`Hostname`], taken
/// as it is where a domain is that same text.
fn parse_domains(text: &str, limits: &Limits, known: Option<(&str, &Hostname)>) -> Result<Vec<Hostname>, EventError> {
    let mut domains: Vec<Hostname> = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if domains.len() == limits.max_domains {
            let count = text.split(',').filter(|p| !p.trim().is_empty()).count();
            return Err(EventError::TooManyDomains { count, max: limits.max_domains });
        }
        // A domain is a bare host name: anything that would make it a URL is refused.
        if part.contains(['/', ':', '@', '?', '#']) && !part.starts_with('[') {
            return Err(EventError::DomainInvalid(truncate(part, 64).to_owned()));
        }
        let host = match known {
            Some((known, host)) if known == part => host.clone(),
            _ => Hostname::parse(part).ok_or_else(|| EventError::DomainInvalid(truncate(part, 64).to_owned()))?,
        };
        if !domains.contains(&host) {
            domains.push(host);
        }
    }
    if domains.is_empty() {
        return Err(EventError::DomainMissing);
    }
    Ok(domains)
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
pub(crate) fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests;
