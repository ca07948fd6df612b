// In-place ops over the rows of a row-major tensor, compiled at run time by
// jitop (NVRTC, no host code); src/ops/inplace.c picks the instances and the
// launch shapes.
//
// Ops (T is float, __half or __nv_bfloat16; every sum in float32):
//   sqmm_small<T, N, TRANS>        A (m x N) <- A W  (TRANS: A W^T), W N x N,
//                                  for small N (the C side uses it up to 64)
//   softmax_rows<T, N, VEC, TPR, MASK>   x <- softmax(scale * x) per row, row in registers
//   softmax_cluster<T, N, VEC, TPR, CL, MASK>  a row over a cluster of CL blocks (sm_90)
//   softmax_split<T, N, VEC, TPR, CL, MASK>    the same over smaller blocks, several per SM
//   softmax_rows_lean<T, N, VEC, TPR>, softmax_lean<T, N, VEC, TPR, CL>  softmax_rows and
//                                         softmax_split with fewer ALU ops (no mask)
//   softmax_rows_lean2<T, N, VEC, TPR>, softmax_lean2<T, N, VEC, TPR, CL>  the same with
//                                         one exponential an element (no mask)
//   softmax_long<T, VEC, MASK>            any N at run time, one block per row, two reads
//   ip_copy<W>                            bytes from one buffer to another in W-byte words
//
// Larger square products run through cuBLAS in row chunks (src/ops/inplace.c);
// ip_copy is their copy-back from the scratch when JITOP_INPLACE_MM_COPY_SMS
// keeps SMs from cuBLAS for it.
//
// In place is safe because no element is written before every read of its row
// (sqmm_small: of its whole tile of rows) is done: the tile sits in shared
// memory (sqmm_small) or registers (softmax_rows) between the read and the
// write, behind a barrier; softmax_long writes element j only in its second
// pass, after the row's maximum and sum are known, and reads element j in
// that pass from the same thread just before; softmax_cluster's and
// softmax_split's blocks write only their own slice. So no pointer is __restrict__.
//
// Softmax arithmetic: softmax(scale * x) = softmax(|scale| * y) with
// y = sign(scale) * x (exact), so the row's maximum is taken over y and each
// weight is 2^(c * (y - max)), c = |scale| * log2(e). y - max <= 0, so neither
// the difference nor its product with c can overflow upwards: scale * x is
// never formed (it reaches +inf for |scale| > 1 on large x), and an overflow
// downwards is -inf, weight 0, which is the right limit. The element equal to
// the maximum gets weight 1 by a select, not by y - max, so a row holding +inf
// gives each +inf element an equal share and the rest 0 (the limit of
// softmax as those elements grow) instead of inf - inf = NaN. scale 0 gives
// y = 0 * x: the uniform distribution (NaN where x is infinite, as torch).
//
// Softmax with MASK (causal, for attention scores laid out as rows of
// queries): row r keeps its first r % Q + N - Q + 1 elements (Q = qlen, the
// queries per matrix, 1 <= Q <= N: query q sees keys 0 .. q + N - Q) and writes
// 0 to the rest. A row whose kept elements are all -inf is written as zeros.
#include <cuda_fp16.h>
#include <cuda_bf16.h>

// NVRTC has no <math.h>: -inf by its bits.
#define IP_NINF __int_as_float(0xff800000)
#define IP_PINF __int_as_float(0x7f800000)

template <typename T> struct ip_conv;
template <> struct ip_conv<float> {
    static __device__ __forceinline__ float to(float v) { return v; }
    static __device__ __forceinline__ float from(float v) { return v; }
};
template <> struct ip_conv<__half> {
    static __device__ __forceinline__ float to(__half v) { return __half2float(v); }
    static __device__ __forceinline__ __half from(float v) { return __float2half_rn(v); }
};
template <> struct ip_conv<__nv_bfloat16> {
    static __device__ __forceinline__ float to(__nv_bfloat16 v) { return __bfloat162float(v); }
    static __device__ __forceinline__ __nv_bfloat16 from(float v) { return __float2bfloat16_rn(v); }
};

// VEC elements of T moved as one load/store of VEC * sizeof(T) bytes.
template <typename T, int VEC> struct alignas(sizeof(T) * VEC) ip_vec {
    T v[VEC];
};

// Tells the compiler a vector's raw registers may have changed, so that each
// pass over a thread's share converts them again instead of keeping a float
// copy of the share live from one pass to the next: for 16-bit types that
// copy doubles the registers a row costs (bfloat16 rows of 32768 in 512
// threads took 128 registers, one block per SM, for 64 with this), and the
// registers bound the rows in flight. A conversion is one or two ALU ops.
template <typename T, int VEC> __device__ __forceinline__ void ip_opaque(ip_vec<T, VEC> &v)
{
    if constexpr (sizeof(v) % 4 == 0) {
        unsigned *w = reinterpret_cast<unsigned *>(&v);
#pragma unroll
        for (int i = 0; i < (int)(sizeof(v) / 4); i++)
            asm("" : "+r"(w[i]));
    } else {
        unsigned short *h = reinterpret_cast<unsigned short *>(&v);
        asm("" : "+h"(*h));
    }
}

