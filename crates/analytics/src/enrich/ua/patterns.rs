//! The `uap-core` patterns of one kind (browsers, operating systems or devices), each compiled
//! the first time a User-Agent needs it.
//!
//! Matching follows `uap-core`'s rule: the first pattern of the list that matches names the
//! result. A prefilter keeps most patterns from being tried at all: every pattern is reduced,
//! when its text is parsed, to the literal substrings a match must contain (an and/or tree of
//! "atoms"), and one Aho-Corasick automaton over all the atoms finds, in one pass over a
//! User-Agent, the patterns whose atoms it holds (plus the few patterns with no usable atom).
//! Only those are tried, in list order, until one matches. This is the `regex-filtered` crate's
//! prefilter (its `model` and `mapper` modules, the same ones the `ua-parser` crate builds), with
//! one difference: `regex-filtered` compiles every pattern's regular expression up front, about
//! 22 MB for the 1,196 patterns, while here a pattern is compiled only once the prefilter first
//! selects it for a User-Agent. A site's traffic selects a fraction of them (BENCHMARKS.md,
//! "seventh session: server memory").
//!
//! What a match yields — a family and versions from the pattern's replacements or its groups —
//! is `uap-core`'s specification, as the `ua-parser` crate implements it; the module's tests
//! check every answer against that crate's, over User-Agents drawn from every pattern and the
//! enrichment tests' lists.

use std::sync::OnceLock;

use aho_corasick::AhoCorasick;
use regex::{Captures, Regex, RegexBuilder};
use regex_filtered::{mapper, model::Model};

/// One pattern's source, as rewritten for Rust's `regex`, and its compiled form once needed.
struct Pattern {
    source: Box<str>,
    case_insensitive: bool,
    compiled: OnceLock<Option<Regex>>,
}

impl Pattern {
    /// The compiled pattern; `None` if it does not compile, which no embedded pattern does
    /// (`every_pattern_compiles`): such a pattern would match nothing rather than stop ingestion.
    fn regex(&self) -> Option<&Regex> {
        self.compiled
            .get_or_init(|| RegexBuilder::new(&self.source).case_insensitive(self.case_insensitive).build().ok())
            .as_ref()
    }
}

/// The patterns of one kind, in list order, with their prefilter.
pub(super) struct PatternSet {
    patterns: Vec<Pattern>,
    mapper: mapper::Mapper,
    prefilter: AhoCorasick,
}

impl PatternSet {
    /// Reads `patterns` (each its text and whether it ignores case), with atoms of at least
    /// `min_atom_len` bytes in the prefilter (`ua-parser` uses 3 for browsers and systems, 2 for
    /// devices). Parses every pattern, which finds any syntax error now, but compiles none.
    pub(super) fn new<'a>(
        min_atom_len: usize,
        patterns: impl IntoIterator<Item = (&'a str, bool)>,
    ) -> Result<PatternSet, String> {
        let mut mapper = mapper::Builder::new(min_atom_len);
        let mut list = Vec::new();
        for (text, case_insensitive) in patterns {
            let source = rewrite(text);
            let hir = regex_syntax::ParserBuilder::new()
                .case_insensitive(case_insensitive)
                .build()
                .parse(&source)
                .map_err(|e| format!("{text}: {e}"))?;
            mapper.push(Model::new(&hir).map_err(|e| format!("{text}: {e}"))?);
            list.push(Pattern { source: source.into(), case_insensitive, compiled: OnceLock::new() });
        }
        let (mapper, atoms) = mapper.build();
        let prefilter = AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .prefilter(true)
            .build(atoms)
            .map_err(|e| e.to_string())?;
        Ok(PatternSet { patterns: list, mapper, prefilter })
    }

