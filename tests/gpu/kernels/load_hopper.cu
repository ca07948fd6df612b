// Kernels that need Hopper launch features, for tests/gpu/test_load.c. No
// headers (cooperative_groups) so that NVRTC needs no include path: the
// cluster and grid barriers are written with PTX and atomics.

// Reverses n floats through dynamic shared memory (n * 4 bytes of it, more
// than the default 48 KiB limit in the test). One block.
extern "C" __global__ void smem_reverse(const float *in, float *out, int n)
{
    extern __shared__ float buf[];
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        buf[i] = in[i];
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        out[i] = buf[n - 1 - i];
}

// Each block writes its rank in its cluster and the cluster's size, after a
// cluster-wide barrier. Launched without cluster dims, every block is a
// cluster of one (rank 0, size 1).
extern "C" __global__ void cluster_ranks(int *out)
{
    unsigned rank, size;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(size));
    asm volatile("barrier.cluster.arrive;\n\tbarrier.cluster.wait;" ::: "memory");
    if (threadIdx.x == 0)
        out[blockIdx.x] = (int)(rank * 1000u + size);
}

// Sums x with one grid-wide barrier between the per-block partial sums and
// the final sum. The spin barrier is correct only when every block is
// resident at once, which is what a cooperative launch guarantees.
extern "C" __global__ void coop_sum(const float *x, int n, float *partial, float *out,
                                    unsigned *counter)
{
    __shared__ float s[256];
    float acc = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        acc += x[i];
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w)
            s[threadIdx.x] += s[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = s[0];
        __threadfence();
        atomicAdd(counter, 1u);
        while (*(volatile unsigned *)counter < gridDim.x)
            ;
    }
    __syncthreads();
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        double total = 0.0;
        for (unsigned b = 0; b < gridDim.x; b++)
            total += ((volatile float *)partial)[b];
        out[0] = (float)total;
    }
}

// Programmatic dependent launch: pdl_produce lets the next kernel in the
// stream be scheduled at once, then writes out; pdl_consume, launched with
// programmatic stream serialization, waits for the producer's grid
// (griddepcontrol.wait) before it reads what the producer wrote.
extern "C" __global__ void pdl_produce(float *out, int n, float v)
{
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[i] = v + (float)(i & 1023);
}

extern "C" __global__ void pdl_consume(const float *in, float *out, int n)
{
    asm volatile("griddepcontrol.wait;" ::: "memory");
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[i] = in[i] + 1.0f;
}
