//! `AnyBackend`: the backend chosen at run time, as one enum that itself implements
//! [`Backend`], so the whole safe layer of gpukit-core serves it unchanged.
//!
//! Adding a backend takes two lines: a `Name => crate::Backend` entry in the `backends!`
//! invocation below (which generates a variant in every enum and the narrowing functions)
//! and one arm in `dispatch!`. No method is written per backend. A backend behind a cargo
//! feature carries its `#[cfg(feature = "...")]` on both lines.

use gpukit_core::{
    Backend, BufAt, DType, DeviceInfo, Error, Gemm, HostUse, KernelArg, KernelDesc, LaunchConfig,
    Location, RawPtr, RawStream, Result, Wake, MAX_LAUNCH_ARGS,
};

/// A backend that is one of the compiled-in backends.
///
/// Objects of one backend never reach another: gpukit-core checks that every argument comes
/// from the calling context. Should one arrive anyway, the call fails with
/// [`Error::Backend`] rather than misbehaving.
pub trait Member: Backend {
    /// This backend inside an [`AnyBackend`] (another context's, for peer copies and waits).
    fn of(x: &AnyBackend) -> Option<&Self>;
    /// This backend's buffer inside an [`AnyBuffer`].
    fn buffer(x: &AnyBuffer) -> Option<&Self::Buffer>;
    /// Moves this backend's buffer out of an [`AnyBuffer`].
    fn into_buffer(x: AnyBuffer) -> Option<Self::Buffer>;
    /// This backend's host memory inside an [`AnyHostMem`].
    fn host(x: &AnyHostMem) -> Option<&Self::HostMem>;
    /// Moves this backend's host memory out of an [`AnyHostMem`].
    fn into_host(x: AnyHostMem) -> Option<Self::HostMem>;
    /// Moves this backend's registration out of an [`AnyRegistration`].
    fn into_registration(x: AnyRegistration) -> Option<Self::Registration>;
    /// This backend's stream inside an [`AnyStream`].
    fn stream(x: &AnyStream) -> Option<&Self::Stream>;
    /// Moves this backend's stream out of an [`AnyStream`].
    fn into_stream(x: AnyStream) -> Option<Self::Stream>;
    /// This backend's event inside an [`AnyEvent`].
    fn event(x: &AnyEvent) -> Option<&Self::Event>;
    /// This backend's event inside an [`AnyEvent`], mutably.
    fn event_mut(x: &mut AnyEvent) -> Option<&mut Self::Event>;
    /// This backend's kernel inside an [`AnyKernel`].
    fn kernel(x: &AnyKernel) -> Option<&Self::Kernel>;
    /// This backend's graph inside an [`AnyGraph`].
    fn graph(x: &AnyGraph) -> Option<&Self::Graph>;
    /// Moves this backend's graph out of an [`AnyGraph`].
    fn into_graph(x: AnyGraph) -> Option<Self::Graph>;
    /// Wraps a graph.
    fn wrap_graph(x: Self::Graph) -> AnyGraph;
    /// Wraps a buffer.
    fn wrap_buffer(x: Self::Buffer) -> AnyBuffer;
    /// Wraps host memory.
    fn wrap_host(x: Self::HostMem) -> AnyHostMem;
    /// Wraps a registration.
    fn wrap_registration(x: Self::Registration) -> AnyRegistration;
    /// Wraps a stream.
    fn wrap_stream(x: Self::Stream) -> AnyStream;
    /// Wraps an event.
    fn wrap_event(x: Self::Event) -> AnyEvent;
    /// Wraps a kernel.
    fn wrap_kernel(x: Self::Kernel) -> AnyKernel;
}

