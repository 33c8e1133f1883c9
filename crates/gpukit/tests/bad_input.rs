//! Bad input: every case of the SPEC's error list that applies, each checked for its exact
//! error variant and for leaving its outputs untouched.
//!
//! Array, op and launch cases run per backend through `backend_tests!`; device specs and
//! configuration files are not about a backend and are plain tests.

mod common;

use std::path::Path;

use gpukit::{
    BinaryOp, Config, DeviceSpec, Error, FallbackPolicy, Gemm, HostUse, KernelSpec, LaunchConfig,
    Out, Shape, SpecOrigin, UnaryOp,
};

use common::{vector_add_spec, VectorAdd, VECTOR_ADD_SRC};

/// A second context, always on the CPU backend: its objects never belong to `ctx`.
fn other_context() -> gpukit::Result<gpukit::Context> {
    gpukit::Context::new(DeviceSpec::Cpu)
}

/// Asserts a `LengthMismatch` with the given lengths.
#[track_caller]
fn assert_mismatch<T: std::fmt::Debug>(r: gpukit::Result<T>, expected: usize, got: usize) {
    match r {
        Err(Error::LengthMismatch {
            expected: e,
            got: g,
            ..
        }) => assert_eq!((e, g), (expected, got)),
        other => {
            panic!("expected LengthMismatch {{ expected: {expected}, got: {got} }}, got {other:?}")
        }
    }
}

#[track_caller]
fn assert_context_mismatch<T: std::fmt::Debug>(r: gpukit::Result<T>) {
    assert!(
        matches!(r, Err(Error::ContextMismatch { .. })),
        "expected ContextMismatch, got {r:?}"
    );
}

#[track_caller]
fn assert_out_of_range<T>(r: gpukit::Result<T>) {
    match r {
        Err(Error::OutOfRange { .. }) => {}
        Err(e) => panic!("expected OutOfRange, got {e:?}"),
        Ok(_) => panic!("expected OutOfRange, got Ok"),
    }
}

#[track_caller]
fn assert_invalid_launch(r: gpukit::Result<()>, what: &str) {
    assert!(
        matches!(r, Err(Error::InvalidLaunch { ref kernel, .. }) if kernel == "vector_add"),
        "{what}: expected InvalidLaunch, got {r:?}"
    );
}

