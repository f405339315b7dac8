//! The facts of the DataSketches HLL binary image that Tally's sketch code relies on, in one
//! place. The format is the same in every language's DataSketches library.
//!
//! Every image starts with an 8-byte preamble: preamble length in 32-bit words (byte 0), serial
//! version (1), family (2), `lg_k` (3), the coupon table's size as a log (4, sparse images), flags
//! (5), the list's coupon count or the registers' floor `cur_min` (6), and the mode (7: bits 0–1
//! list, set or HLL; bits 2–3 the target type `HLL_4`, `HLL_6` or `HLL_8`). Sparse images then
//! hold `u32` coupons (a 6-bit value over a 26-bit slot each), after a 4-byte count for sets.
//! Dense images have a 40-byte preamble (the insertion-order estimator's state in bytes 8..16,
//! the count of `HLL_4` exceptions in 36..40), then the registers (`HLL_4`: a nibble each, low
//! nibble first, 15 meaning "see the exceptions"; `HLL_8`: a byte each), then the exceptions as
//! coupons.

pub const SERIAL_VERSION: u8 = 1;
pub const FAMILY_HLL: u8 = 7;
pub const LIST_PREINTS: u8 = 2;
pub const SET_PREINTS: u8 = 3;
pub const HLL_PREINTS: u8 = 10;

pub const FLAGS_BYTE: usize = 5;
pub const EMPTY_FLAG: u8 = 4;
pub const COMPACT_FLAG: u8 = 8;
/// Tells readers to estimate from the registers, not the insertion-order state.
pub const OUT_OF_ORDER_FLAG: u8 = 16;
pub const CUR_MIN_BYTE: usize = 6;
pub const MODE_BYTE: usize = 7;

pub const MODE_LIST: u8 = 0;
pub const MODE_SET: u8 = 1;
pub const MODE_HLL: u8 = 2;
pub const TYPE_HLL4: u8 = 0;
pub const TYPE_HLL8: u8 = 2;

pub const LIST_PREAMBLE: usize = 8;
pub const SET_PREAMBLE: usize = 12;
pub const DENSE_PREAMBLE: usize = 40;
pub const HIP_ACCUM: std::ops::Range<usize> = 8..16;
pub const AUX_COUNT: std::ops::Range<usize> = 36..40;

/// An `HLL_4` nibble that defers to the exception list.
pub const EXCEPTION: u8 = 15;
/// A coupon's slot bits; the value is the six bits above them.
pub const SLOT_BITS: u32 = 26;
/// No register value exceeds 64.
pub const MAX_REGISTER: u8 = 64;
