#include_next <c.h>
#define HDR "a.h"
#include HDR
#if 0
#include "b.h"
#endif
#include <cuda_fp16.h>
#include "/nonexistent/x.h"
#include "../sub/c.h"
