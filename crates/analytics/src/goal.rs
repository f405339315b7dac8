//! Goals as Plausible defines them, and the conversion rate Plausible shows for them.
//!
//! A goal is either a **page goal** — a pageview whose path matches a pattern — or an **event
//! goal** — a custom event with exactly that name. Its conversions are the visitors who completed
//! it; its conversion rate is converting visitors / visitors.
//!
//! ```
//! use analytics::goal::{Goal, conversion_rate};
//!
//! let signup = Goal::event("Signup").unwrap();
//! let blog = Goal::page("/blog/*").unwrap();
//! assert!(signup.matches("Signup", "/pricing"));
//! assert!(blog.matches("pageview", "/blog/hello"));
//! assert!(!blog.matches("pageview", "/blog/2024/hello")); // `*` stays inside one segment
//! assert!(Goal::page("/blog/**").unwrap().matches("pageview", "/blog/2024/hello"));
//! assert_eq!(blog.display_name(), "Visit /blog/*");
//!
//! assert_eq!(conversion_rate(1, 3).to_string(), "33.3");
//! ```
//!
//! # Pattern syntax
//!
//! Tally follows Plausible's original definition of pageview goals, two wildcards: `*` matches
//! any run of characters **within one path segment** (never a `/`), `**` matches any run of
//! characters **across segments**, and every other character matches itself, case-sensitively,
//! against the whole path (a pattern is anchored at both ends: `/blog` does not match `/blog/`).
//! Plausible's own code has since loosened a single `*` to cross segments too and added `|`
//! alternatives; Tally keeps the original, stricter meaning, so `/blog/*` means "a post", and
//! treats `|` as a literal character. Matching runs in O(pattern × path) time on any input: no
//! regular expression is built, so no pattern can be slow.
//!
//! Page goals match only `pageview` events, as Plausible's do.

use std::fmt;

/// The event name of a page view, the only event a page goal looks at.
pub const PAGEVIEW: &str = "pageview";

/// Longest page pattern, in bytes: the spec's longest page URL, since a pattern longer than any
/// path it could match is a mistake.
pub const MAX_PATTERN_BYTES: usize = 2000;

/// Longest event goal name, in characters: the spec's longest event name, since a longer goal
/// could never match an ingested event.
pub const MAX_EVENT_NAME_CHARS: usize = 120;

/// Why a goal was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GoalError {
    /// The pattern or name is empty.
    #[error("a goal needs a page path or an event name, got nothing")]
    Empty,
    /// Longer than the limit.
    #[error("too long: {len} {unit}, at most {max}")]
    TooLong {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
        /// What the lengths count: bytes or characters.
        unit: &'static str,
    },
    /// A page pattern that does not start with `/`.
    #[error("a page goal's path must start with '/', got {0:?}")]
    NotAPath(String),
    /// Control characters (newlines, tabs, NUL…), which no path or event name has.
    #[error("control characters are not allowed")]
    ControlCharacter,
    /// Leading or trailing spaces, which would make a goal that looks right but never matches.
    #[error("leading or trailing whitespace is not allowed")]
    SurroundingWhitespace,
    /// An event goal named `pageview`, which would count every page view.
    #[error("an event goal cannot be named \"pageview\"; use a page goal with a path")]
    PageviewEventName,
}

/// A goal: a page path pattern or a custom event name. Built only through [`Goal::page`] and
/// [`Goal::event`], so a `Goal` is always valid.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Goal {
    /// A pageview whose path matches the pattern.
    Page(PagePattern),
    /// A custom event with exactly this name.
    Event(String),
}

impl Goal {
    /// A page goal: `pattern` starts with `/`, may use `*` and `**`.
    pub fn page(pattern: &str) -> Result<Goal, GoalError> {
        PagePattern::parse(pattern).map(Goal::Page)
    }

    /// A custom-event goal, matching that name exactly (case-sensitive, as Plausible's).
    pub fn event(name: &str) -> Result<Goal, GoalError> {
        check_text(name)?;
        let chars = name.chars().count();
        if chars > MAX_EVENT_NAME_CHARS {
            return Err(GoalError::TooLong { len: chars, max: MAX_EVENT_NAME_CHARS, unit: "characters" });
        }
        if name == PAGEVIEW {
            return Err(GoalError::PageviewEventName);
        }
        Ok(Goal::Event(name.to_owned()))
    }

    /// Whether an event named `event_name` at `path` completes this goal.
    pub fn matches(&self, event_name: &str, path: &str) -> bool {
        match self {
            Goal::Page(p) => event_name == PAGEVIEW && p.matches(path),
            Goal::Event(name) => event_name == name,
        }
    }

    /// The name Plausible shows for the goal (and the value of the `event:goal` dimension):
    /// `Visit /blog/*` for a page goal, the event name for an event goal.
    pub fn display_name(&self) -> String {
        match self {
            Goal::Page(p) => format!("Visit {}", p.as_str()),
            Goal::Event(name) => name.clone(),
        }
    }
}

/// A validated page path pattern with `*` (within a segment) and `**` (across segments).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PagePattern {
    source: String,
    tokens: Vec<Token>,
    /// How many tokens lead the pattern as plain bytes: `source`'s first `literal` bytes, which
    /// a matching path starts with.
    literal: usize,
}

/// One element of a compiled pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Token {
    /// This byte, exactly.
    Byte(u8),
    /// Any run of bytes without a `/` (`*`).
    Segment,
    /// Any run of bytes (`**`).
    Any,
}

