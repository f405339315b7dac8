//! Tally's configuration: a TOML file, then `TALLY_*` environment variables, then flags, each
//! overriding the one before it.
//!
//! The file is the one `--config` (or `TALLY_CONFIG`) names, or `./tally.toml` when that exists.
//! Every setting has one name in all three places: `listen` is `listen = "…"` in the file,
//! `TALLY_LISTEN` in the environment and `--listen` on the command line. Lists (trusted proxies,
//! country headers) are TOML arrays in the file and comma-separated in the environment; a flag
//! may be repeated.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::Deserialize;

/// The file read when neither `--config` nor `TALLY_CONFIG` names one, if it exists.
pub const DEFAULT_FILE: &str = "tally.toml";

/// The store directory used when nothing else is configured.
pub const DEFAULT_STORE: &str = "./tally-data";

/// Where Tally keeps its table.
#[derive(Debug, Clone, PartialEq)]
pub enum StoreSpec {
    /// The embedded engine in a directory.
    Embedded(PathBuf),
    /// Amazon DynamoDB or a compatible endpoint; the URL names the table (boxed: it carries
    /// the client's options, many times the size of a path).
    DynamoDb(Box<store_dynamodb::StoreUrl>),
}

impl StoreSpec {
    /// Reads `--store`: a `dynamodb://` URL or a directory path.
    pub fn parse(text: &str) -> Result<Self> {
        if text.starts_with("dynamodb://") {
            Ok(StoreSpec::DynamoDb(Box::new(store_dynamodb::StoreUrl::parse(text)?)))
        } else if text.contains("://") {
            bail!("unknown store {text:?}: give a directory path or a dynamodb://TABLE?region=…&endpoint=… URL")
        } else if text.is_empty() {
            bail!("the store is empty: give a directory path or a dynamodb:// URL")
        } else {
            Ok(StoreSpec::Embedded(PathBuf::from(text)))
        }
    }
}

impl std::fmt::Display for StoreSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreSpec::Embedded(path) => write!(f, "{}", path.display()),
            StoreSpec::DynamoDb(url) => write!(f, "{url}"),
        }
    }
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

impl LogFormat {
    fn parse(text: &str) -> Result<Self> {
        match text {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => bail!("unknown log format {other:?}: expected text or json"),
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

/// The effective configuration, every layer applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The file that was read, if any.
    pub file: Option<PathBuf>,
    /// The address `tally serve` listens on.
    pub listen: SocketAddr,
    /// The storage engine and where.
    pub store: StoreSpec,
    /// The table's name (a `dynamodb://` store names its own).
    pub table: String,
    /// An MMDB country or city database (GeoLite2, DB-IP Lite, ip-location-db); without one,
    /// countries come from the database compiled into tally, and regions and cities are not known.
    pub mmdb: Option<PathBuf>,
    /// Proxies (addresses or CIDR ranges) whose forwarding headers are believed.
    pub trusted_proxies: Vec<String>,
    /// CDN country headers to believe, lower-case.
    pub country_headers: Vec<String>,
    /// How often aggregate deltas are flushed. Dashboards lag ingestion by about this plus a
    /// flush (3 s: at most 6.2 s measured at 1 M events; the spec allows 10 s); longer coalesces
    /// more events into each aggregate write.
    pub flush_interval: Duration,
    /// How log lines are written.
    pub log_format: LogFormat,
    /// The log filter: a level (`info`) or tracing directives (`info,analytics=debug`).
    pub log_level: String,
    /// How many connections, and how long each phase of one, `tally serve` allows.
    pub limits: server::listen::Limits,
    /// The Bearer token `/metrics` asks for. With neither it nor `metrics_listen`, `/metrics` is
    /// not served.
    pub metrics_token: Option<String>,
    /// An address of its own for `/metrics` (and `/health`), such as a private interface;
    /// `/metrics` is then not served on `listen`.
    pub metrics_listen: Option<SocketAddr>,
    /// Sign-in and shared-link unlock attempts allowed per minute, per client address and per
    /// account (or link), after a burst of as many.
    pub auth_attempts_per_minute: u32,
    /// Whether small event blocks are merged once their epochs are flushed: less disk and faster
    /// scans, for about half a write unit more per event (a transaction per merge). Unless set,
    /// on for the embedded engine (where disk is the cost) and off on DynamoDB (where write units
    /// are the bill). Off, blocks also end on a write unit's boundary, holding events back a round.
    pub compact_event_blocks: bool,
    /// The host or address other `tally serve` processes on the same table reach this one at
    /// (with the port it listens on). Set, this process may hold visitors' sessions, and the
    /// others hand it those visitors' events (see ARCHITECTURE.md, "Several processes"); unset,
    /// it hands events to the processes that hold their sessions and claims the rest one by one.
    pub advertise_host: Option<String>,
    /// Reports and alerts (only from the file).
    pub notify: crate::notify::Settings,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            file: None,
            listen: SocketAddr::from(([127, 0, 0, 1], 8000)),
            store: StoreSpec::Embedded(PathBuf::from(DEFAULT_STORE)),
            table: analytics::schema::TABLE_NAME.to_owned(),
            mmdb: None,
            trusted_proxies: Vec::new(),
            country_headers: Vec::new(),
            flush_interval: Duration::from_secs(3),
            log_format: LogFormat::Text,
            log_level: "info".to_owned(),
            limits: server::listen::Limits::default(),
            metrics_token: None,
            metrics_listen: None,
            auth_attempts_per_minute: server::attempts::DEFAULT_ATTEMPTS_PER_MINUTE,
            compact_event_blocks: true,
            advertise_host: None,
            notify: crate::notify::Settings::default(),
        }
    }
}

