//! Streams and events on wgpu's one queue.
//!
//! A stream records its work into a command encoder of its own and submits it when
//! something needs it on the device (an event another stream waits for, a sync, a query):
//! its queue position is a count of the items it has recorded (`seq`). An event is a
//! position; it has completed when the submission holding it has completed and the host
//! half of every download before it (the copy out of the mapped staging buffer) has run.
//! Those host halves run, in order, on whichever thread syncs or queries the stream.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use gpukit_core::{Error, Result};

use crate::device::NAME;
use crate::Shared;

/// A host pointer that may cross threads (its use is covered by the copy's contract).
#[derive(Clone, Copy)]
pub(crate) struct SendPtr(pub(crate) *mut u8);
// SAFETY: the pointer is only dereferenced by the host half of a download, whose caller
// (Backend::copy_d2h) keeps the memory valid and unaccessed until the stream passes it.
unsafe impl Send for SendPtr {}
// SAFETY: as above; shared references never dereference it.
unsafe impl Sync for SendPtr {}

/// What to do on the host once a staging buffer is mapped.
enum HostAction {
    /// Copy `bytes` starting `skip` bytes into the mapped range to `dst`.
    Copy {
        dst: SendPtr,
        skip: usize,
        bytes: usize,
    },
    /// Store the first 8 bytes (a resolved timestamp) in `slot`.
    Timestamp { slot: Arc<OnceLock<u64>> },
}

const MAP_PENDING: u8 = 0;
const MAP_OK: u8 = 1;
const MAP_FAILED: u8 = 2;

/// The host half of a download or timestamp.
struct HostTask {
    /// The stream position of the GPU half.
    seq: u64,
    staging: wgpu::Buffer,
    /// The bytes of `staging` the GPU half fills (the part mapped).
    len: u64,
    /// Whether `staging` goes back to the download pool afterwards.
    pooled: bool,
    action: HostAction,
    /// Set by the map callback.
    mapped: Arc<AtomicU8>,
    /// Whether `map_async` was called (after the submission that fills the buffer).
    requested: bool,
}

/// One submission of a stream's recorded work.
struct Sub {
    /// The stream position it ends at.
    end: u64,
    index: wgpu::SubmissionIndex,
    done: Arc<AtomicBool>,
}

struct State {
    encoder: Option<wgpu::CommandEncoder>,
    /// Items recorded so far.
    seq: u64,
    /// Items covered by submissions.
    submitted: u64,
    subs: VecDeque<Sub>,
    host: VecDeque<HostTask>,
    /// Upload staging buffers recorded since the last submission: mapped for writing again
    /// (and returned to the pool) once that submission has used them.
    uploads: Vec<wgpu::Buffer>,
    /// The first error raised by this stream's work, not yet reported.
    error: Option<Error>,
}

/// A stream of the wgpu backend: an encoder of its own on the device's one queue.
pub struct WgpuStream {
    pub(crate) inner: Arc<StreamInner>,
}

impl std::fmt::Debug for WgpuStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WgpuStream")
            .field("id", &self.inner.id)
            .finish_non_exhaustive()
    }
}

pub(crate) struct StreamInner {
    pub(crate) id: u64,
    state: Mutex<State>,
    pub(crate) shared: Arc<Shared>,
}

/// A position in a stream, with the GPU's time there for timing events.
pub struct WgpuEvent {
    stream: Arc<StreamInner>,
    seq: u64,
    time: Option<Arc<OnceLock<u64>>>,
}

impl std::fmt::Debug for WgpuEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WgpuEvent")
            .field("stream", &self.stream.id)
            .field("seq", &self.seq)
            .field("timing", &self.time.is_some())
            .finish()
    }
}

fn backend_err(call: &'static str, message: impl std::fmt::Display) -> Error {
    Error::Backend {
        backend: NAME,
        call,
        message: message.to_string(),
    }
}