backend_tests! {
    fn binary_ops_reject_length_mismatch(ctx) {
        let a = ctx.alloc_upload(&[1.0f32, 2.0, 3.0, 4.0])?;
        let b3 = ctx.alloc_upload(&[1.0f32, 2.0, 3.0])?;
        let b4 = ctx.alloc_upload(&[5.0f32; 4])?;
        let mut out = ctx.alloc_upload(&[-1.0f32; 4])?;
        let mut out5 = ctx.alloc_upload(&[-2.0f32; 5])?;
        assert_mismatch(ctx.add(&a, &b3, &mut out), 4, 3);
        assert_mismatch(ctx.sub(&a, &b3, &mut out), 4, 3);
        assert_mismatch(ctx.mul(&a, &b3, &mut out), 4, 3);
        assert_mismatch(ctx.div(&a, &b3, &mut out), 4, 3);
        assert_mismatch(ctx.add(&a, &b4, &mut out5), 4, 5);
        assert_mismatch(ctx.sub(&a, &b4, &mut out5), 4, 5);
        assert_mismatch(ctx.mul(&a, &b4, &mut out5), 4, 5);
        assert_mismatch(ctx.div(&a, &b4, &mut out5), 4, 5);
        // Through views too.
        assert_mismatch(ctx.add(&a.slice(..2)?, &b4.slice(..2)?, &mut out.slice_mut(..3)?), 2, 3);
        assert_eq!(out.download()?, [-1.0; 4]);
        assert_eq!(out5.download()?, [-2.0; 5]);
        // Integers are checked the same way.
        let i = ctx.alloc_upload(&[1i32, 2])?;
        let mut io = ctx.alloc_upload(&[9i32])?;
        assert_mismatch(ctx.add(&i, &i, &mut io), 2, 1);
        assert_eq!(io.download()?, [9]);
        Ok(())
    }

    fn unary_ops_axpy_and_copies_reject_length_mismatch(ctx) {
        let x = ctx.alloc_upload(&[0.5f64, -1.0, 2.0])?;
        let mut out = ctx.alloc_upload(&[7.0f64; 2])?;
        assert_mismatch(ctx.relu(&x, &mut out), 3, 2);
        assert_mismatch(ctx.sigmoid(&x, &mut out), 3, 2);
        assert_mismatch(ctx.tanh(&x, &mut out), 3, 2);
        assert_mismatch(ctx.exp(&x, &mut out), 3, 2);
        assert_mismatch(ctx.axpy(2.0, &x, &mut out), 3, 2);
        assert_mismatch(ctx.copy(&x, &mut out), 3, 2);
        assert_mismatch(x.copy_to(&mut out), 3, 2);
        let s = ctx.create_stream()?;
        assert_mismatch(s.copy(&x, &mut out), 3, 2);
        assert_eq!(out.download()?, [7.0; 2]);

        // Blocking upload and download: device and host sides untouched.
        assert_mismatch(out.upload(&[1.0, 2.0, 3.0]), 2, 3);
        assert_mismatch(out.slice_mut(..1)?.upload(&[1.0, 2.0]), 1, 2);
        assert_eq!(out.download()?, [7.0; 2]);
        let mut host = [4.0f64; 4];
        assert_mismatch(x.download_into(&mut host), 3, 4);
        assert_eq!(host, [4.0; 4]);
        Ok(())
    }

    fn async_copies_reject_length_mismatch_and_give_the_buffer_back(ctx) {
        let s = ctx.create_stream()?;
        let mut dev = ctx.alloc_upload(&[1.0f32; 4])?;

        // Upload of a pinned buffer of the wrong length: Rejected holds it, intact.
        let mut host = ctx.alloc_host::<f32>(5, HostUse::Upload)?;
        host.copy_from_slice(&[1.0, 2.0, 3.0, 4.0, 5.0]);
        let Err(rejected) = s.upload(host, &mut dev) else {
            panic!("an upload of 5 elements into 4 was accepted");
        };
        assert!(matches!(rejected.error, Error::LengthMismatch { expected: 5, got: 4, .. }), "{rejected:?}");
        assert_eq!(&rejected.value[..], &[1.0, 2.0, 3.0, 4.0, 5.0]);
        let (error, host) = rejected.into_parts();
        assert!(matches!(error, Error::LengthMismatch { .. }));
        assert_eq!(host.len(), 5);

        // A plain Vec.
        let Err(rejected) = s.upload(vec![9.0f32; 3], &mut dev) else {
            panic!("an upload of 3 elements into 4 was accepted");
        };
        let (error, v) = rejected.into_parts();
        assert!(matches!(error, Error::LengthMismatch { expected: 3, got: 4, .. }), "{error:?}");
        assert_eq!(v, [9.0; 3]);
        assert_eq!(dev.download()?, [1.0; 4], "a rejected upload changed the device");

        // Downloads: the destination comes back with its old contents.
        let mut back = ctx.alloc_host::<f32>(3, HostUse::Download)?;
        back.copy_from_slice(&[-1.0, -2.0, -3.0]);
        let Err(rejected) = s.download(&dev, back) else {
            panic!("a download of 4 elements into 3 was accepted");
        };
        assert!(matches!(rejected.error, Error::LengthMismatch { expected: 4, got: 3, .. }), "{rejected:?}");
        assert_eq!(&rejected.value[..], &[-1.0, -2.0, -3.0]);
        let reg = ctx.register_host(vec![8.0f32; 6])?;
        let Err(rejected) = s.download(&dev, reg) else {
            panic!("a download of 4 elements into 6 was accepted");
        };
        let (error, reg) = rejected.into_parts();
        assert!(matches!(error, Error::LengthMismatch { .. }), "{error:?}");
        assert_eq!(reg.into_vec()?, vec![8.0; 6]);

        // Converting a Rejected into Error (for `?`) keeps the variant.
        let e: Error = match s.upload(vec![0.0f32; 1], &mut dev) {
            Err(r) => r.into(),
            Ok(_) => panic!("accepted"),
        };
        assert!(matches!(e, Error::LengthMismatch { .. }));
        s.sync()?;
        assert_eq!(dev.download()?, [1.0; 4]);
        Ok(())
    }

    fn reductions_reject_an_out_that_is_not_one_element(ctx) {
        let x = ctx.alloc_upload(&[1i64, 2, 3])?;
        let mut two = ctx.alloc_upload(&[-5i64, -6])?;
        let mut none = ctx.alloc_zeros::<i64>(0)?;
        assert_mismatch(ctx.sum_into(&x, &mut two), 1, 2);
        assert_mismatch(ctx.max_into(&x, &mut two), 1, 2);
        assert_mismatch(ctx.dot_into(&x, &x, &mut two), 1, 2);
        assert_mismatch(ctx.sum_into(&x, &mut none), 1, 0);
        assert_mismatch(ctx.max_into(&x, &mut none), 1, 0);
        assert_mismatch(ctx.dot_into(&x, &x, &mut none), 1, 0);
        // An empty input with a bad out is still a length error, not a silent zero.
        let e = ctx.alloc_zeros::<i64>(0)?;
        assert_mismatch(ctx.sum_into(&e, &mut two), 1, 2);
        assert_mismatch(ctx.dot_into(&e, &e, &mut two), 1, 2);
        assert_eq!(two.download()?, [-5, -6]);
        // dot with x and y of different lengths.
        let y = ctx.alloc_upload(&[1i64, 2])?;
        let mut one = ctx.alloc_upload(&[42i64])?;
        assert_mismatch(ctx.dot_into(&x, &y, &mut one), 3, 2);
        assert_mismatch(ctx.dot(&x, &y), 3, 2);
        assert_eq!(one.download()?, [42]);
        Ok(())
    }

    fn gemm_rejects_wrong_shapes_and_overflowing_sizes(ctx) {
        let (m, n, k) = (2, 3, 4);
        let a = ctx.alloc_upload(&vec![1.0f32; m * k])?;
        let b = ctx.alloc_upload(&vec![1.0f32; k * n])?;
        let bad = ctx.alloc_upload(&[1.0f32; 7])?;
        let mut c = ctx.alloc_upload(&vec![-3.0f32; m * n])?;
        let mut c_bad = ctx.alloc_upload(&vec![-4.0f32; m * n + 1])?;
        let g = Gemm::<f32>::new(m, n, k);
        assert_mismatch(ctx.gemm(g, &bad, &b, &mut c), m * k, 7);
        assert_mismatch(ctx.gemm(g, &a, &bad, &mut c), k * n, 7);
        assert_mismatch(ctx.gemm(g, &a, &b, &mut c_bad), m * n, m * n + 1);
        // Transposes do not change the element counts.
        assert_mismatch(ctx.gemm(g.transpose(true, true), &a, &b, &mut c_bad), m * n, m * n + 1);
        // m * k, then k * n, overflow usize.
        let r = ctx.gemm(Gemm::<f32>::new(usize::MAX, 1, 2), &a, &b, &mut c);
        assert!(matches!(r, Err(Error::SizeOverflow { .. })), "m*k: {r:?}");
        let two = ctx.alloc_upload(&[1.0f32, 1.0])?;
        let r = ctx.gemm(Gemm::<f32>::new(1, usize::MAX, 2), &two, &b, &mut c);
        assert!(matches!(r, Err(Error::SizeOverflow { .. })), "k*n: {r:?}");
        assert_eq!(c.download()?, vec![-3.0; m * n]);
        assert_eq!(c_bad.download()?, vec![-4.0; m * n + 1]);
        Ok(())
    }

    fn views_out_of_range(ctx) {
        let mut a = ctx.alloc_upload(&[1u8, 2, 3, 4, 5])?;
        assert_out_of_range(a.slice(3..10));
        assert_out_of_range(a.slice(6..));
        assert_out_of_range(a.slice(..=5));
        assert_out_of_range(a.slice(..=usize::MAX));
        let (lo, hi) = (4, 2);
        assert_out_of_range(a.slice(lo..hi));
        assert_out_of_range(a.slice_mut(lo..hi));
        assert_out_of_range(a.slice_mut(0..6));
        assert_out_of_range(a.split_at_mut(6));
        match a.slice(3..10) {
            Err(Error::OutOfRange { start: 3, end: 10, len: 5, .. }) => {}
            Err(e) => panic!("the error should name the range and length: {e:?}"),
            Ok(_) => panic!("slice(3..10) of 5 elements was accepted"),
        }
        {
            let v = a.slice(1..4)?;
            assert_out_of_range(v.slice(2..5));
            assert_out_of_range(v.slice(4..));
            let mut m = a.slice_mut(1..4)?;
            assert_out_of_range(m.slice_mut(0..4));
            assert_out_of_range(m.slice_mut(lo..hi));
            let m = a.slice_mut(1..4)?;
            assert_out_of_range(m.into_split_at(4));
        }
        // Limits themselves are fine.
        assert!(a.slice(5..)?.is_empty());
        let (l, r) = a.split_at_mut(5)?;
        assert_eq!((l.len(), r.len()), (5, 0));
        assert_eq!(a.download()?, [1, 2, 3, 4, 5]);
        Ok(())
    }

    fn huge_sizes_are_overflow_or_out_of_memory(ctx) {
        // Sizes whose bytes overflow usize or exceed isize::MAX.
        let r = ctx.alloc::<f32>(1 << 62);
        assert!(matches!(r, Err(Error::SizeOverflow { len, elem_bytes: 4, .. }) if len == 1 << 62), "{r:?}");
        let r = ctx.alloc_zeros::<f64>(1 << 60);
        assert!(matches!(r, Err(Error::SizeOverflow { .. })), "{r:?}");
        let r = ctx.alloc::<u8>(usize::MAX);
        assert!(matches!(r, Err(Error::SizeOverflow { .. })), "{r:?}");
        // Representable sizes larger than the device: 4 EiB of f32, 1 TiB (or more than
        // the device has) of bytes.
        let r = ctx.alloc::<f32>(1 << 60);
        assert!(matches!(r, Err(Error::OutOfMemory { .. })), "{r:?}");
        let too_big = (1usize << 40).max(ctx.info().total_memory as usize + 1);
        let r = ctx.alloc::<u8>(too_big);
        assert!(matches!(r, Err(Error::OutOfMemory { requested, .. }) if requested >= too_big), "{r:?}");
        let r = ctx.alloc_zeros::<u8>(too_big);
        assert!(matches!(r, Err(Error::OutOfMemory { .. })), "{r:?}");

        // Pinned host memory likewise, and a failure leaves the pool's counters alone.
        let stats = ctx.host_pool_stats();
        let r = ctx.alloc_host::<f64>(1 << 60, HostUse::Upload);
        assert!(matches!(r, Err(Error::SizeOverflow { .. })), "{r:?}");
        let r = ctx.alloc_host::<u8>(usize::MAX, HostUse::Both);
        assert!(matches!(r, Err(Error::SizeOverflow { .. })), "{r:?}");
        for usage in [HostUse::Upload, HostUse::Download, HostUse::Both] {
            let r = ctx.alloc_host::<u8>(too_big, usage);
            assert!(matches!(r, Err(Error::OutOfMemory { .. })), "{usage:?}: {r:?}");
        }
        assert_eq!(ctx.host_pool_stats(), stats);

        // The context is still usable.
        let a = ctx.alloc_upload(&[1.0f32, 2.0])?;
        assert_eq!(ctx.sum(&a)?, 3.0);
        Ok(())
    }

    fn max_of_empty_is_an_error_while_sum_and_dot_are_zero(ctx) {
        let e = ctx.alloc_zeros::<f32>(0)?;
        assert!(matches!(ctx.max(&e), Err(Error::EmptyInput { .. })));
        let mut one = ctx.alloc_upload(&[6.5f32])?;
        assert!(matches!(ctx.max_into(&e, &mut one), Err(Error::EmptyInput { .. })));
        assert_eq!(one.download()?, [6.5], "a failed max_into wrote its output");
        let ei = ctx.alloc_zeros::<u8>(0)?;
        assert!(matches!(ctx.max(&ei), Err(Error::EmptyInput { .. })));
        let a = ctx.alloc_upload(&[1.0f32, 9.0])?;
        assert!(matches!(ctx.max(&a.slice(1..1)?), Err(Error::EmptyInput { .. })));
        assert_eq!(ctx.sum(&e)?, 0.0);
        assert_eq!(ctx.dot(&e, &e)?, 0.0);
        assert_eq!(ctx.sum(&ei)?, 0);
        Ok(())
    }

    fn arrays_from_another_context_are_rejected(ctx) {
        let other = other_context()?;
        assert_ne!(other.id(), ctx.id());
        let a = ctx.alloc_upload(&[1.0f32, 2.0])?;
        let b = other.alloc_upload(&[3.0f32, 4.0])?;
        let mut out = ctx.alloc_upload(&[-1.0f32; 2])?;
        let mut out_other = other.alloc_upload(&[-2.0f32; 2])?;
        assert_eq!(b.context_id(), other.id());

        assert_context_mismatch(ctx.add(&a, &b, &mut out));
        assert_context_mismatch(ctx.add(&a, &a, &mut out_other));
        assert_context_mismatch(ctx.mul(&b, &a, &mut out));
        assert_context_mismatch(ctx.copy(&b, &mut out));
        assert_context_mismatch(ctx.copy(&a, &mut out_other));
        assert_context_mismatch(b.copy_to(&mut out));
        assert_context_mismatch(a.copy_to(&mut out_other));
        assert_context_mismatch(ctx.axpy(2.0, &b, &mut out));
        assert_context_mismatch(ctx.axpy(2.0, &a, &mut out_other));
        assert_context_mismatch(ctx.relu(&b, &mut out));
        assert_context_mismatch(ctx.fill(&mut out_other, 0.0));
        assert_context_mismatch(ctx.scale(0.0, &mut out_other));
        assert_context_mismatch(ctx.sum(&b));
        assert_context_mismatch(ctx.dot(&a, &b));
        let g = Gemm::<f32>::new(1, 1, 2);
        let mut one = ctx.alloc_upload(&[5.0f32])?;
        assert_context_mismatch(ctx.gemm(g, &a, &b, &mut one));
        assert_eq!(one.download()?, [5.0]);
        // A stream of this context given another context's array.
        let s = ctx.create_stream()?;
        assert_context_mismatch(s.add(&a, &a, &mut out_other));
        // Async copies: the host buffer comes back.
        let Err(rejected) = s.upload(vec![8.0f32; 2], &mut out_other) else {
            panic!("an upload into another context's array was accepted");
        };
        let (error, v) = rejected.into_parts();
        assert!(matches!(error, Error::ContextMismatch { .. }), "{error:?}");
        assert_eq!(v, [8.0; 2]);
        let Err(rejected) = s.download(&b, vec![0.5f32; 2]) else {
            panic!("a download from another context's array was accepted");
        };
        assert!(matches!(rejected.error, Error::ContextMismatch { .. }));
        assert_eq!(rejected.value, [0.5; 2]);

        assert_eq!(out.download()?, [-1.0; 2]);
        assert_eq!(out_other.download()?, [-2.0; 2]);
        Ok(())
    }

    fn empty_arrays_from_another_context_are_rejected_too(ctx) {
        // The shortcuts for empty inputs (sum/dot of nothing is 0, a gemm with m, n or k = 0)
        // must still check where every argument comes from.
        let other = other_context()?;
        let e_other = other.alloc_zeros::<f32>(0)?;
        let e = ctx.alloc_zeros::<f32>(0)?;
        let mut one = ctx.alloc_upload(&[5.0f32])?;
        assert_context_mismatch(ctx.sum_into(&e_other, &mut one));
        let r = ctx.max_into(&e_other, &mut one);
        assert!(
            matches!(r, Err(Error::ContextMismatch { .. } | Error::EmptyInput { .. })),
            "{r:?}"
        );
        assert_context_mismatch(ctx.dot_into(&e_other, &e, &mut one));
        assert_context_mismatch(ctx.dot_into(&e, &e_other, &mut one));
        assert_context_mismatch(ctx.sum(&e_other));
        assert_eq!(one.download()?, [5.0], "a rejected call wrote its output");
        let b = ctx.alloc_zeros::<f32>(6)?;
        let mut c = ctx.alloc_zeros::<f32>(0)?;
        assert_context_mismatch(ctx.gemm(Gemm::<f32>::new(0, 2, 3), &e_other, &b, &mut c));
        let mut c6 = ctx.alloc_upload(&[2.0f32; 6])?;
        let g = Gemm::<f32>::new(2, 3, 0).scaled(1.0, 0.5);
        assert_context_mismatch(ctx.gemm(g, &e_other, &e, &mut c6));
        assert_eq!(c6.download()?, [2.0; 6], "a rejected gemm scaled C");
        Ok(())
    }

    fn launches_events_and_waits_across_contexts_are_rejected(ctx) {
        let other = other_context()?;
        let k = ctx.kernel(vector_add_spec())?;
        let a = other.alloc_upload(&[1.0f32; 4])?;
        let mut out = other.alloc_upload(&[-1.0f32; 4])?;
        // Kernel of ctx on another context's stream, with that context's arrays.
        assert_context_mismatch(other.launch(&k, LaunchConfig::for_elems(4), (&a, &a, &mut out, 4u64)));
        // Kernel of ctx on ctx's stream, with another context's arrays.
        let x = ctx.alloc_upload(&[1.0f32; 4])?;
        assert_context_mismatch(ctx.launch(&k, LaunchConfig::for_elems(4), (&x, &a, &mut out, 4u64)));
        let mut mine = ctx.alloc_upload(&[-3.0f32; 4])?;
        assert_context_mismatch(ctx.launch(&k, LaunchConfig::for_elems(4), (&x, &a, &mut mine, 4u64)));
        other.sync()?;
        assert_eq!(out.download()?, [-1.0; 4]);
        assert_eq!(mine.download()?, [-3.0; 4]);

        // Events of another context.
        let theirs = other.record_event()?;
        let ours = ctx.record_event()?;
        assert_context_mismatch(ctx.wait(&theirs));
        let s = ctx.create_stream()?;
        assert_context_mismatch(s.wait(&theirs));
        assert_context_mismatch(ours.elapsed_ms(&theirs));
        assert_context_mismatch(theirs.elapsed_ms(&ours));
        // The same calls within one context are fine.
        s.wait(&ours)?;
        assert!(ours.elapsed_ms(&ctx.record_event()?)? >= 0.0);
        Ok(())
    }

    fn host_buffers_from_another_context_are_rejected(ctx) {
        // A HostBuffer is pinned for, and pooled by, its own context: another context's
        // stream refuses it as it refuses that context's arrays, and gives it back intact.
        let other = other_context()?;
        let s = ctx.create_stream()?;
        let mut dev = ctx.alloc_upload(&[1.0f32; 4])?;

        let mut theirs = other.alloc_host::<f32>(4, HostUse::Upload)?;
        theirs.copy_from_slice(&[5.0, 6.0, 7.0, 8.0]);
        let Err(rejected) = s.upload(theirs, &mut dev) else {
            panic!("an upload from another context's HostBuffer was accepted");
        };
        let (error, theirs) = rejected.into_parts();
        assert!(
            matches!(error, Error::ContextMismatch { op: "Stream::upload", arg: "src", expected, got }
                if expected == ctx.id() && got == other.id()),
            "{error:?}"
        );
        assert_eq!(&theirs[..], &[5.0, 6.0, 7.0, 8.0]);
        assert_eq!(theirs.context_id(), other.id());

        let mut back = other.alloc_host::<f32>(4, HostUse::Download)?;
        back.copy_from_slice(&[-1.0; 4]);
        let Err(rejected) = ctx.download(&dev, back) else {
            panic!("a download into another context's HostBuffer was accepted");
        };
        assert!(
            matches!(rejected.error, Error::ContextMismatch { op: "Stream::download", arg: "dst", .. }),
            "{rejected:?}"
        );
        assert_eq!(&rejected.value[..], &[-1.0; 4]);

        // Registered vectors too, and in the other direction: ctx's buffer on other's stream.
        let reg = other.register_host(vec![3.0f32; 4])?;
        let Err(rejected) = ctx.upload(reg, &mut dev) else {
            panic!("an upload from another context's registered Vec was accepted");
        };
        assert!(matches!(rejected.error, Error::ContextMismatch { .. }), "{rejected:?}");
        assert_eq!(rejected.value.into_vec()?, vec![3.0; 4]);
        let mut on_other = other.alloc_upload(&[2.0f32; 4])?;
        let mine = ctx.register_host(vec![4.0f32; 4])?;
        let Err(rejected) = other.upload(mine, &mut on_other) else {
            panic!("an upload from ctx's HostBuffer on another context's stream was accepted");
        };
        assert!(matches!(rejected.error, Error::ContextMismatch { .. }), "{rejected:?}");
        assert_eq!(rejected.value.into_vec()?, vec![4.0; 4]);

        // Nothing was written, and the same buffers work on their own context.
        assert_eq!(dev.download()?, [1.0; 4]);
        assert_eq!(on_other.download()?, [2.0; 4]);
        let theirs = other.upload(theirs, &mut on_other)?.wait()?;
        assert_eq!(on_other.download()?, &theirs[..]);
        // A Vec belongs to no context.
        s.upload(vec![9.0f32; 4], &mut dev)?.wait()?;
        assert_eq!(dev.download()?, [9.0; 4]);
        Ok(())
    }

    fn stream_priority_outside_the_range_is_rejected(ctx) {
        let (least, greatest) = ctx.info().priority_range;
        for p in [least + 1, greatest - 1, i32::MIN, i32::MAX] {
            let r = ctx.create_stream_with_priority(p);
            match r {
                Err(Error::InvalidPriority { priority, greatest: g, least: l }) => {
                    assert_eq!((priority, g, l), (p, greatest, least));
                }
                Err(e) => panic!("priority {p}: expected InvalidPriority, got {e:?}"),
                Ok(s) => panic!("priority {p} was accepted: {s:?}"),
            }
        }
        assert_eq!(ctx.create_stream_with_priority(greatest)?.priority(), greatest);
        assert_eq!(ctx.create_stream_with_priority(least)?.priority(), least);
        Ok(())
    }

    fn launch_configurations_over_the_limits_are_rejected(ctx) {
        let k = ctx.kernel(vector_add_spec())?;
        let lim = ctx.info().limits;
        let n = 16;
        let a = ctx.alloc_upload(&vec![1.0f32; n])?;
        let mut out = ctx.alloc_upload(&vec![-1.0f32; n])?;
        let ok = LaunchConfig::for_elems(n);
        let over = |v: u32| v.saturating_add(1);
        let with = |f: &dyn Fn(&mut LaunchConfig)| {
            let mut c = ok;
            f(&mut c);
            c
        };
        let mut cases = vec![
            ("grid.x = 0", with(&|c| c.grid[0] = 0)),
            ("grid.y = 0", with(&|c| c.grid[1] = 0)),
            ("grid.z = 0", with(&|c| c.grid[2] = 0)),
            ("block.x = 0", with(&|c| c.block[0] = 0)),
            ("block.y = 0", with(&|c| c.block[1] = 0)),
            ("block.z = 0", with(&|c| c.block[2] = 0)),
            ("too many threads per block", with(&|c| c.block = [32, 64, 1])),
            ("block.x over", with(&|c| c.block = [over(lim.max_block_dim[0]), 1, 1])),
            ("block.z over", with(&|c| c.block = [1, 1, over(lim.max_block_dim[2])])),
            ("grid.y over", with(&|c| c.grid = [1, over(lim.max_grid_dim[1]), 1])),
            ("grid.z over", with(&|c| c.grid = [1, 1, over(lim.max_grid_dim[2])])),
            ("shared memory over", with(&|c| c.shared_mem_bytes = over(lim.max_shared_mem_per_block))),
            ("for_elems(usize::MAX)", LaunchConfig::for_elems(usize::MAX)),
        ];
        if lim.max_grid_dim[0] < u32::MAX {
            cases.push(("grid.x over", with(&|c| c.grid[0] = lim.max_grid_dim[0] + 1)));
        }
        if ctx.backend_name() == "cpu" {
            // The limits CUDA devices share, named as the SPEC does.
            cases.push(("1025 threads", with(&|c| c.block = [1025, 1, 1])));
            cases.push(("block.z = 65", with(&|c| c.block = [1, 1, 65])));
            cases.push(("grid.y = 65536", with(&|c| c.grid = [1, 65536, 1])));
            cases.push(("49153 bytes shared", with(&|c| c.shared_mem_bytes = 48 * 1024 + 1)));
        }
        for (what, cfg) in cases {
            assert_invalid_launch(ctx.launch(&k, cfg, (&a, &a, &mut out, n as u64)), what);
        }
        ctx.sync()?;
        assert_eq!(out.download()?, vec![-1.0; n], "a rejected launch wrote its output");

        // Exactly at the limits is accepted and runs.
        let at_limits = [
            LaunchConfig::linear(1, lim.max_threads_per_block),
            LaunchConfig { grid: [1, 1, 1], block: [1, 1, lim.max_block_dim[2]], shared_mem_bytes: lim.max_shared_mem_per_block },
        ];
        for cfg in at_limits {
            ctx.fill(&mut out, 0.0)?;
            ctx.launch(&k, cfg, (&a, &a, &mut out, n as u64))?;
            // `vector_add` indexes by x alone, as on a GPU: the x extent of the launch is
            // written, and threads further along y or z write the same elements again.
            let x_extent = (cfg.grid[0] * cfg.block[0]) as usize;
            let want: Vec<f32> = (0..n).map(|i| if i < x_extent { 2.0 } else { 0.0 }).collect();
            assert_eq!(out.download()?, want, "{cfg:?}");
        }
        Ok(())
    }

    fn kernel_without_code_for_the_backend_is_unavailable(ctx) {
        // A spec with only CUDA C cannot load on the CPU, and one with only a CPU closure
        // cannot load on CUDA: either way the error names the kernel and the backend.
        let backend = ctx.backend_name();
        let r = if backend == "cpu" {
            // SAFETY: never launched (it cannot load here); the signature matches anyway.
            ctx.kernel(unsafe { KernelSpec::<VectorAdd>::cuda(VECTOR_ADD_SRC, "vector_add") })
        } else {
            ctx.kernel(KernelSpec::<VectorAdd>::named("vector_add").cpu(|t, (a, b, out, n)| {
                let i = t.x();
                if (i as u64) < *n {
                    out[i] = a[i] + b[i];
                }
            }))
        };
        match r {
            Err(Error::KernelUnavailable { kernel, backend: b, hint }) => {
                assert_eq!((kernel.as_str(), b), ("vector_add", backend));
                assert!(!hint.is_empty());
            }
            Err(e) => panic!("expected KernelUnavailable, got {e:?}"),
            Ok(k) => panic!("a kernel without {backend} code loaded: {k:?}"),
        }
        // A spec with no code at all is unavailable everywhere.
        let r = ctx.kernel(KernelSpec::<(Out<u8>,)>::named("nothing"));
        assert!(
            matches!(&r, Err(Error::KernelUnavailable { kernel, .. }) if kernel == "nothing"),
            "{r:?}"
        );
        Ok(())
    }
}

