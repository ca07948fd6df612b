/* The library unit of a relocatable (-rdc) pair: a __device__ function and a
 * __device__ array that rdc_main.cu uses across the unit boundary, which
 * only a device link resolves. */
__device__ float lib_bias[4];

__device__ int lib_transform(int a, int b)
{
    return a * 3 - b;
}

extern "C" __global__ void rdc_set_bias(const float *b)
{
    if (threadIdx.x < 4)
        lib_bias[threadIdx.x] = b[threadIdx.x];
}
