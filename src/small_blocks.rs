//! A cache of freed small blocks in front of the C library's `malloc`, the manager's global
//! allocator.
//!
//! Why: the image's binary is linked against musl, whose allocator (mallocng) is thrifty with
//! memory but slow per call: the largest share of the manager's CPU in the benchmark's profile
//! (docs/performance.md, "Latest: issue 25, session 24"). The manager allocates and frees the
//! same small sizes over and over (names, label values, JSON keys, events, futures), so a short
//! stack of freed blocks per size class answers most of those calls without entering `malloc`.
//! Other allocators cost memory instead (mimalloc: same document, session 18).
//!
//! The classes are musl's smallest ones, by the bytes a block of each holds (16-byte units less
//! its 4-byte header): a request is rounded up to its class's size, which musl would have
//! served from the same class anyway, so the cache costs no memory per live block. A small
//! class (up to 492 bytes) keeps at most [`CLASS_BYTES`] of freed blocks (and [`MAX_KEPT`]
//! blocks): the rest go back to `malloc`. The medium classes (up to 16 KiB: buffers, B-tree
//! nodes of decoded maps) keep a few blocks each within one budget per thread
//! ([`MEDIUM_BUDGET`]): musl gives a group of them back to the kernel as soon as it empties, so
//! without the cache each burst of them cost an `mmap`, its pages' faults and a `munmap`
//! (docs/performance.md, issue 25, session 28). Each of the first threads to allocate has a
//! shelf of its own (`SHELVES`), so taking and keeping a block takes no lock and never waits.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::{Cell, UnsafeCell};
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};

unsafe extern "C" {
    fn malloc(size: usize) -> *mut u8;
    fn calloc(count: usize, size: usize) -> *mut u8;
    fn realloc(ptr: *mut u8, size: usize) -> *mut u8;
    fn free(ptr: *mut u8);
}

/// The bytes a block of each class holds, smallest first: musl's size classes 0–35.
const CLASS_SIZES: [usize; 36] = [
    12, 28, 44, 60, 76, 92, 108, 124, 140, 156, 188, 236, 284, 316, 396, 492, // small
    572, 668, 796, 1004, 1148, 1340, 1628, 2028, 2332, 2716, 3260, 4076, 4668, 5436, 6540, 8172,
    9340, 10908, 13084, 16364, // medium
];
const CLASSES: usize = CLASS_SIZES.len();
/// The first medium class.
const MEDIUM: usize = 16;
/// The largest request the cache serves.
const LARGEST: usize = CLASS_SIZES[CLASSES - 1];
/// `malloc`'s alignment on x86-64 (both musl and glibc): what a cached block can promise.
const MALLOC_ALIGN: usize = 16;
/// Freed bytes a small class keeps at most.
const CLASS_BYTES: usize = 2048;
/// Freed bytes a medium class keeps at most (but at least two blocks).
const MEDIUM_CLASS_BYTES: usize = 16 * 1024;
/// Freed bytes of all medium classes a shelf keeps at most: what the cache may hold back from
/// musl on each busy thread, beside at most 32 KiB of small blocks.
const MEDIUM_BUDGET: usize = 96 * 1024;
/// Freed blocks a class keeps at most.
const MAX_KEPT: usize = 64;

/// How many freed blocks each class keeps.
const KEPT: [u8; CLASSES] = {
    let mut kept = [0; CLASSES];
    let mut class = 0;
    while class < CLASSES {
        let by_bytes = if class < MEDIUM {
            CLASS_BYTES / CLASS_SIZES[class]
        } else if MEDIUM_CLASS_BYTES / CLASS_SIZES[class] < 2 {
            2
        } else {
            MEDIUM_CLASS_BYTES / CLASS_SIZES[class]
        };
        kept[class] = if by_bytes < MAX_KEPT {
            by_bytes
        } else {
            MAX_KEPT
        } as u8;
        class += 1;
    }
    kept
};

/// The class a request of `size` bytes is served from, if the cache serves it.
fn class_of(layout: Layout) -> Option<usize> {
    let size = layout.size();
    if layout.align() > MALLOC_ALIGN || size > LARGEST {
        return None;
    }
    // Classes 0–9 are one 16-byte unit apart; above, the smallest class that holds it.
    let linear = (size + 3) >> 4;
    if linear < 10 {
        return Some(linear);
    }
    Some(CLASS_SIZES.partition_point(|&held| held < size))
}

