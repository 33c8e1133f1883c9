//! Arrays and views: round trips for every element type, empty arrays, device-to-device copies, views, device info.

use super::*;

backend_tests! {
    fn round_trips_every_element_type(ctx) {
        round_trip(ctx, &[0.0f32, -0.0, 1.5, -2.25, f32::MAX, f32::MIN_POSITIVE, f32::INFINITY, f32::NAN])?;
        round_trip(ctx, &[0.0f64, -1e300, 1e-300, std::f64::consts::PI, f64::NEG_INFINITY, f64::NAN])?;
        round_trip(ctx, &(-50..50).map(|i| i * 40_000_000).collect::<Vec<i32>>())?;
        round_trip(ctx, &[0u32, 1, u32::MAX, 0xdead_beef, 7])?;
        round_trip(ctx, &[i64::MIN, -1, 0, 1, i64::MAX, 0x1234_5678_9abc])?;
        round_trip(ctx, &[0u64, u64::MAX, 1 << 63, 42])?;
        round_trip(ctx, &(0..=255).collect::<Vec<u8>>())?;
        round_trip(ctx, &(-128..=127).collect::<Vec<i8>>())?;
        // Odd lengths and a length that is not a multiple of anything a backend might vector.
        round_trip(ctx, &(0..1001).map(|i| i as f32 * 0.25).collect::<Vec<_>>())?;
        Ok(())
    }

    fn zero_length_arrays(ctx) {
        round_trip::<f32>(ctx, &[])?;
        round_trip::<u8>(ctx, &[])?;
        let a = ctx.alloc::<f64>(0)?;
        assert!(a.is_empty());
        assert_eq!(a.size_bytes(), 0);
        let b = ctx.alloc_upload::<f64>(&[])?;
        let mut out = ctx.alloc_zeros::<f64>(0)?;
        ctx.add(&a, &b, &mut out)?;
        ctx.exp(&a, &mut out)?;
        ctx.fill(&mut out, 1.0)?;
        ctx.scale(2.0, &mut out)?;
        ctx.axpy(2.0, &a, &mut out)?;
        assert_eq!(out.download()?, Vec::<f64>::new());
        // Empty reductions: sum and dot are zero (max is an error, see bad_input.rs).
        assert_eq!(ctx.sum(&a)?, 0.0);
        assert_eq!(ctx.dot(&a, &b)?, 0.0);
        let mut one = ctx.alloc_upload(&[5i32])?;
        let e = ctx.alloc_zeros::<i32>(0)?;
        ctx.sum_into(&e, &mut one)?;
        assert_eq!(one.download()?, [0]);
        ctx.fill(&mut one, 5)?;
        ctx.dot_into(&e, &e, &mut one)?;
        assert_eq!(one.download()?, [0]);
        // Empty views and async copies of nothing.
        let v = ctx.alloc_upload(&[1u8, 2, 3])?;
        assert_eq!(v.slice(3..)?.download()?, Vec::<u8>::new());
        let s = ctx.create_stream()?;
        let mut e = ctx.alloc::<u8>(0)?;
        let p = s.upload(Vec::<u8>::new(), &mut e)?;
        assert!(p.wait()?.is_empty());
        let host = ctx.alloc_host::<u8>(0, HostUse::Download)?;
        let host = s.download(&e, host)?.wait()?;
        assert!(host.is_empty());
        Ok(())
    }

    fn copy_to_and_stream_copy_between_arrays_and_views(ctx) {
        let data: Vec<i64> = (0..64).map(|i| i * i - 100).collect();
        let a = ctx.alloc_upload(&data)?;
        // copy_to into a view of a larger array changes only that range.
        let mut big = ctx.alloc_upload(&vec![-1i64; 100])?;
        a.copy_to(&mut big.slice_mut(10..74)?)?;
        let mut want = vec![-1i64; 100];
        want[10..74].copy_from_slice(&data);
        assert_eq!(big.download()?, want);

        // Between two halves of one array, on the default stream and on another stream.
        let mut c = ctx.alloc_upload(&data)?;
        {
            let (left, mut right) = c.split_at_mut(32)?;
            assert_eq!((left.len(), right.len()), (32, 32));
            assert_eq!(right.offset(), 32);
            ctx.copy(&left, &mut right)?;
        }
        let mut want = data.clone();
        want.copy_within(0..32, 32);
        assert_eq!(c.download()?, want);

        let s = ctx.create_stream()?;
        {
            let (mut left, right) = c.split_at_mut(32)?;
            let mut head = left.slice_mut(0..8)?;
            s.copy(&right.as_view().slice(24..32)?, &mut head)?;
        }
        want.copy_within(56..64, 0);
        assert_eq!(c.download()?, want);

        // A view as the source of copy to another array.
        let mut d = ctx.alloc_zeros::<i64>(10)?;
        ctx.copy(&a.slice(5..15)?, &mut d)?;
        assert_eq!(d.download()?, &data[5..15]);
        Ok(())
    }

    fn views_read_and_write_only_their_range(ctx) {
        let data: Vec<i32> = (0..20).collect();
        let mut a = ctx.alloc_upload(&data)?;
        {
            let v = a.slice(5..15)?;
            assert_eq!((v.len(), v.offset()), (10, 5));
            assert_eq!(v.download()?, &data[5..15]);
            let w = v.slice(2..=4)?;
            assert_eq!((w.len(), w.offset()), (3, 7));
            assert_eq!(w.download()?, &data[7..10]);
            let x = w.slice(1..)?;
            assert_eq!(x.download()?, &data[8..10]);
            assert_eq!(a.slice(..)?.download()?, data);
            assert_eq!(a.slice(..4)?.download()?, &data[..4]);
            assert_eq!(a.slice(17..)?.download()?, &data[17..]);
            assert!(a.slice(20..)?.is_empty());
            // Ops read views too.
            assert_eq!(ctx.sum(&v)?, (5..15).sum::<i32>());
            assert_eq!(ctx.max(&w)?, 9);
        }
        let mut want = data.clone();
        {
            let mut m = a.slice_mut(3..9)?;
            ctx.fill(&mut m, -1)?;
            for v in &mut want[3..9] {
                *v = -1;
            }
            let mut inner = m.slice_mut(1..3)?; // elements 4..6
            assert_eq!(inner.offset(), 4);
            ctx.fill(&mut inner, 7)?;
            want[4..6].fill(7);
            inner.upload(&[8, 9])?;
            want[4..6].copy_from_slice(&[8, 9]);
            assert_eq!(inner.download()?, [8, 9]);
            assert_eq!(m.download()?, &want[3..9]);
        }
        assert_eq!(a.download()?, want);
        {
            let mut m = a.slice_mut(12..16)?;
            ctx.scale(10, &mut m)?;
            for v in &mut want[12..16] {
                *v *= 10;
            }
        }
        assert_eq!(a.download()?, want);
        // An op whose inputs and output are views of different arrays.
        let b = ctx.alloc_upload(&data)?;
        let mut c = ctx.alloc_zeros::<i32>(20)?;
        ctx.add(&a.slice(0..5)?, &b.slice(15..20)?, &mut c.slice_mut(10..15)?)?;
        let mut wc = vec![0; 20];
        for i in 0..5 {
            wc[10 + i] = want[i] + data[15 + i];
        }
        assert_eq!(c.download()?, wc);
        Ok(())
    }

    fn device_info_is_sensible(ctx) {
        let info = ctx.info();
        assert!(!info.name.trim().is_empty());
        assert!(info.total_memory > 0);
        assert!(info.limits.max_threads_per_block >= 1);
        assert!(info.limits.max_block_dim.iter().all(|&d| d >= 1));
        assert!(info.limits.max_grid_dim.iter().all(|&d| d >= 1));
        assert!(info.multiprocessors >= 1);
        let (least, greatest) = info.priority_range;
        assert!(greatest <= least);
        match ctx.backend_name() {
            "cpu" => {
                assert_eq!(info.compute_capability, None);
                assert_eq!(info.limits, gpukit::LaunchLimits::CUDA_COMMON);
                assert_eq!(ctx.device_id(), 0);
            }
            "cuda" => assert!(info.compute_capability.is_some()),
            "vulkan" => {
                assert_eq!(info.compute_capability, None);
                // WGSL fixes workgroup memory at compile time: no dynamic shared memory.
                assert_eq!(info.limits.max_shared_mem_per_block, 0);
                for d in [gpukit::DType::F32, gpukit::DType::I32, gpukit::DType::U32] {
                    assert!(info.op_dtypes.contains(&d), "{d} ops on every adapter");
                }
            }
            other => panic!("unknown backend {other}"),
        }
        Ok(())
    }
}
