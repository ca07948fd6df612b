// LayerNorm forward and backward over the last dimension of an M x N
// row-major tensor, compiled at run time by jitop (NVRTC, no host code):
//
//   y = (x - mean) * rstd * gamma + beta,  rstd = 1 / sqrt(var + eps),
//   var the biased variance; statistics and every sum in float32.
//   Backward, with xhat = (x - mean) * rstd and g = dy * gamma:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),
//   dgamma = sum over rows of dy * xhat, dbeta = sum over rows of dy.
//
// Ops (T is float, __half or __nv_bfloat16):
//   layernorm_fwd<T, N, AFFINE[, VEC, TPR, MINB]>      one row per TPR threads
//   layernorm_fwd_cluster<T, N, AFFINE, VEC, TPR, CL[, MINB, ONE]>  one row per CL-block cluster
//   layernorm_fwd_generic<T, AFFINE, VEC>              any N at run time
//   layernorm_fwd_bulk<T, N, AFFINE, TPR, CL[, S, GB, ONE]>  rows by the copy engine (sm_90)
//   layernorm_bwd<T, N, AFFINE[, VEC, TPR, SACC, PF, MINB]>
//   layernorm_bwd_cluster<T, N, AFFINE, VEC, TPR, CL[, SACC, PF, MINB]>
//   layernorm_bwd_bulk<T, N, AFFINE, TPR, CL[, S]>     rows by the copy engine (sm_90)
//   layernorm_bwd_generic<T, AFFINE, VEC>, layernorm_bwd_reduce<T>
// The specialized kernels hold their share of the row in registers (as the
// raw T bits, so a 16-bit row costs half the registers), read it once and
// write it once: the fewest bytes a LayerNorm can move. Mean and variance
// come from two passes over those registers (exact, and free: no memory
// traffic). In place (y == x, dx == dy) is safe because every element is
// read and written by the same thread, with the writes after the row's
// reductions (in layernorm_bwd_bulk: the whole row has arrived in shared
// memory before any of it is written, and is never read again); for that
// reason x, y, dy and dx are never __restrict__.
//
// Launch shape (src/ops/layernorm.c computes the same; the kernels trap on a
// block size that does not match their template):
//   ROWS  = TPR < 128 && CL == 1 ? 128 / TPR : 1   rows per block
//   block = TPR * ROWS threads
//   forward grid = ceil(M / ROWS) * CL blocks
//   backward grid = G * CL blocks for any G >= 1 (a persistent loop over
//   row groups; one wave of resident blocks is best: for clusters, what
//   cuOccupancyMaxActiveClusters says, not SMs / CL), with
//   ln_bwd_smem_bytes<T, N, VEC, TPR, CL>() bytes of dynamic shared memory
//   when AFFINE and SACC (the dgamma/dbeta accumulators). With AFFINE it
//   writes P = G partial rows (float32, each ln_part_row(N) floats:
//   dgamma's N columns, then dbeta's from ln_part_beta(N), N rounded up to
//   whole 128-byte lines) that layernorm_bwd_reduce sums in a fixed order,
//   so the result is deterministic (block 32 x R for any R <= 32, grid
//   (ceil(N / 32), 2)); part 128-byte aligned.
//   Rows of any alignment (VEC does not divide N, below): P = G * ROWS
//   partial rows (one per row group), and G * ROWS * N * sizeof(T) a
//   multiple of 16 unless G * ROWS >= M (the kernel traps otherwise).
//   generic kernels: block 512, forward grid M, backward grid any G.
//   layernorm_fwd_bulk, layernorm_bwd_bulk: see their comments.
// AFFINE: the forward reads gamma and beta, each may still be NULL (then
// scale 1, shift 0); the backward scales by gamma (NULL: 1) and writes the
// partials. mean_out / rstd_out may be NULL (not saved).
//
// MINB (launch bounds' blocks per SM, so the register cap) and PF (the
// backward's prefetch of the next rows) default to the rules below; see
// layernorm_fwd and ln_bwd_pf.
//
// VEC elements of T are moved per load (VEC * sizeof(T) bytes: 16, 8, 4 or
// 2); the caller picks the widest VEC that divides N and to whose size
// every pointer is aligned, or the 16-byte VEC for an N it does not divide
// where the row tensors (x and y; dy, x and dx) sit at one offset within
// 16 bytes and gamma and beta are 16-byte aligned: rows of any alignment.

#if defined(__has_include)
#if __has_include(<cuda_fp16.h>) && __has_include(<cuda_bf16.h>)
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#define LN_HAVE_HALF_HEADERS 1
#endif
#endif
#ifndef LN_HAVE_HALF_HEADERS
// jitop finds the toolkit's cuda_fp16.h / cuda_bf16.h without an -I, but a
// machine with only the driver and NVRTC (NVRTC's pip wheel, for one) has
// none: NVRTC 13 has no built-in copy. These kernels use only the types'
// 16-bit storage and convert with PTX, so a storage-only definition with the
// same name and layout suffices there, and the op names and mangled symbols
// are the same either way.
struct __align__(2) __half {
    unsigned short __x;
};
struct __align__(2) __nv_bfloat16 {
    unsigned short __x;
};
#endif

// Streaming cache hints (evict first) for tensors read or written once.
// Define LN_NO_STREAMING_HINTS to use plain loads and stores.
#ifdef LN_NO_STREAMING_HINTS
#define LN_LD(p) (*(p))
#define LN_ST(p, v) (*(p) = (v))
#else
#define LN_LD(p) __ldcs(p)
#define LN_ST(p, v) __stcs((p), (v))
#endif

// Programmatic dependent launch (sm_90 and newer): src/ops/layernorm.c
// launches the backward's kernels with programmatic stream serialization
// (JITOP_LN_PDL), so that a kernel's launch and its blocks' start are taken
// while the previous kernel in the stream ends, not after it. Every kernel
// calls this first, before it touches memory, so that any may be launched
// so: griddepcontrol.wait returns once the previous grid has completed and
// its writes are visible (at once when the kernel was launched without the
// attribute), and the stream's order holds for every byte.
__device__ __forceinline__ void ln_after_previous_grid()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// The backward's partial rows (float32): row p's dgamma columns at
// part[p * ln_part_row(N)], its dbeta columns ln_part_beta(N) further, each
// half N rounded up to whole 128-byte lines, so that the reduction's 32
// columns of a half are one line it can drop from L2 once read
// (layernorm_bwd_reduce; src/ops/layernorm.c sizes the workspace so).
__host__ __device__ constexpr long long ln_part_beta(int n)
{
    return (n + 31LL) / 32 * 32;
}
__host__ __device__ constexpr long long ln_part_row(int n)
{
    return 2 * ln_part_beta(n);
}

// --------------------------------------------------------------- raw vectors

template <int B> struct ln_raw;
template <> struct ln_raw<16> { uint4 v; };
template <> struct ln_raw<8> { uint2 v; };
template <> struct ln_raw<4> { unsigned v; };
template <> struct ln_raw<2> { unsigned short v; };

template <int B> __device__ __forceinline__ ln_raw<B> ln_load(const void *p)
{
    ln_raw<B> r;
    r.v = LN_LD(reinterpret_cast<const decltype(r.v) *>(p));
    return r;
}
// Small read-only vectors (gamma, beta): through the read-only cache, kept.
template <int B> __device__ __forceinline__ ln_raw<B> ln_load_ro(const void *p)
{
    ln_raw<B> r;
    r.v = __ldg(reinterpret_cast<const decltype(r.v) *>(p));
    return r;
}
template <int B> __device__ __forceinline__ void ln_store(void *p, const ln_raw<B> &r)
{
    LN_ST(reinterpret_cast<decltype(r.v) *>(p), r.v);
}
// Tells the compiler the raw registers may have changed, so that it converts
// them again after a reduction instead of keeping a float copy of the row
// live across it (which doubles, for 16-bit types, the registers a row costs,
// and registers are what bounds the rows in flight).
__device__ __forceinline__ void ln_opaque(ln_raw<16> &r)
{
    asm("" : "+r"(r.v.x), "+r"(r.v.y), "+r"(r.v.z), "+r"(r.v.w));
}
__device__ __forceinline__ void ln_opaque(ln_raw<8> &r) { asm("" : "+r"(r.v.x), "+r"(r.v.y)); }
__device__ __forceinline__ void ln_opaque(ln_raw<4> &r) { asm("" : "+r"(r.v)); }
__device__ __forceinline__ void ln_opaque(ln_raw<2> &r) { asm("" : "+h"(r.v)); }

template <int B> __device__ __forceinline__ ln_raw<B> ln_zero()
{
    ln_raw<B> r;
    memset(&r, 0, sizeof r);
    return r;
}

__device__ __forceinline__ float ln_h2f(unsigned short h)
{
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

template <typename T> struct ln_conv;

template <> struct ln_conv<float> {
    template <int V> static __device__ __forceinline__ void unpack(const void *raw, float (&f)[V])
    {
        memcpy(f, raw, sizeof f);
    }
    template <int V> static __device__ __forceinline__ void pack(const float (&f)[V], void *raw)
    {
        memcpy(raw, f, sizeof f);
    }
};

template <> struct ln_conv<__half> {
    template <int V> static __device__ __forceinline__ void unpack(const void *raw, float (&f)[V])
    {
        unsigned short h[V];
        memcpy(h, raw, sizeof h);
#pragma unroll
        for (int i = 0; i < V; i++)
            f[i] = ln_h2f(h[i]);
    }
    template <int V> static __device__ __forceinline__ void pack(const float (&f)[V], void *raw)
    {
        if constexpr (V == 1) {
            unsigned short h;
            asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f[0]));
            memcpy(raw, &h, 2);
        } else {
            unsigned w[V / 2];
#pragma unroll
            for (int i = 0; i < V / 2; i++) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
                // the paired convert is sm_80's
                unsigned short lo, hi;
                asm("cvt.rn.f16.f32 %0, %1;" : "=h"(lo) : "f"(f[2 * i]));
                asm("cvt.rn.f16.f32 %0, %1;" : "=h"(hi) : "f"(f[2 * i + 1]));
                w[i] = static_cast<unsigned>(lo) | static_cast<unsigned>(hi) << 16;
#else
                asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(w[i]) : "f"(f[2 * i + 1]), "f"(f[2 * i]));
#endif
            }
            memcpy(raw, w, sizeof w);
        }
    }
};

template <> struct ln_conv<__nv_bfloat16> {
    // A bfloat16 is the high half of a float32. Pairs are widened from the
    // 32-bit word that holds them: the low one shifted up, the high one
    // masked in place, one instruction each (element by element it took a
    // zero-extension and a shift per element).
    template <int V> static __device__ __forceinline__ void unpack(const void *raw, float (&f)[V])
    {
        if constexpr (V % 2 == 0) {
            unsigned w[V / 2];
            memcpy(w, raw, sizeof w);
#pragma unroll
            for (int i = 0; i < V / 2; i++) {
                f[2 * i] = __uint_as_float(w[i] << 16);
                f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
            }
        } else {
            unsigned short h[V];
            memcpy(h, raw, sizeof h);
#pragma unroll
            for (int i = 0; i < V; i++)
                f[i] = __uint_as_float(static_cast<unsigned>(h[i]) << 16);
        }
    }
    template <int V> static __device__ __forceinline__ void pack(const float (&f)[V], void *raw)
    {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
        // bfloat16 converts are sm_80's: round to nearest even by hand
        // (a NaN stays a quiet NaN)
        unsigned short h[V];
#pragma unroll
        for (int i = 0; i < V; i++) {
            const unsigned u = __float_as_uint(f[i]);
            h[i] = (u & 0x7fffffffu) > 0x7f800000u
                       ? static_cast<unsigned short>((u >> 16) | 0x40u)
                       : static_cast<unsigned short>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
        }
        memcpy(raw, h, sizeof h);
#else
        if constexpr (V == 1) {
            unsigned short h;
            asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f[0]));
            memcpy(raw, &h, 2);
        } else {
            unsigned w[V / 2];
#pragma unroll
            for (int i = 0; i < V / 2; i++)
                asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w[i]) : "f"(f[2 * i + 1]), "f"(f[2 * i]));
            memcpy(raw, w, sizeof w);
        }
#endif
    }
};

// The backward's scale for VEC columns from j * VEC: gamma's values when it
// is given (load), else ones.
template <typename T, int VEC>
__device__ __forceinline__ void ln_unpack_gamma(const T *__restrict__ gamma, int j, bool load,
                                                float (&fg)[VEC])
{
    if (load) {
        ln_raw<VEC * static_cast<int>(sizeof(T))> gv =
            ln_load_ro<VEC * static_cast<int>(sizeof(T))>(gamma + j * VEC);
        ln_conv<T>::unpack(&gv, fg);
    } else {
#pragma unroll
        for (int e = 0; e < VEC; e++)
            fg[e] = 1.f;
    }
}