impl PagePattern {
    /// Validates and compiles a pattern.
    pub fn parse(pattern: &str) -> Result<PagePattern, GoalError> {
        check_text(pattern)?;
        if pattern.len() > MAX_PATTERN_BYTES {
            return Err(GoalError::TooLong { len: pattern.len(), max: MAX_PATTERN_BYTES, unit: "bytes" });
        }
        if !pattern.starts_with('/') {
            return Err(GoalError::NotAPath(pattern.to_owned()));
        }
        let mut tokens = Vec::with_capacity(pattern.len());
        let bytes = pattern.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            // `**` is read before `*`, so `***` is `**` then `*`, which matches what `**` does.
            if bytes[i..].starts_with(b"**") {
                tokens.push(Token::Any);
                i += 2;
            } else if bytes[i] == b'*' {
                tokens.push(Token::Segment);
                i += 1;
            } else {
                tokens.push(Token::Byte(bytes[i]));
                i += 1;
            }
        }
        let literal = tokens.iter().take_while(|t| matches!(t, Token::Byte(_))).count();
        Ok(PagePattern { source: pattern.to_owned(), tokens, literal })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether the whole of `path` matches.
    pub fn matches(&self, path: &str) -> bool {
        // Every event is matched against every page goal of its site, and most goals are a plain
        // path or start with one: the pattern's literal start settles most paths before the table.
        let Some(path) = path.as_bytes().strip_prefix(&self.source.as_bytes()[..self.literal]) else {
            return false;
        };
        let tokens = &self.tokens[self.literal..];
        if tokens.is_empty() {
            return path.is_empty();
        }
        // A row of the classic wildcard table: `reach[j]` says whether the tokens read so far can
        // consume exactly the first `j` bytes of the path. One row of `path.len() + 1` booleans,
        // updated per token, bounds both time and memory whatever the input; a short path's row
        // lives on the stack.
        let mut stack = [false; 256];
        let mut heap = Vec::new();
        let reach: &mut [bool] = if path.len() < stack.len() {
            &mut stack[..=path.len()]
        } else {
            heap.resize(path.len() + 1, false);
            &mut heap
        };
        reach[0] = true;
        for token in tokens {
            match *token {
                Token::Byte(b) => {
                    for j in (1..=path.len()).rev() {
                        reach[j] = reach[j - 1] && path[j - 1] == b;
                    }
                    reach[0] = false;
                }
                Token::Segment => {
                    for j in 1..=path.len() {
                        reach[j] = reach[j] || (reach[j - 1] && path[j - 1] != b'/');
                    }
                }
                Token::Any => {
                    for j in 1..=path.len() {
                        reach[j] = reach[j] || reach[j - 1];
                    }
                }
            }
            if !reach.contains(&true) {
                return false;
            }
        }
        reach[path.len()]
    }
}

impl fmt::Debug for PagePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("PagePattern").field(&self.source).finish()
    }
}

impl fmt::Display for PagePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

/// The checks a pattern and an event name share.
fn check_text(text: &str) -> Result<(), GoalError> {
    if text.is_empty() {
        return Err(GoalError::Empty);
    }
    if text.chars().any(char::is_control) {
        return Err(GoalError::ControlCharacter);
    }
    if text.trim() != text {
        return Err(if text.trim().is_empty() { GoalError::Empty } else { GoalError::SurroundingWhitespace });
    }
    Ok(())
}

/// A conversion rate: converting visitors out of all visitors, computed exactly and rounded only
/// when shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConversionRate {
    converting: u64,
    visitors: u64,
}

/// The conversion rate of `converting` visitors among `visitors`.
///
/// It is 0 when there are no visitors, as Plausible shows. It is capped at 100%: visitor counts
/// are sketch estimates (within 2%), so for a goal nearly every visitor completes, the
/// converting estimate can exceed the total by a little, and a rate above 100% would only confuse.
pub fn conversion_rate(converting: u64, visitors: u64) -> ConversionRate {
    ConversionRate { converting: converting.min(visitors), visitors }
}

impl ConversionRate {
    /// The percentage rounded half up to `decimals` places (at most 6), the way Plausible rounds
    /// (`Float.round(converting / visitors * 100, decimals)`) but from exact integers, so that
    /// 1 of 16 shows 6.3, not a binary-float 6.2.
    pub fn percent(&self, decimals: u32) -> f64 {
        let scale = 10u128.pow(decimals.min(6));
        self.scaled(scale) as f64 / scale as f64
    }

    /// The percentage times `scale`, rounded half up, as an integer.
    fn scaled(&self, scale: u128) -> u128 {
        if self.visitors == 0 {
            return 0;
        }
        let (c, v) = (u128::from(self.converting), u128::from(self.visitors));
        // round(c * 100 * scale / v) = floor((2 * c * 100 * scale + v) / (2 * v)); u128 cannot
        // overflow here: c ≤ 2^64, and 200 * 10^6 < 2^28.
        (2 * c * 100 * scale + v) / (2 * v)
    }
}

/// One decimal place, as Plausible's dashboard shows conversion rates: `33.3`, `100`, `0`.
impl fmt::Display for ConversionRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tenths = self.scaled(10);
        if tenths.is_multiple_of(10) {
            write!(f, "{}", tenths / 10)
        } else {
            write!(f, "{}.{}", tenths / 10, tenths % 10)
        }
    }
}

#[cfg(test)]
mod tests;
