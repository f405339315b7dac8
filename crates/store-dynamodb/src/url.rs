//! The `--store` URL of the DynamoDB engine: `dynamodb://TABLE?region=…&endpoint=…&profile=…`.

use std::fmt;
use std::time::Duration;

use crate::Options;

/// A parsed `dynamodb://` store URL: the table Tally uses and the connection options.
///
/// ```
/// use store_dynamodb::StoreUrl;
///
/// let url = StoreUrl::parse("dynamodb://tally?region=eu-west-1&endpoint=http://127.0.0.1:8000").unwrap();
/// assert_eq!(url.table, "tally");
/// assert_eq!(url.options.region.as_deref(), Some("eu-west-1"));
/// assert_eq!(url.options.endpoint.as_deref(), Some("http://127.0.0.1:8000"));
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct StoreUrl {
    /// The table name.
    pub table: String,
    /// Region, endpoint, profile, retry and timeout settings; anything unset comes from the
    /// standard AWS configuration chain.
    pub options: Options,
}

/// Why a store URL was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UrlError {
    /// The URL does not start with `dynamodb://`.
    #[error("a DynamoDB store URL starts with dynamodb:// (got {0:?})")]
    Scheme(String),
    /// The table name is not a valid DynamoDB table name.
    #[error("invalid table name {0:?}: DynamoDB table names are 3–255 characters of A-Z a-z 0-9 _ . -")]
    Table(String),
    /// A query parameter is unknown, repeated or has an invalid value.
    #[error("invalid store URL parameter {name:?}: {reason}")]
    Parameter {
        /// The parameter's name.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl StoreUrl {
    /// Parses `dynamodb://TABLE[?key=value&…]`.
    ///
    /// Parameters: `region`, `endpoint` (an `http://` or `https://` URL), `profile`,
    /// `max_attempts` (at least 1), `timeout_ms` (per attempt). Values may be percent-encoded.
    pub fn parse(text: &str) -> Result<StoreUrl, UrlError> {
        let rest = text.strip_prefix("dynamodb://").ok_or_else(|| UrlError::Scheme(text.to_string()))?;
        let (table, query) = match rest.split_once('?') {
            Some((t, q)) => (t, Some(q)),
            None => (rest, None),
        };
        let table = table.strip_suffix('/').unwrap_or(table);
        let table = decode(table).map_err(|_| UrlError::Table(table.to_string()))?;
        if !(3..=255).contains(&table.len())
            || !table.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
        {
            return Err(UrlError::Table(table));
        }
        let mut options = Options::default();
        let mut seen = Vec::new();
        for pair in query.into_iter().flat_map(|q| q.split('&')).filter(|p| !p.is_empty()) {
            let (name, raw) = pair.split_once('=').unwrap_or((pair, ""));
            let bad = |reason: &str| UrlError::Parameter { name: name.to_string(), reason: reason.to_string() };
            if seen.contains(&name) {
                return Err(bad("given twice"));
            }
            seen.push(name);
            let value = decode(raw).map_err(|e| bad(&e))?;
            if value.is_empty() {
                return Err(bad("empty value"));
            }
            match name {
                "region" => options.region = Some(value),
                "endpoint" => {
                    if !(value.starts_with("http://") || value.starts_with("https://")) {
                        return Err(bad("must be an http:// or https:// URL"));
                    }
                    options.endpoint = Some(value);
                }
                "profile" => options.profile = Some(value),
                "max_attempts" => {
                    options.max_attempts = value
                        .parse()
                        .ok()
                        .filter(|n| (1..=100).contains(n))
                        .ok_or_else(|| bad("a number from 1 to 100"))?
                }
                "timeout_ms" => {
                    let ms: u64 = value.parse().ok().filter(|n| *n > 0).ok_or_else(|| bad("a positive number"))?;
                    options.attempt_timeout = Duration::from_millis(ms);
                }
                _ => return Err(bad("unknown; expected region, endpoint, profile, max_attempts or timeout_ms")),
            }
        }
        Ok(StoreUrl { table, options })
    }
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "dynamodb://{}", self.table)?;
        let mut sep = '?';
        let mut param = |f: &mut fmt::Formatter<'_>, name: &str, value: &str| {
            let r = write!(f, "{sep}{name}={}", encode(value));
            sep = '&';
            r
        };
        if let Some(r) = &self.options.region {
            param(f, "region", r)?;
        }
        if let Some(e) = &self.options.endpoint {
            param(f, "endpoint", e)?;
        }
        if let Some(p) = &self.options.profile {
            param(f, "profile", p)?;
        }
        let defaults = Options::default();
        if self.options.max_attempts != defaults.max_attempts {
            param(f, "max_attempts", &self.options.max_attempts.to_string())?;
        }
        if self.options.attempt_timeout != defaults.attempt_timeout {
            param(f, "timeout_ms", &self.options.attempt_timeout.as_millis().to_string())?;
        }
        Ok(())
    }
}

