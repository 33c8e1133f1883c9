//! The emulated cuBLAS's gemm (<https://docs.nvidia.com/cuda/cublas/#cublas-t-gemm>,
//! `#cublasgemmex`): column-major `C = alpha op(A) op(B) + beta C` against a naive product
//! in f64, with transposes and leading dimensions larger than the rows; and its argument
//! rules (a handle needs a current context; a leading dimension below the rows it holds is
//! `CUBLAS_STATUS_INVALID_VALUE`).

use std::ffi::c_void;

use gpukit_cuda_emu::api::cublas as cb;

use crate::common::*;
use crate::kernels::rng;

const OP_N: u32 = 0;
const OP_T: u32 = 1;
const CUBLAS_STATUS_NOT_INITIALIZED: u32 = 1;
const CUBLAS_STATUS_INVALID_VALUE: u32 = 7;
/// `cudaDataType`: CUDA_R_32F, CUDA_R_16F.
const CUDA_R_32F: u32 = 0;
const CUDA_R_16F: u32 = 2;
/// `CUBLAS_COMPUTE_32F`.
const CUBLAS_COMPUTE_32F: u32 = 68;
/// `CUBLAS_GEMM_DEFAULT`.
const GEMM_DEFAULT: i32 = -1;

/// A column-major matrix stored with leading dimension `ld >= rows`.
#[derive(Debug, Clone)]
struct Mat {
    rows: usize,
    cols: usize,
    ld: usize,
    data: Vec<f64>,
}

impl Mat {
    /// Values `k/8` for integers `k` in [-16, 16] (exact in f16, f32 and f64), with the
    /// padding rows holding `pad`.
    fn random(rows: usize, cols: usize, ld: usize, seed: u64, pad: f64) -> Mat {
        let mut r = rng(seed);
        let mut data = vec![pad; ld * cols];
        for j in 0..cols {
            for i in 0..rows {
                data[i + j * ld] = ((r() % 33) as f64 - 16.0) / 8.0;
            }
        }
        Mat {
            rows,
            cols,
            ld,
            data,
        }
    }

    fn at(&self, i: usize, j: usize) -> f64 {
        self.data[i + j * self.ld]
    }

    /// op(self)(i, j).
    fn op(&self, t: bool, i: usize, j: usize) -> f64 {
        if t {
            self.at(j, i)
        } else {
            self.at(i, j)
        }
    }
}

/// The reference `alpha op(A) op(B) + beta C` in f64, and per element the bound
/// `Σ|alpha a b| + |beta c|` the rounding error is measured against.
#[allow(clippy::too_many_arguments)]
fn reference(
    ta: bool,
    tb: bool,
    m: usize,
    n: usize,
    k: usize,
    alpha: f64,
    a: &Mat,
    b: &Mat,
    beta: f64,
    c: &Mat,
) -> (Vec<f64>, Vec<f64>) {
    let mut out = c.data.clone();
    let mut mag = vec![0.0; c.data.len()];
    for j in 0..n {
        for i in 0..m {
            let (mut s, mut abs) = (0.0, 0.0);
            for l in 0..k {
                let p = a.op(ta, i, l) * b.op(tb, l, j);
                s += p;
                abs += p.abs();
            }
            out[i + j * c.ld] = alpha * s + beta * c.at(i, j);
            mag[i + j * c.ld] = alpha.abs() * abs + beta.abs() * c.at(i, j).abs();
        }
    }
    (out, mag)
}

/// Checks `got` (all of C's storage) against the reference: every element of C's rows x cols
/// result within `gamma * mag`, where `gamma = (k + 2) u / (1 - (k + 2) u)` bounds a k-term
/// dot product plus the alpha and beta steps in precision `u` (Higham, "Accuracy and
/// Stability of Numerical Algorithms", §3.1, γₙ for n roundings, any summation order), and
/// every padding element of C (rows `rows..ld`) untouched.
fn check(got: &[f64], want: &[f64], mag: &[f64], c: &Mat, k: usize, u: f64, what: &str) {
    let m = c.rows;
    let nk = (k + 2) as f64;
    let gamma = nk * u / (1.0 - nk * u);
    for j in 0..c.cols {
        for i in 0..c.ld {
            let at = i + j * c.ld;
            if i < m {
                let tol = gamma * mag[at] + f64::MIN_POSITIVE;
                assert!(
                    (got[at] - want[at]).abs() <= tol,
                    "{what}: C({i}, {j}) = {}, reference {}, tolerance {tol}",
                    got[at],
                    want[at]
                );
            } else {
                assert_eq!(
                    got[at].to_bits(),
                    c.data[at].to_bits(),
                    "{what}: padding C({i}, {j}) beyond the m rows was written"
                );
            }
        }
    }
}

fn create_handle(s: u64) -> u64 {
    let mut h = 0u64;
    // SAFETY: a writable cublasHandle_t.
    assert_eq!(unsafe { cb::cublasCreate_v2(&mut h) }, 0, "cublasCreate_v2");
    // SAFETY: no pointers.
    let r = unsafe { cb::cublasSetStream_v2(h, s) };
    assert_eq!(r, 0, "cublasSetStream_v2");
    h
}

