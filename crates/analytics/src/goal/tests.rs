//! Data-driven tests of goals: which paths a pattern matches, what is refused, how rates round.

use std::collections::HashMap;

use expect_test::{Expect, expect};
use proptest::prelude::*;

use super::*;

/// The paths most tests try, chosen to sit on every boundary of `*` and `**`.
const PATHS: &[&str] =
    &["/", "/blog", "/blog/", "/blog/hello", "/blog/2024/hello", "/blogroll", "/en/blog/hello", "/Blog/hello"];

/// Shows which of [`PATHS`] the page goal `pattern` matches, or why it was refused.
fn check(pattern: &str, expect: Expect) {
    let shown = match Goal::page(pattern) {
        Ok(goal) => {
            let hits: Vec<&str> = PATHS.iter().copied().filter(|p| goal.matches(PAGEVIEW, p)).collect();
            hits.join(" ")
        }
        Err(e) => format!("error: {e}"),
    };
    expect.assert_eq(&shown);
}

#[test]
fn page_patterns() {
    check("/", expect!["/"]);
    check("/blog", expect!["/blog"]);
    check("/blog/", expect!["/blog/"]);
    check("/blog*", expect!["/blog /blogroll"]);
    check("/blog/*", expect!["/blog/ /blog/hello"]);
    check("/blog/**", expect!["/blog/ /blog/hello /blog/2024/hello"]);
    check("/blog**", expect!["/blog /blog/ /blog/hello /blog/2024/hello /blogroll"]);
    check("/*/hello", expect!["/blog/hello /Blog/hello"]);
    check("/**/hello", expect!["/blog/hello /blog/2024/hello /en/blog/hello /Blog/hello"]);
    check("/**hello", expect!["/blog/hello /blog/2024/hello /en/blog/hello /Blog/hello"]);
    check("/*", expect!["/ /blog /blogroll"]);
    check("/**", expect!["/ /blog /blog/ /blog/hello /blog/2024/hello /blogroll /en/blog/hello /Blog/hello"]);
    check("/***", expect!["/ /blog /blog/ /blog/hello /blog/2024/hello /blogroll /en/blog/hello /Blog/hello"]);
    check("/*/*/hello", expect!["/blog/2024/hello /en/blog/hello"]);
    check("/blog/*o", expect!["/blog/hello"]);
    check("/b*g/*", expect!["/blog/ /blog/hello"]);
    check("/BLOG/hello", expect![""]);
}

#[test]
fn other_characters_are_literal() {
    // Dots, question marks, brackets and bars mean nothing special: no regular expression is built.
    let goal = Goal::page("/a.b?c[d]|(e)+$").unwrap();
    assert!(goal.matches(PAGEVIEW, "/a.b?c[d]|(e)+$"));
    assert!(!goal.matches(PAGEVIEW, "/aXb?c[d]|(e)+$"));
    assert!(!goal.matches(PAGEVIEW, "/a.b"));
    let unicode = Goal::page("/café/*").unwrap();
    assert!(unicode.matches(PAGEVIEW, "/café/menü"));
    assert!(!unicode.matches(PAGEVIEW, "/cafe/menu"));
}