macro_rules! backends {
    ($($(#[$cfg:meta])* $variant:ident => $backend:ty),+ $(,)?) => {
        /// The backend a [`crate::Context`] runs on.
        // One per context, behind its Arc: the variants' sizes do not matter.
        #[allow(clippy::large_enum_variant)]
        #[derive(Debug)]
        pub enum AnyBackend { $(
            #[doc = concat!("The `", stringify!($backend), "` backend.")]
            $(#[$cfg])*
            $variant($backend),
        )+ }

        backends!(@enum AnyBuffer, Buffer, "Device memory of any backend.", $($(#[$cfg])* $variant => $backend),+);
        backends!(@enum AnyHostMem, HostMem, "Host memory of any backend.", $($(#[$cfg])* $variant => $backend),+);
        backends!(@enum AnyRegistration, Registration, "A host registration of any backend.", $($(#[$cfg])* $variant => $backend),+);
        backends!(@enum AnyStream, Stream, "A stream of any backend.", $($(#[$cfg])* $variant => $backend),+);
        backends!(@enum AnyEvent, Event, "An event of any backend.", $($(#[$cfg])* $variant => $backend),+);
        backends!(@enum AnyKernel, Kernel, "A kernel of any backend.", $($(#[$cfg])* $variant => $backend),+);
        backends!(@enum AnyGraph, Graph, "A graph of any backend.", $($(#[$cfg])* $variant => $backend),+);

        $(
        $(#[$cfg])*
        #[allow(unreachable_patterns)]
        impl Member for $backend {
            fn of(x: &AnyBackend) -> Option<&Self> { match x { AnyBackend::$variant(v) => Some(v), _ => None } }
            fn buffer(x: &AnyBuffer) -> Option<&Self::Buffer> { match x { AnyBuffer::$variant(v) => Some(v), _ => None } }
            fn into_buffer(x: AnyBuffer) -> Option<Self::Buffer> { match x { AnyBuffer::$variant(v) => Some(v), _ => None } }
            fn host(x: &AnyHostMem) -> Option<&Self::HostMem> { match x { AnyHostMem::$variant(v) => Some(v), _ => None } }
            fn into_host(x: AnyHostMem) -> Option<Self::HostMem> { match x { AnyHostMem::$variant(v) => Some(v), _ => None } }
            fn into_registration(x: AnyRegistration) -> Option<Self::Registration> { match x { AnyRegistration::$variant(v) => Some(v), _ => None } }
            fn stream(x: &AnyStream) -> Option<&Self::Stream> { match x { AnyStream::$variant(v) => Some(v), _ => None } }
            fn into_stream(x: AnyStream) -> Option<Self::Stream> { match x { AnyStream::$variant(v) => Some(v), _ => None } }
            fn event(x: &AnyEvent) -> Option<&Self::Event> { match x { AnyEvent::$variant(v) => Some(v), _ => None } }
            fn event_mut(x: &mut AnyEvent) -> Option<&mut Self::Event> { match x { AnyEvent::$variant(v) => Some(v), _ => None } }
            fn kernel(x: &AnyKernel) -> Option<&Self::Kernel> { match x { AnyKernel::$variant(v) => Some(v), _ => None } }
            fn graph(x: &AnyGraph) -> Option<&Self::Graph> { match x { AnyGraph::$variant(v) => Some(v), _ => None } }
            fn into_graph(x: AnyGraph) -> Option<Self::Graph> { match x { AnyGraph::$variant(v) => Some(v), _ => None } }
            fn wrap_graph(x: Self::Graph) -> AnyGraph { AnyGraph::$variant(x) }
            fn wrap_buffer(x: Self::Buffer) -> AnyBuffer { AnyBuffer::$variant(x) }
            fn wrap_host(x: Self::HostMem) -> AnyHostMem { AnyHostMem::$variant(x) }
            fn wrap_registration(x: Self::Registration) -> AnyRegistration { AnyRegistration::$variant(x) }
            fn wrap_stream(x: Self::Stream) -> AnyStream { AnyStream::$variant(x) }
            fn wrap_event(x: Self::Event) -> AnyEvent { AnyEvent::$variant(x) }
            fn wrap_kernel(x: Self::Kernel) -> AnyKernel { AnyKernel::$variant(x) }
        }
        )+
    };
    (@enum $name:ident, $assoc:ident, $doc:literal, $($(#[$cfg:meta])* $variant:ident => $backend:ty),+) => {
        #[doc = $doc]
        // Each backend's object prints itself (sizes, ids, states; no handles or addresses).
        #[derive(Debug)]
        pub enum $name { $(
            #[doc = concat!("Of the `", stringify!($backend), "` backend.")]
            $(#[$cfg])*
            $variant(<$backend as Backend>::$assoc),
        )+ }
    };
}

backends! {
    Cpu => gpukit_cpu::CpuBackend,
    #[cfg(feature = "cuda")]
    Cuda => gpukit_cuda::CudaBackend,
    #[cfg(feature = "vulkan")]
    Wgpu => gpukit_wgpu::WgpuBackend,
}

/// Runs `$body` with `$b` bound to the concrete backend inside `$any` and `$B` naming its
/// type. One arm per backend.
macro_rules! dispatch {
    ($any:expr, $b:ident : $B:ident => $body:expr) => {
        match $any {
            AnyBackend::Cpu($b) => {
                #[allow(dead_code)]
                type $B = gpukit_cpu::CpuBackend;
                $body
            }
            #[cfg(feature = "cuda")]
            AnyBackend::Cuda($b) => {
                #[allow(dead_code)]
                type $B = gpukit_cuda::CudaBackend;
                $body
            }
            #[cfg(feature = "vulkan")]
            AnyBackend::Wgpu($b) => {
                #[allow(dead_code)]
                type $B = gpukit_wgpu::WgpuBackend;
                $body
            }
        }
    };
}

/// A launch given more arguments than any signature takes (with the checked convention's).
#[cold]
#[inline(never)]
fn too_many_arguments(n: usize) -> Error {
    Error::Unsupported {
        backend: "any",
        what: format!("a launch with {n} arguments (at most {MAX_LAUNCH_ARGS})"),
    }
}

fn foreign(what: &'static str) -> Error {
    Error::Backend {
        backend: "any",
        call: what,
        message: "an object of another backend was passed in".into(),
    }
}

// Narrowing helpers: the first argument only fixes the backend type.
fn buf<'a, B: Member>(_: &B, x: &'a AnyBuffer) -> Result<&'a B::Buffer> {
    B::buffer(x).ok_or_else(|| foreign("buffer"))
}
fn at<'a, B: Member>(b: &B, x: BufAt<'a, AnyBackend>) -> Result<BufAt<'a, B>> {
    Ok(BufAt {
        buf: buf(b, x.buf)?,
        offset: x.offset,
    })
}
fn st<'a, B: Member>(_: &B, x: &'a AnyStream) -> Result<&'a B::Stream> {
    B::stream(x).ok_or_else(|| foreign("stream"))
}
fn ev<'a, B: Member>(_: &B, x: &'a AnyEvent) -> Result<&'a B::Event> {
    B::event(x).ok_or_else(|| foreign("event"))
}

impl Backend for AnyBackend {
    type Buffer = AnyBuffer;
    type HostMem = AnyHostMem;
    type Registration = AnyRegistration;
    type Stream = AnyStream;
    type Event = AnyEvent;
    type Kernel = AnyKernel;
    type Graph = AnyGraph;

    fn name(&self) -> &'static str {
        dispatch!(self, b: Be => b.name())
    }

    fn checked_lengths(&self) -> bool {
        dispatch!(self, b: Be => b.checked_lengths())
    }

    fn device_id(&self) -> usize {
        dispatch!(self, b: Be => b.device_id())
    }

    fn info(&self) -> DeviceInfo {
        dispatch!(self, b: Be => b.info())
    }

    fn alloc(&self, bytes: usize, zeroed: bool) -> Result<AnyBuffer> {
        dispatch!(self, b: Be => b.alloc(bytes, zeroed).map(Be::wrap_buffer))
    }

    unsafe fn free(&self, x: AnyBuffer, users: &[&AnyStream]) -> Result<()> {
        dispatch!(self, b: Be => {
            let users = users.iter().map(|s| st(b, s)).collect::<Result<Vec<_>>>()?;
            let x = Be::into_buffer(x).ok_or_else(|| foreign("free"))?;
            // SAFETY: forwarded unchanged from our caller, who upholds the same contract.
            unsafe { b.free(x, &users) }
        })
    }

    fn alloc_host(&self, bytes: usize, usage: HostUse) -> Result<AnyHostMem> {
        dispatch!(self, b: Be => b.alloc_host(bytes, usage).map(Be::wrap_host))
    }

    fn host_ptr(&self, mem: &AnyHostMem) -> *mut u8 {
        dispatch!(self, b: Be => match Be::host(mem) {
            Some(m) => b.host_ptr(m),
            None => std::ptr::null_mut(),
        })
    }

    unsafe fn free_host(&self, mem: AnyHostMem) -> Result<()> {
        dispatch!(self, b: Be => {
            let mem = Be::into_host(mem).ok_or_else(|| foreign("free_host"))?;
            // SAFETY: forwarded unchanged from our caller, who upholds the same contract.
            unsafe { b.free_host(mem) }
        })
    }

    unsafe fn register_host(&self, ptr: *mut u8, bytes: usize) -> Result<AnyRegistration> {
        // SAFETY: forwarded unchanged from our caller, who upholds the same contract.
        dispatch!(self, b: Be => unsafe { b.register_host(ptr, bytes) }.map(Be::wrap_registration))
    }

    unsafe fn unregister_host(&self, reg: AnyRegistration) -> Result<()> {
        dispatch!(self, b: Be => {
            let reg = Be::into_registration(reg).ok_or_else(|| foreign("unregister_host"))?;
            // SAFETY: forwarded unchanged from our caller, who upholds the same contract.
            unsafe { b.unregister_host(reg) }
        })
    }

    fn create_stream(&self, priority: i32) -> Result<AnyStream> {
        dispatch!(self, b: Be => b.create_stream(priority).map(Be::wrap_stream))
    }

    fn destroy_stream(&self, s: AnyStream) -> Result<()> {
        dispatch!(self, b: Be => b.destroy_stream(Be::into_stream(s).ok_or_else(|| foreign("destroy_stream"))?))
    }

    fn stream_sync(&self, s: &AnyStream) -> Result<()> {
        dispatch!(self, b: Be => b.stream_sync(st(b, s)?))
    }

    fn stream_query(&self, s: &AnyStream) -> Result<bool> {
        dispatch!(self, b: Be => b.stream_query(st(b, s)?))
    }

    fn record_event(&self, s: &AnyStream, timing: bool) -> Result<AnyEvent> {
        dispatch!(self, b: Be => b.record_event(st(b, s)?, timing).map(Be::wrap_event))
    }

    fn record_event_again(&self, s: &AnyStream, e: &mut AnyEvent) -> Result<()> {
        dispatch!(self, b: Be => match Be::event_mut(e) {
            Some(inner) => b.record_event_again(st(b, s)?, inner),
            None => {
                *e = b.record_event(st(b, s)?, false).map(Be::wrap_event)?;
                Ok(())
            }
        })
    }

    fn stream_wait(&self, s: &AnyStream, e: &AnyEvent) -> Result<()> {
        dispatch!(self, b: Be => b.stream_wait(st(b, s)?, ev(b, e)?))
    }

    fn stream_wait_peer(&self, s: &AnyStream, peer: &AnyBackend, e: &AnyEvent) -> Result<()> {
        dispatch!(self, b: Be => match (Be::of(peer), Be::event(e)) {
            (Some(p), Some(e)) => b.stream_wait_peer(st(b, s)?, p, e),
            // Contexts of two backends: the host waits.
            _ => peer.event_sync(e),
        })
    }

    fn notify(&self, e: &AnyEvent, wake: Wake) -> Option<Wake> {
        dispatch!(self, b: Be => match Be::event(e) {
            Some(e) => b.notify(e, wake),
            None => Some(wake),
        })
    }

    fn raw_stream_wait(&self, raw: RawStream, e: &AnyEvent) -> Result<()> {
        dispatch!(self, b: Be => b.raw_stream_wait(raw, ev(b, e)?))
    }

    fn event_sync(&self, e: &AnyEvent) -> Result<()> {
        dispatch!(self, b: Be => b.event_sync(ev(b, e)?))
    }

    fn event_query(&self, e: &AnyEvent) -> Result<bool> {
        dispatch!(self, b: Be => b.event_query(ev(b, e)?))
    }

    fn event_elapsed_ms(&self, start: &AnyEvent, end: &AnyEvent) -> Result<f64> {
        dispatch!(self, b: Be => b.event_elapsed_ms(ev(b, start)?, ev(b, end)?))
    }

    fn synchronize(&self) -> Result<()> {
        dispatch!(self, b: Be => b.synchronize())
    }

    fn alloc_unified(&self, bytes: usize) -> Result<AnyBuffer> {
        dispatch!(self, b: Be => b.alloc_unified(bytes).map(Be::wrap_buffer))
    }

    fn unified_ptr(&self, at: BufAt<'_, Self>) -> Option<*mut u8> {
        dispatch!(self, b: Be => b.unified_ptr(self::at(b, at).ok()?))
    }

    unsafe fn prefetch(
        &self,
        s: &AnyStream,
        at: BufAt<'_, Self>,
        bytes: usize,
        to: Location,
    ) -> Result<()> {
        // SAFETY: the caller's contract is the backend's.
        dispatch!(self, b: Be => unsafe { b.prefetch(st(b, s)?, self::at(b, at)?, bytes, to) })
    }

    fn begin_capture(&self, s: &AnyStream) -> Result<()> {
        dispatch!(self, b: Be => b.begin_capture(st(b, s)?))
    }

    fn end_capture(&self, s: &AnyStream) -> Result<AnyGraph> {
        dispatch!(self, b: Be => b.end_capture(st(b, s)?).map(Be::wrap_graph))
    }

    unsafe fn launch_graph(&self, g: &AnyGraph, s: &AnyStream) -> Result<()> {
        dispatch!(self, b: Be => {
            let g = Be::graph(g).ok_or_else(|| foreign("graph"))?;
            // SAFETY: the caller's contract is the backend's.
            unsafe { b.launch_graph(g, st(b, s)?) }
        })
    }

    fn destroy_graph(&self, g: AnyGraph) -> Result<()> {
        dispatch!(self, b: Be => b.destroy_graph(Be::into_graph(g).ok_or_else(|| foreign("graph"))?))
    }

    fn range_push(&self, name: &str) -> bool {
        dispatch!(self, b: Be => b.range_push(name))
    }

    fn range_pop(&self) {
        dispatch!(self, b: Be => b.range_pop())
    }

    unsafe fn copy_h2d(
        &self,
        s: &AnyStream,
        src: *const u8,
        dst: BufAt<'_, Self>,
        bytes: usize,
    ) -> Result<()> {
        // SAFETY: forwarded unchanged from our caller, who upholds the same contract.
        dispatch!(self, b: Be => unsafe { b.copy_h2d(st(b, s)?, src, at(b, dst)?, bytes) })
    }

    unsafe fn copy_d2h(
        &self,
        s: &AnyStream,
        src: BufAt<'_, Self>,
        dst: *mut u8,
        bytes: usize,
    ) -> Result<()> {
        // SAFETY: forwarded unchanged from our caller, who upholds the same contract.
        dispatch!(self, b: Be => unsafe { b.copy_d2h(st(b, s)?, at(b, src)?, dst, bytes) })
    }

    unsafe fn copy_d2d(
        &self,
        s: &AnyStream,
        src: BufAt<'_, Self>,
        dst: BufAt<'_, Self>,
        bytes: usize,
    ) -> Result<()> {
        // SAFETY: forwarded unchanged from our caller, who upholds the same contract.
        dispatch!(self, b: Be => unsafe { b.copy_d2d(st(b, s)?, at(b, src)?, at(b, dst)?, bytes) })
    }

    unsafe fn copy_peer(
        &self,
        s: &AnyStream,
        peer: &AnyBackend,
        src: BufAt<'_, Self>,
        dst: BufAt<'_, Self>,
        bytes: usize,
    ) -> Result<()> {
        dispatch!(self, b: Be => match Be::of(peer) {
            // SAFETY: forwarded unchanged from our caller, who upholds the same contract.
            Some(p) => unsafe { b.copy_peer(st(b, s)?, p, at(p, src)?, at(b, dst)?, bytes) },
            // Contexts of two backends: gpukit-core copies through host memory.
            None => Err(Error::Unsupported {
                backend: b.name(),
                what: format!("a direct copy of {bytes} bytes from the {} backend", peer.name()),
            }),
        })
    }

    fn has_gemm(&self, dtype: DType) -> bool {
        dispatch!(self, b: Be => b.has_gemm(dtype))
    }

    unsafe fn gemm(
        &self,
        s: &AnyStream,
        dtype: DType,
        g: &Gemm<f64>,
        [a, bm, c]: [BufAt<'_, Self>; 3],
    ) -> Result<()> {
        dispatch!(self, b: Be => {
            let ops = [at(b, a)?, at(b, bm)?, at(b, c)?];
            // SAFETY: forwarded unchanged from our caller, who upholds the same contract.
            unsafe { b.gemm(st(b, s)?, dtype, g, ops) }
        })
    }

    fn load_kernel(&self, desc: &KernelDesc) -> Result<AnyKernel> {
        dispatch!(self, b: Be => b.load_kernel(desc).map(Be::wrap_kernel))
    }

    unsafe fn launch(
        &self,
        s: &AnyStream,
        k: &AnyKernel,
        cfg: &LaunchConfig,
        args: &[KernelArg<'_, Self>],
    ) -> Result<()> {
        if args.len() > MAX_LAUNCH_ARGS {
            return Err(too_many_arguments(args.len()));
        }
        dispatch!(self, b: Be => {
            let kernel = Be::kernel(k).ok_or_else(|| foreign("launch"))?;
            // Written in place, the count in a local (`try_extend`): collecting through a
            // `Result` builds the list and then moves it, and a push per argument stores the
            // count back each time.
            let mut conv = gpukit_core::__StackVec::<_, MAX_LAUNCH_ARGS>::new();
            conv.try_extend(args.iter().map(|a| {
                Ok::<_, Error>(match *a {
                    KernelArg::Buffer { at: x, bytes, write } => KernelArg::Buffer {
                        at: x.map(|x| at(b, x)).transpose()?,
                        bytes,
                        write,
                    },
                    KernelArg::Scalar { bytes, len } => KernelArg::Scalar { bytes, len },
                })
            }))?;
            let stream = st(b, s)?;
            // SAFETY: forwarded unchanged from our caller, who upholds the same contract.
            unsafe { b.launch(stream, kernel, cfg, &conv) }
        })
    }

    fn raw_ptr(&self, x: BufAt<'_, Self>) -> RawPtr {
        dispatch!(self, b: Be => match at(b, x) {
            Ok(x) => b.raw_ptr(x),
            // Unreachable through gpukit-core (one context, one backend); a null address
            // rather than a panic, as `host_ptr` does.
            Err(_) => RawPtr::Host(std::ptr::null_mut()),
        })
    }

    fn raw_stream(&self, s: &AnyStream) -> RawStream {
        dispatch!(self, b: Be => match st(b, s) {
            Ok(s) => b.raw_stream(s),
            Err(_) => RawStream::None,
        })
    }

    unsafe fn buffer_from_raw(&self, ptr: RawPtr, bytes: usize) -> Result<AnyBuffer> {
        // SAFETY: forwarded unchanged from our caller, who upholds the same contract.
        dispatch!(self, b: Be => unsafe { b.buffer_from_raw(ptr, bytes) }.map(Be::wrap_buffer))
    }

    unsafe fn stream_from_raw(&self, raw: RawStream) -> Result<AnyStream> {
        // SAFETY: forwarded unchanged from our caller, who upholds the same contract.
        dispatch!(self, b: Be => unsafe { b.stream_from_raw(raw) }.map(Be::wrap_stream))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launch_with_more_arguments_than_any_signature_takes_is_an_error() -> Result<()> {
        let ctx = crate::Context::new(crate::DeviceSpec::Cpu(None))?;
        let b = ctx.backend();
        let spec = gpukit_core::KernelSpec::<(u32,)>::named("nop").cpu(|_, _| {});
        let k = b.load_kernel(spec.desc())?;
        let s = b.create_stream(0)?;
        let args: Vec<KernelArg<'_, AnyBackend>> = (0..=MAX_LAUNCH_ARGS)
            .map(|_| KernelArg::scalar(&0u32.to_ne_bytes()))
            .collect();
        // SAFETY: refused before anything is queued: no argument is read.
        let r = unsafe { b.launch(&s, &k, &LaunchConfig::linear(1, 1), &args) };
        assert!(
            matches!(&r, Err(Error::Unsupported { what, .. }) if what.contains("at most 26")),
            "{r:?}"
        );
        b.destroy_stream(s)
    }
}