/// `cublasSgemm_v2` with op(A) = Aᵀ, op(B) = B, and `cublasDgemm_v2` with op(A) = A,
/// op(B) = Bᵀ, all leading dimensions above the rows, alpha and beta not 0 or 1: every
/// element of C within the f32 or f64 rounding bound of the f64 reference, C's padding
/// rows untouched.
#[test]
fn sgemm_and_dgemm_with_transposes_and_padding_match_f64() {
    use_device(0);
    let s = stream(NON_BLOCKING);
    let h = create_handle(s);
    let (m, n, k) = (37usize, 23usize, 29usize);

    // Sgemm: A is k x m (op = T), B is k x n, C is m x n.
    let a = Mat::random(k, m, k + 3, 1, 99.0);
    let b = Mat::random(k, n, k + 5, 2, 99.0);
    let c = Mat::random(m, n, m + 4, 3, 77.0);
    let (alpha, beta) = (1.5f32, -0.75f32);
    let to32 = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
    let (da, db, dc) = (
        upload(&to32(&a.data)),
        upload(&to32(&b.data)),
        upload(&to32(&c.data)),
    );
    // SAFETY: host scalars; device matrices of ld x cols elements each.
    let st = unsafe {
        cb::cublasSgemm_v2(
            h,
            OP_T,
            OP_N,
            m as i32,
            n as i32,
            k as i32,
            &alpha,
            da as *const f32,
            a.ld as i32,
            db as *const f32,
            b.ld as i32,
            &beta,
            dc as *mut f32,
            c.ld as i32,
        )
    };
    assert_eq!(st, 0, "cublasSgemm_v2");
    ok(sync(s), "cuStreamSynchronize");
    let got: Vec<f64> = dtoh::<f32>(dc, c.data.len())
        .into_iter()
        .map(f64::from)
        .collect();
    let (want, mag) = reference(
        true,
        false,
        m,
        n,
        k,
        f64::from(alpha),
        &a,
        &b,
        f64::from(beta),
        &c,
    );
    check(&got, &want, &mag, &c, k, f64::powi(2.0, -24), "Sgemm(T, N)");

    // Dgemm: A is m x k, B is n x k (op = T).
    let a = Mat::random(m, k, m + 2, 4, 55.0);
    let b = Mat::random(n, k, n + 7, 5, 55.0);
    let c = Mat::random(m, n, m + 1, 6, 33.0);
    let (alpha, beta) = (-0.625f64, 2.25f64);
    let (da2, db2, dc2) = (upload(&a.data), upload(&b.data), upload(&c.data));
    // SAFETY: as above, in f64.
    let st = unsafe {
        cb::cublasDgemm_v2(
            h,
            OP_N,
            OP_T,
            m as i32,
            n as i32,
            k as i32,
            &alpha,
            da2 as *const f64,
            a.ld as i32,
            db2 as *const f64,
            b.ld as i32,
            &beta,
            dc2 as *mut f64,
            c.ld as i32,
        )
    };
    assert_eq!(st, 0, "cublasDgemm_v2");
    ok(sync(s), "cuStreamSynchronize");
    let got: Vec<f64> = dtoh(dc2, c.data.len());
    let (want, mag) = reference(false, true, m, n, k, alpha, &a, &b, beta, &c);
    check(&got, &want, &mag, &c, k, f64::powi(2.0, -53), "Dgemm(N, T)");
    // SAFETY: a live handle.
    assert_eq!(unsafe { cb::cublasDestroy_v2(h) }, 0, "cublasDestroy_v2");
    for p in [da, db, dc, da2, db2, dc2] {
        ok(free(p), "cuMemFree_v2");
    }
}

/// The IEEE binary16 encoding of `v`, which must be a normal f16 or zero with no bits below
/// f16's precision (written out here, independently of any f16 library).
fn f16_bits(v: f64) -> u16 {
    if v == 0.0 {
        return 0;
    }
    let x = v as f32;
    assert_eq!(f64::from(x), v);
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32 - 127 + 15;
    let mant = bits & 0x7f_ffff;
    assert!((1..31).contains(&exp), "{v} is a normal f16");
    assert_eq!(mant & 0x1fff, 0, "{v} has no bits below f16's precision");
    sign | ((exp as u16) << 10) | (mant >> 13) as u16
}