// ------------------------------------------------- rows of any alignment
// A row length that is not a multiple of the 16-byte vector (an odd 16-bit
// N, a float32 N not a multiple of 4) puts the rows at different offsets
// within 16 bytes, so that the widest vector dividing N is narrower (2
// bytes for an odd N) and each thread moves that much per load. Instances
// named with the 16-byte VEC for such an N (ln_shape's SHIFT; N >= 2 VEC)
// split each row into a head of h < VEC elements up to its first 16-byte
// boundary, a body of N / VEC - 1 whole 16-byte vectors, and a tail of the
// rest: head and tail are N % VEC + VEC elements whatever h (ln_shape's NX),
// single elements of the first threads (XS each). With one vector fewer
// than the row would hold after its head, the second aligned vector each
// body vector's gamma and beta come from is always whole and inside them:
// the loads need no branch and can all be in flight. x and y (dy, x and dx)
// sit at the same offset within 16 bytes and gamma and beta are 16-byte
// aligned (src/ops/layernorm.c picks these instances only then), so every
// body vector is aligned in the row tensors, and h elements off in gamma and
// beta (ln_load_ro_at).

// Elements from the element at base + off to the next 16-byte boundary.
template <typename T> __device__ __forceinline__ int ln_head(const T *base, long long off)
{
    const unsigned long long a = reinterpret_cast<unsigned long long>(base) +
                                 static_cast<unsigned long long>(off) * sizeof(T);
    return static_cast<int>(((16u - (a & 15u)) & 15u) / sizeof(T));
}

// The 16 bytes from element s (s < VEC) of the 32 in lo and hi (the
// aligned vectors at and after it): selects and a funnel shift (s is the
// same for a whole row, so the selects do not diverge; 0 selects lo).
template <typename T>
__device__ __forceinline__ ln_raw<16> ln_shift_pair(const ln_raw<16> &lo, const ln_raw<16> &hi, int s)
{
    constexpr int ES = static_cast<int>(sizeof(T));
    unsigned w[8] = {lo.v.x, lo.v.y, lo.v.z, lo.v.w, hi.v.x, hi.v.y, hi.v.z, hi.v.w};
    const unsigned sb = static_cast<unsigned>(s * ES), q = sb >> 2, sh = (sb & 3u) * 8u;
#pragma unroll
    for (int k = 0; k < 6; k++) // ascending: w[k + 2] is read before it changes
        w[k] = (q & 2u) ? w[k + 2] : w[k];
#pragma unroll
    for (int k = 0; k < 5; k++)
        w[k] = (q & 1u) ? w[k + 1] : w[k];
    ln_raw<16> r;
    r.v.x = __funnelshift_r(w[0], w[1], sh);
    r.v.y = __funnelshift_r(w[1], w[2], sh);
    r.v.z = __funnelshift_r(w[2], w[3], sh);
    r.v.w = __funnelshift_r(w[3], w[4], sh);
    return r;
}

// The VEC elements of g (16-byte aligned) from e0: the aligned vectors at
// and after e0, shifted by e0 % VEC elements (ln_shift_pair). The caller
// keeps e0 + VEC within g's last whole vector (a body of N / VEC - 1
// vectors), so both loads are whole and inside g.
template <typename T, int VEC>
__device__ __forceinline__ ln_raw<16> ln_load_ro_at(const T *__restrict__ g, int e0)
{
    static_assert(VEC * sizeof(T) == 16, "16-byte vectors");
    const int s = e0 % VEC, base = e0 - s;
    return ln_shift_pair<T>(ln_load_ro<16>(g + base), ln_load_ro<16>(g + base + VEC), s);
}

// The element index of a thread's head/tail slot k (k < NX): the head's k
// below h, else the tail's, after nb body vectors.
template <int VEC> __device__ __forceinline__ int ln_edge_index(int k, int h, int nb)
{
    return k < h ? k : k + nb * VEC;
}

// The backward's scale for the body vector from element e0 (SHIFT) or for
// VEC columns from e0 (aligned): gamma's values when given (load), else ones.
template <typename T, int VEC, bool SHIFT>
__device__ __forceinline__ void ln_unpack_gamma_at(const T *__restrict__ gamma, int e0, bool load,
                                                   float (&fg)[VEC])
{
    if constexpr (SHIFT) {
        if (load) {
            ln_raw<16> gv = ln_load_ro_at<T, VEC>(gamma, e0);
            ln_conv<T>::unpack(&gv, fg);
            return;
        }
#pragma unroll
        for (int e = 0; e < VEC; e++)
            fg[e] = 1.f;
    } else {
        ln_unpack_gamma<T, VEC>(gamma, e0 / VEC, load, fg);
    }
}

// ------------------------------------------------------------ launch shapes

// Bytes of one row a thread holds per tensor at most, and the largest block
// used for one row before the row is split over a cluster. The defaults of
// the short names (layernorm_fwd<T, N, AFFINE>) follow the same rule as
// src/ops/layernorm.c.
// The more bytes each thread keeps in flight the better, up to what the
// registers hold (bench/layernorm_NOTES.md).
#ifndef LN_FWD_MAX_BYTES
#define LN_FWD_MAX_BYTES 128
#endif
#ifndef LN_BWD_MAX_BYTES
#define LN_BWD_MAX_BYTES 32
#endif
#ifndef LN_FWD_MAX_TPR
#define LN_FWD_MAX_TPR 1024
#endif
#ifndef LN_BWD_MAX_TPR
#define LN_BWD_MAX_TPR 1024
#endif

template <typename T> __host__ __device__ constexpr int ln_default_vec(int n)
{
    int v = 16 / static_cast<int>(sizeof(T));
    while (n % v != 0)
        v /= 2;
    return v;
}
// Threads per row: the fewest whose share of the row's NVEC vectors of B
// bytes fits max_bytes each, as a power of two up to a warp (a row group's
// sums are warp shuffles) and in whole warps above, where a power of two
// would leave up to half the lanes of the last pass without a vector.
__host__ __device__ constexpr int ln_threads_per_row(int nvec, int b, int max_bytes)
{
    const int per = max_bytes / b > 0 ? max_bytes / b : 1; // vectors per thread at most
    const int need = (nvec + per - 1) / per;
    if (need > 32)
        return (need + 31) / 32 * 32;
    int tt = 1;
    while (tt < need)
        tt *= 2;
    return tt;
}
__host__ __device__ constexpr int ln_min(int a, int b) { return a < b ? a : b; }

// SHIFT (N % VEC != 0, 16-byte vectors only): rows of any alignment, above.
template <typename T, int N, int VEC, int TPR, int CL> struct ln_shape {
    // Enumerators, not static constexpr members: C++17 makes those inline
    // variables, which NVRTC emits as __device__ globals, and a module with
    // globals costs the driver a device allocation and a copy at every load.
    enum : int {
        B = VEC * static_cast<int>(sizeof(T)),
        SHIFT = N % VEC != 0,
        NVEC = N / VEC - SHIFT,       // vectors of a row (SHIFT: of its body)
        NX = SHIFT ? N % VEC + VEC : 0, // SHIFT: head and tail elements
        ROWS = (CL == 1 && TPR < 128) ? 128 / TPR : 1,
        BLOCK = TPR * ROWS,
        TT = TPR * CL,                // threads per row
        VPT = (NVEC + TT - 1) / TT,   // vectors per thread
        FULL = NVEC % TT == 0,        // no thread runs past the row (its body)
        XS = (NX + TT - 1) / TT,      // head and tail elements per thread
        WARPS = BLOCK / 32 > 0 ? BLOCK / 32 : 1,
    };
    static_assert(SHIFT ? N >= 2 * VEC : N >= VEC, "a row of at least one vector (of body)");
    static_assert(!SHIFT || B == 16,
                  "VEC divides N, or is a 16-byte vector (rows of any alignment)");
    static_assert(B == 2 || B == 4 || B == 8 || B == 16, "a vector is 2, 4, 8 or 16 bytes");
    static_assert(TPR >= 1 && TPR <= 1024 && (TPR < 32 ? (TPR & (TPR - 1)) == 0 : TPR % 32 == 0),
                  "TPR: a power of two up to 32, whole warps above, at most 1024");
    static_assert(CL == 1 || CL == 2 || CL == 4 || CL == 8, "CL: 1, 2, 4 or 8");
    static_assert(CL == 1 || TPR >= 32, "a cluster splits rows of whole warps");
};

// ------------------------------------------------------------- reductions

// Thread-block clusters exist from sm_90 on. Older archs still compile the
// file (a multi-arch prewarm must not fail on it); the C API never picks a
// cluster instance there, and instantiating one for them fails in ptxas.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define LN_CLUSTER_DIMS(cl) __cluster_dims__(cl, 1, 1)
#else
#define LN_CLUSTER_DIMS(cl)
#endif

__device__ __forceinline__ unsigned ln_cluster_rank()
{
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ void ln_cluster_sync()
{
    asm volatile("barrier.cluster.arrive.release.aligned;\n\t"
                 "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// mbarriers (sm_90): one arrival (the thread that expects the bytes) plus
// the bytes of the asynchronous copies or stores that complete each phase.
__device__ __forceinline__ unsigned ln_smem_addr(const void *p)
{
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void ln_mbar_init(unsigned long long *bar)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(ln_smem_addr(bar)) : "memory");
}
// One arrival, and the bytes the copies that complete this phase will bring.
__device__ __forceinline__ void ln_mbar_expect(unsigned long long *bar, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(ln_smem_addr(bar)),
                 "r"(bytes)
                 : "memory");
}
// Waits for the phase of the given parity. CLUSTER: with acquire at
// cluster scope, for data that other blocks of the cluster stored (st.async);
// the copy engine's bytes need only the block's own scope.
template <bool CLUSTER = false>
__device__ __forceinline__ void ln_mbar_wait(unsigned long long *bar, unsigned parity)
{
    unsigned done;
    do {
        if constexpr (CLUSTER)
            asm volatile("{\n\t.reg .pred p;\n\t"
                         "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n\t"
                         "selp.u32 %0, 1, 0, p;\n\t}"
                         : "=r"(done)
                         : "r"(ln_smem_addr(bar)), "r"(parity)
                         : "memory");
        else
            asm volatile("{\n\t.reg .pred p;\n\t"
                         "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                         "selp.u32 %0, 1, 0, p;\n\t}"
                         : "=r"(done)
                         : "r"(ln_smem_addr(bar)), "r"(parity)
                         : "memory");
    } while (!done);
}
__device__ __forceinline__ void ln_bulk_load(void *dst, const void *src, unsigned bytes,
                                             unsigned long long *bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1], %2, [%3];" ::"r"(ln_smem_addr(dst)),
                 "l"(src), "r"(bytes), "r"(ln_smem_addr(bar))
                 : "memory");
}

// A remote block's address of this block's shared variable (DSMEM).
__device__ __forceinline__ unsigned ln_cluster_addr(const void *local, unsigned rank)
{
    unsigned ra;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(ln_smem_addr(local)), "r"(rank));
    return ra;
}
// Stores v into a remote block's shared memory and counts its 4 bytes on
// that block's mbarrier: no barrier and no release of this thread's other
// stores (which a cluster barrier's release waits for).
__device__ __forceinline__ void ln_st_async(unsigned remote, float v, unsigned remote_bar)
{
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(remote),
                 "r"(__float_as_uint(v)), "r"(remote_bar)
                 : "memory");
}

// Scratch for the reductions of one block; two of everything so that one
// barrier per reduction suffices: buffer p is written again only two
// reductions later, after a barrier every reader of this one has passed.
// With CL > 1 each block also receives the other blocks' sums in peer
// (peer_in[p] completes when all have arrived): a block sends reduction
// u + 2's sums only after it has received everyone's sums of u + 1, which
// each peer sends after reading those of u, so buffer p is free again.
template <int WARPS, int NV, int CL> struct ln_red_smem {
    float warp[2][NV][WARPS];
    float peer[2][CL][NV];
    unsigned long long peer_in[2];
};

// Before a cluster kernel's first ln_row_sum, by all threads: the peers'
// mbarriers exist before anyone sends.
template <int CL, typename R> __device__ __forceinline__ void ln_red_init(R &s)
{
    if constexpr (CL > 1) {
        if (threadIdx.x == 0) {
            ln_mbar_init(&s.peer_in[0]);
            ln_mbar_init(&s.peer_in[1]);
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        }
        ln_cluster_sync();
    }
}

