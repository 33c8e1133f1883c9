// The CUDA emulator's assert.h: a failed device `assert` prints CUDA's message and ends the
// launch with CUDA_ERROR_ASSERT (gkemu.h), instead of aborting the process as the host's
// assert would. Found before the system header through the emulated NVRTC's include path.
#ifdef GKEMU_ASSERT_DEFINED
#undef assert
#define assert(e) ((e) ? (void)0 : gkemu_assert_fail(#e, __FILE__, __LINE__, __func__))
#else
#include_next <assert.h>
#endif
