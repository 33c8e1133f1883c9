//! Comparisons, `select`, `count_eq_into`, the column reductions and `reduce` along either
//! axis, `gather_rows`, `scatter_add_rows`, `one_hot`, `arange` and `permutation` on every
//! backend, against gpukit-core's references (`optable::index`, `reduce_cols`): exactly,
//! but float sums within the sums' tolerance; a bad index leaves its row zero (or
//! unscattered) and is `KernelFailed` at the next sync, with the context usable after.

use super::*;
use gpukit::core::optable::{
    arange_slice, compare_slice, gather_rows, one_hot_rows, permutation, reduce_cols,
    scatter_add_rows, where_slice, CmpOp,
};
use gpukit::{Error, ReduceOp};

/// Every comparison against arrays and scalars, `select` with both, and `count_eq_into`.
pub(super) fn compare_and_select<T: Cross>(ctx: &Context) -> gpukit::Result<()> {
    let case = length(600).prop_flat_map(|n| {
        (
            vec(T::edgy(), n),
            vec(T::edgy(), n),
            vec(any::<bool>(), n),
            T::edgy(),
        )
    });
    check(10, case, |(a, b0, same, s)| {
        // Half the pairs equal, so that every comparison sees both answers.
        let b: Vec<T> = b0
            .iter()
            .zip(&a)
            .zip(&same)
            .map(|((&b, &a), &eq)| if eq { a } else { b })
            .collect();
        let n = a.len();
        let (da, db) = (ctx.alloc_upload(&a).tc()?, ctx.alloc_upload(&b).tc()?);
        for op in CmpOp::ALL {
            let mut m = ctx.alloc::<u8>(n).tc()?;
            ctx.compare(op, &da, &db, &mut m).tc()?;
            let mut want = vec![0u8; n];
            compare_slice(op, &a, |i| b[i], &mut want);
            prop_assert_eq!(&m.download().tc()?, &want, "{:?} {}", op, T::DTYPE);
            ctx.compare_scalar(op, &da, s, &mut m).tc()?;
            compare_slice(op, &a, |_| s, &mut want);
            prop_assert_eq!(&m.download().tc()?, &want, "{:?} scalar {}", op, T::DTYPE);
        }
        let mut mask = ctx.alloc::<u8>(n).tc()?;
        ctx.lt(&da, &db, &mut mask).tc()?;
        let hm = mask.download().tc()?;
        let mut out = ctx.alloc::<T>(n).tc()?;
        ctx.select(&mask, &da, &db, &mut out).tc()?;
        let mut want = vec![s; n];
        where_slice(&hm, &a, |i| b[i], &mut want);
        let got = out.download().tc()?;
        prop_assert!(
            got.iter().zip(&want).all(|(g, w)| g.same(*w)),
            "select {}",
            T::DTYPE
        );
        ctx.select_scalar(&mask, &da, s, &mut out).tc()?;
        where_slice(&hm, &a, |_| s, &mut want);
        let got = out.download().tc()?;
        prop_assert!(got.iter().zip(&want).all(|(g, w)| g.same(*w)));
        let mut count = ctx.alloc::<u32>(1).tc()?;
        ctx.count_eq_into(&da, &db, &mut count).tc()?;
        let want = a
            .iter()
            .zip(&b)
            .filter(|(x, y)| x.to_f64() == y.to_f64())
            .count();
        prop_assert_eq!(
            count.download().tc()?[0] as usize,
            want,
            "count_eq {}",
            T::DTYPE
        );
        Ok(())
    })
}

