//! The process's global allocator: the system allocator, except that very large requests get
//! lazily committed memory (an anonymous `MAP_NORESERVE` mapping).
//!
//! Why: the Kafka codecs (`kafka-protocol`) reserve a `Vec` for an array's element count before
//! decoding the elements, so a request that claims `INT32_MAX` elements in a few bytes asks for
//! hundreds of gigabytes. Refusing the allocation would abort the process. With this allocator the
//! reservation costs only address space: no page is touched, decoding fails at the first missing
//! element, and the mapping is returned. Every frame is bounded by `socket.request.max.bytes`
//! before it is read, so memory actually written stays proportional to bytes received.

use std::alloc::{GlobalAlloc, Layout, System};

/// Requests above this size are mapped lazily. Normal work never allocates this much at once.
const LAZY_BYTES_MIN: usize = 1 << 30;
const PAGE_BYTES: usize = 4096;

pub struct LazyHugeAlloc;

fn is_lazy(layout: &Layout) -> bool {
    layout.size() >= LAZY_BYTES_MIN && layout.align() <= PAGE_BYTES
}

unsafe fn map(size: usize) -> *mut u8 {
    // SAFETY: an anonymous private mapping has no preconditions; failure is MAP_FAILED.
    let pointer = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if pointer == libc::MAP_FAILED {
        std::ptr::null_mut()
    } else {
        pointer.cast()
    }
}

// SAFETY: small layouts go to `System` unchanged; large ones are page-aligned mappings of at
// least `size` bytes (zeroed, as anonymous mappings are), unmapped with the same size.
unsafe impl GlobalAlloc for LazyHugeAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if is_lazy(&layout) {
            unsafe { map(layout.size()) }
        } else {
            unsafe { System.alloc(layout) }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if is_lazy(&layout) {
            unsafe { map(layout.size()) }
        } else {
            unsafe { System.alloc_zeroed(layout) }
        }
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        if is_lazy(&layout) {
            unsafe { libc::munmap(pointer.cast(), layout.size()) };
        } else {
            unsafe { System.dealloc(pointer, layout) }
        }
    }

    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees `new_size` with this alignment is a valid layout.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (is_lazy(&layout), is_lazy(&new_layout)) {
            (false, false) => return unsafe { System.realloc(pointer, layout, new_size) },
            // Both mapped: move the mapping, copying nothing (and touching no page).
            (true, true) => {
                let moved = unsafe {
                    libc::mremap(
                        pointer.cast(),
                        layout.size(),
                        new_size,
                        libc::MREMAP_MAYMOVE,
                    )
                };
                return if moved == libc::MAP_FAILED {
                    std::ptr::null_mut()
                } else {
                    moved.cast()
                };
            }
            // One side is small: copying the small side's bytes is cheap.
            _ => {}
        }
        let new_pointer = unsafe { self.alloc(new_layout) };
        if !new_pointer.is_null() {
            unsafe {
                std::ptr::copy_nonoverlapping(pointer, new_pointer, layout.size().min(new_size));
                self.dealloc(pointer, layout);
            }
        }
        new_pointer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_layouts_map_lazily_and_round_trip() {
        let alloc = LazyHugeAlloc;
        // 64 GiB: more than this machine has; only address space is taken.
        let layout = Layout::from_size_align(64 << 30, 8).expect("layout");
        unsafe {
            let pointer = alloc.alloc(layout);
            assert!(!pointer.is_null());
            pointer.write(7);
            assert_eq!(pointer.read(), 7);
            let grown = alloc.realloc(pointer, layout, 65 << 30);
            assert_eq!(grown.read(), 7);
            alloc.dealloc(grown, Layout::from_size_align(65 << 30, 8).expect("layout"));
            let small = Layout::from_size_align(64, 8).expect("layout");
            let p = alloc.alloc(small);
            let big = alloc.realloc(p, small, 2 << 30);
            assert!(!big.is_null());
            let back = alloc.realloc(
                big,
                Layout::from_size_align(2 << 30, 8).expect("layout"),
                32,
            );
            alloc.dealloc(back, Layout::from_size_align(32, 8).expect("layout"));
        }
    }
}
