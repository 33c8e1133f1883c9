//! The comparisons of `cross.rs` refuse known-wrong results and accept right ones, on the
//! host: a comparison that accepts anything would let a GPU run go green without having
//! verified anything. The wrong results are the faults an audit planted: an element 1 ulp
//! off where bits must match, two elements swapped, NaN for a number, a sum of 0, a sum or
//! `max` that lost the last block's partial or the last element (replayed in the CUDA
//! backend's own order, `cross::cuda_order_sum`), a sum accumulated in f32, a gemm entry
//! moved and a gemm with its transposes swapped.

use super::cross::*;
use super::cuda_vs_cpu::{dot_scale, large_inputs, run_gemm, LARGE};
use super::*;

use gpukit::core::half::{bf16, f16};
use gpukit::UnaryOp;

/// `x` moved `steps` ulp up (for positive finite `x`).
fn ulps_up<T: CrossFloat>(x: T, steps: u32) -> T {
    (0..steps).fold(x, |v, _| {
        let up = v.to_f64() + tolerance::ulp(T::DTYPE, v.to_f64());
        T::from_f64(up)
    })
}

fn no_inputs(_: usize) -> String {
    String::new()
}

fn rejects_wrong_elements<T: CrossFloat>() {
    let want: Vec<T> = (1..=8).map(|i| T::from_f64(f64::from(i) * 0.375)).collect();
    let compare = |want: &[T], got: &[T]| same_elements("test", want, got, T::same, no_inputs);
    assert_eq!(compare(&want, &want), Ok(()));

    let mut got = want.clone();
    got[5] = ulps_up(want[5], 1);
    assert_eq!(want[5].ulps(got[5]), 1);
    let e = compare(&want, &got).expect_err("1 ulp off where bits must match");
    assert!(e.contains("[5] of 8"), "{e}");

    let mut got = want.clone();
    got.swap(2, 6);
    let e = compare(&want, &got).expect_err("two elements swapped");
    assert!(e.contains("[2] of 8"), "{e}");

    let nan = T::from_f64(f64::NAN);
    let mut got = want.clone();
    got[0] = nan;
    compare(&want, &got).expect_err("NaN for a number");
    compare(&got, &want).expect_err("a number for NaN");
    assert_eq!(compare(&got, &got), Ok(()), "NaN matches NaN");

    let (zero, neg_zero) = (T::from_f64(0.0), T::from_f64(-0.0));
    compare(&[zero], &[neg_zero]).expect_err("-0.0 for 0.0, bit for bit");
    assert!(zero.same_value(neg_zero), "max compares by value");
    compare(&want, &want[1..]).expect_err("a missing element");

    // The math functions' budgets: the budget passes, one ulp more does not.
    for op in [UnaryOp::Sigmoid, UnaryOp::Tanh, UnaryOp::Exp] {
        let budget = T::ulp_budget(op, 1.0);
        let x = want[3];
        assert!(budget >= 1, "{op:?}");
        assert!(within_ulps(x, ulps_up(x, budget as u32), budget), "{op:?}");
        assert!(
            !within_ulps(x, ulps_up(x, budget as u32 + 1), budget),
            "{op:?}"
        );
    }
    assert_eq!(T::ulp_budget(UnaryOp::Relu, 1.0), 0);
    assert!(!within_ulps(
        T::from_f64(f64::INFINITY),
        T::from_f64(-f64::INFINITY),
        4
    ));
    assert!(!within_ulps(nan, want[0], 4));
}

fn rejects_wrong_int_elements<T: Cross>() {
    let want: Vec<T> = (1..=8).map(|i| T::from_f64(f64::from(i * 3))).collect();
    let compare = |got: &[T]| same_elements("test", &want, got, T::same, no_inputs);
    assert_eq!(compare(&want), Ok(()));
    let mut got = want.clone();
    got[4] = got[4].add(T::from_f64(1.0));
    compare(&got).expect_err("off by one");
    let mut got = want.clone();
    got.swap(0, 7);
    compare(&got).expect_err("two elements swapped");
}

