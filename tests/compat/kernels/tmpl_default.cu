/* A default template argument: "block_sum<int>" means block_sum<int, 256>,
 * which the launch bound (the kernel's max threads per block) shows. One
 * partial sum per block, through a shared-memory tree. */
template <typename T, int BLOCK = 256>
__global__ void __launch_bounds__(BLOCK) block_sum(const T *x, T *sums, int n)
{
    __shared__ T s[BLOCK];
    int i = blockIdx.x * BLOCK + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] : T(0);
    __syncthreads();
    for (int w = BLOCK / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w)
            s[threadIdx.x] += s[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        sums[blockIdx.x] = s[0];
}
