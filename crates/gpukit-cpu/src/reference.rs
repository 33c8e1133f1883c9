//! Reference results for tests: the textbook definition of an op, computed naively in f64,
//! that every backend's result is compared against (this backend's too: its gemm runs
//! `matrixmultiply`, whose blocking and summation order are its own).
//!
//! Nothing here is fast or used by the backend: each function is the loop a reader can check
//! against the op's documentation at a glance, so that a test compares with something
//! independent of the code under test.
//!
//! ```
//! use gpukit::Gemm;
//! use gpukit::cpu::reference;
//!
//! // [1 2; 3 4] * [5 6; 7 8]
//! let c = reference::gemm(&Gemm::<f32>::new(2, 2, 2), &[1.0, 2.0, 3.0, 4.0], &[5.0, 6.0, 7.0, 8.0], &[])?;
//! assert_eq!(c, [19.0, 22.0, 43.0, 50.0]);
//! // Slices shorter than the shapes are an error, as they are for the backends' gemm.
//! assert!(reference::gemm(&Gemm::<f32>::new(2, 2, 2), &[1.0], &[5.0], &[]).is_err());
//! # Ok::<(), gpukit::Error>(())
//! ```

use gpukit_core::{Error, Gemm, Numeric, Result};

/// `alpha op(A) op(B) + beta C` in f64, row-major, as [`Gemm`] defines it: the products of
/// the exact f64 values of the elements, summed in order. `C` is not read when `beta` is
/// zero (it may then be empty), as the backends ignore it then, NaNs included.
///
/// A slice shorter than `g`'s shapes require (`m * k`, `k * n`, and `m * n` for `c` when
/// `beta` is not zero) is [`Error::LengthMismatch`].
pub fn gemm<T: Numeric>(g: &Gemm<T>, a: &[T], b: &[T], c: &[T]) -> Result<Vec<f64>> {
    terms_summed(g, a, b, c, |x| x)
}

/// For each entry of [`gemm`]'s result, the sum of the magnitudes of the terms it adds up:
/// `|alpha| sum_l |op(A)[i][l] op(B)[l][j]| + |beta C[i][j]|` (without the last term when
/// `beta` is zero). The rounding error of any summation order is bounded in proportion to
/// it, so tests scale their tolerances by it.
///
/// Lengths are checked as for [`gemm`].
pub fn gemm_magnitudes<T: Numeric>(g: &Gemm<T>, a: &[T], b: &[T], c: &[T]) -> Result<Vec<f64>> {
    terms_summed(g, a, b, c, f64::abs)
}

/// `alpha sum_l term(op(A)[i][l] op(B)[l][j]) + term(beta C[i][j])` per entry, with
/// `term(alpha)` for the scale when `term` is `abs`.
fn terms_summed<T: Numeric>(
    g: &Gemm<T>,
    a: &[T],
    b: &[T],
    c: &[T],
    term: impl Fn(f64) -> f64,
) -> Result<Vec<f64>> {
    let (m, n, k) = (g.m, g.n, g.k);
    let beta_reads_c = g.beta.to_f64() != 0.0;
    for (arg, got, expected) in [
        ("a", a.len(), m.saturating_mul(k)),
        ("b", b.len(), k.saturating_mul(n)),
        (
            "c",
            if beta_reads_c { c.len() } else { usize::MAX },
            m.saturating_mul(n),
        ),
    ] {
        if got < expected {
            return Err(Error::LengthMismatch {
                op: "reference::gemm",
                arg,
                expected,
                got,
            });
        }
    }
    let a_at = |i: usize, l: usize| op_at(a, g.trans_a, m, k, i, l);
    let b_at = |l: usize, j: usize| op_at(b, g.trans_b, k, n, l, j);
    let (alpha, beta) = (term(g.alpha.to_f64()), g.beta.to_f64());
    let mut out = Vec::with_capacity(m * n);
    for i in 0..m {
        for j in 0..n {
            let products: f64 = (0..k).map(|l| term(a_at(i, l) * b_at(l, j))).sum();
            let scaled_c = if beta == 0.0 {
                0.0
            } else {
                term(beta * c[i * n + j].to_f64())
            };
            out.push(alpha * products + scaled_c);
        }
    }
    Ok(out)
}

/// Entry `(r, c)` of `op(X)`, a `rows x cols` matrix stored row-major as `X`, or as `X^T`
/// (`cols x rows`) when `trans`.
fn op_at<T: Numeric>(x: &[T], trans: bool, rows: usize, cols: usize, r: usize, c: usize) -> f64 {
    let stored = if trans { c * rows + r } else { r * cols + c };
    x[stored].to_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transposes_read_the_stored_layout() {
        // A = [1 2 3; 4 5 6] (2 x 3), B = [1 0; 0 1; 1 1] (3 x 2): A B = [4 5; 10 11].
        let a = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let a_t = [1.0, 4.0, 2.0, 5.0, 3.0, 6.0];
        let b = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0];
        let b_t = [1.0, 0.0, 1.0, 0.0, 1.0, 1.0];
        let want = [4.0, 5.0, 10.0, 11.0];
        for (ta, tb, a, b) in [
            (false, false, &a, &b),
            (true, false, &a_t, &b),
            (false, true, &a, &b_t),
            (true, true, &a_t, &b_t),
        ] {
            let g = Gemm::<f64>::new(2, 2, 3).transpose(ta, tb);
            assert_eq!(gemm(&g, a, b, &[]).unwrap(), want, "{ta} {tb}");
        }
    }

    #[test]
    fn scales_and_ignores_c_when_beta_is_zero() {
        let g = Gemm::<f32>::new(1, 1, 2).scaled(-2.0, 0.5);
        assert_eq!(
            gemm(&g, &[1.0, 2.0], &[3.0, -4.0], &[10.0]).unwrap(),
            [-2.0 * -5.0 + 5.0]
        );
        let g = Gemm::<f32>::new(1, 1, 1).scaled(1.0, 0.0);
        assert_eq!(gemm(&g, &[2.0], &[3.0], &[f32::NAN]).unwrap(), [6.0]);
    }

    #[test]
    fn magnitudes_sum_absolute_terms() {
        let g = Gemm::<f64>::new(1, 1, 2).scaled(-2.0, -0.5);
        // |-2| (|1 * 3| + |2 * -4|) + |-0.5 * 10|
        assert_eq!(
            gemm_magnitudes(&g, &[1.0, 2.0], &[3.0, -4.0], &[10.0]).unwrap(),
            [27.0]
        );
    }
}
