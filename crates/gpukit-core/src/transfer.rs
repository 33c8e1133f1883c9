//! Copies between host and device and between device ranges, on a stream.
//!
//! The asynchronous copies are safe by ownership: the host memory moves into the returned
//! [`Pending`] and comes back from [`Pending::wait`] once the stream has passed the copy.
//! The blocking forms borrow host memory and return once the copy is done.

use crate::array::{DeviceRead, DeviceWrite};
use crate::backend::Backend;
use crate::element::Element;
use crate::error::{same_len, Rejected, Result};
use crate::host::{HostSlice, Pending};
use crate::stream::Stream;
use crate::track::{Access, SliceRef};

impl<B: Backend> Stream<B> {
    /// Starts copying `src` (host memory, moved in) into `dst`; lengths must match, and
    /// `dst` (and `src`, when it is a [`crate::HostBuffer`]) must belong to this stream's
    /// context. A rejected call gives `src` back inside [`Rejected`].
    ///
    /// ```
    /// # let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None))?;
    /// use gpukit::HostUse;
    /// let s = ctx.create_stream()?;
    /// let mut host = ctx.alloc_host::<f32>(4, HostUse::Upload)?;
    /// host.copy_from_slice(&[1.0, 2.0, 3.0, 4.0]);
    /// let mut dev = ctx.alloc::<f32>(4)?;
    /// let pending = s.upload(host, &mut dev)?;   // `host` cannot be touched now ...
    /// let host = pending.wait()?;                 // ... until the copy is done
    /// assert_eq!(dev.download()?, &host[..]);
    /// # Ok::<(), gpukit::Error>(())
    /// ```
    pub fn upload<T: Element, H: HostSlice<T>>(
        &self,
        mut src: H,
        dst: &mut impl DeviceWrite<T, B>,
    ) -> Result<Pending<H, B>, Rejected<H>> {
        let len = src.host_len();
        if let Err(e) = same_len("Stream::upload", "dst", len, dst.len())
            .and_then(|()| self.same_host_context("Stream::upload", "src", &src))
        {
            return Err(Rejected::new(e, src));
        }
        let d = dst.slice_ref();
        let ptr = src.host_ptr().cast::<u8>().cast_const();
        let accesses = [("dst", &d, Access::Write)];
        let queued = self.enqueue_marked("Stream::upload", &accesses, true, || {
            let Some(at) = d.at() else { return Ok(()) };
            // SAFETY: `ptr` is `src`'s memory (HostSlice contract: stable and exclusive);
            // `src` moves into the returned Pending, which keeps it until the event
            // recorded right after this copy has completed.
            unsafe { self.backend().copy_h2d(self.raw(), ptr, at, d.bytes()) }
        });
        match queued {
            Ok(((), event)) => Ok(Pending::new(src, event, self.clone())),
            Err(e) => Err(Rejected::new(e, src)),
        }
    }

    /// Starts copying `src` into `dst` (host memory, moved in); lengths must match, and
    /// `src` (and `dst`, when it is a [`crate::HostBuffer`]) must belong to this stream's
    /// context. A rejected call gives `dst` back inside [`Rejected`]; so does one while an
    /// open capture (on any stream) has written `src`'s array, as for every host read:
    /// [`crate::Error::CaptureViolation`] (see [`crate::Graph`]).
    pub fn download<T: Element, H: HostSlice<T>>(
        &self,
        src: &impl DeviceRead<T, B>,
        mut dst: H,
    ) -> Result<Pending<H, B>, Rejected<H>> {
        let s = src.slice_ref();
        if let Err(e) = same_len("Stream::download", "dst", src.len(), dst.host_len())
            .and_then(|()| self.same_host_context("Stream::download", "dst", &dst))
            .and_then(|()| s.host_readable("Stream::download"))
        {
            return Err(Rejected::new(e, dst));
        }
        let ptr = dst.host_ptr().cast::<u8>();
        let accesses = [("src", &s, Access::Read)];
        let queued = self.enqueue_marked("Stream::download", &accesses, true, || {
            let Some(at) = s.at() else { return Ok(()) };
            // SAFETY: `ptr` is `dst`'s memory (HostSlice contract: stable and exclusive);
            // `dst` moves into the returned Pending, which keeps it until the event
            // recorded right after this copy has completed.
            unsafe { self.backend().copy_d2h(self.raw(), at, ptr, s.bytes()) }
        });
        match queued {
            Ok(((), event)) => Ok(Pending::new(dst, event, self.clone())),
            Err(e) => Err(Rejected::new(e, dst)),
        }
    }

    /// Rejects host memory that belongs to another context (a [`crate::HostBuffer`] is
    /// pinned for, and pooled by, the context that made it).
    fn same_host_context<T: Element>(
        &self,
        op: &'static str,
        arg: &'static str,
        host: &impl HostSlice<T>,
    ) -> Result<()> {
        match host.host_context() {
            Some(id) => self.shared_arc().same_context(op, arg, id),
            None => Ok(()),
        }
    }