#[test]
fn refused_patterns() {
    check("", expect!["error: a goal needs a page path or an event name, got nothing"]);
    check("   ", expect!["error: a goal needs a page path or an event name, got nothing"]);
    check("blog/*", expect![[r#"error: a page goal's path must start with '/', got "blog/*""#]]);
    check(
        "https://example.com/blog",
        expect![[r#"error: a page goal's path must start with '/', got "https://example.com/blog""#]],
    );
    check("*", expect![[r#"error: a page goal's path must start with '/', got "*""#]]);
    check(" /blog", expect!["error: leading or trailing whitespace is not allowed"]);
    check("/blog\n", expect!["error: control characters are not allowed"]);
    check("/a\0b", expect!["error: control characters are not allowed"]);
    check(&format!("/{}", "a".repeat(2000)), expect!["error: too long: 2001 bytes, at most 2000"]);
    assert!(Goal::page(&format!("/{}", "a".repeat(1999))).is_ok());
}

/// Shows which events an event goal named `name` matches, or why it was refused.
fn check_event(name: &str, expect: Expect) {
    let events = ["Signup", "signup", "Signup ", "pageview", "Outbound Link: Click"];
    let shown = match Goal::event(name) {
        Ok(goal) => {
            let hits: Vec<String> =
                events.iter().filter(|e| goal.matches(e, "/any/path")).map(|e| format!("{e:?}")).collect();
            hits.join(" ")
        }
        Err(e) => format!("error: {e}"),
    };
    expect.assert_eq(&shown);
}

#[test]
fn event_goals() {
    check_event("Signup", expect![[r#""Signup""#]]);
    check_event("signup", expect![[r#""signup""#]]);
    check_event("Outbound Link: Click", expect![[r#""Outbound Link: Click""#]]);
    check_event("Sign*", expect![""]);
    check_event(
        "pageview",
        expect![[r#"error: an event goal cannot be named "pageview"; use a page goal with a path"#]],
    );
    check_event("", expect!["error: a goal needs a page path or an event name, got nothing"]);
    check_event("Signup ", expect!["error: leading or trailing whitespace is not allowed"]);
    check_event("Sign\tup", expect!["error: control characters are not allowed"]);
    check_event(&"é".repeat(121), expect!["error: too long: 121 characters, at most 120"]);
    assert!(Goal::event(&"é".repeat(120)).is_ok());
}

#[test]
fn page_goals_only_see_pageviews() {
    let goal = Goal::page("/thanks").unwrap();
    assert!(goal.matches("pageview", "/thanks"));
    assert!(!goal.matches("Signup", "/thanks"));
    assert!(!goal.matches("Pageview", "/thanks"));
}

#[test]
fn display_names() {
    expect!["Visit /blog/**"].assert_eq(&Goal::page("/blog/**").unwrap().display_name());
    expect!["Signup"].assert_eq(&Goal::event("Signup").unwrap().display_name());
    expect![[r#"Page(PagePattern("/a/*"))"#]].assert_eq(&format!("{:?}", Goal::page("/a/*").unwrap()));
}

/// Shows the rate of `converting` among `visitors` at 1 and 2 decimals.
fn check_rate(converting: u64, visitors: u64, expect: Expect) {
    let r = conversion_rate(converting, visitors);
    expect.assert_eq(&format!("{r} | {} | {}", r.percent(1), r.percent(2)));
}

#[test]
fn conversion_rates() {
    check_rate(0, 0, expect!["0 | 0 | 0"]);
    check_rate(0, 10, expect!["0 | 0 | 0"]);
    check_rate(10, 10, expect!["100 | 100 | 100"]);
    check_rate(1, 3, expect!["33.3 | 33.3 | 33.33"]);
    check_rate(2, 3, expect!["66.7 | 66.7 | 66.67"]);
    check_rate(1, 8, expect!["12.5 | 12.5 | 12.5"]);
    // Half up, as Elixir's `Float.round` does: 6.25 → 6.3 (a banker's rounding would give 6.2).
    check_rate(1, 16, expect!["6.3 | 6.3 | 6.25"]);
    check_rate(1, 2000, expect!["0.1 | 0.1 | 0.05"]);
    check_rate(1, 20001, expect!["0 | 0 | 0"]);
    check_rate(1, 7, expect!["14.3 | 14.3 | 14.29"]);
    // Estimates can put the converting visitors a little above the total; the rate stops at 100%.
    check_rate(102, 100, expect!["100 | 100 | 100"]);
    check_rate(u64::MAX, u64::MAX, expect!["100 | 100 | 100"]);
    check_rate(u64::MAX / 3, u64::MAX, expect!["33.3 | 33.3 | 33.33"]);
}

/// A slow but obviously right reference: Plausible's pattern as a recursive matcher, remembering
/// what it settled for each (pattern, path) suffix pair so long paths stay quick.
fn reference(pattern: &[u8], path: &[u8]) -> bool {
    fn go(pattern: &[u8], path: &[u8], seen: &mut HashMap<(usize, usize), bool>) -> bool {
        if let Some(&known) = seen.get(&(pattern.len(), path.len())) {
            return known;
        }
        let answer = match pattern {
            [] => path.is_empty(),
            [b'*', b'*', rest @ ..] => (0..=path.len()).any(|k| go(rest, &path[k..], seen)),
            [b'*', rest @ ..] => {
                (0..=path.len()).take_while(|&k| !path[..k].contains(&b'/')).any(|k| go(rest, &path[k..], seen))
            }
            [c, rest @ ..] => path.first() == Some(c) && go(rest, &path[1..], seen),
        };
        seen.insert((pattern.len(), path.len()), answer);
        answer
    }
    go(pattern, path, &mut HashMap::new())
}

proptest! {
    #[test]
    fn matcher_agrees_with_reference(pattern in "/[ab/*]{0,8}", path in "/[ab/]{0,10}") {
        let goal = PagePattern::parse(&pattern).unwrap();
        prop_assert_eq!(goal.matches(&path), reference(pattern.as_bytes(), path.as_bytes()));
    }

    /// Paths past the matcher's row on the stack, and patterns that are mostly or wholly a
    /// literal path (the literal start is checked apart from the table).
    #[test]
    fn matcher_agrees_with_reference_on_long_paths_and_literal_starts(
        pattern in "/[ab/]{0,6}[ab/*]{0,4}",
        repeat in 0usize..600,
        tail in "[ab/]{0,6}",
    ) {
        let goal = PagePattern::parse(&pattern).unwrap();
        // A path that often shares the pattern's literal start, of any length around the row's.
        let literal = pattern.split('*').next().unwrap_or("/");
        let path = format!("{literal}{}{tail}", "a".repeat(repeat));
        prop_assert_eq!(goal.matches(&path), reference(pattern.as_bytes(), path.as_bytes()));
        prop_assert_eq!(goal.matches(&tail), reference(pattern.as_bytes(), tail.as_bytes()));
    }

    #[test]
    fn no_input_panics(pattern in any::<String>(), path in any::<String>(), name in any::<String>()) {
        if let Ok(goal) = Goal::page(&pattern) {
            let _ = goal.matches(PAGEVIEW, &path);
        }
        if let Ok(goal) = Goal::event(&name) {
            let _ = goal.matches(&name, &path);
        }
    }
}

#[test]
fn worst_case_pattern_is_fast() {
    // Many stars against a long path that almost matches: a backtracking matcher would take
    // exponential time; the table takes pattern × path steps.
    let pattern = format!("/{}b", "*a".repeat(999));
    let goal = Goal::page(&pattern).unwrap();
    let path = format!("/{}", "a".repeat(1999));
    let start = std::time::Instant::now();
    assert!(!goal.matches(PAGEVIEW, &path));
    assert!(start.elapsed() < std::time::Duration::from_secs(2));
}
