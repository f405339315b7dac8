//! Stored form 2: a sparse sketch's coupons, Rice-coded.
//!
//! A sparse DataSketches image spends four bytes on each coupon (a 6-bit register value over a
//! 26-bit slot), and sparse sketches are most of the bytes of the aggregate items: every write
//! unit of a flush and most of the disk. Sorted by slot, the coupons are a few random slots out
//! of 2^26, so the gaps between them carry about `26 − log2(count) + 1.5` bits of information,
//! and a register value `v` has probability 2^−v. So each coupon is written as its slot's gap
//! from the previous slot, Rice-coded with a parameter chosen from the count, then `v − 1` in
//! unary: about 2.5 bytes a coupon for the sketches that hold most bytes (a thousand coupons),
//! 3.5 for a handful.
//!
//! **Layout** (after the `TV` header and the version byte 2): the count as a LEB128 varint, then
//! a bit stream, least significant bit first: per coupon, in (slot, value) order, the gap's
//! quotient `gap >> k` in unary (that many ones, then a zero), its `k` low bits, and `v − 1`
//! ones then a zero; zero bits pad the last byte. `k` is `26 − bits(count)`.
//!
//! **Canonical.** The bytes are a function of the set of coupons alone, and [`decode`] takes
//! exactly the bytes [`encode`] writes: coupons out of order or repeated, a slot or a value out
//! of range, a count above [`super::coupons::MAX`], padding that is not zero or bytes after it
//! are all refused, so an aggregate and its rebuild store identical bytes and damage is an
//! error, never a different sketch.

use super::coupons::MAX;
use super::format::SLOT_BITS;

/// The slot bits of a coupon.
const SLOT_MASK: u32 = (1 << SLOT_BITS) - 1;
/// Register values are 1..=63 in six bits.
const MAX_VALUE: u32 = 63;

/// The Rice parameter for `count` coupons: the gaps average `2^26 / count`.
fn rice_k(count: usize) -> u32 {
    SLOT_BITS.saturating_sub(usize::BITS - count.leading_zeros())
}

/// Writes the coupons (distinct, at most [`MAX`], in any order) after `out`'s header.
pub(super) fn encode(coupons: &[u32], out: &mut Vec<u8>) {
    let mut sorted: Vec<u32> = coupons.iter().map(|&c| (c & SLOT_MASK) << 6 | (c >> SLOT_BITS)).collect();
    sorted.sort_unstable();
    let mut count = sorted.len();
    while count >= 0x80 {
        out.push((count as u8 & 0x7f) | 0x80);
        count >>= 7;
    }
    out.push(count as u8);
    let k = rice_k(sorted.len());
    let mut bits = Bits { out, acc: 0, len: 0 };
    let mut previous = 0u32;
    for key in sorted {
        let (slot, value) = (key >> 6, key & 0x3f);
        let gap = slot - previous;
        previous = slot;
        bits.ones(gap >> k);
        bits.push(u64::from(gap) & ((1 << k) - 1), k);
        bits.ones(value.saturating_sub(1));
    }
    bits.finish();
}

