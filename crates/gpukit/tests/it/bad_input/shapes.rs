//! Arrays, views and ops given the wrong lengths, shapes, types or sizes, and the
//! cases that look wrong but are valid (zero lengths, sums of nothing); errors name the
//! method the user called.

use super::*;

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
        let other = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None))?;
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
}
