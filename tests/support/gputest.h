/* What the GPU test programs share: checks that fail the current test with
 * the call's text. Device memory comes through jitop's own driver table
 * (src/load/driver.h), so that the programs start, and SKIP, on machines
 * without libcuda.so.1. */
#ifndef JITOP_GPUTEST_H
#define JITOP_GPUTEST_H

#include "load/driver.h"
#include "testutil.h"

/* A driver call that must succeed. */
#define CU(call)                                                                                  \
    do {                                                                                          \
        CUresult r_ = (call);                                                                     \
        if (r_ != CUDA_SUCCESS)                                                                   \
            fail_msg("%s failed: %d", #call, (int)r_);                                            \
    } while (0)

/* A jitop call that must succeed; the failure names its status and message. */
#define OK(call)                                                                                  \
    do {                                                                                          \
        int st_ = (call);                                                                         \
        if (st_ != JITOP_OK)                                                                      \
            fail_msg("%s: %s: %s", #call, jitop_strerror(st_), jitop_errmsg(NULL));               \
    } while (0)

#endif
