// The built-in ops of the gpukit workspace, for one element type per compiled module.
//
// gpukit-cuda-sys (src/kernels.rs) puts a prelude in front of this file that defines, for the
// element type:
//   T        the stored type (unsigned short for f16 and bf16)
//   C        the type arithmetic is done in (float for f16 and bf16)
//   ACC      the accumulator of sum and dot: double for floats, unsigned long long for
//            integers (whose sums wrap, so accumulating modulo 2^64 and truncating gives
//            the wrapped result of the narrower type)
//   IS_FLOAT 1 for floating-point types
//   load(T) -> C, store(C) -> T, op_add/op_sub/op_mul/op_div(C, C) -> C, op_neg(C),
//   op_abs(C), gk_min<C>/gk_max<C>(C, C) -> C, to_acc(C) -> ACC, from_acc(ACC) -> T,
//   C_LOWEST and C_HIGHEST (the identities of max and min: NaN for floats)
// and, for every module, the 16-bit float conversions gk_f16_load/gk_f16_store/
// gk_bf16_load/gk_bf16_store and gk_odd_f64 (the kernel language's) and
// f16_from_double/bf16_from_double (to 16 bits from an accumulator, rounding once).
//
// The random fills and the indexing ops are generated after this file (gpukit-cuda's
// random.rs and index.rs).
//
// The semantics are gpukit_core::Numeric's and Float's, which the CPU backend implements:
// integers wrap and divide by zero to 0, float min/max ignore NaN (fmin/fmax) and keep the
// first operand of two equal ones, relu(NaN) is 0.
// Every kernel is a grid-stride loop with 64-bit indices, so any length and any grid work.
// Built with --fmad=false so that products and sums round separately, as the CPU does.

#define GRID_STRIDE(i, n)                                                              \
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; \
         i < (n); i += (unsigned long long)blockDim.x * gridDim.x)

// Softmax and cross-entropy run one block per row (blocks stride over the rows); a block
// folds its threads in shared memory (REDUCE_BLOCK threads).

template <typename A, typename F>
__device__ __forceinline__ A block_fold(A v, F f) {
    __shared__ A s[REDUCE_BLOCK];
    s[threadIdx.x] = v;
    __syncthreads();
    for (unsigned int step = REDUCE_BLOCK / 2; step > 0; step /= 2) {
        if (threadIdx.x < step) s[threadIdx.x] = f(s[threadIdx.x], s[threadIdx.x + step]);
        __syncthreads();
    }
    A r = s[0];
    // The next fold of the same type may reuse `s` only once every thread has read it.
    __syncthreads();
    return r;
}

struct AccAdd {
    __device__ ACC operator()(ACC a, ACC b) const { return a + b; }
};
struct CMinMax {
    int is_max;
    __device__ C operator()(C a, C b) const { return is_max ? gk_max<C>(a, b) : gk_min<C>(a, b); }
};
#define ROWS(r, rows) for (unsigned long long r = blockIdx.x; r < (rows); r += gridDim.x)
#define COLS(j, cols) for (unsigned long long j = threadIdx.x; j < (cols); j += blockDim.x)

#if IS_FLOAT
// Softmax statistics of one row: its maximum (NaNs ignored) and sum of exp(x - max) in ACC.
__device__ __forceinline__ void softmax_stats(const T *row, unsigned long long cols, C *m_out,
                                              ACC *s_out) {
    CMinMax f = {1};
    C m = C_LOWEST;
    COLS(j, cols) { m = f(m, load(row[j])); }
    m = block_fold(m, f);
    ACC s = 0;
    COLS(j, cols) { s += (ACC)exp(op_sub(load(row[j]), m)); }
    *s_out = block_fold(s, AccAdd());
    *m_out = m;
}

// Row-wise softmax (log = 0) or log-softmax; `out` may be `x` (each thread reads its
// elements before writing them, after the row's statistics are folded).
extern "C" __global__ void softmax_rows(const T *x, T *out, unsigned long long rows,
                                        unsigned long long cols, int log_) {
    ROWS(r, rows) {
        const T *row = x + r * cols;
        T *o = out + r * cols;
        C m;
        ACC s;
        softmax_stats(row, cols, &m, &s);
        ACC ls = log(s);
        COLS(j, cols) {
            C d = op_sub(load(row[j]), m);
            o[j] = log_ ? from_acc((ACC)d - ls) : from_acc((ACC)exp(d) / s);
        }
    }
}

// Cross-entropy of each row against its label; `grad` may be null.
extern "C" __global__ void cross_entropy_rows(const T *x, const unsigned int *labels, T *loss,
                                              T *grad, unsigned long long rows,
                                              unsigned long long cols) {
    const ACC nan = __longlong_as_double(0x7ff8000000000000LL);
    ROWS(r, rows) {
        const T *row = x + r * cols;
        C m;
        ACC s;
        softmax_stats(row, cols, &m, &s);
        unsigned long long l = labels[r];
        if (l >= cols) {
            if (threadIdx.x == 0) loss[r] = from_acc(nan);
            if (grad) COLS(j, cols) { grad[r * cols + j] = from_acc(nan); }
            continue;
        }
        if (threadIdx.x == 0) loss[r] = from_acc(log(s) - (ACC)op_sub(load(row[l]), m));
        if (grad) COLS(j, cols) {
            ACC hot = j == l ? 1.0 : 0.0;
            grad[r * cols + j] = from_acc((ACC)exp(op_sub(load(row[j]), m)) / s - hot);
        }
    }
}
#endif