    /// Copies between device arrays or views of the same length, asynchronously.
    pub fn copy<T: Element>(
        &self,
        src: &impl DeviceRead<T, B>,
        dst: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        same_len("copy", "dst", src.len(), dst.len())?;
        let (s, d) = (src.slice_ref(), dst.slice_ref());
        self.enqueue(
            "copy",
            &[("src", &s, Access::Read), ("dst", &d, Access::Write)],
            || match (s.at(), d.at()) {
                (Some(a), Some(b)) => {
                    // SAFETY: both ranges come from checked views of `T` arrays of this
                    // context with the same byte length; `enqueue` has ordered them after
                    // conflicting uses and records this one, so neither buffer is freed
                    // before the copy has run; `dst` is a `&mut` borrow, so they do not overlap.
                    unsafe { self.backend().copy_d2d(self.raw(), a, b, s.bytes()) }
                }
                _ => Ok(()),
            },
        )
    }

    /// Copies `src` into `dst` and returns once the copy is done.
    pub fn upload_blocking<T: Element>(
        &self,
        src: &[T],
        dst: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        same_len("upload", "src", dst.len(), src.len())?;
        self.not_capturing("upload", BLOCKING_IN_CAPTURE)?;
        let d = dst.slice_ref();
        let mut queued = false;
        let r = self.enqueue("upload", &[("dst", &d, Access::Write)], || {
            let Some(at) = d.at() else { return Ok(()) };
            // SAFETY: `src` is borrowed for this whole call, and the stream is synced before
            // returning (`finish_blocking`): the backend contract says `stream_sync` returns
            // only once the copy has run or can never run.
            unsafe {
                self.backend()
                    .copy_h2d(self.raw(), src.as_ptr().cast(), at, d.bytes())?
            };
            queued = true;
            Ok(())
        });
        self.finish_blocking(queued, r)
    }

    /// Ends a blocking transfer: waits for the copy, if it was queued, and for the event
    /// that marks its use (queued after it by [`Stream::enqueue`]), whatever else failed.
    /// Waiting only inside the enqueue would leave that event queued behind the wait, so a
    /// capture right after the call would find the transfer's use unfinished.
    fn finish_blocking(&self, queued: bool, r: Result<()>) -> Result<()> {
        let synced = if queued {
            self.backend().stream_sync(self.raw())
        } else {
            Ok(())
        };
        r.and(synced)
    }

    /// The first `n` elements of `src` (all of them when it has fewer), downloaded: for
    /// looking at an array while debugging, since its `Debug` shows no values. Like any
    /// download it waits for the work queued on `src` (on any stream) and returns that
    /// work's error, if any. Refused during a capture as [`Stream::download_blocking`] is.
    ///
    /// ```
    /// # let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None))?;
    /// let a = ctx.alloc_upload(&[1.0f32, 2.0, 3.0, 4.0, 5.0])?;
    /// assert_eq!(ctx.peek(&a, 2)?, [1.0, 2.0]);
    /// assert_eq!(ctx.peek(&a.slice(3..)?, 8)?, [4.0, 5.0]); // clamped to the length
    /// println!("{a:?} starts {:?}", ctx.peek(&a, 3)?);
    /// # Ok::<(), gpukit::Error>(())
    /// ```
    pub fn peek<T: Element>(&self, src: &impl DeviceRead<T, B>, n: usize) -> Result<Vec<T>> {
        let n = n.min(src.len());
        let mut out = vec![T::default(); n];
        let s = src
            .slice_ref()
            .prefix(std::mem::size_of_val(out.as_slice()));
        self.download_slice("peek", &s, &mut out)?;
        Ok(out)
    }

    /// Copies `src` into `dst` and returns once the copy is done.
    /// [`crate::Error::CaptureViolation`] during a capture on this stream, or while an open
    /// capture has written `src`'s array (see [`crate::Graph`]).
    pub fn download_blocking<T: Element>(
        &self,
        src: &impl DeviceRead<T, B>,
        dst: &mut [T],
    ) -> Result<()> {
        same_len("download", "dst", src.len(), dst.len())?;
        self.download_slice("download", &src.slice_ref(), dst)
    }

    /// Copies the range `s`, exactly as long as `dst`, into `dst`; returns once it is done.
    fn download_slice<T: Element>(
        &self,
        op: &'static str,
        s: &SliceRef<'_, B>,
        dst: &mut [T],
    ) -> Result<()> {
        debug_assert_eq!(s.bytes(), std::mem::size_of_val(dst));
        self.not_capturing(op, BLOCKING_IN_CAPTURE)?;
        s.host_readable(op)?;
        let mut queued = false;
        let r = self.enqueue(op, &[("src", s, Access::Read)], || {
            let Some(at) = s.at() else { return Ok(()) };
            // SAFETY: `dst` is borrowed mutably for this whole call and is as long as the
            // range (both callers size it so), and the stream is synced before returning
            // (see `upload_blocking`).
            unsafe {
                self.backend()
                    .copy_d2h(self.raw(), at, dst.as_mut_ptr().cast(), s.bytes())?
            };
            queued = true;
            Ok(())
        });
        self.finish_blocking(queued, r)
    }
}

/// Why a blocking transfer cannot happen during a capture.
const BLOCKING_IN_CAPTURE: &str = "a blocking copy waits for work that is being recorded, not \
                                   run (and a graph would replay it into host memory the \
                                   caller has moved on from)";