impl StreamInner {
    pub(crate) fn new(shared: Arc<Shared>) -> Arc<StreamInner> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Arc::new(StreamInner {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            state: Mutex::new(State {
                encoder: None,
                seq: 0,
                submitted: 0,
                subs: VecDeque::new(),
                host: VecDeque::new(),
                uploads: Vec::new(),
                error: None,
            }),
            shared,
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves the state consistent (plain fields).
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records one item of work into the stream's encoder.
    pub(crate) fn record(&self, f: impl FnOnce(&mut wgpu::CommandEncoder)) -> Result<()> {
        self.shared.check()?;
        let mut st = self.lock();
        let enc = st.encoder.get_or_insert_with(|| {
            self.shared
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("gpukit stream"),
                })
        });
        f(enc);
        st.seq += 1;
        Ok(())
    }

    /// Records a copy into `staging` (by `f`) and its host half, `action`, run once the
    /// copy has completed and the first `len` bytes of `staging` are mapped.
    fn record_with_host(
        &self,
        staging: wgpu::Buffer,
        len: u64,
        pooled: bool,
        action: HostAction,
        f: impl FnOnce(&mut wgpu::CommandEncoder, &wgpu::Buffer),
    ) -> Result<()> {
        self.shared.check()?;
        let mut st = self.lock();
        let enc = st.encoder.get_or_insert_with(|| {
            self.shared
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("gpukit stream"),
                })
        });
        f(enc, &staging);
        st.seq += 1;
        let seq = st.seq;
        st.host.push_back(HostTask {
            seq,
            staging,
            len,
            pooled,
            action,
            mapped: Arc::new(AtomicU8::new(MAP_PENDING)),
            requested: false,
        });
        Ok(())
    }

    /// Records an upload's GPU half: a copy of `n` bytes from `staging` (from the upload
    /// pool, already written and unmapped) to `dst` at `off`. The staging buffer returns to
    /// the pool once the submission that holds the copy has run.
    pub(crate) fn record_upload(
        &self,
        staging: wgpu::Buffer,
        dst: &wgpu::Buffer,
        off: u64,
        n: u64,
    ) -> Result<()> {
        self.shared.check()?;
        let mut st = self.lock();
        let enc = st.encoder.get_or_insert_with(|| {
            self.shared
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("gpukit stream"),
                })
        });
        enc.copy_buffer_to_buffer(&staging, 0, dst, off, n);
        st.seq += 1;
        st.uploads.push(staging);
        Ok(())
    }

    /// Records a download's GPU half (a copy of `src[src_off..src_off + len]` into a
    /// staging buffer of the pool) and its host half (copying `bytes` from `skip` into `dst`).
    pub(crate) fn record_download(
        &self,
        src: &wgpu::Buffer,
        src_off: u64,
        len: u64,
        dst: *mut u8,
        skip: usize,
        bytes: usize,
    ) -> Result<()> {
        let staging = self.shared.staging.take_download(&self.shared, len)?;
        self.record_with_host(
            staging,
            len,
            true,
            HostAction::Copy {
                dst: SendPtr(dst),
                skip,
                bytes,
            },
            |enc, staging| enc.copy_buffer_to_buffer(src, src_off, staging, 0, len),
        )
    }

    /// Submits what the stream has recorded (if anything).
    fn flush(&self, st: &mut State) {
        let Some(enc) = st.encoder.take() else {
            return;
        };
        let shared = &self.shared;
        let scope = shared
            .device
            .push_error_scope(wgpu::ErrorFilter::Validation);
        let index = shared.queue.submit([enc.finish()]);
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        shared
            .queue
            .on_submitted_work_done(move || flag.store(true, Ordering::Release));
        if let Some(e) = crate::device::block_on(scope.pop()) {
            // Work the safe layer validated failed wgpu's validation: a bug of this
            // backend. The stream reports it at its next sync.
            st.error
                .get_or_insert_with(|| backend_err("Queue::submit", e.to_string()));
        }
        st.subs.push_back(Sub {
            end: st.seq,
            index,
            done,
        });
        st.submitted = st.seq;
        let submitted = st.submitted;
        for t in st
            .host
            .iter_mut()
            .filter(|t| !t.requested && t.seq <= submitted)
        {
            let flag = t.mapped.clone();
            t.staging
                .slice(..t.len)
                .map_async(wgpu::MapMode::Read, move |r| {
                    flag.store(
                        if r.is_ok() { MAP_OK } else { MAP_FAILED },
                        Ordering::Release,
                    )
                });
            t.requested = true;
        }
        for buf in std::mem::take(&mut st.uploads) {
            shared.staging.recycle_upload(buf);
        }
    }

    /// Submits the stream's work up to `upto` if it is not yet submitted.
    pub(crate) fn submit_upto(&self, upto: u64) {
        let mut st = self.lock();
        if st.submitted < upto {
            self.flush(&mut st);
        }
    }

    /// The current position.
    pub(crate) fn position(&self) -> u64 {
        self.lock().seq
    }

    /// Whether host halves up to `upto` are still to run.
    pub(crate) fn host_pending_upto(&self, upto: u64) -> bool {
        self.lock().host.front().is_some_and(|t| t.seq <= upto)
    }

    /// Drives the stream to position `upto`: submits, waits for the submission (when
    /// `block`) and runs the host halves up to it. Returns whether everything up to `upto`
    /// has completed.
    pub(crate) fn drive(&self, upto: u64, block: bool) -> Result<bool> {
        let index = {
            let mut st = self.lock();
            if st.submitted < upto {
                self.flush(&mut st);
            }
            st.subs
                .iter()
                .find(|s| s.end >= upto)
                .map(|s| (s.index.clone(), s.done.clone()))
        };
        let device = &self.shared.device;
        let waited = match (&index, block) {
            (Some((index, _)), true) => device.poll(wgpu::PollType::Wait {
                submission_index: Some(index.clone()),
                timeout: None,
            }),
            _ => device.poll(wgpu::PollType::Poll),
        };
        match waited {
            // The submission failed validation (its error is the stream's, recorded at
            // submit): there is nothing to wait for.
            Ok(_) | Err(wgpu::PollError::WrongSubmissionIndex(..)) => {}
            Err(e) => return Err(backend_err("Device::poll", e.to_string())),
        }
        let mut st = self.lock();
        while st.host.front().is_some_and(|t| t.seq <= upto) {
            let state = st.host.front().map(|t| t.mapped.load(Ordering::Acquire));
            match state {
                Some(MAP_OK) => {}
                Some(MAP_FAILED) => {
                    st.host.pop_front();
                    let e = backend_err(
                        "Buffer::map_async",
                        "mapping a download's staging buffer failed",
                    );
                    st.error.get_or_insert(e);
                    continue;
                }
                _ if block => {
                    // The submission is done; its map callbacks run on the next poll.
                    drop(st);
                    if let Err(e @ wgpu::PollError::Timeout) =
                        device.poll(wgpu::PollType::wait_indefinitely())
                    {
                        return Err(backend_err("Device::poll", e.to_string()));
                    }
                    st = self.lock();
                    let now = st.host.front().map(|t| t.mapped.load(Ordering::Acquire));
                    if now == Some(MAP_PENDING) {
                        return Err(backend_err(
                            "Buffer::map_async",
                            "a download's staging buffer was never mapped",
                        ));
                    }
                    continue;
                }
                _ => return Ok(false),
            }
            let Some(t) = st.host.pop_front() else { break };
            if let Err(e) = run_host(&t) {
                st.error.get_or_insert(e);
            } else if t.pooled {
                self.shared.staging.recycle_download(t.staging);
            }
        }
        let done = match &index {
            Some((_, done)) => done.load(Ordering::Acquire) || block,
            None => true,
        };
        st.subs.retain(|s| !s.done.load(Ordering::Acquire));
        Ok(done)
    }

    /// Takes the stream's unreported error.
    pub(crate) fn take_error(&self) -> Result<()> {
        match self.lock().error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Waits for all the stream's work and returns its unreported error.
    pub(crate) fn sync(&self) -> Result<()> {
        let upto = self.position();
        self.drive(upto, true)?;
        self.take_error()
    }

    /// Whether all the stream's work has completed, without blocking.
    pub(crate) fn query(&self) -> Result<bool> {
        let upto = self.position();
        let done = self.drive(upto, false)?;
        self.take_error()?;
        Ok(done)
    }

    /// An event at the current position; with `timing`, a timestamp is written there.
    pub(crate) fn record_event(self: &Arc<Self>, timing: bool) -> Result<WgpuEvent> {
        let time = if timing {
            let shared = &self.shared;
            let qs = shared.device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("gpukit event"),
                ty: wgpu::QueryType::Timestamp,
                count: 1,
            });
            let resolve = shared.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("gpukit event resolve"),
                size: 8,
                usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            });
            let readback = shared.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("gpukit event readback"),
                size: 8,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            let slot = Arc::new(OnceLock::new());
            self.record_with_host(
                readback,
                8,
                false,
                HostAction::Timestamp { slot: slot.clone() },
                |enc, readback| {
                    // An empty pass whose only effect is the timestamp at its start: the
                    // device reaches it after everything recorded before.
                    drop(enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: Some("gpukit timestamp"),
                        timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                            query_set: &qs,
                            beginning_of_pass_write_index: Some(0),
                            end_of_pass_write_index: None,
                        }),
                    }));
                    enc.resolve_query_set(&qs, 0..1, &resolve, 0);
                    enc.copy_buffer_to_buffer(&resolve, 0, readback, 0, 8);
                },
            )?;
            // A timing event marks work someone will time: submit what is recorded so
            // far, so that the device starts it now rather than at the next wait (an
            // interval between two events then measures work, not the host's recording).
            let mut st = self.lock();
            self.flush(&mut st);
            Some(slot)
        } else {
            None
        };
        Ok(WgpuEvent {
            stream: self.clone(),
            seq: self.position(),
            time,
        })
    }
}

