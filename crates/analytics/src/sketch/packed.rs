//! Stored form 2: a sparse sketch's coupons, delta-coded.
//!
//! A sparse DataSketches image spends four bytes on each coupon (a 6-bit register value over a
//! 26-bit slot), and sparse sketches are most of the bytes of the aggregate items: every write
//! unit of a flush and much of the disk. Sorted, a sketch's coupons are a few random points of
//! the 32-bit space, so the gaps between them are far smaller than the coupons: each is written
//! as its gap from the one before, a LEB128 varint, which takes three bytes for the sketches
//! that hold most bytes (hundreds to a thousand coupons). Reading them back is a varint loop
//! that yields the coupons already sorted, as fast as copying the image: a dashboard reads
//! hundreds of thousands of coupons, so a denser bit-level code (Rice, about 2.5 bytes a coupon)
//! was measured and not kept — it read five times slower and cost a 1 M-event dashboard 2–4 ms.
//!
//! **Layout** (after the `TV` header and the version byte 2): the count, then each coupon's gap
//! from the previous one (the first from zero), all as LEB128 varints.
//!
//! **Canonical.** The bytes are a function of the set of coupons alone, and [`decode`] takes
//! exactly the bytes [`encode`] writes: a gap of zero (a repeated coupon), a longer varint than
//! needed, a coupon whose register value is not 1–63, a count above [`super::coupons::MAX`] or
//! bytes after the last coupon are all refused, so an aggregate and its rebuild store identical
//! bytes and damage is an error, never a different sketch.

use super::coupons::MAX;
use super::format::SLOT_BITS;

/// Writes the coupons (distinct, at most [`MAX`], in any order) after `out`'s header.
pub(super) fn encode(coupons: &[u32], out: &mut Vec<u8>) {
    let mut sorted = coupons.to_vec();
    sorted.sort_unstable();
    varint(out, sorted.len() as u32);
    let mut previous = 0u32;
    for c in sorted {
        varint(out, c - previous);
        previous = c;
    }
}

fn varint(out: &mut Vec<u8>, mut value: u32) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// The coupons `body` (what follows the header) holds, sorted and distinct as
/// [`super::coupons::parse`] gives them; `None` for any bytes [`encode`] would not write.
pub(super) fn decode(body: &[u8]) -> Option<Vec<u32>> {
    let mut at = 0;
    let count = read_varint(body, &mut at)? as usize;
    if count > MAX {
        return None;
    }
    let mut coupons = Vec::with_capacity(count);
    let mut previous = 0u32;
    for n in 0..count {
        let gap = read_varint(body, &mut at)?;
        // Strictly increasing: only the first may start at zero's gap, and no coupon is zero.
        if gap == 0 && n > 0 {
            return None;
        }
        let c = previous.checked_add(gap)?;
        if !(1..=63).contains(&(c >> SLOT_BITS)) {
            return None;
        }
        coupons.push(c);
        previous = c;
    }
    (at == body.len()).then_some(coupons)
}

/// A LEB128 varint of at most 32 bits, in its shortest form.
fn read_varint(bytes: &[u8], at: &mut usize) -> Option<u32> {
    let mut value = 0u32;
    for shift in [0, 7, 14, 21, 28] {
        let byte = *bytes.get(*at)?;
        *at += 1;
        let bits = u32::from(byte & 0x7f);
        if shift == 28 && bits > 0xf {
            return None;
        }
        value |= bits << shift;
        if byte & 0x80 == 0 {
            // A last byte of zero after others is a longer form of a shorter number.
            return (byte != 0 || shift == 0).then_some(value);
        }
    }
    None
}
