//! Tests of the visitor sketch: accuracy, union semantics, the stored form and hostile bytes.

use expect_test::expect;
use proptest::prelude::*;

use super::*;

fn sketch_of(ids: impl IntoIterator<Item = u64>) -> VisitorSketch {
    let mut s = VisitorSketch::new();
    for id in ids {
        s.insert_u64(id);
    }
    s
}

/// Relative error of `estimate` against `truth`.
fn rel_err(estimate: u64, truth: u64) -> f64 {
    (estimate as f64 - truth as f64).abs() / truth as f64
}

/// Ids that look like Tally's visitor ids (keyed hashes), not a run of small integers.
fn scrambled(i: u64) -> u64 {
    i.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(17) ^ 0x5555_aaaa_1234_5678
}

#[test]
fn within_two_percent_at_100k_visitors() {
    for seed in 0..3u64 {
        let s = sketch_of((0..100_000).map(|i| scrambled(i + seed * 1_000_000)));
        let err = rel_err(s.estimate(), 100_000);
        assert!(err <= 0.02, "seed {seed}: estimate {} is {:.2}% off", s.estimate(), err * 100.0);
    }
}

#[test]
fn small_counts_are_exact() {
    // Sparse sketches count coupons, so a page with a handful of visitors shows the true number.
    for n in [0u64, 1, 2, 10, 100] {
        assert_eq!(sketch_of((0..n).map(scrambled)).estimate(), n);
    }
    assert!(VisitorSketch::new().is_empty());
    assert!(!sketch_of([1]).is_empty());
}

#[test]
fn inserting_an_id_twice_counts_once() {
    let s = sketch_of((0..1000).chain(0..1000).map(scrambled));
    assert_eq!(s.estimate(), sketch_of((0..1000).map(scrambled)).estimate());
}

#[test]
fn union_of_days_equals_sketch_of_the_week_not_the_sum() {
    // Seven days of 30,000 visitors each; each day shares 10,000 with the day before, as
    // returning visitors do. The week has 7 * 20,000 + 10,000 = 150,000 distinct visitors.
    let day = |d: u64| (d * 20_000..d * 20_000 + 30_000).map(scrambled);
    let days: Vec<VisitorSketch> = (0..7).map(|d| sketch_of(day(d))).collect();
    let week_direct = sketch_of((0..7).flat_map(day));
    let week_union = VisitorSketch::union(&days);

    // The union holds exactly the registers of the direct sketch, so the estimates are equal, not close.
    assert_eq!(week_union.estimate(), week_direct.estimate());
    assert!(rel_err(week_union.estimate(), 150_000) <= 0.02, "{}", week_union.estimate());
    let sum: u64 = days.iter().map(VisitorSketch::estimate).sum();
    assert!(sum > 200_000, "the sum double counts returning visitors: {sum}");

    // Merging one by one, in another grouping and order, gives the same answer.
    let mut folded = VisitorSketch::new();
    for d in days.iter().rev() {
        folded.merge(d);
    }
    assert_eq!(folded.estimate(), week_direct.estimate());
}

#[test]
fn merging_is_commutative_and_idempotent() {
    let a = sketch_of((0..5_000).map(scrambled));
    let b = sketch_of((3_000..40_000).map(scrambled));
    let mut ab = a.clone();
    ab.merge(&b);
    let mut ba = b.clone();
    ba.merge(&a);
    assert_eq!(ab.estimate(), ba.estimate());
    assert_eq!(ab.to_bytes(), ba.to_bytes());
    let mut abb = ab.clone();
    abb.merge(&b);
    assert_eq!(abb.estimate(), ab.estimate());
    // An empty sketch is the union's identity.
    let mut a_empty = a.clone();
    a_empty.merge(&VisitorSketch::new());
    assert_eq!(a_empty.estimate(), a.estimate());
}

#[test]
fn estimate_ignores_insertion_order() {
    let forward = sketch_of((0..50_000).map(scrambled));
    let backward = sketch_of((0..50_000).rev().map(scrambled));
    assert_eq!(forward.estimate(), backward.estimate());
}

