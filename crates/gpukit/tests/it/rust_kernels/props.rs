//! The language's kernels on random inputs, on every backend, against the same computation
//! in plain Rust, bit for bit: integer arithmetic over the whole `i32` range (the edges drawn
//! often), casts and `if` values over the whole `u32` range, loops with random trip counts,
//! and a generic kernel's integer instantiations.

use gpukit::LaunchConfig;
use proptest::collection::vec;
use proptest::prelude::*;

use super::language::{axpy1, casts, casts_ref, int_ops, int_ops_ref, loops, loops_ref};
use crate::props::{check, OrFail};

/// Any `i32`, the edges (0, ±1, MIN, MAX, ...) one draw in four.
fn int() -> impl Strategy<Value = i32> {
    prop_oneof![
        1 => prop::sample::select(vec![0, 1, -1, 2, -2, 31, 32, i32::MIN, i32::MAX, i32::MIN + 1]),
        3 => any::<i32>(),
    ]
}

crate::backend_tests! {
    fn kernel_integer_arithmetic_matches_rust_on_random_values(ctx) {
        let k = ctx.kernel(int_ops())?;
        check(16, vec((int(), int()), 0..300), |pairs| {
            let (a, b): (Vec<i32>, Vec<i32>) = pairs.into_iter().unzip();
            let (da, db) = (ctx.alloc_upload(&a).tc()?, ctx.alloc_upload(&b).tc()?);
            let mut out = ctx.alloc_zeros::<i32>(a.len() * 8).tc()?;
            ctx.launch(&k, LaunchConfig::for_elems(a.len().max(1)), (&da, &db, &mut out)).tc()?;
            prop_assert_eq!(out.download().tc()?, int_ops_ref(&a, &b));
            Ok(())
        })
    }

    fn kernel_casts_match_rust_on_random_values(ctx) {
        let k = ctx.kernel(casts())?;
        check(16, vec(any::<u32>(), 0..500), |a| {
            let da = ctx.alloc_upload(&a).tc()?;
            let mut out = ctx.alloc_zeros::<f32>(a.len()).tc()?;
            let mut bits = ctx.alloc_zeros::<u32>(a.len()).tc()?;
            ctx.launch(&k, LaunchConfig::for_elems(a.len().max(1)), (&da, &mut out, &mut bits)).tc()?;
            let (want_out, want_bits) = casts_ref(&a);
            prop_assert_eq!(out.download().tc()?, want_out);
            prop_assert_eq!(bits.download().tc()?, want_bits);
            Ok(())
        })
    }

    fn kernel_loops_match_rust_on_random_trip_counts(ctx) {
        let k = ctx.kernel(loops())?;
        check(16, (vec(0u32..300, 0..200), 1u32..5), |(n, blocks)| {
            let dn = ctx.alloc_upload(&n).tc()?;
            let mut out = ctx.alloc_zeros::<u32>(n.len()).tc()?;
            // At least as many threads as elements; the rest return early.
            let threads = (n.len() as u32).div_ceil(blocks).max(1);
            ctx.launch(&k, LaunchConfig::linear(blocks, threads), (&dn, &mut out)).tc()?;
            prop_assert_eq!(out.download().tc()?, loops_ref(&n));
            Ok(())
        })
    }

    fn kernel_generic_integer_instantiations_match_rust(ctx) {
        let (ki, ku) = (ctx.kernel(axpy1::<i32>())?, ctx.kernel(axpy1::<u32>())?);
        check(16, (vec((int(), int()), 0..300), int()), |(xy, a)| {
            let (x, y): (Vec<i32>, Vec<i32>) = xy.into_iter().unzip();
            let cfg = LaunchConfig::for_elems(x.len().max(1));
            let dx = ctx.alloc_upload(&x).tc()?;
            let mut dy = ctx.alloc_upload(&y).tc()?;
            ctx.launch(&ki, cfg, (a, &dx, &mut dy)).tc()?;
            let want: Vec<i32> = x.iter().zip(&y).map(|(&x, &y)| y.wrapping_add(a.wrapping_mul(x)).wrapping_add(1)).collect();
            prop_assert_eq!(dy.download().tc()?, want);
            let (xu, yu): (Vec<u32>, Vec<u32>) = (x.iter().map(|&v| v as u32).collect(), y.iter().map(|&v| v as u32).collect());
            let dx = ctx.alloc_upload(&xu).tc()?;
            let mut dy = ctx.alloc_upload(&yu).tc()?;
            ctx.launch(&ku, cfg, (a as u32, &dx, &mut dy)).tc()?;
            let want: Vec<u32> = xu.iter().zip(&yu).map(|(&x, &y)| y.wrapping_add((a as u32).wrapping_mul(x)).wrapping_add(1)).collect();
            prop_assert_eq!(dy.download().tc()?, want);
            Ok(())
        })
    }
}
