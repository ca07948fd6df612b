/* Dynamic shared memory over the 48 KiB default: each block stages a
 * segment of seg floats (seg * 4 bytes of dynamic shared memory, given at
 * launch) and writes it back reversed. */
extern "C" __global__ void reverse_segments(const float *x, float *y, int seg)
{
    extern __shared__ float buf[];
    const float *in = x + (size_t)blockIdx.x * seg;
    float *out = y + (size_t)blockIdx.x * seg;
    for (int k = threadIdx.x; k < seg; k += blockDim.x)
        buf[k] = in[k];
    __syncthreads();
    for (int k = threadIdx.x; k < seg; k += blockDim.x)
        out[k] = buf[seg - 1 - k];
}