/// `cublasGemmEx` with f16 A and B (`CUDA_R_16F`), f32 C and `CUBLAS_COMPUTE_32F`, both
/// operands transposed and padded: within the f32 bound of the f64 reference (the f16
/// inputs k/8 and their products are exact in f32, so only the accumulation rounds).
#[test]
fn gemm_ex_f16_inputs_f32_compute_matches_f64() {
    use_device(0);
    let s = stream(NON_BLOCKING);
    let h = create_handle(s);
    let (m, n, k) = (19usize, 26usize, 33usize);
    // op(A) = Aᵀ: A is k x m; op(B) = Bᵀ: B is n x k.
    let a = Mat::random(k, m, k + 1, 7, 0.5);
    let b = Mat::random(n, k, n + 6, 8, 0.5);
    let c = Mat::random(m, n, m + 3, 9, 11.0);
    let to16 = |v: &[f64]| v.iter().map(|&x| f16_bits(x)).collect::<Vec<u16>>();
    let (da, db) = (upload(&to16(&a.data)), upload(&to16(&b.data)));
    let c32: Vec<f32> = c.data.iter().map(|&x| x as f32).collect();
    let dc = upload(&c32);
    let (alpha, beta) = (0.5f32, 1.25f32);
    // SAFETY: f32 host scalars (compute 32F); device matrices of ld x cols elements of
    // the types named.
    let st = unsafe {
        cb::cublasGemmEx(
            h,
            OP_T,
            OP_T,
            m as i32,
            n as i32,
            k as i32,
            (&alpha as *const f32).cast::<c_void>(),
            da as *const c_void,
            CUDA_R_16F,
            a.ld as i32,
            db as *const c_void,
            CUDA_R_16F,
            b.ld as i32,
            (&beta as *const f32).cast::<c_void>(),
            dc as *mut c_void,
            CUDA_R_32F,
            c.ld as i32,
            CUBLAS_COMPUTE_32F,
            GEMM_DEFAULT,
        )
    };
    assert_eq!(st, 0, "cublasGemmEx");
    ok(sync(s), "cuStreamSynchronize");
    let got: Vec<f64> = dtoh::<f32>(dc, c.data.len())
        .into_iter()
        .map(f64::from)
        .collect();
    let (want, mag) = reference(
        true,
        true,
        m,
        n,
        k,
        f64::from(alpha),
        &a,
        &b,
        f64::from(beta),
        &c,
    );
    check(
        &got,
        &want,
        &mag,
        &c,
        k,
        f64::powi(2.0, -24),
        "GemmEx(T, T) f16 -> f32",
    );
    // SAFETY: a live handle.
    assert_eq!(unsafe { cb::cublasDestroy_v2(h) }, 0, "cublasDestroy_v2");
    for p in [da, db, dc] {
        ok(free(p), "cuMemFree_v2");
    }
}

/// `cublasCreate` without a current context is `CUBLAS_STATUS_NOT_INITIALIZED`; a leading
/// dimension smaller than the rows it holds is `CUBLAS_STATUS_INVALID_VALUE` ("lda ...
/// >= max(1, m)" for op = N), and nothing is queued.
#[test]
fn no_context_and_short_leading_dimensions_are_refused() {
    init();
    let status = std::thread::spawn(|| {
        let mut h = 0u64;
        // SAFETY: a writable cublasHandle_t.
        unsafe { cb::cublasCreate_v2(&mut h) }
    })
    .join()
    .expect("thread");
    assert_eq!(
        status, CUBLAS_STATUS_NOT_INITIALIZED,
        "cublasCreate_v2 on a thread without a current context"
    );

    use_device(0);
    let s = stream(NON_BLOCKING);
    let h = create_handle(s);
    let (m, n, k) = (8usize, 4usize, 5usize);
    let a = upload(&vec![1f32; m * k]);
    let b = upload(&vec![1f32; k * n]);
    let c = upload(&vec![0f32; m * n]);
    let (alpha, beta) = (1f32, 0f32);
    let gemm = |ta: u32, lda: usize, ldb: usize, ldc: usize| {
        // SAFETY: host scalars; matrices large enough for the valid shapes (the invalid ones
        // are refused before anything is read).
        unsafe {
            cb::cublasSgemm_v2(
                h,
                ta,
                OP_N,
                m as i32,
                n as i32,
                k as i32,
                &alpha,
                a as *const f32,
                lda as i32,
                b as *const f32,
                ldb as i32,
                &beta,
                c as *mut f32,
                ldc as i32,
            )
        }
    };
    assert_eq!(
        gemm(OP_N, m - 1, k, m),
        CUBLAS_STATUS_INVALID_VALUE,
        "lda < m"
    );
    assert_eq!(
        gemm(OP_T, k - 1, k, m),
        CUBLAS_STATUS_INVALID_VALUE,
        "lda < k for Aᵀ"
    );
    assert_eq!(
        gemm(OP_N, m, k - 1, m),
        CUBLAS_STATUS_INVALID_VALUE,
        "ldb < k"
    );
    assert_eq!(
        gemm(OP_N, m, k, m - 1),
        CUBLAS_STATUS_INVALID_VALUE,
        "ldc < m"
    );
    ok(sync(s), "cuStreamSynchronize");
    assert_eq!(
        dtoh::<f32>(c, m * n),
        vec![0.0; m * n],
        "the refused calls wrote nothing"
    );
    assert_eq!(gemm(OP_N, m, k, m), 0, "the valid shape");
    ok(sync(s), "cuStreamSynchronize");
    assert_eq!(dtoh::<f32>(c, m * n), vec![k as f32; m * n]);
    // SAFETY: a live handle.
    assert_eq!(unsafe { cb::cublasDestroy_v2(h) }, 0, "cublasDestroy_v2");
    for p in [a, b, c] {
        ok(free(p), "cuMemFree_v2");
    }
}
