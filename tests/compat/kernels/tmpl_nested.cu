/* Template arguments that are themselves templates: functor types composed
 * from other functor templates, as in thrust-style kernels
 * ("zip_with<ops::Compose<ops::Add<int>, ops::Mul<int>>, int>"). */
namespace ops {

template <typename T>
struct Add {
    __device__ T operator()(T a, T b) const { return a + b; }
};

template <typename T>
struct Mul {
    __device__ T operator()(T a, T b) const { return a * b; }
};

/* Outer(Inner(a, b), b). */
template <typename Outer, typename Inner>
struct Compose {
    template <typename T>
    __device__ T operator()(T a, T b) const
    {
        return Outer()(Inner()(a, b), b);
    }
};

} // namespace ops

template <typename Op, typename T>
__global__ void zip_with(const T *a, const T *b, T *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = Op()(a[i], b[i]);
}
