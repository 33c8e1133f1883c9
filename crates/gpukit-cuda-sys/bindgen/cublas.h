/* cuBLAS, for gemm (gpukit-cuda-sys/src/cublas.rs). */
#include <cublas_v2.h>
