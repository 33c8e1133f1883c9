//! The device memory pool: a stream-ordered caching allocator over the backend's
//! allocations, and its counters ([`MemoryStats`]).
//!
//! Every array of a context takes its memory from the context's pool. A request of `n`
//! bytes is rounded up to a *block size* (a multiple of 512 bytes; above 4 KiB, of an
//! eighth of the next power of two, so a block exceeds its request by less than a quarter
//! of the request, or by less than 512 bytes) and served from a cached block of exactly
//! that size when there is one (a *hit*), or else from a new backend allocation of the
//! block size (a *miss*, which reserves memory). A dropped array's block goes back to the cache, not to the
//! device, together with the record of the streams that used it: the block's next owner
//! inherits that record, so its first use on any stream waits for the old owner's last
//! uses on the others (the same ordering the library gives arrays shared between streams),
//! and on the stream that used it last it waits for nothing at all. No host sync is ever
//! needed to reuse memory. [`Context::trim`](crate::Context::trim) hands cached blocks back
//! to the device; a backend allocation that runs out of memory trims and tries again.
//!
//! The pool keeps no raw stream alive: the record holds weak references to the streams and
//! the events recorded after their uses, so a cached block does not keep its context open.
//!
//! `GPU_POOL=off` turns the caching off for the process ([`caching`]): every array then
//! gets a backend allocation of exactly its size, freed (after the work queued on it) when
//! it is dropped. Rounding up hides an overrun past an array's end inside its block, and
//! reuse hides a use after free behind the next owner's data: a memory checker (the CUDA
//! emulator, compute-sanitizer) sees both only without the pool. The counters keep their
//! meaning: every allocation is a miss, and a drop releases its bytes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use crate::backend::Backend;
use crate::context::Shared;
use crate::error::Result;
use crate::stream::{Stream, StreamInner};
use crate::track::Use;

/// Counters of a context's device memory pool ([`Context::memory_stats`]).
///
/// Byte counts are in blocks (requests rounded up to the pool's block sizes), as the
/// device sees them. At any moment `bytes_in_use <= bytes_reserved`, `pool_hits +
/// pool_misses == allocations`, and `allocations - frees` is the number of live non-empty
/// arrays of the context (empty arrays and arrays wrapped from native memory take nothing
/// from the pool and are not counted).
///
/// [`Context::memory_stats`]: crate::Context::memory_stats
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemoryStats {
    /// Bytes held by live arrays.
    pub bytes_in_use: u64,
    /// The largest `bytes_in_use` so far.
    pub peak_bytes_in_use: u64,
    /// Bytes allocated from the device: in use plus cached for reuse.
    pub bytes_reserved: u64,
    /// The largest `bytes_reserved` so far.
    pub peak_bytes_reserved: u64,
    /// Arrays allocated (non-empty ones).
    pub allocations: u64,
    /// Arrays dropped (their memory went back to the pool, or to the device).
    pub frees: u64,
    /// Allocations served from a cached block, with no call to the device.
    pub pool_hits: u64,
    /// Allocations that reserved new memory from the device.
    pub pool_misses: u64,
    /// Bytes handed back to the device by trims (explicit, or after running out).
    pub bytes_released: u64,
}

impl MemoryStats {
    /// Bytes reserved but not in use: cached for reuse.
    pub fn bytes_cached(&self) -> u64 {
        self.bytes_reserved - self.bytes_in_use
    }

    /// The block an array of `bytes > 0` bytes takes from the pool: `bytes` rounded up to
    /// a multiple of 512, or, above 4 KiB, of an eighth of the next power of two (less than
    /// a quarter more than asked). A dropped array's block serves any later request of the
    /// same block size. `None` where the rounding overflows (such a request is allocated
    /// at its exact size, outside the pool).
    pub fn block_size(bytes: usize) -> Option<usize> {
        block_size(bytes)
    }
}

/// The environment variable that turns the pool's caching off (`off`).
pub const POOL_VAR: &str = "GPU_POOL";

/// Whether device memory pools cache dropped arrays' blocks (the default), or hand every
/// array an allocation of its own (`GPU_POOL=off`; see the module docs). Read once per
/// process.
pub fn caching() -> bool {
    static CACHING: OnceLock<bool> = OnceLock::new();
    *CACHING.get_or_init(|| !std::env::var(POOL_VAR).is_ok_and(|v| v.trim() == "off"))
}