// Two 16-bit elements as one register, for softmax_lean's packed max and
// stores (one HMNMX2 for two elements' max; one pack of two floats, RN each,
// the same bits as two conversions).
template <typename T> struct ip_pair;
template <> struct ip_pair<__half> {
    typedef __half2 P;
    static __device__ __forceinline__ P max(P a, P b) { return __hmax2(a, b); }
    static __device__ __forceinline__ P min(P a, P b) { return __hmin2(a, b); }
    static __device__ __forceinline__ P pack(float a, float b) { return __floats2half2_rn(a, b); }
    // a * b + c and a * b, each rounded once (HFMA2, HMUL2)
    static __device__ __forceinline__ P fma(P a, P b, P c) { return __hfma2(a, b, c); }
    static __device__ __forceinline__ P mul(P a, P b) { return __hmul2(a, b); }
    // f as hi + lo, each a pair of T (RN): f to within 2^-22 f + 2^-25
    static __device__ __forceinline__ void split(float f, P &hi, P &lo)
    {
        const __half h = __float2half_rn(f);
        hi = __half2half2(h);
        lo = __half2half2(__float2half_rn(f - __half2float(h)));
    }
    // -inf and +inf pairs (the max and min folds' start)
    static __device__ __forceinline__ P lowest()
    {
        return P(__half_raw{0xfc00}, __half_raw{0xfc00});
    }
    static __device__ __forceinline__ P highest()
    {
        return P(__half_raw{0x7c00}, __half_raw{0x7c00});
    }
    // the pair's two elements (low half first) as floats: two HADD2.F32
    static __device__ __forceinline__ void unpack(unsigned u, float &a, float &b)
    {
        const float2 f = __half22float2(*reinterpret_cast<const __half2 *>(&u));
        a = f.x;
        b = f.y;
    }
};
template <> struct ip_pair<__nv_bfloat16> {
    typedef __nv_bfloat162 P;
    static __device__ __forceinline__ P max(P a, P b) { return __hmax2(a, b); }
    static __device__ __forceinline__ P min(P a, P b) { return __hmin2(a, b); }
    static __device__ __forceinline__ P pack(float a, float b) { return __floats2bfloat162_rn(a, b); }
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    static __device__ __forceinline__ P fma(P a, P b, P c) { return __hfma2(a, b, c); }
    static __device__ __forceinline__ P mul(P a, P b) { return __hmul2(a, b); }
#else
    // no bfloat16 arithmetic before sm_80: in float, rounded once to T
    // (the members of an explicit specialization compile for every arch)
    static __device__ __forceinline__ P fma(P a, P b, P c)
    {
        const float2 x = __bfloat1622float2(a), y = __bfloat1622float2(b),
                     z = __bfloat1622float2(c);
        return __floats2bfloat162_rn(fmaf(x.x, y.x, z.x), fmaf(x.y, y.y, z.y));
    }
    static __device__ __forceinline__ P mul(P a, P b)
    {
        const float2 x = __bfloat1622float2(a), y = __bfloat1622float2(b);
        return __floats2bfloat162_rn(x.x * y.x, x.y * y.y);
    }
#endif
    static __device__ __forceinline__ void split(float f, P &hi, P &lo)
    {
        const __nv_bfloat16 h = __float2bfloat16_rn(f);
        hi = __bfloat162bfloat162(h);
        lo = __bfloat162bfloat162(__float2bfloat16_rn(f - __bfloat162float(h)));
    }
    static __device__ __forceinline__ P lowest()
    {
        return P(__nv_bfloat16_raw{0xff80}, __nv_bfloat16_raw{0xff80});
    }
    static __device__ __forceinline__ P highest()
    {
        return P(__nv_bfloat16_raw{0x7f80}, __nv_bfloat16_raw{0x7f80});
    }
    // a bfloat16 is a float's top half: one shift and one AND on the word
    // (element by element, ptxas extracts each half first, then shifts)
    static __device__ __forceinline__ void unpack(unsigned u, float &a, float &b)
    {
        a = __uint_as_float(u << 16);
        b = __uint_as_float(u & 0xffff0000u);
    }
};

// The largest (HI) or smallest raw element of a vector folded into acc, NaN
// ignored as fmaxf / fminf do (__hmax2 / __hmin2 return the other input too).
template <bool HI, typename T, int VEC>
__device__ __forceinline__ void ip_fold(float &acc, const ip_vec<T, VEC> &v)
{
    if constexpr (sizeof(T) == 2 && VEC % 2 == 0) {
        typedef ip_pair<T> PT;
        typedef typename PT::P P;
        const P *p = reinterpret_cast<const P *>(v.v);
        P a = p[0];
#pragma unroll
        for (int k = 1; k < VEC / 2; k++)
            a = HI ? PT::max(a, p[k]) : PT::min(a, p[k]);
        const float x = ip_conv<T>::to(a.x), y = ip_conv<T>::to(a.y);
        acc = HI ? fmaxf(acc, fmaxf(x, y)) : fminf(acc, fminf(x, y));
    } else {
#pragma unroll
        for (int e = 0; e < VEC; e++)
            acc = HI ? fmaxf(acc, ip_conv<T>::to(v.v[e])) : fminf(acc, ip_conv<T>::to(v.v[e]));
    }
}

// w[e] = float(v.v[e]) (exact), two at a time from a 16-bit pair's word.
template <typename T, int VEC>
__device__ __forceinline__ void ip_get(float (&w)[VEC], const ip_vec<T, VEC> &v)
{
    if constexpr (sizeof(T) == 2 && VEC % 2 == 0) {
        const unsigned *u = reinterpret_cast<const unsigned *>(v.v);
#pragma unroll
        for (int k = 0; k < VEC / 2; k++)
            ip_pair<T>::unpack(u[k], w[2 * k], w[2 * k + 1]);
    } else {
#pragma unroll
        for (int e = 0; e < VEC; e++)
            w[e] = ip_conv<T>::to(v.v[e]);
    }
}

// o.v[e] = T(w[e]) (round to nearest), two at a time for 16-bit pairs.
template <typename T, int VEC>
__device__ __forceinline__ void ip_put(ip_vec<T, VEC> &o, const float (&w)[VEC])
{
    if constexpr (sizeof(T) == 2 && VEC % 2 == 0) {
        typedef typename ip_pair<T>::P P;
        P *p = reinterpret_cast<P *>(o.v);
#pragma unroll
        for (int k = 0; k < VEC / 2; k++)
            p[k] = ip_pair<T>::pack(w[2 * k], w[2 * k + 1]);
    } else {
#pragma unroll
        for (int e = 0; e < VEC; e++)
            o.v[e] = ip_conv<T>::from(w[e]);
    }
}