// Sums v over the TPR threads of each row group (and over the CL blocks of
// the cluster); every thread of the row gets the same bits, summed in a
// fixed order (deterministic). All threads of the block must call it, with
// use counting the calls (0, 1, 2, ...).
template <int TPR, int CL, int WARPS, int NV>
__device__ __forceinline__ void ln_row_sum(float (&v)[NV], ln_red_smem<WARPS, NV, CL> &s, unsigned use)
{
    constexpr int W = TPR < 32 ? TPR : 32;
    const int p = use & 1;
#pragma unroll
    for (int off = W / 2; off > 0; off /= 2)
#pragma unroll
        for (int k = 0; k < NV; k++)
            v[k] += __shfl_xor_sync(0xffffffffu, v[k], off);
    if constexpr (TPR > 32) {
        constexpr int WPR = TPR / 32; // warps per row group
        const int warp = threadIdx.x / 32, first = warp / WPR * WPR;
        if (threadIdx.x % 32 == 0)
#pragma unroll
            for (int k = 0; k < NV; k++)
                s.warp[p][k][warp] = v[k];
        __syncthreads();
        // Lane l takes warp first + l % P2's sum (0 past the row's WPR warps:
        // adding 0 is exact), then a butterfly over P2 lanes, P2 the power of
        // two from WPR up: a + b == b + a, so every lane (and warp) gets the
        // same bits, in 2 log2(P2) instructions instead of WPR serial adds.
        constexpr int P2 = WPR <= 1 ? 1 : WPR <= 2 ? 2 : WPR <= 4 ? 4 : WPR <= 8 ? 8 : WPR <= 16 ? 16 : 32;
        const int idx = threadIdx.x % 32 % P2;
#pragma unroll
        for (int k = 0; k < NV; k++) {
            float t = idx < WPR ? s.warp[p][k][first + idx] : 0.f;
#pragma unroll
            for (int off = P2 / 2; off > 0; off /= 2)
                t += __shfl_xor_sync(0xffffffffu, t, off);
            v[k] = t;
        }
    }
    if constexpr (CL > 1) {
        const unsigned rank = ln_cluster_rank();
        if (threadIdx.x == 0) {
            ln_mbar_expect(&s.peer_in[p], (CL - 1) * NV * 4);
#pragma unroll
            for (unsigned r = 0; r < CL; r++)
                if (r != rank)
#pragma unroll
                    for (int k = 0; k < NV; k++)
                        ln_st_async(ln_cluster_addr(&s.peer[p][rank][k], r), v[k],
                                    ln_cluster_addr(&s.peer_in[p], r));
        }
        ln_mbar_wait<true>(&s.peer_in[p], (use >> 1) & 1);
#pragma unroll
        for (int k = 0; k < NV; k++) {
            float t = 0.f;
#pragma unroll
            for (unsigned r = 0; r < CL; r++)
                t += r == rank ? v[k] : s.peer[p][r][k];
            v[k] = t;
        }
    }
}

// ---------------------------------------------- one exchange per row (ONE)

// A type chosen at compile time (NVRTC has no <type_traits>): the forward's
// reduction scratch with ONE, so that the default instances keep theirs.
template <bool B, typename A, typename C> struct ln_pick { using type = A; };
template <typename A, typename C> struct ln_pick<false, A, C> { using type = C; };