#[test]
fn element_comparisons_reject_an_ulp_a_swap_and_nan_for_a_number() {
    rejects_wrong_elements::<f32>();
    rejects_wrong_elements::<f64>();
    rejects_wrong_elements::<f16>();
    rejects_wrong_elements::<bf16>();
    rejects_wrong_int_elements::<i32>();
    rejects_wrong_int_elements::<u8>();
}

/// The sum comparison on the large inputs: the CUDA order passes; losing the last block's
/// partial or the last element, 0 and NaN fail. The same for dot. With `narrow`, so does
/// accumulating in `T` itself, from the lengths where that loses precision: below 2^18 a
/// running sum of f32 values in steps of 1/64 is still exact.
fn rejects_wrong_float_sums<T: CrossFloat>(narrow: bool) {
    for (i, &len) in LARGE.iter().enumerate() {
        let x = large_inputs::<T>(i as u64 * 4, len);
        for (what, terms, want) in [
            (
                "sum",
                x.a.iter().map(|v| v.to_f64()).collect::<Vec<f64>>(),
                T::sum(&x.a),
            ),
            (
                "dot",
                x.a.iter()
                    .zip(&x.b)
                    .map(|(p, q)| p.to_f64() * q.to_f64())
                    .collect(),
                T::dot(&x.a, &x.b),
            ),
        ] {
            let scale = if what == "sum" {
                terms.iter().map(|t| t.abs()).sum()
            } else {
                dot_scale(&x.a, &x.b)
            };
            let compare = |got: T| compare_sum(what, len, scale, want, got);
            let cuda = |fault| T::from_f64(cuda_order_sum(&terms, fault));
            let show = |e: Result<(), String>| format!("{what} of {len}: {e:?}");

            assert_eq!(compare(cuda(Fault::None)), Ok(()), "{what} of {len}");
            for fault in [Fault::LastPartialLost, Fault::LastElementLost] {
                let e = compare(cuda(fault));
                assert!(e.is_err(), "{fault:?} passed: {}", show(e));
            }
            let e = compare(T::ZERO);
            assert!(e.is_err(), "0 passed: {}", show(e));
            let e = compare(T::from_f64(f64::NAN));
            assert!(e.is_err(), "NaN passed: {}", show(e));
            if narrow && len > 1 << 18 {
                let in_t = terms.iter().fold(T::ZERO, |s, &t| s.add(T::from_f64(t)));
                let e = compare(in_t);
                assert!(
                    e.is_err(),
                    "accumulated in {} passed: {}",
                    T::DTYPE,
                    show(e)
                );
            }
        }
    }
}

#[test]
fn sum_comparisons_reject_lost_partials_lost_elements_and_narrow_accumulation() {
    rejects_wrong_float_sums::<f32>(true);
    rejects_wrong_float_sums::<f64>(false);
    // The 16-bit results are coarse next to the peaks: an accumulation in 16 bits stays
    // within their ulp here. ops.rs catches it on random data.
    rejects_wrong_float_sums::<f16>(false);
    rejects_wrong_float_sums::<bf16>(false);
}

/// Integers wrap, so the comparison is exact: a lost term changes the sum (the peaks are
/// odd and even, and neither vanishes modulo 2^bits).
fn rejects_wrong_int_sums<T: Cross>() {
    for (i, &len) in LARGE.iter().enumerate().skip(1) {
        let x = large_inputs::<T>(i as u64 * 4, len);
        let want = T::sum(&x.a);
        assert_eq!(compare_sum("sum", len, 0.0, want, want), Ok(()));
        let lost_last = T::sum(&x.a[..len - 1]);
        compare_sum("sum", len, 0.0, want, lost_last).expect_err("lost the last element");
        let kept: Vec<T> = (0..len)
            .filter(|&j| !in_last_block(j, len))
            .map(|j| x.a[j])
            .collect();
        compare_sum("sum", len, 0.0, want, T::sum(&kept)).expect_err("lost the last block");
        compare_sum("sum", len, 0.0, want, want.add(T::from_f64(1.0))).expect_err("off by one");
    }
}