__host__ __device__ constexpr int ip_pow2_ceil(int x)
{
    return x <= 1 ? 1 : 2 * ip_pow2_ceil((x + 1) / 2);
}

// ------------------------------------------------------------ sqmm_small
//
// One block of 256 threads takes tiles of R rows: the tile is read into
// shared memory (as float, transposed: As[k][r]), multiplied by W (read into
// shared memory once per block, as float Ws[k][j], columns padded to NP with
// zeros), each thread accumulating a 4 x 4 block of the tile's product in
// registers; the product goes back through shared memory (Cs[r][j]) and is
// written over the tile with coalesced stores. Full float32 FMAs (no TF32).
// Memory-bound for N <= 64: one read and one write of A, as copy does.
template <int N> struct sqmm_shape {
    static constexpr int CG = ip_pow2_ceil((N + 3) / 4); // column groups of 4
    static constexpr int NP = 4 * CG;      // padded columns
    static constexpr int RG = 256 / CG;    // row groups
    static constexpr int R = 4 * RG;       // rows per tile
    static constexpr int AS = R + 4;       // As row stride (16-byte aligned, skews banks)
    static constexpr int CS = N + 1;       // Cs row stride
    static constexpr int BUF = N * AS > R * CS ? N * AS : R * CS;
};

template <typename T, int N, bool TRANS>
__global__ void __launch_bounds__(256) sqmm_small(T *a, const T *w, long long m)
{
    typedef sqmm_shape<N> S;
    static_assert(S::CG <= 64, "sqmm_small: N too large");
    __shared__ __align__(16) float Ws[N * S::NP];
    __shared__ __align__(16) float buf[S::BUF];
    if (blockDim.x != 256)
        __trap();
    const int tid = threadIdx.x;
    for (int e = tid; e < N * S::NP; e += 256) {
        const int k = e / S::NP, j = e % S::NP;
        Ws[e] = j < N ? ip_conv<T>::to(TRANS ? w[j * N + k] : w[k * N + j]) : 0.f;
    }
    const int tc = tid % S::CG, tr = tid / S::CG;
    const long long tiles = (m + S::R - 1) / S::R;
    for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const long long r0 = tile * S::R;
        const long long rows = m - r0 < S::R ? m - r0 : S::R;
        T *at = a + r0 * N;
        __syncthreads(); // Ws ready; the previous tile's stores have read buf
#pragma unroll 4
        for (int e = tid; e < S::R * N; e += 256) {
            const int r = e / N, k = e % N;
            buf[k * S::AS + r] = r < rows ? ip_conv<T>::to(at[e]) : 0.f;
        }
        __syncthreads();
        float acc[4][4];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++)
                acc[i][j] = 0.f;
#pragma unroll 8
        for (int k = 0; k < N; k++) {
            const float4 av = *reinterpret_cast<const float4 *>(&buf[k * S::AS + tr * 4]);
            const float4 wv = *reinterpret_cast<const float4 *>(&Ws[k * S::NP + tc * 4]);
            const float ar[4] = {av.x, av.y, av.z, av.w}, wr[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    acc[i][j] = fmaf(ar[i], wr[j], acc[i][j]);
        }
        __syncthreads(); // every thread is done reading As
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++)
                if (tc * 4 + j < N)
                    buf[(tr * 4 + i) * S::CS + tc * 4 + j] = acc[i][j];
        __syncthreads();
#pragma unroll 4
        for (int e = tid; e < S::R * N; e += 256) {
            const int r = e / N, c = e % N;
            if (r < rows)
                at[e] = ip_conv<T>::from(buf[r * S::CS + c]);
        }
    }
}

// ------------------------------------------------------------ softmax

// 2^e for e <= 0 as one MUFU op: ex2.approx.ftz; a weight under 2^-126 of
// the row's largest flushes to 0 (the non-ftz form costs three more ALU ops
// per element, and the 16-bit rows run near the SFU's limit: two exps per
// element).
__device__ __forceinline__ float ip_ex2(float e)
{
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(e));
    return r;
}

// The weight of y against the maximum m (y <= m): 1 at the maximum (also
// when both are +inf), else 2^(c (y - m)), 0 when that underflows or y is
// -inf; NaN only for a NaN y.
__device__ __forceinline__ float ip_weight(float y, float m, float c)
{
    return ip_ex2(y == m ? 0.f : c * (y - m));
}

// ONE's largest |c mt| (in powers of two) for which the one-FFMA exponent
// is used: rounding c mt to float shifts a thread's exponents by at most
// this times 2^-24, 2^-14 for 16-bit types (a twelfth of float16's half
// ulp) and 2^-19 for float32 (~1.3e-6 relative, under the test's 1e-5).
// It covers |scale * x| up to ~700 (16-bit) and ~22 (float32).
template <typename T> __device__ __forceinline__ float ip_one_limit()
{
    return sizeof(T) == 4 ? 32.f : 1024.f;
}

// Running maximum (of y) and sum of weights against it, merged in any order.
struct ip_ms {
    float m, s;
};

__device__ __forceinline__ ip_ms ip_merge(ip_ms a, ip_ms b, float c)
{
    const float m = fmaxf(a.m, b.m);
    if (m == IP_NINF)
        return {m, 0.f};
    // a part with nothing yet (m = -inf, s = 0) adds 0, not 0 * weight
    const float sa = a.s == 0.f ? 0.f : a.s * ip_weight(a.m, m, c);
    const float sb = b.s == 0.f ? 0.f : b.s * ip_weight(b.m, m, c);
    return {m, sa + sb};
}

