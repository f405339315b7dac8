//! The unique-visitor sketch stored in every aggregate: a [`VisitorSketch`] counts distinct
//! visitor ids approximately, merges with others (a range's visitors are the **union** of its
//! buckets' sketches, never the sum of their counts), and serialises to a few bytes for the
//! `visitors_sketch` attribute of an `Aggregate` item.
//!
//! ```
//! use analytics::sketch::VisitorSketch;
//!
//! let mut monday = VisitorSketch::new();
//! let mut tuesday = VisitorSketch::new();
//! for id in 0..100u64 {
//!     monday.insert_u64(id);
//! }
//! for id in 50..150u64 {
//!     tuesday.insert_u64(id); // visitors 50..100 came back: they count once in the week
//! }
//! let week = VisitorSketch::union([&monday, &tuesday]);
//! assert_eq!(week.estimate(), 150);
//!
//! let stored = week.to_bytes();
//! assert_eq!(VisitorSketch::from_bytes(&stored).unwrap().estimate(), 150);
//! ```
//!
//! # The algorithm and its parameters
//!
//! It is Apache DataSketches' HyperLogLog (the `datasketches` crate, which the spec names: pure
//! Rust, no dependencies, the same binary image as the Java and C++ libraries), with
//! `lg_k` = [`LG_K`] = 14 (16,384 registers) stored as `HLL_4` (4 bits a register).
//!
//! **Why `lg_k` = 14.** The spec allows 2% error. A sketch's error is a bound at a confidence;
//! Tally reads "≤ 2%" at about 95% confidence, that is, two relative standard errors must fit in
//! 2% (DataSketches publishes its bounds in standard deviations too). The estimate Tally reads is the order-independent
//! (composite) one, whose relative standard error is about 1.04/√k: 1.63% at `lg_k` = 12, 1.15%
//! at 13, 0.81% at 14. Only 14 keeps two of them (1.63%) under 2%. Measured over 100 sketches of
//! 10^5 distinct ids each: RMS error 1.45% / 0.97% / 0.76% for `lg_k` 12 / 13 / 14, and the share
//! of estimates within 2% was 83% / 95% / 100%.
//!
//! **Why that stays small.** A sketch is stored sparsely (its register updates, "coupons") until
//! that would outgrow the dense form, so the many aggregate items with few visitors (one page in
//! one hour) stay tiny, and the dense `HLL_4` form caps every item at about 8 KB, far below
//! DynamoDB's 400 KB item limit. Sparse coupons are stored packed ([`packed`]: about 3 bytes a
//! coupon where DataSketches' image spends 4). Serialised sizes, header included:
//!
//! | distinct visitors | bytes  |
//! |------------------:|-------:|
//! |                10 |     42 |
//! |             1,000 |  2,975 |
//! |           100,000 |  8,243 |
//!
//! A write costs one DynamoDB write unit per KB, so an item holding a dense sketch costs about
//! 9 units to rewrite; whoever flushes aggregates should rewrite such items less often than small
//! ones. `lg_k` 13 would halve that at the price of 5% of estimates missing the 2% bound.
//!
//! **Why the composite estimate.** DataSketches' default (HIP) estimate of a sketch built by
//! inserting ids is a little more accurate, but it depends on the order in which ids arrived, and
//! it is lost as soon as sketches are merged. Tally's aggregates must equal a rebuild from raw
//! events, which inserts in another order and merges in other groupings, so [`VisitorSketch::estimate`]
//! depends only on the registers: the same visitors give the same number, however they got there.
//!
//! # The stored form
//!
//! `b"TV"` (Tally visitors), a format version byte, then the sketch. Version 1 is the
//! DataSketches HLL image; Tally writes dense sketches so. Version 2 is a sparse sketch's coupons,
//! delta-coded ([`packed`]), which Tally writes since 2026-11-26 (sparse sketches are most of the
//! aggregates' bytes, so of their write units and disk); version 1 sparse images, as an earlier
//! Tally wrote them, still read, and are written back packed. A Tally older than version 2 cannot
//! read packed sketches, so every process sharing a table is upgraded together. The version lets
//! a later Tally change the parameters or the algorithm and still read what is stored; sketches
//! of different `lg_k` still merge (the union keeps the smaller `lg_k`). Reading bytes that are
//! not such a sketch gives a [`SketchError`], never a panic.

