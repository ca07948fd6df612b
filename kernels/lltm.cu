// The LLTM cell of PyTorch's C++/CUDA extension tutorial, forward and
// backward, compiled at run time by jitop (NVRTC, no host code here).
//
// Math (B batch, I input features, S state, K = S + I):
//   X = [old_h, input] (B x K); gates = X W^T + bias (W: 3S x K)
//   ig = sigmoid(g0), og = sigmoid(g1), cand = elu(g2)
//   new_cell = old_cell + cand * ig; new_h = tanh(new_cell) * og
// Backward from grad_h (gh) and grad_cell (gc), with t = tanh(new_cell):
//   d_nc = (1 - t^2) og gh + gc = d_old_cell
//   G = [cand d_nc ig(1-ig), t gh og(1-og), ig d_nc elu'(g2)]   (B x 3S)
//   d_W = G^T X, d_bias = column sums of G, d_X = G W = [d_old_h, d_input].
//
// The saved buffer (what the forward keeps for the backward), in elements
// of T, one block after the other:
//   act  B x 4S  each row [ig | og | g2 | t]  (g2 before the elu, so that
//                elu' = exp(g2) keeps full precision for very negative g2)
//   X    B x K   [old_h, input], so that the caller may reuse its buffers
//   G    B x 3S  backward scratch (d_gates), written by the backward only
// In the cuBLAS path the forward product writes raw gates into act's first
// 3S columns (leading dimension 4S) and lltm_fwd_pointwise turns them into
// [ig | og | g2 | t] in place.
//
// Bias rides in the products as one extra reduction (forward) or output
// (backward) column: X gets a virtual column of ones at index K, so the
// forward reduces over K + 1 with W[:, K] = bias, and the backward's d_W
// product has K + 1 output columns whose last one is d_bias.

template <typename T> struct lltm_math;
template <> struct lltm_math<float> {
    static __device__ __forceinline__ float exp_(float x) { return expf(x); }
    static __device__ __forceinline__ float expm1_(float x) { return expm1f(x); }
    static __device__ __forceinline__ float tanh_(float x) { return tanhf(x); }
};
template <> struct lltm_math<double> {
    static __device__ __forceinline__ double exp_(double x) { return exp(x); }
    static __device__ __forceinline__ double expm1_(double x) { return expm1(x); }
    static __device__ __forceinline__ double tanh_(double x) { return tanh(x); }
};

template <typename T> __device__ __forceinline__ T lltm_sigmoid(T x)
{
    return T(1) / (T(1) + lltm_math<T>::exp_(-x));
}

template <typename T> __device__ __forceinline__ T lltm_elu(T x)
{
    return x > T(0) ? x : lltm_math<T>::expm1_(x);
}

template <typename T> __device__ __forceinline__ T lltm_elu_grad(T x)
{
    return x > T(0) ? T(1) : lltm_math<T>::exp_(x);
}

// One element of d_gates from the saved activations: row b, column g of
// [0, 3S). When dcell is set, the gate-0 column also stores d_old_cell.
template <typename T>
__device__ __forceinline__ T lltm_dgate(const T *act, const T *gh, const T *gc, T *dcell, int S,
                                        int b, int g)
{
    int gate = g >= 2 * S ? 2 : (g >= S ? 1 : 0);
    int j = g - gate * S;
    const T *row = act + (size_t)b * 4 * S;
    T og = row[S + j];
    T t = row[3 * S + j];
    T h = gh[(size_t)b * S + j];
    if (gate == 1)
        return t * h * og * (T(1) - og);
    T d_nc = (T(1) - t * t) * og * h + gc[(size_t)b * S + j];
    T ig = row[j];
    T g2 = row[2 * S + j];
    if (gate == 0) {
        if (dcell != nullptr)
            dcell[(size_t)b * S + j] = d_nc;
        return lltm_elu(g2) * d_nc * ig * (T(1) - ig);
    }
    return ig * d_nc * lltm_elu_grad(g2);
}

