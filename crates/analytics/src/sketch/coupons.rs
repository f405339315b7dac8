//! Sparse sketches as their coupons: a sorted list of distinct `u32` register updates.
//!
//! Most aggregate items hold a sparse sketch (a page in one hour has a handful of visitors). A
//! dashboard row sums tens of them; reading each through DataSketches builds a hash set per item
//! and re-inserts every coupon into it, and the union re-inserts them again, which was half of
//! a dashboard's time. A compact sparse image is already a list of distinct coupons, so reading
//! one is a copy and a sort, and the union of two is a merge of sorted lists.
//!
//! The result is exactly DataSketches' union: the library keeps a union of sparse inputs as the
//! set of their distinct coupons, growing its hash table at 3/4 load from 2^5 slots, and turns
//! it into registers once more than 3/4 of 2^(`lg_k` − 3) slots are taken. The table's size, the
//! only part of the image that depends on history, is therefore a function of the count, and
//! [`image`] writes the same bytes the library would. Anything [`parse`] does not recognise
//! (another `lg_k`, an updatable image, a size that does not match the count) is left to the
//! library's own reader.

use super::LG_K;
use super::format::{
    COMPACT_FLAG, EMPTY_FLAG, FAMILY_HLL, LIST_PREAMBLE, LIST_PREINTS, MODE_LIST, MODE_SET, SERIAL_VERSION,
    SET_PREAMBLE, SET_PREINTS, TYPE_HLL4,
};

/// A list holds up to 2^3 coupons and becomes a set when it fills.
const LIST_LG: u8 = 3;
const LIST_MAX: usize = (1 << LIST_LG) - 1;
/// A set starts at 2^5 slots and doubles past 3/4 load.
const SET_LG_MIN: u8 = 5;
const SET_LG_MAX: u8 = LG_K - 3;

/// The most coupons a sparse sketch holds; one more and DataSketches turns it into registers.
pub(super) const MAX: usize = 3 * (1 << SET_LG_MAX) / 4;

/// The hash-table size (log2) of a set of `count` coupons, or `None` past [`MAX`].
fn set_lg(count: usize) -> Option<u8> {
    let mut lg = SET_LG_MIN;
    while 4 * count > 3 << lg {
        lg += 1;
    }
    (lg <= SET_LG_MAX).then_some(lg)
}

/// The coupons of a compact sparse image at `LG_K`, sorted and distinct; `None` for any image
/// that is not exactly what [`image`] (and DataSketches) would write for them.
pub(super) fn parse(image: &[u8]) -> Option<Vec<u32>> {
    let header = image.get(..LIST_PREAMBLE)?;
    if header[1] != SERIAL_VERSION || header[2] != FAMILY_HLL || header[3] != LG_K || header[5] & COMPACT_FLAG == 0 {
        return None;
    }
    let (count, body) = match header[7] & 0b11 {
        MODE_LIST if header[0] == LIST_PREINTS && header[4] == LIST_LG => {
            let count = usize::from(header[6]);
            let empty = header[5] & EMPTY_FLAG != 0;
            if count > LIST_MAX || empty != (count == 0) {
                return None;
            }
            (count, &image[LIST_PREAMBLE..])
        }
        MODE_SET if header[0] == SET_PREINTS => {
            let count = image.get(LIST_PREAMBLE..SET_PREAMBLE)?;
            let count = u32::from_le_bytes([count[0], count[1], count[2], count[3]]) as usize;
            if count <= LIST_MAX || set_lg(count) != Some(header[4]) || header[5] & EMPTY_FLAG != 0 {
                return None;
            }
            (count, &image[SET_PREAMBLE..])
        }
        _ => return None,
    };
    if body.len() != 4 * count {
        return None;
    }
    let mut coupons: Vec<u32> = body.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    coupons.sort_unstable();
    coupons.dedup();
    // Zero marks an empty slot, never a coupon; a repeated coupon is a damaged image.
    (coupons.len() == count && coupons.first().is_none_or(|&c| c != 0)).then_some(coupons)
}

