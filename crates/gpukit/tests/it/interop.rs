//! Raw-handle interop: the native address of arrays and views, the native stream, and
//! arrays and streams wrapped around memory and streams made outside the library.
//!
//! The ordered accessors (`with_raw`, `with_raw_mut`) run on every backend: on the CPU the
//! closure touches host memory itself, on CUDA it enqueues a raw driver call on the raw
//! stream. The CUDA-only tests hand pointers to cudarc's driver API and back.

use crate::{backend_tests, common, cpu_tests};

use gpukit::{DeviceRead, Error, LaunchConfig, RawPtr, RawStream};

/// Sets `n` f32s at `ptr` to `value` through the backend's own means: a host loop on the
/// CPU (after reading them, so the test also sees what was there), `cuMemsetD32Async` on
/// the raw CUDA stream. Returns the values the CPU read (empty on CUDA).
///
/// # Safety
///
/// `ptr` addresses `n` writable f32s of `raw`'s device, ordered by the caller.
unsafe fn raw_set(ptr: Option<RawPtr>, raw: RawStream, n: usize, value: f32) -> Vec<f32> {
    match (ptr, raw) {
        (Some(RawPtr::Host(p)), RawStream::None) => {
            // SAFETY: the caller's contract; on the CPU backend the address is host memory.
            let s = unsafe { std::slice::from_raw_parts_mut(p.cast::<f32>(), n) };
            let before = s.to_vec();
            s.fill(value);
            before
        }
        #[cfg(feature = "cuda")]
        (Some(RawPtr::Cuda(d)), RawStream::Cuda(s)) => {
            use gpukit::cuda::cudarc::driver::sys;
            // SAFETY: the caller's contract: `d` holds `n` f32s of the context's device and
            // `s` is its stream, on which the library ordered this access.
            let r = unsafe { sys::cuMemsetD32Async(d, value.to_bits(), n, s.cast()) };
            assert_eq!(r, sys::CUresult::CUDA_SUCCESS, "cuMemsetD32Async");
            Vec::new()
        }
        other => panic!("unexpected raw handles {other:?}"),
    }
}

/// The wgpu backend has no addresses to give: its raw pointer is `Opaque` (also inside an
/// ordered raw access, whose stream is `None`), and wrapping a foreign pointer is
/// `Unsupported`. Returns whether `ctx` is such a backend (checked).
fn opaque_backend(
    ctx: &gpukit::Context,
    a: &gpukit::core::GpuArray<f32, gpukit::AnyBackend>,
) -> gpukit::Result<bool> {
    if ctx.backend_name() != "vulkan" {
        return Ok(false);
    }
    // SAFETY: the handles are only compared, never dereferenced.
    assert_eq!(unsafe { a.raw_ptr() }, Some(RawPtr::Opaque));
    // SAFETY: as above.
    let seen = unsafe { ctx.with_raw(a, |p, raw| (p, raw)) }?;
    assert_eq!(seen, (Some(RawPtr::Opaque), RawStream::None));
    // SAFETY: refused before anything is dereferenced.
    let r = unsafe { ctx.array_from_raw::<f32>(RawPtr::Host(std::ptr::null_mut()), 4) };
    assert!(matches!(r, Err(Error::Unsupported { .. })), "{r:?}");
    Ok(true)
}

