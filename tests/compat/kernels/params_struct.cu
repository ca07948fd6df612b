/* Structures passed by value: mixed member sizes with padding, a 16-byte
 * aligned one holding a pointer, and an 8 KiB one (over the 4 KiB of
 * parameters CUDA allowed before 12.1; the driver now takes 32764 bytes). */
struct Affine {
    float scale;
    int shift;
    double bias;
    char apply; /* 0: y = bias - x */
};

extern "C" __global__ void affine_apply(Affine p, const float *x, double *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = p.apply ? (double)x[i] * p.scale + p.shift + p.bias : p.bias - x[i];
}

struct __align__(16) View {
    float4 w;
    const float4 *data;
    int count;
};

extern "C" __global__ void view_dot(View v, float *out)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < v.count) {
        float4 d = v.data[i];
        out[i] = d.x * v.w.x + d.y * v.w.y + d.z * v.w.z + d.w * v.w.w;
    }
}

struct Big {
    float v[2048];
};

extern "C" __global__ void big_param_mix(Big w, const float *x, float *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = w.v[i % 2048] * x[i] + w.v[(i * 7 + 3) % 2048];
}
