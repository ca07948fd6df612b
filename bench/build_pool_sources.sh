#!/usr/bin/env bash
# Writes N independent .cu sources for bench/build_pool.sh into DIR.
#
#   bench/build_pool_sources.sh DIR N [--light|--uniform]
#
# Default: realistic ops, eight kinds taken in turn, each source's text its
# own (its number is in every name and in a constant, so no two share a
# key): templated elementwise kernels on float, __half, __half2 and bf16
# (<cuda_fp16.h>, <cuda_bf16.h>); layernorm forward at float, fp16 and bf16 (<cuda_fp16.h>,
# <cuda_bf16.h>); a block reduction with cooperative groups
# (<cooperative_groups.h>); a row softmax on fp16; a layernorm backward on
# bf16; an elementwise bf16 op. Measured with NVRTC 13.0, sm_90, on a 2-core
# VM (a later compile in the process, one source of each kind): elementwise
# ~200 ms, layernorm ~600 ms, cooperative groups ~1.5 s; the header parse
# is most of it, as in a real project's ops.
#
# --uniform: every source a cooperative-groups reduction of its own (one
# kind, each text its own: ~1.5 s each on the H100 machine, header parse
# most of it), so that no single file bounds the speed-up: in the default mix
# the 4 cooperative-groups files make -j 16 at best ~5x whatever the pool
# does, and a mix of light files (~50 ms) is bound by each worker's first
# NVRTC compile.
#
# --light: the earlier sources, a small templated reduction and two
# elementwise kernels with no include (~20 ms each on the H100 machine, so
# that NVRTC's per-process set-up dominates).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: build_pool_sources.sh DIR N [--light|--uniform]" >&2; exit 2; }
DIR=$1
N=$2
LIGHT=${3:-}
mkdir -p "$DIR"

light() { # $1: number
    local i=$1
    cat <<CU
template <typename T, int B>
__device__ T block_sum_$i(T v) {
    __shared__ T s[B];
    s[threadIdx.x] = v;
    __syncthreads();
    for (int o = B / 2; o > 0; o /= 2) {
        if (threadIdx.x < o) s[threadIdx.x] += s[threadIdx.x + o];
        __syncthreads();
    }
    return s[0];
}
template <typename T>
__device__ T op_$i(T a, T b) { return a * T($i) + b / T($i + 1); }
extern "C" __global__ void reduce_$i(const float *x, float *y, int n) {
    float v = 0;
    for (int k = blockIdx.x * 256 + threadIdx.x; k < n; k += gridDim.x * 256) v += x[k];
    v = block_sum_$i<float, 256>(v);
    if (threadIdx.x == 0) atomicAdd(y, v);
}
extern "C" __global__ void map_f_$i(const float *a, const float *b, float *c, int n) {
    int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k < n) c[k] = op_$i<float>(a[k], b[k]);
}
extern "C" __global__ void map_d_$i(const double *a, const double *b, double *c, int n) {
    int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k < n) c[k] = op_$i<double>(a[k], b[k]);
}
CU
}

elementwise_fp16() {
    local i=$1
    cat <<CU
// templated elementwise, float / fp16 / fp16x2 / bf16 (build_pool source $i)
#include <cuda_fp16.h>
#include <cuda_bf16.h>
template <typename T> struct Op$i {
    __device__ static T apply(T a, T b) { return a * T(float($i) * 0.5f) + b; }
};
template <> struct Op$i<__half> {
    __device__ static __half apply(__half a, __half b) {
        return __hfma(a, __float2half(float($i) * 0.5f), b);
    }
};
template <> struct Op$i<__half2> {
    __device__ static __half2 apply(__half2 a, __half2 b) {
        return __hfma2(a, __float2half2_rn(float($i) * 0.5f), b);
    }
};
template <> struct Op$i<__nv_bfloat16> {
    __device__ static __nv_bfloat16 apply(__nv_bfloat16 a, __nv_bfloat16 b) {
        return __hfma(a, __float2bfloat16(float($i) * 0.5f), b);
    }
};
template <typename T, int V>
__global__ void axpby_$i(const T *__restrict__ a, const T *__restrict__ b, T *__restrict__ c, int n) {
    int k = (blockIdx.x * blockDim.x + threadIdx.x) * V;
#pragma unroll
    for (int v = 0; v < V; v++)
        if (k + v < n) c[k + v] = Op$i<T>::apply(a[k + v], b[k + v]);
}
template __global__ void axpby_$i<float, 4>(const float *, const float *, float *, int);
template __global__ void axpby_$i<__half, 8>(const __half *, const __half *, __half *, int);
template __global__ void axpby_$i<__half2, 4>(const __half2 *, const __half2 *, __half2 *, int);
template __global__ void axpby_$i<__nv_bfloat16, 8>(const __nv_bfloat16 *, const __nv_bfloat16 *, __nv_bfloat16 *, int);
extern "C" __global__ void gelu_h_$i(const __half *x, __half *y, int n) {
    int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k < n) {
        float v = __half2float(x[k]);
        y[k] = __float2half(0.5f * v * (1.f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v))));
    }
}
CU
}

