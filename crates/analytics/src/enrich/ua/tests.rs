//! The lazily compiled patterns against the `ua-parser` crate, which compiles them all up front:
//! every answer the same, over User-Agents drawn from every pattern and the strings of the
//! enrichment tests and synthetic traffic.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use regex_syntax::hir::{Class, Hir, HirKind};

use super::*;

/// `ua-parser`'s reading of `user_agent`, in [`Parts`]' shape.
fn reference<'a>(extractor: &'a ua_parser::Extractor<'a>, user_agent: &'a str) -> Parts<'a> {
    let (browser, os, device) = extractor.extract(user_agent);
    let (browser, browser_major, browser_minor) = match browser {
        Some(b) => (Some(b.family), b.major, b.minor),
        None => (None, None, None),
    };
    let (os, os_major, os_minor) = match os {
        Some(o) => (Some(o.os), o.major, o.minor),
        None => (None, None, None),
    };
    Parts { browser, browser_major, browser_minor, os, os_major, os_minor, device: device.map(|d| d.device) }
}

fn reference_extractor() -> ua_parser::Extractor<'static> {
    let regexes: ua_parser::Regexes<'static> = serde_yaml::from_str(REGEXES).unwrap();
    ua_parser::Extractor::try_from(regexes).unwrap()
}

/// A string `hir` matches (or nearly: look-arounds are left out), with repetitions kept short.
fn sample(hir: &Hir, rng: &mut StdRng, out: &mut String) {
    match hir.kind() {
        HirKind::Empty | HirKind::Look(_) => {}
        HirKind::Literal(literal) => out.push_str(&String::from_utf8_lossy(&literal.0)),
        HirKind::Class(Class::Unicode(class)) => {
            // Mostly ASCII, as User-Agents are.
            let ascii: Vec<_> = class.ranges().iter().filter(|r| r.start().is_ascii()).collect();
            let ranges: Vec<_> =
                if !ascii.is_empty() && rng.random_ratio(15, 16) { ascii } else { class.ranges().iter().collect() };
            if let Some(range) = ranges.get(rng.random_range(0..ranges.len().max(1))) {
                let end = if range.start().is_ascii() { range.end().min('\x7f') } else { range.end() };
                let c = rng.random_range(u32::from(range.start())..=u32::from(end.max(range.start())));
                out.push(char::from_u32(c).unwrap_or(range.start()));
            }
        }
        HirKind::Class(Class::Bytes(class)) => {
            if let Some(range) = class.ranges().first() {
                out.push(char::from(range.start().min(0x7f)));
            }
        }
        HirKind::Repetition(repetition) => {
            let max = repetition.max.unwrap_or(repetition.min + 4).min(repetition.min + 4);
            for _ in 0..rng.random_range(repetition.min..=max) {
                sample(&repetition.sub, rng, out);
            }
        }
        HirKind::Capture(capture) => sample(&capture.sub, rng, out),
        HirKind::Concat(parts) => parts.iter().for_each(|part| sample(part, rng, out)),
        HirKind::Alternation(branches) => sample(&branches[rng.random_range(0..branches.len())], rng, out),
    }
}

/// User-Agents drawn from every pattern, alone and inside common browser text, some with their
/// letters' case changed; and every string literal of the enrichment tests and synthetic traffic.
fn corpus() -> Vec<String> {
    let file: PatternsFile = serde_yaml::from_str(REGEXES).unwrap();
    let patterns = file
        .user_agent_parsers
        .iter()
        .map(|p| p.regex.as_str())
        .chain(file.os_parsers.iter().map(|p| p.regex.as_str()))
        .chain(file.device_parsers.iter().map(|p| p.regex.as_str()));
    let mut rng = StdRng::seed_from_u64(20261126);
    let mut corpus = Vec::new();
    let frames = [
        ("", ""),
        (
            "Mozilla/5.0 (Linux; Android 13; ",
            ") AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Mobile Safari/537.36",
        ),
        ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) ", " Safari/537.36"),
        ("Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) ", " Mobile/15E148"),
    ];
    for pattern in patterns {
        let hir = regex_syntax::Parser::new().parse(&patterns::rewrite(pattern)).unwrap();
        for round in 0..8 {
            let mut drawn = String::new();
            sample(&hir, &mut rng, &mut drawn);
            if round % 4 == 3 {
                drawn = drawn
                    .chars()
                    .map(|c| if rng.random_bool(0.5) { c.to_ascii_uppercase() } else { c.to_ascii_lowercase() })
                    .collect();
            }
            let (before, after) = frames[round % frames.len()];
            corpus.push(format!("{before}{drawn}{after}"));
        }
    }
    for source in [include_str!("../tests.rs"), include_str!("../../synth.rs")] {
        corpus.extend(source.split('"').skip(1).step_by(2).filter(|s| s.len() > 8).map(str::to_owned));
    }
    corpus
}