// v summed over the TPR threads of a block (ROWS 1: TPR == blockDim.x),
// every thread getting the same bits; w: 2 x WARPS floats of scratch, used
// as ln_row_sum uses its warp buffers (buffer use & 1, one barrier each).
template <int TPR>
__device__ __forceinline__ float ln_block_sum(float v, float *w, unsigned use)
{
    constexpr int WARPS = TPR / 32;
    static_assert(TPR >= 32 && TPR % 32 == 0, "whole warps");
#pragma unroll
    for (int off = 16; off > 0; off /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    if constexpr (WARPS > 1) {
        float *b = w + (use & 1) * WARPS;
        if (threadIdx.x % 32 == 0)
            b[threadIdx.x / 32] = v;
        __syncthreads();
        constexpr int P2 = WARPS <= 2 ? 2 : WARPS <= 4 ? 4 : WARPS <= 8 ? 8 : WARPS <= 16 ? 16 : 32;
        const int idx = threadIdx.x % 32 % P2;
        v = idx < WARPS ? b[idx] : 0.f;
#pragma unroll
        for (int off = P2 / 2; off > 0; off /= 2)
            v += __shfl_xor_sync(0xffffffffu, v, off);
    }
    return v;
}

// The row's mean and M2 (sum of squared deviations) from each block's sum
// and M2 about its own mean, in ONE cluster exchange instead of two
// (ln_row_sum for the mean, then for the squared deviations): Chan et al.'s
// merge, mean = sum(s_b) / N, M2 = sum_b M2_b + n_b (s_b / n_b - mean)^2,
// exact (no E[x^2] - mean^2 cancellation). count(r) is block r's element
// count (0: it adds nothing). Lane l of every warp takes block l % CL's
// pair and the CL lanes of a group merge by a butterfly (two loads and
// 2 log2(CL) shuffles per thread, not 2 CL loads held at once): a + b ==
// b + a, so every lane, warp and block gets the same bits from the same
// exchanged values. s is a ln_red_smem<*, 2, CL> initialized by
// ln_red_init; use counts the calls, with the same buffer rule as
// ln_row_sum (a barrier of the block between one call's reads and the
// next call, which every caller has).
template <int CL, typename R, typename CNT>
__device__ __forceinline__ void ln_cluster_stats(float sum_b, float m2_b, R &s, unsigned use,
                                                 CNT count, float inv_n, float &mean, float &m2)
{
    const unsigned rank = ln_cluster_rank();
    const int p = use & 1;
    if (threadIdx.x == 0)
        ln_mbar_expect(&s.peer_in[p], (CL - 1) * 2 * 4);
    // thread r sends to block r: the CL - 1 sends leave together, not one
    // after another from thread 0, which also issues the copy engine's loads
    // (ln_row_sum keeps thread 0's sends: in the backward the same change
    // won at some row lengths and lost at others; bench/layernorm_NOTES.md)
    if (threadIdx.x < CL && threadIdx.x != rank) {
        const unsigned r = threadIdx.x, bar = ln_cluster_addr(&s.peer_in[p], r);
        ln_st_async(ln_cluster_addr(&s.peer[p][rank][0], r), sum_b, bar);
        ln_st_async(ln_cluster_addr(&s.peer[p][rank][1], r), m2_b, bar);
    }
    ln_mbar_wait<true>(&s.peer_in[p], (use >> 1) & 1);
    static_assert(CL == 2 || CL == 4 || CL == 8, "CL: 2, 4 or 8 (a power of two)");
    const unsigned r = threadIdx.x % 32 % CL;
    const float sb = r == rank ? sum_b : s.peer[p][r][0];
    const float mb = r == rank ? m2_b : s.peer[p][r][1];
    float tot = sb;
#pragma unroll
    for (int off = CL / 2; off > 0; off /= 2)
        tot += __shfl_xor_sync(0xffffffffu, tot, off);
    mean = tot * inv_n;
    const int n = count(static_cast<int>(r));
    const float d = n > 0 ? sb / static_cast<float>(n) - mean : 0.f;
    float q = n > 0 ? mb + static_cast<float>(n) * d * d : 0.f;
#pragma unroll
    for (int off = CL / 2; off > 0; off /= 2)
        q += __shfl_xor_sync(0xffffffffu, q, off);
    m2 = q;
}

// Vectors of a row of nvec that block r of a cluster holds when thread
// r * tpr + l takes vectors i * tt + r * tpr + l (ln_fwd_body's split).
__host__ __device__ constexpr int ln_share_vecs(int nvec, int tt, int tpr, int vpt, int r)
{
    int c = 0;
    for (int i = 0; i < vpt; i++) {
        const int left = nvec - i * tt - r * tpr;
        c += left <= 0 ? 0 : left < tpr ? left : tpr;
    }
    return c;
}

// ------------------------------------------------------------------ forward

// ONE (clusters only): the statistics by one cluster exchange per row
// (ln_cluster_stats) instead of two; 0 keeps the two exact passes over the
// whole row.
template <typename T, int N, bool AFFINE, int VEC, int TPR, int CL, int ONE = 0>
__device__ __forceinline__ void ln_fwd_body(const T *x, const T *__restrict__ gamma,
                                            const T *__restrict__ beta, T *y,
                                            float *__restrict__ mean_out,
                                            float *__restrict__ rstd_out, long long M, float eps)
{
    using S = ln_shape<T, N, VEC, TPR, CL>;
    using C = ln_conv<T>;
    constexpr bool ONE_ = ONE != 0 && CL > 1;
    constexpr int ES = static_cast<int>(sizeof(T));
    static_assert(!(ONE_ && S::SHIFT),
                  "one exchange counts each block's elements: rows of whole vectors only");
    // with ONE_ each block exchanges two values (its sum and M2)
    __shared__ typename ln_pick<ONE_, ln_red_smem<S::WARPS, 2, CL>, ln_red_smem<S::WARPS, 1, CL>>::type red;
    if (blockDim.x != S::BLOCK)
        __trap();
    ln_red_init<CL>(red);
    const unsigned rank = CL > 1 ? ln_cluster_rank() : 0;
    const long long row = static_cast<long long>(blockIdx.x / CL) * S::ROWS + threadIdx.x / TPR;
    const int t = static_cast<int>(rank) * TPR + static_cast<int>(threadIdx.x % TPR);
    const bool valid = row < M;
    const T *xr = x + row * N;
    T *yr = y + row * N;
    // SHIFT: the row's head (the body from xr + h)
    const int h = S::SHIFT ? ln_head(x, row * N) : 0;
    constexpr int nb = S::NVEC, nx = S::NX;
    const T *xb = xr + h;
    T *yb = yr + h;

    ln_raw<S::B> xv[S::VPT];
#pragma unroll
    for (int i = 0; i < S::VPT; i++) {
        const int j = i * S::TT + t;
        xv[i] = (valid && (S::FULL || j < nb)) ? ln_load<S::B>(xb + j * VEC) : ln_zero<S::B>();
    }
    ln_raw<ES> xs[S::XS > 0 ? S::XS : 1];
#pragma unroll
    for (int q = 0; q < S::XS; q++) {
        const int k = q * S::TT + t;
        xs[q] = valid && k < nx ? ln_load<ES>(xr + ln_edge_index<VEC>(k, h, nb)) : ln_zero<ES>();
    }
    float sum[1] = {0.f};
#pragma unroll
    for (int i = 0; i < S::VPT; i++) {
        float f[VEC];
        C::unpack(&xv[i], f);
#pragma unroll
        for (int e = 0; e < VEC; e++)
            sum[0] += f[e];
    }
#pragma unroll
    for (int q = 0; q < S::XS; q++) {
        float f[1];
        C::unpack(&xs[q], f);
        sum[0] += f[0];
    }
    float mean, m2;
    if constexpr (ONE_) {
        // the block's sum, its M2 about its own mean (block barriers only),
        // then one exchange across the cluster
        auto count = [](int r) { return VEC * ln_share_vecs(S::NVEC, S::TT, TPR, S::VPT, r); };
        const float sb = ln_block_sum<TPR>(sum[0], &red.warp[0][0][0], 0);
        const int cb = count(static_cast<int>(rank));
        const float mb = cb > 0 ? sb / static_cast<float>(cb) : 0.f;
#pragma unroll
        for (int i = 0; i < S::VPT; i++)
            ln_opaque(xv[i]);
        float q = 0.f;
#pragma unroll
        for (int i = 0; i < S::VPT; i++) {
            const int j = i * S::TT + t;
            if (S::FULL || j < S::NVEC) {
                float f[VEC];
                C::unpack(&xv[i], f);
#pragma unroll
                for (int e = 0; e < VEC; e++) {
                    const float d = f[e] - mb;
                    q += d * d;
                }
            }
        }
        q = ln_block_sum<TPR>(q, &red.warp[0][0][0], 1);
        ln_cluster_stats<CL>(sb, q, red, 0, count, 1.f / N, mean, m2);
    } else {
        ln_row_sum<TPR, CL>(sum, red, 0);
        mean = sum[0] * (1.f / N);
#pragma unroll
        for (int i = 0; i < S::VPT; i++)
            ln_opaque(xv[i]);
        float sq[1] = {0.f};
#pragma unroll
        for (int i = 0; i < S::VPT; i++) {
            const int j = i * S::TT + t;
            if (S::FULL || j < nb) {
                float f[VEC];
                C::unpack(&xv[i], f);
#pragma unroll
                for (int e = 0; e < VEC; e++) {
                    const float d = f[e] - mean;
                    sq[0] += d * d;
                }
            }
        }
#pragma unroll
        for (int q = 0; q < S::XS; q++) {
            if (q * S::TT + t < nx) {
                float f[1];
                C::unpack(&xs[q], f);
                const float d = f[0] - mean;
                sq[0] += d * d;
            }
        }
        ln_row_sum<TPR, CL>(sq, red, 1);
        m2 = sq[0];
    }
    const float rstd = rsqrtf(m2 * (1.f / N) + eps);
#pragma unroll
    for (int i = 0; i < S::VPT; i++)
        ln_opaque(xv[i]);
    if (valid) {
#pragma unroll
        for (int i = 0; i < S::VPT; i++) {
            const int j = i * S::TT + t;
            if (S::FULL || j < nb) {
                float f[VEC];
                C::unpack(&xv[i], f);
#pragma unroll
                for (int e = 0; e < VEC; e++)
                    f[e] = (f[e] - mean) * rstd;
                if (AFFINE && gamma != nullptr) {
                    ln_raw<S::B> gv;
                    if constexpr (S::SHIFT)
                        gv = ln_load_ro_at<T, VEC>(gamma, h + j * VEC);
                    else
                        gv = ln_load_ro<S::B>(gamma + j * VEC);
                    float g[VEC];
                    C::unpack(&gv, g);
#pragma unroll
                    for (int e = 0; e < VEC; e++)
                        f[e] *= g[e];
                }
                if (AFFINE && beta != nullptr) {
                    ln_raw<S::B> bv;
                    if constexpr (S::SHIFT)
                        bv = ln_load_ro_at<T, VEC>(beta, h + j * VEC);
                    else
                        bv = ln_load_ro<S::B>(beta + j * VEC);
                    float b[VEC];
                    C::unpack(&bv, b);
#pragma unroll
                    for (int e = 0; e < VEC; e++)
                        f[e] += b[e];
                }
                ln_raw<S::B> out;
                C::pack(f, &out);
                ln_store<S::B>(yb + j * VEC, out);
            }
        }
#pragma unroll
        for (int q = 0; q < S::XS; q++) {
            const int k = q * S::TT + t;
            if (k < nx) {
                const int c = ln_edge_index<VEC>(k, h, nb);
                float f[1];
                C::unpack(&xs[q], f);
                f[0] = (f[0] - mean) * rstd;
                if (AFFINE && gamma != nullptr) {
                    ln_raw<ES> gv = ln_load_ro<ES>(gamma + c);
                    float g[1];
                    C::unpack(&gv, g);
                    f[0] *= g[0];
                }
                if (AFFINE && beta != nullptr) {
                    ln_raw<ES> bv = ln_load_ro<ES>(beta + c);
                    float b[1];
                    C::unpack(&bv, b);
                    f[0] += b[0];
                }
                ln_raw<ES> out;
                C::pack(f, &out);
                ln_store<ES>(yr + c, out);
            }
        }
        if (t == 0) {
            if (mean_out != nullptr)
                mean_out[row] = mean;
            if (rstd_out != nullptr)
                rstd_out[row] = rstd;
        }
    }
    if constexpr (CL > 1)
        ln_cluster_sync(); // the cluster's blocks leave together, after the last exchange
}

// MINB: the launch bounds' minimum resident blocks per SM (0: none, the
// default), which caps the registers per thread at what MINB blocks leave
// (65536 / (MINB * BLOCK)): a plan that wants several blocks per SM, so that
// one block's reductions overlap another's loads, asks for it here, and
// ptxas spills rather than exceed it (pick the bytes per thread to match).
// ptxas also takes the cap as a budget: one above what a small block needs
// raises its registers, and fewer of its blocks fit.
template <typename T, int N, bool AFFINE, int VEC = ln_default_vec<T>(N),
          int TPR = ln_min(ln_threads_per_row(N / VEC, VEC * sizeof(T), LN_FWD_MAX_BYTES),
                           LN_FWD_MAX_TPR),
          int MINB = 0>
__global__ void __launch_bounds__(ln_shape<T, N, VEC, TPR, 1>::BLOCK, MINB)
    layernorm_fwd(const T *x, const T *__restrict__ gamma, const T *__restrict__ beta, T *y,
                  float *__restrict__ mean_out, float *__restrict__ rstd_out, long long M, float eps)
{
    ln_after_previous_grid();
    ln_fwd_body<T, N, AFFINE, VEC, TPR, 1>(x, gamma, beta, y, mean_out, rstd_out, M, eps);
}

// ONE 1: one cluster exchange per row (ln_cluster_stats), 0: two.
template <typename T, int N, bool AFFINE, int VEC, int TPR, int CL, int MINB = 0, int ONE = 0>
__global__ void LN_CLUSTER_DIMS(CL) __launch_bounds__(TPR, MINB)
    layernorm_fwd_cluster(const T *x, const T *__restrict__ gamma, const T *__restrict__ beta,
                          T *y, float *__restrict__ mean_out, float *__restrict__ rstd_out,
                          long long M, float eps)
{
    ln_after_previous_grid();
    static_assert(ONE == 0 || ONE == 1, "ONE: 0 or 1");
    ln_fwd_body<T, N, AFFINE, VEC, TPR, CL, ONE>(x, gamma, beta, y, mean_out, rstd_out, M, eps);
}

// ----------------------------------------------------------------- backward

// (src/ops/layernorm.c uses 64 bytes instead of LN_BWD_MAX_BYTES for float32
// rows over 64 KiB.)
// Blocks per SM the backward asks registers for: LN_BWD_THREADS_PER_SM
// threads resident, so that enough rows are in flight (the compiler then
// converts the raw row again rather than keep float copies).
#ifndef LN_BWD_THREADS_PER_SM
#define LN_BWD_THREADS_PER_SM 1024
#endif
// Software pipelining (PF): the next row group's loads are issued before
// this one's reduction and output, so that memory stays busy across the
// block-wide reduction. It holds a second set of row registers, so PF
// kernels ask for registers for LN_BWD_PF_THREADS_PER_SM threads per SM.
// It lifts 16-bit rows of 4096 and 8192 elements by about a tenth of copy
// bandwidth; float32 and the cluster kernels lose (float32 N = 32768 by
// nearly a third), short rows move within noise (bench/layernorm_NOTES.md,
// run 3): PF is for 16-bit rows of 8 KiB or more on one block.
#ifndef LN_BWD_PF_THREADS_PER_SM
#define LN_BWD_PF_THREADS_PER_SM 512
#endif
template <typename T, int N, int CL> __host__ __device__ constexpr bool ln_bwd_prefetch()
{
    return sizeof(T) == 2 && CL == 1 && N * 2 >= 8192;
}
__host__ __device__ constexpr int ln_bwd_min_blocks(int block, bool pf = false)
{
    const int per_sm = pf ? LN_BWD_PF_THREADS_PER_SM : LN_BWD_THREADS_PER_SM;
    return per_sm / block > 0 ? per_sm / block : 1;
}
// The backward kernels' PF and MINB template arguments: PF -1 takes the
// rule above (ln_bwd_prefetch), 0 or 1 turns prefetch off or on; MINB 0
// takes ln_bwd_min_blocks, n > 0 asks n blocks per SM of the launch bounds
// (src/ops/layernorm.c's JITOP_LN_PLAN sets them, to compare plans).
template <typename T, int N, int CL, int PF> __host__ __device__ constexpr bool ln_bwd_pf()
{
    return PF < 0 ? ln_bwd_prefetch<T, N, CL>() : PF != 0;
}
__host__ __device__ constexpr int ln_bwd_minb(int minb, int block, bool pf)
{
    return minb > 0 ? minb : ln_bwd_min_blocks(block, pf);
}

// SACC: the dgamma/dbeta accumulators live in dynamic shared memory
// (2 * BLOCK * EPT floats, ln_bwd_smem_bytes; EPT = VPT * VEC + XS, the
// elements a thread holds) instead of registers, each
// thread touching only its own words (no barrier, no bank conflicts). That
// frees two registers per element held, which is what limits how many rows
// are in flight; the shared-memory traffic (16 bytes per element) is far
// under its bandwidth. With SHIFT they are followed by each thread's body
// vectors of gamma (VPT * BLOCK of 16 bytes), shifted once to its group's
// columns (ln_load_ro_at) and read back with one aligned load a vector and
// row, instead of two loads and the shift for every row.
template <typename T, int N, int VEC, int TPR, int CL>
__host__ __device__ constexpr int ln_bwd_smem_bytes()
{
    using S = ln_shape<T, N, VEC, TPR, CL>;
    return 2 * S::BLOCK * (S::VPT * VEC + S::XS) * 4 + (S::SHIFT ? S::VPT * S::BLOCK * 16 : 0);
}

template <typename T, int N, bool AFFINE, int VEC, int TPR, int CL, bool SACC, bool PF>
__device__ __forceinline__ void ln_bwd_body(const T *dy, const T *x, const T *__restrict__ gamma,
                                            const float *__restrict__ mean,
                                            const float *__restrict__ rstd, T *dx,
                                            float *__restrict__ part, long long M)
{
    using S = ln_shape<T, N, VEC, TPR, CL>;
    using C = ln_conv<T>;
    constexpr int ES = static_cast<int>(sizeof(T));
    constexpr int EPB = S::VPT * VEC;   // body elements a thread holds
    constexpr int EPT = EPB + S::XS;     // and its head/tail elements (SHIFT)
    constexpr int XS1 = S::XS > 0 ? S::XS : 1;
    constexpr bool RACC = AFFINE && !SACC; // accumulators in registers
    constexpr bool GSTAGE = S::SHIFT && AFFINE && SACC; // gamma's body vectors in shared memory
    __shared__ ln_red_smem<S::WARPS, 2, CL> red;
    extern __shared__ float ln_dyn[]; // SACC: [2][EPT][BLOCK], GSTAGE: then uint4 [VPT][BLOCK]
    if (blockDim.x != S::BLOCK)
        __trap();
    const unsigned rank = CL > 1 ? ln_cluster_rank() : 0;
    const int group = threadIdx.x / TPR;
    const int t = static_cast<int>(rank) * TPR + static_cast<int>(threadIdx.x % TPR);
    const bool scale = gamma != nullptr;
    ln_red_init<CL>(red);
    float *sdg = ln_dyn + threadIdx.x, *sdb = ln_dyn + EPT * S::BLOCK + threadIdx.x;

    float adg[RACC ? EPT : 1], adb[RACC ? EPT : 1];
#pragma unroll
    for (int k = 0; k < EPT; k++) {
        if constexpr (RACC) {
            adg[k] = adb[k] = 0.f;
        } else if constexpr (AFFINE) {
            sdg[k * S::BLOCK] = 0.f;
            sdb[k * S::BLOCK] = 0.f;
        }
    }
    unsigned sums = 0; // ln_row_sum calls
    const long long gstep = gridDim.x / CL;
    // SHIFT: every row this thread's group takes starts at the same offset
    // within 16 bytes (the grid's row stride is a multiple of 16 bytes), so
    // that each accumulator keeps one column; the head, body vectors and
    // head + tail elements of those rows.
    const long long row0 = static_cast<long long>(blockIdx.x / CL) * S::ROWS + group;
    if (S::SHIFT && gstep * S::ROWS < M && gstep * S::ROWS * N * ES % 16 != 0)
        __trap();
    const int h = S::SHIFT ? ln_head(x, row0 * N) : 0;
    constexpr int nb = S::NVEC, nx = S::NX;
    uint4 *sgam = reinterpret_cast<uint4 *>(ln_dyn + 2 * EPT * S::BLOCK) + threadIdx.x;
    float gx[XS1]; // SHIFT: gamma at the head/tail elements (1 past them)
    if constexpr (S::SHIFT) {
#pragma unroll
        for (int i = 0; i < S::VPT; i++) {
            const int j = i * S::TT + t;
            if (GSTAGE && scale && j < nb)
                sgam[i * S::BLOCK] = ln_load_ro_at<T, VEC>(gamma, h + j * VEC).v;
        }
#pragma unroll
        for (int q = 0; q < S::XS; q++) {
            const int k = q * S::TT + t;
            gx[q] = 1.f;
            if (scale && k < nx) {
                ln_raw<ES> gv = ln_load_ro<ES>(gamma + ln_edge_index<VEC>(k, h, nb));
                float g1[1];
                C::unpack(&gv, g1);
                gx[q] = g1[0];
            }
        }
    }
    // gamma at body vector j (slot i), ones where not loaded
    auto gamma_at = [&](int i, int j, bool load, float (&fg)[VEC]) {
        if constexpr (GSTAGE) {
            if (load) {
                ln_raw<16> gv;
                gv.v = sgam[i * S::BLOCK];
                C::unpack(&gv, fg);
            } else {
#pragma unroll
                for (int e = 0; e < VEC; e++)
                    fg[e] = 1.f;
            }
        } else {
            ln_unpack_gamma_at<T, VEC, S::SHIFT>(gamma, h + j * VEC, load, fg);
        }
    };
    // The row group g's x, dy, mean and rstd into registers (zeros past M).
    auto load_rows = [&](long long g, ln_raw<S::B> *xo, ln_raw<S::B> *dout, ln_raw<ES> *xso,
                         ln_raw<ES> *dso, float &mo, float &ro) {
        const long long r = g * S::ROWS + group;
        const bool ok = r < M;
        const T *xr = x + r * N;
        const T *dyr = dy + r * N;
#pragma unroll
        for (int i = 0; i < S::VPT; i++) {
            const int j = i * S::TT + t;
            const bool in = ok && (S::FULL || j < nb);
            xo[i] = in ? ln_load<S::B>(xr + h + j * VEC) : ln_zero<S::B>();
            dout[i] = in ? ln_load<S::B>(dyr + h + j * VEC) : ln_zero<S::B>();
        }
#pragma unroll
        for (int q = 0; q < S::XS; q++) {
            const int k = q * S::TT + t;
            const bool in = ok && k < nx;
            const int c = ln_edge_index<VEC>(k, h, nb);
            xso[q] = in ? ln_load<ES>(xr + c) : ln_zero<ES>();
            dso[q] = in ? ln_load<ES>(dyr + c) : ln_zero<ES>();
        }
        mo = ok ? mean[r] : 0.f;
        ro = ok ? rstd[r] : 0.f;
    };
    ln_raw<S::B> xv[S::VPT], dv[S::VPT];
    ln_raw<ES> xs[XS1], ds[XS1];
    float mu, rs;
    // PF: the next row group's registers (unused otherwise).
    ln_raw<S::B> xn[PF ? S::VPT : 1], dn[PF ? S::VPT : 1];
    ln_raw<ES> xsn[PF ? XS1 : 1], dsn[PF ? XS1 : 1];
    float mun = 0.f, rsn = 0.f;
    if constexpr (PF)
        load_rows(blockIdx.x / CL, xv, dv, xs, ds, mu, rs);
    for (long long g0 = blockIdx.x / CL; g0 * S::ROWS < M; g0 += gstep) {
        const long long row = g0 * S::ROWS + group;
        const bool valid = row < M;
        if constexpr (PF) {
            if ((g0 + gstep) * S::ROWS < M)
                load_rows(g0 + gstep, xn, dn, xsn, dsn, mun, rsn);
        } else {
            load_rows(g0, xv, dv, xs, ds, mu, rs);
        }
        float s[2] = {0.f, 0.f}; // sum g, sum g * xhat
#pragma unroll
        for (int i = 0; i < S::VPT; i++) {
            const int j = i * S::TT + t;
            float fx[VEC], fd[VEC], fg[VEC];
            C::unpack(&xv[i], fx);
            C::unpack(&dv[i], fd);
            gamma_at(i, j, scale && (S::FULL || j < nb), fg);
#pragma unroll
            for (int e = 0; e < VEC; e++) {
                const float xh = (fx[e] - mu) * rs, gg = fd[e] * fg[e];
                s[0] += gg;
                s[1] += gg * xh;
                if constexpr (RACC) {
                    adg[i * VEC + e] += fd[e] * xh;
                    adb[i * VEC + e] += fd[e];
                } else if constexpr (AFFINE) {
                    sdg[(i * VEC + e) * S::BLOCK] += fd[e] * xh;
                    sdb[(i * VEC + e) * S::BLOCK] += fd[e];
                }
            }
        }
        // head and tail elements (zeros past nx and M add nothing)
#pragma unroll
        for (int q = 0; q < S::XS; q++) {
            float fx[1], fd[1];
            C::unpack(&xs[q], fx);
            C::unpack(&ds[q], fd);
            const float xh = (fx[0] - mu) * rs, gg = fd[0] * gx[q];
            s[0] += gg;
            s[1] += gg * xh;
            if constexpr (RACC) {
                adg[EPB + q] += fd[0] * xh;
                adb[EPB + q] += fd[0];
            } else if constexpr (AFFINE) {
                sdg[(EPB + q) * S::BLOCK] += fd[0] * xh;
                sdb[(EPB + q) * S::BLOCK] += fd[0];
            }
        }
        ln_row_sum<TPR, CL>(s, red, sums++);
#pragma unroll
        for (int i = 0; i < S::VPT; i++) {
            ln_opaque(xv[i]);
            ln_opaque(dv[i]);
        }
        if (valid) {
            const float a = s[0] * (1.f / N), b = s[1] * (1.f / N);
            T *dxr = dx + row * N;
#pragma unroll
            for (int i = 0; i < S::VPT; i++) {
                const int j = i * S::TT + t;
                if (S::FULL || j < nb) {
                    float fx[VEC], fd[VEC], fg[VEC];
                    C::unpack(&xv[i], fx);
                    C::unpack(&dv[i], fd);
                    gamma_at(i, j, scale, fg);
#pragma unroll
                    for (int e = 0; e < VEC; e++) {
                        const float xh = (fx[e] - mu) * rs;
                        fx[e] = rs * (fd[e] * fg[e] - a - xh * b);
                    }
                    ln_raw<S::B> out;
                    C::pack(fx, &out);
                    ln_store<S::B>(dxr + h + j * VEC, out);
                }
            }
#pragma unroll
            for (int q = 0; q < S::XS; q++) {
                const int k = q * S::TT + t;
                if (k < nx) {
                    const int c = ln_edge_index<VEC>(k, h, nb);
                    float fx[1], fd[1];
                    C::unpack(&xs[q], fx);
                    C::unpack(&ds[q], fd);
                    const float xh = (fx[0] - mu) * rs;
                    fx[0] = rs * (fd[0] * gx[q] - a - xh * b);
                    ln_raw<ES> out;
                    C::pack(fx, &out);
                    ln_store<ES>(dxr + c, out);
                }
            }
        }
        if constexpr (PF) {
#pragma unroll
            for (int i = 0; i < S::VPT; i++) {
                xv[i] = xn[i];
                dv[i] = dn[i];
            }
#pragma unroll
            for (int q = 0; q < S::XS; q++) {
                xs[q] = xsn[q];
                ds[q] = dsn[q];
            }
            mu = mun;
            rs = rsn;
        }
    }
    if constexpr (AFFINE && S::SHIFT) {
        // Each row group's columns start at its own h: every group writes
        // its partial row (ROWS per block or cluster), element by element
        // (the body's columns are h off 16 bytes in part too).
        float *pr = part + (static_cast<long long>(blockIdx.x / CL) * S::ROWS + group) * ln_part_row(N);
#pragma unroll
        for (int i = 0; i < S::VPT; i++) {
            const int j = i * S::TT + t;
            if (j < nb) {
#pragma unroll
                for (int e = 0; e < VEC; e++) {
                    const int k = i * VEC + e, c = h + j * VEC + e;
                    pr[c] = RACC ? adg[RACC ? k : 0] : sdg[k * S::BLOCK];
                    pr[ln_part_beta(N) + c] = RACC ? adb[RACC ? k : 0] : sdb[k * S::BLOCK];
                }
            }
        }
#pragma unroll
        for (int q = 0; q < S::XS; q++) {
            const int k = q * S::TT + t;
            if (k < nx) {
                const int c = ln_edge_index<VEC>(k, h, nb);
                pr[c] = RACC ? adg[RACC ? EPB + q : 0] : sdg[(EPB + q) * S::BLOCK];
                pr[ln_part_beta(N) + c] = RACC ? adb[RACC ? EPB + q : 0] : sdb[(EPB + q) * S::BLOCK];
            }
        }
    } else if constexpr (AFFINE) {
        // Row groups of one block hold the same columns: add them up in
        // group order, then write the block's (the cluster's) partial row.
        if constexpr (RACC && S::ROWS > 1) {
            __shared__ float comb[S::BLOCK * EPT];
#pragma unroll
            for (int pass = 0; pass < 2; pass++) {
                float *acc = pass == 0 ? adg : adb;
                __syncthreads();
#pragma unroll
                for (int k = 0; k < EPT; k++)
                    comb[k * S::BLOCK + threadIdx.x] = acc[k];
                __syncthreads();
                if (group == 0) {
#pragma unroll
                    for (int k = 0; k < EPT; k++) {
                        float v = acc[k];
                        for (int r = 1; r < S::ROWS; r++)
                            v += comb[k * S::BLOCK + r * TPR + threadIdx.x];
                        acc[k] = v;
                    }
                }
            }
        }
        if constexpr (!RACC && S::ROWS > 1)
            __syncthreads();
        if (group == 0) {
            float *pr = part + static_cast<long long>(blockIdx.x / CL) * ln_part_row(N);
#pragma unroll
            for (int i = 0; i < S::VPT; i++) {
                const int j = i * S::TT + t;
                if (S::FULL || j < S::NVEC) {
                    float vg[VEC], vb[VEC];
#pragma unroll
                    for (int e = 0; e < VEC; e++) {
                        const int k = i * VEC + e;
                        if constexpr (RACC) {
                            vg[e] = adg[k];
                            vb[e] = adb[k];
                        } else {
                            vg[e] = sdg[k * S::BLOCK];
                            vb[e] = sdb[k * S::BLOCK];
                            for (int r = 1; r < S::ROWS; r++) {
                                vg[e] += sdg[k * S::BLOCK + r * TPR];
                                vb[e] += sdb[k * S::BLOCK + r * TPR];
                            }
                        }
                    }
                    // 16-byte stores where the columns allow: a lane's
                    // columns are VEC apart, and scalar stores made each
                    // instruction touch a sector per lane.
                    if constexpr (VEC % 4 == 0) {
#pragma unroll
                        for (int e = 0; e < VEC; e += 4) {
                            *reinterpret_cast<float4 *>(pr + j * VEC + e) =
                                make_float4(vg[e], vg[e + 1], vg[e + 2], vg[e + 3]);
                            *reinterpret_cast<float4 *>(pr + ln_part_beta(N) + j * VEC + e) =
                                make_float4(vb[e], vb[e + 1], vb[e + 2], vb[e + 3]);
                        }
                    } else {
#pragma unroll
                        for (int e = 0; e < VEC; e++) {
                            pr[j * VEC + e] = vg[e];
                            pr[ln_part_beta(N) + j * VEC + e] = vb[e];
                        }
                    }
                }
            }
        }
    }
    if constexpr (CL > 1)
        ln_cluster_sync();
}

// SACC true (the default): launch with ln_bwd_smem_bytes<T, N, VEC, TPR, CL>()
// bytes of dynamic shared memory when AFFINE (0 otherwise).
template <typename T, int N, bool AFFINE, int VEC = ln_default_vec<T>(N),
          int TPR = ln_min(ln_threads_per_row(N / VEC, VEC * sizeof(T), LN_BWD_MAX_BYTES),
                           LN_BWD_MAX_TPR),
          bool SACC = true, int PF = -1, int MINB = 0>
__global__ void __launch_bounds__(ln_shape<T, N, VEC, TPR, 1>::BLOCK,
                                  ln_bwd_minb(MINB, ln_shape<T, N, VEC, TPR, 1>::BLOCK,
                                              ln_bwd_pf<T, N, 1, PF>()))
    layernorm_bwd(const T *dy, const T *x, const T *__restrict__ gamma,
                  const float *__restrict__ mean, const float *__restrict__ rstd, T *dx,
                  float *__restrict__ part, long long M)
{
    ln_after_previous_grid();
    ln_bwd_body<T, N, AFFINE, VEC, TPR, 1, SACC, ln_bwd_pf<T, N, 1, PF>()>(dy, x, gamma, mean, rstd,
                                                                           dx, part, M);
}

template <typename T, int N, bool AFFINE, int VEC, int TPR, int CL, bool SACC = true,
          int PF = -1, int MINB = 0>
__global__ void LN_CLUSTER_DIMS(CL)
    __launch_bounds__(TPR, ln_bwd_minb(MINB, TPR, ln_bwd_pf<T, N, CL, PF>()))
    layernorm_bwd_cluster(const T *dy, const T *x, const T *__restrict__ gamma,
                          const float *__restrict__ mean, const float *__restrict__ rstd, T *dx,
                          float *__restrict__ part, long long M)
{
    ln_after_previous_grid();
    ln_bwd_body<T, N, AFFINE, VEC, TPR, CL, SACC, ln_bwd_pf<T, N, CL, PF>()>(dy, x, gamma, mean,
                                                                             rstd, dx, part, M);
}

// ------------------------------------------------ backward, copy-engine rows

// The copy-engine kernels' split of a row over a cluster: block r of CL
// holds 16-byte vectors [r NB / CL, (r + 1) NB / CL) of the row's NB, at
// most CVEC (shares that differ by one where CL does not divide NB).
// SHIFT rows (N % VEC != 0, rows of any alignment, above) bring their body
// of N / VEC - 1 vectors from each row's first 16-byte boundary, and rank
// 0 of the cluster takes the head and tail (N % VEC + VEC elements) by
// element.
template <typename T, int N, int CL> struct ln_bulk_split {
    enum : int {
        VEC = 16 / static_cast<int>(sizeof(T)),
        SHIFT = N % VEC != 0,
        NB = N / VEC - SHIFT,          // 16-byte vectors of the body
        NX = SHIFT ? N % VEC + VEC : 0, // head and tail elements (rank 0)
        EVEN = NB % CL == 0,           // every block the same share
        CVEC = (NB + CL - 1) / CL,     // vectors of a block at most
    };
    // the first body vector of block r, and how many it holds
    __host__ __device__ static constexpr int first(int r) { return r * NB / CL; }
    __host__ __device__ static constexpr int vecs(int r) { return (r + 1) * NB / CL - r * NB / CL; }
};

// layernorm_bwd_bulk<T, N, AFFINE, TPR, CL, S>: the backward for long rows,
// split over a cluster of CL blocks, with the rows brought in by the copy
// engine instead of by the threads. The cluster kernel above holds its share
// of a row in registers, so from one row's last load to the next row's first
// no load of that block is in flight. Here one thread asks the copy engine
// for the block's part of a later row's x and dy (two bulk copies into one
// of S shared-memory stages, 2 to 4, completing on an mbarrier: S - 1 rows
// in flight while one is worked on, S x 2 x the chunk of shared memory;
// S 2 is the kernel as first tuned) while all threads
// work on this one, so memory stays busy; the row's values are read from
// shared memory when needed instead of held, which leaves the registers to
// the dgamma/dbeta accumulators, and gamma waits in shared memory as
// float32 (ones when NULL), converted once.
// What bounds it is instructions per element, so the arithmetic is
// arranged for few: dx = rstd * g - (rstd * mean(g)) - (rstd^2 * mean(g *
// xhat)) * (x - mean), two fused multiply-adds after x - mean and g.
//
// Launch: block TPR threads; grid G * CL for any G >= 1 (a persistent loop;
// G is best the number of clusters that fit the GPU at once,
// cuOccupancyMaxActiveClusters, usually one block per SM), and for SHIFT
// rows G x N x sizeof(T) a multiple of 16 unless G >= M (every row a
// cluster takes has one head: the kernel traps otherwise); dynamic shared
// memory ln_bwd_bulk_smem_bytes<T, N, CL, S>(); x, dy and dx 16-byte aligned
// rows, or for SHIFT rows x, dy and dx at one offset within 16 bytes and
// gamma 16-byte aligned (ln_bulk_split). Partial rows as the other backward
// kernels (layernorm_bwd_reduce sums them). sm_90 and newer.
template <typename T, int N, int CL, int S = 2>
__host__ __device__ constexpr int ln_bwd_bulk_smem_bytes()
{
    // S stages of (x, dy), and gamma in float32, each a block's share
    return ln_bulk_split<T, N, CL>::CVEC * (2 * S * 16 + 64 / static_cast<int>(sizeof(T)));
}

// A 16-byte vector of shared memory, as raw bits (one ld.shared.v4).
__device__ __forceinline__ ln_raw<16> ln_stage_load(const unsigned char *p)
{
    ln_raw<16> r;
    r.v = *reinterpret_cast<const uint4 *>(p);
    return r;
}

template <typename T, int N, bool AFFINE, int TPR, int CL, int S = 2>
__global__ void LN_CLUSTER_DIMS(CL) __launch_bounds__(TPR, 1)
    layernorm_bwd_bulk(const T *dy, const T *x, const T *__restrict__ gamma,
                       const float *__restrict__ mean, const float *__restrict__ rstd, T *dx,
                       float *__restrict__ part, long long M)
{
    ln_after_previous_grid();
    using C = ln_conv<T>;
    using P = ln_bulk_split<T, N, CL>;
    constexpr int VEC = P::VEC;
    constexpr int ES = static_cast<int>(sizeof(T));
    constexpr bool SH = P::SHIFT;
    constexpr int G4 = VEC / 4;                 // float4s of gamma per vector
    constexpr int CVEC = P::CVEC;               // 16-byte vectors of a block at most
    constexpr int VPT = (CVEC + TPR - 1) / TPR; // vectors per thread
    constexpr int EPT = VPT * VEC;
    constexpr bool FULL = P::EVEN && CVEC % TPR == 0;
    constexpr unsigned CB = CVEC * 16;          // bytes of one tensor's share
    static_assert(P::NB >= CL, "every block of the cluster holds a vector of the row");
    static_assert(P::NX <= TPR, "rank 0's threads take one head/tail element each");
    static_assert(TPR >= 32 && TPR <= 1024 && TPR % 32 == 0, "TPR: whole warps, 32 to 1024");
    static_assert(CL == 1 || CL == 2 || CL == 4 || CL == 8, "CL: 1, 2, 4 or 8");
    static_assert(S >= 2 && S <= 4, "S: 2 to 4 stages");
    static_assert(ln_bwd_bulk_smem_bytes<T, N, CL, S>() <= 227 * 1024, "the stages do not fit a block");
    // [x0 dy0 x1 dy1 .. x(S-1) dy(S-1)] then gamma as G4 planes of CVEC
    // float4s (plane j holds elements 4j..4j+3 of each vector: a warp reads
    // 512 contiguous bytes)
    extern __shared__ __align__(16) unsigned char ln_stage[];
    __shared__ unsigned long long bar[S];
    __shared__ ln_red_smem<TPR / 32, 2, CL> red;
    if (blockDim.x != TPR)
        __trap();
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
    const unsigned rank = CL > 1 ? ln_cluster_rank() : 0;
    const long long first = blockIdx.x / CL, step = gridDim.x / CL;
    const int v0 = P::first(static_cast<int>(rank)); // this block's first body vector
    const int cv = P::EVEN ? CVEC : P::vecs(static_cast<int>(rank));
    const unsigned cb = static_cast<unsigned>(cv) * 16u;
    const int t = threadIdx.x;
    // SH: the head of every row the cluster takes, one because the row
    // stride is whole 16-byte units (or the grid takes each row once): the
    // dgamma/dbeta accumulators keep one column each, and gamma is shifted
    // to the head once
    const int h = SH && first < M ? ln_head(x, first * N) : 0;
    if (SH && step < M && (step * N * ES) % 16 != 0)
        __trap();
    const int c0 = h + v0 * VEC; // this block's first column
    float4 *sg = reinterpret_cast<float4 *>(ln_stage + 2 * S * CB);

    for (int v = t; v < cv; v += TPR) {
        float f[VEC];
        if (gamma != nullptr) {
            const ln_raw<16> r = SH ? ln_load_ro_at<T, VEC>(gamma, c0 + v * VEC)
                                    : ln_load_ro<16>(gamma + c0 + v * VEC);
            C::unpack(&r, f);
        } else {
#pragma unroll
            for (int e = 0; e < VEC; e++)
                f[e] = 1.f;
        }
#pragma unroll
        for (int j = 0; j < G4; j++)
            sg[j * CVEC + v] = make_float4(f[4 * j], f[4 * j + 1], f[4 * j + 2], f[4 * j + 3]);
    }
    // The copy engine writes a stage once each thread is done reading it:
    // one thread issues, after the barrier that ends the row.
    auto issue = [&](long long row, int s) {
        unsigned char *st = ln_stage + s * 2 * CB;
        ln_mbar_expect(&bar[s], 2 * cb);
        ln_bulk_load(st, x + row * N + c0, cb, &bar[s]);
        ln_bulk_load(st + CB, dy + row * N + c0, cb, &bar[s]);
    };
    if (t == 0) {
#pragma unroll
        for (int s = 0; s < S; s++)
            ln_mbar_init(&bar[s]);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); // the copy engine sees them
        for (int s = 0; s < S; s++)
            if (first + s * step < M)
                issue(first + s * step, s);
    }
    __syncthreads();
    ln_red_init<CL>(red);

    // SH: rank 0's threads below NX hold one head/tail element each, of
    // column ec: x and dy loaded a row ahead (plain loads, their latency
    // behind a row's work), gamma there once, its dgamma/dbeta in registers
    const bool edge = SH && rank == 0 && t < P::NX;
    const int ec = ln_edge_index<VEC>(t, h, P::NB);
    auto edge_load = [&](const T *p, long long row) {
        ln_raw<ES> r = ln_zero<ES>();
        if (edge && row < M)
            r = ln_load<ES>(p + row * N + ec);
        return r;
    };
    float eg[1] = {1.f}, edg = 0.f, edb = 0.f;
    if (edge && gamma != nullptr) {
        const ln_raw<ES> r = ln_load_ro<ES>(gamma + ec);
        C::unpack(&r, eg);
    }
    ln_raw<ES> ex = edge_load(x, first), ed = edge_load(dy, first);

    float adg[AFFINE ? EPT : 1], adb[AFFINE ? EPT : 1];
#pragma unroll
    for (int k = 0; k < (AFFINE ? EPT : 1); k++)
        adg[k] = adb[k] = 0.f;
    // The vector i of this thread: x and dy as floats, gamma.
    auto unpack = [&](const unsigned char *sx, int i, float (&fx)[VEC], float (&fd)[VEC],
                      float (&fg)[VEC]) {
        const int v = i * TPR + t;
        const ln_raw<16> rx = ln_stage_load(sx + v * 16), rd = ln_stage_load(sx + CB + v * 16);
        C::unpack(&rx, fx);
        C::unpack(&rd, fd);
#pragma unroll
        for (int j = 0; j < G4; j++) {
            const float4 g4 = sg[j * CVEC + v];
            fg[4 * j] = g4.x;
            fg[4 * j + 1] = g4.y;
            fg[4 * j + 2] = g4.z;
            fg[4 * j + 3] = g4.w;
        }
    };
    float mu = first < M ? mean[first] : 0.f, rs = first < M ? rstd[first] : 0.f;
    // rows done (use), their stage s = use % S and its phase parity
    // ph = (use / S) & 1, kept as counters (no division per row)
    unsigned use = 0, ph = 0;
    int s = 0;
    for (long long row = first; row < M; row += step, use++) {
        const long long next = row + step;
        const float mun = next < M ? mean[next] : 0.f, rsn = next < M ? rstd[next] : 0.f;
        const ln_raw<ES> exn = edge_load(x, next), edn = edge_load(dy, next);
        const unsigned char *sx = ln_stage + s * 2 * CB;
        ln_mbar_wait(&bar[s], ph);

        float sum[2] = {0.f, 0.f}; // sum g, sum g * xhat
        float fxe[1] = {0.f}, fde[1] = {0.f};
        if (edge) {
            C::unpack(&ex, fxe);
            C::unpack(&ed, fde);
            const float xh = (fxe[0] - mu) * rs, gg = fde[0] * eg[0];
            sum[0] = gg;
            sum[1] = gg * xh;
            if constexpr (AFFINE) {
                edg += fde[0] * xh;
                edb += fde[0];
            }
        }
#pragma unroll
        for (int i = 0; i < VPT; i++) {
            if (FULL || i * TPR + t < cv) {
                float fx[VEC], fd[VEC], fg[VEC];
                unpack(sx, i, fx, fd, fg);
#pragma unroll
                for (int e = 0; e < VEC; e++) {
                    const float xh = (fx[e] - mu) * rs, gg = fd[e] * fg[e];
                    sum[0] += gg;
                    sum[1] += gg * xh;
                    if constexpr (AFFINE) {
                        adg[i * VEC + e] += fd[e] * xh;
                        adb[i * VEC + e] += fd[e];
                    }
                }
            }
            // One vector's loads at a time: hoisting the next vector's above
            // this one's math spilled float16 rows at 64 registers.
            asm volatile("" ::: "memory");
        }
        ln_row_sum<TPR, CL>(sum, red, use);
        const float c0s = -rs * sum[0] * (1.f / N), c1 = -rs * rs * sum[1] * (1.f / N);
        T *dxr = dx + row * N;
#pragma unroll
        for (int i = 0; i < VPT; i++) {
            const int v = i * TPR + t;
            if (FULL || v < cv) {
                float fx[VEC], fd[VEC], fg[VEC];
                unpack(sx, i, fx, fd, fg);
#pragma unroll
                for (int e = 0; e < VEC; e++)
                    fx[e] = fmaf(rs, fd[e] * fg[e], fmaf(c1, fx[e] - mu, c0s));
                ln_raw<16> out;
                C::pack(fx, &out);
                ln_store<16>(dxr + c0 + v * VEC, out);
            }
        }
        if (edge) {
            float f[1] = {fmaf(rs, fde[0] * eg[0], fmaf(c1, fxe[0] - mu, c0s))};
            ln_raw<ES> out;
            C::pack(f, &out);
            ln_store<ES>(dxr + ec, out);
        }
        __syncthreads(); // every thread is done with stage s
        if (t == 0 && row + S * step < M) {
            // generic-proxy reads of the stage before the copy engine's writes
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            issue(row + S * step, s);
        }
        if (++s == S) { // the next row's stage, a phase later after the last
            s = 0;
            ph ^= 1;
        }
        mu = mun;
        rs = rsn;
        ex = exn;
        ed = edn;
    }
    if constexpr (AFFINE) {
        // The partial row through shared memory (the stages are free: every
        // copy issued was waited for), so that a warp's stores are 512
        // contiguous bytes: stored straight from the registers, a lane's
        // columns are VEC apart, each store instruction touched 32 sectors,
        // and the kernel's warps stalled on the store queue (ncu: two orders
        // of magnitude more throttle stalls than without them;
        // bench/layernorm_NOTES.md, run 6).
        float4 *acc = reinterpret_cast<float4 *>(ln_stage); // [2][CVEC * VEC / 4]
        constexpr int Q = CVEC * VEC / 4;
#pragma unroll
        for (int i = 0; i < VPT; i++) {
            const int v = i * TPR + t;
            if (FULL || v < cv) {
#pragma unroll
                for (int j = 0; j < G4; j++) {
                    const int k = i * VEC + 4 * j;
                    acc[v * G4 + j] = make_float4(adg[k], adg[k + 1], adg[k + 2], adg[k + 3]);
                    acc[Q + v * G4 + j] = make_float4(adb[k], adb[k + 1], adb[k + 2], adb[k + 3]);
                }
            }
        }
        __syncthreads();
        float *pg = part + first * ln_part_row(N) + c0, *pb = pg + ln_part_beta(N);
        if constexpr (SH) {
            // the block's columns from c0, not 16-byte aligned: by element
            const float *af = reinterpret_cast<const float *>(acc);
            for (int q = t; q < cv * VEC; q += TPR) {
                pg[q] = af[q];
                pb[q] = af[4 * Q + q];
            }
            if (edge) {
                part[first * ln_part_row(N) + ec] = edg;
                part[first * ln_part_row(N) + ln_part_beta(N) + ec] = edb;
            }
        } else {
            for (int q = t; q < cv * G4; q += TPR) {
                reinterpret_cast<float4 *>(pg)[q] = acc[q];
                reinterpret_cast<float4 *>(pb)[q] = acc[Q + q];
            }
        }
    }
    if constexpr (CL > 1)
        ln_cluster_sync(); // the cluster's blocks leave together, after the last exchange
#else
    __trap(); // the copy engine and clusters are sm_90's
#endif
}

