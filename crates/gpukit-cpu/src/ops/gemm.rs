//! The gemm family as a task: each product of a batch through our AVX-512 f32 kernel where
//! it is faster (`super::sgemm`), else `matrixmultiply` (f16 and bf16 widened to f32 and
//! rounded back once).

use gpukit_core::{BufAt, DType, Float, Gemm};

use super::ranges::{done, Ranges};
use super::sgemm;
use crate::queue::Task;
use crate::CpuBackend;

/// `C = alpha op(A) op(B) + beta C` for each product of the batch `g` describes, one after
/// another.
///
/// # Safety
///
/// The contract of [`super::task`].
pub(super) unsafe fn gemm<T: Float>(
    g: Gemm<f64>,
    a: BufAt<'_, CpuBackend>,
    b: BufAt<'_, CpuBackend>,
    c: BufAt<'_, CpuBackend>,
) -> Task {
    let typed = Gemm {
        alpha: T::from_f64(g.alpha),
        beta: T::from_f64(g.beta),
        m: g.m,
        n: g.n,
        k: g.k,
        trans_a: g.trans_a,
        trans_b: g.trans_b,
        batch: g.batch,
        stride_a: g.stride_a,
        stride_b: g.stride_b,
        stride_c: g.stride_c,
    };
    let span = |size: usize, stride: usize| g.span(size, stride).unwrap_or(0);
    let mut r = Ranges::default();
    let a = r.src::<T>(a, span(g.m * g.k, g.stride_a));
    let b = r.src::<T>(b, span(g.k * g.n, g.stride_b));
    let c = r.dst::<T>(c, span(g.m * g.n, g.stride_c));
    done(r, move || {
        // SAFETY: the ranges meet this function's contract (live, aligned, ordered, the
        // written one overlapping nothing else).
        let (a, b, c) = unsafe { (a.get(), b.get(), c.get()) };
        let g = &typed;
        let (sa, sb, sc) = (g.m * g.k, g.k * g.n, g.m * g.n);
        for i in 0..g.batch {
            let (ia, ib, ic) = (i * g.stride_a, i * g.stride_b, i * g.stride_c);
            product(g, &a[ia..ia + sa], &b[ib..ib + sb], &mut c[ic..ic + sc]);
        }
    })
}

/// One row-major product of a gemm (see `gpukit_core::Gemm`; the batch is the caller's
/// loop). f32 goes to `sgemm` where it takes the product, else, as f64 does, to
/// matrixmultiply; the 16-bit floats are widened to f32, multiplied, and rounded back once.
pub(super) fn product<T: Float>(g: &Gemm<T>, a: &[T], b: &[T], c: &mut [T]) {
    // Strides of op(A) (m x k) and op(B) (k x n) over row-major storage.
    let (rsa, csa) = if g.trans_a { (1, g.m) } else { (g.k, 1) };
    let (rsb, csb) = if g.trans_b { (1, g.k) } else { (g.n, 1) };
    let (rsa, csa, rsb, csb) = (rsa as isize, csa as isize, rsb as isize, csb as isize);
    let rsc = g.n as isize;
    match T::DTYPE {
        DType::F32 | DType::F64 => {
            let (alpha, beta) = (g.alpha.to_f64(), g.beta.to_f64());
            if T::DTYPE == DType::F32 {
                let dims = sgemm::Dims {
                    m: g.m,
                    n: g.n,
                    k: g.k,
                    trans_a: g.trans_a,
                    trans_b: g.trans_b,
                };
                // SAFETY: `Element`'s contract makes `T` an f32 when its dtype says so; each
                // slice keeps its length, and `c` its exclusive borrow.
                let (a32, b32, c32) = unsafe {
                    (
                        std::slice::from_raw_parts(a.as_ptr().cast::<f32>(), a.len()),
                        std::slice::from_raw_parts(b.as_ptr().cast::<f32>(), b.len()),
                        std::slice::from_raw_parts_mut(c.as_mut_ptr().cast::<f32>(), c.len()),
                    )
                };
                if sgemm::sgemm(dims, alpha as f32, a32, b32, beta as f32, c32) {
                    return;
                }
            }
            // SAFETY: `Element`'s contract makes `T` an f32 (f64) when its dtype says so;
            // the slices hold m*k, k*n and m*n elements (checked by gpukit-core), so every index
            // matrixmultiply forms from these strides is inside them; `c` is exclusive.
            unsafe {
                if T::DTYPE == DType::F32 {
                    matrixmultiply::sgemm(
                        g.m,
                        g.k,
                        g.n,
                        alpha as f32,
                        a.as_ptr().cast(),
                        rsa,
                        csa,
                        b.as_ptr().cast(),
                        rsb,
                        csb,
                        beta as f32,
                        c.as_mut_ptr().cast(),
                        rsc,
                        1,
                    );
                } else {
                    matrixmultiply::dgemm(
                        g.m,
                        g.k,
                        g.n,
                        alpha,
                        a.as_ptr().cast(),
                        rsa,
                        csa,
                        b.as_ptr().cast(),
                        rsb,
                        csb,
                        beta,
                        c.as_mut_ptr().cast(),
                        rsc,
                        1,
                    );
                }
            }
        }
        _ => {
            let wide = |xs: &[T]| xs.iter().map(|x| x.to_f64() as f32).collect::<Vec<f32>>();
            let (a32, b32) = (wide(a), wide(b));
            let mut c32 = if g.beta == T::ZERO {
                vec![0.0f32; c.len()]
            } else {
                wide(c)
            };
            let g32 = Gemm::new(g.m, g.n, g.k)
                .transpose(g.trans_a, g.trans_b)
                .scaled(g.alpha.to_f64() as f32, g.beta.to_f64() as f32);
            product(&g32, &a32, &b32, &mut c32);
            for (c, v) in c.iter_mut().zip(c32) {
                *c = T::from_f64(v as f64);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemm_matches_the_reference_for_every_transpose() {
        let (m, n, k) = (3, 4, 5);
        let a: Vec<f64> = (0..m * k).map(|i| i as f64 * 0.5 - 3.0).collect();
        let b: Vec<f64> = (0..k * n).map(|i| (i as f64).sin()).collect();
        let c0: Vec<f64> = (0..m * n).map(|i| i as f64).collect();
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let g = Gemm::new(m, n, k).transpose(ta, tb).scaled(1.5, 0.25);
            let mut c = c0.clone();
            product(&g, &a, &b, &mut c);
            let want =
                crate::reference::gemm(&g, &a, &b, &c0).expect("the reference gets whole matrices");
            for (x, y) in c.iter().zip(&want) {
                assert!((x - y).abs() < 1e-9, "{ta} {tb}: {x} vs {y}");
            }
        }
    }

    #[test]
    fn gemm_with_zero_beta_ignores_nan_in_c() {
        let g = Gemm::<f32>::new(1, 1, 1);
        let mut c = [f32::NAN];
        product(&g, &[2.0], &[3.0], &mut c);
        assert_eq!(c, [6.0]);
    }
}
