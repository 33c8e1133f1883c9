//! The built-in ops as tasks: plain loops over slices with the scalar semantics of
//! `gpukit_core::Numeric` and `gpukit_core::Float`; gemm through `matrixmultiply`.

use gpukit_core::{BinaryOp, DType, Element, Float, Gemm, Numeric, ReduceOp, UnaryOp};

use crate::mem::SendPtr;

/// A typed read-only range captured by a task.
#[derive(Clone, Copy)]
pub(crate) struct Src<T> {
    ptr: SendPtr,
    len: usize,
    _t: std::marker::PhantomData<T>,
}

/// A typed writable range captured by a task.
#[derive(Clone, Copy)]
pub(crate) struct Dst<T> {
    ptr: SendPtr,
    len: usize,
    _t: std::marker::PhantomData<T>,
}

impl<T: Element> Src<T> {
    pub(crate) fn new(ptr: SendPtr, len: usize) -> Self {
        Src {
            ptr,
            len,
            _t: std::marker::PhantomData,
        }
    }

    /// # Safety
    ///
    /// - the range is live, aligned for `T` and not written while the slice is used (the
    ///   task holds the buffer's `Arc` and gpukit-core orders every writer against it).
    pub(crate) unsafe fn get<'a>(self) -> &'a [T] {
        // SAFETY: forwarded from the caller.
        unsafe { std::slice::from_raw_parts(self.ptr.get().cast::<T>(), self.len) }
    }
}

impl<T: Element> Dst<T> {
    pub(crate) fn new(ptr: SendPtr, len: usize) -> Self {
        Dst {
            ptr,
            len,
            _t: std::marker::PhantomData,
        }
    }

    /// # Safety
    ///
    /// - the range is live, aligned for `T`, and accessed by nothing else while the slice is
    ///   used (gpukit-core orders every other access against this write, and `&mut` borrows at
    ///   the call site keep a write from overlapping the op's other arguments).
    pub(crate) unsafe fn get<'a>(self) -> &'a mut [T] {
        // SAFETY: forwarded from the caller.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.get().cast::<T>(), self.len) }
    }
}

pub(crate) fn fill<T: Numeric>(dst: &mut [T], value: T) {
    dst.fill(value);
}

pub(crate) fn axpy<T: Numeric>(alpha: T, x: &[T], y: &mut [T]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y = alpha.axpy(x, *y);
    }
}

pub(crate) fn scale<T: Numeric>(alpha: T, x: &mut [T]) {
    for x in x {
        *x = alpha.mul(*x);
    }
}

pub(crate) fn binary<T: Numeric>(op: BinaryOp, a: &[T], b: &[T], out: &mut [T]) {
    // One loop per op so that each loop body is a single instruction the compiler vectorizes.
    let zip = out.iter_mut().zip(a.iter().zip(b));
    match op {
        BinaryOp::Add => zip.for_each(|(o, (&a, &b))| *o = a.add(b)),
        BinaryOp::Sub => zip.for_each(|(o, (&a, &b))| *o = a.sub(b)),
        BinaryOp::Mul => zip.for_each(|(o, (&a, &b))| *o = a.mul(b)),
        BinaryOp::Div => zip.for_each(|(o, (&a, &b))| *o = a.div(b)),
    }
}

pub(crate) fn unary<T: Float>(op: UnaryOp, x: &[T], out: &mut [T]) {
    for (o, &x) in out.iter_mut().zip(x) {
        *o = op.apply(x);
    }
}

pub(crate) fn reduce<T: Numeric>(op: ReduceOp, x: &[T]) -> T {
    match op {
        ReduceOp::Sum => T::sum(x),
        ReduceOp::Max => x[1..].iter().fold(x[0], |m, &v| m.maximum(v)),
    }
}

/// Row-major gemm (see `gpukit_core::Gemm`). f32 and f64 go straight to matrixmultiply; the
/// 16-bit floats are widened to f32, multiplied, and rounded back once.
pub(crate) fn gemm<T: Float>(g: &Gemm<T>, a: &[T], b: &[T], c: &mut [T]) {
    // Strides of op(A) (m x k) and op(B) (k x n) over row-major storage.
    let (rsa, csa) = if g.trans_a { (1, g.m) } else { (g.k, 1) };
    let (rsb, csb) = if g.trans_b { (1, g.k) } else { (g.n, 1) };
    let (rsa, csa, rsb, csb) = (rsa as isize, csa as isize, rsb as isize, csb as isize);
    let rsc = g.n as isize;
    match T::DTYPE {
        DType::F32 | DType::F64 => {
            let (alpha, beta) = (g.alpha.to_f64(), g.beta.to_f64());
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
            let g32 = Gemm {
                m: g.m,
                n: g.n,
                k: g.k,
                trans_a: g.trans_a,
                trans_b: g.trans_b,
                alpha: g.alpha.to_f64() as f32,
                beta: g.beta.to_f64() as f32,
            };
            gemm(&g32, &a32, &b32, &mut c32);
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
            gemm(&g, &a, &b, &mut c);
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
        gemm(&g, &[2.0], &[3.0], &mut c);
        assert_eq!(c, [6.0]);
    }
}