#[test]
fn id_kinds_hash_as_their_little_endian_bytes() {
    let mut a = VisitorSketch::new();
    a.insert_u64(42);
    a.insert_u128(7);
    let mut b = VisitorSketch::new();
    b.insert_bytes(&42u64.to_le_bytes());
    b.insert_bytes(&7u128.to_le_bytes());
    assert_eq!(a.to_bytes(), b.to_bytes());
    assert_eq!(a.estimate(), 2);
}

#[test]
fn round_trip() {
    for n in [0u64, 1, 10, 1_000, 5_000, 100_000] {
        let s = sketch_of((0..n).map(scrambled));
        let bytes = s.to_bytes();
        let back = VisitorSketch::from_bytes(&bytes).unwrap();
        assert_eq!(back.estimate(), s.estimate(), "n = {n}");
        assert_eq!(back.to_bytes(), bytes, "n = {n}");
        // A read sketch keeps working: merging into it adds visitors.
        let mut more = back;
        more.merge(&sketch_of((n..n + 10).map(scrambled)));
        assert!(more.estimate() >= s.estimate());
    }
}

#[test]
fn stored_sizes() {
    // These figures are the module doc's table; update both together.
    let sizes: Vec<String> = [10u64, 1_000, 100_000]
        .iter()
        .map(|&n| format!("{n}: {} B", sketch_of((0..n).map(scrambled)).to_bytes().len()))
        .collect();
    expect!["10: 42 B, 1000: 2975 B, 100000: 8243 B"].assert_eq(&sizes.join(", "));
    // A range's union is read, never stored, but it must not be bigger than a stored sketch.
    let union = VisitorSketch::union([&sketch_of((0..10).map(scrambled))]);
    assert!(union.to_bytes().len() <= 8243);
}

#[test]
fn stored_form_header() {
    // A sparse sketch is stored packed (version 2), a dense one as its image (version 1).
    let bytes = sketch_of([1, 2, 3]).to_bytes();
    assert_eq!(&bytes[..3], b"TV\x02");
    let dense = sketch_of((0..20_000).map(scrambled)).to_bytes();
    assert_eq!(&dense[..3], b"TV\x01");
    let err = |b: &[u8]| VisitorSketch::from_bytes(b).unwrap_err().to_string();
    expect!["a visitor sketch is at least 3 bytes, got 2"].assert_eq(&err(b"TV"));
    expect!["not a Tally visitor sketch (bad magic)"].assert_eq(&err(b"XX\x01rest"));
    let mut newer = bytes.clone();
    newer[2] = 3;
    assert!(VisitorSketch::from_bytes(&newer).unwrap_err().is_unsupported_version());
    for short in [&b"TV\x01"[..], b"TV\x02", &bytes[..bytes.len() - 1], &dense[..dense.len() - 1]] {
        assert!(matches!(VisitorSketch::from_bytes(short), Err(SketchError::Corrupt(_))), "{short:?}");
    }
}

/// Valid stored sketches in each of DataSketches' modes (list, set, dense), to mutate.
fn valid_images() -> &'static [Vec<u8>] {
    static IMAGES: std::sync::OnceLock<Vec<Vec<u8>>> = std::sync::OnceLock::new();
    IMAGES.get_or_init(|| {
        [0u64, 3, 200, 3_000, 20_000].iter().map(|&n| sketch_of((0..n).map(scrambled)).to_bytes()).collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let _ = VisitorSketch::from_bytes(&bytes);
        // With a valid header the bytes reach the DataSketches reader itself.
        let mut framed = b"TV\x01".to_vec();
        framed.extend_from_slice(&bytes);
        if let Ok(s) = VisitorSketch::from_bytes(&framed) {
            let _ = s.estimate();
            let _ = VisitorSketch::union([&s, &s]).estimate();
        }
    }

    #[test]
    fn mutated_images_never_panic(
        which in 0usize..5,
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let mut bytes = valid_images()[which].clone();
        for (at, value) in edits {
            let i = at.index(bytes.len());
            bytes[i] = value;
        }
        if truncate {
            bytes.truncate(cut.index(bytes.len() + 1));
        }
        // Whatever a damaged item holds, reading, estimating, merging and writing it back must not panic.
        if let Ok(s) = VisitorSketch::from_bytes(&bytes) {
            let _ = s.estimate();
            let mut merged = sketch_of([1, 2, 3]);
            merged.merge(&s);
            let _ = merged.estimate();
            let _ = s.to_bytes();
        }
    }
}

