// kernels/lltm.cu on the CPU, to check a kernel change before spending GPU
// time: each block runs with one std::thread per CUDA thread, __syncthreads
// is a std::barrier, __shared__ is static (one block at a time). Checks the
// instances src/ops/lltm.c ships (fused and split backward, fp32 and fp64)
// against a float64 reference on small sizes; prints the worst rel error.
// Slow (a thread per CUDA thread): sizes up to the tutorial's tiny one.
//   g++ -std=c++20 -O1 -pthread -w bench/lltm_emu.cpp -o /tmp/lltm_emu && /tmp/lltm_emu
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <thread>
#include <vector>
#include <memory>
struct dim3_ { unsigned x = 0, y = 0, z = 0; };
thread_local dim3_ threadIdx, blockIdx;
dim3_ blockDim, gridDim;
std::barrier<> *bar;
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(x)
#define __restrict__
inline void __syncthreads() { bar->arrive_and_wait(); }
using std::exp; using std::expm1; using std::tanh;
#include "../kernels/lltm.cu"

template <class F> void launch(dim3_ grid, dim3_ block, F f)
{
    blockDim = block; gridDim = grid;
    unsigned nt = block.x * block.y;
    for (unsigned by = 0; by < grid.y; by++)
        for (unsigned bx = 0; bx < grid.x; bx++) {
            std::barrier<> b(nt);
            bar = &b;
            std::vector<std::thread> ts;
            for (unsigned t = 0; t < nt; t++)
                ts.emplace_back([&, t] {
                    blockIdx.x = bx; blockIdx.y = by;
                    threadIdx.x = t % block.x; threadIdx.y = t / block.x;
                    f();
                });
            for (auto &t : ts) t.join();
        }
}

static double sg(double x) { return 1 / (1 + exp(-x)); }