/// One layer of settings, every one optional: what the file, the environment or the flags say.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, clap::Args)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct Layer {
    /// The address to listen on [default: 127.0.0.1:8000].
    #[arg(long, global = true)]
    pub listen: Option<String>,
    /// The store: a directory for the embedded engine, or dynamodb://TABLE?region=…&endpoint=… [default: ./tally-data].
    #[arg(long, global = true)]
    pub store: Option<String>,
    /// The table's name [default: tally].
    #[arg(long, global = true)]
    pub table: Option<String>,
    /// An MMDB country or city database file [default: the country database compiled in].
    #[arg(long, global = true)]
    pub mmdb: Option<PathBuf>,
    /// A proxy address or CIDR range whose forwarding headers are believed (repeatable).
    #[arg(long = "trusted-proxy", global = true)]
    pub trusted_proxies: Option<Vec<String>>,
    /// A CDN country header to believe, such as cf-ipcountry (repeatable).
    #[arg(long = "country-header", global = true)]
    pub country_headers: Option<Vec<String>>,
    /// How often aggregates are flushed: `500ms`, `3s`, `1m` [default: 3s].
    #[arg(long, global = true)]
    pub flush_interval: Option<String>,
    /// Log format: text or json [default: text].
    #[arg(long, global = true)]
    pub log_format: Option<String>,
    /// Log level or filter directives [default: info].
    #[arg(long, global = true)]
    pub log_level: Option<String>,
    /// Most connections `tally serve` keeps open; at the cap the oldest idle one is closed [default: 1000].
    #[arg(long, global = true)]
    pub max_connections: Option<usize>,
    /// Longest wait for a request's head from its first byte [default: 10s].
    #[arg(long, global = true)]
    pub header_timeout: Option<String>,
    /// Longest an idle keep-alive connection is kept [default: 15s].
    #[arg(long, global = true)]
    pub idle_timeout: Option<String>,
    /// Longest gap between two chunks of a request body [default: 10s].
    #[arg(long, global = true)]
    pub body_timeout: Option<String>,
    /// Longest a request may take, body included [default: 30s].
    #[arg(long, global = true)]
    pub request_timeout: Option<String>,
    /// The Bearer token /metrics asks for (without it or --metrics-listen, /metrics is off).
    #[arg(long, global = true)]
    pub metrics_token: Option<String>,
    /// An address of its own for /metrics and /health, such as 127.0.0.1:9090.
    #[arg(long, global = true)]
    pub metrics_listen: Option<String>,
    /// Sign-in and unlock attempts per minute, per client address and per account [default: 10].
    #[arg(long, global = true)]
    pub auth_attempts_per_minute: Option<u32>,
    /// Merge small event blocks once flushed: true or false [default: true].
    #[arg(long, global = true)]
    pub compact_event_blocks: Option<bool>,
    /// The host or address other processes on the same table reach this one at (its port is the
    /// one it listens on); set, it holds visitors' sessions and takes their events from the others.
    #[arg(long, global = true)]
    pub advertise_host: Option<String>,
}

