// The reference for bench/inplace_bench.py: an in-place square product
// A (m x n) <- A W or A W^T written the way make-torch-inplace's
// square_matmul.cu does it (our code, its published design): one warp per
// row, 4 rows per block, each lane computing a contiguous run of up to 64 of
// the row's outputs into a register array, reading the row and W from global
// memory, float32 accumulation; the outputs are written after a barrier, so
// the row is read in full before it is overwritten. Rows of more than
// 32 x 64 = 2048 elements do not fit its register array and are refused.
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#define ROWS_PER_BLOCK 4
#define MAX_PER_LANE 64

template <typename T>
__global__ void warp_row_kernel(T *a, const T *w, int rows, int n, bool trans)
{
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    const int per_lane = (n + 31) / 32;
    const int first = lane * per_lane;
    int mine = n - first;
    mine = mine < 0 ? 0 : (mine > per_lane ? per_lane : mine);
    float out[MAX_PER_LANE];
    T *r = a + (long long)row * n;
    if (row < rows) {
        for (int i = 0; i < mine; i++) {
            const int col = first + i;
            float s = 0.f;
            for (int k = 0; k < n; k++) {
                const float wv = static_cast<float>(trans ? w[(long long)col * n + k] : w[(long long)k * n + col]);
                s += static_cast<float>(r[k]) * wv;
            }
            out[i] = s;
        }
    }
    __syncthreads();
    if (row < rows)
        for (int i = 0; i < mine; i++)
            r[first + i] = static_cast<T>(out[i]);
}

void warp_row_matmul_(torch::Tensor a, torch::Tensor w, bool trans)
{
    TORCH_CHECK(a.is_cuda() && w.is_cuda(), "CUDA tensors only");
    TORCH_CHECK(a.is_contiguous() && w.is_contiguous(), "contiguous tensors only");
    TORCH_CHECK(a.dim() == 2 && w.dim() == 2 && w.size(0) == a.size(1) && w.size(1) == a.size(1),
                "a (m x n), w (n x n)");
    TORCH_CHECK(a.scalar_type() == w.scalar_type(), "a and w of one dtype");
    const int n = (int)a.size(1), rows = (int)a.size(0);
    TORCH_CHECK(n <= 32 * MAX_PER_LANE, "n over 2048 does not fit a warp's registers");
    const at::cuda::OptionalCUDAGuard guard(device_of(a));
    auto stream = at::cuda::getCurrentCUDAStream();
    const dim3 grid((rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK), block(32 * ROWS_PER_BLOCK);
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, a.scalar_type(), "warp_row", [&] {
        warp_row_kernel<scalar_t><<<grid, block, 0, stream>>>(a.data_ptr<scalar_t>(),
                                                              w.data_ptr<scalar_t>(), rows, n, trans);
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)
{
    m.def("warp_row_matmul_", &warp_row_matmul_, "in-place A <- A W (trans: A W^T), one warp per row");
}