template <typename T, int BM, int BN, int BK, int TM, int TN, int KS, bool FUSED, int BK2, int B1, int N1, int T1, int U1, int K1, int B2, int N2, int T2, int U2, int K2>
double run(int B, int I, int S)
{
    int K = S + I;
    std::mt19937 rng(B * 1000 + I * 10 + S);
    std::uniform_real_distribution<double> u(-1, 1);
    auto mk = [&](size_t n, double sc) { std::vector<T> v(n); for (auto &x : v) x = (T)(u(rng) * sc); return v; };
    auto in = mk((size_t)B * I, 1), w = mk((size_t)3 * S * K, 2 / sqrt(K)), bias = mk(3 * S, .5), oh = mk((size_t)B * S, 1),
         oc = mk((size_t)B * S, 1), gh = mk((size_t)B * S, 1), gc = mk((size_t)B * S, 1);
    std::vector<T> nh(B * S, NAN), nc(B * S, NAN), saved((size_t)B * (8 * S + I), NAN), dh(B * S, NAN), di(B * I, NAN),
        dw((size_t)3 * S * K, NAN), db(3 * S, NAN), dc(B * S, NAN);
    launch({(unsigned)(S + BN - 1) / BN, (unsigned)(B + BM - 1) / BM}, {(unsigned)((BM / TM) * (BN / TN) * KS), 1}, [&] {
        lltm_fwd<T, BM, BN, BK, TM, TN, KS, true>(in.data(), w.data(), bias.data(), oh.data(), oc.data(), nh.data(), nc.data(), saved.data(), B, I, S);
    });
    if (!FUSED)
        launch({(unsigned)(S + LLTM_GATES_COLS - 1) / LLTM_GATES_COLS, 1}, {LLTM_GATES_COLS, LLTM_GATES_ROWS}, [&] {
            lltm_bwd_gates<T, false>(gh.data(), gc.data(), saved.data(), dc.data(), db.data(), B, I, S);
        });
    unsigned ndx = ((K + N1 - 1) / N1) * ((B + B1 - 1) / B1), ndw = ((K + 1 + N2 - 1) / N2) * ((3 * S + B2 - 1) / B2);
    launch({ndx + ndw, 1}, {(unsigned)((B1 / T1) * (N1 / U1) * K1), 1}, [&] {
        lltm_bwd<T, FUSED, BK2, B1, N1, T1, U1, K1, B2, N2, T2, U2, K2>(gh.data(), gc.data(), saved.data(), w.data(), dh.data(), di.data(), dw.data(), db.data(), dc.data(), B, I, S);
    });
    // reference
    double worst = 0, num[7] = {}, den[7] = {};
    std::vector<double> G((size_t)B * 3 * S);
    for (int b = 0; b < B; b++) {
        for (int j = 0; j < S; j++) {
            double g[3];
            for (int a = 0; a < 3; a++) {
                double s = bias[a * S + j];
                for (int k = 0; k < K; k++) s += (k < S ? oh[b * S + k] : in[b * I + k - S]) * w[(size_t)(a * S + j) * K + k];
                g[a] = s;
            }
            double ig = sg(g[0]), og = sg(g[1]), cd = g[2] > 0 ? g[2] : expm1(g[2]);
            double c = oc[b * S + j] + cd * ig, t = tanh(c), h = t * og;
            double dnc = (1 - t * t) * og * gh[b * S + j] + gc[b * S + j];
            G[(size_t)b * 3 * S + j] = cd * dnc * ig * (1 - ig);
            G[(size_t)b * 3 * S + S + j] = t * gh[b * S + j] * og * (1 - og);
            G[(size_t)b * 3 * S + 2 * S + j] = ig * dnc * (g[2] > 0 ? 1 : exp(g[2]));
            auto acc = [&](int i, double got, double ref) { num[i] += (got - ref) * (got - ref); den[i] += ref * ref; if (std::isnan(got)) num[i] = INFINITY; };
            acc(0, nh[b * S + j], h); acc(1, nc[b * S + j], c); acc(2, dc[b * S + j], dnc);
        }
    }
    for (int b = 0; b < B; b++)
        for (int k = 0; k < K; k++) {
            double s = 0;
            for (int g = 0; g < 3 * S; g++) s += G[(size_t)b * 3 * S + g] * w[(size_t)g * K + k];
            double got = k < S ? dh[b * S + k] : di[b * I + k - S];
            num[3] += (got - s) * (got - s); den[3] += s * s; if (std::isnan(got)) num[3] = INFINITY;
        }
    for (int g = 0; g < 3 * S; g++) {
        double sb = 0;
        for (int b = 0; b < B; b++) sb += G[(size_t)b * 3 * S + g];
        num[5] += (db[g] - sb) * (db[g] - sb); den[5] += sb * sb; if (std::isnan((double)db[g])) num[5] = INFINITY;
        for (int k = 0; k < K; k++) {
            double s = 0;
            for (int b = 0; b < B; b++) s += G[(size_t)b * 3 * S + g] * (k < S ? oh[b * S + k] : in[b * I + k - S]);
            double got = dw[(size_t)g * K + k];
            num[4] += (got - s) * (got - s); den[4] += s * s; if (std::isnan(got)) num[4] = INFINITY;
        }
    }
    for (int i = 0; i < 6; i++) { double e = sqrt(num[i] / den[i]); if (!(e <= worst)) worst = e; }
    return worst;
}

int main()
{
    int sizes[][3] = {{1, 1, 1}, {3, 5, 7}, {17, 33, 65}, {16, 32, 128}};
    int bad = 0;
    for (auto &s : sizes) {
        double e1 = run<float, 8, 4, 16, 1, 1, 16, true, 16, 8, 4, 1, 1, 24, 32, 32, 2, 2, 3>(s[0], s[1], s[2]);
        double e2 = run<float, 8, 4, 16, 1, 1, 16, false, 16, 32, 64, 4, 4, 1, 64, 64, 8, 4, 1>(s[0], s[1], s[2]);
        double e3 = run<double, 16, 8, 16, 2, 1, 4, true, 16, 16, 32, 2, 2, 2, 32, 32, 2, 2, 1>(s[0], s[1], s[2]);
        double e4 = run<double, 16, 8, 16, 2, 1, 4, false, 16, 16, 32, 2, 2, 1, 32, 32, 2, 4, 1>(s[0], s[1], s[2]);
        printf("B=%d I=%d S=%d  f32 fused %.2e  f32 split %.2e  f64 fused %.2e  f64 split %.2e\n", s[0], s[1], s[2], e1, e2, e3, e4);
        if (!(e1 < 1e-5 && e2 < 1e-5 && e3 < 1e-13 && e4 < 1e-13))
            bad = 1;
    }
    printf("%s\n", bad ? "FAIL" : "OK");
    return bad;
}
