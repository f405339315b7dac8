//! A union kept as plain registers once a dense sketch takes part: one byte per register, each
//! the largest value any input had there, which is exactly what a HyperLogLog union is.
//!
//! DataSketches' own union reads an `HLL_4` input register by register through its exception
//! map, about 60 µs per dense input at `lg_k` 14; a dashboard row over thirty days merges thirty
//! of them. Folding the serialised image in directly is an element-wise maximum over 16 K bytes.
//! The estimate is still DataSketches': the registers are handed back as an `HLL_8` image with
//! the register sums the library keeps (exact, so computed from a histogram), and read with its
//! composite estimator.
//!
//! The image's layout is described in [`super::format`].

use std::sync::OnceLock;

use datasketches::hll::{HllSketch, HllType, HllUnion};

use super::LG_K;
use super::format::{
    AUX_COUNT, COMPACT_FLAG, CUR_MIN_BYTE, DENSE_PREAMBLE, EXCEPTION, FAMILY_HLL, HLL_PREINTS, LIST_PREAMBLE,
    MODE_BYTE, MODE_HLL, MODE_LIST, MODE_SET, OUT_OF_ORDER_FLAG, SERIAL_VERSION, SET_PREAMBLE, SLOT_BITS, TYPE_HLL4,
    TYPE_HLL8,
};

const K: usize = 1 << LG_K;
/// The largest `cur_min` whose offsets (up to 14) stay within a register's six bits.
const MAX_FLOOR: u8 = 63 - 14;

/// The registers of a union, `K` bytes.
#[derive(Clone)]
pub(super) struct Registers(Box<[u8]>);

impl Registers {
    pub fn new() -> Self {
        Registers(vec![0u8; K].into_boxed_slice())
    }

    /// Bytes of memory held.
    pub fn memory_bytes(&self) -> usize {
        self.0.len()
    }

