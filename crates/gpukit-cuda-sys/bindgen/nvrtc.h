/* NVRTC, the run-time CUDA C compiler (gpukit-cuda-sys/src/nvrtc.rs). */
#include <nvrtc.h>