# The conversions and the warp sum that the layernorm kinds share.
ln_common() {
    local i=$1
    cat <<CU
#include <cuda_fp16.h>
#include <cuda_bf16.h>
template <typename T> __device__ float to_f_$i(T v);
template <> __device__ float to_f_$i<float>(float v) { return v; }
template <> __device__ float to_f_$i<__half>(__half v) { return __half2float(v); }
template <> __device__ float to_f_$i<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ T from_f_$i(float v);
template <> __device__ float from_f_$i<float>(float v) { return v; }
template <> __device__ __half from_f_$i<__half>(float v) { return __float2half(v); }
template <> __device__ __nv_bfloat16 from_f_$i<__nv_bfloat16>(float v) { return __float2bfloat16(v); }
__device__ float warp_sum_$i(float v) {
#pragma unroll
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
CU
}

layernorm_fwd() {
    local i=$1
    echo "// layernorm forward, one warp a row, float statistics (build_pool source $i)"
    ln_common "$i"
    cat <<CU
template <typename T, int COLS>
__global__ void layernorm_fwd_$i(const T *x, const T *gamma, const T *beta, T *y, float *mean,
                                 float *rstd, int rows) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;
    float v[COLS / 32], s = 0, ss = 0;
#pragma unroll
    for (int c = 0; c < COLS / 32; c++) { v[c] = to_f_$i(x[row * COLS + c * 32 + lane]); s += v[c]; }
    float mu = warp_sum_$i(s) / COLS;
#pragma unroll
    for (int c = 0; c < COLS / 32; c++) { float d = v[c] - mu; ss += d * d; }
    float r = rsqrtf(warp_sum_$i(ss) / COLS + 1e-5f * $i);
#pragma unroll
    for (int c = 0; c < COLS / 32; c++) {
        int k = c * 32 + lane;
        y[row * COLS + k] = from_f_$i<T>((v[c] - mu) * r * to_f_$i(gamma[k]) + to_f_$i(beta[k]));
    }
    if (lane == 0) { mean[row] = mu; rstd[row] = r; }
}
#define LN_$i(T, C) template __global__ void layernorm_fwd_$i<T, C>(const T *, const T *, const T *, T *, float *, float *, int)
LN_$i(float, 1024);
LN_$i(__half, 1024);
LN_$i(__nv_bfloat16, 1024);
LN_$i(__nv_bfloat16, 4096);
CU
}

layernorm_bwd() {
    local i=$1
    echo "// layernorm backward (input gradient), one warp a row (build_pool source $i)"
    ln_common "$i"
    cat <<CU
template <typename T, int COLS>
__global__ void layernorm_bwd_$i(const T *dy, const T *x, const T *gamma, const float *mean,
                                 const float *rstd, T *dx, int rows) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;
    float xh[COLS / 32], g[COLS / 32], a = 0, b = 0, mu = mean[row], r = rstd[row];
#pragma unroll
    for (int c = 0; c < COLS / 32; c++) {
        int k = c * 32 + lane;
        xh[c] = (to_f_$i(x[row * COLS + k]) - mu) * r;
        g[c] = to_f_$i(dy[row * COLS + k]) * to_f_$i(gamma[k]);
        a += g[c];
        b += g[c] * xh[c];
    }
    a = warp_sum_$i(a) / COLS;
    b = warp_sum_$i(b) / COLS;
#pragma unroll
    for (int c = 0; c < COLS / 32; c++)
        dx[row * COLS + c * 32 + lane] = from_f_$i<T>(r * (g[c] - a - xh[c] * b) * float($i + 1) / float($i + 1));
}
template __global__ void layernorm_bwd_$i<__nv_bfloat16, 1024>(const __nv_bfloat16 *, const __nv_bfloat16 *, const __nv_bfloat16 *, const float *, const float *, __nv_bfloat16 *, int);
template __global__ void layernorm_bwd_$i<__half, 2048>(const __half *, const __half *, const __half *, const float *, const float *, __half *, int);
template __global__ void layernorm_bwd_$i<float, 1024>(const float *, const float *, const float *, const float *, const float *, float *, int);
CU
}