// ------------------------------------------------- forward, copy-engine rows

// layernorm_fwd_bulk<T, N, AFFINE, TPR, CL>: the forward for long rows, split
// over a cluster of CL blocks, with the rows brought in by the copy engine.
// The register kernels keep a row's loads in flight only while its threads
// wait for it, so a long row (one block of 1024 threads, or a cluster of big
// blocks) leaves memory idle between rows, and holding more rows needs more
// registers than an SM has (16-bit 65536 spilled at 64 registers). Here one
// thread asks the copy engine for the block's part of the next two rows (two
// shared-memory stages, each completing on an mbarrier) while all threads
// work on this one: the bytes in flight are bounded by shared memory, not
// registers. Each thread moves its part of the stage into registers once
// (raw T bits, as the register kernels hold them), frees the stage for the
// row after next, then computes as ln_fwd_body: two exact passes, gamma and
// beta read from global (L2-resident), y stored from the registers.
//
// Options (the defaults 2, 0, 0 are the kernel as first tuned):
//   S    stages (2 to 4): rows of the block in flight by the copy engine,
//        S x its chunk of shared memory
//   GB   1 (with AFFINE): the block's chunk of gamma and beta brought once
//        by the copy engine into shared memory (as T, 2 x the chunk more)
//        and read from there for every row instead of from L2
//        2 (with AFFINE, rows of whole vectors): each thread's gamma and
//        beta vectors loaded once into registers (2 x its x registers
//        more) instead: no shared memory, so that more blocks fit an SM
//   ONE  1: the row's statistics by one cluster exchange (ln_cluster_stats)
//        instead of two
//
// Launch: block TPR threads; grid G * CL for any G >= 1 (a persistent loop
// over rows; best the clusters that fit at once, cuOccupancyMaxActiveClusters);
// dynamic shared memory ln_fwd_bulk_smem_bytes<T, N, CL, S, GB == 1 && AFFINE>();
// x and y 16-byte aligned rows (the split in ln_bulk_split), or, for a row
// length the 16-byte vector does not divide (SHIFT), rows of any alignment with x and y at the same offset
// within 16 bytes and gamma and beta 16-byte aligned (as the register
// kernels' SHIFT); gamma and beta 16-byte aligned with GB. In place (y == x)
// is safe: a block reads a row's chunk (the copy engine's, complete) and its
// head and tail before it writes them, and the copies and loads in flight
// are of later rows. sm_90 and newer.
template <typename T, int N, int CL, int S = 2, int GB = 0>
__host__ __device__ constexpr int ln_fwd_bulk_smem_bytes()
{
    // S stages of x, then with GB 1 gamma's and beta's shares (SHIFT: and
    // the vector after them, which the last body vector's shift reads)
    using P = ln_bulk_split<T, N, CL>;
    return (S * P::CVEC + (GB == 1 ? 2 * (P::CVEC + P::SHIFT) : 0)) * 16;
}