/// The block size a request of `bytes > 0` is served from: `bytes` rounded up to a multiple
/// of 512, or, above 4 KiB, of an eighth of the next power of two. `None` on overflow.
pub(crate) fn block_size(bytes: usize) -> Option<usize> {
    const SMALL: usize = 512;
    let granule = bytes.checked_next_power_of_two()?.max(8 * SMALL) / 8;
    bytes.checked_next_multiple_of(granule)
}

/// A use of a block by its previous owner, kept while the block is cached.
pub(crate) struct Prior<B: Backend> {
    pub(crate) stream_id: u64,
    stream: Weak<StreamInner<B>>,
    event: Option<Arc<B::Event>>,
    /// The use's position on its stream.
    position: u64,
}

impl<B: Backend> Clone for Prior<B> {
    fn clone(&self) -> Self {
        Prior {
            stream_id: self.stream_id,
            stream: self.stream.clone(),
            event: self.event.clone(),
            position: self.position,
        }
    }
}

impl<B: Backend> Prior<B> {
    pub(crate) fn of(u: &Use<B>) -> Self {
        Prior {
            stream_id: u.stream.id,
            stream: Arc::downgrade(&u.stream),
            event: u.event.clone(),
            position: u.position,
        }
    }

    /// The use, while its stream lives.
    fn live(&self) -> Option<Use<B>> {
        self.stream.upgrade().map(|stream| Use {
            stream,
            event: self.event.clone(),
            position: self.position,
        })
    }

    /// Makes `stream` wait for this use. A use without an event whose stream is gone was
    /// recorded either while its stream was the context's only one (which is the default
    /// stream, alive as long as anything can allocate) or after its work had been waited
    /// for: there is nothing left to wait for.
    /// `owner` is the context whose memory the use was of.
    pub(crate) fn order_before(&self, stream: &Stream<B>, owner: &Shared<B>) -> Result<()> {
        match (self.live(), &self.event) {
            (Some(u), _) => stream.wait_for_use(&u),
            (None, Some(e)) => stream.wait_event(owner, e),
            (None, None) => Ok(()),
        }
    }

    /// Whether `stream` may go ahead without waiting for this use (see
    /// [`Use::finished_for`]); a use without an event whose stream is gone has finished.
    pub(crate) fn finished_for(&self, stream: &Stream<B>) -> Result<bool> {
        match (self.live(), &self.event) {
            (Some(u), _) => u.finished_for(stream),
            (None, Some(e)) => stream.backend().event_query(e),
            (None, None) => Ok(true),
        }
    }

    /// Blocks until the use has finished where its stream is gone (for a trim: the backend
    /// is told only the live streams); returns the live stream otherwise.
    fn settle(&self, backend: &B) -> Result<Option<Arc<StreamInner<B>>>> {
        match (self.live(), &self.event) {
            (Some(u), _) => Ok(Some(u.stream)),
            (None, Some(e)) => backend.event_sync(e).map(|()| None),
            (None, None) => Ok(None),
        }
    }
}

/// A cached block: its memory and the uses it must be ordered after.
pub(crate) struct Cached<B: Backend> {
    pub(crate) buf: B::Buffer,
    pub(crate) prior: Vec<Prior<B>>,
}

struct State<B: Backend> {
    free: HashMap<usize, Vec<Cached<B>>>,
    stats: MemoryStats,
}

/// A context's pool of device memory.
pub(crate) struct DevicePool<B: Backend> {
    state: Mutex<State<B>>,
}

