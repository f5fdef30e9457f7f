// A global allocator the host's cannot free, for test plugins (included
// by tp-scripted-alloc and tp-store-wrapper): each block starts 16 bytes
// (or its alignment) into a block of the system allocator, behind a tag.
// If the host frees one of the plugin's blocks, glibc aborts ("free():
// invalid pointer"); if the plugin frees one of the host's, the tag is
// missing and it aborts with a backtrace naming the place.

use std::alloc::{GlobalAlloc, Layout, System};

struct Tagged;

const TAG: usize = 0x7a67_b0b5_a110_c8ed;

impl Tagged {
    /// The header's size: room for the tag, keeping the block's alignment.
    fn header(layout: Layout) -> usize {
        layout.align().max(16)
    }

    /// The system block behind a block of `layout` with `header` bytes in front.
    fn outer(layout: Layout, header: usize) -> Option<Layout> {
        Layout::from_size_align(layout.size().checked_add(header)?, header).ok()
    }
}

// SAFETY (test plugin): blocks come from `System` with `header` extra bytes
// in front, and the tag (the block's address mixed with `TAG`) is written
// in the 8 bytes before the returned pointer, inside that header; `dealloc`
// checks the tag before giving the outer block back with the same layout.
unsafe impl GlobalAlloc for Tagged {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let header = Self::header(layout);
        let Some(outer) = Self::outer(layout, header) else {
            return std::ptr::null_mut();
        };
        // SAFETY: `outer` has a non-zero size (header ≥ 16).
        let base = unsafe { System.alloc(outer) };
        if base.is_null() {
            return base;
        }
        // SAFETY: `header` ≤ the outer block's size, and the 8 bytes before
        // `block` lie inside the header.
        unsafe {
            let block = base.add(header);
            (block as *mut usize).sub(1).write(TAG ^ block as usize);
            block
        }
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        let header = Self::header(layout);
        // SAFETY: for a block of ours the 8 bytes before it are our header;
        // for a foreign block they are its allocator's bookkeeping, readable
        // memory right before a live allocation.
        let tag = unsafe { (block as *mut usize).sub(1).read() };
        if tag != TAG ^ block as usize {
            // The backtrace allocates: from `System`, through this allocator.
            let trace = std::backtrace::Backtrace::force_capture();
            eprintln!("test plugin allocator: asked to free a block it did not allocate\n{trace}");
            std::process::abort();
        }
        // SAFETY: the tag proves `block` came from `alloc` with this layout.
        unsafe {
            (block as *mut usize).sub(1).write(0);
            System.dealloc(block.sub(header), Self::outer(layout, header).expect("layout checked at alloc"));
        }
    }
}

#[global_allocator]
static ALLOCATOR: Tagged = Tagged;