/// Every reduction of every column (and `reduce` along both axes) against the reference.
pub(super) fn columns_vs_reference<T: Cross>(ctx: &Context) -> gpukit::Result<()> {
    let case = (1..12usize, 1..40usize)
        .prop_flat_map(|(r, c)| (Just(Shape::new(r, c)), vec(T::plain(), r * c)));
    check(12, case, |(shape, x)| {
        let dx = ctx.alloc_upload(&x).tc()?;
        for op in ReduceOp::ALL {
            if op == ReduceOp::Mean && !T::DTYPE.is_float() {
                continue;
            }
            let (mut values, mut idx) = (vec![T::ZERO; shape.cols], vec![0u32; shape.cols]);
            reduce_cols(op, &x, shape.cols, &mut values, &mut idx);
            if op.is_index() {
                let mut out = ctx.alloc::<u32>(shape.cols).tc()?;
                ctx.reduce(op, 0, shape, &dx, &mut out).tc()?;
                prop_assert_eq!(&out.download().tc()?, &idx, "{:?} {}", op, T::DTYPE);
                continue;
            }
            let mut out = ctx.alloc::<T>(shape.cols).tc()?;
            ctx.reduce(op, 0, shape, &dx, &mut out).tc()?;
            let got = out.download().tc()?;
            for (j, (&g, &w)) in got.iter().zip(&values).enumerate() {
                let ok = match op {
                    ReduceOp::Sum | ReduceOp::Mean => {
                        let scale: f64 = (0..shape.rows)
                            .map(|r| x[r * shape.cols + j].to_f64().abs())
                            .sum();
                        T::sums_agree(w, g, shape.rows, scale)
                    }
                    _ => g.same_value(w),
                };
                prop_assert!(
                    ok,
                    "col {:?} {} [{}] of {:?}: {:?}, reference {:?}",
                    op,
                    T::DTYPE,
                    j,
                    shape,
                    g,
                    w
                );
            }
        }
        // Axis 1 is the per-row reduction.
        let (mut by_reduce, mut by_row) = (
            ctx.alloc::<u32>(shape.rows).tc()?,
            ctx.alloc::<u32>(shape.rows).tc()?,
        );
        ctx.reduce(ReduceOp::ArgMax, 1, shape, &dx, &mut by_reduce)
            .tc()?;
        ctx.row_argmax(shape, &dx, &mut by_row).tc()?;
        prop_assert_eq!(by_reduce.download().tc()?, by_row.download().tc()?);
        Ok(())
    })
}

/// `gather_rows`, `scatter_add_rows` and `one_hot` against the references, with indices in
/// range.
pub(super) fn indexing_vs_reference<T: Cross>(ctx: &Context) -> gpukit::Result<()> {
    let case = (1..20usize, 1..9usize, 0..30usize).prop_flat_map(|(rows, cols, n)| {
        (
            Just(Shape::new(rows, cols)),
            vec(T::plain(), rows * cols),
            vec(0..rows as u32, n),
            vec(T::plain(), n * cols),
        )
    });
    check(12, case, |(shape, table, idx, grads)| {
        let (n, cols) = (idx.len(), shape.cols);
        let (dt, di) = (ctx.alloc_upload(&table).tc()?, ctx.alloc_upload(&idx).tc()?);
        let mut out = ctx.alloc::<T>(n * cols).tc()?;
        ctx.gather_rows(shape, &dt, &di, &mut out).tc()?;
        let mut want = vec![T::ZERO; n * cols];
        gather_rows(&table, cols, &idx, &mut want, |_, _| {});
        prop_assert!(out
            .download()
            .tc()?
            .iter()
            .zip(&want)
            .all(|(g, w)| g.same(*w)));

        let classes = shape.rows;
        let mut hot = ctx.alloc::<T>(n * classes).tc()?;
        ctx.one_hot(Shape::new(n, classes), &di, &mut hot).tc()?;
        let mut want = vec![T::ZERO; n * classes];
        one_hot_rows(&idx, classes, &mut want, |_, _| {});
        prop_assert!(hot
            .download()
            .tc()?
            .iter()
            .zip(&want)
            .all(|(g, w)| g.same(*w)));

        if T::DTYPE.size() >= 4 && !(ctx.backend_name() == "vulkan" && T::DTYPE.size() == 8) {
            let dg = ctx.alloc_upload(&grads).tc()?;
            let mut acc = ctx.alloc_upload(&table).tc()?;
            ctx.scatter_add_rows(shape, &dg, &di, &mut acc).tc()?;
            let mut want = table.clone();
            scatter_add_rows(&grads, cols, &idx, &mut want, |_, _| {});
            let got = acc.download().tc()?;
            for (k, (&g, &w)) in got.iter().zip(&want).enumerate() {
                // The finite terms' magnitudes (see `tolerance::atomic_sums_agree`).
                let scale: f64 = std::iter::once(table[k].to_f64().abs())
                    .chain(
                        idx.iter()
                            .enumerate()
                            .filter(|&(_, &i)| i as usize == k / cols)
                            .map(|(r, _)| grads[r * cols + k % cols].to_f64().abs()),
                    )
                    .filter(|x| x.is_finite())
                    .sum();
                // Atomic adds in the element type, in whatever order the threads ran.
                prop_assert!(
                    T::atomic_sums_agree(w, g, n + 1, scale),
                    "scatter_add {} [{}]: {:?}, reference {:?}",
                    T::DTYPE,
                    k,
                    g,
                    w
                );
            }
        } else if T::DTYPE.size() == 8 && !grads.is_empty() {
            // WGSL's atomics are 32-bit: refused, the accumulator untouched.
            let dg = ctx.alloc_upload(&grads).tc()?;
            let mut acc = ctx.alloc_upload(&table).tc()?;
            let r = ctx.scatter_add_rows(shape, &dg, &di, &mut acc);
            prop_assert!(
                matches!(r, Err(gpukit::Error::Unsupported { ref what, .. }) if what.contains("scatter_add_rows")),
                "{:?}",
                r
            );
            prop_assert!(acc
                .download()
                .tc()?
                .iter()
                .zip(&table)
                .all(|(g, w)| g.same(*w)));
        }
        Ok(())
    })
}