#[test]
fn unusable_cuda_devices_are_errors() {
    for spec in [DeviceSpec::Cuda(Some(7)), DeviceSpec::Cuda(Some(999))] {
        match gpukit::Context::new(spec) {
            Err(
                Error::Unavailable {
                    backend: "cuda", ..
                }
                | Error::InvalidDevice { .. },
            ) => {}
            Err(e) => panic!("{spec}: expected Unavailable or InvalidDevice, got {e:?}"),
            Ok(ctx) if spec == DeviceSpec::Cuda(Some(7)) && ctx.backend_name() == "cuda" => {
                println!("{spec} exists on this machine");
            }
            Ok(ctx) => panic!("{spec} opened: {ctx:?}"),
        }
    }
    let spec = "cuda".parse::<DeviceSpec>();
    assert_eq!(spec, Ok(DeviceSpec::Cuda(None)));
    match spec.and_then(gpukit::Context::new) {
        Err(Error::Unavailable {
            backend: "cuda",
            reason,
        }) => assert!(!reason.is_empty()),
        Err(e) => panic!("cuda: expected Unavailable, got {e:?}"),
        Ok(ctx) => assert_eq!(ctx.backend_name(), "cuda", "`cuda` must never mean the CPU"),
    }
}

#[test]
fn malformed_device_specs_are_rejected() {
    for bad in [
        "cuda:x!",
        "",
        "   ",
        "gpu",
        "cuda:",
        "cuda:-1",
        "cuda:1:2",
        "cpu:0",
        "cuda: 1",
        "cuda1",
        "cuda:99999999999999999999999",
    ] {
        match bad.parse::<DeviceSpec>() {
            Err(Error::InvalidDeviceSpec {
                input,
                origin,
                reason,
            }) => {
                assert_eq!(input, bad);
                assert_eq!(origin, "code");
                assert!(!reason.is_empty());
            }
            other => panic!("{bad:?}: expected InvalidDeviceSpec, got {other:?}"),
        }
    }
    // The variable's name is the origin when the spec comes from GPU_DEVICE.
    let r = gpukit::Config::resolve(None, Some("tpu"), None);
    assert!(
        matches!(&r, Err(Error::InvalidDeviceSpec { origin, .. }) if origin == "GPU_DEVICE"),
        "{r:?}"
    );
    // Good ones parse.
    assert_eq!(
        "  CUDA:3 ".parse::<DeviceSpec>(),
        Ok(DeviceSpec::Cuda(Some(3)))
    );
    assert_eq!("Cpu".parse::<DeviceSpec>(), Ok(DeviceSpec::Cpu));
}