/// Runs a host half: copies out of the mapped staging buffer, then unmaps it.
fn run_host(t: &HostTask) -> Result<()> {
    let view = t
        .staging
        .slice(..t.len)
        .get_mapped_range()
        .map_err(|e| backend_err("Buffer::get_mapped_range", e))?;
    match &t.action {
        HostAction::Copy { dst, skip, bytes } => {
            let src = view
                .get(*skip..*skip + *bytes)
                .ok_or_else(|| backend_err("download", "staging buffer shorter than the copy"))?;
            // SAFETY: Backend::copy_d2h's caller keeps `dst..dst + bytes` writable and
            // otherwise unaccessed until the stream passes the copy, which is now.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst.0, *bytes) };
        }
        HostAction::Timestamp { slot } => {
            let mut b = [0u8; 8];
            b.copy_from_slice(view.get(..8).unwrap_or(&[0; 8]));
            let _ = slot.set(u64::from_le_bytes(b));
        }
    }
    drop(view);
    t.staging.unmap();
    Ok(())
}

impl WgpuEvent {
    /// The same position, for the waiter thread ([`crate::Shared::notify`]).
    pub(crate) fn same(&self) -> WgpuEvent {
        WgpuEvent {
            stream: self.stream.clone(),
            seq: self.seq,
            time: self.time.clone(),
        }
    }