// sign(scale) (0 for 0) and c = |scale| log2(e), the row arithmetic's two
// constants (see the header).
__device__ __forceinline__ float ip_sign(float scale)
{
    return scale > 0.f ? 1.f : (scale < 0.f ? -1.f : 0.f);
}

__device__ __forceinline__ float ip_c(float scale)
{
    return fabsf(scale) * 1.4426950408889634f;
}

// The number of elements row r keeps (MASK: causal with Q queries per matrix).
template <bool MASK> __device__ __forceinline__ int ip_keep(long long r, int n, int q)
{
    if (!MASK)
        return n;
    const int k = (int)(r % q) + n - q + 1;
    return k < n ? k : n;
}

// Reduction of (max, sum) over the TPR threads of a row: shuffles within a
// warp, then, for TPR > 32, shared memory across the row's warps: red holds
// TPR / 32 slots for each row of the block (row = threadIdx.x / TPR).
template <int TPR> __device__ __forceinline__ ip_ms ip_row_reduce(ip_ms v, ip_ms *red, float c2e)
{
    constexpr int W = TPR < 32 ? TPR : 32;
#pragma unroll
    for (int o = W / 2; o > 0; o /= 2) {
        ip_ms u = {__shfl_xor_sync(0xffffffffu, v.m, o, W), __shfl_xor_sync(0xffffffffu, v.s, o, W)};
        v = ip_merge(v, u, c2e);
    }
    if (TPR > 32) {
        constexpr int WPR = TPR > 32 ? TPR / 32 : 1; // warps per row
        ip_ms *mine = red + (threadIdx.x / TPR) * WPR;
        const int lane = threadIdx.x % 32, warp = (threadIdx.x % TPR) / 32;
        __syncthreads(); // red may hold the previous reduction
        if (lane == 0)
            mine[warp] = v;
        __syncthreads();
        v = mine[0];
#pragma unroll
        for (int i = 1; i < WPR; i++)
            v = ip_merge(v, mine[i], c2e);
    }
    return v;
}

// ip_row_reduce for ONE: the warps' parts are merged by shuffles too (lane
// l of every warp reads part l, the rest hold nothing, then 5 shuffle-merges),
// instead of one thread's serial merge of TPR / 32 parts: a 512-thread row's
// 16 parts in flight at once took 30 registers beside the row's, and
// softmax_lean2's 512-thread blocks of 64 bytes a thread (32 registers)
// spilled. The merge order differs, so the sum's last bits may too.
template <int TPR>
__device__ __forceinline__ ip_ms ip_row_reduce_shfl(ip_ms v, ip_ms *red, float c2e)
{
    constexpr int W = TPR < 32 ? TPR : 32;
#pragma unroll
    for (int o = W / 2; o > 0; o /= 2) {
        ip_ms u = {__shfl_xor_sync(0xffffffffu, v.m, o, W),
                   __shfl_xor_sync(0xffffffffu, v.s, o, W)};
        v = ip_merge(v, u, c2e);
    }
    if (TPR > 32) {
        constexpr int WPR = TPR > 32 ? TPR / 32 : 1; // warps per row
        ip_ms *mine = red + (threadIdx.x / TPR) * WPR;
        const int lane = threadIdx.x % 32, warp = (threadIdx.x % TPR) / 32;
        __syncthreads(); // red may hold the previous reduction
        if (lane == 0)
            mine[warp] = v;
        __syncthreads();
        v = lane < WPR ? mine[lane] : ip_ms{IP_NINF, 0.f};
#pragma unroll
        for (int o = 16; o > 0; o /= 2) {
            ip_ms u = {__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)};
            v = ip_merge(v, u, c2e);
        }
    }
    return v;
}

// Thread-block clusters exist from sm_90 on; older archs still compile the
// file, and the C side never picks softmax_cluster there.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define IP_CLUSTER_DIMS(cl) __cluster_dims__(cl, 1, 1)
#else
#define IP_CLUSTER_DIMS(cl)
#endif

