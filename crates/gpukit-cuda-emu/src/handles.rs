//! Handles: the opaque pointers the C API hands out (`CUstream`, `CUevent`, ...), as table
//! keys rather than addresses of objects.
//!
//! A handle is a number with the object kind in its high bits and a serial number below, so
//! that a destroyed object's handle, a handle of the wrong kind (an event passed as a stream)
//! or a made-up pointer is simply not found: `CUDA_ERROR_INVALID_HANDLE`, never a read of
//! freed memory. Serial numbers are never reused.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The kinds of object, one tag each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
pub enum Tag {
    /// `CUcontext`.
    Context = 1,
    /// `CUstream`.
    Stream = 2,
    /// `CUevent`.
    Event = 3,
    /// `CUmodule`.
    Module = 4,
    /// `CUfunction`.
    Function = 5,
    /// `CUgraph`.
    Graph = 6,
    /// `CUgraphExec`.
    GraphExec = 7,
    /// `nvrtcProgram`.
    Program = 8,
    /// `cublasHandle_t`.
    Blas = 9,
    /// `ncclComm_t`.
    Comm = 10,
}

const TAG_SHIFT: u32 = 44;

/// A table of live objects of one kind.
#[derive(Debug)]
pub struct Table<T> {
    tag: Tag,
    next: AtomicU64,
    map: Mutex<HashMap<u64, Arc<T>>>,
}

impl<T> Table<T> {
    /// An empty table for objects of kind `tag`.
    pub fn new(tag: Tag) -> Self {
        Table {
            tag,
            next: AtomicU64::new(1),
            map: Mutex::new(HashMap::new()),
        }
    }

    /// A handle for the next object, not yet in the table.
    pub fn reserve(&self) -> u64 {
        ((self.tag as u64) << TAG_SHIFT) | self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// Puts `obj` in the table under `handle` (from [`Table::reserve`]).
    pub fn insert_at(&self, handle: u64, obj: Arc<T>) {
        self.map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(handle, obj);
    }

    /// Puts `obj` in the table and returns its handle.
    pub fn insert(&self, obj: Arc<T>) -> u64 {
        let h = self.reserve();
        self.insert_at(h, obj);
        h
    }

    /// The live object behind `handle`.
    pub fn get(&self, handle: u64) -> Option<Arc<T>> {
        self.map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&handle)
            .cloned()
    }

    /// Takes the object out: its handle is dead from now on.
    pub fn remove(&self, handle: u64) -> Option<Arc<T>> {
        self.map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&handle)
    }

    /// Every live object.
    pub fn all(&self) -> Vec<Arc<T>> {
        self.map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dead_and_foreign_handles_are_not_found() {
        let streams: Table<u32> = Table::new(Tag::Stream);
        let events: Table<u32> = Table::new(Tag::Event);
        let s = streams.insert(Arc::new(1));
        let e = events.insert(Arc::new(2));
        assert_eq!(streams.get(s).as_deref(), Some(&1));
        assert!(streams.get(e).is_none(), "an event is not a stream");
        streams.remove(s);
        assert!(streams.get(s).is_none());
        let s2 = streams.insert(Arc::new(3));
        assert_ne!(s, s2, "serial numbers are never reused");
    }
}
