//! Arrays, host buffers, events and launches of one context handed to another.

use super::*;

backend_tests! {
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
}