impl Layer {
    /// The settings of `TALLY_*` variables, read through `var` (the process environment, or a
    /// map in tests).
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Layer {
        let list = |name: &str| {
            var(name).map(|v| v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect())
        };
        Layer {
            listen: var("TALLY_LISTEN"),
            store: var("TALLY_STORE"),
            table: var("TALLY_TABLE"),
            mmdb: var("TALLY_MMDB").map(PathBuf::from),
            trusted_proxies: list("TALLY_TRUSTED_PROXIES"),
            country_headers: list("TALLY_COUNTRY_HEADERS"),
            flush_interval: var("TALLY_FLUSH_INTERVAL"),
            log_format: var("TALLY_LOG_FORMAT"),
            log_level: var("TALLY_LOG_LEVEL"),
            max_connections: var("TALLY_MAX_CONNECTIONS").map(|v| v.trim().parse().unwrap_or(0)),
            header_timeout: var("TALLY_HEADER_TIMEOUT"),
            idle_timeout: var("TALLY_IDLE_TIMEOUT"),
            body_timeout: var("TALLY_BODY_TIMEOUT"),
            request_timeout: var("TALLY_REQUEST_TIMEOUT"),
            metrics_token: var("TALLY_METRICS_TOKEN"),
            metrics_listen: var("TALLY_METRICS_LISTEN"),
            auth_attempts_per_minute: var("TALLY_AUTH_ATTEMPTS_PER_MINUTE").map(|v| v.trim().parse().unwrap_or(0)),
            compact_event_blocks: var("TALLY_COMPACT_EVENT_BLOCKS").map(|v| !matches!(v.trim(), "false" | "0" | "no")),
            advertise_host: var("TALLY_ADVERTISE_HOST"),
        }
    }