#[test]
fn integer_sum_comparisons_reject_lost_terms() {
    rejects_wrong_int_sums::<i32>();
    rejects_wrong_int_sums::<u8>();
    rejects_wrong_int_sums::<i8>();
    rejects_wrong_int_sums::<u64>();
}

/// `max` of the large inputs: losing the last element (on `a`) or the last block (on
/// `b_peaked`) changes it; NaN or an error for a value fails.
fn rejects_wrong_max<T: Cross>() {
    let max = |xs: &[T]| -> gpukit::Result<T> {
        xs.iter()
            .copied()
            .reduce(T::maximum)
            .ok_or(gpukit::Error::EmptyInput { op: "max" })
    };
    for (i, &len) in LARGE.iter().enumerate().skip(1) {
        let x = large_inputs::<T>(i as u64 * 4, len);
        assert_eq!(compare_max("max", len, max(&x.a), max(&x.a)), Ok(()));
        let e = compare_max("max", len, max(&x.a), max(&x.a[..len - 1]));
        assert!(e.is_err(), "max of {len} without its last element passed");
        if partial_blocks(len) > 1 {
            let kept: Vec<T> = (0..len)
                .filter(|&j| !in_last_block(j, len))
                .map(|j| x.b_peaked[j])
                .collect();
            let e = compare_max("max", len, max(&x.b_peaked), max(&kept));
            assert!(e.is_err(), "max of {len} without its last block passed");
        }
        let empty = Err(gpukit::Error::EmptyInput { op: "max" });
        assert!(compare_max("max", len, max(&x.a), empty).is_err());
    }
    assert_eq!(compare_max::<T>("max", 0, max(&[]), max(&[])), Ok(()));
}

#[test]
fn max_comparisons_reject_a_lost_last_element_or_block() {
    rejects_wrong_max::<f32>();
    rejects_wrong_max::<f64>();
    rejects_wrong_max::<f16>();
    rejects_wrong_max::<bf16>();
    rejects_wrong_max::<i32>();
    rejects_wrong_max::<u8>();
    let nan_for_number = compare_max("max", 3, Ok(2.0f32), Ok(f32::NAN));
    assert!(nan_for_number.is_err());
}

/// Sums of random values with heavy cancellation (a vector, its negation in another order
/// and a few small values) in the CUDA backend's order pass: the tolerance is not tighter
/// than the reordering it must allow.
fn accepts_the_cuda_order<T: CrossFloat>() -> gpukit::Result<()> {
    let strategy = (vec(T::plain(), 0..1500), vec(-1.0..1.0f64, 0..8));
    check(32, strategy, |(v, small)| {
        let mut xs = v.clone();
        xs.extend(v.iter().rev().map(|x| T::from_f64(-x.to_f64())));
        xs.extend(small.iter().map(|&s| T::from_f64(s)));
        let terms: Vec<f64> = xs.iter().map(|x| x.to_f64()).collect();
        let scale: f64 = terms.iter().map(|t| t.abs()).sum();
        let got = T::from_f64(cuda_order_sum(&terms, Fault::None));
        compare_sum("sum", xs.len(), scale, T::sum(&xs), got).map_err(TestCaseError::fail)
    })
}

#[test]
fn sum_comparisons_accept_the_cuda_order_on_cancelling_sums() {
    let run = || -> gpukit::Result<()> {
        accepts_the_cuda_order::<f32>()?;
        accepts_the_cuda_order::<f64>()?;
        accepts_the_cuda_order::<f16>()?;
        accepts_the_cuda_order::<bf16>()
    };
    if let Err(e) = run() {
        panic!("{e}");
    }
}