template <typename T, int N, bool AFFINE, int TPR, int CL, int S = 2, int GB = 0, int ONE = 0>
__global__ void LN_CLUSTER_DIMS(CL) __launch_bounds__(TPR)
    layernorm_fwd_bulk(const T *x, const T *__restrict__ gamma, const T *__restrict__ beta, T *y,
                       float *__restrict__ mean_out, float *__restrict__ rstd_out, long long M,
                       float eps)
{
    ln_after_previous_grid();
    using C = ln_conv<T>;
    using P = ln_bulk_split<T, N, CL>;
    constexpr int VEC = P::VEC;
    constexpr int ES = static_cast<int>(sizeof(T));
    constexpr bool SH = P::SHIFT;
    constexpr int CVEC = P::CVEC;               // 16-byte vectors of a block at most
    constexpr int VPT = (CVEC + TPR - 1) / TPR; // vectors per thread
    constexpr bool FULL = P::EVEN && CVEC % TPR == 0;
    constexpr unsigned CB = CVEC * 16;         // bytes of one stage
    constexpr int GW = CVEC + P::SHIFT;        // GB: 16-byte vectors of gamma's share
    static_assert(P::NB >= CL, "every block of the cluster holds a vector of the row");
    static_assert(P::NX <= TPR, "rank 0's threads take one head/tail element each");
    static_assert(TPR >= 32 && TPR <= 1024 && TPR % 32 == 0, "TPR: whole warps, 32 to 1024");
    static_assert(CL == 1 || CL == 2 || CL == 4 || CL == 8, "CL: 1, 2, 4 or 8");
    static_assert(S >= 2 && S <= 4, "S: 2 to 4 stages");
    static_assert(GB >= 0 && GB <= 2 && (ONE == 0 || ONE == 1), "GB: 0, 1 or 2; ONE: 0 or 1");
    static_assert(!(GB == 2 && SH), "GB 2: rows of whole vectors (a shifted row's pairs differ by row)");
    constexpr bool GB_ = GB == 1 && AFFINE, GBR = GB == 2 && AFFINE;
    static_assert(ln_fwd_bulk_smem_bytes<T, N, CL, S, GB_>() <= 227 * 1024,
                  "the stages do not fit a block");
    // [x stage 0 .. x stage S-1] then with GB_ [gamma's share, beta's share]
    extern __shared__ __align__(16) unsigned char ln_stage[];
    __shared__ unsigned long long bar[S + 1]; // the stages', then gamma/beta's
    // with ONE each block exchanges two values (its sum and M2)
    __shared__ typename ln_pick<ONE != 0, ln_red_smem<TPR / 32, 2, CL>, ln_red_smem<TPR / 32, 1, CL>>::type red;
    if (blockDim.x != TPR)
        __trap();
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
    const unsigned rank = CL > 1 ? ln_cluster_rank() : 0;
    const long long first = blockIdx.x / CL, step = gridDim.x / CL;
    const int v0 = P::first(static_cast<int>(rank)); // this block's first body vector
    const int cv = P::EVEN ? CVEC : P::vecs(static_cast<int>(rank));
    const unsigned cb = static_cast<unsigned>(cv) * 16u;
    const int t = threadIdx.x;
    const unsigned char *sgb = ln_stage + S * CB; // gamma's share, beta's after it (GB_)
    const bool has_g = AFFINE && gamma != nullptr, has_b = AFFINE && beta != nullptr;
    // SH: the row's head; its body starts there, 16-byte aligned
    auto head = [&](long long row) { return SH ? ln_head(x, row * N) : 0; };
    auto issue = [&](long long row, int s) {
        ln_mbar_expect(&bar[s], cb);
        ln_bulk_load(ln_stage + s * CB, x + row * N + head(row) + v0 * VEC, cb, &bar[s]);
    };
    if (t == 0) {
#pragma unroll
        for (int s = 0; s < S + (GB_ ? 1 : 0); s++)
            ln_mbar_init(&bar[s]);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        if (first < M)
            issue(first, 0);
        if constexpr (GB_) {
            // after the first row's x, which is needed first; waited for by
            // every block, rows or none, so no copy outlives the block
            // (SH: a vector more, the second of the last body vector's pair)
            const unsigned gb = static_cast<unsigned>(cv + P::SHIFT) * 16u;
            ln_mbar_expect(&bar[S], (has_g ? gb : 0u) + (has_b ? gb : 0u));
            if (has_g)
                ln_bulk_load(ln_stage + S * CB, gamma + v0 * VEC, gb, &bar[S]);
            if (has_b)
                ln_bulk_load(ln_stage + S * CB + GW * 16, beta + v0 * VEC, gb, &bar[S]);
        }
        for (int s = 1; s < S; s++)
            if (first + s * step < M)
                issue(first + s * step, s);
    }
    __syncthreads();
    ln_red_init<CL>(red);
    if constexpr (GB_)
        ln_mbar_wait(&bar[S], 0);
    // SH: rank 0's threads below NX hold one head/tail element each, loaded
    // a row ahead (plain loads: their latency hides behind a row's work),
    // and gamma's and beta's values at both columns it can have, t (in the
    // head, t < h) or t + NB VEC (in the tail), loaded once: not from L2 in
    // every row's chain of dependent steps
    const bool edge = SH && rank == 0 && t < P::NX;
    auto edge_load = [&](long long row) {
        ln_raw<ES> r = ln_zero<ES>();
        if (edge && row < M)
            r = ln_load<ES>(x + row * N + ln_edge_index<VEC>(t, head(row), P::NB));
        return r;
    };
    ln_raw<ES> xs = edge_load(first);
    // ONE: block r's elements, and 1 / this block's (a constant where every
    // block holds the same: no division in the row's chain of steps)
    auto count = [](int r) { return VEC * (P::EVEN ? CVEC : P::vecs(r)) + (r == 0 ? P::NX : 0); };
    const float inv_count = 1.f / static_cast<float>(count(static_cast<int>(rank)));
    float eg[2] = {1.f, 1.f}, eb[2] = {0.f, 0.f};
    if (edge) {
#pragma unroll
        for (int k = 0; k < 2; k++) {
            const int c = t + k * P::NB * VEC;
            float one[1];
            if (has_g) {
                const ln_raw<ES> r = ln_load_ro<ES>(gamma + c);
                C::unpack(&r, one);
                eg[k] = one[0];
            }
            if (has_b) {
                const ln_raw<ES> r = ln_load_ro<ES>(beta + c);
                C::unpack(&r, one);
                eb[k] = one[0];
            }
        }
    }
    // gamma's or beta's body vector v (p, or with GB_ its share in shared
    // memory, sp) for a row of head h (SH: h elements past their aligned
    // vectors)
    auto param_vec = [&](const T *__restrict__ p, const unsigned char *sp, int v, int h) {
        if constexpr (GB_ && SH)
            return ln_shift_pair<T>(ln_stage_load(sp + v * 16), ln_stage_load(sp + v * 16 + 16), h);
        else if constexpr (GB_)
            return ln_stage_load(sp + v * 16);
        else if constexpr (SH)
            return ln_load_ro_at<T, VEC>(p, h + (v0 + v) * VEC);
        else
            return ln_load_ro<16>(p + (v0 + v) * VEC);
    };
    // GBR: this thread's gamma and beta vectors, held for every row
    ln_raw<16> gr[GBR ? VPT : 1], br[GBR ? VPT : 1];
    if constexpr (GBR) {
#pragma unroll
        for (int i = 0; i < VPT; i++) {
            const int v = i * TPR + t;
            const bool in = FULL || v < cv;
            gr[i] = in && has_g ? param_vec(gamma, sgb, v, 0) : ln_zero<16>();
            br[i] = in && has_b ? param_vec(beta, sgb, v, 0) : ln_zero<16>();
        }
    }
    // rows done (use), their stage s = use % S and its phase parity
    // ph = (use / S) & 1, kept as counters (no division per row)
    unsigned use = 0, ph = 0;
    int s = 0;
    for (long long row = first; row < M; row += step, use++) {
        const unsigned char *st = ln_stage + s * CB;
        const int h = head(row);
        const ln_raw<ES> xsn = edge_load(row + step);
        if constexpr (GBR) // held as raw T bits, converted where used (ln_opaque)
#pragma unroll
            for (int i = 0; i < VPT; i++) {
                ln_opaque(gr[i]);
                ln_opaque(br[i]);
            }
        ln_mbar_wait(&bar[s], ph);
        ln_raw<16> xv[VPT];
#pragma unroll
        for (int i = 0; i < VPT; i++) {
            const int v = i * TPR + t;
            xv[i] = (FULL || v < cv) ? ln_stage_load(st + v * 16) : ln_zero<16>();
        }
        __syncthreads(); // every thread has its part of stage s in registers
        if (t == 0 && row + S * step < M) {
            // generic-proxy reads of the stage before the copy engine's writes
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            issue(row + S * step, s);
        }
        if (++s == S) { // the next row's stage, a phase later after the last
            s = 0;
            ph ^= 1;
        }
        float fs[1] = {0.f}; // SH: this thread's head/tail element (0 if none)
        if constexpr (SH)
            C::unpack(&xs, fs);
        float sum[1] = {fs[0]};
#pragma unroll
        for (int i = 0; i < VPT; i++) {
            float f[VEC];
            C::unpack(&xv[i], f);
#pragma unroll
            for (int e = 0; e < VEC; e++)
                sum[0] += f[e];
        }
        float mu, m2;
        if constexpr (ONE != 0) {
            // the block's sum and M2 about its own mean (block barriers
            // only), then one exchange: block r holds count(r) elements
            const float sb = ln_block_sum<TPR>(sum[0], &red.warp[0][0][0], 2 * use);
            const float mb = sb * inv_count;
            float q = 0.f;
            if (edge) {
                const float d = fs[0] - mb;
                q = d * d;
            }
#pragma unroll
            for (int i = 0; i < VPT; i++) {
                if (FULL || i * TPR + t < cv) {
                    float f[VEC];
                    C::unpack(&xv[i], f);
#pragma unroll
                    for (int e = 0; e < VEC; e++) {
                        const float d = f[e] - mb;
                        q += d * d;
                    }
                }
            }
            q = ln_block_sum<TPR>(q, &red.warp[0][0][0], 2 * use + 1);
            if constexpr (CL > 1) {
                ln_cluster_stats<CL>(sb, q, red, use, count, 1.f / N, mu, m2);
            } else {
                mu = mb;
                m2 = q;
            }
        } else {
            ln_row_sum<TPR, CL>(sum, red, 2 * use);
            mu = sum[0] * (1.f / N);
            float sq[1] = {0.f};
            if (edge) {
                const float d = fs[0] - mu;
                sq[0] = d * d;
            }
#pragma unroll
            for (int i = 0; i < VPT; i++) {
                if (FULL || i * TPR + t < cv) {
                    float f[VEC];
                    C::unpack(&xv[i], f);
#pragma unroll
                    for (int e = 0; e < VEC; e++) {
                        const float d = f[e] - mu;
                        sq[0] += d * d;
                    }
                }
            }
            ln_row_sum<TPR, CL>(sq, red, 2 * use + 1);
            m2 = sq[0];
        }
        const float rs = rsqrtf(m2 * (1.f / N) + eps);
        T *yr = y + row * N;
        T *yb = yr + h + v0 * VEC; // this block's body, 16-byte aligned
#pragma unroll
        for (int i = 0; i < VPT; i++) {
            const int v = i * TPR + t;
            if (FULL || v < cv) {
                float f[VEC];
                C::unpack(&xv[i], f);
#pragma unroll
                for (int e = 0; e < VEC; e++)
                    f[e] = (f[e] - mu) * rs;
                if (has_g) {
                    ln_raw<16> gv;
                    if constexpr (GBR)
                        gv = gr[i];
                    else
                        gv = param_vec(gamma, sgb, v, h);
                    float g[VEC];
                    C::unpack(&gv, g);
#pragma unroll
                    for (int e = 0; e < VEC; e++)
                        f[e] *= g[e];
                }
                if (has_b) {
                    ln_raw<16> bv;
                    if constexpr (GBR)
                        bv = br[i];
                    else
                        bv = param_vec(beta, sgb + GW * 16, v, h);
                    float b[VEC];
                    C::unpack(&bv, b);
#pragma unroll
                    for (int e = 0; e < VEC; e++)
                        f[e] += b[e];
                }
                ln_raw<16> out;
                C::pack(f, &out);
                ln_store<16>(yb + v * VEC, out);
            }
        }
        if (edge) {
            const int k = t < h ? 0 : 1; // head or tail
            float f[1] = {(fs[0] - mu) * rs};
            if (has_g)
                f[0] *= eg[k];
            if (has_b)
                f[0] += eb[k];
            ln_raw<ES> out;
            C::pack(f, &out);
            ln_store<ES>(yr + ln_edge_index<VEC>(t, h, P::NB), out);
        }
        xs = xsn;
        if (rank == 0 && t == 0) {
            if (mean_out != nullptr)
                mean_out[row] = mu;
            if (rstd_out != nullptr)
                rstd_out[row] = rs;
        }
    }
    if constexpr (CL > 1)
        ln_cluster_sync(); // the cluster's blocks leave together, after the last exchange
#else
    __trap(); // the copy engine and clusters are sm_90's
#endif
}