__device__ __forceinline__ unsigned ip_cluster_rank()
{
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

__device__ __forceinline__ void ip_cluster_sync()
{
    asm volatile("barrier.cluster.arrive.release.aligned;\n\t"
                 "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// The cluster barrier split in two: arrive without ordering memory (says only
// "this block has started"), wait later.
__device__ __forceinline__ void ip_cluster_arrive_relaxed()
{
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}

__device__ __forceinline__ void ip_cluster_wait()
{
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// Stores v at the address of `local` in block `rank`'s shared memory.
__device__ __forceinline__ void ip_put_peer(ip_ms *local, unsigned rank, ip_ms v)
{
    const unsigned a = (unsigned)__cvta_generic_to_shared(local);
    unsigned ra;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(a), "r"(rank));
    asm volatile("st.shared::cluster.v2.f32 [%0], {%1, %2};" ::"r"(ra), "f"(v.m), "f"(v.s) : "memory");
}

// The shape of a thread's share of a row: the slice of block `rank` is
// vectors [rank * SV, min((rank + 1) * SV, NV)) of the row's NV; the last
// slice is shorter when CL does not divide NV (odd N over a cluster).
template <typename T, int N, int VEC, int TPR, int CL> struct ip_share {
    static_assert(N % VEC == 0, "softmax: VEC must divide N");
    static constexpr int NV = N / VEC;
    static constexpr int SV = (NV + CL - 1) / CL; // vectors per slice
    static constexpr int CNT = (SV + TPR - 1) / TPR; // vectors per thread
    // bytes of registers the share takes (a vector takes whole registers)
    static constexpr int REG = CNT * (VEC * (int)sizeof(T) < 4 ? 4 : VEC * (int)sizeof(T));
    // whether vector j of the slice may lie past its end
    static constexpr bool RAGGED = SV % TPR != 0 || NV % CL != 0;
};

// One row (CL = 1) or one CL-th of a row (block `rank` of a cluster) held by
// TPR threads: CNT vectors of VEC elements each (raw T, so a 16-bit row costs
// half the registers), vector c of thread t at c * TPR + t of the slice's
// SV vectors. One read, one write: what copy moves. One reduction: each
// thread's own max and sum against it, merged across the row (the merge
// rescales the sums), so one exp per element for the sum and one for the
// output. Rows per block: 128 / TPR when TPR < 128, else 1 (always 1 with
// CL > 1).
//
// A cluster's blocks exchange their (max, sum) by pushing them into every
// peer's shared memory (parts[rank]) and one barrier; each then merges its
// own copy, so no block reads a peer's memory and none waits after the
// exchange for the slowest to finish reading (it may leave at once). The
// pushes may only start once every peer has started (its shared memory
// exists): the block arrives (relaxed) at a first barrier on entry and waits
// on it just before pushing, by when its peers have long arrived.
//
// LEAN (softmax_lean, no mask): the max pass takes the largest (scale < 0:
// smallest) raw element, and, where the maximum is finite (not +inf), each
// weight is ex2(c2e * fma(sg, x, -m)): the same bits as ip_weight's
// c2e * (sg * x - m) (sg * x is exact), without its y == m test, which only
// matters for m = +inf. Per 16-bit element that is ~11 ALU ops instead of
// ~19 over the three passes, which bounds long 16-bit rows (two SFU ops per
// element, and the issue slots the loads and stores share).
//
// ONE (softmax_lean2, softmax_rows_lean2; no mask; implies LEAN's max pass):
// each exponential once. The sum pass computes w = 2^(c (y - mt)) against
// the thread's own maximum mt, adds it to the sum and keeps it in place of
// the raw element (16-bit: rounded to T, RN; float32: exact); the output
// pass writes w * 2^(c (mt - M)) / S (M, S: the row's, after the merge):
// one multiply an element instead of a second exponential. Where
// |c mt| <= ip_one_limit<T>() in every thread of the warp (a vote: no
// divergence), w = ex2(fma(sg c, x, -c mt)), one FFMA and one MUFU: the
// rounding of c mt moves every exponent of the thread by at most
// ip_one_limit * 2^-24, a relative error under 2^-14 (16-bit) / 2^-19
// (float32) on its outputs; elsewhere (huge values, +inf) w is
// ip_weight's form, whose exponent error is relative to y - mt. The extra
// rounding of w to 16 bits adds up to half an ulp of T to an output before
// its final rounding.
// The output pass multiplies 16-bit pairs packed: w * f = w * fh + (w * fl)
// with f split into two T (HMUL2 + HFMA2 a pair: w * f to 2^-17 relative,
// plus 2^-25 absolute, before its one rounding). Per 16-bit element: a half
// HMNMX2, then unpack, FFMA, MUFU, FADD and half a pack, then one packed op
// (bench/softmax_sass.py counts them).
template <typename T, int N, int VEC, int TPR, int CL, bool MASK, bool LEAN = false,
          bool ONE = false>
__device__ __forceinline__ void softmax_body(T *x, long long rows, float scale, int qlen)
{
    typedef ip_share<T, N, VEC, TPR, CL> S;
    static_assert(CL == 1 || TPR >= 128, "softmax: a cluster splits rows of whole blocks");
    constexpr int RPB = TPR < 128 ? 128 / TPR : 1;
    constexpr int SV = S::SV, CNT = S::CNT;
    // Raw registers made opaque between passes only for shares over 32 bytes:
    // there a float copy would double the registers that bound the rows in
    // flight; at 32 bytes or less (rows to 8 KiB, many per SM) the copy is at
    // most 16 registers, and redoing the conversions markedly slows 16-bit
    // rows of 4096 (bench/INPLACE_NOTES.md).
    constexpr bool OPQ = S::REG > 32;
    typedef ip_vec<T, VEC> V;
    __shared__ ip_ms red[TPR > 32 ? RPB * (TPR / 32) : 1];
    __shared__ __align__(8) ip_ms parts[CL];
    if (blockDim.x != TPR * RPB)
        __trap();
    if (CL > 1)
        ip_cluster_arrive_relaxed();
    const unsigned rank = CL > 1 ? ip_cluster_rank() : 0;
    const int t = threadIdx.x % TPR;
    const long long r = (long long)(blockIdx.x / CL) * RPB + threadIdx.x / TPR;
    const bool live = r < rows;
    V *xr = reinterpret_cast<V *>(x + (live ? r : 0) * N) + rank * SV;
    const int keep = ip_keep<MASK>(r, N, qlen);
    const int e0 = (int)rank * SV * VEC; // the slice's first element in the row
    const int sv = CL == 1 || S::NV % CL == 0 ? SV : min(SV, S::NV - (int)rank * SV);
    const float sg = ip_sign(scale), c2e = ip_c(scale);
    V v[CNT];
#pragma unroll
    for (int c = 0; c < CNT; c++) {
        const int j = c * TPR + t;
        if (live && (!S::RAGGED || j < sv))
            v[c] = xr[j];
    }
    ip_ms ms = {IP_NINF, 0.f};
    constexpr bool ONE1 = ONE && !MASK;
    constexpr bool LN = (LEAN || ONE) && !MASK;
    if constexpr (ONE1 && sizeof(T) == 2 && VEC % 2 == 0) {
        // ONE: the same maximum, the pairs of all the thread's vectors folded
        // packed (one HMNMX2 per two elements) and converted once at the end
        typedef ip_pair<T> PT;
        typedef typename PT::P P;
        if (sg != 0.f) {
            P a;
            if (sg > 0.f) {
                a = PT::lowest();
#pragma unroll
                for (int c = 0; c < CNT; c++)
                    if (live && (!S::RAGGED || c * TPR + t < sv)) {
                        const P *p = reinterpret_cast<const P *>(v[c].v);
#pragma unroll
                        for (int k = 0; k < VEC / 2; k++)
                            a = PT::max(a, p[k]);
                    }
            } else {
                a = PT::highest();
#pragma unroll
                for (int c = 0; c < CNT; c++)
                    if (live && (!S::RAGGED || c * TPR + t < sv)) {
                        const P *p = reinterpret_cast<const P *>(v[c].v);
#pragma unroll
                        for (int k = 0; k < VEC / 2; k++)
                            a = PT::min(a, p[k]);
                    }
            }
            const float a0 = ip_conv<T>::to(a.x), a1 = ip_conv<T>::to(a.y);
            ms.m = sg > 0.f ? fmaxf(a0, a1) : -fminf(a0, a1);
        } else {
#pragma unroll
            for (int c = 0; c < CNT; c++)
                if (live && (!S::RAGGED || c * TPR + t < sv))
#pragma unroll
                    for (int e = 0; e < VEC; e++)
                        ms.m = fmaxf(ms.m, sg * ip_conv<T>::to(v[c].v[e]));
        }
    } else if (LN && sg != 0.f) {
        // largest and smallest raw element (NaN ignored, as fmaxf does)
        float hi = IP_NINF, lo = IP_PINF;
        if (sg > 0.f) {
#pragma unroll
            for (int c = 0; c < CNT; c++)
                if (live && (!S::RAGGED || c * TPR + t < sv))
                    ip_fold<true>(hi, v[c]);
        } else {
#pragma unroll
            for (int c = 0; c < CNT; c++)
                if (live && (!S::RAGGED || c * TPR + t < sv))
                    ip_fold<false>(lo, v[c]);
        }
        ms.m = sg > 0.f ? hi : -lo;
    } else {
#pragma unroll
        for (int c = 0; c < CNT; c++) {
            const int j = c * TPR + t;
            if (live && (!S::RAGGED || j < sv))
#pragma unroll
                for (int e = 0; e < VEC; e++)
                    if (!MASK || e0 + j * VEC + e < keep)
                        ms.m = fmaxf(ms.m, sg * ip_conv<T>::to(v[c].v[e]));
        }
    }
    const float lm = ms.m == IP_NINF ? 0.f : ms.m;
    const float tm = ms.m; // the thread's own maximum (ONE's reference)
    if (OPQ)
#pragma unroll
        for (int c = 0; c < CNT; c++)
            ip_opaque(v[c]);
    if (ONE1) {
        // w in place of the raw element, against the thread's own maximum
        const float k = c2e * lm;
        if (__all_sync(0xffffffffu, fabsf(k) <= ip_one_limit<T>())) {
            const float a = sg * c2e, b = -k;
#pragma unroll
            for (int c = 0; c < CNT; c++) {
                const int j = c * TPR + t;
                if (live && (!S::RAGGED || j < sv)) {
                    float w[VEC];
                    ip_get(w, v[c]);
#pragma unroll
                    for (int e = 0; e < VEC; e++) {
                        w[e] = ip_ex2(fmaf(a, w[e], b));
                        ms.s += w[e];
                    }
                    ip_put(v[c], w);
                }
            }
        } else {
#pragma unroll
            for (int c = 0; c < CNT; c++) {
                const int j = c * TPR + t;
                if (live && (!S::RAGGED || j < sv)) {
                    float w[VEC];
                    ip_get(w, v[c]);
#pragma unroll
                    for (int e = 0; e < VEC; e++) {
                        w[e] = ip_weight(sg * w[e], lm, c2e);
                        ms.s += w[e];
                    }
                    ip_put(v[c], w);
                }
            }
        }
    } else if (LN && lm != IP_PINF) {
#pragma unroll
        for (int c = 0; c < CNT; c++) {
            const int j = c * TPR + t;
            if (live && (!S::RAGGED || j < sv))
#pragma unroll
                for (int e = 0; e < VEC; e++)
                    ms.s += ip_ex2(c2e * fmaf(sg, ip_conv<T>::to(v[c].v[e]), -lm));
        }
    } else {
#pragma unroll
        for (int c = 0; c < CNT; c++) {
            const int j = c * TPR + t;
            if (live && (!S::RAGGED || j < sv))
#pragma unroll
                for (int e = 0; e < VEC; e++)
                    if (!MASK || e0 + j * VEC + e < keep)
                        ms.s += ip_weight(sg * ip_conv<T>::to(v[c].v[e]), lm, c2e);
        }
    }
    ip_ms tot =
        ONE1 ? ip_row_reduce_shfl<TPR>(ms, red, c2e) : ip_row_reduce<TPR>(ms, red, c2e);
    if (CL > 1) {
        ip_cluster_wait(); // every peer has started
        if (threadIdx.x < CL)
            ip_put_peer(&parts[rank], threadIdx.x, tot);
        ip_cluster_sync(); // every block's part is in every block
        tot = parts[0];
#pragma unroll
        for (int p = 1; p < CL; p++)
            tot = ip_merge(tot, parts[p], c2e);
    }
    const float mx = tot.m == IP_NINF ? 0.f : tot.m;
    const float inv = tot.s > 0.f ? 1.f / tot.s : 0.f;
    if (OPQ)
#pragma unroll
        for (int c = 0; c < CNT; c++)
            ip_opaque(v[c]);
    if (ONE1) {
        // the thread's weights rescaled from its maximum to the row's (0 for
        // a thread of only -inf elements, whose w are 0 too)
        const float f = ip_weight(tm, tot.m, c2e) * inv;
        if constexpr (sizeof(T) == 2 && VEC % 2 == 0) {
            // packed: w * f = w * fh + (w * fl) with f = fh + fl in T, two
            // ops per pair; before HFMA2's one rounding the sum is w * f to
            // 2^-17 relative (fh + fl is f to 2^-18, the rounding of w * fl
            // as small) plus 2^-25 absolute (float16's subnormal fl);
            // f <= 1, w <= 1
            typedef ip_pair<T> PT;
            typedef typename PT::P P;
            P fh, fl;
            PT::split(f, fh, fl);
#pragma unroll
            for (int c = 0; c < CNT; c++) {
                const int j = c * TPR + t;
                if (live && (!S::RAGGED || j < sv)) {
                    const P *p = reinterpret_cast<const P *>(v[c].v);
                    V o;
                    P *q = reinterpret_cast<P *>(o.v);
#pragma unroll
                    for (int k = 0; k < VEC / 2; k++)
                        q[k] = PT::fma(p[k], fh, PT::mul(p[k], fl));
                    xr[j] = o;
                }
            }
        } else {
#pragma unroll
            for (int c = 0; c < CNT; c++) {
                const int j = c * TPR + t;
                if (live && (!S::RAGGED || j < sv)) {
                    float w[VEC];
                    ip_get(w, v[c]);
#pragma unroll
                    for (int e = 0; e < VEC; e++)
                        w[e] *= f;
                    V o;
                    ip_put(o, w);
                    xr[j] = o;
                }
            }
        }
    } else if (LN && mx != IP_PINF) {
#pragma unroll
        for (int c = 0; c < CNT; c++) {
            const int j = c * TPR + t;
            if (live && (!S::RAGGED || j < sv)) {
                float w[VEC];
#pragma unroll
                for (int e = 0; e < VEC; e++)
                    w[e] = ip_ex2(c2e * fmaf(sg, ip_conv<T>::to(v[c].v[e]), -mx)) * inv;
                V o;
                ip_put(o, w);
                xr[j] = o;
            }
        }
    } else {
#pragma unroll
        for (int c = 0; c < CNT; c++) {
            const int j = c * TPR + t;
            if (live && (!S::RAGGED || j < sv)) {
                V o;
#pragma unroll
                for (int e = 0; e < VEC; e++) {
                    const bool kept = !MASK || e0 + j * VEC + e < keep;
                    o.v[e] = ip_conv<T>::from(
                        kept ? ip_weight(sg * ip_conv<T>::to(v[c].v[e]), mx, c2e) * inv : 0.f);
                }
                xr[j] = o;
            }
        }
    }
}

template <typename T, int N, int VEC, int TPR, bool MASK>
__global__ void __launch_bounds__(TPR < 128 ? 128 : TPR)
    softmax_rows(T *x, long long rows, float scale, int qlen)
{
    softmax_body<T, N, VEC, TPR, 1, MASK>(x, rows, scale, qlen);
}

// softmax_rows with the LEAN arithmetic (JITOP_INPLACE_SOFTMAX=leanblock, to
// compare); a masked row takes softmax_rows.
template <typename T, int N, int VEC, int TPR>
__global__ void __launch_bounds__(TPR < 128 ? 128 : TPR)
    softmax_rows_lean(T *x, long long rows, float scale, int qlen)
{
    softmax_body<T, N, VEC, TPR, 1, false, true>(x, rows, scale, qlen);
}

// Rows over one block's registers: a cluster of CL blocks per row (grid =
// rows x CL), each holding a slice, their (max, sum) merged through
// distributed shared memory. Two blocks of 1024 threads fit an SM when each
// thread holds 64 bytes, so two rows' phases overlap there.
template <typename T, int N, int VEC, int TPR, int CL, bool MASK>
__global__ void IP_CLUSTER_DIMS(CL) __launch_bounds__(TPR)
    softmax_cluster(T *x, long long rows, float scale, int qlen)
{
    softmax_body<T, N, VEC, TPR, CL, MASK>(x, rows, scale, qlen);
}

// The same over a cluster of smaller blocks (TPR of 256-512 threads), with
// the register cap that lets 2048 threads per SM run when a thread's share
// takes at most 64 bytes of registers (1024 up to 128): four to eight blocks
// per SM, of different rows, so that while some wait at their row's
// reductions and cluster barrier the others' loads and stores keep the
// memory busy (a block of 1024 threads stalls as a whole at each barrier).
// (The mask's bounds take registers: 1536 threads then, as 2048 spill.)
template <typename T, int N, int VEC, int TPR, int CL, bool MASK>
__host__ __device__ constexpr int ip_split_min_blocks()
{
    return (ip_share<T, N, VEC, TPR, CL>::REG <= 64 ? (MASK ? 1536 : 2048) : 1024) / TPR > 0
               ? (ip_share<T, N, VEC, TPR, CL>::REG <= 64 ? (MASK ? 1536 : 2048) : 1024) / TPR
               : 1;
}

template <typename T, int N, int VEC, int TPR, int CL, bool MASK>
__global__ void IP_CLUSTER_DIMS(CL)
    __launch_bounds__(TPR, (ip_split_min_blocks<T, N, VEC, TPR, CL, MASK>()))
        softmax_split(T *x, long long rows, float scale, int qlen)
{
    static_assert(ip_share<T, N, VEC, TPR, CL>::REG <= 128, "softmax_split: share over 128 bytes");
    softmax_body<T, N, VEC, TPR, CL, MASK>(x, rows, scale, qlen);
}

// softmax_split with the LEAN arithmetic (see softmax_body), to compare
// (JITOP_INPLACE_SOFTMAX=lean, lean256): the same bits on every row whose
// maximum is finite; a masked row takes softmax_split.
template <typename T, int N, int VEC, int TPR, int CL>
__global__ void IP_CLUSTER_DIMS(CL)
    __launch_bounds__(TPR, (ip_split_min_blocks<T, N, VEC, TPR, CL, false>()))
        softmax_lean(T *x, long long rows, float scale, int qlen)
{
    static_assert(ip_share<T, N, VEC, TPR, CL>::REG <= 128, "softmax_lean: share over 128 bytes");
    softmax_body<T, N, VEC, TPR, CL, false, true>(x, rows, scale, qlen);
}

// softmax_rows and softmax_split with ONE's arithmetic (each exponential
// once, see softmax_body; JITOP_INPLACE_SOFTMAX=lean2block, lean2,
// lean2_256, lean2_128); a masked row takes softmax_rows / softmax_split.
template <typename T, int N, int VEC, int TPR>
__global__ void __launch_bounds__(TPR < 128 ? 128 : TPR)
    softmax_rows_lean2(T *x, long long rows, float scale, int qlen)
{
    softmax_body<T, N, VEC, TPR, 1, false, true, true>(x, rows, scale, qlen);
}

template <typename T, int N, int VEC, int TPR, int CL>
__global__ void IP_CLUSTER_DIMS(CL)
    __launch_bounds__(TPR, (ip_split_min_blocks<T, N, VEC, TPR, CL, false>()))
        softmax_lean2(T *x, long long rows, float scale, int qlen)
{
    static_assert(ip_share<T, N, VEC, TPR, CL>::REG <= 128, "softmax_lean2: share over 128 bytes");
    softmax_body<T, N, VEC, TPR, CL, false, true, true>(x, rows, scale, qlen);
}

// Rows too long for registers: one block of 1024 threads per row (grid-stride
// over rows), an online (max, sum) pass, then a pass that reads again and
// writes. The second read mostly hits L2 (a block's row is at most a few
// hundred KB and is re-read right after).
template <typename T, int VEC, bool MASK>
__global__ void __launch_bounds__(1024) softmax_long(T *x, long long rows, int n, float scale, int qlen)
{
    typedef ip_vec<T, VEC> V;
    __shared__ ip_ms red[32];
    if (blockDim.x != 1024)
        __trap();
    const int nv = n / VEC;
    const float sg = ip_sign(scale), c2e = ip_c(scale);
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        V *xr = reinterpret_cast<V *>(x + r * n);
        const int keep = ip_keep<MASK>(r, n, qlen);
        ip_ms ms = {IP_NINF, 0.f};
        for (int j = threadIdx.x; j < nv; j += blockDim.x) {
            const V v = xr[j];
            float m = IP_NINF;
#pragma unroll
            for (int e = 0; e < VEC; e++)
                if (!MASK || j * VEC + e < keep)
                    m = fmaxf(m, sg * ip_conv<T>::to(v.v[e]));
            if (m == IP_NINF)
                continue;
            float s = 0.f;
#pragma unroll
            for (int e = 0; e < VEC; e++)
                if (!MASK || j * VEC + e < keep)
                    s += ip_weight(sg * ip_conv<T>::to(v.v[e]), m, c2e);
            ms = ip_merge(ms, ip_ms{m, s}, c2e);
        }
        const ip_ms tot = ip_row_reduce<1024>(ms, red, c2e);
        const float mx = tot.m == IP_NINF ? 0.f : tot.m;
        const float inv = tot.s > 0.f ? 1.f / tot.s : 0.f;
        for (int j = threadIdx.x; j < nv; j += blockDim.x) {
            const V v = xr[j];
            V o;
#pragma unroll
            for (int e = 0; e < VEC; e++) {
                const bool kept = !MASK || j * VEC + e < keep;
                o.v[e] = ip_conv<T>::from(kept ? ip_weight(sg * ip_conv<T>::to(v.v[e]), mx, c2e) * inv : 0.f);
            }
            xr[j] = o;
        }
    }
}

// The copy-back of a square product's chunk from its scratch over A
// (src/ops/inplace.c, JITOP_INPLACE_MM_COPY_SMS): launched on the copy stream
// with a grid of at most the few SMs' worth of blocks that cuBLAS's SM count
// target leaves free, so that it runs beside the next chunk's product
// instead of between products. Few SMs must move a whole chunk, so each
// thread issues IP_COPY_UNROLL independent W-byte loads before their stores
// (16 KiB in flight per 256-thread block at W = 16) and loops over the chunk
// (grid-stride: consecutive threads, consecutive words). Both pointers are
// W-aligned (the host picks W, 16 where A and the chunk size allow); the
// bytes after the last whole word (fewer than W) go one per thread.
// Different buffers (scratch and A), so __restrict__ holds here.
template <int W> struct ip_word;
template <> struct ip_word<16> { typedef uint4 T; };
template <> struct ip_word<8> { typedef uint2 T; };
template <> struct ip_word<4> { typedef unsigned T; };
template <> struct ip_word<2> { typedef unsigned short T; };
template <> struct ip_word<1> { typedef unsigned char T; };

#define IP_COPY_UNROLL 4

template <int W>
__global__ void __launch_bounds__(256) ip_copy(unsigned char *__restrict__ dst,
                                               const unsigned char *__restrict__ src,
                                               unsigned long long bytes)
{
    typedef typename ip_word<W>::T V;
    V *d = reinterpret_cast<V *>(dst);
    const V *s = reinterpret_cast<const V *>(src);
    const unsigned long long words = bytes / W;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long t = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long i = t;
    for (; i + (IP_COPY_UNROLL - 1) * stride < words; i += IP_COPY_UNROLL * stride) {
        V v[IP_COPY_UNROLL];
#pragma unroll
        for (int u = 0; u < IP_COPY_UNROLL; u++)
            v[u] = s[i + u * stride];
#pragma unroll
        for (int u = 0; u < IP_COPY_UNROLL; u++)
            d[i + u * stride] = v[u];
    }
    for (; i < words; i += stride)
        d[i] = s[i];
    if (t < bytes - words * W)
        dst[words * W + t] = src[words * W + t];
}