#[test]
fn stored_bytes_are_canonical() {
    // The same visitors give the same bytes whatever the insertion order and merge grouping, so
    // an aggregate and its rebuild from raw events store identical items.
    for n in [3u64, 10, 300, 2_000, 30_000] {
        let forward = sketch_of((0..n).map(scrambled));
        let backward = sketch_of((0..n).rev().map(scrambled));
        let halves =
            VisitorSketch::union([&sketch_of((n / 2..n).map(scrambled)), &sketch_of((0..n / 2).map(scrambled))]);
        let mut odd_even = sketch_of((0..n).filter(|i| i % 2 == 1).map(scrambled));
        odd_even.merge(&sketch_of((0..n).filter(|i| i % 2 == 0).map(scrambled)));
        let bytes = forward.to_bytes();
        assert_eq!(backward.to_bytes(), bytes, "n = {n}: reversed");
        assert_eq!(halves.to_bytes(), bytes, "n = {n}: halves");
        assert_eq!(odd_even.to_bytes(), bytes, "n = {n}: odd and even");
        assert_eq!(VisitorSketch::from_bytes(&bytes).unwrap().to_bytes(), bytes, "n = {n}: read back");
    }
}

#[test]
fn merging_one_at_a_time_equals_one_union() {
    // Parts of every kind: empty, sparse lists and sets, and dense arrays.
    for sizes in [vec![0, 3, 40], vec![500, 2_000, 9], vec![30_000, 70_000, 1, 0, 5_000]] {
        let parts: Vec<VisitorSketch> =
            sizes.iter().enumerate().map(|(i, &n)| sketch_of((0..n).map(|x| x * 7 + i as u64 * 1_000))).collect();
        let mut merged = VisitorSketch::new();
        for p in &parts {
            merged.merge(p);
        }
        let union = VisitorSketch::union(&parts);
        assert_eq!(merged.estimate(), union.estimate(), "{sizes:?}");
        assert_eq!(merged.to_bytes(), union.to_bytes(), "{sizes:?}");
        // A merged sketch keeps working: inserting, merging it on, reading it back.
        merged.insert_u64(u64::MAX);
        let mut outer = VisitorSketch::new();
        outer.merge(&merged);
        let back = VisitorSketch::from_bytes(&outer.to_bytes()).unwrap();
        assert_eq!(back.estimate(), outer.estimate());
        assert_eq!(back.to_bytes(), VisitorSketch::union([&union, &sketch_of([u64::MAX])]).to_bytes());
    }
}

#[test]
fn stored_sparse_sketches_merge_by_coupons_to_the_same_union() {
    // Sizes around every threshold of the sparse forms: a list's seven coupons, each doubling
    // of the set (24, 48, … coupons), and the last sparse size (1,536 coupons) before registers.
    let sizes = [0u64, 1, 7, 8, 24, 25, 48, 49, 200, 700, 1_400, 1_536, 1_537, 1_600, 3_000];
    for &a in &sizes {
        for &b in &[0u64, 1, 6, 30, 800, 1_540] {
            // Overlapping by a third, so some coupons are shared.
            let built = [sketch_of((0..a).map(scrambled)), sketch_of((a * 2 / 3..a * 2 / 3 + b).map(scrambled))];
            let stored: Vec<VisitorSketch> =
                built.iter().map(|s| VisitorSketch::from_bytes(&s.to_bytes()).unwrap()).collect();
            // The reference: DataSketches' own union of the sketches as built.
            let reference = VisitorSketch::union(&built);
            let mut merged = VisitorSketch::new();
            for s in &stored {
                merged.merge(s);
            }
            assert_eq!(merged.to_bytes(), reference.to_bytes(), "{a} + {b}");
            assert_eq!(merged.estimate(), reference.estimate(), "{a} + {b}");
            // In the other order, and into a sketch built by inserts.
            let mut other_way = built[1].clone();
            other_way.merge(&stored[0]);
            assert_eq!(other_way.to_bytes(), reference.to_bytes(), "{b} + {a}");
        }
    }
}

