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
//   load(T) -> C, store(C) -> T, op_add/op_sub/op_mul/op_div(C, C) -> C, cmax(C, C) -> C,
//   to_acc(C) -> ACC, from_acc(ACC) -> T, C_LOWEST (the identity of max)
//
// The semantics are gpukit_core::Numeric's and Float's, which the CPU backend implements:
// integers wrap and divide by zero to 0, float max ignores NaN (fmax), relu(NaN) is 0.
// Every kernel is a grid-stride loop with 64-bit indices, so any length and any grid work.
// Built with --fmad=false so that axpy rounds the product and the sum separately, as the
// CPU does.

#define GRID_STRIDE(i, n)                                                              \
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; \
         i < (n); i += (unsigned long long)blockDim.x * gridDim.x)

extern "C" __global__ void fill(T *out, T value, unsigned long long n) {
    GRID_STRIDE(i, n) { out[i] = value; }
}

extern "C" __global__ void axpy(T alpha, const T *x, T *y, unsigned long long n) {
    C a = load(alpha);
    GRID_STRIDE(i, n) { y[i] = store(op_add(op_mul(a, load(x[i])), load(y[i]))); }
}

extern "C" __global__ void scale(T alpha, T *x, unsigned long long n) {
    C a = load(alpha);
    GRID_STRIDE(i, n) { x[i] = store(op_mul(a, load(x[i]))); }
}

#define BINARY(name, f)                                                                 \
    extern "C" __global__ void name(const T *a, const T *b, T *out, unsigned long long n) { \
        GRID_STRIDE(i, n) { out[i] = store(f(load(a[i]), load(b[i]))); }                \
    }
BINARY(add_op, op_add)
BINARY(sub_op, op_sub)
BINARY(mul_op, op_mul)
BINARY(div_op, op_div)

#if IS_FLOAT
#define UNARY(name, expr)                                                               \
    extern "C" __global__ void name(const T *in, T *out, unsigned long long n) {       \
        GRID_STRIDE(i, n) {                                                             \
            C x = load(in[i]);                                                          \
            out[i] = store(expr);                                                       \
        }                                                                               \
    }
UNARY(relu, x > (C)0 ? x : (C)0)
UNARY(sigmoid, (C)1 / ((C)1 + exp(-x)))
UNARY(tanh_op, tanh(x))
UNARY(exp_op, exp(x))
#endif

// Reductions run in two launches: REDUCE_BLOCK threads per block each fold a grid-stride
// share, the block folds its threads in shared memory and writes one partial; then one
// block folds the partials and writes the result.

template <typename A, typename F>
__device__ __forceinline__ A block_fold(A v, F f) {
    __shared__ A s[REDUCE_BLOCK];
    s[threadIdx.x] = v;
    __syncthreads();
    for (unsigned int step = REDUCE_BLOCK / 2; step > 0; step /= 2) {
        if (threadIdx.x < step) s[threadIdx.x] = f(s[threadIdx.x], s[threadIdx.x + step]);
        __syncthreads();
    }
    return s[0];
}

struct AccAdd {
    __device__ ACC operator()(ACC a, ACC b) const { return a + b; }
};
struct CMax {
    __device__ C operator()(C a, C b) const { return cmax(a, b); }
};

extern "C" __global__ void sum_partial(const T *x, unsigned long long n, ACC *partial) {
    ACC acc = 0;
    GRID_STRIDE(i, n) { acc += to_acc(load(x[i])); }
    acc = block_fold(acc, AccAdd());
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

extern "C" __global__ void dot_partial(const T *x, const T *y, unsigned long long n,
                                       ACC *partial) {
    ACC acc = 0;
    GRID_STRIDE(i, n) { acc += to_acc(load(x[i])) * to_acc(load(y[i])); }
    acc = block_fold(acc, AccAdd());
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

extern "C" __global__ void sum_final(const ACC *partial, unsigned int parts, T *out) {
    ACC acc = 0;
    for (unsigned int i = threadIdx.x; i < parts; i += blockDim.x) acc += partial[i];
    acc = block_fold(acc, AccAdd());
    if (threadIdx.x == 0) *out = from_acc(acc);
}

extern "C" __global__ void max_partial(const T *x, unsigned long long n, C *partial) {
    C m = C_LOWEST;
    GRID_STRIDE(i, n) { m = cmax(m, load(x[i])); }
    m = block_fold(m, CMax());
    if (threadIdx.x == 0) partial[blockIdx.x] = m;
}

extern "C" __global__ void max_final(const C *partial, unsigned int parts, T *out) {
    C m = C_LOWEST;
    for (unsigned int i = threadIdx.x; i < parts; i += blockDim.x) m = cmax(m, partial[i]);
    m = block_fold(m, CMax());
    if (threadIdx.x == 0) *out = store(m);
}
