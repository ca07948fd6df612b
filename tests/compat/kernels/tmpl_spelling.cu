/* One instance, several spellings: "fill_affine<float,4>",
 * "fill_affine<float, 4>" and "fill_affine< float , 4 >" all name the same
 * kernel. */
template <typename T, int N>
__global__ void fill_affine(T *out, T base, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = base + (T)(N * i);
}
