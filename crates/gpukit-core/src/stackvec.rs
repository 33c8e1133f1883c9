//! A list of at most `N` values on the stack: what a launch builds its argument lists in.
//! Unlike `SmallVec`, a push is one comparison and a store (no spilled-or-inline choice), and
//! the lists are bounded by construction (a signature has at most
//! [`crate::MAX_KERNEL_ARGS`] parameters), so a full list is a bug in the caller. The facade
//! converts a launch's arguments for its backend in one too (hidden export).

use std::mem::MaybeUninit;

/// Up to `N` values of `T`, in push order.
pub struct StackVec<T, const N: usize> {
    items: [MaybeUninit<T>; N],
    len: usize,
}

impl<T, const N: usize> StackVec<T, N> {
    /// An empty list.
    #[inline]
    pub fn new() -> Self {
        StackVec {
            items: [const { MaybeUninit::uninit() }; N],
            len: 0,
        }
    }

    /// Appends `value`.
    ///
    /// # Panics
    ///
    /// When the list already holds `N` values: its callers size it for the most a launch
    /// can have.
    #[inline]
    pub fn push(&mut self, value: T) {
        match self.items.get_mut(self.len) {
            Some(slot) => {
                slot.write(value);
                self.len += 1;
            }
            None => full(N),
        }
    }

    /// Appends the values of `iter` until one is an error, which it returns (the values
    /// before it stay). The count is kept in a local while it runs, so that each value is
    /// one comparison and a store.
    ///
    /// # Panics
    ///
    /// As [`StackVec::push`].
    #[inline]
    pub fn try_extend<E>(&mut self, iter: impl IntoIterator<Item = Result<T, E>>) -> Result<(), E> {
        let mut len = self.len;
        let mut result = Ok(());
        for value in iter {
            match value {
                Ok(value) => match self.items.get_mut(len) {
                    Some(slot) => {
                        slot.write(value);
                        len += 1;
                    }
                    None => full(N),
                },
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        self.len = len;
        result
    }

    /// The values pushed, in order.
    #[inline]
    pub fn as_slice(&self) -> &[T] {
        // SAFETY: the first `len` items were written by `push` (which never writes past
        // `N`) and are never moved out or dropped before `self` is.
        unsafe { std::slice::from_raw_parts(self.items.as_ptr().cast::<T>(), self.len) }
    }
}

#[cold]
#[inline(never)]
fn full(n: usize) -> ! {
    panic!("a launch's argument list holds at most {n} entries")
}

impl<T, const N: usize> Default for StackVec<T, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: std::fmt::Debug, const N: usize> std::fmt::Debug for StackVec<T, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

impl<T, const N: usize> std::ops::Deref for StackVec<T, N> {
    type Target = [T];
    #[inline]
    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

impl<'a, T, const N: usize> IntoIterator for &'a StackVec<T, N> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    #[inline]
    fn into_iter(self) -> Self::IntoIter {
        self.as_slice().iter()
    }
}

impl<T, const N: usize> Drop for StackVec<T, N> {
    fn drop(&mut self) {
        // SAFETY: the first `len` items are initialised (see `as_slice`) and dropped once,
        // here.
        unsafe {
            std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(
                self.items.as_mut_ptr().cast::<T>(),
                self.len,
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::StackVec;
    use std::sync::Arc;

    #[test]
    fn pushes_keep_their_order_and_drop_once() {
        let shared = Arc::new(());
        {
            let mut v = StackVec::<Arc<()>, 3>::new();
            v.push(shared.clone());
            v.push(shared.clone());
            assert_eq!(v.len(), 2);
            assert_eq!(Arc::strong_count(&shared), 3);
        }
        assert_eq!(Arc::strong_count(&shared), 1);
        let mut v = StackVec::<u32, 4>::new();
        for i in 0..4 {
            v.push(i);
        }
        assert_eq!(&*v, &[0, 1, 2, 3]);
        let mut v = StackVec::<u32, 4>::new();
        v.push(7);
        assert_eq!(v.try_extend([Ok(8), Ok(9), Err("ten"), Ok(11)]), Err("ten"));
        assert_eq!(&*v, &[7, 8, 9]);
        assert_eq!(v.try_extend([Ok::<_, ()>(10)]), Ok(()));
        assert_eq!(&*v, &[7, 8, 9, 10]);
    }

    #[test]
    #[should_panic(expected = "at most 2 entries")]
    fn a_push_past_the_bound_is_a_bug_that_says_so() {
        let mut v = StackVec::<u8, 2>::new();
        for i in 0..3 {
            v.push(i);
        }
    }
}
