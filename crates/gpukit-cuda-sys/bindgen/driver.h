/* The CUDA driver API calls the availability probe makes (gpukit-cuda-sys/src/probe.rs).
 * Everything else of the driver is reached through cudarc. */
#include <cuda.h>
