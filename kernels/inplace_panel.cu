// The in-place square product A (m x N) <- A op(W) on sm_90a (H100), W N x N,
// for float16 and bfloat16 A, and float32 A with TF32 products (T = float),
// float32 accumulation. Compiled by jitop for sm_90a (wgmma, TMA);
// src/ops/inplace.c launches it. The product's B operand (K x N, B[k][j] =
// op(W)[k][j]) is read from shared memory in one of wgmma's two layouts:
// - B_NMAJOR (A W, 16-bit): W as it is, its rows the K index, N contiguous
//   (wgmma's transposed B);
// - otherwise K contiguous: W as it is for A W^T, and for TF32 A W (TF32
//   wgmma has no transposed B) the W^T that src/ops/inplace.c makes in its
//   scratch first with sqmm_panel_transpose.
//
// Why a kernel of its own: cuBLAS writes the product to other memory, so the
// chunked path (inplace.c) copies every chunk back, one more read and write
// of A, which the product does not hide at small N: the copy cannot run
// beside cuBLAS's kernels (bench/INPLACE_NOTES.md).
//
// Who owns what. A is cut into panels of 128 rows and a panel's output into
// N / BN tiles of BN columns. The grid is persistent: G blocks (a multiple
// of CL = N / BN, all resident: a cooperative launch), block b in group
// g = b / CL computing the columns (b % CL) * BN .. + BN - 1 of panels g,
// g + G / CL, ... A tile's product needs the panel's every column, so no
// block of the group may store into the panel before every block of the
// group has read it: each block counts its reading done on cnt[g] (release)
// as soon as a consumer has seen the panel's last load land (the products
// may still run), and its storer waits until the group's count for that
// panel is complete (acquire). No block reads a panel after its group
// finished it, so nothing else waits. The group's last storer to finish
// puts cnt[g] back to 0 (and done[g], how it knows it is the last), so the
// counters the host zeroed once stay zero for the next launch on the same
// scratch.
//
// One block: 384 threads. Warpgroups 1 and 2 (the consumers) each compute 64
// rows x BN columns with wgmma (16-bit: m64n256k16, 128 float accumulators
// a thread; TF32: m64n128k8, 64), A and B from shared memory in stages of
// 128 x BK and BN x BK elements (BK: 128 bytes of a row), loaded by TMA
// (128-byte swizzle) from thread 0 (the producer), which runs ahead into
// the next panel. A finished tile goes to shared memory (the element type,
// in the same swizzle, 4 boxes of 128 bytes of columns) and the consumers
// go on to their next panel; thread 32 (the storer) waits for the group,
// then stores the tile into A with TMA. Rows past m: TMA reads them as 0
// and does not store them. The tile sizes per type: ip_panel_cfg (and
// jitop__ip_panel_bn / _smem in src/ops/ip_plan.c, which must agree).
#include <cuda_fp16.h>
#include <cuda_bf16.h>

// CUtensorMap's bytes (cuda.h is host-only): 128 bytes, 64-byte aligned.
struct alignas(64) ip_tensor_map {
    unsigned long long v[16];
};

#define IP_PANEL_BM 128