// A block's tile of a product C[m][n] (NG products that share the A operand)
// = sum over k of A(m, k) B(g, k, n), the operands read through a problem
// object P (so that X is indexed as [old_h, input] in place and d_gates can
// be computed while loading). Shared-memory tiles, the next tile prefetched
// into registers while the current one is multiplied; thread (tx, ty) owns
// rows ty + i*TY and columns tx + j*TX, which keeps the shared reads free of
// bank conflicts and the epilogue's stores coalesced along n.
//
// KS > 1 splits the reduction inside the block: KS groups of NT threads take
// every KS-th k tile each and add their partial sums through shared memory
// at the end. At small sizes a block's time is the latency of its chain of
// k tiles, and this divides the chain by KS (it costs KS times the shared
// memory and one more barrier).
// Programmatic dependent launch (sm_90 and newer). The host launches every
// kernel of this file with programmatic stream serialization, so that a
// kernel's blocks are scheduled while the previous kernel in the stream
// (ours, or a cuBLAS product) finishes instead of after it: at the tutorial's
// size each kernel runs for a few microseconds, and the medium size's
// elementwise kernels about as long, of which the launch gap is a good part. Every kernel so
// launched calls this first, before it touches memory: griddepcontrol.wait
// returns once the previous grid has completed and its writes are visible
// (at once when the kernel was launched without the attribute), and
// launch_dependents lets the next kernel be scheduled early in turn.
__device__ __forceinline__ void lltm_after_previous_grid()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

template <typename T, int BM_, int BN_, int BK_, int TM_, int TN_, int NG_, int KS_ = 1>
struct lltm_tile {
    // Enumerators, not static constexpr members: those are C++17 inline
    // variables, which NVRTC emits as __device__ globals that every load of
    // the module then allocates and copies.
    enum : int {
        BM = BM_, BN = BN_, BK = BK_, TM = TM_, TN = TN_, NG = NG_, KS = KS_,
        TX = BN / TN, TY = BM / TM, NT = TX * TY, THREADS = NT * KS,
        AP = BM + 1, BP = BN + 1, // +1: padded rows, no conflicts on store
        A_PER = BM * BK / NT, B_PER = NG * BK * BN / NT,
        GROUP_SMEM = BK * AP + NG * BK * BP, // elements per group
        RED = (KS - 1) * NG * TM * TN * NT,  // partial sums of groups 1..KS-1
        SMEM = KS * GROUP_SMEM > RED ? KS * GROUP_SMEM : RED,
    };
    static_assert(BM % TM == 0 && BN % TN == 0, "tile must divide");
    static_assert((BM * BK) % NT == 0 && (NG * BK * BN) % NT == 0, "loads must divide");
};

template <class L, class P, typename T>
__device__ __forceinline__ void lltm_load(const P &p, int tid, int m0, int n0, int k0,
                                          T (&ra)[L::A_PER], T (&rb)[L::B_PER])
{
#pragma unroll
    for (int i = 0; i < L::A_PER; i++) {
        int e = tid + i * L::NT;
        int m = P::A_K_FAST ? e / L::BK : e % L::BM;
        int k = P::A_K_FAST ? e % L::BK : e / L::BM;
        ra[i] = p.a(m0 + m, k0 + k);
    }
#pragma unroll
    for (int i = 0; i < L::B_PER; i++) {
        int e = tid + i * L::NT;
        int g = e / (L::BK * L::BN), r = e % (L::BK * L::BN);
        int n = P::B_K_FAST ? r / L::BK : r % L::BN;
        int k = P::B_K_FAST ? r % L::BK : r / L::BN;
        rb[i] = p.b(g, k0 + k, n0 + n);
    }
}

template <class L, class P, typename T>
__device__ __forceinline__ void lltm_store(T *smem, int tid, const T (&ra)[L::A_PER],
                                           const T (&rb)[L::B_PER])
{
    T *As = smem, *Bs = smem + L::BK * L::AP;
#pragma unroll
    for (int i = 0; i < L::A_PER; i++) {
        int e = tid + i * L::NT;
        int m = P::A_K_FAST ? e / L::BK : e % L::BM;
        int k = P::A_K_FAST ? e % L::BK : e / L::BM;
        As[k * L::AP + m] = ra[i];
    }
#pragma unroll
    for (int i = 0; i < L::B_PER; i++) {
        int e = tid + i * L::NT;
        int g = e / (L::BK * L::BN), r = e % (L::BK * L::BN);
        int n = P::B_K_FAST ? r / L::BK : r % L::BN;
        int k = P::B_K_FAST ? r % L::BK : r / L::BN;
        Bs[(g * L::BK + k) * L::BP + n] = rb[i];
    }
}

