// The kernel examples/hot_reload launches. Edit SCALE, OFFSET or the formula
// while it runs and save: the next launch runs the new code. A mistake keeps
// the old code running and prints the compiler's error; the next good save
// recovers.
#define SCALE 2
#define OFFSET 1

extern "C" __global__ void fill(int *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = i * SCALE + OFFSET;
}
