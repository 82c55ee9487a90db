//! A buffer that the members of a thread team write in disjoint parts between
//! barriers (the pattern of ggml's per-node work split). Access is `unsafe`: the
//! caller states which part it owns and which barrier separates it from readers.

use std::marker::PhantomData;
use std::ops::Range;

/// A mutable slice shared by the members of a job.
pub struct SharedSlice<'a, T> {
    ptr: *mut T,
    len: usize,
    _borrow: PhantomData<&'a mut [T]>,
}

impl<T> Clone for SharedSlice<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SharedSlice<'_, T> {}

// SAFETY: the slice is only touched through the unsafe accessors below, whose
// callers guarantee that concurrent accesses are to disjoint ranges or read-only.
unsafe impl<T: Send> Send for SharedSlice<'_, T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for SharedSlice<'_, T> {}

impl<'a, T> SharedSlice<'a, T> {
    /// Shares `s` for the lifetime of the borrow.
    pub fn new(s: &'a mut [T]) -> Self {
        SharedSlice { ptr: s.as_mut_ptr(), len: s.len(), _borrow: PhantomData }
    }

    /// Elements in the slice.
    #[cfg(feature = "lab")]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when empty.
    #[cfg(feature = "lab")]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A part to write.
    ///
    /// # Safety
    /// No other member reads or writes `r` until the next barrier.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn part_mut(&self, r: Range<usize>) -> &mut [T] {
        assert!(r.start <= r.end && r.end <= self.len, "{r:?} outside 0..{}", self.len);
        // SAFETY: in bounds (asserted); exclusivity is the caller's promise.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(r.start), r.len()) }
    }

    /// A part to read.
    ///
    /// # Safety
    /// No member writes `r` until the next barrier.
    pub unsafe fn part(&self, r: Range<usize>) -> &[T] {
        assert!(r.start <= r.end && r.end <= self.len, "{r:?} outside 0..{}", self.len);
        // SAFETY: in bounds (asserted); no concurrent writer is the caller's promise.
        unsafe { std::slice::from_raw_parts(self.ptr.add(r.start), r.len()) }
    }

    /// Pointer to element `i` (for kernels that take raw pointers).
    pub fn ptr_at(&self, i: usize) -> *mut T {
        assert!(i <= self.len);
        self.ptr.wrapping_add(i)
    }
}