#[test]
fn malformed_config_files_are_rejected() {
    let path = Path::new("conf/gpu.toml");
    for bad in [
        "device = \"tpu\"",
        "device = \"cuda:x!\"",
        "device = 3",
        "dtype = \"f33\"",
        "fallback = \"maybe\"",
        "colour = \"blue\"",
        "device = ",
        "[device]\nname = \"cpu\"",
        "device = \"cpu\"\ndevice = \"cuda\"",
    ] {
        match gpukit::Config::from_toml(bad, path) {
            Err(Error::Config { path: p, message }) => {
                assert_eq!(p, path.display().to_string(), "{bad:?}");
                assert!(!message.is_empty(), "{bad:?}");
            }
            other => panic!("{bad:?}: expected Config, got {other:?}"),
        }
    }
    let good = gpukit::Config::from_toml("device = \"cpu\"\ndtype = \"i8\"", path);
    assert!(
        matches!(&good, Ok(c) if c.device == DeviceSpec::Cpu && c.dtype == gpukit::DType::I8),
        "{good:?}"
    );
    // A missing file named explicitly is a Config error too.
    let r = gpukit::Config::load(Path::new("/nonexistent/dir/gpu.toml"));
    assert!(matches!(r, Err(Error::Config { .. })), "{r:?}");
}