// Drops the 128-byte line at p (128-byte aligned) from L2 without writing
// it back: its bytes become undefined (sm_80 and newer; elsewhere nothing).
__device__ __forceinline__ void ln_discard_line(const float *p)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("discard.L2 [%0], 128;" ::"l"(p) : "memory");
#endif
}

// Sums the P partial rows of layernorm_bwd(_cluster/_generic/_bulk) into
// dgamma (blockIdx.y 0) and dbeta (1), each column in a fixed order. Block
// 32 x R (R = 1 ... 32, ln_reduce_rows in src/ops/layernorm.c: about P / 16):
// 32 columns, each summed by R threads that issue eight loads at a time
// before adding, then across the R (32 x 32 threads left each with two or
// three dependent loads at P ~ 66, and ran about 40% longer than 32 x 8;
// bench/layernorm_NOTES.md, run 6). Grid (ceil(N / 32), 2). Either output
// may be NULL.
template <typename T>
__global__ void __launch_bounds__(1024)
    layernorm_bwd_reduce(const float *part, long long P, int N, T *__restrict__ dgamma,
                         T *__restrict__ dbeta)
{
    ln_after_previous_grid();
    constexpr int U = 8; // loads in flight per thread
    const int R = blockDim.x / 32;
    __shared__ float s[32][33];
    const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
    const int c = blockIdx.x * 32 + tx;
    const int which = blockIdx.y;
    T *out = which == 0 ? dgamma : dbeta;
    if (blockDim.x % 32 != 0)
        __trap();
    if (out == nullptr)
        return;
    // The partial rows are scratch, read once here: a warp's 32 columns of
    // a row's half are one 128-byte line (ln_part_row's padding), which
    // lane u drops from L2 once the warp has read it (discard: no
    // write-back), so that the partials, written just before and still in
    // L2, never cost DRAM bytes (P x ln_part_row(N) x 4 a call: 132-528
    // partial rows, several percent of a backward's traffic at 64M
    // elements). Every lane runs the loop (the warp's sync); columns past N
    // load nothing. part is not __restrict__: a discard is a write, so its
    // lines must not be read through the read-only (non-coherent) path.
    const bool drop = (reinterpret_cast<unsigned long long>(part) & 127) == 0;
    float acc = 0.f;
    const float *col = part + which * ln_part_beta(N) + c;
    const long long stride = ln_part_row(N);
    for (long long p = ty; p < P; p += static_cast<long long>(U) * R) {
        float v[U];
#pragma unroll
        for (int u = 0; u < U; u++)
            v[u] = c < N && p + u * R < P ? col[(p + u * R) * stride] : 0.f;
#pragma unroll
        for (int u = 0; u < U; u++)
            acc += v[u];
        if (drop) {
            __syncwarp(); // every lane's values are in (acc used them)
            if (tx < U && p + tx * R < P)
                ln_discard_line(col - tx + (p + tx * R) * stride);
        }
    }
    s[ty][tx] = acc;
    __syncthreads();
    if (ty == 0 && c < N) {
        float v = 0.f;
        for (int r = 0; r < R; r++)
            v += s[r][tx];
        float f[1] = {v};
        ln_raw<sizeof(T)> o;
        ln_conv<T>::pack(f, &o);
        // A typed store: a memcpy to global memory came out as byte stores
        // whose low byte was wrong for 16-bit T on the device.
        *reinterpret_cast<decltype(o.v) *>(out + c) = o.v;
    }
}

