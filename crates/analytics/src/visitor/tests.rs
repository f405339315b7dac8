//! Visitor id and salt schedule tests.

use expect_test::expect;
use proptest::prelude::*;

use super::*;

fn salt(byte: u8) -> Salt {
    Salt::from_bytes(&[byte; 16]).unwrap()
}

#[test]
fn visitor_ids_depend_on_every_input() {
    let ip: IpAddr = "203.0.113.9".parse().unwrap();
    let ua = "Mozilla/5.0";
    let base = visitor_id(&salt(1), "site", ip, ua);
    assert_eq!(base, visitor_id(&salt(1), "site", ip, ua));
    assert_ne!(base, visitor_id(&salt(2), "site", ip, ua));
    assert_ne!(base, visitor_id(&salt(1), "site2", ip, ua));
    assert_ne!(base, visitor_id(&salt(1), "site", "203.0.113.10".parse().unwrap(), ua));
    assert_ne!(base, visitor_id(&salt(1), "site", ip, "Mozilla/5.1"));
    // The framing keeps field boundaries apart: moving bytes between site and User-Agent changes the id.
    assert_ne!(visitor_id(&salt(1), "ab", ip, "c"), visitor_id(&salt(1), "a", ip, "bc"));
    // An IPv4 client is the same client however the socket spells it.
    assert_eq!(base, visitor_id(&salt(1), "site", "::ffff:203.0.113.9".parse().unwrap(), ua));
    // The id is stable across releases: stored sessions are looked up by it.
    expect!["7c7b839a69fb4b3f"].assert_eq(&base.to_string());
    assert_eq!(VisitorId::parse(&base.to_string()), Some(base));
    assert_eq!(VisitorId::parse("xyz"), None);
    assert_eq!(VisitorId::parse("+23456789abcdef0"), None);
}

#[test]
fn salts() {
    assert_eq!(Salt::from_bytes(&[1; 15]).unwrap_err(), SaltError::Length { expected: 16, actual: 15 });
    assert_eq!(Salt::from_bytes(&[0; 16]).unwrap_err(), SaltError::AllZero);
    let a = Salt::random();
    let b = Salt::random();
    assert_ne!(a, b);
    assert_eq!(Salt::from_bytes(a.as_bytes()).unwrap(), a);
    assert_eq!(format!("{a:?}"), "Salt(…)");
}

#[test]
fn days() {
    let check = |ms: i64, text: &str| {
        let day = UtcDay::from_unix_ms(ms);
        assert_eq!(day.to_string(), text);
        assert_eq!(UtcDay::parse(text), Some(day));
    };
    check(0, "1970-01-01");
    check(DAY_MS - 1, "1970-01-01");
    check(-1, "1969-12-31");
    check(951_782_400_000, "2000-02-29");
    check(1_732_233_600_000, "2024-11-22");
    check(1_795_305_600_000, "2026-11-22");
    check(253_402_214_400_000, "9999-12-31");
    for bad in ["2023-02-29", "2024-13-01", "2024-00-10", "2024-1-01", "20240101", "2024-01-32", "+024-01-01"] {
        assert_eq!(UtcDay::parse(bad), None, "{bad}");
    }
    assert_eq!(UtcDay::parse("2024-02-29").map(|d| d.to_string()).as_deref(), Some("2024-02-29"));
}

#[test]
fn rotation_schedule() {
    let day = UtcDay::parse("2026-11-22").unwrap();
    let midnight = day.start_ms();
    // Just before midnight the current salt is yesterday's; at midnight it rotates.
    assert_eq!(current_salt_day(midnight - 1), day.previous());
    assert_eq!(current_salt_day(midnight), day);
    assert_eq!(next_rotation_ms(midnight - 1), midnight);
    assert_eq!(next_rotation_ms(midnight), midnight + DAY_MS);
    // At 00:05 an event tries today's salt, then yesterday's for a visit that began before midnight.
    let tries: Vec<String> = salts_to_try(midnight + 5 * 60_000).iter().map(|d| d.to_string()).collect();
    assert_eq!(tries, ["2026-11-22", "2026-11-21"]);
    let keep: Vec<String> = salts_to_keep(midnight).iter().map(|d| d.to_string()).collect();
    assert_eq!(keep, ["2026-11-22", "2026-11-21", "2026-11-20"]);
    // A salt is current for a day, then kept 48 hours after it rotates.
    assert_eq!(salt_expires_at_ms(day), next_rotation_ms(midnight) + 48 * 3_600_000);
}

proptest! {
    #[test]
    fn days_round_trip(days in -MAX_DAYS..=MAX_DAYS) {
        let day = UtcDay::from_days(days);
        let (y, _, _) = day.civil();
        if (0..=9999).contains(&y) {
            prop_assert_eq!(UtcDay::parse(&day.to_string()), Some(day));
        }
        prop_assert!(day.previous() <= day);
    }

    #[test]
    fn schedule_never_panics(now in any::<i64>()) {
        let [today, yesterday] = salts_to_try(now);
        prop_assert!(yesterday <= today);
        let _ = salt_expires_at_ms(today);
        let _ = next_rotation_ms(now);
        let _ = today.to_string();
    }
}