mod coupons;
mod format;
mod packed;
mod registers;

use datasketches::hash::value::raw_bytes;
use datasketches::hll::{HllSketch, HllType, HllUnion};

use self::coupons::CouponSet;
use self::format as ds;
use self::registers::Registers;

/// log2 of the number of HyperLogLog registers; the module doc says why 14.
pub const LG_K: u8 = 14;

/// The first bytes of every stored sketch: "Tally visitors".
const MAGIC: [u8; 2] = *b"TV";

/// The stored form's versions, bumped whenever the bytes after the header change meaning:
/// 1 is a DataSketches image (Tally writes dense sketches so), 2 a sparse sketch's coupons,
/// delta-coded ([`packed`]).
const FORMAT_IMAGE: u8 = 1;
const FORMAT_PACKED: u8 = 2;

/// Header length: the magic and the version byte.
const HEADER_LEN: usize = MAGIC.len() + 1;

/// Why stored bytes could not be read as a [`VisitorSketch`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SketchError {
    /// Fewer bytes than the header.
    #[error("a visitor sketch is at least {HEADER_LEN} bytes, got {0}")]
    TooShort(usize),
    /// The bytes do not start with Tally's magic.
    #[error("not a Tally visitor sketch (bad magic)")]
    BadMagic,
    /// A format version this Tally does not know (written by a newer one).
    #[error("unsupported visitor sketch format version {0}")]
    UnsupportedVersion(u8),
    /// The header is right but the sketch image after it is not.
    #[error("corrupt visitor sketch: {0}")]
    Corrupt(String),
}

impl SketchError {
    /// Whether the bytes were written by a newer Tally rather than damaged.
    pub fn is_unsupported_version(&self) -> bool {
        matches!(self, SketchError::UnsupportedVersion(_))
    }
}

/// An approximate set of visitor ids: insert, merge, estimate, store.
///
/// Ids are hashed as bytes (`insert_u64(x)` is `insert_bytes(&x.to_le_bytes())`), so the same id
/// lands in the same register on every platform and in every Tally version of this format.
#[derive(Clone)]
pub struct VisitorSketch {
    inner: Inner,
    /// Known to hold dense registers (read from a dense image, or a merge of one): merging it
    /// goes by [`Registers`].
    dense: bool,
}

/// A sketch is kept as a DataSketches sketch until something is merged into it; from then on it
/// is a union buffer, so merging many sketches one at a time (a dashboard sums hundreds of items
/// per row) costs one pass over each, not a re-encoding of all 16 K registers per merge.
///
/// Stored sketches are read into the two forms a union has: a sparse one as its coupons
/// ([`coupons`]), a dense one (or a union grown dense) as plain registers ([`Registers`]). Both
/// merge without DataSketches' per-coupon hash-table work and give exactly its union; the
/// library's own union is left for sketches built by inserts and images those forms do not take.
#[derive(Clone)]
enum Inner {
    Sketch(HllSketch),
    Union(Box<HllUnion>),
    Registers(Registers),
    /// A stored sparse sketch: its sorted distinct coupons.
    Coupons(Vec<u32>),
    /// A union of sparse sketches, at most [`coupons::MAX`] coupons.
    CouponSet(CouponSet),
}

/// The coupons of a sparse sketch, in no particular order: its own, or those of a
/// DataSketches sketch in list or set mode. `None` for dense sketches and DataSketches unions.
fn coupons_of(inner: &Inner) -> Option<std::borrow::Cow<'_, [u32]>> {
    match inner {
        Inner::Coupons(c) => Some(std::borrow::Cow::Borrowed(c)),
        Inner::CouponSet(set) => Some(std::borrow::Cow::Owned(set.iter().collect())),
        Inner::Sketch(s) => coupons::parse(&s.serialize()).map(std::borrow::Cow::Owned),
        Inner::Union(_) | Inner::Registers(_) => None,
    }
}

/// Coupons as a DataSketches sketch (an empty one if the image does not read back, which images
/// written by [`coupons::image`] always do).
fn coupons_sketch(c: &[u32]) -> HllSketch {
    HllSketch::deserialize(&coupons::image(c)).unwrap_or_else(|_| empty_hll())
}