// acc += this thread's share of one shared-memory tile's product.
template <class L, typename T>
__device__ __forceinline__ void lltm_tile_fma(const T *As, const T *Bs, int tx, int ty,
                                              T (&acc)[L::NG][L::TM][L::TN])
{
#pragma unroll
    for (int kk = 0; kk < L::BK; kk++) {
        T a[L::TM], b[L::NG][L::TN];
#pragma unroll
        for (int i = 0; i < L::TM; i++)
            a[i] = As[kk * L::AP + ty + i * L::TY];
#pragma unroll
        for (int g = 0; g < L::NG; g++)
#pragma unroll
            for (int j = 0; j < L::TN; j++)
                b[g][j] = Bs[(g * L::BK + kk) * L::BP + tx + j * L::TX];
#pragma unroll
        for (int g = 0; g < L::NG; g++)
#pragma unroll
            for (int i = 0; i < L::TM; i++)
#pragma unroll
                for (int j = 0; j < L::TN; j++)
                    acc[g][i][j] += a[i] * b[g][j];
    }
}

// Runs the reduction; returns true in the threads of group 0, which then
// hold the block's full sums in acc (the others' acc is spent). Every
// problem's a() and b() return 0 for k >= kred, so groups run the same
// number of rounds and the barriers stay uniform.
template <class L, class P, typename T>
__device__ __forceinline__ bool lltm_mainloop(const P &p, int m0, int n0, int kred, T *smem,
                                              T (&acc)[L::NG][L::TM][L::TN])
{
    int grp = threadIdx.x / L::NT, tid = threadIdx.x % L::NT;
    int tx = tid % L::TX, ty = tid / L::TX;
    T *mine = smem + grp * L::GROUP_SMEM;
    const T *As = mine, *Bs = mine + L::BK * L::AP;
    int ntiles = (kred + L::BK - 1) / L::BK;
    int rounds = (ntiles + L::KS - 1) / L::KS;
    T ra[L::A_PER], rb[L::B_PER];
    if constexpr (P::ONE_LOAD_SITE) {
        // One call site each for the loads, the tile product and the stores
        // (the next tile's loads still overlap this tile's FMAs): every site
        // is unrolled code, and the second copy of the loads made the
        // forward twice the SASS, which the driver pays for in every load
        // of the module (its load time grows with the cubin's size;
        // bench/lltm_NOTES.md, run 9).
#pragma unroll 1
        for (int r = 0; r <= rounds; r++) {
            if (r < rounds)
                lltm_load<L>(p, tid, m0, n0, (r * L::KS + grp) * L::BK, ra, rb);
            if (r > 0) {
                lltm_tile_fma<L>(As, Bs, tx, ty, acc);
                __syncthreads();
            }
            if (r < rounds) {
                lltm_store<L, P>(mine, tid, ra, rb);
                __syncthreads();
            }
        }
    } else {
        // The first tile's loads peeled off the loop: twice the load code
        // (the fused backward's d_gates are computed in its loads: nearly
        // twice the SASS), but in the form above that backward ran
        // slower per call at the tutorial's size (bench/lltm_NOTES.md,
        // run 9).
        lltm_load<L>(p, tid, m0, n0, grp * L::BK, ra, rb);
        lltm_store<L, P>(mine, tid, ra, rb);
        __syncthreads();
        for (int r = 0; r < rounds; r++) {
            bool more = r + 1 < rounds;
            if (more)
                lltm_load<L>(p, tid, m0, n0, ((r + 1) * L::KS + grp) * L::BK, ra, rb);
            lltm_tile_fma<L>(As, Bs, tx, ty, acc);
            __syncthreads();
            if (more) {
                lltm_store<L, P>(mine, tid, ra, rb);
                __syncthreads();
            }
        }
    }
    if (L::KS > 1) {
        constexpr int PER = L::NG * L::TM * L::TN;
        if (grp > 0) {
            T *red = smem + (grp - 1) * PER * L::NT;
#pragma unroll
            for (int g = 0; g < L::NG; g++)
#pragma unroll
                for (int i = 0; i < L::TM; i++)
#pragma unroll
                    for (int j = 0; j < L::TN; j++)
                        red[((g * L::TM + i) * L::TN + j) * L::NT + tid] = acc[g][i][j];
        }
        __syncthreads();
        if (grp == 0) {
            for (int s = 1; s < L::KS; s++) {
                const T *red = smem + (s - 1) * PER * L::NT;
#pragma unroll
                for (int g = 0; g < L::NG; g++)
#pragma unroll
                    for (int i = 0; i < L::TM; i++)
#pragma unroll
                        for (int j = 0; j < L::TN; j++)
                            acc[g][i][j] += red[((g * L::TM + i) * L::TN + j) * L::NT + tid];
            }
        }
    }
    return grp == 0;
}

