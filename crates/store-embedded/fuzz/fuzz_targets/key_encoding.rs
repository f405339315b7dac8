//! Fuzzes the key encoding: decoding never panics, whatever decodes re-encodes to exactly the
//! bytes it consumed, and encoded order is DynamoDB's order for binary and string pairs.
//!
//! Run with `cargo +nightly fuzz run key_encoding` from `crates/store-embedded`.

#![no_main]

use libfuzzer_sys::fuzz_target;
use store::{AttributeValue, ScalarType};
use store_embedded::keys;

fuzz_target!(|data: &[u8]| {
    for ty in [ScalarType::S, ScalarType::N, ScalarType::B] {
        let mut input = data;
        if let Ok(value) = keys::decode_value(&mut input, ty) {
            assert_eq!(keys::encoded(&value), &data[..data.len() - input.len()]);
        }
    }
    let Some((&split, rest)) = data.split_first() else { return };
    let (a, b) = rest.split_at(usize::from(split).min(rest.len()));
    let (x, y) = (AttributeValue::B(a.to_vec()), AttributeValue::B(b.to_vec()));
    assert_eq!(keys::encoded(&x).cmp(&keys::encoded(&y)), a.cmp(b));
    if let (Ok(a), Ok(b)) = (std::str::from_utf8(a), std::str::from_utf8(b)) {
        let (x, y) = (AttributeValue::from(a), AttributeValue::from(b));
        assert_eq!(keys::encoded(&x).cmp(&keys::encoded(&y)), a.as_bytes().cmp(b.as_bytes()));
    }
    // Composite keys cannot collide: (a, b) and (b, a) encode alike only when a == b.
    let mut ab = keys::encoded(&x);
    keys::encode_value(&mut ab, &y);
    let mut ba = keys::encoded(&y);
    keys::encode_value(&mut ba, &x);
    assert_eq!(ab == ba, a == b);
});