/// Folds `sketch` into `registers`; `false` if its image is not one [`Registers`] takes.
fn fold(registers: &mut Registers, sketch: &VisitorSketch) -> bool {
    match &sketch.inner {
        Inner::Sketch(s) => registers.add_image(&s.serialize()),
        Inner::Union(u) => registers.add_image(&u.to_sketch(HllType::Hll8).serialize()),
        Inner::Registers(r) => {
            registers.add_registers(r);
            true
        }
        Inner::Coupons(c) => {
            registers.add_coupon_list(c.iter().copied());
            true
        }
        Inner::CouponSet(set) => {
            registers.add_coupon_list(set.iter());
            true
        }
    }
}

/// The registers as a DataSketches sketch (an empty one if they do not read back, which
/// registers built by [`Registers`] always do).
fn registers_sketch(r: &Registers) -> HllSketch {
    r.to_sketch().unwrap_or_else(empty_hll)
}

fn new_union() -> HllUnion {
    HllUnion::new(LG_K).expect("LG_K is within DataSketches' range, checked at compile time")
}

/// Adds `sketch` to `union`.
fn union_add(union: &mut HllUnion, sketch: &Inner) {
    match sketch {
        Inner::Sketch(s) => union.update(s),
        // The gadget of a union is `HLL_8` at `LG_K`: handing it over as it is loses nothing.
        Inner::Union(u) => union.update(&u.to_sketch(HllType::Hll8)),
        Inner::Registers(r) => union.update(&registers_sketch(r)),
        Inner::Coupons(c) => union.update(&coupons_sketch(c)),
        Inner::CouponSet(set) => union.update(&coupons_sketch(&set.sorted())),
    }
}

impl VisitorSketch {
    /// An empty sketch. It allocates nothing until something is inserted or merged into it, so
    /// a dashboard's many per-value sums cost nothing to start.
    pub fn new() -> Self {
        VisitorSketch { inner: Inner::Coupons(Vec::new()), dense: false }
    }

    /// Adds a visitor id given as a `u64` (Tally's `VisitorId`).
    pub fn insert_u64(&mut self, id: u64) {
        self.insert_bytes(&id.to_le_bytes());
    }

    /// Adds a visitor id given as a `u128`.
    pub fn insert_u128(&mut self, id: u128) {
        self.insert_bytes(&id.to_le_bytes());
    }

    /// Adds a visitor id given as bytes.
    pub fn insert_bytes(&mut self, id: &[u8]) {
        match &self.inner {
            Inner::Registers(r) => self.inner = Inner::Sketch(registers_sketch(r)),
            Inner::Coupons(c) if c.is_empty() => self.inner = Inner::Sketch(empty_hll()),
            Inner::Coupons(c) => self.inner = Inner::Sketch(coupons_sketch(c)),
            Inner::CouponSet(set) => self.inner = Inner::Sketch(coupons_sketch(&set.sorted())),
            Inner::Sketch(_) | Inner::Union(_) => {}
        }
        match &mut self.inner {
            Inner::Sketch(s) => s.update(raw_bytes::from_slice(id)),
            Inner::Union(u) => u.update_value(raw_bytes::from_slice(id)),
            Inner::Registers(_) | Inner::Coupons(_) | Inner::CouponSet(_) => {}
        }
    }

    /// About how many bytes of memory the sketch holds, itself included: for bounding caches
    /// of sketches by size (a dense one holds 8–16 KB, a small sparse one tens of bytes).
    pub fn memory_bytes(&self) -> usize {
        size_of::<Self>()
            + match &self.inner {
                Inner::Sketch(s) => s.estimated_size(),
                Inner::Union(u) => size_of::<HllUnion>() + u.estimated_size(),
                Inner::Registers(r) => r.memory_bytes(),
                Inner::Coupons(c) => c.capacity() * size_of::<u32>(),
                Inner::CouponSet(set) => set.memory_bytes(),
            }
    }

    /// Whether nothing was ever inserted.
    pub fn is_empty(&self) -> bool {
        match &self.inner {
            Inner::Sketch(s) => s.is_empty(),
            Inner::Union(u) => u.is_empty(),
            Inner::Registers(r) => r.is_empty(),
            Inner::Coupons(c) => c.is_empty(),
            Inner::CouponSet(set) => set.len() == 0,
        }
    }