    pub(crate) fn sync(&self) -> Result<()> {
        self.stream.drive(self.seq, true).map(|_| ())
    }

    pub(crate) fn query(&self) -> Result<bool> {
        self.stream.drive(self.seq, false)
    }

    /// Makes `stream`'s later work run after this event: the event's work is submitted
    /// (the queue runs submissions in order); host halves of downloads before it are
    /// completed first, since later uploads read host memory when they are recorded.
    pub(crate) fn order_before(&self, stream: &StreamInner) -> Result<()> {
        if self.stream.id == stream.id {
            return Ok(());
        }
        self.stream.submit_upto(self.seq);
        if self.stream.host_pending_upto(self.seq) {
            self.sync()?;
        }
        Ok(())
    }

    /// The GPU's timestamp at the event, in ticks.
    pub(crate) fn ticks(&self) -> Result<u64> {
        let Some(t) = &self.time else {
            return Err(Error::Unsupported {
                backend: NAME,
                what: "elapsed time of an event recorded without timing".into(),
            });
        };
        self.sync()?;
        t.get()
            .copied()
            .ok_or_else(|| backend_err("event_elapsed_ms", "the timestamp was never read back"))
    }

    pub(crate) fn same_device(&self, other: &WgpuEvent) -> bool {
        Arc::ptr_eq(&self.stream.shared, &other.stream.shared)
    }
}
