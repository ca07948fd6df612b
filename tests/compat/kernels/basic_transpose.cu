/* A two-dimensional grid and block: a naive out-of-place transpose of a
 * rows x cols row-major matrix of doubles. */
extern "C" __global__ void transpose_naive(const double *in, double *out, int rows, int cols)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols)
        out[(size_t)c * rows + r] = in[(size_t)r * cols + c];
}