    /// The first pattern that matches `haystack`: its index and its groups.
    pub(super) fn first_match<'h>(&self, haystack: &'h str) -> Option<(usize, Captures<'h>)> {
        let atoms = self.prefilter.find_overlapping_iter(haystack).map(|m| m.pattern().as_usize());
        // Candidates come back in list order.
        let candidates = self.mapper.atom_to_re(atoms);
        candidates.into_iter().find_map(|index| {
            let regex = self.patterns[index].regex()?;
            regex.captures(haystack).map(|groups| (index, groups))
        })
    }

    /// How many patterns have been compiled so far.
    pub(super) fn compiled(&self) -> usize {
        self.patterns.iter().filter(|p| p.compiled.get().is_some()).count()
    }

    /// Compiles every pattern (tests; a process compiles them as they are needed).
    #[cfg(test)]
    pub(super) fn compile_all(&self) -> Result<(), String> {
        for pattern in &self.patterns {
            if pattern.regex().is_none() {
                return Err(format!("{} does not compile", pattern.source));
            }
        }
        Ok(())
    }
}

/// `uap-core`'s patterns are written for many regex engines; two rewrites make them cheaper in
/// Rust's `regex` without changing what matches for the User-Agents they are meant for, and are
/// the ones `ua-parser` makes, so that answers stay the same:
/// - outside a character class, a repetition `{0,n}` or `{1,n}` with `n` of three digits or more
///   becomes `*` or `+` (bounded repetitions are unrolled, and a bound of hundreds costs
///   hundreds of copies);
/// - `\d`, `\D`, `\w` and `\W` become their ASCII classes (Unicode's digits and word characters
///   are hundreds of ranges).
///
/// A `]` outside any class counts as closing one (the depth goes below zero and repetitions are
/// left alone from there), and a pattern that starts with `{` is left as it is, as `ua-parser`
/// does.
pub(super) fn rewrite(pattern: &str) -> String {
    if pattern.starts_with('{') {
        return pattern.to_owned();
    }
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut chars = pattern.char_indices();
    let mut class_depth = 0i32;
    while let Some((at, c)) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some((_, 'd')) => out.push_str("[0-9]"),
                Some((_, 'D')) => out.push_str("[^0-9]"),
                Some((_, 'w')) => out.push_str("[A-Za-z0-9_]"),
                Some((_, 'W')) => out.push_str("[^A-Za-z0-9_]"),
                Some((_, escaped)) => {
                    out.push('\\');
                    out.push(escaped);
                }
                None => out.push('\\'),
            },
            '[' => {
                class_depth += 1;
                out.push('[');
            }
            ']' => {
                class_depth -= 1;
                out.push(']');
            }
            '{' if class_depth == 0 => match long_repetition(&pattern[at..]) {
                Some((replacement, len)) => {
                    out.push_str(replacement);
                    // Skip the rest of `{m,n}`; it is ASCII, one char per byte.
                    for _ in 1..len {
                        chars.next();
                    }
                }
                None => out.push('{'),
            },
            c => out.push(c),
        }
    }
    out
}

/// `{0,n}` or `{1,n}` at the start of `text`, with `n` of at least three digits: `*` or `+` and
/// the length of the repetition.
fn long_repetition(text: &str) -> Option<(&'static str, usize)> {
    let bytes = text.as_bytes();
    let replacement = match bytes.get(1..3)? {
        b"0," => "*",
        b"1," => "+",
        _ => return None,
    };
    let digits = bytes[3..].iter().take_while(|b| b.is_ascii_digit()).count();
    (digits >= 3 && bytes.get(3 + digits) == Some(&b'}')).then_some((replacement, 3 + digits + 1))
}

/// The text a replacement template gives with `groups`: `$1`…`$9` replaced by the groups (empty
/// when a group did not take part), trimmed.
pub(super) fn expand(template: &str, groups: &Captures<'_>) -> String {
    let mut out = String::new();
    groups.expand(template, &mut out);
    match out.trim() {
        trimmed if trimmed.len() == out.len() => out,
        trimmed => trimmed.to_owned(),
    }
}

/// How many groups a pattern has, not counting the whole match.
pub(super) fn group_count(groups: &Captures<'_>) -> usize {
    groups.len() - 1
}

/// Whether `replacement` refers to a group (`$` and a digit).
pub(super) fn is_template(replacement: &str) -> bool {
    replacement.as_bytes().windows(2).any(|w| w[0] == b'$' && w[1].is_ascii_digit())
}

/// Group `index`'s text, when it took part and is not empty.
pub(super) fn group<'h>(groups: &Captures<'h>, index: usize) -> Option<&'h str> {
    groups.get(index).map(|m| m.as_str()).filter(|s| !s.is_empty())
}
