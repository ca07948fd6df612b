/* A source whose only kernel comes from the header it includes. */
#include "include/compat/hdr_kernels.cuh"