    /// Reads a TOML file: its settings, and its reports and alerts (`[smtp]`, `[[reports]]`,
    /// `[[alerts]]`, `check_every_secs`; see [`crate::notify`]), which only the file holds.
    pub fn from_file_with_notify(path: &Path) -> Result<(Layer, crate::notify::Settings)> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let mut table: toml::Table = toml::from_str(&text).with_context(|| format!("reading {}", path.display()))?;
        let mut notify = toml::Table::new();
        for key in ["smtp", "reports", "alerts", "check_every_secs"] {
            if let Some(v) = table.remove(key) {
                notify.insert(key.to_owned(), v);
            }
        }
        let layer: Layer = table.try_into().with_context(|| format!("reading {}", path.display()))?;
        let notify: crate::notify::Settings =
            notify.try_into().with_context(|| format!("reading the reports and alerts of {}", path.display()))?;
        notify.validate().with_context(|| format!("reading {}", path.display()))?;
        Ok((layer, notify))
    }

    /// Applies this layer over `config`: each setting it has replaces the one before.
    fn apply(self, config: &mut Config) -> Result<()> {
        if let Some(listen) = self.listen {
            config.listen = listen.parse().with_context(|| {
                format!("invalid listen address {listen:?}: expected HOST:PORT such as 127.0.0.1:8000")
            })?;
        }
        if let Some(store) = self.store {
            config.store = StoreSpec::parse(&store)?;
        }
        if let Some(table) = self.table {
            config.table = table;
        }
        if let Some(mmdb) = self.mmdb {
            config.mmdb = Some(mmdb);
        }
        if let Some(proxies) = self.trusted_proxies {
            config.trusted_proxies = proxies;
        }
        if let Some(headers) = self.country_headers {
            config.country_headers = headers.into_iter().map(|h| h.to_ascii_lowercase()).collect();
        }
        if let Some(interval) = self.flush_interval {
            config.flush_interval = parse_duration(&interval)?;
        }
        if let Some(format) = self.log_format {
            config.log_format = LogFormat::parse(&format)?;
        }
        if let Some(level) = self.log_level {
            config.log_level = level;
        }
        if let Some(max) = self.max_connections {
            if max == 0 {
                bail!("invalid max_connections: give a number of connections above zero");
            }
            config.limits.max_connections = max;
        }
        for (text, slot) in [
            (self.header_timeout, &mut config.limits.header_timeout),
            (self.idle_timeout, &mut config.limits.idle_timeout),
            (self.body_timeout, &mut config.limits.body_timeout),
            (self.request_timeout, &mut config.limits.request_timeout),
        ] {
            if let Some(text) = text {
                *slot = parse_duration(&text)?;
            }
        }
        if let Some(token) = self.metrics_token {
            let token = token.trim().to_owned();
            if token.len() < 16 || token.chars().any(|c| !c.is_ascii_graphic()) {
                bail!("invalid metrics_token: give at least 16 printable characters, no spaces");
            }
            config.metrics_token = Some(token);
        }
        if let Some(listen) = self.metrics_listen {
            config.metrics_listen = Some(listen.parse().with_context(|| {
                format!("invalid metrics_listen address {listen:?}: expected HOST:PORT such as 127.0.0.1:9090")
            })?);
        }
        if let Some(n) = self.auth_attempts_per_minute {
            if n == 0 {
                bail!("invalid auth_attempts_per_minute: give a number above zero");
            }
            config.auth_attempts_per_minute = n;
        }
        if let Some(compact) = self.compact_event_blocks {
            config.compact_event_blocks = compact;
        }
        if let Some(host) = self.advertise_host {
            let host = host.trim();
            let bracketed = host.starts_with('[') && host.ends_with(']');
            let valid = !host.is_empty()
                && host.len() <= 253
                && (bracketed || !host.contains(':'))
                && host.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'));
            if !valid {
                bail!(
                    "invalid advertise_host {host:?}: give a host name or address other processes reach this one at, \
                     without scheme or port (an IPv6 address in brackets), such as 10.0.0.5"
                );
            }
            config.advertise_host = Some(host.to_owned());
        }
        Ok(())
    }
}

impl Config {
    /// Builds the configuration: defaults, then the file (`config_file`, else `TALLY_CONFIG`,
    /// else `./tally.toml` if present), then the environment read through `var`, then `flags`.
    pub fn load(config_file: Option<&Path>, flags: Layer, var: impl Fn(&str) -> Option<String>) -> Result<Config> {
        let mut config = Config::default();
        let mut compaction_set = flags.compact_event_blocks.is_some() || var("TALLY_COMPACT_EVENT_BLOCKS").is_some();
        let named = config_file.map(Path::to_path_buf).or_else(|| var("TALLY_CONFIG").map(PathBuf::from));
        let file = match named {
            Some(path) => Some(path),
            None => Some(PathBuf::from(DEFAULT_FILE)).filter(|p| p.is_file()),
        };
        if let Some(path) = &file {
            let (layer, notify) = Layer::from_file_with_notify(path)?;
            compaction_set |= layer.compact_event_blocks.is_some();
            layer.apply(&mut config)?;
            config.notify = notify;
        }
        config.file = file;
        Layer::from_env(var).apply(&mut config)?;
        flags.apply(&mut config)?;
        // A DynamoDB store URL names its table; a separate table setting would contradict it.
        if let StoreSpec::DynamoDb(url) = &config.store {
            config.table.clone_from(&url.table);
        }
        if !compaction_set {
            config.compact_event_blocks = matches!(config.store, StoreSpec::Embedded(_));
        }
        analytics::enrich::IpRanges::parse(config.trusted_proxies.iter().map(String::as_str))
            .map_err(|e| anyhow::anyhow!("invalid trusted proxy: {}", e.0))?;
        Ok(config)
    }

