/* One vector add written once as a device template and exported as one
 * extern "C" kernel per element type, the way C APIs over CUDA publish typed
 * entry points (vadd_f32, vadd_f64, ...). The narrow integer types add in int
 * and wrap when stored, as C does. */
template <typename T>
__device__ __forceinline__ void vadd(const T *a, const T *b, T *c, unsigned n)
{
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        c[i] = (T)(a[i] + b[i]);
}

#define COMPAT_VADD(suffix, T)                                                                    \
    extern "C" __global__ void vadd_##suffix(const T *a, const T *b, T *c, unsigned n)            \
    {                                                                                             \
        vadd<T>(a, b, c, n);                                                                      \
    }

COMPAT_VADD(f32, float)
COMPAT_VADD(f64, double)
COMPAT_VADD(i32, int)
COMPAT_VADD(i64, long long)
COMPAT_VADD(u16, unsigned short)
COMPAT_VADD(u8, unsigned char)