/// CUDA C that does not compile: a syntax error.
const BROKEN_SRC: &str = r#"
extern "C" __global__ void broken(float* out) {
    out[threadIdx.x] = 1.0f +;
}"#;

/// `BROKEN_SRC` in WGSL: a syntax error (fixed by removing `+`).
const BROKEN_WGSL: &str = r#"
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(4)
fn broken(@builtin(local_invocation_id) t: vec3<u32>) {
    out[t.x] = 1.0 +;
}"#;

/// WGSL that parses but does not validate (a float where a `u32` is declared).
const ILL_TYPED_WGSL: &str = r#"
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(4)
fn broken(@builtin(local_invocation_id) t: vec3<u32>) {
    let i: u32 = 1.5;
    out[t.x] = 1.0;
}"#;

/// The one element kernel closure every spec below shares on the CPU: `out[i] = 1`.
fn ones_spec(spec: KernelSpec<(Out<f32>,)>) -> KernelSpec<(Out<f32>,)> {
    spec.cpu(|t, (out,)| out[t.x()] = 1.0)
}

backend_tests! {
    fn zero_lengths_are_valid(ctx) {
        // Zero is a valid size everywhere except `max` (EmptyInput, tested above): every
        // call below must succeed and do nothing.
        let mut e = ctx.alloc::<f32>(0)?;
        let z = ctx.alloc_zeros::<f32>(0)?;
        let u = ctx.alloc_upload::<f32>(&[])?;
        assert!(e.is_empty() && z.is_empty() && u.is_empty());
        e.upload(&[])?;
        assert_eq!(e.download()?, Vec::<f32>::new());
        e.download_into(&mut [])?;
        u.copy_to(&mut e)?;
        ctx.copy(&z, &mut e)?;
        ctx.fill(&mut e, 1.0)?;
        ctx.scale(2.0, &mut e)?;
        ctx.axpy(1.0, &z, &mut e)?;
        ctx.add(&z, &u, &mut e)?;
        ctx.binary(BinaryOp::Div, &z, &u, &mut e)?;
        ctx.relu(&z, &mut e)?;
        ctx.unary(UnaryOp::Exp, &z, &mut e)?;

        // Empty views at either end of an array, and splits at the ends.
        let mut a = ctx.alloc_upload(&[1.0f32, 2.0])?;
        ctx.copy(&a.slice(2..)?, &mut e)?;
        ctx.fill(&mut a.slice_mut(0..0)?, 9.0)?;
        {
            let (l, r) = a.split_at_mut(0)?;
            assert_eq!((l.len(), r.len()), (0, 2));
        }
        assert_eq!(a.download()?, [1.0, 2.0], "an empty view wrote its array");

        // Asynchronous copies of empty host memory, pinned and registered.
        let s = ctx.create_stream()?;
        let h = ctx.alloc_host::<f32>(0, HostUse::Upload)?;
        let h = s.upload(h, &mut e)?.wait()?;
        assert!(h.is_empty());
        let reg = ctx.register_host(Vec::<f32>::new())?;
        let reg = s.download(&z, reg)?.wait()?;
        assert!(reg.into_vec()?.is_empty());
        s.sync()?;

        // gemm with a zero dimension: nothing for m = n = 0; C = beta * C for k = 0.
        let mut c0 = ctx.alloc_zeros::<f32>(0)?;
        ctx.gemm(Gemm::<f32>::new(0, 0, 0), &z, &u, &mut c0)?;
        let mut c6 = ctx.alloc_upload(&[2.0f32; 6])?;
        ctx.gemm(Gemm::<f32>::new(2, 3, 0).scaled(1.0, 0.5), &z, &u, &mut c6)?;
        assert_eq!(c6.download()?, [1.0; 6]);

        // A kernel over empty arrays.
        let k = ctx.kernel(vector_add_spec())?;
        ctx.launch(&k, LaunchConfig::for_elems(0), (&z, &u, &mut e, 0u64))?;
        ctx.sync()?;
        Ok(())
    }

    fn generic_ops_and_second_streams_reject_length_mismatch(ctx) {
        // The generic entry points (`binary`, `unary`) and the ops of a stream other than
        // the default one check lengths the same way.
        let a = ctx.alloc_upload(&[1.0f32, 2.0, 3.0])?;
        let b = ctx.alloc_upload(&[1.0f32, 2.0])?;
        let mut out = ctx.alloc_upload(&[-1.0f32; 3])?;
        let mut short = ctx.alloc_upload(&[-2.0f32; 2])?;
        for &op in BinaryOp::ALL {
            assert_mismatch(ctx.binary(op, &a, &b, &mut out), 3, 2);
            assert_mismatch(ctx.binary(op, &a, &a, &mut short), 3, 2);
            assert_mismatch(ctx.binary_inplace(op, &mut short, &a), 2, 3);
            assert_mismatch(ctx.binary_scalar(op, &a, 1.0, &mut short), 3, 2);
        }
        for &op in UnaryOp::ALL {
            assert_mismatch(ctx.unary(op, &a, &mut short), 3, 2);
        }
        assert_mismatch(ctx.clamp(&a, 0.0, 1.0, &mut short), 3, 2);
        assert_mismatch(ctx.cast(&a, &mut ctx.alloc::<i32>(2)?), 3, 2);
        let s = ctx.create_stream()?;
        assert_mismatch(s.add(&a, &b, &mut out), 3, 2);
        assert_mismatch(s.sigmoid(&a, &mut short), 3, 2);
        assert_mismatch(s.axpy(1.0, &a, &mut short), 3, 2);
        assert_mismatch(s.sum_into(&a, &mut short), 1, 2);
        assert_mismatch(s.dot(&a, &b), 3, 2);
        assert_mismatch(s.gemm(Gemm::<f32>::new(1, 1, 3), &a, &b, &mut out), 3, 2);
        s.sync()?;
        assert_eq!(out.download()?, [-1.0; 3]);
        assert_eq!(short.download()?, [-2.0; 2]);
        Ok(())
    }

    /// Regression test for "error messages name the op, not the call": `add_row` reported
    /// `add`, `scale` `mul`, `row_sum` `sum`, and `ctx.sum` during a capture
    /// `Context::alloc`. Each error names the method the user called.
    fn errors_name_the_method_the_user_called(ctx) {
        let shape = Shape::new(2, 3);
        let (m, five) = (ctx.alloc_upload(&[1.0f32; 6])?, ctx.alloc_upload(&[1.0f32; 5])?);
        let mut out = ctx.alloc_upload(&[0.0f32; 6])?;
        let op_of = |r: gpukit::Result<()>| match r {
            Err(Error::LengthMismatch { op, .. }) => op,
            other => panic!("expected LengthMismatch, got {other:?}"),
        };
        assert_eq!(op_of(ctx.add_row(shape, &m, &five, &mut out)), "add_row");
        assert_eq!(op_of(ctx.mul_col_inplace(shape, &mut out, &five)), "mul_col_inplace");
        assert_eq!(op_of(ctx.minimum(&m, &five, &mut out)), "minimum");
        assert_eq!(op_of(ctx.relu(&five, &mut out)), "relu");
        assert_eq!(op_of(ctx.add_scalar(&five, 1.0, &mut out)), "add_scalar");
        let mut two = ctx.alloc_upload(&[0.0f32; 2])?;
        assert_eq!(op_of(ctx.row_sum(shape, &five, &mut two)), "row_sum");
        assert_eq!(op_of(ctx.sum_into(&m, &mut out)), "sum_into");
        assert_eq!(op_of(ctx.dot_into(&m, &five, &mut two)), "dot_into");
        assert_eq!(op_of(ctx.dot(&m, &five).map(|_| ())), "dot");
        // The generic entry points name the op.
        assert_eq!(op_of(ctx.binary(BinaryOp::Add, &m, &five, &mut out)), "add");
        // `scale` is a multiplication by a scalar, and says `scale`.
        let other = gpukit::Context::new(gpukit::DeviceSpec::Cpu)?;
        let mut foreign = other.alloc_upload(&[1.0f32; 3])?;
        let r = ctx.scale(2.0, &mut foreign);
        assert!(matches!(r, Err(Error::ContextMismatch { op: "scale", .. })), "{r:?}");
        if ctx.backend_name() == "vulkan" {
            return Ok(()); // no graphs there
        }
        let s = ctx.create_stream()?;
        ctx.sync()?;
        let r = s.capture(|s| {
            let inner = s.sum(&m).map(|_| ());
            assert!(
                matches!(inner, Err(Error::CaptureViolation { call: "sum", .. })),
                "{inner:?}"
            );
            // Another stream's host reduction during the capture names its call too.
            let other = ctx.max(&m).map(|_| ());
            assert!(
                matches!(other, Err(Error::CaptureViolation { call: "max", .. })),
                "{other:?}"
            );
            s.scale(2.0f32, &mut out)
        });
        assert!(r.is_ok(), "{r:?}");
        Ok(())
    }

    fn table_ops_reject_bad_shapes_and_types(ctx) {
        let shape = Shape::new(2, 3);
        let m = ctx.alloc_upload(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])?;
        let five = ctx.alloc_upload(&[1.0f32; 5])?;
        let row = ctx.alloc_upload(&[1.0f32; 3])?;
        let col = ctx.alloc_upload(&[1.0f32; 2])?;
        let mut out = ctx.alloc_upload(&[-1.0f32; 6])?;
        let mut x = ctx.alloc_upload(&[-2.0f32; 6])?;
        // Broadcasts: the matrix is not rows x cols; the vector is not cols (row) or rows (col).
        assert_mismatch(ctx.add_row(shape, &five, &row, &mut out), 6, 5);
        assert_mismatch(ctx.add_row(shape, &m, &col, &mut out), 3, 2);
        assert_mismatch(ctx.mul_col(shape, &m, &row, &mut out), 2, 3);
        assert_mismatch(ctx.div_row_inplace(shape, &mut x, &col), 3, 2);
        assert_mismatch(ctx.sub_col_inplace(shape, &mut x, &five), 2, 5);
        assert_mismatch(ctx.add_row(Shape::new(3, 2), &m, &col, &mut ctx.alloc::<f32>(5)?), 6, 5);
        // Per-row reductions, softmax, cross-entropy.
        let mut rows_out = ctx.alloc_upload(&[-3.0f32; 2])?;
        let mut idx = ctx.alloc_upload(&[7u32; 3])?;
        assert_mismatch(ctx.row_sum(shape, &five, &mut rows_out), 6, 5);
        assert_mismatch(ctx.row_max(shape, &m, &mut out), 2, 6);
        assert_mismatch(ctx.row_argmax(shape, &m, &mut idx), 2, 3);
        assert_mismatch(ctx.softmax(shape, &m, &mut ctx.alloc::<f32>(5)?), 6, 5);
        assert_mismatch(ctx.log_softmax_inplace(Shape::new(1, 5), &mut x), 5, 6);
        let labels = ctx.alloc_upload(&[0u32, 1])?;
        let three = ctx.alloc_upload(&[0u32, 1, 2])?;
        assert_mismatch(ctx.cross_entropy(shape, &m, &three, &mut rows_out), 2, 3);
        assert_mismatch(ctx.cross_entropy(shape, &five, &labels, &mut rows_out), 6, 5);
        assert_mismatch(ctx.cross_entropy_grad(shape, &m, &labels, &mut rows_out, &mut ctx.alloc::<f32>(5)?), 6, 5);
        let r = ctx.cross_entropy(Shape::new(2, 0), &ctx.alloc::<f32>(0)?, &labels, &mut rows_out);
        assert!(matches!(r, Err(Error::EmptyInput { op: "cross_entropy" })), "{r:?}");
        // Empty inputs of the reductions without an identity; the sum of empty rows is 0.
        let empty = ctx.alloc::<f32>(0)?;
        for (name, r) in [
            ("argmax", ctx.argmax(&empty).map(|_| ())),
            ("argmin", ctx.argmin(&empty).map(|_| ())),
            ("min", ctx.min(&empty).map(|_| ())),
            ("mean", ctx.mean(&empty).map(|_| ())),
            ("row_max", ctx.row_max(Shape::new(2, 0), &empty, &mut rows_out)),
            ("row_argmax", ctx.row_argmax(Shape::new(3, 0), &empty, &mut idx)),
        ] {
            assert!(matches!(r, Err(Error::EmptyInput { op }) if op == name), "{name}: {r:?}");
        }
        // Float-only ops through the untyped entry points on integers (the named methods
        // do not compile for them).
        let ints = ctx.alloc_upload(&[4i32, 9])?;
        let mut iout = ctx.alloc_upload(&[5i32, 5])?;
        let r = ctx.unary(UnaryOp::Sqrt, &ints, &mut iout);
        assert!(matches!(r, Err(Error::Unsupported { ref what, .. }) if what.contains("sqrt") && what.contains("i32")), "{r:?}");
        let r = ctx.binary_scalar(BinaryOp::Pow, &ints, 2, &mut iout);
        assert!(matches!(r, Err(Error::Unsupported { ref what, .. }) if what.contains("pow")), "{r:?}");
        // A batch whose outputs would overlap; operands that are not their batch's span.
        let g = Gemm::<f32>::new(1, 2, 3).strided(2, 3, 0, 1);
        let (a6, b6) = (ctx.alloc_upload(&[1.0f32; 6])?, ctx.alloc_upload(&[1.0f32; 6])?);
        let mut c3 = ctx.alloc_upload(&[-5.0f32; 3])?;
        let r = ctx.gemm(g, &a6, &b6, &mut c3);
        assert!(matches!(r, Err(Error::InvalidShape { op: "gemm", arg: "c", ref message }) if message.contains("overlap")), "{r:?}");
        let mut c4 = ctx.alloc_upload(&[-5.0f32; 4])?;
        assert_mismatch(ctx.gemm(Gemm::<f32>::new(1, 2, 3).batched(2), &a6, &b6, &mut c4), 12, 6);
        assert_mismatch(ctx.gemm(Gemm::<f32>::new(1, 2, 3).batched(3), &a6, &b6, &mut c4), 9, 6);
        // An index reduction whose indices would not fit the u32 result (nothing is run).
        let huge = Shape::new(1, (u32::MAX as usize) + 2);
        let mut one = ctx.alloc_upload(&[9u32])?;
        match ctx.alloc_zeros::<u8>(huge.cols) {
            Ok(big) => {
                let r = ctx.row_argmax(huge, &big, &mut one);
                assert!(matches!(r, Err(Error::InvalidShape { op: "row_argmax", arg: "x", .. })), "{r:?}");
            }
            // A wgpu buffer holds at most the adapter's largest buffer (2 GiB on lavapipe):
            // the 4 GiB input cannot exist there, which the typed error says.
            Err(Error::OutOfMemory { .. }) if ctx.backend_name() == "vulkan" => {}
            Err(e) => return Err(e),
        }
        // Nothing was written.
        ctx.sync()?;
        assert_eq!(out.download()?, [-1.0; 6]);
        assert_eq!(x.download()?, [-2.0; 6]);
        assert_eq!(rows_out.download()?, [-3.0; 2]);
        assert_eq!(idx.download()?, [7; 3]);
        assert_eq!(iout.download()?, [5, 5]);
        assert_eq!(c3.download()?, [-5.0; 3]);
        assert_eq!(c4.download()?, [-5.0; 4]);
        assert_eq!(one.download()?, [9]);
        Ok(())
    }

    fn kernel_source_that_does_not_compile_is_kernel_compile(ctx) {
        // CUDA compiles the source (NVRTC) or loads the PTX: bad code is KernelCompile with
        // the compiler's log. The CPU backend never compiles CUDA C or PTX: the same specs
        // with a CPU closure load and run there, which this checks instead.
        // SAFETY: none of these loads on CUDA, so none runs there; the CPU runs the closure.
        let specs = unsafe {
            [
                ("syntax error", ones_spec(KernelSpec::cuda(BROKEN_SRC, "broken").wgsl(BROKEN_WGSL))),
                ("no such entry point", ones_spec(KernelSpec::cuda(BROKEN_SRC.replace("+;", ";"), "missing").wgsl(BROKEN_WGSL.replace("+;", ";")))),
                ("malformed PTX, ill-typed WGSL", ones_spec(KernelSpec::ptx("this is not PTX", "broken").wgsl(ILL_TYPED_WGSL))),
            ]
        };
        let mut out = ctx.alloc_upload(&[-1.0f32; 4])?;
        for (what, spec) in specs {
            let name = spec.desc().name.clone();
            let r = ctx.kernel(spec);
            if ctx.backend_name() == "cpu" {
                let k = r.unwrap_or_else(|e| panic!("{what}: the CPU closure should load: {e:?}"));
                ctx.launch(&k, LaunchConfig::linear(1, 4), (&mut out,))?;
                assert_eq!(out.download()?, [1.0; 4], "{what}");
                ctx.fill(&mut out, -1.0)?;
                continue;
            }
            match r {
                Err(Error::KernelCompile { kernel, log }) => {
                    assert_eq!(kernel, name, "{what}");
                    assert!(!log.is_empty(), "{what}: an empty compiler log");
                }
                Err(e) => panic!("{what}: expected KernelCompile, got {e:?}"),
                Ok(k) => panic!("{what}: the kernel loaded: {k:?}"),
            }
        }
        // The context is still usable and nothing was written.
        assert_eq!(out.download()?, [-1.0; 4]);
        // SAFETY: the fixed `broken(float* out)` writes `out[threadIdx.x]`, one `Out<f32>`
        // of 4 elements launched with 4 threads.
        let fixed = unsafe {
            KernelSpec::cuda(BROKEN_SRC.replace("+;", ";"), "broken").wgsl(BROKEN_WGSL.replace("+;", ";"))
        };
        let k = ctx.kernel(ones_spec(fixed))?;
        ctx.launch(&k, LaunchConfig::linear(1, 4), (&mut out,))?;
        assert_eq!(out.download()?, [1.0; 4]);
        Ok(())
    }
}