    /// The configuration as a TOML file would give it, for `tally config`.
    pub fn to_toml(&self) -> String {
        let list = |items: &[String]| {
            let quoted: Vec<String> = items.iter().map(|i| quote(i)).collect();
            format!("[{}]", quoted.join(", "))
        };
        let mut out = String::new();
        out.push_str(&format!("listen = {}\n", quote(&self.listen.to_string())));
        out.push_str(&format!("store = {}\n", quote(&self.store.to_string())));
        out.push_str(&format!("table = {}\n", quote(&self.table)));
        if let Some(mmdb) = &self.mmdb {
            out.push_str(&format!("mmdb = {}\n", quote(&mmdb.display().to_string())));
        }
        out.push_str(&format!("trusted_proxies = {}\n", list(&self.trusted_proxies)));
        out.push_str(&format!("country_headers = {}\n", list(&self.country_headers)));
        out.push_str(&format!("flush_interval = \"{}ms\"\n", self.flush_interval.as_millis()));
        out.push_str(&format!("log_format = \"{}\"\n", self.log_format.as_str()));
        out.push_str(&format!("log_level = {}\n", quote(&self.log_level)));
        let l = &self.limits;
        out.push_str(&format!("max_connections = {}\n", l.max_connections));
        out.push_str(&format!("header_timeout = \"{}ms\"\n", l.header_timeout.as_millis()));
        out.push_str(&format!("idle_timeout = \"{}ms\"\n", l.idle_timeout.as_millis()));
        out.push_str(&format!("body_timeout = \"{}ms\"\n", l.body_timeout.as_millis()));
        out.push_str(&format!("request_timeout = \"{}ms\"\n", l.request_timeout.as_millis()));
        if let Some(token) = &self.metrics_token {
            out.push_str(&format!("metrics_token = {}\n", quote(token)));
        }
        if let Some(listen) = &self.metrics_listen {
            out.push_str(&format!("metrics_listen = {}\n", quote(&listen.to_string())));
        }
        out.push_str(&format!("auth_attempts_per_minute = {}\n", self.auth_attempts_per_minute));
        out.push_str(&format!("compact_event_blocks = {}\n", self.compact_event_blocks));
        if let Some(host) = &self.advertise_host {
            out.push_str(&format!("advertise_host = {}\n", quote(host)));
        }
        out
    }
}

