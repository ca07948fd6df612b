/* Starting a test program on the fake CUDA driver (fakecuda.c). */
#ifndef JITOP_TEST_FAKECUDA_H
#define JITOP_TEST_FAKECUDA_H

#include "../fakecuda/fake_libcuda.h"

/* Call first in main(argv). In the process make started it re-executes the
 * program with the fake driver first in the library path (behind
 * $JITOP_TEST_WRAPPER) and returns only on failure (1). In the re-executed
 * process it opens the fake, checks that libcuda.so.1 now resolves to it,
 * sets *stats and returns -1: run the tests. 1 on failure. */
int jt_fake_cuda_start(char **argv, fake_cuda_stats_fn *stats);

#endif