cpu_tests! {
    fn a_failing_cpu_kernel_is_kernel_failed_and_does_not_poison(ctx) {
        // The CPU backend has no poisoned state: a panicking closure is KernelFailed at the
        // next sync and the context stays usable. A faulting CUDA kernel poisons the context
        // instead: tests/cuda_poison.rs, its own process.
        let k = ctx.kernel(KernelSpec::<(Out<f32>,)>::named("explodes").cpu(|t, (out,)| {
            let i = t.x();
            if i == 2 {
                panic!("kernel closure panicked on purpose (bad_input test)");
            }
            out[i] = 1.0;
        }))?;
        let mut out = ctx.alloc_upload(&[-1.0f32; 4])?;
        // The launch is queued and succeeds; the failure comes back from the next sync.
        ctx.launch(&k, LaunchConfig::linear(1, 4), (&mut out,))?;
        match ctx.sync() {
            Err(e) => assert!(
                matches!(e.root(), Error::KernelFailed { kernel, message } if kernel == "explodes" && message.contains("on purpose")),
                "expected KernelFailed, got {e:?}"
            ),
            Ok(()) => panic!("a panicking kernel was not reported"),
        }
        // Reported once, and the context works: no Poisoned.
        ctx.sync()?;
        let a = ctx.alloc_upload(&[1.0f32, 2.0])?;
        assert_eq!(ctx.sum(&a)?, 3.0);
        ctx.fill(&mut out, 5.0)?;
        assert_eq!(out.download()?, [5.0; 4]);
        Ok(())
    }
}

