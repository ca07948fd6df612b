/* A kernel template inside nested namespaces, asked for by its qualified
 * name ("compat::detail::blend<float>"). */
namespace compat {
namespace detail {

template <typename T>
__device__ T lerp(T a, T b, T t)
{
    return a + t * (b - a);
}

template <typename T>
__global__ void blend(const T *a, const T *b, T t, T *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = lerp(a[i], b[i], t);
}

} // namespace detail
} // namespace compat