    /// The estimated number of distinct visitors, rounded to the nearest whole visitor. It
    /// depends only on which ids were inserted, not on their order or on how sketches were merged.
    pub fn estimate(&self) -> u64 {
        let e = match &self.inner {
            Inner::Sketch(s) => s.composite_estimate(),
            Inner::Union(u) => u.composite_estimate(),
            Inner::Registers(r) => registers_sketch(r).composite_estimate(),
            Inner::Coupons(c) => coupons::estimate_of_count(c.len()).unwrap_or(0.0),
            Inner::CouponSet(set) => coupons::estimate_of_count(set.len()).unwrap_or(0.0),
        };
        // A float-to-int `as` saturates and maps NaN to 0, so no estimate can wrap or panic.
        if e.is_finite() && e > 0.0 { e.round() as u64 } else { 0 }
    }

    /// Adds every visitor of `other` to `self` (set union; merging is commutative and idempotent).
    pub fn merge(&mut self, other: &VisitorSketch) {
        // Registers take anything (an empty sketch folds in as nothing); checked first, since
        // telling whether registers are empty means reading all of them.
        if let Inner::Registers(r) = &mut self.inner
            && fold(r, other)
        {
            return;
        }
        // Into nothing, a merge is a copy: a group of one item (a day of a daily series) needs
        // no union buffer at all.
        if self.is_empty() {
            if !other.is_empty() {
                *self = other.clone();
            }
            return;
        }
        if other.is_empty() {
            return;
        }
        if self.merge_sparse(other) {
            return;
        }
        if self.dense || other.dense {
            let mut r = Registers::new();
            if fold(&mut r, self) && fold(&mut r, other) {
                self.inner = Inner::Registers(r);
                self.dense = true;
                return;
            }
        }
        // Sparse sketches (and anything `Registers` does not take) merge by DataSketches' union,
        // which keeps a small union in its exact coupon form.
        match &self.inner {
            Inner::Sketch(s) => {
                let mut union = new_union();
                union.update(s);
                self.inner = Inner::Union(Box::new(union));
            }
            Inner::Registers(r) => {
                let mut union = new_union();
                union.update(&registers_sketch(r));
                self.inner = Inner::Union(Box::new(union));
            }
            Inner::Coupons(_) | Inner::CouponSet(_) => {
                let mut union = new_union();
                union_add(&mut union, &self.inner);
                self.inner = Inner::Union(Box::new(union));
            }
            Inner::Union(_) => {}
        }
        if let Inner::Union(u) = &mut self.inner {
            union_add(u, &other.inner);
        }
        self.dense |= other.dense;
    }

    /// Merges two sparse sketches by their coupons, as DataSketches' union would: the union
    /// stays a set of coupons until it holds more than [`coupons::MAX`], then becomes registers.
    /// `false`, changing nothing, when either side is not sparse.
    fn merge_sparse(&mut self, other: &VisitorSketch) -> bool {
        if self.dense || other.dense {
            return false;
        }
        let Some(theirs) = coupons_of(&other.inner) else { return false };
        let mut set = match &mut self.inner {
            Inner::CouponSet(set) => std::mem::take(set),
            inner => {
                let Some(mine) = coupons_of(inner) else { return false };
                let mut set = CouponSet::default();
                set.extend(&mine);
                set
            }
        };
        set.extend(&theirs);
        if set.len() <= coupons::MAX {
            self.inner = Inner::CouponSet(set);
        } else {
            let mut r = Registers::new();
            r.add_coupon_list(set.iter());
            self.inner = Inner::Registers(r);
            self.dense = true;
        }
        true
    }