    /// Whether every register is empty.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&v| v == 0)
    }

    /// Folds in another union's registers.
    pub fn add_registers(&mut self, other: &Registers) {
        for (a, &b) in self.0.iter_mut().zip(other.0.iter()) {
            *a = (*a).max(b);
        }
    }

    /// Folds in a sketch as `HllSketch::serialize` writes it. Returns `false`, changing nothing,
    /// for an image it does not take (another `lg_k`, `HLL_6`, or a length that does not add
    /// up); the caller then merges the slow way, which validates.
    pub fn add_image(&mut self, image: &[u8]) -> bool {
        if image.len() < LIST_PREAMBLE || image[3] != LG_K {
            return false;
        }
        let mode = image[MODE_BYTE] & 0b11;
        let target = (image[MODE_BYTE] >> 2) & 0b11;
        match (mode, target) {
            (MODE_LIST, _) => self.add_coupons(&image[LIST_PREAMBLE..]),
            (MODE_SET, _) if image.len() >= SET_PREAMBLE => self.add_coupons(&image[SET_PREAMBLE..]),
            (MODE_HLL, TYPE_HLL8) => {
                let Some(registers) = image.get(DENSE_PREAMBLE..DENSE_PREAMBLE + K) else { return false };
                if registers.iter().any(|&v| v > 63) {
                    return false;
                }
                for (a, &b) in self.0.iter_mut().zip(registers) {
                    *a = (*a).max(b);
                }
                true
            }
            (MODE_HLL, TYPE_HLL4) => self.add_hll4(image),
            _ => false,
        }
    }

    fn add_coupons(&mut self, body: &[u8]) -> bool {
        if !body.len().is_multiple_of(4) {
            return false;
        }
        self.add_coupon_list(body.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])));
        true
    }

    /// Folds in coupons (register updates): a 6-bit value over a 26-bit slot each.
    pub fn add_coupon_list(&mut self, coupons: impl IntoIterator<Item = u32>) {
        for coupon in coupons {
            // An empty hash-set slot is a zero coupon.
            if coupon != 0 {
                let slot = coupon as usize & (K - 1);
                let value = (coupon >> SLOT_BITS) as u8;
                self.0[slot] = self.0[slot].max(value);
            }
        }
    }

    fn add_hll4(&mut self, image: &[u8]) -> bool {
        let cur_min = image[CUR_MIN_BYTE];
        let Some(count) = image.get(AUX_COUNT).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize) else {
            return false;
        };
        let nibbles_end = DENSE_PREAMBLE + K / 2;
        // A register holds at most 63 (six bits), and `cur_min` is the smallest register, so a
        // floor that leaves no room for the 4-bit offsets is a damaged image: the slow way
        // refuses it.
        if cur_min > MAX_FLOOR || image.len() != nibbles_end + 4 * count {
            return false;
        }
        for (pair, &byte) in self.0.chunks_exact_mut(2).zip(&image[DENSE_PREAMBLE..nibbles_end]) {
            for (register, raw) in pair.iter_mut().zip([byte & 0x0F, byte >> 4]) {
                // An exception's value comes from the list below; it is at least `cur_min`.
                let value = if raw == EXCEPTION { cur_min } else { cur_min + raw };
                *register = (*register).max(value);
            }
        }
        self.add_coupons(&image[nibbles_end..])
    }

    /// The union as a DataSketches `HLL_8` sketch, with the register sums and the count of
    /// empty registers its composite estimator reads.
    pub fn to_sketch(&self) -> Option<HllSketch> {
        let (kxq0, kxq1, zeros) = self.sums(0);
        let mut image = Vec::with_capacity(DENSE_PREAMBLE + K);
        image.extend_from_slice(header());
        image.extend_from_slice(&0f64.to_le_bytes());
        image.extend_from_slice(&kxq0.to_le_bytes());
        image.extend_from_slice(&kxq1.to_le_bytes());
        image.extend_from_slice(&zeros.to_le_bytes());
        image.extend_from_slice(&0u32.to_le_bytes());
        image.extend_from_slice(&self.0);
        HllSketch::deserialize(&image).ok()
    }

    /// The stored image of these registers, not all empty: the `HLL_4` image DataSketches'
    /// union writes for them, made canonical as `to_bytes` makes every dense image (the
    /// out-of-order flag set, the insertion-order state zeroed, the exceptions sorted), written
    /// straight from the registers.
    ///
    /// The library's own way there (a union fed the registers as an `HLL_8` sketch, converted to
    /// `HLL_4` one register at a time, serialised) cost an aggregate flush about 2 % of
    /// ingestion's CPU. `HLL_4` keeps each register as a nibble over the floor `cur_min`, the
    /// smallest register; a register 15 or more above it has the nibble 15 and its value among
    /// the exceptions, as a coupon. Every field is a function of the registers, so the image is
    /// too; `hll4_image_is_the_unions` checks it byte for byte against the library's.
    pub fn to_hll4_image(&self) -> Vec<u8> {
        let (cur_min, max) = self.0.iter().fold((u8::MAX, 0u8), |(lo, hi), &v| (lo.min(v), hi.max(v)));
        let (kxq0, kxq1, at_cur_min) = self.sums(cur_min);
        // The exceptions, in the order `to_bytes` gives every image's: by their value as coupons.
        let mut exceptions: Vec<u32> = Vec::new();
        if max - cur_min >= EXCEPTION {
            exceptions.extend(
                self.0
                    .iter()
                    .enumerate()
                    .filter(|&(_, &v)| v - cur_min >= EXCEPTION)
                    .map(|(slot, &v)| slot as u32 | u32::from(v) << SLOT_BITS),
            );
            exceptions.sort_unstable();
        }
        let mut image = vec![0u8; DENSE_PREAMBLE + K / 2 + 4 * exceptions.len()];
        let flags = COMPACT_FLAG | OUT_OF_ORDER_FLAG;
        let mode = MODE_HLL | TYPE_HLL4 << 2;
        image[..8].copy_from_slice(&[HLL_PREINTS, SERIAL_VERSION, FAMILY_HLL, LG_K, 0, flags, cur_min, mode]);
        // Bytes 8..16, the insertion-order estimator's state, stay zero.
        image[16..24].copy_from_slice(&kxq0.to_le_bytes());
        image[24..32].copy_from_slice(&kxq1.to_le_bytes());
        image[32..36].copy_from_slice(&at_cur_min.to_le_bytes());
        image[AUX_COUNT].copy_from_slice(&(exceptions.len() as u32).to_le_bytes());
        let (nibbles, rest) = image[DENSE_PREAMBLE..].split_at_mut(K / 2);
        for (byte, pair) in nibbles.iter_mut().zip(self.0.chunks_exact(2)) {
            let low = (pair[0] - cur_min).min(EXCEPTION);
            let high = (pair[1] - cur_min).min(EXCEPTION);
            *byte = low | high << 4;
        }
        for (dst, coupon) in rest.chunks_exact_mut(4).zip(exceptions) {
            dst.copy_from_slice(&coupon.to_le_bytes());
        }
        image
    }

    /// The sums of 2^-v over the registers as the library keeps them (values under 32 in one,
    /// the rest in the other, kept apart for precision), and how many registers hold `floor`.
    /// Each sum adds powers of two spanning fewer than 53 bits, so it is exact in any order: a
    /// histogram of the values gives it without a 16 K-long chain of dependent additions.
    fn sums(&self, floor: u8) -> (f64, f64, u32) {
        let mut histogram = [[0u32; 64]; 4];
        for chunk in self.0.chunks_exact(4) {
            for (h, &v) in histogram.iter_mut().zip(chunk) {
                h[usize::from(v.min(63))] += 1;
            }
        }
        let count = |v: usize| histogram.iter().map(|h| h[v]).sum::<u32>();
        let (mut kxq0, mut kxq1) = (0.0f64, 0.0f64);
        for v in 0..64 {
            let part = f64::from(count(v)) / (1u64 << v) as f64;
            if v < 32 {
                kxq0 += part;
            } else {
                kxq1 += part;
            }
        }
        (kxq0, kxq1, count(usize::from(floor.min(63))))
    }
}

/// The first eight bytes of a dense `HLL_8` union result at `LG_K`, taken once from the library
/// itself (preamble size, serial version, family, `lg_k`, flags with "out of order", so the
/// composite estimator is used, `cur_min` 0, and the mode byte).
fn header() -> &'static [u8] {
    static HEADER: OnceLock<Vec<u8>> = OnceLock::new();
    HEADER.get_or_init(|| {
        let mut dense = HllSketch::new(LG_K, HllType::Hll8).expect("LG_K is valid");
        for i in 0..(4 * K as u64) {
            dense.update(i);
        }
        let mut union = HllUnion::new(LG_K).expect("LG_K is valid");
        union.update(&dense);
        union.to_sketch(HllType::Hll8).serialize()[..8].to_vec()
    })
}