// Forward product: A = X (B x (K+1), the ones column last), B(g, k, n) =
// W[g*S + n][k] (bias at k == K). Blocks of column 0 also copy X into saved.
template <typename T> struct lltm_fwd_problem {
    enum : bool { A_K_FAST = true, B_K_FAST = true, ONE_LOAD_SITE = true };
    const T *input, *w, *bias, *old_h;
    T *save_x;
    int B, I, S, K;
    __device__ __forceinline__ T a(int m, int k) const
    {
        // Selects, not early returns: one predicated load per element keeps
        // the unrolled loads short (every load of the module pays for its size).
        bool in = m < B && k < K;
        const T *src = k < S ? old_h + ((size_t)m * S + k) : input + ((size_t)m * I + (k - S));
        T v = in ? *src : T(m < B && k == K);
        if (save_x != nullptr && in)
            save_x[(size_t)m * K + k] = v;
        return v;
    }
    __device__ __forceinline__ T b(int g, int k, int n) const
    {
        size_t row = (size_t)g * S + n;
        const T *src = k < K ? w + (row * K + k) : bias + row;
        return n < S && k <= K ? *src : T(0);
    }
};

// The whole forward in one launch: the three gate products of a B x S tile,
// the gate math in the epilogue (gates never touch memory), and, when saved
// is set, the activations and X for the backward. grid (ceil(S/BN),
// ceil(B/BM)), block NT * KS threads, no dynamic shared memory.
template <typename T, int BM, int BN, int BK, int TM, int TN, int KS, bool SAVE>
__global__ void __launch_bounds__((BM / TM) * (BN / TN) * KS)
lltm_fwd(const T *__restrict__ input, const T *__restrict__ weights, const T *__restrict__ bias,
         const T *__restrict__ old_h, const T *__restrict__ old_cell, T *__restrict__ new_h,
         T *__restrict__ new_cell, T *__restrict__ saved, int B, int I, int S)
{
    using L = lltm_tile<T, BM, BN, BK, TM, TN, 3, KS>;
    __shared__ T smem[L::SMEM];
    lltm_after_previous_grid();
    int K = S + I;
    int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    lltm_fwd_problem<T> p{input, weights, bias, old_h,
                          (SAVE && blockIdx.x == 0) ? saved + (size_t)4 * B * S : nullptr,
                          B, I, S, K};
    T acc[3][TM][TN];
#pragma unroll
    for (int g = 0; g < 3; g++)
#pragma unroll
        for (int i = 0; i < TM; i++)
#pragma unroll
            for (int j = 0; j < TN; j++)
                acc[g][i][j] = T(0);
    if (!lltm_mainloop<L>(p, m0, n0, K + 1, smem, acc))
        return;
    int tx = threadIdx.x % L::TX, ty = threadIdx.x / L::TX;
#pragma unroll
    for (int i = 0; i < TM; i++) {
        int m = m0 + ty + i * L::TY;
#pragma unroll
        for (int j = 0; j < TN; j++) {
            int n = n0 + tx + j * L::TX;
            if (m < B && n < S) {
                size_t o = (size_t)m * S + n;
                T ig = lltm_sigmoid(acc[0][i][j]);
                T og = lltm_sigmoid(acc[1][i][j]);
                T g2 = acc[2][i][j];
                T c = old_cell[o] + lltm_elu(g2) * ig;
                T t = lltm_math<T>::tanh_(c);
                new_cell[o] = c;
                new_h[o] = t * og;
                if (SAVE) {
                    T *row = saved + (size_t)m * 4 * S;
                    row[n] = ig;
                    row[S + n] = og;
                    row[2 * S + n] = g2;
                    row[3 * S + n] = t;
                }
            }
        }
    }
}