    /// The union of many sketches: the sketch of every visitor in any of them. One union buffer
    /// serves them all, so reading a range of buckets costs one pass.
    pub fn union<'a>(sketches: impl IntoIterator<Item = &'a VisitorSketch>) -> VisitorSketch {
        let mut union = new_union();
        for s in sketches {
            union_add(&mut union, &s.inner);
        }
        VisitorSketch { inner: Inner::Sketch(union.to_sketch(HllType::Hll4)), dense: false }
    }

    /// The stored form: the header, then the packed coupons of a sparse sketch or the DataSketches
    /// image of a dense one (sizes in the module doc).
    ///
    /// The bytes are canonical: they depend only on which ids the sketch holds, not on the order
    /// they were inserted in or on how sketches were merged, so an aggregate and its rebuild from
    /// raw events store identical bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut image = match &self.inner {
            Inner::Sketch(s) => s.serialize(),
            // A dense union hands over its registers as they are (`HLL_8`); a sparse one its
            // coupons, as the `HLL_4` image every sparse sketch is compared in.
            Inner::Union(u) => {
                let image = u.to_sketch(HllType::Hll8).serialize();
                match image.get(ds::MODE_BYTE).map(|m| m & 0b11) {
                    Some(ds::MODE_HLL) => image,
                    _ => u.to_sketch(HllType::Hll4).serialize(),
                }
            }
            Inner::Registers(r) if !r.is_empty() => return stored_image(&r.to_hll4_image()),
            Inner::Registers(r) => registers_sketch(r).serialize(),
            Inner::Coupons(c) => coupons_sketch(c).serialize(),
            Inner::CouponSet(set) => coupons_sketch(&set.sorted()).serialize(),
        };
        match image.get(ds::MODE_BYTE).map(|m| m & 0b11) {
            Some(ds::MODE_LIST) => sort_coupons(&mut image, ds::LIST_PREAMBLE),
            Some(ds::MODE_SET) => sort_coupons(&mut image, ds::SET_PREAMBLE),
            // A dense sketch is stored as the `HLL_4` image of its registers alone.
            _ => {
                let mut registers = Registers::new();
                if registers.add_image(&image) && !registers.is_empty() {
                    return stored_image(&registers.to_hll4_image());
                }
                // An image the registers do not take (another `lg_k`), or one with no register
                // set (which DataSketches stores as an empty list): the library's union rebuilds
                // it from its registers, as `HLL_4`.
                image = match VisitorSketch::union([self]).inner {
                    Inner::Sketch(s) => s.serialize(),
                    Inner::Union(u) => u.to_sketch(HllType::Hll4).serialize(),
                    Inner::Registers(r) => registers_sketch(&r).serialize(),
                    Inner::Coupons(c) => coupons_sketch(&c).serialize(),
                    Inner::CouponSet(set) => coupons_sketch(&set.sorted()).serialize(),
                };
                canonical_dense(&mut image);
            }
        }
        // A sparse sketch is stored as its coupons, packed: about two thirds of the image.
        if let Some(coupons) = coupons::parse(&image) {
            let mut out = Vec::with_capacity(HEADER_LEN + 3 * coupons.len() + 3);
            out.extend_from_slice(&MAGIC);
            out.push(FORMAT_PACKED);
            packed::encode(&coupons, &mut out);
            return out;
        }
        stored_image(&image)
    }

    /// Reads what [`VisitorSketch::to_bytes`] wrote; any other bytes give an error.
    pub fn from_bytes(bytes: &[u8]) -> Result<VisitorSketch, SketchError> {
        if bytes.len() < HEADER_LEN {
            return Err(SketchError::TooShort(bytes.len()));
        }
        if bytes[..MAGIC.len()] != MAGIC {
            return Err(SketchError::BadMagic);
        }
        match bytes[MAGIC.len()] {
            FORMAT_IMAGE => {}
            FORMAT_PACKED => {
                return match packed::decode(&bytes[HEADER_LEN..]) {
                    Some(c) => Ok(VisitorSketch { inner: Inner::Coupons(c), dense: false }),
                    None => Err(SketchError::Corrupt("the packed coupons do not read back".into())),
                };
            }
            version => return Err(SketchError::UnsupportedVersion(version)),
        }
        // The common case, a compact sparse image as Tally writes it, is read as its coupons.
        if let Some(c) = coupons::parse(&bytes[HEADER_LEN..]) {
            return Ok(VisitorSketch { inner: Inner::Coupons(c), dense: false });
        }
        let inner = HllSketch::deserialize(&bytes[HEADER_LEN..]).map_err(|e| SketchError::Corrupt(e.to_string()))?;
        // Format 1 is defined with `LG_K` registers. Accepting fewer would let one odd item
        // drag every union that reads it down to its precision.
        if inner.lg_config_k() != LG_K {
            return Err(SketchError::Corrupt(format!("lg_k is {}, format 1 has {LG_K}", inner.lg_config_k())));
        }
        let sparse =
            matches!(bytes.get(HEADER_LEN + ds::MODE_BYTE).map(|m| m & 0b11), Some(ds::MODE_LIST | ds::MODE_SET));
        let sketch = VisitorSketch { inner: Inner::Sketch(inner), dense: !sparse };
        // A sparse image is a list of register updates that the reader has just re-inserted one
        // by one, each checked: nothing in it can upset later arithmetic (the property tests
        // below mutate such images too). Reading thousands of them is a dashboard's main cost,
        // so they are not exercised.
        if sparse {
            return Ok(sketch);
        }
        // Some damaged dense images deserialise but make the library's arithmetic overflow later:
        // a register is `cur_min` plus a 4-bit offset (or a 6-bit exception), so a corrupted
        // `cur_min` (a regression case the property test found) overflows a byte when a union or
        // a write reads the registers. No register exceeds 64, so neither can `cur_min`; checking
        // the byte costs nothing, where reading all 16 K registers here cost a dashboard about a
        // third of its time. The estimate is exercised too (it reads only the header's sums).
        // The property tests below mutate dense images and then estimate, merge and write them.
        if bytes.get(HEADER_LEN + ds::CUR_MIN_BYTE).is_none_or(|&m| m > ds::MAX_REGISTER) {
            return Err(SketchError::Corrupt("the registers' floor is out of range".into()));
        }
        let exercised = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = sketch.estimate();
        }));
        match exercised {
            Ok(()) => Ok(sketch),
            Err(_) => Err(SketchError::Corrupt("the registers do not add up".into())),
        }
    }
}

