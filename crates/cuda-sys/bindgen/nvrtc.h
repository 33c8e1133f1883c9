/* NVRTC, the run-time CUDA C compiler (cuda-sys/src/nvrtc.rs). */
#include <nvrtc.h>