/// A thread's freed blocks of each class, a stack of their addresses per class. Not a list
/// threaded through the blocks: taking one would read the freed block's first word, a cache
/// miss most times (where most of the time taking a block went, in the profile).
struct Shelf {
    blocks: [[*mut u8; MAX_KEPT]; CLASSES],
    lens: [u8; CLASSES],
    /// Bytes kept in medium classes (at most [`MEDIUM_BUDGET`]).
    medium_bytes: usize,
}

impl Shelf {
    const fn new() -> Self {
        Shelf {
            blocks: [[ptr::null_mut(); MAX_KEPT]; CLASSES],
            lens: [0; CLASSES],
            medium_bytes: 0,
        }
    }

    /// A freed block of `class`, or null.
    #[inline]
    fn take(&mut self, class: usize) -> *mut u8 {
        let len = usize::from(self.lens[class]);
        if len == 0 {
            return ptr::null_mut();
        }
        self.lens[class] -= 1;
        if class >= MEDIUM {
            self.medium_bytes -= CLASS_SIZES[class];
        }
        self.blocks[class][len - 1]
    }

    /// Keeps a freed block of `class`; false if the class has its share.
    #[inline]
    fn keep(&mut self, class: usize, block: *mut u8) -> bool {
        let len = usize::from(self.lens[class]);
        if len >= usize::from(KEPT[class]) {
            return false;
        }
        if class >= MEDIUM {
            if self.medium_bytes + CLASS_SIZES[class] > MEDIUM_BUDGET {
                return false;
            }
            self.medium_bytes += CLASS_SIZES[class];
        }
        self.blocks[class][len] = block;
        self.lens[class] += 1;
        true
    }
}

/// Threads that get a shelf: the first to allocate. The manager has two that allocate much —
/// the controllers' and the webhook's — and a shelf each spares them musl's lock, which they
/// contended for. A thread after these goes straight to `malloc`; the shelf of a thread that
/// ended keeps its few blocks (at most a class's share per class).
/// (The unit tests' harness runs each test on a thread of its own: there, enough for all.)
const SHELVES: usize = if cfg!(test) { 64 } else { 4 };
const NO_SHELF: u8 = u8::MAX;
const UNCLAIMED: u8 = u8::MAX - 1;

/// Shelves claimed so far, by any instance (a thread's shelf number is the same in each).
static CLAIMED: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    // Const and without a destructor: a plain thread-local, so reading it never allocates.
    static SHELF: Cell<u8> = const { Cell::new(UNCLAIMED) };
}

/// This thread's shelf number, claiming one on its first allocation.
#[inline]
fn shelf_number() -> Option<usize> {
    let number = SHELF.try_with(Cell::get).unwrap_or(NO_SHELF);
    match number {
        NO_SHELF => None,
        UNCLAIMED => claim_shelf(),
        n => Some(usize::from(n)),
    }
}

#[cold]
fn claim_shelf() -> Option<usize> {
    let claimed = CLAIMED.fetch_add(1, Ordering::Relaxed);
    let number = if claimed < SHELVES {
        claimed as u8
    } else {
        NO_SHELF
    };
    let _ = SHELF.try_with(|shelf| shelf.set(number));
    (number != NO_SHELF).then_some(usize::from(number))
}

pub(crate) struct SmallBlocks {
    shelves: [UnsafeCell<Shelf>; SHELVES],
}

// SAFETY: shelf `n` is only touched by the one thread whose `SHELF` is `n` (`shelf_number`).
unsafe impl Sync for SmallBlocks {}

impl SmallBlocks {
    pub(crate) const fn new() -> Self {
        SmallBlocks {
            shelves: [const { UnsafeCell::new(Shelf::new()) }; SHELVES],
        }
    }

    /// Runs `f` on this thread's shelf, if it has one.
    #[inline]
    fn with_shelf<T>(&self, f: impl FnOnce(&mut Shelf) -> T) -> Option<T> {
        let number = shelf_number()?;
        // SAFETY: no other thread has this number, and `f` does not reenter the allocator.
        Some(f(unsafe { &mut *self.shelves[number].get() }))
    }

    /// A freed block of `class`, if this thread keeps one.
    #[inline]
    fn pop(&self, class: usize) -> *mut u8 {
        self.with_shelf(|shelf| shelf.take(class))
            .unwrap_or(ptr::null_mut())
    }

    /// Keeps a freed block of `class`; false if the class is full or the thread has no shelf.
    #[inline]
    fn push(&self, class: usize, block: *mut u8) -> bool {
        self.with_shelf(|shelf| shelf.keep(class, block))
            .unwrap_or(false)
    }
}