impl Default for VisitorSketch {
    fn default() -> Self {
        VisitorSketch::new()
    }
}

impl std::fmt::Debug for VisitorSketch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VisitorSketch").field("estimate", &self.estimate()).finish()
    }
}

/// Sorts the coupons of a sparse image, whose order is that of insertion (lists) or of hash-table
/// probing (sets); the reader re-inserts them, so any order reads back as the same sketch.
fn sort_coupons(image: &mut [u8], preamble: usize) {
    let Some(body) = image.get_mut(preamble..) else { return };
    let mut coupons: Vec<[u8; 4]> = body.chunks_exact(4).map(|c| [c[0], c[1], c[2], c[3]]).collect();
    coupons.sort_unstable_by_key(|c| u32::from_le_bytes(*c));
    for (dst, c) in body.chunks_exact_mut(4).zip(coupons) {
        dst.copy_from_slice(&c);
    }
}

/// A DataSketches image as stored: the header, then the image (format 1).
fn stored_image(image: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + image.len());
    out.extend_from_slice(&MAGIC);
    out.push(FORMAT_IMAGE);
    out.extend_from_slice(image);
    out
}

/// Makes a dense `HLL_4` image a function of its registers alone. The out-of-order flag tells
/// every DataSketches reader to estimate from the registers (as [`VisitorSketch::estimate`] does
/// anyway), which makes the order-dependent HIP state meaningless, so it is zeroed; the
/// exception coupons, listed in hash-map order, are sorted. The other header fields (`cur_min`,
/// its count, and the two register sums, which are exact in `f64` because they add powers of two
/// spanning fewer than 53 bits) already depend on the registers only.
fn canonical_dense(image: &mut [u8]) {
    if image.len() < ds::DENSE_PREAMBLE {
        return;
    }
    image[ds::FLAGS_BYTE] |= ds::OUT_OF_ORDER_FLAG;
    image[ds::HIP_ACCUM].fill(0);
    let lg_k = u32::from(image[3]).clamp(1, 21);
    sort_coupons(image, ds::DENSE_PREAMBLE + (1usize << (lg_k - 1)));
}

/// An empty HLL with Tally's parameters.
fn empty_hll() -> HllSketch {
    HllSketch::new(LG_K, HllType::Hll4).expect("LG_K is within DataSketches' range, checked at compile time")
}

// DataSketches accepts `lg_k` in [4, 21]; checking it here makes the `expect`s above input-independent.
const _: () = assert!(LG_K >= 4 && LG_K <= 21);

#[cfg(test)]
mod tests;