/// A bad index: the row stays zero (gather, one-hot) or is not added (scatter), the next
/// sync is `KernelFailed` naming the op and the index, once, and the context works after.
pub(super) fn bad_indices_are_typed_errors(ctx: &Context) -> gpukit::Result<()> {
    let table = ctx.alloc_upload(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])?; // 3 x 2
    let idx = ctx.alloc_upload(&[2u32, 7, 0])?;
    let mut out = ctx.alloc_upload(&[9.0f32; 6])?;
    ctx.gather_rows(Shape::new(3, 2), &table, &idx, &mut out)?;
    let failed = |r: gpukit::Result<()>, op: &str, what: &str| match r {
        Err(Error::KernelFailed { kernel, message }) if kernel == op && message.contains(what) => {}
        other => panic!("{op}: {other:?}"),
    };
    failed(
        ctx.sync(),
        "gather_rows",
        "index 7 is out of bounds for `src` (length 3)",
    );
    ctx.sync()?;
    assert_eq!(out.download()?, [5.0, 6.0, 0.0, 0.0, 1.0, 2.0]);

    let mut acc = ctx.alloc_upload(&[0.0f32; 6])?;
    let grads = ctx.alloc_upload(&[1.0f32; 6])?;
    ctx.scatter_add_rows(Shape::new(3, 2), &grads, &idx, &mut acc)?;
    failed(
        ctx.sync(),
        "scatter_add_rows",
        "index 7 is out of bounds for `out` (length 3)",
    );
    assert_eq!(acc.download()?, [1.0, 1.0, 0.0, 0.0, 1.0, 1.0]);

    let mut hot = ctx.alloc_upload(&[5u8; 9])?;
    ctx.one_hot(Shape::new(3, 3), &idx, &mut hot)?;
    failed(
        ctx.sync(),
        "one_hot",
        "index 7 is out of bounds for `classes` (length 3)",
    );
    assert_eq!(hot.download()?, [0, 0, 1, 0, 0, 0, 1, 0, 0]);

    // Cross-entropy: a label out of range is a NaN loss, reported by the checked form only.
    let logits = ctx.alloc_upload(&[1.0f32, 2.0, 3.0, 0.5, 0.5, 0.5])?; // 2 x 3
    let labels = ctx.alloc_upload(&[2u32, 3])?;
    let mut loss = ctx.alloc::<f32>(2)?;
    ctx.cross_entropy(Shape::new(2, 3), &logits, &labels, &mut loss)?;
    ctx.sync()?;
    let silent = loss.download()?;
    assert!(silent[0].is_finite() && silent[1].is_nan(), "{silent:?}");
    ctx.cross_entropy_checked(Shape::new(2, 3), &logits, &labels, &mut loss)?;
    failed(
        ctx.sync(),
        "cross_entropy_checked",
        "index 3 is out of bounds for `labels` (length 3)",
    );
    let mut grad = ctx.alloc::<f32>(6)?;
    ctx.cross_entropy_grad_checked(Shape::new(2, 3), &logits, &labels, &mut loss, &mut grad)?;
    failed(ctx.sync(), "cross_entropy_grad_checked", "index 3");
    ctx.check_indices(&labels, 4)?;
    ctx.sync()?;

    // Checked before anything is queued: lengths, and 1- or 2-byte scatters.
    let small = ctx.alloc_upload(&[1u8; 6])?;
    let mut small_acc = ctx.alloc_upload(&[0u8; 6])?;
    assert!(matches!(
        ctx.scatter_add_rows(Shape::new(3, 2), &small, &idx, &mut small_acc),
        Err(Error::Unsupported { .. })
    ));
    let mut per_col = ctx.alloc::<f32>(2)?;
    assert!(matches!(
        ctx.reduce(ReduceOp::Sum, 2, Shape::new(3, 2), &table, &mut per_col),
        Err(Error::InvalidArgument {
            op: "reduce",
            arg: "axis",
            ..
        })
    ));
    assert!(matches!(
        ctx.reduce(ReduceOp::ArgMax, 0, Shape::new(3, 2), &table, &mut per_col),
        Err(Error::InvalidArgument {
            op: "reduce",
            arg: "out",
            ..
        })
    ));
    let mut short = ctx.alloc::<f32>(4)?;
    assert!(matches!(
        ctx.gather_rows(Shape::new(3, 2), &table, &idx, &mut short),
        Err(Error::LengthMismatch {
            op: "gather_rows",
            arg: "out",
            ..
        })
    ));
    ctx.sync()
}

