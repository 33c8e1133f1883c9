// vector_types.h for the CUDA emulator: everything it declares is in gkemu_api.h (found through
// -I runtime).
#pragma once
#include "gkemu_api.h"
