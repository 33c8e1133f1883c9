// The built-in ops of the gpukit workspace, for one element type per compiled module.
//
// gpukit-cuda (src/kernels.rs) puts a prelude in front of this file that defines, for the
// element type:
//   T        the stored type (unsigned short for f16 and bf16)
//   C        the type arithmetic is done in (float for f16 and bf16)
//   load(T) -> C and store(C) -> T
//
// The indexing ops are generated after this file (gpukit-cuda's index.rs). Every kernel is a grid-stride loop with 64-bit indices, so any
// length and any grid work. Built with --fmad=false so that products and sums round
// separately, as the CPU does.

#define GRID_STRIDE(i, n)                                                              \
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; \
         i < (n); i += (unsigned long long)blockDim.x * gridDim.x)
