//! Copies between contexts: another device, or another context on the same one.

use std::sync::Arc;

use crate::array::{DeviceRead, DeviceWrite};
use crate::backend::{Backend, BufAt};
use crate::context::Shared;
use crate::element::Element;
use crate::error::{same_len, Error, Result};
use crate::stream::Stream;
use crate::track::Access;

impl<B: Backend> Stream<B> {
    /// Copies `src`, an array or view of another context (another device, or another
    /// context on the same device), into `dst`, one of this stream's context, queued on
    /// this stream and ordered like every other copy: it runs after the work queued on
    /// `src` that wrote it (on any stream of its context) and on `dst` (on any stream of
    /// this one), and later writes of `src` in its own context wait for it, through events
    /// of both contexts.
    ///
    /// How the bytes travel: on CUDA, `cuMemcpyPeerAsync` (over NVLink or PCIe where the
    /// devices can access each other's memory, with peer access enabled on first use;
    /// through host memory by the driver where they cannot); between logical CPU devices,
    /// a `memcpy` on this stream. Elsewhere (two Vulkan adapters, or two contexts of
    /// different backends) the copy goes through host memory and returns once it is done.
    /// An array keeps its context alive, so an array whose [`crate::Context`] handle was
    /// dropped can still be copied from.
    ///
    /// Errors: lengths that differ are [`Error::LengthMismatch`]; `src` of this stream's
    /// own context is [`Error::InvalidArgument`] (use [`Stream::copy`]); `dst` of another
    /// context is [`Error::ContextMismatch`]; a capture on this stream, or an open capture
    /// in `src`'s context that writes it, is [`Error::CaptureViolation`]. The element
    /// types are the same by the signature.
    ///
    /// ```
    /// use gpukit::{Context, DeviceSpec};
    ///
    /// let gpu0 = Context::new(DeviceSpec::Cpu(Some(0)))?;
    /// let gpu1 = Context::new(DeviceSpec::Cpu(Some(1)))?;
    /// let a = gpu0.alloc_upload(&[1.0f32, 2.0, 3.0])?;
    /// let mut b = gpu1.alloc_zeros::<f32>(3)?;
    /// gpu1.copy_peer(&a, &mut b)?;                // on gpu1's default stream
    /// assert_eq!(b.download()?, [1.0, 2.0, 3.0]);
    /// # Ok::<(), gpukit::Error>(())
    /// ```
    pub fn copy_peer<T: Element>(
        &self,
        src: &impl DeviceRead<T, B>,
        dst: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        const OP: &str = "Stream::copy_peer";
        same_len(OP, "dst", src.len(), dst.len())?;
        let (s, d) = (src.slice_ref(), dst.slice_ref());
        if s.context_id() == self.context_id() {
            return Err(Error::InvalidArgument {
                op: OP,
                arg: "src",
                message: format!(
                    "src is memory of this stream's own context ({}): `Stream::copy` copies \
                     within a context",
                    self.context_id()
                ),
            });
        }
        let home = s.home();
        let owner = home.shared_arc();
        owner.check()?;
        self.not_capturing(
            OP,
            "a graph cannot wait for another context's work (copy before the capture)",
        )?;
        s.host_readable(OP)?;
        let accesses = [("src", &s, Access::Read), ("dst", &d, Access::Write)];
        self.enqueue_with(OP, &accesses, false, true, || {
            let (Some(from), Some(to)) = (s.at(), d.at()) else {
                return Ok(());
            };
            // SAFETY: `from` is a checked range of a `T` array of `owner`'s context and `to`
            // one of this context's, of the same byte length (different contexts: no
            // overlap); `enqueue_with` has made this stream wait for `src`'s writers through
            // `owner`'s events and for `dst`'s uses, holds both records until the copy's
            // uses are recorded (a read by `src`'s context's lane, which waits for this
            // stream), so neither buffer is freed or written before the copy has run.
            let direct = unsafe {
                self.backend()
                    .copy_peer(self.raw(), &owner.backend, from, to, s.bytes())
            };
            match direct {
                Err(Error::Unsupported { .. }) => {
                    self.copy_staged(owner, home, from, to, s.bytes())
                }
                r => r,
            }
        })
        .map(|_| ())
    }

    /// [`Stream::copy_peer`] through host memory, where the backends have no direct path:
    /// waits until this stream has passed the waits for the source's writers, reads the
    /// source on its context's lane, writes `dst` on this stream, and returns once done.
    fn copy_staged(
        &self,
        owner: &Arc<Shared<B>>,
        home: &Stream<B>,
        from: BufAt<'_, B>,
        to: BufAt<'_, B>,
        bytes: usize,
    ) -> Result<()> {
        let backend = self.backend();
        backend.stream_sync(self.raw())?;
        let lane = home.lane()?;
        let mut staging = vec![0u8; bytes];
        // SAFETY: `from` is a live range of `owner`'s memory whose writers have finished
        // (this stream waited for them and has passed the waits), and no later writer can
        // be queued while the caller holds its record; `staging` is `bytes` long and
        // outlives the copy (the lane is synced before it is touched again).
        unsafe {
            owner
                .backend
                .copy_d2h(lane.raw(), from, staging.as_mut_ptr(), bytes)?
        };
        owner.backend.stream_sync(lane.raw())?;
        // SAFETY: `to` is a live range of this context ordered after its other uses;
        // `staging` stays alive and unmodified until the stream is synced below.
        unsafe { backend.copy_h2d(self.raw(), staging.as_ptr(), to, bytes)? };
        backend.stream_sync(self.raw())
    }
}