reduce_cg() {
    local i=$1
    cat <<CU
// block reduction with cooperative groups (build_pool source $i)
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
template <typename T, int BLOCK>
__device__ T block_reduce_$i(cg::thread_block block, T v) {
    __shared__ T part[BLOCK / 32];
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    for (int o = 16; o > 0; o /= 2) v += warp.shfl_down(v, o);
    if (warp.thread_rank() == 0) part[warp.meta_group_rank()] = v;
    block.sync();
    v = block.thread_rank() < BLOCK / 32 ? part[block.thread_rank()] : T(0);
    if (warp.meta_group_rank() == 0)
        for (int o = 16; o > 0; o /= 2) v += warp.shfl_down(v, o);
    return v;
}
template <typename T, int BLOCK>
__global__ void sum_sq_$i(const T *x, T *out, int n) {
    cg::thread_block block = cg::this_thread_block();
    T v = 0;
    for (int k = blockIdx.x * BLOCK + threadIdx.x; k < n; k += gridDim.x * BLOCK)
        v += x[k] * x[k] + T($i);
    v = block_reduce_$i<T, BLOCK>(block, v);
    if (block.thread_rank() == 0) atomicAdd(out, v);
}
template __global__ void sum_sq_$i<float, 256>(const float *, float *, int);
template __global__ void sum_sq_$i<double, 256>(const double *, double *, int);
template __global__ void sum_sq_$i<float, 512>(const float *, float *, int);
extern "C" __global__ void max_abs_$i(const float *x, unsigned *out, int n) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    float v = 0;
    for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < n; k += gridDim.x * blockDim.x)
        v = fmaxf(v, fabsf(x[k]));
    for (int o = 16; o > 0; o /= 2) v = fmaxf(v, warp.shfl_down(v, o));
    if (warp.thread_rank() == 0) atomicMax(out, __float_as_uint(v));
}
CU
}

softmax_fp16() {
    local i=$1
    cat <<CU
// row softmax, fp16 in and out, one warp a row (build_pool source $i)
#include <cuda_fp16.h>
template <int COLS>
__global__ void softmax_$i(const __half *x, __half *y, int rows, float scale) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;
    float v[COLS / 32], m = -3.0e38f, s = 0;
#pragma unroll
    for (int c = 0; c < COLS / 32; c++) {
        v[c] = __half2float(x[row * COLS + c * 32 + lane]) * scale;
        m = fmaxf(m, v[c]);
    }
    for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
#pragma unroll
    for (int c = 0; c < COLS / 32; c++) { v[c] = __expf(v[c] - m); s += v[c]; }
    for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
#pragma unroll
    for (int c = 0; c < COLS / 32; c++)
        y[row * COLS + c * 32 + lane] = __float2half(v[c] / s * (1.f + 0.f * $i));
}
template __global__ void softmax_$i<512>(const __half *, __half *, int, float);
template __global__ void softmax_$i<1024>(const __half *, __half *, int, float);
template __global__ void softmax_$i<2048>(const __half *, __half *, int, float);
CU
}

elementwise_bf16() {
    local i=$1
    cat <<CU
// bias + activation on bf16, vectorized (build_pool source $i)
#include <cuda_bf16.h>
template <int V>
__global__ void bias_silu_$i(const __nv_bfloat162 *x, const __nv_bfloat162 *bias, __nv_bfloat162 *y, int n, int cols) {
    int k = (blockIdx.x * blockDim.x + threadIdx.x) * V;
#pragma unroll
    for (int v = 0; v < V; v++) {
        if (k + v >= n) return;
        float2 f = __bfloat1622float2(__hadd2(x[k + v], bias[(k + v) % cols]));
        f.x = f.x / (1.f + __expf(-f.x)) * float($i) / float($i);
        f.y = f.y / (1.f + __expf(-f.y));
        y[k + v] = __float22bfloat162_rn(f);
    }
}
template __global__ void bias_silu_$i<1>(const __nv_bfloat162 *, const __nv_bfloat162 *, __nv_bfloat162 *, int, int);
template __global__ void bias_silu_$i<4>(const __nv_bfloat162 *, const __nv_bfloat162 *, __nv_bfloat162 *, int, int);
CU
}

for i in $(seq 1 "$N"); do
    f="$DIR/op$i.cu"
    if [ "$LIGHT" = --light ]; then
        light "$i" > "$f"
        continue
    fi
    if [ "$LIGHT" = --uniform ]; then
        reduce_cg "$i" > "$f"
        continue
    fi
    case $((i % 8)) in
        0 | 4) elementwise_fp16 "$i" ;;
        1 | 5) layernorm_fwd "$i" ;;
        2) reduce_cg "$i" ;;
        3) softmax_fp16 "$i" ;;
        6) layernorm_bwd "$i" ;;
        7) elementwise_bf16 "$i" ;;
    esac > "$f"
done
