/* Dynamic parallelism: each parent block launches a child grid over its
 * chunk of the data. Device-side launches need relocatable code (-rdc) and
 * the device runtime (cudadevrt) at link time. The children finish before
 * the parent grid counts as finished, so the host's synchronize covers them. */
extern "C" __global__ void dp_child(int *data, int first, int count, int mul)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < count)
        data[first + j] = data[first + j] * mul + j;
}

extern "C" __global__ void dp_parent(int *data, int n, int chunk)
{
    int first = blockIdx.x * chunk;
    if (threadIdx.x == 0 && first < n) {
        int count = min(chunk, n - first);
        dp_child<<<(count + 127) / 128, 128>>>(data, first, count, 2 + (int)(blockIdx.x % 3));
    }
}