/// The compact image DataSketches writes for these coupons (sorted, distinct, at most [`MAX`]):
/// a list up to seven, a set above.
pub(super) fn image(coupons: &[u32]) -> Vec<u8> {
    let count = coupons.len();
    let mut out = Vec::with_capacity(SET_PREAMBLE + 4 * count);
    match set_lg(count) {
        _ if count <= LIST_MAX => {
            let flags = if count == 0 { COMPACT_FLAG | EMPTY_FLAG } else { COMPACT_FLAG };
            let mode = MODE_LIST | TYPE_HLL4 << 2;
            out.extend_from_slice(&[LIST_PREINTS, SERIAL_VERSION, FAMILY_HLL, LG_K, LIST_LG, flags, count as u8, mode]);
        }
        lg => {
            // Past `MAX` the caller holds registers instead; the largest table keeps the
            // image well-formed should one ever get here.
            let lg = lg.unwrap_or(SET_LG_MAX);
            let mode = MODE_SET | TYPE_HLL4 << 2;
            out.extend_from_slice(&[SET_PREINTS, SERIAL_VERSION, FAMILY_HLL, LG_K, lg, COMPACT_FLAG, 0, mode]);
            out.extend_from_slice(&(count as u32).to_le_bytes());
        }
    }
    for c in coupons {
        out.extend_from_slice(&c.to_le_bytes());
    }
    out
}

/// A growing union of coupons: an open-addressing hash set (zero marks an empty slot), so each
/// coupon merged in costs one probe, where merging sorted lists one at a time re-copies the
/// whole union per input.
#[derive(Clone, Default)]
pub(super) struct CouponSet {
    slots: Vec<u32>,
    len: usize,
}

impl CouponSet {
    /// Bytes of memory held.
    pub fn memory_bytes(&self) -> usize {
        self.slots.capacity() * size_of::<u32>()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Adds coupons; zero (no coupon) is skipped.
    pub fn extend(&mut self, coupons: &[u32]) {
        // Room for all of them at once (some may be duplicates), so a merge rehashes at most once.
        let mut size = self.slots.len().max(64);
        while 4 * (self.len + coupons.len()) > 3 * size {
            size *= 2;
        }
        if size != self.slots.len() {
            self.resize(size);
        }
        for &c in coupons {
            if c == 0 {
                continue;
            }
            let mask = self.slots.len() - 1;
            let mut i = spread(c) & mask;
            loop {
                match self.slots[i] {
                    0 => {
                        self.slots[i] = c;
                        self.len += 1;
                        break;
                    }
                    s if s == c => break,
                    _ => i = (i + 1) & mask,
                }
            }
        }
    }

    fn resize(&mut self, size: usize) {
        let old = std::mem::replace(&mut self.slots, vec![0; size]);
        let mask = size - 1;
        for c in old.into_iter().filter(|&c| c != 0) {
            let mut i = spread(c) & mask;
            while self.slots[i] != 0 {
                i = (i + 1) & mask;
            }
            self.slots[i] = c;
        }
    }

    /// The coupons, sorted.
    pub fn sorted(&self) -> Vec<u32> {
        let mut out: Vec<u32> = self.slots.iter().copied().filter(|&c| c != 0).collect();
        out.sort_unstable();
        out
    }

    /// The coupons, in no order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.slots.iter().copied().filter(|&c| c != 0)
    }
}

/// A coupon's slot hash: coupons of one sketch share their low bits' distribution, so they are
/// mixed (Fibonacci hashing) before masking.
fn spread(c: u32) -> usize {
    (c.wrapping_mul(0x9E37_79B9) >> 8) as usize
}

/// DataSketches' estimate for a sparse sketch of `count` distinct coupons: it depends on the
/// count alone, so any `count` distinct coupons give it.
pub(super) fn estimate_of_count(count: usize) -> Option<f64> {
    let stand_ins: Vec<u32> = (1..=count as u32).collect();
    datasketches::hll::HllSketch::deserialize(&image(&stand_ins)).ok().map(|s| s.composite_estimate())
}
