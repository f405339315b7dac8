//! Tally's global allocator: mimalloc, asked for plain blocks wherever mimalloc's plain blocks
//! already have the alignment asked for.
//!
//! The `mimalloc` crate's `MiMalloc` passes every allocation to `mi_malloc_aligned`, whose fast
//! path covers blocks up to 1 KiB only. A larger block of any alignment — a page redb reads, an
//! event block being encoded, an aggregate item's sketch, a request body — goes through its
//! generic aligned path, which works out whether the size class happens to be aligned and
//! otherwise over-allocates: 50–80 ns more per allocation and free than `mi_malloc` for the same
//! block (BENCHMARKS.md, "eighteenth session"). Every mimalloc block of 16 bytes or more is
//! 16-byte aligned (its size classes are whole multiples of two words on 64-bit targets, and
//! pages start aligned), and a smaller block is aligned to the word, which is at least its size
//! rounded to a power of two; so an alignment of at most 16 and at most the size needs nothing
//! beyond `mi_malloc`. This is the rule Rust's own `System` allocator applies to `malloc`, and
//! the one earlier releases of the `mimalloc` crate applied. Larger alignments (cache-padded
//! structures) still go to `MiMalloc`.

#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

/// The alignment every mimalloc block at least as large as it has (`MI_MAX_ALIGN_SIZE`).
const PLAIN_ALIGN: usize = 16;

unsafe extern "C" {
    fn mi_malloc(size: usize) -> *mut c_void;
    fn mi_zalloc(size: usize) -> *mut c_void;
    fn mi_realloc(p: *mut c_void, new_size: usize) -> *mut c_void;
}

/// Whether a plain mimalloc block of `size` bytes is aligned to `align`.
fn plain(align: usize, size: usize) -> bool {
    align <= PLAIN_ALIGN && align <= size
}

/// See the module documentation.
pub struct Allocator;

// SAFETY: every block comes from mimalloc, which frees any of its blocks with `mi_free`
// (`MiMalloc::dealloc`) whichever entry point made it; a plain block is requested only where
// `plain` says it has the layout's alignment, and everything else is `MiMalloc`'s.
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if plain(layout.align(), layout.size()) {
            // SAFETY: any size may be asked of mimalloc; a null result is passed on as failure.
            unsafe { mi_malloc(layout.size()).cast() }
        } else {
            // SAFETY: the caller's contract, passed on.
            unsafe { mimalloc::MiMalloc.alloc(layout) }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if plain(layout.align(), layout.size()) {
            // SAFETY: as in `alloc`.
            unsafe { mi_zalloc(layout.size()).cast() }
        } else {
            // SAFETY: the caller's contract, passed on.
            unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` is a mimalloc block (see the impl's comment).
        unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if plain(layout.align(), new_size) {
            // SAFETY: `ptr` is a live mimalloc block; the new block is plain, so aligned as
            // `layout` asks (`plain`), and mimalloc copies what fits and frees the old block.
            unsafe { mi_realloc(ptr.cast(), new_size).cast() }
        } else {
            // SAFETY: the caller's contract, passed on.
            unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every size up to a few pages at every alignment up to 4 KiB: blocks are aligned as asked,
    /// hold what is written, keep it across growing and shrinking, and zeroed ones are zero.
    #[test]
    fn blocks_have_their_alignment_and_keep_their_bytes() {
        let sizes = (1..=80).chain([100, 255, 1000, 1024, 1025, 1500, 2049, 4096, 4112, 8200, 65_536, 300_000]);
        for size in sizes {
            for align in [1, 2, 4, 8, 16, 32, 64, 128, 4096] {
                let layout = Layout::from_size_align(size, align).expect("a layout");
                // SAFETY: non-zero sizes; each block is freed once with its layout.
                unsafe {
                    let zeroed = Allocator.alloc_zeroed(layout);
                    assert!(!zeroed.is_null());
                    assert_eq!(zeroed as usize % align, 0, "zeroed {size} at {align}");
                    assert!(std::slice::from_raw_parts(zeroed, size).iter().all(|b| *b == 0));
                    Allocator.dealloc(zeroed, layout);

                    let mut p = Allocator.alloc(layout);
                    assert!(!p.is_null());
                    assert_eq!(p as usize % align, 0, "{size} at {align}");
                    for i in 0..size {
                        *p.add(i) = (i % 251) as u8;
                    }
                    // Grown past a size class, then shrunk below the first size.
                    let mut now = layout;
                    for new_size in [size * 3 + 1, size.div_ceil(2)] {
                        p = Allocator.realloc(p, now, new_size);
                        assert!(!p.is_null());
                        assert_eq!(p as usize % align, 0, "{size} to {new_size} at {align}");
                        let kept = size.min(new_size);
                        assert!((0..kept).all(|i| *p.add(i) == (i % 251) as u8), "{size} to {new_size} at {align}");
                        now = Layout::from_size_align(new_size, align).expect("a layout");
                    }
                    Allocator.dealloc(p, now);
                }
            }
        }
    }
}