// SAFETY: every block the cache hands out is a `malloc` block of its class's size (fresh, or
// kept when freed with a layout of the same class), so it is 16-aligned and large enough for
// any layout of that class; blocks outside the classes go to `System` untouched. A block of a
// class is given back through `free`/`realloc`, which accept any `malloc` block.
unsafe impl GlobalAlloc for SmallBlocks {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let Some(class) = class_of(layout) else {
            return unsafe { System.alloc(layout) };
        };
        let block = self.pop(class);
        if !block.is_null() {
            return block;
        }
        unsafe { malloc(CLASS_SIZES[class]) }
    }

    #[inline]
    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        let Some(class) = class_of(layout) else {
            return unsafe { System.dealloc(block, layout) };
        };
        if !self.push(class, block) {
            unsafe { free(block) }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let Some(class) = class_of(layout) else {
            return unsafe { System.alloc_zeroed(layout) };
        };
        let block = self.pop(class);
        if !block.is_null() {
            unsafe { block.write_bytes(0, layout.size()) };
            return block;
        }
        unsafe { calloc(1, CLASS_SIZES[class]) }
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller promises `new_size`, rounded up to the alignment, fits an isize.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (class_of(layout), class_of(new_layout)) {
            (None, None) => unsafe { System.realloc(block, layout, new_size) },
            // Same class: the block already holds the class's size.
            (Some(old), Some(new)) if old == new => block,
            // From one class to another (a string or vector growing, mostly): what `realloc`
            // would do for blocks this small — a new block, the bytes copied, the old one
            // freed — with both blocks taken from and given back to the shelf when it can.
            (Some(old), Some(_)) => {
                let moved = unsafe { self.alloc(new_layout) };
                if !moved.is_null() {
                    let len = layout.size().min(new_size);
                    unsafe { ptr::copy_nonoverlapping(block, moved, len) };
                    if !self.push(old, block) {
                        unsafe { free(block) }
                    }
                }
                moved
            }
            // Either side is a class, so the alignment is at most malloc's and the block is a
            // `malloc` block (ours, or `System`'s for an alignment this small).
            (_, new) => unsafe { realloc(block, new.map_or(new_size, |c| CLASS_SIZES[c])) },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tests' own instance (beside the test binary's global one): a static, since its 64
    /// shelves are too large for a test thread's stack.
    static BLOCKS: SmallBlocks = SmallBlocks::new();

    fn layout(size: usize) -> Layout {
        Layout::from_size_align(size, 8).unwrap()
    }

    #[test]
    fn a_request_is_served_from_the_smallest_class_that_holds_it() {
        let cases = [
            (1, Some(0)),
            (12, Some(0)),
            (13, Some(1)),
            (28, Some(1)),
            (29, Some(2)),
            (156, Some(9)),
            (157, Some(10)),
            (188, Some(10)),
            (189, Some(11)),
            (492, Some(15)),
            (493, Some(16)),
            (632, Some(17)),
            (4096, Some(28)),
            (16364, Some(35)),
            (16365, None),
        ];
        for (size, class) in cases {
            assert_eq!(class_of(layout(size)), class, "{size} bytes");
        }
        assert_eq!(class_of(Layout::from_size_align(16, 16).unwrap()), Some(1));
        assert_eq!(class_of(Layout::from_size_align(16, 32).unwrap()), None);
    }

    #[test]
    fn a_shelf_hands_back_the_last_block_kept_and_keeps_no_more_than_its_share() {
        let mut shelf = Box::new(Shelf::new());
        let class = 15;
        let share = usize::from(KEPT[class]);
        assert_eq!(share, CLASS_BYTES / CLASS_SIZES[class]);
        assert_eq!(usize::from(KEPT[0]), MAX_KEPT);
        assert!(shelf.take(class).is_null());
        // Addresses only: a shelf never reads or writes the blocks.
        let blocks: Vec<*mut u8> = (1..=share + 2).map(|i| (i * 16) as *mut u8).collect();
        let kept: Vec<bool> = blocks.iter().map(|&b| shelf.keep(class, b)).collect();
        assert_eq!(kept.iter().filter(|&&k| k).count(), share);
        assert!(!kept[share] && !kept[share + 1]);
        assert_eq!(shelf.take(class), blocks[share - 1]);
        assert!(shelf.take(class - 1).is_null());
    }

    #[test]
    fn medium_blocks_are_kept_within_one_budget_per_shelf() {
        let mut shelf = Box::new(Shelf::new());
        let largest = CLASSES - 1;
        assert_eq!(usize::from(KEPT[largest]), 2);
        assert_eq!(
            usize::from(KEPT[MEDIUM]),
            MEDIUM_CLASS_BYTES / CLASS_SIZES[MEDIUM]
        );
        // Fill medium classes from the largest down until the budget refuses a block.
        let mut kept = 0;
        let mut address = 16;
        for class in (MEDIUM..CLASSES).rev() {
            for _ in 0..KEPT[class] {
                address += 16;
                if shelf.keep(class, address as *mut u8) {
                    kept += CLASS_SIZES[class];
                }
            }
        }
        assert!(kept <= MEDIUM_BUDGET && kept + CLASS_SIZES[MEDIUM] > MEDIUM_BUDGET);
        assert_eq!(shelf.medium_bytes, kept);
        // Taking a block gives its bytes back to the budget; small classes are not counted.
        assert!(!shelf.take(largest).is_null());
        assert_eq!(shelf.medium_bytes, kept - CLASS_SIZES[largest]);
        assert!(shelf.keep(0, 8 as *mut u8));
        assert_eq!(shelf.medium_bytes, kept - CLASS_SIZES[largest]);
    }

    #[test]
    fn a_freed_block_serves_the_next_request_of_its_class_on_that_thread() {
        let blocks = &BLOCKS;
        assert!(shelf_number().is_some());
        unsafe {
            let first = blocks.alloc(layout(40));
            first.write_bytes(7, 40);
            blocks.dealloc(first, layout(40));
            // 33..=44 bytes share class 2.
            let again = blocks.alloc(layout(33));
            assert_eq!(again, first);
            // A zeroed request gets a zeroed block even when it is a recycled one.
            blocks.dealloc(again, layout(33));
            let zeroed = blocks.alloc_zeroed(layout(44));
            assert_eq!(zeroed, first);
            assert!(
                std::slice::from_raw_parts(zeroed, 44)
                    .iter()
                    .all(|&b| b == 0)
            );
            blocks.dealloc(zeroed, layout(44));
        }
        // Another thread has a shelf of its own: it does not get this thread's block.
        let here = unsafe { blocks.alloc(layout(40)) } as usize;
        unsafe { blocks.dealloc(here as *mut u8, layout(40)) };
        let there = std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let block = unsafe { blocks.alloc(layout(40)) };
                    unsafe { blocks.dealloc(block, layout(40)) };
                    block as usize
                })
                .join()
                .unwrap()
        });
        assert_ne!(here, there);
    }

    #[test]
    fn realloc_keeps_the_contents_within_and_across_classes() {
        let blocks = &BLOCKS;
        unsafe {
            let block = blocks.alloc(layout(20));
            for i in 0..20 {
                block.add(i).write(i as u8);
            }
            // 20 → 28 bytes: the same class, the same block.
            let same = blocks.realloc(block, layout(20), 28);
            assert_eq!(same, block);
            // 28 → 300 bytes: another class, and the old block is kept for its class.
            let mut now = blocks.realloc(same, layout(28), 300);
            assert_ne!(now, same);
            assert_eq!(
                std::slice::from_raw_parts(now, 20),
                &(0..20).collect::<Vec<u8>>()[..]
            );
            let reused = blocks.alloc(layout(28));
            assert_eq!(reused, same);
            blocks.dealloc(reused, layout(28));
            // 300 → 20000: out of the classes; and back to 10.
            now = blocks.realloc(now, layout(300), 20000);
            now = blocks.realloc(now, layout(20000), 10);
            let kept: Vec<u8> = std::slice::from_raw_parts(now, 10).to_vec();
            assert_eq!(kept, (0..10).collect::<Vec<u8>>());
            blocks.dealloc(now, layout(10));
            assert_eq!(blocks.alloc(layout(1)), now);
        }
    }

    #[test]
    fn a_large_alignment_bypasses_the_cache() {
        let blocks = &BLOCKS;
        let wide = Layout::from_size_align(64, 64).unwrap();
        unsafe {
            let block = blocks.alloc(wide);
            assert_eq!(block as usize % 64, 0);
            blocks.dealloc(block, wide);
        }
        let shelf = unsafe { &*blocks.shelves[shelf_number().unwrap()].get() };
        assert!(shelf.lens.iter().all(|&len| len == 0));
    }
}