#[test]
fn every_stored_sparse_image_reads_as_coupons() {
    for n in (0..1_600u64).step_by(7) {
        let s = sketch_of((0..n).map(scrambled));
        let back = VisitorSketch::from_bytes(&s.to_bytes()).unwrap();
        let sparse = coupons_of(&s.inner).is_some();
        assert_eq!(matches!(back.inner, Inner::Coupons(_)), sparse, "{n} visitors");
        assert_eq!(s.to_bytes()[2] == FORMAT_PACKED, sparse, "{n} visitors");
        assert_eq!(back.to_bytes(), s.to_bytes(), "{n} visitors");
        assert_eq!(back.estimate(), s.estimate(), "{n} visitors");
    }
}

#[test]
fn every_damaged_header_byte_of_a_dense_image_is_refused_or_harmless() {
    // Each byte of the header and preamble, and the first registers, set to telling values:
    // what reads back must estimate, merge and write back without a panic.
    let dense = valid_images()[3].clone();
    for at in 0..(HEADER_LEN + ds::DENSE_PREAMBLE + 16).min(dense.len()) {
        for value in [0u8, 1, 15, 16, 50, 63, 64, 65, 100, 200, 245, 255] {
            let mut bytes = dense.clone();
            bytes[at] = value;
            if let Ok(s) = VisitorSketch::from_bytes(&bytes) {
                let _ = s.estimate();
                let mut merged = sketch_of([1, 2, 3]);
                merged.merge(&s);
                let _ = (merged.estimate(), merged.to_bytes(), s.to_bytes());
            }
        }
    }
}

#[test]
fn stored_dense_sketches_merge_by_registers_to_the_same_union() {
    // As a dashboard reads them: from stored bytes, dense and sparse mixed, in any order.
    for sizes in [vec![5_000, 20, 7_000], vec![3, 40_000], vec![200, 300, 9_000, 100_000, 1], vec![50_000, 50_000]] {
        let parts: Vec<VisitorSketch> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| sketch_of((0..n).map(|x| scrambled(x + i as u64 * 3_000))))
            .map(|s| VisitorSketch::from_bytes(&s.to_bytes()).unwrap())
            .collect();
        let union = VisitorSketch::union(&parts);
        for order in [parts.iter().collect::<Vec<_>>(), parts.iter().rev().collect()] {
            let mut merged = VisitorSketch::new();
            for p in order {
                merged.merge(p);
            }
            assert!(matches!(merged.inner, Inner::Registers(_)) || sizes.iter().all(|&n| n < 1_000), "{sizes:?}");
            assert_eq!(merged.to_bytes(), union.to_bytes(), "{sizes:?}");
            assert_eq!(merged.estimate(), union.estimate(), "{sizes:?}");
        }
    }
}

/// What `to_bytes` stored for dense registers before it wrote them itself: DataSketches' union
/// fed them, converted to `HLL_4`, serialised, made canonical.
fn library_dense_image(registers: &Registers) -> Vec<u8> {
    let mut union = new_union();
    union.update(&registers_sketch(registers));
    let mut image = union.to_sketch(HllType::Hll4).serialize();
    canonical_dense(&mut image);
    image
}

