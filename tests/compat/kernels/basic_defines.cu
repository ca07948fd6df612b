/* Macros from the options (-D in its spellings): the kernel does not compile
 * without them, its block size is a launch bound taken from one, and the
 * values it computes come from the others. */
#ifndef COMPAT_SCALE
#error "COMPAT_SCALE must be given with -DCOMPAT_SCALE=..."
#endif
#ifndef COMPAT_OFFSET
#error "COMPAT_OFFSET must be given with --define-macro COMPAT_OFFSET=..."
#endif
#if !defined(COMPAT_BLOCK) || COMPAT_BLOCK != 128
#error "COMPAT_BLOCK must be 128"
#endif

extern "C" __global__ void __launch_bounds__(COMPAT_BLOCK)
    scaled_copy(const int *x, int *y, int n)
{
    int i = blockIdx.x * COMPAT_BLOCK + threadIdx.x;
    if (i < n)
        y[i] = x[i] * COMPAT_SCALE + COMPAT_OFFSET;
}