#[test]
fn a_configured_gpu_that_cannot_be_used_follows_the_fallback_policy() {
    // gpu.toml naming a GPU that does not exist (no env vars: those are process-global and
    // tested in tests/selection.rs). Device 999 never exists.
    let path = Path::new("conf/gpu.toml");
    let strict = Config::from_toml("device = \"cuda:999\"\nfallback = \"error\"", path)
        .expect("a valid file");
    assert_eq!(strict.fallback, FallbackPolicy::Error);
    let lenient =
        Config::from_toml("device = \"cuda:999\"", path).expect("a valid file, fallback = cpu");
    let is_unusable = |r: gpukit::Result<gpukit::Context>, what: &str| match r {
        Err(Error::Unavailable {
            backend: "cuda", ..
        }) => {}
        Err(Error::InvalidDevice {
            backend: "cuda",
            ordinal: 999,
            ..
        }) => {}
        other => panic!("{what}: expected Unavailable or InvalidDevice, got {other:?}"),
    };
    let file = SpecOrigin::File(path.to_path_buf());
    is_unusable(
        gpukit::Context::with_config(&strict, file.clone()),
        "file, fallback = error",
    );
    // Code and GPU_DEVICE never fall back, whatever the file says.
    is_unusable(
        gpukit::Context::with_config(&lenient, SpecOrigin::Explicit),
        "explicit",
    );
    is_unusable(
        gpukit::Context::with_config(&lenient, SpecOrigin::Env),
        "env",
    );
    // The file's default policy falls back to the CPU and records why.
    let ctx = gpukit::Context::with_config(&lenient, file).expect("fallback to the CPU");
    assert_eq!(ctx.backend_name(), "cpu");
    let rejected = &ctx.selection().rejected;
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    assert!(matches!(
        rejected[0].reason,
        Error::Unavailable { .. } | Error::InvalidDevice { .. }
    ));
}