impl<B: Backend> DevicePool<B> {
    pub(crate) fn new() -> Self {
        DevicePool {
            state: Mutex::new(State {
                free: HashMap::new(),
                stats: MemoryStats::default(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<B>> {
        // The state is updated by plain assignments: a panic elsewhere leaves it consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether no block is cached.
    pub(crate) fn is_empty(&self) -> bool {
        self.lock().free.values().all(Vec::is_empty)
    }

    pub(crate) fn stats(&self) -> MemoryStats {
        self.lock().stats
    }

    /// A cached block of `block` bytes, counted as a hit, if there is one.
    pub(crate) fn take(&self, block: usize) -> Option<Cached<B>> {
        let mut st = self.lock();
        let cached = st.free.get_mut(&block)?.pop()?;
        let s = &mut st.stats;
        s.allocations += 1;
        s.pool_hits += 1;
        s.bytes_in_use += block as u64;
        s.peak_bytes_in_use = s.peak_bytes_in_use.max(s.bytes_in_use);
        Some(cached)
    }

    /// Counts a new backend allocation of `block` bytes (a miss).
    pub(crate) fn reserved(&self, block: usize) {
        let mut st = self.lock();
        let s = &mut st.stats;
        s.allocations += 1;
        s.pool_misses += 1;
        s.bytes_in_use += block as u64;
        s.bytes_reserved += block as u64;
        s.peak_bytes_in_use = s.peak_bytes_in_use.max(s.bytes_in_use);
        s.peak_bytes_reserved = s.peak_bytes_reserved.max(s.bytes_reserved);
    }

    /// Counts an array's own allocation of `bytes` as freed (the pool's caching is off).
    pub(crate) fn released(&self, bytes: usize) {
        let mut st = self.lock();
        let s = &mut st.stats;
        s.frees += 1;
        s.bytes_in_use -= bytes as u64;
        s.bytes_reserved -= bytes as u64;
        s.bytes_released += bytes as u64;
    }

    /// Takes back a dropped array's block for reuse.
    pub(crate) fn put(&self, block: usize, cached: Cached<B>) {
        let mut st = self.lock();
        st.stats.frees += 1;
        st.stats.bytes_in_use -= block as u64;
        st.free.entry(block).or_default().push(cached);
    }

    /// Hands every cached block back to the device, each after the work that used it.
    /// Returns the bytes released; on errors, the first (every block is still released).
    pub(crate) fn trim(&self, backend: &B) -> Result<u64> {
        let (blocks, released) = {
            let mut st = self.lock();
            let blocks: Vec<(usize, Cached<B>)> = st
                .free
                .drain()
                .flat_map(|(size, v)| v.into_iter().map(move |c| (size, c)))
                .collect();
            let bytes: u64 = blocks.iter().map(|(size, _)| *size as u64).sum();
            st.stats.bytes_reserved -= bytes;
            st.stats.bytes_released += bytes;
            (blocks, bytes)
        };
        let mut first: Result<()> = Ok(());
        for (_, c) in blocks {
            let r = free_cached(backend, c);
            if first.is_ok() {
                first = r;
            }
        }
        first.map(|()| released)
    }
}

/// Frees a cached block after its previous owner's uses.
fn free_cached<B: Backend>(backend: &B, c: Cached<B>) -> Result<()> {
    let mut live: Vec<Arc<StreamInner<B>>> = Vec::with_capacity(c.prior.len());
    let mut first: Result<()> = Ok(());
    for p in &c.prior {
        match p.settle(backend) {
            Ok(Some(s)) => {
                if !live.iter().any(|l| l.id == s.id) {
                    live.push(s);
                }
            }
            Ok(None) => {}
            // The use's work failed: it will never touch the block again.
            Err(e) => {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
    }
    let raws: Vec<&B::Stream> = live.iter().map(|s| s.raw()).collect();
    // SAFETY: `raws` holds every live stream that used the block (its previous owner's
    // record, inherited by each later owner until a write ordered after it); the uses of
    // streams that are gone have been waited for above.
    let freed = unsafe { backend.free(c.buf, &raws) };
    first.and(freed)
}

#[cfg(test)]
mod tests {
    use super::block_size;

    #[test]
    fn block_sizes_cover_the_request_with_bounded_waste() {
        for bytes in (1..70_000).chain([1 << 20, (1 << 20) + 1, 3 << 30, usize::MAX / 4]) {
            let b = block_size(bytes).unwrap();
            assert!(b >= bytes, "{bytes} -> {b}");
            assert_eq!(b % 512, 0, "{bytes} -> {b}");
            assert!(b - bytes < 512 || (b - bytes) * 4 < bytes, "{bytes} -> {b}");
            // A block's own size is its block size: a cached block serves its requests.
            assert_eq!(block_size(b), Some(b), "{bytes} -> {b}");
        }
        assert_eq!(block_size(usize::MAX), None);
    }
}
