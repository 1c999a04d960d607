//! Huge-page advice for a dense pool's chunks: a chunk partly decommitted (or partly released
//! by the sweep) is advised `MADV_NOHUGEPAGE` so khugepaged does not fill its holes back in, and
//! goes back to `MADV_HUGEPAGE` once it is wholly clean. One bit per chunk records the advice.

use super::*;

impl Region {
    /// After `[address, address + bytes)` was decommitted and merged into the clean span
    /// `[merged, merged + merged_bytes)`: each chunk it touched that is still partly in use is
    /// advised `MADV_NOHUGEPAGE`, and each that is now wholly clean and was so advised goes back
    /// to `MADV_HUGEPAGE` (one call per run; its next use may fault in a huge page again).
    ///
    /// Without this, khugepaged, which collapses any huge-page-eligible 2 MiB range with a single
    /// resident page (its default `max_ptes_none` is 511), would fill decommitted pages back in
    /// with zeros, and RSS would creep up for as long as the program runs. Only chunks the
    /// decommit touched can change state, so the work is proportional to the decommit.
    pub(super) fn settle_huge_pages(
        &self,
        address: usize,
        bytes: usize,
        merged: usize,
        merged_bytes: usize,
    ) {
        let first = (address & !(CHUNK_BYTES - 1)).max(self.huge_from);
        let end = (address + bytes).next_multiple_of(CHUNK_BYTES);
        let mut run_start = 0;
        let mut chunk = first;
        while chunk < end {
            let wholly_clean = chunk >= merged && chunk + CHUNK_BYTES <= merged + merged_bytes;
            if wholly_clean {
                let index = (chunk - self.start) / CHUNK_BYTES;
                // SAFETY: the span lock is held and the bitmap covers every chunk of the region.
                let word = unsafe { &mut *self.small_chunks.add(index / 64) };
                let bit = 1u64 << (index % 64);
                if *word & bit != 0 {
                    *word &= !bit;
                    if run_start == 0 {
                        run_start = chunk;
                    }
                }
            } else {
                self.advise_run(&mut run_start, chunk);
                self.keep_off_huge_pages(chunk);
            }
            chunk += CHUNK_BYTES;
        }
        self.advise_run(&mut run_start, end.max(first));
    }

    /// Advises `chunk` (in the huge-page part) `MADV_NOHUGEPAGE` unless its bit says it already
    /// is, and sets the bit. The span lock must be held. A refusal (the map count limit) only
    /// leaves the chunk as it was: a later collapse costs memory, not correctness.
    pub(super) fn keep_off_huge_pages(&self, chunk: usize) {
        let index = (chunk - self.start) / CHUNK_BYTES;
        // SAFETY: the caller holds the span lock and the bitmap covers every chunk of the region.
        let word = unsafe { &mut *self.small_chunks.add(index / 64) };
        let bit = 1u64 << (index % 64);
        if *word & bit == 0 && os::advise(chunk as *mut u8, CHUNK_BYTES, libc::MADV_NOHUGEPAGE) {
            *word |= bit;
        }
    }

    /// Advises the chunks from `*run_start` (0: none) up to `end` back onto huge pages.
    pub(super) fn advise_run(&self, run_start: &mut usize, end: usize) {
        if *run_start != 0 {
            os::advise(*run_start as *mut u8, end - *run_start, libc::MADV_HUGEPAGE);
            *run_start = 0;
        }
    }
}
