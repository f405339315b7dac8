//! Tally's global allocator against the `mimalloc` crate's own: an allocation and its free, for
//! blocks under and over mimalloc's 1 KiB fast path (`crates/cli/src/allocator.rs`).
//!
//! `cargo bench -p tally --bench allocator`

#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout};
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};

#[path = "../src/allocator.rs"]
#[allow(dead_code, unused_imports)]
mod allocator;

/// 64 blocks of `layout` allocated, then freed, by `a`.
fn churn(a: &impl GlobalAlloc, layout: Layout, held: &mut Vec<*mut u8>) {
    for _ in 0..64 {
        // SAFETY: a non-zero size; each block is freed below with its layout.
        held.push(unsafe { a.alloc(layout) });
    }
    for p in held.drain(..) {
        // SAFETY: allocated above by `a` with `layout`.
        unsafe { a.dealloc(black_box(p), layout) }
    }
}

fn benches(c: &mut Criterion) {
    // A small item's string, a KiB, a page redb reads (4 KiB and its `Arc` header), an encoded
    // block, a dense sketch.
    for size in [100usize, 1000, 1500, 4112, 9000, 16_400] {
        let layout = Layout::from_size_align(size, 8).expect("a layout");
        let mut held = Vec::with_capacity(64);
        let mut group = c.benchmark_group(format!("alloc_and_free_64_of_{size}_bytes"));
        group.bench_function("mimalloc_crate", |b| b.iter(|| churn(&mimalloc::MiMalloc, layout, &mut held)));
        group.bench_function("tally", |b| b.iter(|| churn(&allocator::Allocator, layout, &mut held)));
        group.finish();
    }
}

criterion_group!(allocator_benches, benches);
criterion_main!(allocator_benches);