// ------------------------------------------------------------- generic N

// Any N at run time, one row per 512-thread block: the row is read from
// global memory three times (sum, squared deviations, output). Rows up to
// a few hundred KiB come back from L2; far longer ones cost up to 3x the
// bytes of the specialized kernels. For N that those cannot hold.
enum : int { LN_GENERIC_THREADS = 512 }; // an enumerator: no __device__ global (see ln_shape)

template <typename T, bool AFFINE, int VEC>
__global__ void __launch_bounds__(LN_GENERIC_THREADS)
    layernorm_fwd_generic(const T *x, const T *__restrict__ gamma, const T *__restrict__ beta, T *y,
                          float *__restrict__ mean_out, float *__restrict__ rstd_out, long long M,
                          int N, float eps)
{
    ln_after_previous_grid();
    constexpr int B = VEC * sizeof(T);
    using C = ln_conv<T>;
    __shared__ ln_red_smem<LN_GENERIC_THREADS / 32, 1, 1> red;
    if (blockDim.x != LN_GENERIC_THREADS)
        __trap();
    const long long row = blockIdx.x;
    const int nvec = N / VEC;
    const T *xr = x + row * N;
    T *yr = y + row * N;
    float s[1] = {0.f};
    for (int j = threadIdx.x; j < nvec; j += LN_GENERIC_THREADS) {
        ln_raw<B> r = ln_load<B>(xr + j * VEC);
        float f[VEC];
        C::unpack(&r, f);
#pragma unroll
        for (int e = 0; e < VEC; e++)
            s[0] += f[e];
    }
    ln_row_sum<LN_GENERIC_THREADS, 1>(s, red, 0);
    const float mean = s[0] / N;
    float q[1] = {0.f};
    for (int j = threadIdx.x; j < nvec; j += LN_GENERIC_THREADS) {
        ln_raw<B> r = ln_load<B>(xr + j * VEC);
        float f[VEC];
        C::unpack(&r, f);
#pragma unroll
        for (int e = 0; e < VEC; e++)
            q[0] += (f[e] - mean) * (f[e] - mean);
    }
    ln_row_sum<LN_GENERIC_THREADS, 1>(q, red, 1);
    const float rstd = rsqrtf(q[0] / N + eps);
    for (int j = threadIdx.x; j < nvec; j += LN_GENERIC_THREADS) {
        ln_raw<B> r = ln_load<B>(xr + j * VEC);
        float f[VEC];
        C::unpack(&r, f);
#pragma unroll
        for (int e = 0; e < VEC; e++)
            f[e] = (f[e] - mean) * rstd;
        if (AFFINE && gamma != nullptr) {
            ln_raw<B> gv = ln_load_ro<B>(gamma + j * VEC);
            float g[VEC];
            C::unpack(&gv, g);
#pragma unroll
            for (int e = 0; e < VEC; e++)
                f[e] *= g[e];
        }
        if (AFFINE && beta != nullptr) {
            ln_raw<B> bv = ln_load_ro<B>(beta + j * VEC);
            float b[VEC];
            C::unpack(&bv, b);
#pragma unroll
            for (int e = 0; e < VEC; e++)
                f[e] += b[e];
        }
        ln_raw<B> o;
        C::pack(f, &o);
        ln_store<B>(yr + j * VEC, o);
    }
    if (threadIdx.x == 0) {
        if (mean_out != nullptr)
            mean_out[row] = mean;
        if (rstd_out != nullptr)
            rstd_out[row] = rstd;
    }
}

// Persistent over rows (grid G blocks of 512); with AFFINE each block keeps
// its partial row part[blockIdx.x] in global memory, updated by the thread
// that owns each column (no atomics, deterministic), which costs a read and
// a write of 8 bytes per column and row on top of the data.
template <typename T, bool AFFINE, int VEC>
__global__ void __launch_bounds__(LN_GENERIC_THREADS)
    layernorm_bwd_generic(const T *dy, const T *x, const T *__restrict__ gamma,
                          const float *__restrict__ mean, const float *__restrict__ rstd, T *dx,
                          float *__restrict__ part, long long M, int N)
{
    ln_after_previous_grid();
    constexpr int B = VEC * sizeof(T);
    using C = ln_conv<T>;
    __shared__ ln_red_smem<LN_GENERIC_THREADS / 32, 2, 1> red;
    if (blockDim.x != LN_GENERIC_THREADS)
        __trap();
    const int nvec = N / VEC;
    const bool scale = gamma != nullptr;
    float *pr = AFFINE ? part + static_cast<long long>(blockIdx.x) * ln_part_row(N) : nullptr;
    const long long pb = ln_part_beta(N); // dbeta's columns in pr
    if (AFFINE)
        for (int c = threadIdx.x * VEC; c < N; c += LN_GENERIC_THREADS * VEC)
#pragma unroll
            for (int e = 0; e < VEC; e++)
                pr[c + e] = pr[pb + c + e] = 0.f;
    unsigned sums = 0; // ln_row_sum calls
    for (long long row = blockIdx.x; row < M; row += gridDim.x) {
        const T *xr = x + row * N, *dyr = dy + row * N;
        const float mu = mean[row], rs = rstd[row];
        float s[2] = {0.f, 0.f};
        for (int j = threadIdx.x; j < nvec; j += LN_GENERIC_THREADS) {
            ln_raw<B> xv = ln_load<B>(xr + j * VEC), dv = ln_load<B>(dyr + j * VEC);
            float fx[VEC], fd[VEC], fg[VEC];
            C::unpack(&xv, fx);
            C::unpack(&dv, fd);
            ln_unpack_gamma<T, VEC>(gamma, j, scale, fg);
#pragma unroll
            for (int e = 0; e < VEC; e++) {
                const float xh = (fx[e] - mu) * rs, gg = fd[e] * fg[e];
                s[0] += gg;
                s[1] += gg * xh;
                if (AFFINE) {
                    pr[j * VEC + e] += fd[e] * xh;
                    pr[pb + j * VEC + e] += fd[e];
                }
            }
        }
        ln_row_sum<LN_GENERIC_THREADS, 1>(s, red, sums++);
        const float a = s[0] / N, b = s[1] / N;
        T *dxr = dx + row * N;
        for (int j = threadIdx.x; j < nvec; j += LN_GENERIC_THREADS) {
            ln_raw<B> xv = ln_load<B>(xr + j * VEC), dv = ln_load<B>(dyr + j * VEC);
            float fx[VEC], fd[VEC], fg[VEC];
            C::unpack(&xv, fx);
            C::unpack(&dv, fd);
            ln_unpack_gamma<T, VEC>(gamma, j, scale, fg);
#pragma unroll
            for (int e = 0; e < VEC; e++)
                fx[e] = rs * (fd[e] * fg[e] - a - (fx[e] - mu) * rs * b);
            ln_raw<B> o;
            C::pack(fx, &o);
            ln_store<B>(dxr + j * VEC, o);
        }
    }
}