// cuBLAS path, step 1: X = [old_h, input] into saved (the product reads it
// as one matrix). One thread per element.
template <typename T>
__global__ void lltm_copy_x(const T *__restrict__ input, const T *__restrict__ old_h,
                            T *__restrict__ saved, int B, int I, int S)
{
    lltm_after_previous_grid();
    int K = S + I;
    size_t n = (size_t)B * K;
    T *x = saved + (size_t)4 * B * S;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x) {
        size_t m = e / K;
        int k = (int)(e - m * K);
        x[e] = k < S ? old_h[m * S + k] : input[m * I + (k - S)];
    }
}

// The sum of a split-K result's slices at p, stride apart, in slice order.
// All loads are issued before the adds (a loop bounded by the run-time KS
// would wait for each load in turn). KS <= LLTM_MAX_SLICES (src/ops/lltm.c).
#define LLTM_MAX_SLICES 12
template <typename T>
__device__ __forceinline__ T lltm_sum_slices(const T *__restrict__ p, size_t stride, int KS)
{
    T v[LLTM_MAX_SLICES];
#pragma unroll
    for (int k = 0; k < LLTM_MAX_SLICES; k++)
        v[k] = k < KS ? p[k * stride] : T(0);
    T sum = v[0];
#pragma unroll
    for (int k = 1; k < LLTM_MAX_SLICES; k++)
        sum += v[k];
    return sum;
}

// cuBLAS path, step 3: raw gates plus bias to new_h, new_cell and
// [ig | og | g2 | t] in saved's act rows (B x 4S). The raw gates are either
// act's own first 3S columns (KS = 1: the product wrote them there) or KS
// partial products over slices of K (split-K, each B x 3S in a row), summed
// here in a fixed order (the result does not depend on scheduling).
template <typename T>
__global__ void lltm_fwd_pointwise(const T *__restrict__ bias, const T *__restrict__ old_cell,
                                   T *__restrict__ new_h, T *__restrict__ new_cell,
                                   T *__restrict__ saved, const T *__restrict__ part, int KS,
                                   int B, int S)
{
    lltm_after_previous_grid();
    size_t n = (size_t)B * S, pstride = (size_t)B * 3 * S;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x) {
        size_t m = e / S;
        int j = (int)(e - m * S);
        T *row = saved + m * 4 * S;
        T g[3];
#pragma unroll
        for (int q = 0; q < 3; q++) {
            g[q] = KS == 1 ? row[q * S + j]
                           : lltm_sum_slices(part + m * 3 * S + q * S + j, pstride, KS);
        }
        T ig = lltm_sigmoid(g[0] + bias[j]);
        T og = lltm_sigmoid(g[1] + bias[S + j]);
        T g2 = g[2] + bias[2 * S + j];
        T c = old_cell[e] + lltm_elu(g2) * ig;
        T t = lltm_math<T>::tanh_(c);
        new_cell[e] = c;
        new_h[e] = t * og;
        row[j] = ig;
        row[S + j] = og;
        row[2 * S + j] = g2;
        row[3 * S + j] = t;
    }
}

// cuBLAS path, backward: d_X = d_gates W computed split-K (KS partial
// products over slices of 3S, each B x K in a row) summed in a fixed order
// and split into d_old_h (the first S columns) and d_input.
template <typename T>
__global__ void lltm_dx_reduce(const T *__restrict__ part, int KS, T *__restrict__ d_old_h,
                               T *__restrict__ d_input, int B, int I, int S)
{
    lltm_after_previous_grid();
    int K = S + I;
    size_t n = (size_t)B * K;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x) {
        T sum = lltm_sum_slices(part + e, n, KS);
        size_t m = e / K;
        int c = (int)(e - m * K);
        if (c < S)
            d_old_h[m * S + c] = sum;
        else
            d_input[m * I + (c - S)] = sum;
    }
}

