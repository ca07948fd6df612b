/* Running a test program against the fake CUDA driver (tests/fakecuda), for
 * programs other than test_loader_fake, which has its own copy of this. */
#ifndef JITOP_TEST_FAKEDRIVER_H
#define JITOP_TEST_FAKEDRIVER_H

#include "../fakecuda/fake_libcuda.h"

/* Call first in main. The first time, re-executes the program (under the
 * same $JITOP_TEST_WRAPPER, e.g. valgrind, which does not follow an exec by
 * itself) with $JITOP_BUILD/fakecuda first in LD_LIBRARY_PATH, so that
 * jitop's dlopen("libcuda.so.1") finds the fake even where a real driver
 * is installed: it does not return then, unless the exec failed (NULL, with
 * a message on stderr). In the re-executed process it opens the fake,
 * checks that libcuda.so.1 is it, and returns its stats function (NULL, with
 * a message, if not). The Makefile must build the fake before the program
 * ($(BUILD)/tests/cpu/NAME: $(FAKE_CUDA)). */
fake_cuda_stats_fn jt_fake_driver(char **argv);

#endif