/// `arange` against the reference, and `permutation` a bijection equal to the reference.
pub(super) fn arange_and_permutation<T: Cross>(ctx: &Context) -> gpukit::Result<()> {
    let case = (0..3000usize, T::plain(), T::plain(), any::<u64>());
    check(8, case, |(n, start, step, seed)| {
        let mut out = ctx.alloc::<T>(n).tc()?;
        ctx.arange(&mut out, start, step).tc()?;
        let mut want = vec![T::ZERO; n];
        arange_slice(start, step, 0, &mut want);
        prop_assert!(
            out.download()
                .tc()?
                .iter()
                .zip(&want)
                .all(|(g, w)| g.same(*w)),
            "arange {}",
            T::DTYPE
        );
        let mut p = ctx.alloc::<u32>(n).tc()?;
        ctx.permutation(&mut p, seed).tc()?;
        let mut want = vec![0u32; n];
        permutation(seed, n as u64, 0, &mut want);
        let got = p.download().tc()?;
        prop_assert_eq!(&got, &want);
        let mut sorted = got;
        sorted.sort_unstable();
        prop_assert!(sorted.iter().enumerate().all(|(i, &v)| v as usize == i));
        Ok(())
    })
}

/// The new ops allocate nothing, so a captured graph holds them: a permutation, a gather, a
/// count of equal elements and a random fill replay with the graph (graphs exist on CPU and
/// CUDA; Vulkan refuses the capture).
pub(super) fn new_ops_can_be_captured(ctx: &Context) -> gpukit::Result<()> {
    let table = ctx.alloc_upload(&[1u32, 2, 3, 4, 5, 6])?;
    let mut order = ctx.alloc::<u32>(6)?;
    let mut picked = ctx.alloc::<u32>(6)?;
    let mut same = ctx.alloc::<u32>(1)?;
    let mut noise = ctx.alloc::<f32>(8)?;
    let graph = ctx.capture(|s| {
        s.permutation(&mut order, 3)?;
        s.gather_rows(Shape::new(6, 1), &table, &order, &mut picked)?;
        s.count_eq_into(&picked, &table, &mut same)?;
        s.random_uniform(&mut noise, 0.0, 1.0, 9, 0)
    });
    let graph = match graph {
        Err(Error::Unsupported { .. }) if ctx.backend_name() == "vulkan" => return Ok(()),
        other => other?,
    };
    graph.launch(ctx)?;
    let mut want = vec![0u32; 6];
    permutation(3, 6, 0, &mut want);
    let picked_want: Vec<u32> = want.iter().map(|&i| i + 1).collect();
    assert_eq!(order.download()?, want);
    assert_eq!(picked.download()?, picked_want);
    let fixed = want
        .iter()
        .enumerate()
        .filter(|&(i, &v)| i as u32 == v)
        .count();
    assert_eq!(same.download()?, [fixed as u32]);
    assert!(noise.download()?.iter().all(|v| (0.0..1.0).contains(v)));
    Ok(())
}