// Backward, the elementwise part on its own (medium and large sizes):
// d_gates into saved's scratch, d_old_cell, and with BIAS the column sums of
// d_gates into d_bias (for the cuBLAS path, whose d_W product cannot carry
// the ones column). grid ceil(S/8), block (8, 32): a block owns 8 state
// columns for every row, so the column sums need no atomics (and come out
// the same on every run). 8 columns, not 32: S = 1024 then gives 128 blocks
// instead of 32, and a warp's 8 x 4 loads still fill whole 32-byte sectors.
#define LLTM_GATES_COLS 8
#define LLTM_GATES_ROWS 32
template <typename T, bool BIAS>
__global__ void __launch_bounds__(LLTM_GATES_COLS * LLTM_GATES_ROWS)
lltm_bwd_gates(const T *__restrict__ grad_h, const T *__restrict__ grad_cell,
               T *__restrict__ saved, T *__restrict__ d_old_cell, T *__restrict__ d_bias, int B,
               int I, int S)
{
    __shared__ T part[3][LLTM_GATES_ROWS][LLTM_GATES_COLS + 1];
    lltm_after_previous_grid();
    int K = S + I;
    const T *act = saved;
    T *G = saved + (size_t)B * (4 * S + K);
    int j = blockIdx.x * LLTM_GATES_COLS + threadIdx.x;
    T s0 = T(0), s1 = T(0), s2 = T(0);
    if (j < S) {
        for (int b = threadIdx.y; b < B; b += LLTM_GATES_ROWS) {
            T *grow = G + (size_t)b * 3 * S;
            T d0 = lltm_dgate(act, grad_h, grad_cell, d_old_cell, S, b, j);
            T d1 = lltm_dgate(act, grad_h, grad_cell, (T *)nullptr, S, b, S + j);
            T d2 = lltm_dgate(act, grad_h, grad_cell, (T *)nullptr, S, b, 2 * S + j);
            grow[j] = d0;
            grow[S + j] = d1;
            grow[2 * S + j] = d2;
            s0 += d0;
            s1 += d1;
            s2 += d2;
        }
    }
    if (BIAS) {
        part[0][threadIdx.y][threadIdx.x] = s0;
        part[1][threadIdx.y][threadIdx.x] = s1;
        part[2][threadIdx.y][threadIdx.x] = s2;
        __syncthreads();
        if (threadIdx.y < 3 && j < S) {
            T s = T(0);
#pragma unroll
            for (int y = 0; y < LLTM_GATES_ROWS; y++)
                s += part[threadIdx.y][y][threadIdx.x];
            d_bias[threadIdx.y * S + j] = s;
        }
    }
}

// d_gates, read from the scratch or (FUSED) computed from the saved
// activations while a tile is loaded.
template <typename T, bool FUSED> struct lltm_grad_src {
    const T *act, *gh, *gc, *G;
    T *dcell; // FUSED only: set in the blocks that store d_old_cell
    int S;
    __device__ __forceinline__ T at(int b, int g) const
    {
        if (FUSED)
            return lltm_dgate(act, gh, gc, dcell, S, b, g);
        return G[(size_t)b * 3 * S + g];
    }
};

// d_X = G W: A(m=b, k=g) = G[b][g], B(k=g, n) = W[g][n].
template <typename T, bool FUSED> struct lltm_dx_problem {
    enum : bool { A_K_FAST = true, B_K_FAST = false, ONE_LOAD_SITE = false };
    lltm_grad_src<T, FUSED> src;
    const T *w;
    int B, K, S3;
    __device__ __forceinline__ T a(int m, int k) const
    {
        return (m < B && k < S3) ? src.at(m, k) : T(0);
    }
    __device__ __forceinline__ T b(int, int k, int n) const
    {
        return (k < S3 && n < K) ? w[(size_t)k * K + n] : T(0);
    }
};

// [d_W | d_bias] = G^T [X | 1]: A(m=g, k=b) = G[b][g], B(k=b, n) = X[b][n].
template <typename T, bool FUSED> struct lltm_dw_problem {
    enum : bool { A_K_FAST = false, B_K_FAST = false, ONE_LOAD_SITE = false };
    lltm_grad_src<T, FUSED> src;
    const T *x;
    int B, K, S3;
    __device__ __forceinline__ T a(int m, int k) const
    {
        return (m < S3 && k < B) ? src.at(k, m) : T(0);
    }
    __device__ __forceinline__ T b(int, int k, int n) const
    {
        if (k >= B || n > K)
            return T(0);
        return n == K ? T(1) : x[(size_t)k * K + n];
    }
};