// Per element type: ES bytes, BN columns a tile, BK = 128 / ES elements of K
// a stage (one 128-byte swizzle row), KSTEP of K a wgmma, S stages. Shared
// memory of one block (SMEM, what src/ops/inplace.c asks): the stages, the
// finished tile, 1 KiB to align the swizzled tiles to 1024 bytes. 16-bit:
// 214016 bytes; TF32: 197632 (4 stages of the half-wide tile).
template <int ES_, int BN_, int KSTEP_, int S_> struct ip_panel_shape {
    static constexpr int ES = ES_, BN = BN_, BK = 128 / ES_, KSTEP = KSTEP_, S = S_;
    static constexpr int NACC = BN_ / 2; // 64 x BN floats over 128 threads
    static constexpr int SMEM = S_ * (IP_PANEL_BM + BN_) * (128 / ES_) * ES_ +
                                IP_PANEL_BM * BN_ * ES_ + 1024;
};
template <typename T> struct ip_panel_cfg;
template <> struct ip_panel_cfg<__half> : ip_panel_shape<2, 256, 16, 3> {};
template <> struct ip_panel_cfg<__nv_bfloat16> : ip_panel_shape<2, 256, 16, 3> {};
template <> struct ip_panel_cfg<float> : ip_panel_shape<4, 128, 8, 4> {};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ unsigned ip_smem(const void *p)
{
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void ip_mbar_init(unsigned long long *bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(ip_smem(bar)), "r"(count)
                 : "memory");
}
__device__ __forceinline__ void ip_mbar_expect(unsigned long long *bar, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(ip_smem(bar)),
                 "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void ip_mbar_arrive(unsigned long long *bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(ip_smem(bar)) : "memory");
}
__device__ __forceinline__ void ip_mbar_wait(unsigned long long *bar, unsigned parity)
{
    unsigned done;
    do {
        asm volatile("{\n\t.reg .pred p;\n\t"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done)
                     : "r"(ip_smem(bar)), "r"(parity)
                     : "memory");
    } while (!done);
}
__device__ __forceinline__ void ip_tma_load(void *dst, const ip_tensor_map *map, int x, int y,
                                            unsigned long long *bar)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];" ::"r"(ip_smem(dst)),
                 "l"(reinterpret_cast<unsigned long long>(map)), "r"(x), "r"(y),
                 "r"(ip_smem(bar))
                 : "memory");
}
__device__ __forceinline__ void ip_tma_store(const ip_tensor_map *map, const void *src, int x,
                                             int y)
{
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::
                     "l"(reinterpret_cast<unsigned long long>(map)),
                 "r"(ip_smem(src)), "r"(x), "r"(y)
                 : "memory");
}
__device__ __forceinline__ unsigned ip_ld_acquire(const unsigned *p)
{
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ unsigned ip_ld_acquire_cta(const unsigned *p)
{
    unsigned v;
    asm volatile("ld.acquire.cta.shared::cta.u32 %0, [%1];" : "=r"(v) : "r"(ip_smem(p)) : "memory");
    return v;
}
__device__ __forceinline__ void ip_st_release_cta(unsigned *p, unsigned v)
{
    asm volatile("st.release.cta.shared::cta.u32 [%0], %1;" ::"r"(ip_smem(p)), "r"(v) : "memory");
}
__device__ __forceinline__ void ip_red_release(unsigned *p, unsigned v)
{
    asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned ip_atom_add_acq_rel(unsigned *p, unsigned v)
{
    unsigned old;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;"
                 : "=r"(old)
                 : "l"(p), "r"(v)
                 : "memory");
    return old;
}
// wgmma's descriptor of a tile in shared memory with the 128-byte swizzle:
// rows of 128 bytes (64 16-bit or 32 float elements), 1024 bytes between
// groups of 8 rows (SBO). K-major (A, and B K contiguous): a row is one M or
// N index; the start address moves 32 bytes per k16 step inside the swizzle
// (the leading offset is unused: 1). N-major (B of A W): a row is one K
// index, 64 columns wide; boxes of 64 columns follow one another lbo bytes
// apart, and a k16 step moves the start 16 rows (2048 bytes).
__device__ __forceinline__ unsigned long long ip_desc(const void *p, unsigned lbo = 16)
{
    const unsigned long long a = ip_smem(p);
    return ((a & 0x3FFFF) >> 4) | ((unsigned long long)(lbo >> 4) << 16) |
           ((unsigned long long)(1024 >> 4) << 32) | (1ull << 62);
}

// ip_panel_mma<T>::run<TB>: one wgmma into the thread's float accumulators
// d, A and B from their descriptors, B N-major when TB is 1 (16-bit only);
// accumulate 0 overwrites d.
template <typename T> struct ip_panel_mma;
// The accumulators as asm operands: "+f"(d[i]) .. "+f"(d[i + 63]), and their
// names in the instruction, %0 .. %63 and %64 .. %127.
#define IP_D8(i)                                                                                   \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]),     \
        "+f"(d[i + 6]), "+f"(d[i + 7])
#define IP_D64(i)                                                                                  \
    IP_D8(i), IP_D8(i + 8), IP_D8(i + 16), IP_D8(i + 24), IP_D8(i + 32), IP_D8(i + 40),           \
        IP_D8(i + 48), IP_D8(i + 56)
#define IP_R0_63                                                                                   \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "  \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "  \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "  \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define IP_R64_127                                                                                 \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "  \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "  \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "  \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"

// 16-bit: wgmma m64n256k16 into the thread's 128 accumulators; PTX is the
// input type's name in the instruction.
#define IP_PANEL_MMA_256(CTYPE, PTX)                                                               \
    template <> struct ip_panel_mma<CTYPE> {                                                       \
        template <int TB>                                                                          \
        static __device__ __forceinline__ void run(float (&d)[128], unsigned long long da,         \
                                                   unsigned long long db, int accumulate)          \
        {                                                                                          \
            asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %130, 0;\n\t"                    \
                         "wgmma.mma_async.sync.aligned.m64n256k16.f32." PTX "." PTX " {" IP_R0_63    \
                         ", " IP_R64_127 "}, %128, %129, p, 1, 1, 0, %131;\n\t}"                   \
                         : IP_D64(0), IP_D64(64)                                                   \
                         : "l"(da), "l"(db), "r"(accumulate), "n"(TB));                            \
        }                                                                                          \
    };
IP_PANEL_MMA_256(__half, "f16")
IP_PANEL_MMA_256(__nv_bfloat16, "bf16")

// TF32: wgmma m64n128k8 into 64 accumulators (no transpose operands for TF32).
template <> struct ip_panel_mma<float> {
    template <int TB>
    static __device__ __forceinline__ void run(float (&d)[64], unsigned long long da,
                                               unsigned long long db, int accumulate)
    {
        asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %66, 0;\n\t"
                     "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {" IP_R0_63
                     "}, %64, %65, p, 1, 1;\n\t}"
                     : IP_D64(0)
                     : "l"(da), "l"(db), "r"(accumulate));
    }
};

// Two results of one row, the element type's bytes (16-bit: 4, float: 8).
template <typename T> struct ip_pack2_t;
template <> struct ip_pack2_t<__half> { using type = unsigned; };
template <> struct ip_pack2_t<__nv_bfloat16> { using type = unsigned; };
template <> struct ip_pack2_t<float> { using type = float2; };
template <typename T>
__device__ __forceinline__ typename ip_pack2_t<T>::type ip_pack2(float x, float y);
template <> __device__ __forceinline__ float2 ip_pack2<float>(float x, float y)
{
    return make_float2(x, y);
}
template <> __device__ __forceinline__ unsigned ip_pack2<__half>(float x, float y)
{
    const __half2 h = __floats2half2_rn(x, y);
    return *reinterpret_cast<const unsigned *>(&h);
}
template <> __device__ __forceinline__ unsigned ip_pack2<__nv_bfloat16>(float x, float y)
{
    const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
    return *reinterpret_cast<const unsigned *>(&h);
}
#endif

// ta: A (m x N, boxes of 128 rows x BK columns, 128-byte swizzle), also the
// map of the stores; tb: B, N x N, in boxes of BN rows x BK columns (K
// contiguous) or, B_NMAJOR, of BK rows x 64 columns; cnt: 2 gridDim.x
// counters, zero (the group counts, then the finished storers).
template <typename T, int N, bool B_NMAJOR>
__global__ void __launch_bounds__(384, 1)
    sqmm_panel(const __grid_constant__ ip_tensor_map ta, const __grid_constant__ ip_tensor_map tb,
               int m, unsigned *cnt)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using C = ip_panel_cfg<T>;
    constexpr int BM = IP_PANEL_BM, BN = C::BN, BK = C::BK, S = C::S, ES = C::ES;
    static_assert(N % BN == 0, "N is a multiple of the tile's columns");
    static_assert(!B_NMAJOR || ES == 2, "wgmma transposes B for 16-bit types only");
    // B_NMAJOR: a stage's B is BN / 64 boxes of BK rows x 64 columns
    constexpr int BOXN = 128 / ES, BOX_BYTES = BK * 128;
    constexpr int CL = N / BN, KT = N / BK;
    extern __shared__ unsigned char ip_panel_raw[];
    unsigned char *smem = reinterpret_cast<unsigned char *>(
        (reinterpret_cast<unsigned long long>(ip_panel_raw) + 1023) & ~1023ull);
    T *sa = reinterpret_cast<T *>(smem);
    T *sb = reinterpret_cast<T *>(smem + S * BM * BK * ES);
    unsigned char *sc = smem + S * (BM + BN) * BK * ES;
    __shared__ unsigned long long full[S], empty[S], tile_full, tile_empty;
    // panels of this block whose every load has landed in shared memory: A's
    // rows there are no longer read from global memory, whatever the
    // wgmma still do with the stages (rising, so no phase to alias)
    __shared__ unsigned panels_loaded;
    const int tid = threadIdx.x, wg = tid / 128;
    const int groups = gridDim.x / CL, g = blockIdx.x / CL, col0 = (blockIdx.x % CL) * BN;
    const int panels = (m + BM - 1) / BM;
    if (tid == 0) {
        for (int s = 0; s < S; s++) {
            ip_mbar_init(&full[s], 1);
            ip_mbar_init(&empty[s], 2);
        }
        ip_mbar_init(&tile_full, 256);
        ip_mbar_init(&tile_empty, 1);
        panels_loaded = 0;
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    // the producer's warpgroup needs few registers, the consumers' 128 or 64
    // accumulators and their addresses more than the 168 a thread that 384
    // threads leave (ptxas spilled around the wgmma loop): 40 + 2 x 232,
    // all of 3 x 168 (src/ops/inplace.c launches only a build of 168)
    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;" ::: "memory");
        if (tid == 0) { // the producer
            int it = 0;
            for (int p = g; p < panels; p += groups)
                for (int k = 0; k < KT; k++, it++) {
                    const int s = it % S;
                    if (it >= S)
                        ip_mbar_wait(&empty[s], ((it / S) - 1) & 1);
                    ip_mbar_expect(&full[s], (BM + BN) * BK * ES);
                    ip_tma_load(sa + s * BM * BK, &ta, k * BK, p * BM, &full[s]);
                    if (B_NMAJOR) {
#pragma unroll
                        for (int j = 0; j < BN / BOXN; j++)
                            ip_tma_load(sb + s * BN * BK + j * BK * BOXN, &tb, col0 + j * BOXN,
                                        k * BK, &full[s]);
                    } else {
                        ip_tma_load(sb + s * BN * BK, &tb, k * BK, col0, &full[s]);
                    }
                }
        } else if (tid == 32) { // the storer
            unsigned round = 0;
            for (int p = g; p < panels; p += groups, round++) {
                // this block has read its share of the panel (its last load
                // landed, seen by a consumer): count it, while the products
                // still run, and wait for the group's
                while (ip_ld_acquire_cta(&panels_loaded) < round + 1)
                    __nanosleep(32);
                ip_red_release(&cnt[g], 1);
                const unsigned want = CL * (round + 1);
                while (ip_ld_acquire(&cnt[g]) < want)
                    __nanosleep(32);
                ip_mbar_wait(&tile_full, round & 1);
                // the stores below are the async proxy's; the other blocks'
                // reads they must follow were seen through the generic one
                asm volatile("fence.proxy.async.global;" ::: "memory");
#pragma unroll
                for (int b = 0; b < BN / BK; b++)
                    ip_tma_store(&ta, sc + b * BM * 128, col0 + BK * b, p * BM);
                asm volatile("cp.async.bulk.commit_group;" ::: "memory");
                asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
                ip_mbar_arrive(&tile_empty);
            }
            asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
            // every storer of the group is past its last wait once done[g]
            // counts CL: the last one zeroes both for the next launch
            if (round > 0 && ip_atom_add_acq_rel(&cnt[gridDim.x + g], 1) == CL - 1) {
                cnt[g] = 0;
                cnt[gridDim.x + g] = 0;
            }
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;" ::: "memory");
    const int wr = wg - 1, t = tid % 128, w = t / 32, l = t % 32;
    int it = 0;
    unsigned round = 0;
    for (int p = g; p < panels; p += groups, round++) {
        float d[C::NACC];
        for (int k = 0; k < KT; k++, it++) {
            const int s = it % S;
            ip_mbar_wait(&full[s], (it / S) & 1);
            // this thread has now seen every load of the panel land (it waited
            // for each step's in turn): the storer may count the panel read
            if (k == KT - 1 && tid == 128)
                ip_st_release_cta(&panels_loaded, round + 1);
            asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
            const T *pa = sa + s * BM * BK + wr * 64 * BK;
            const T *pb = sb + s * BN * BK;
#pragma unroll
            for (int kk = 0; kk < BK / C::KSTEP; kk++)
                ip_panel_mma<T>::template run<B_NMAJOR ? 1 : 0>(
                    d, ip_desc(pa + kk * C::KSTEP),
                    B_NMAJOR ? ip_desc(pb + kk * C::KSTEP * BOXN, BOX_BYTES)
                             : ip_desc(pb + kk * C::KSTEP),
                    (k > 0 || kk > 0) ? 1 : 0);
            asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
            // this step's products stay in flight; the previous step's are
            // done, so its stage goes back to the producer
            asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
            if (k > 0 && t == 0)
                ip_mbar_arrive(&empty[(it - 1) % S]);
        }
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
        if (t == 0)
            ip_mbar_arrive(&empty[(it - 1) % S]);
        if (round > 0)
            ip_mbar_wait(&tile_empty, (round - 1) & 1);
        // the accumulator layout of wgmma m64nN: row 16 w + l / 4 (+ 8),
        // columns 8 i + 2 (l % 4) (+ 1); into the swizzled boxes of BK
        // columns (128 bytes a row: 16-byte chunk c ^ row % 8), where the
        // lanes of one store fall in distinct chunks of distinct rows
        const int rl = wr * 64 + 16 * w + l / 4;
        using P = typename ip_pack2_t<T>::type;
#pragma unroll
        for (int i = 0; i < BN / 8; i++) {
            const int col = 8 * i + 2 * (l % 4), byte = (col % BK) * ES;
            unsigned char *box = sc + (col / BK) * BM * 128;
            const int at = (((byte / 16) ^ (l / 4)) * 16) + byte % 16;
            *reinterpret_cast<P *>(box + rl * 128 + at) = ip_pack2<T>(d[4 * i], d[4 * i + 1]);
            *reinterpret_cast<P *>(box + (rl + 8) * 128 + at) =
                ip_pack2<T>(d[4 * i + 2], d[4 * i + 3]);
        }
        // the tile's generic stores, seen by the storer's TMA (async proxy)
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        ip_mbar_arrive(&tile_full);
    }
#else
    __trap(); // sm_90a only: src/ops/inplace.c never launches it elsewhere
#endif
}

// wt <- w^T, both N x N (N a multiple of 32): blocks of 32 x 8 threads over
// 32 x 32 tiles.
template <typename T>
__global__ void __launch_bounds__(256) sqmm_panel_transpose(const T *__restrict__ w,
                                                            T *__restrict__ wt, int n)
{
    __shared__ T tile[32][33];
    const int bx = blockIdx.x * 32, by = blockIdx.y * 32;
    for (int j = threadIdx.y; j < 32; j += 8)
        tile[j][threadIdx.x] = w[(size_t)(by + j) * n + bx + threadIdx.x];
    __syncthreads();
    for (int j = threadIdx.y; j < 32; j += 8)
        wt[(size_t)(bx + j) * n + by + threadIdx.x] = tile[threadIdx.x][j];
}