backend_tests! {
    fn raw_writes_are_ordered_like_library_ops(ctx) {
        let n = 1024;
        let mut a = ctx.alloc_zeros::<f32>(n)?;
        if opaque_backend(ctx, &a)? {
            return Ok(());
        }
        // Another stream writes `a` after keeping its queue busy: the raw access must wait.
        let s2 = ctx.create_stream()?;
        let delay = ctx.kernel(common::delay_spec())?;
        s2.launch(&delay, LaunchConfig::linear(1, 1), (100_000u32,))?;
        s2.fill(&mut a, 1.0)?;
        // SAFETY: `raw_set` writes the `n` elements of `a` on the stream it is given.
        let before = unsafe { ctx.with_raw_mut(&mut a, |p, raw| raw_set(p, raw, n, 2.0)) }?;
        if ctx.backend_name() == "cpu" {
            assert_eq!(before, vec![1.0; n], "the raw access ran before s2's fill");
        }
        // A library op on a third stream sees the raw write.
        let s3 = ctx.create_stream()?;
        s3.scale(3.0f32, &mut a)?;
        assert_eq!(a.download()?, vec![6.0; n]);
        Ok(())
    }

    fn raw_reads_see_queued_writes_and_views_carry_their_offset(ctx) {
        let a = ctx.alloc_upload(&(0..64).map(|i| i as f32).collect::<Vec<_>>())?;
        if opaque_backend(ctx, &a)? {
            return Ok(());
        }
        let view = a.slice(8..)?;
        // SAFETY: the addresses are only compared, never dereferenced.
        let (base, at8) = unsafe { (a.raw_ptr(), view.raw_ptr()) };
        match (base, at8) {
            (Some(RawPtr::Host(b)), Some(RawPtr::Host(v))) => {
                assert_eq!(v as usize - b as usize, 8 * 4);
            }
            (Some(RawPtr::Cuda(b)), Some(RawPtr::Cuda(v))) => assert_eq!(v - b, 8 * 4),
            other => panic!("mismatched raw pointers {other:?}"),
        }
        let empty = ctx.alloc_zeros::<f32>(0)?;
        // SAFETY: not dereferenced.
        assert_eq!(unsafe { empty.raw_ptr() }, None);
        // An ordered read: the closure sees the element count it was promised.
        // SAFETY: only the handles are inspected.
        let kinds = unsafe {
            ctx.with_raw(&view, |p, raw| (p.is_some(), raw == RawStream::None))
        }?;
        assert_eq!(kinds, (true, ctx.backend_name() == "cpu"));
        Ok(())
    }

    fn pointers_of_another_kind_are_unsupported(ctx) {
        let wrong = match ctx.backend_name() {
            "cpu" => RawPtr::Cuda(0x1000),
            _ => RawPtr::Host(std::ptr::null_mut()),
        };
        // SAFETY: refused before the pointer is used.
        match unsafe { ctx.array_from_raw::<f32>(wrong, 4) } {
            Err(Error::Unsupported { what, .. }) => assert!(what.contains("device memory"), "{what}"),
            other => panic!("expected Unsupported, got {:?}", other.map(|a| a.len())),
        }
        ctx.check()
    }
}

