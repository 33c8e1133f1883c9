//! [`Gemm`]: the shapes, transposes, scalars and batch strides of a matrix product, built
//! from [`Gemm::new`].

use crate::element::Numeric;

/// A row-major matrix product `C = alpha * op(A) * op(B) + beta * C`, or a batch of them.
///
/// `op(A)` is `m x k`: `A` is stored `m x k`, or `k x m` when `trans_a`. `op(B)` is `k x n`:
/// `B` is stored `k x n`, or `n x k` when `trans_b`. `C` is `m x n`. All dense, row-major.
/// A batch of `batch` products reads matrix `i` of `A` at element `i * stride_a` (likewise
/// `B`, `C`): strides equal to the matrix sizes lay the batch out one matrix after another,
/// a stride of 0 for `A` or `B` uses one matrix for the whole batch. The outputs may not
/// overlap (`stride_c >= m * n`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gemm<T> {
    /// Rows of `op(A)` and `C`.
    pub m: usize,
    /// Columns of `op(B)` and `C`.
    pub n: usize,
    /// Columns of `op(A)`, rows of `op(B)`.
    pub k: usize,
    /// Whether `A` is stored transposed.
    pub trans_a: bool,
    /// Whether `B` is stored transposed.
    pub trans_b: bool,
    /// Scale of the product.
    pub alpha: T,
    /// Scale of `C`'s previous contents (0 ignores them, NaNs included).
    pub beta: T,
    /// Number of products (1 for a plain gemm).
    pub batch: usize,
    /// Elements from one `A` matrix to the next.
    pub stride_a: usize,
    /// Elements from one `B` matrix to the next.
    pub stride_b: usize,
    /// Elements from one `C` matrix to the next.
    pub stride_c: usize,
}

impl<T: Numeric> Gemm<T> {
    /// `C = A * B` for `A: m x k`, `B: k x n`, no transposes, `alpha = 1`, `beta = 0`.
    pub fn new(m: usize, n: usize, k: usize) -> Self {
        Gemm {
            m,
            n,
            k,
            trans_a: false,
            trans_b: false,
            alpha: T::from_f64(1.0),
            beta: T::ZERO,
            batch: 1,
            stride_a: m.saturating_mul(k),
            stride_b: k.saturating_mul(n),
            stride_c: m.saturating_mul(n),
        }
    }

    /// Sets whether `A` and `B` are stored transposed.
    pub fn transpose(mut self, a: bool, b: bool) -> Self {
        self.trans_a = a;
        self.trans_b = b;
        self
    }

    /// Sets `alpha` and `beta`.
    pub fn scaled(mut self, alpha: T, beta: T) -> Self {
        self.alpha = alpha;
        self.beta = beta;
        self
    }

    /// A batch of `batch` products of matrices stored one after another.
    pub fn batched(mut self, batch: usize) -> Self {
        self.batch = batch;
        self.stride_a = self.m.saturating_mul(self.k);
        self.stride_b = self.k.saturating_mul(self.n);
        self.stride_c = self.m.saturating_mul(self.n);
        self
    }

    /// A batch of `batch` products with the given strides, in elements.
    pub fn strided(
        mut self,
        batch: usize,
        stride_a: usize,
        stride_b: usize,
        stride_c: usize,
    ) -> Self {
        self.batch = batch;
        self.stride_a = stride_a;
        self.stride_b = stride_b;
        self.stride_c = stride_c;
        self
    }

    /// The same shape with `alpha` and `beta` widened to f64 (exactly: gemm's element types
    /// are floats), as backends receive it.
    pub fn erased(&self) -> Gemm<f64> {
        Gemm {
            m: self.m,
            n: self.n,
            k: self.k,
            trans_a: self.trans_a,
            trans_b: self.trans_b,
            alpha: self.alpha.to_f64(),
            beta: self.beta.to_f64(),
            batch: self.batch,
            stride_a: self.stride_a,
            stride_b: self.stride_b,
            stride_c: self.stride_c,
        }
    }
}

impl<T> Gemm<T> {
    /// Elements one operand's batch spans: `(batch - 1) * stride + size` (0 for an empty
    /// batch), or `None` on overflow.
    pub fn span(&self, size: usize, stride: usize) -> Option<usize> {
        if self.batch == 0 {
            return Some(0);
        }
        (self.batch - 1).checked_mul(stride)?.checked_add(size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_spans_its_last_matrix_past_the_strides() {
        let g = Gemm::<f32>::new(2, 3, 4);
        assert_eq!(g.span(8, 8), Some(8));
        assert_eq!(g.strided(3, 5, 0, 6).span(7, 5), Some(17));
        assert_eq!(g.strided(4, 0, 0, 6).span(7, 0), Some(7));
        assert_eq!(g.strided(0, 5, 5, 6).span(7, 5), Some(0));
        assert_eq!(
            g.strided(3, usize::MAX / 2, 0, 6).span(7, usize::MAX / 2),
            None
        );
        assert_eq!(
            g.strided(2, usize::MAX - 3, 0, 6).span(7, usize::MAX - 3),
            None
        );
    }
}