/// The coupons `body` (what follows the header) holds, sorted and distinct as
/// [`super::coupons::parse`] gives them; `None` for any bytes [`encode`] would not write.
pub(super) fn decode(body: &[u8]) -> Option<Vec<u32>> {
    let (mut count, mut shift, mut at) = (0usize, 0u32, 0usize);
    loop {
        let byte = *body.get(at)?;
        at += 1;
        count |= usize::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            // The shortest varint only: a last byte of zero after others is another encoding.
            if byte == 0 && at > 1 {
                return None;
            }
            break;
        }
        shift += 7;
        if shift > 14 {
            return None;
        }
    }
    if count > MAX {
        return None;
    }
    let k = rice_k(count);
    let mut bits = Read::new(&body[at..]);
    // In (slot, value) order as read; grouped by value below, which is the coupons' order.
    let mut by_slot = Vec::with_capacity(count);
    let mut of_value = [0usize; 64];
    let mut previous: Option<(u32, u32)> = None;
    let mut slot = 0u32;
    for _ in 0..count {
        let gap = (bits.ones(SLOT_MASK >> k)? << k) | bits.take(k)?;
        slot = slot.checked_add(gap).filter(|&s| s <= SLOT_MASK)?;
        let value = bits.ones(MAX_VALUE - 1)? + 1;
        if previous.is_some_and(|p| p >= (slot, value)) {
            return None;
        }
        previous = Some((slot, value));
        of_value[value as usize] += 1;
        by_slot.push(value << SLOT_BITS | slot);
    }
    // Zero padding to the end of the last byte, and nothing after it.
    if !bits.at_padding() {
        return None;
    }
    // A coupon is its value over its slot, so sorted coupons are grouped by value, each group
    // in slot order: one counting pass instead of a sort.
    let mut start = [0usize; 64];
    for v in 1..64 {
        start[v] = start[v - 1] + of_value[v - 1];
    }
    let mut coupons = vec![0u32; count];
    for c in by_slot {
        let v = (c >> SLOT_BITS) as usize;
        coupons[start[v]] = c;
        start[v] += 1;
    }
    Some(coupons)
}

/// A bit writer, least significant bit first.
struct Bits<'a> {
    out: &'a mut Vec<u8>,
    acc: u64,
    len: u32,
}

impl Bits<'_> {
    /// Writes the low `n` (at most 32) bits of `value`.
    fn push(&mut self, value: u64, n: u32) {
        self.acc |= value << self.len;
        self.len += n;
        while self.len >= 8 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.len -= 8;
        }
    }

    /// Writes `n` ones and a zero.
    fn ones(&mut self, mut n: u32) {
        while n >= 32 {
            self.push(u64::from(u32::MAX), 32);
            n -= 32;
        }
        self.push((1u64 << n) - 1, n + 1);
    }

    fn finish(mut self) {
        if self.len > 0 {
            self.push(0, 8 - self.len);
        }
    }
}

/// A bit reader over `bytes`, least significant bit first: a word of bits in hand, refilled a
/// byte at a time.
struct Read<'a> {
    bytes: &'a [u8],
    /// The next byte to load.
    next: usize,
    /// Bits loaded and not yet read, the next one lowest; zero above `have`.
    buf: u64,
    have: u32,
}

impl<'a> Read<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Read { bytes, next: 0, buf: 0, have: 0 }
    }

    fn refill(&mut self) {
        while self.have <= 56
            && let Some(&byte) = self.bytes.get(self.next)
        {
            self.buf |= u64::from(byte) << self.have;
            self.have += 8;
            self.next += 1;
        }
    }

    fn consume(&mut self, n: u32) {
        self.buf = self.buf.checked_shr(n).unwrap_or(0);
        self.have -= n;
    }

    /// `n` (at most 26) bits.
    fn take(&mut self, n: u32) -> Option<u32> {
        if self.have < n {
            self.refill();
            if self.have < n {
                return None;
            }
        }
        let value = (self.buf & ((1u64 << n) - 1)) as u32;
        self.consume(n);
        Some(value)
    }

    /// Ones up to a zero, which is consumed too: their count, at most `max`.
    fn ones(&mut self, max: u32) -> Option<u32> {
        let mut n = 0u32;
        loop {
            if self.have < 32 {
                self.refill();
                if self.have == 0 {
                    return None;
                }
            }
            let run = self.buf.trailing_ones().min(self.have);
            n += run;
            if n > max {
                return None;
            }
            if run < self.have {
                self.consume(run + 1);
                return Some(n);
            }
            self.consume(run);
        }
    }

    /// Whether everything left is the zero padding of the last byte.
    fn at_padding(&self) -> bool {
        self.next == self.bytes.len() && self.have < 8 && self.buf == 0
    }
}