#[test]
fn every_pattern_compiles() {
    let parser = UserAgentParser::new().unwrap();
    assert_eq!(parser.compiled_patterns(), (0, 0, 0), "nothing is compiled before it is needed");
    for set in [&parser.browsers, &parser.systems, &parser.devices] {
        set.compile_all().unwrap();
    }
    let file: PatternsFile = serde_yaml::from_str(REGEXES).unwrap();
    assert_eq!(
        parser.compiled_patterns(),
        (file.user_agent_parsers.len(), file.os_parsers.len(), file.device_parsers.len())
    );
}

#[test]
fn lazily_compiled_patterns_answer_as_ua_parser_does() {
    let parser = UserAgentParser::new().unwrap();
    let extractor = reference_extractor();
    let corpus = corpus();
    assert!(corpus.len() > 9_000, "{}", corpus.len());
    let mut matched = [0usize; 3];
    for user_agent in &corpus {
        let expected = reference(&extractor, user_agent);
        let actual = parser.parts(user_agent);
        assert_eq!(actual, expected, "{user_agent:?}");
        for (count, part) in matched.iter_mut().zip([&actual.browser, &actual.os, &actual.device]) {
            *count += usize::from(part.is_some());
        }
    }
    // The corpus reaches the patterns: most strings match a browser, a system or a device.
    assert!(matched.iter().all(|&n| n > corpus.len() / 10), "{matched:?} of {}", corpus.len());
}

/// The same comparison over a file of User-Agents, one a line, named by `TALLY_UA_CORPUS`
/// (skipped without it): `TALLY_UA_CORPUS=agents.txt cargo test -p analytics --release
/// ua_corpus_file -- --nocapture`. Prints how many patterns the file's User-Agents compiled.
#[test]
fn ua_corpus_file() {
    let Ok(path) = std::env::var("TALLY_UA_CORPUS") else { return };
    let text = std::fs::read_to_string(&path).unwrap();
    let parser = UserAgentParser::new().unwrap();
    let extractor = reference_extractor();
    let mut lines = 0;
    for user_agent in text.lines().filter(|l| !l.is_empty()) {
        assert_eq!(parser.parts(user_agent), reference(&extractor, user_agent), "{user_agent:?}");
        assert_eq!(parser.parse_uncached(user_agent), *parser.parse(user_agent));
        lines += 1;
    }
    println!("{path}: {lines} User-Agents, all equal; compiled patterns {:?}", parser.compiled_patterns());
}

#[test]
fn rewrites_match_the_ones_ua_parser_makes() {
    use patterns::rewrite;
    assert_eq!(rewrite(r"Foo/(\d+)\.(\w+)"), r"Foo/([0-9]+)\.([A-Za-z0-9_]+)");
    assert_eq!(rewrite(r"\D\W[\d.]"), r"[^0-9][^A-Za-z0-9_][[0-9].]");
    assert_eq!(rewrite(r"a.{0,100}b.{1,250}c.{0,99}d.{2,300}"), r"a.*b.+c.{0,99}d.{2,300}");
    assert_eq!(rewrite(r"[{0,100}]\{0,100}"), r"[{0,100}]\{0,100}");
    assert_eq!(rewrite(r"\\d\\{0,100}"), r"\\d\\*");
}