/// A gemm on two CPU contexts passes; the same with two entries swapped, or computed with
/// its transposes swapped (or one dropped, where both are equal), fails.
fn rejects_wrong_gemm<T: CrossFloat>(one: &gpukit::Context, two: &gpukit::Context) {
    let k = 6;
    for (trans_a, trans_b) in [(false, false), (true, false), (false, true), (true, true)] {
        let values = |seed: u32| -> Vec<T> {
            data(seed, k * k)
                .iter()
                .map(|&v| T::from_f64(f64::from(v) / 4.0))
                .collect()
        };
        let g = GemmCase {
            spec: Gemm::new(k, k, k)
                .transpose(trans_a, trans_b)
                .scaled(T::from_f64(1.5), T::from_f64(0.5)),
            a: values(1),
            b: values(2),
            c: values(3),
        };
        let what = format!("{} trans {trans_a} {trans_b}", T::DTYPE);
        let (want, got) = run_gemm(one, two, &g).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(compare_gemm(&g, &want, &got), Ok(()), "{what}");

        let mut moved = got.clone();
        let far = (1..moved.len())
            .find(|&j| !moved[j].same(moved[0]))
            .expect("distinct entries");
        moved.swap(0, far);
        assert!(
            compare_gemm(&g, &want, &moved).is_err(),
            "{what}: swapped entries"
        );

        let mut wrong = g.clone();
        if trans_a == trans_b {
            wrong.spec.trans_a = !trans_a;
        } else {
            (wrong.spec.trans_a, wrong.spec.trans_b) = (trans_b, trans_a);
        }
        let (_, swapped) = run_gemm(one, two, &wrong).unwrap_or_else(|e| panic!("{what}: {e}"));
        let e = compare_gemm(&g, &want, &swapped);
        assert!(e.is_err(), "{what}: transposes swapped passed");
    }
}

#[test]
fn gemm_comparisons_reject_a_moved_entry_and_swapped_transposes() {
    let (Some(one), Some(two)) = (common::cpu(), common::cpu()) else {
        return;
    };
    rejects_wrong_gemm::<f32>(&one, &two);
    rejects_wrong_gemm::<f64>(&one, &two);
    rejects_wrong_gemm::<f16>(&one, &two);
    rejects_wrong_gemm::<bf16>(&one, &two);
}

/// The ulp distance on known neighbours, and the float equalities.
#[test]
fn ulp_distance_and_float_equality() {
    assert_eq!(1.0f32.ulps(f32::from_bits(1.0f32.to_bits() + 2)), 2);
    assert_eq!(0.0f32.ulps(-0.0), 0);
    assert_eq!(f32::from_bits(1).ulps(-f32::from_bits(1)), 2);
    assert_eq!((-1.0f64).ulps(f64::from_bits((-1.0f64).to_bits() + 3)), 3);
    assert_eq!(f64::MAX.ulps(-f64::MAX), 2 * f64::MAX.to_bits());
    assert_eq!(f16::ONE.ulps(f16::from_bits(f16::ONE.to_bits() + 1)), 1);
    assert_eq!(bf16::from_bits(1).ulps(-bf16::from_bits(1)), 2);
    assert_eq!(f16::MAX.ulps(f16::MIN), 2 * u64::from(f16::MAX.to_bits()));
    assert!(within_ulps(f32::INFINITY, f32::INFINITY, 0));
    assert!(!within_ulps(f32::INFINITY, f32::MAX, 4));
    assert!(!within_ulps(f16::INFINITY, f16::MAX, 4));
    assert!(within_ulps(f64::NAN, -f64::NAN, 0));
    assert!(!within_ulps(f64::NAN, 1.0, 4));
    assert!(f32::NAN.same(f32::from_bits(0x7fff_ffff)));
    assert!(bf16::NAN.same(bf16::from_bits(0xffc1)));
    assert!(!0.0f32.same(-0.0));
    assert!(0.0f64.same_value(-0.0));
}