/// A TOML basic string.
fn quote(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Reads `250ms`, `2s`, `1m` or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration> {
    let text = text.trim();
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let value: u64 =
        digits.parse().with_context(|| format!("invalid duration {text:?}: expected a number with ms, s or m"))?;
    let duration = match unit {
        "ms" => Duration::from_millis(value),
        "s" => Duration::from_secs(value),
        "m" => Duration::from_secs(value.saturating_mul(60)),
        _ => bail!("invalid duration {text:?}: the unit is ms, s or m"),
    };
    if duration.is_zero() {
        bail!("invalid duration {text:?}: it must be more than zero");
    }
    Ok(duration)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn flags_override_the_environment_which_overrides_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tally.toml");
        std::fs::write(
            &file,
            "listen = \"127.0.0.1:7001\"\ntable = \"from-file\"\nlog_format = \"json\"\nflush_interval = \"5s\"\n\
             trusted_proxies = [\"10.0.0.0/8\"]\n",
        )
        .unwrap();
        let vars = env(&[("TALLY_LISTEN", "127.0.0.1:7002"), ("TALLY_TABLE", "from-env")]);
        let flags = Layer { listen: Some("127.0.0.1:7003".into()), ..Layer::default() };
        let config = Config::load(Some(&file), flags, vars).unwrap();
        assert_eq!(config.listen, "127.0.0.1:7003".parse().unwrap(), "flag over environment");
        assert_eq!(config.table, "from-env", "environment over file");
        assert_eq!(config.log_format, LogFormat::Json, "file over default");
        assert_eq!(config.flush_interval, Duration::from_secs(5));
        assert_eq!(config.trusted_proxies, vec!["10.0.0.0/8".to_owned()]);
        assert_eq!(config.log_level, "info", "default when no layer sets it");
        assert_eq!(config.file.as_deref(), Some(file.as_path()));
    }

    #[test]
    fn a_dynamodb_store_names_the_table() {
        let flags = Layer {
            store: Some("dynamodb://analytics?region=eu-west-1".into()),
            table: Some("ignored".into()),
            ..Layer::default()
        };
        let config = Config::load(None, flags, env(&[("TALLY_CONFIG", "/nonexistent/x.toml")]));
        assert!(config.is_err(), "a named config file that is missing is an error");
        let flags = Layer { store: Some("dynamodb://analytics?region=eu-west-1".into()), ..Layer::default() };
        let config = Config::load(None, flags, env(&[])).unwrap();
        assert!(matches!(config.store, StoreSpec::DynamoDb(_)));
        assert_eq!(config.table, "analytics");
        assert!(!config.compact_event_blocks, "no merges on DynamoDB unless asked: write units are the bill there");
        let flags = Layer {
            store: Some("dynamodb://analytics?region=eu-west-1".into()),
            compact_event_blocks: Some(true),
            ..Layer::default()
        };
        assert!(Config::load(None, flags, env(&[])).unwrap().compact_event_blocks);
        assert!(
            Config::load(None, Layer::default(), env(&[])).unwrap().compact_event_blocks,
            "on for the embedded engine"
        );
    }

    #[test]
    fn lists_come_comma_separated_from_the_environment() {
        let vars =
            env(&[("TALLY_TRUSTED_PROXIES", "127.0.0.1, 10.0.0.0/8"), ("TALLY_COUNTRY_HEADERS", "CF-IPCountry")]);
        let config = Config::load(None, Layer::default(), vars).unwrap();
        assert_eq!(config.trusted_proxies, vec!["127.0.0.1".to_owned(), "10.0.0.0/8".to_owned()]);
        assert_eq!(config.country_headers, vec!["cf-ipcountry".to_owned()]);
    }

    #[test]
    fn bad_settings_are_refused_with_their_name() {
        for (name, value, needle) in [
            ("TALLY_LISTEN", "nowhere", "listen address"),
            ("TALLY_LOG_FORMAT", "xml", "log format"),
            ("TALLY_FLUSH_INTERVAL", "0s", "duration"),
            ("TALLY_FLUSH_INTERVAL", "2h", "duration"),
            ("TALLY_STORE", "s3://bucket", "unknown store"),
            ("TALLY_TRUSTED_PROXIES", "not-an-ip", "trusted proxy"),
            ("TALLY_MAX_CONNECTIONS", "many", "max_connections"),
            ("TALLY_IDLE_TIMEOUT", "soon", "duration"),
            ("TALLY_METRICS_TOKEN", "short", "metrics_token"),
            ("TALLY_METRICS_LISTEN", "nowhere", "metrics_listen"),
            ("TALLY_AUTH_ATTEMPTS_PER_MINUTE", "0", "auth_attempts_per_minute"),
        ] {
            let error = Config::load(None, Layer::default(), env(&[(name, value)])).unwrap_err();
            assert!(format!("{error:#}").contains(needle), "{name}={value}: {error:#}");
        }
    }

    #[test]
    fn unknown_file_settings_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tally.toml");
        std::fs::write(&file, "listne = \"127.0.0.1:1\"\n").unwrap();
        let error = Config::load(Some(&file), Layer::default(), env(&[])).unwrap_err();
        assert!(format!("{error:#}").contains("listne"), "{error:#}");
    }

    #[test]
    fn the_printed_configuration_reads_back_the_same() {
        let vars = env(&[
            ("TALLY_TRUSTED_PROXIES", "127.0.0.1"),
            ("TALLY_MMDB", "/data/country \"x\".mmdb"),
            ("TALLY_METRICS_TOKEN", "0123456789abcdef-metrics"),
            ("TALLY_METRICS_LISTEN", "127.0.0.1:9090"),
            ("TALLY_IDLE_TIMEOUT", "3s"),
            ("TALLY_MAX_CONNECTIONS", "64"),
        ]);
        let config = Config::load(None, Layer::default(), vars).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("printed.toml");
        std::fs::write(&file, config.to_toml()).unwrap();
        let again = Config::load(Some(&file), Layer::default(), env(&[])).unwrap();
        assert_eq!(Config { file: None, ..again }, config);
    }
}