/// Registers over a floor: `raised` of every 256 lifted by up to `spread` (at most 63).
fn registers_over(floor: u8, spread: u8, raised: u16, seed: u64) -> Registers {
    let mut state = seed | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut registers = Registers::new();
    registers.add_coupon_list((0..1u32 << LG_K).map(|slot| {
        let r = next();
        let lift = if (r & 0xFF) < u64::from(raised) { (r >> 8) % (u64::from(spread) + 1) } else { 0 };
        let value = (u64::from(floor) + lift).min(63) as u32;
        value << ds::SLOT_BITS | slot
    }));
    registers
}

#[test]
fn hll4_image_of_extreme_registers_is_the_unions() {
    assert!(registers_over(0, 0, 0, 1).is_empty());
    for registers in [registers_over(0, 63, 256, 7), registers_over(63, 0, 0, 7), registers_over(0, 1, 1, 7)] {
        assert_eq!(registers.to_hll4_image(), library_dense_image(&registers));
    }
    // No register set: the library stores an empty list, as for a sketch nothing was put in.
    let empty = VisitorSketch { inner: Inner::Registers(Registers::new()), dense: true };
    assert_eq!(empty.to_bytes(), VisitorSketch::new().to_bytes());
    assert_eq!(coupons::parse(&library_dense_image(&Registers::new())), Some(vec![]));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Dense registers are stored as the library's union would store them, byte for byte, at
    /// every floor, with and without exceptions (registers 15 or more above the floor).
    #[test]
    fn hll4_image_is_the_unions(floor in 0u8..=50, spread in 0u8..=63, raised in 0u16..=256, seed: u64) {
        let registers = registers_over(floor, spread, raised, seed);
        if registers.is_empty() {
            // Checked above: stored as the empty sketch.
            return Ok(());
        }
        let image = registers.to_hll4_image();
        prop_assert_eq!(&image, &library_dense_image(&registers));
        let sketch = VisitorSketch { inner: Inner::Registers(registers), dense: true };
        prop_assert_eq!(&sketch.to_bytes()[HEADER_LEN..], &image[..]);
        // Read back, it is the same registers: written again, the same bytes.
        prop_assert_eq!(VisitorSketch::from_bytes(&sketch.to_bytes()).unwrap().to_bytes(), sketch.to_bytes());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A dashboard row: stored sketches of any sizes and overlaps, merged one at a time in any
    /// order, are exactly DataSketches' union of the sketches as built.
    #[test]
    fn stored_sketches_merged_in_any_order_equal_the_library_union(
        parts in proptest::collection::vec((0u64..3_000, 0u64..2_500), 1..7),
        rotate in 0usize..7,
    ) {
        let built: Vec<VisitorSketch> = parts.iter().map(|&(start, n)| sketch_of((start..start + n).map(scrambled))).collect();
        let reference = VisitorSketch::union(&built);
        let mut stored: Vec<VisitorSketch> =
            built.iter().map(|s| VisitorSketch::from_bytes(&s.to_bytes()).unwrap()).collect();
        let k = rotate % stored.len();
        stored.rotate_left(k);
        let mut merged = VisitorSketch::new();
        for s in &stored {
            merged.merge(s);
        }
        prop_assert_eq!(merged.estimate(), reference.estimate());
        prop_assert_eq!(merged.to_bytes(), reference.to_bytes());
    }
}

/// A coupon as DataSketches makes one: a value of 1..=63 over a 26-bit slot.
fn coupon() -> impl Strategy<Value = u32> {
    (0u32..1 << ds::SLOT_BITS, 1u32..=63).prop_map(|(slot, value)| value << ds::SLOT_BITS | slot)
}

proptest! {
    /// Packed coupons read back as the sorted set, whatever order they were written in, and the
    /// bytes depend on the set alone.
    #[test]
    fn packed_coupons_round_trip(mut coupons in proptest::collection::btree_set(coupon(), 0..=coupons::MAX)
        .prop_map(|s| s.into_iter().collect::<Vec<u32>>()), seed in any::<u64>()) {
        let mut bytes = Vec::new();
        packed::encode(&coupons, &mut bytes);
        prop_assert_eq!(packed::decode(&bytes), Some(coupons.clone()));
        // Shuffled: the same bytes.
        let n = coupons.len();
        for i in (1..n).rev() {
            coupons.swap(i, (seed.wrapping_mul(i as u64 + 1) >> 7) as usize % (i + 1));
        }
        let mut again = Vec::new();
        packed::encode(&coupons, &mut again);
        prop_assert_eq!(again, bytes);
    }

    /// Any bytes: refused, or exactly what `encode` writes for what they read as (so no two
    /// stored forms mean one sketch, and damage never reads as another sketch silently).
    #[test]
    fn packed_bytes_read_back_only_as_encode_writes_them(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        if let Some(coupons) = packed::decode(&bytes) {
            let mut again = Vec::new();
            packed::encode(&coupons, &mut again);
            prop_assert_eq!(again, bytes);
        }
    }

    /// One byte of a packed sketch changed: refused, or read as a sketch that merges, estimates
    /// and is written back without a panic.
    #[test]
    fn a_damaged_packed_sketch_is_refused_or_harmless(n in 0u64..1_600, at in any::<prop::sample::Index>(), value in any::<u8>()) {
        let mut bytes = sketch_of((0..n).map(scrambled)).to_bytes();
        let at = at.index(bytes.len());
        bytes[at] = value;
        if let Ok(s) = VisitorSketch::from_bytes(&bytes) {
            let mut merged = sketch_of([1, 2, 3]);
            merged.merge(&s);
            let _ = (s.estimate(), merged.estimate(), merged.to_bytes(), s.to_bytes());
        }
    }
}

/// Sketches stored by an earlier Tally (version 1: the DataSketches image, sparse ones too) read
/// as before, and are written back packed with the same registers.
#[test]
fn version_1_sparse_images_still_read() {
    for n in [0u64, 1, 5, 7, 8, 200, 1_000, 1_500] {
        let s = sketch_of((0..n).map(scrambled));
        let Some(coupons) = coupons_of(&s.inner).map(|c| {
            let mut c = c.into_owned();
            c.sort_unstable();
            c
        }) else {
            continue;
        };
        let mut old = b"TV\x01".to_vec();
        old.extend_from_slice(&coupons::image(&coupons));
        let back = VisitorSketch::from_bytes(&old).unwrap();
        assert_eq!(back.estimate(), s.estimate(), "{n} visitors");
        assert_eq!(back.to_bytes(), s.to_bytes(), "{n} visitors");
        assert_eq!(back.to_bytes()[2], FORMAT_PACKED);
    }
}

/// How long reading a stored sparse sketch takes, packed (version 2) and as the DataSketches
/// image an earlier Tally stored (version 1). Timing, so not run by default:
/// `cargo test --release -p analytics --lib -- --ignored sparse_read_speed --nocapture`.
#[test]
#[ignore = "a measurement, not a check"]
fn sparse_read_speed() {
    for n in [10u64, 100, 1_000, 1_500] {
        let s = sketch_of((0..n).map(scrambled));
        let packed = s.to_bytes();
        let mut coupons = coupons_of(&s.inner).expect("sparse").into_owned();
        coupons.sort_unstable();
        let mut image = b"TV\x01".to_vec();
        image.extend_from_slice(&coupons::image(&coupons));
        let time = |bytes: &[u8]| {
            let runs = 200_000 / (n as u32 + 10);
            let started = std::time::Instant::now();
            for _ in 0..runs {
                std::hint::black_box(VisitorSketch::from_bytes(std::hint::black_box(bytes)).unwrap());
            }
            started.elapsed() / runs
        };
        let (v1, v2) = (time(&image), time(&packed));
        eprintln!("{n} visitors: image {} B {v1:?}, packed {} B {v2:?}", image.len(), packed.len());
    }
}