/// Percent-decodes `text` (`+` is kept literally: these are not form values).
fn decode(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
            let byte = hex.and_then(|h| u8::from_str_radix(h, 16).ok()).ok_or("a bad percent escape")?;
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "not UTF-8 once decoded".to_string())
}

/// Percent-encodes what would otherwise end or split a parameter.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '%' | '&' | '?' | '#' | '=' | ' ' => out.push_str(&format!("%{:02X}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_table_and_options() {
        let url = StoreUrl::parse("dynamodb://tally.events?region=us-east-1&endpoint=http://127.0.0.1:8000&profile=ci")
            .unwrap();
        assert_eq!(url.table, "tally.events");
        assert_eq!(url.options.region.as_deref(), Some("us-east-1"));
        assert_eq!(url.options.endpoint.as_deref(), Some("http://127.0.0.1:8000"));
        assert_eq!(url.options.profile.as_deref(), Some("ci"));
    }

    #[test]
    fn table_alone_leaves_everything_to_the_aws_chain() {
        let url = StoreUrl::parse("dynamodb://tally").unwrap();
        assert_eq!(url.options, Options::default());
        assert_eq!(StoreUrl::parse("dynamodb://tally/").unwrap().table, "tally");
    }

    #[test]
    fn retry_and_timeout_settings() {
        let url = StoreUrl::parse("dynamodb://tally?max_attempts=3&timeout_ms=2500").unwrap();
        assert_eq!(url.options.max_attempts, 3);
        assert_eq!(url.options.attempt_timeout, Duration::from_millis(2500));
    }

    #[test]
    fn percent_escapes_are_decoded() {
        let url = StoreUrl::parse("dynamodb://tally?endpoint=http%3A%2F%2Flocalhost%3A4566").unwrap();
        assert_eq!(url.options.endpoint.as_deref(), Some("http://localhost:4566"));
    }

    #[test]
    fn display_round_trips() {
        for text in
            ["dynamodb://tally", "dynamodb://tally?region=eu-west-1&endpoint=http://127.0.0.1:8000&max_attempts=2"]
        {
            let url = StoreUrl::parse(text).unwrap();
            assert_eq!(url.to_string(), text);
            assert_eq!(StoreUrl::parse(&url.to_string()).unwrap(), url);
        }
    }

    #[test]
    fn rejects_bad_urls() {
        let cases = [
            "postgres://tally",
            "dynamodb://",
            "dynamodb://ab",
            "dynamodb://bad/name",
            "dynamodb://bad name",
            "dynamodb://tally?colour=blue",
            "dynamodb://tally?region=",
            "dynamodb://tally?region=a&region=b",
            "dynamodb://tally?endpoint=127.0.0.1:8000",
            "dynamodb://tally?max_attempts=0",
            "dynamodb://tally?timeout_ms=soon",
            "dynamodb://tally?region=%zz",
        ];
        for text in cases {
            assert!(StoreUrl::parse(text).is_err(), "{text} was accepted");
        }
        assert!(matches!(StoreUrl::parse("http://x"), Err(UrlError::Scheme(_))));
        assert!(matches!(StoreUrl::parse("dynamodb://x?nope=1"), Err(UrlError::Table(_))));
        assert!(matches!(StoreUrl::parse("dynamodb://xyz?nope=1"), Err(UrlError::Parameter { .. })));
    }
}