cpu_tests! {
    fn host_memory_wraps_as_an_array_and_is_not_freed(ctx) {
        let mut host: Vec<f32> = (0..256).map(|i| i as f32).collect();
        // SAFETY: `host` holds 256 f32s, outlives the array, and is not touched until the
        // array is dropped and the context synced.
        let mut wrapped = unsafe {
            ctx.array_from_raw::<f32>(RawPtr::Host(host.as_mut_ptr().cast()), host.len())
        }?;
        let mut out = ctx.alloc_zeros::<f32>(256)?;
        ctx.add(&wrapped, &wrapped, &mut out)?;
        assert_eq!(out.download()?, (0..256).map(|i| 2.0 * i as f32).collect::<Vec<_>>());
        ctx.fill(&mut wrapped, 7.0)?;
        drop(wrapped);
        ctx.sync()?;
        assert_eq!(host, vec![7.0; 256], "library writes land in the caller's memory");
        Ok(())
    }

    fn the_cpu_backend_has_no_native_streams_to_wrap(ctx) {
        // SAFETY: refused before anything is used.
        match unsafe { ctx.stream_from_raw(RawStream::None) } {
            Err(Error::Unsupported { backend: "cpu", .. }) => {}
            other => panic!("expected Unsupported, got {:?}", other.map(|s| s.id())),
        }
        // SAFETY: the handle is only compared.
        assert_eq!(unsafe { ctx.raw_handle() }, RawStream::None);
        ctx.check()
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use super::*;
    use gpukit::cuda::cudarc::driver::{result, sys};
    use gpukit::Context;

    /// A cudarc allocation and a cudarc stream used by the library, then freed and
    /// destroyed by cudarc: both succeed only if the library released neither.
    #[test]
    fn cuda_foreign_memory_and_streams_round_trip() {
        let Some(ctx) = common::cuda() else { return };
        common::run(Some(ctx), |ctx: &Context| {
            let n = 4096usize;
            let values: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
            // SAFETY: the context's primary context is current on this thread (the
            // library made it so); the allocation is freed below, after the array is dropped
            // and the context synced.
            let dptr = unsafe { result::malloc_sync(n * 4) }.expect("cuMemAlloc");
            // SAFETY: `dptr` holds n f32s.
            unsafe { result::memcpy_htod_sync(dptr, &values) }.expect("cuMemcpyHtoD");
            // A synchronous copy from pageable memory returns once the data is staged, its
            // copy to the device maybe still running on the legacy stream, which the
            // library's non-blocking streams do not wait for: the wrapped memory must be
            // ready first (`array_from_raw`'s contract).
            result::ctx::synchronize().expect("cuCtxSynchronize");
            // SAFETY: `dptr` holds n f32s in the device's primary context and outlives the
            // array (freed after the drop and a sync).
            let wrapped = unsafe { ctx.array_from_raw::<f32>(RawPtr::Cuda(dptr), n) }?;
            let mut out = ctx.alloc_zeros::<f32>(n)?;
            ctx.add(&wrapped, &wrapped, &mut out)?;
            assert_eq!(
                out.download()?,
                values.iter().map(|v| 2.0 * v).collect::<Vec<_>>()
            );

            // The library's array back to cudarc: read `out` with a raw copy on the raw
            // stream, ordered after the add.
            let mut back = vec![0.0f32; n];
            // SAFETY: the copy reads n f32s of `out` on the stream the library ordered, and
            // the stream is synchronised before `back` is read.
            unsafe {
                ctx.with_raw(&out, |p, raw| {
                    let (Some(RawPtr::Cuda(d)), RawStream::Cuda(s)) = (p, raw) else {
                        panic!("CUDA handles expected, got {p:?} {raw:?}")
                    };
                    let s: sys::CUstream = s.cast();
                    result::memcpy_dtoh_async(&mut back, d, s).expect("cuMemcpyDtoHAsync");
                    result::stream::synchronize(s).expect("cuStreamSynchronize");
                })
            }?;
            assert_eq!(back, values.iter().map(|v| 2.0 * v).collect::<Vec<_>>());

            let raw = result::stream::create(result::stream::StreamKind::NonBlocking)
                .expect("cuStreamCreate");
            // SAFETY: a live stream of the primary context, destroyed below after every
            // handle of the wrapper is gone.
            let s = unsafe { ctx.stream_from_raw(RawStream::Cuda(raw.cast())) }?;
            s.scale(4.0f32, &mut out)?;
            s.sync()?;
            drop(s);
            assert_eq!(
                out.download()?,
                values.iter().map(|v| 8.0 * v).collect::<Vec<_>>()
            );

            // `out` was last used on the wrapped stream: it keeps the stream until dropped
            // (stream_from_raw's contract), so it goes before the stream is destroyed.
            drop(out);
            drop(wrapped);
            ctx.sync()?;
            // SAFETY: nothing uses the stream or the allocation any more.
            unsafe { result::stream::destroy(raw) }.expect("the library left the stream alive");
            // SAFETY: as above.
            unsafe { result::free_sync(dptr) }.expect("the library left the allocation alive");
            Ok(())
        });
    }
}