// Both backward products in one launch: blocks [0, ndx) compute tiles of
// d_X (B x K, reduction 3S), the rest tiles of [d_W | d_bias] (3S x (K+1),
// reduction B). FUSED computes d_gates while loading (the whole backward in
// one launch; for small sizes, where the recomputation is cheaper than a
// second launch) and stores d_old_cell from the d_X blocks of column 0;
// otherwise lltm_bwd_gates<T, false> ran first. Both tilings use the same
// thread count (NT * KS).
template <typename T, bool FUSED, int BK, int BM1, int BN1, int TM1, int TN1, int KS1, int BM2,
          int BN2, int TM2, int TN2, int KS2>
__global__ void __launch_bounds__((BM1 / TM1) * (BN1 / TN1) * KS1)
lltm_bwd(const T *__restrict__ grad_h, const T *__restrict__ grad_cell, T *__restrict__ saved,
         const T *__restrict__ weights, T *__restrict__ d_old_h, T *__restrict__ d_input,
         T *__restrict__ d_weights, T *__restrict__ d_bias, T *__restrict__ d_old_cell, int B,
         int I, int S)
{
    using L1 = lltm_tile<T, BM1, BN1, BK, TM1, TN1, 1, KS1>;
    using L2 = lltm_tile<T, BM2, BN2, BK, TM2, TN2, 1, KS2>;
    static_assert(L1::THREADS == L2::THREADS, "both tilings need the same thread count");
    __shared__ T smem[L1::SMEM > L2::SMEM ? L1::SMEM : L2::SMEM];
    lltm_after_previous_grid();
    int K = S + I, S3 = 3 * S;
    const T *act = saved;
    const T *X = saved + (size_t)4 * B * S;
    const T *G = X + (size_t)B * K;
    int dx_cols = (K + BN1 - 1) / BN1;
    int ndx = dx_cols * ((B + BM1 - 1) / BM1);
    int blk = blockIdx.x;
    if (blk < ndx) {
        int nt = blk % dx_cols, mt = blk / dx_cols;
        int m0 = mt * BM1, n0 = nt * BN1;
        lltm_grad_src<T, FUSED> src{act, grad_h, grad_cell, G,
                                    (FUSED && nt == 0) ? d_old_cell : nullptr, S};
        lltm_dx_problem<T, FUSED> p{src, weights, B, K, S3};
        T acc[1][TM1][TN1];
#pragma unroll
        for (int i = 0; i < TM1; i++)
#pragma unroll
            for (int j = 0; j < TN1; j++)
                acc[0][i][j] = T(0);
        if (!lltm_mainloop<L1>(p, m0, n0, S3, smem, acc))
            return;
        int tx = threadIdx.x % L1::TX, ty = threadIdx.x / L1::TX;
#pragma unroll
        for (int i = 0; i < TM1; i++) {
            int m = m0 + ty + i * L1::TY;
#pragma unroll
            for (int j = 0; j < TN1; j++) {
                int n = n0 + tx + j * L1::TX;
                if (m < B && n < K) {
                    if (n < S)
                        d_old_h[(size_t)m * S + n] = acc[0][i][j];
                    else
                        d_input[(size_t)m * I + (n - S)] = acc[0][i][j];
                }
            }
        }
    } else {
        blk -= ndx;
        int dw_cols = (K + 1 + BN2 - 1) / BN2;
        int nt = blk % dw_cols, mt = blk / dw_cols;
        int m0 = mt * BM2, n0 = nt * BN2;
        lltm_grad_src<T, FUSED> src{act, grad_h, grad_cell, G, nullptr, S};
        lltm_dw_problem<T, FUSED> p{src, X, B, K, S3};
        T acc[1][TM2][TN2];
#pragma unroll
        for (int i = 0; i < TM2; i++)
#pragma unroll
            for (int j = 0; j < TN2; j++)
                acc[0][i][j] = T(0);
        if (!lltm_mainloop<L2>(p, m0, n0, B, smem, acc))
            return;
        int tx = threadIdx.x % L2::TX, ty = threadIdx.x / L2::TX;
#pragma unroll
        for (int i = 0; i < TM2; i++) {
            int m = m0 + ty + i * L2::TY;
#pragma unroll
            for (int j = 0; j < TN2; j++) {
                int n = n0 + tx + j * L2::TX;
                if (m < S3 && n <= K) {
                    if (n < K)
                        d_weights[(size_t)m * K + n] = acc[0][i][j];
                    else
                        d_bias[m] = acc[0][i][j];
                }
            }
        }
    }
}
