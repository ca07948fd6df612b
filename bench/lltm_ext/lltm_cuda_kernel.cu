// Elementwise kernels of the tutorial-equivalent LLTM extension (see
// lltm_cuda.cpp). One thread per (row, state column); the gates tensor is
// B x 3S as addmm wrote it.
#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>
#include <cuda.h>
#include <cuda_runtime.h>

#include <vector>

namespace {

template <typename T> __device__ __forceinline__ T sigm(T z) { return T(1) / (T(1) + exp(-z)); }
template <typename T> __device__ __forceinline__ T elu1(T z) { return z > T(0) ? z : exp(z) - T(1); }
template <typename T> __device__ __forceinline__ T d_elu1(T z) { return z > T(0) ? T(1) : exp(z); }

template <typename T>
__global__ void fwd_kernel(const T *__restrict__ gates, const T *__restrict__ old_cell,
                           T *__restrict__ new_h, T *__restrict__ new_cell,
                           T *__restrict__ input_gate, T *__restrict__ output_gate,
                           T *__restrict__ candidate_cell, int B, int S)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int b = blockIdx.y;
    if (j >= S)
        return;
    size_t o = (size_t)b * S + j;
    const T *g = gates + (size_t)b * 3 * S;
    T ig = sigm(g[j]);
    T og = sigm(g[S + j]);
    T cc = elu1(g[2 * S + j]);
    T c = old_cell[o] + cc * ig;
    new_cell[o] = c;
    new_h[o] = tanh(c) * og;
    input_gate[o] = ig;
    output_gate[o] = og;
    candidate_cell[o] = cc;
}

template <typename T>
__global__ void bwd_kernel(const T *__restrict__ grad_h, const T *__restrict__ grad_cell,
                           const T *__restrict__ new_cell, const T *__restrict__ input_gate,
                           const T *__restrict__ output_gate, const T *__restrict__ candidate_cell,
                           const T *__restrict__ gates, T *__restrict__ d_old_cell,
                           T *__restrict__ d_gates, int B, int S)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int b = blockIdx.y;
    if (j >= S)
        return;
    size_t o = (size_t)b * S + j;
    const T *g = gates + (size_t)b * 3 * S;
    T *dg = d_gates + (size_t)b * 3 * S;
    T t = tanh(new_cell[o]);
    T ig = input_gate[o], og = output_gate[o], cc = candidate_cell[o];
    T d_nc = (T(1) - t * t) * og * grad_h[o] + grad_cell[o];
    d_old_cell[o] = d_nc;
    dg[j] = cc * d_nc * ig * (T(1) - ig);
    dg[S + j] = t * grad_h[o] * og * (T(1) - og);
    dg[2 * S + j] = ig * d_nc * d_elu1(g[2 * S + j]);
}

} // namespace

std::vector<torch::Tensor> lltm_ext_forward_cuda(torch::Tensor input, torch::Tensor weights,
                                                 torch::Tensor bias, torch::Tensor old_h,
                                                 torch::Tensor old_cell)
{
    auto X = torch::cat({old_h, input}, /*dim=*/1);
    auto gates = torch::addmm(bias, X, weights.transpose(0, 1));
    const int B = old_cell.size(0), S = old_cell.size(1);
    auto new_h = torch::empty_like(old_cell);
    auto new_cell = torch::empty_like(old_cell);
    auto input_gate = torch::empty_like(old_cell);
    auto output_gate = torch::empty_like(old_cell);
    auto candidate_cell = torch::empty_like(old_cell);
    const int threads = 256;
    const dim3 blocks((S + threads - 1) / threads, B);
    auto stream = at::cuda::getCurrentCUDAStream();
    AT_DISPATCH_FLOATING_TYPES(gates.scalar_type(), "lltm_ext_forward", ([&] {
        fwd_kernel<scalar_t><<<blocks, threads, 0, stream>>>(
            gates.data_ptr<scalar_t>(), old_cell.data_ptr<scalar_t>(),
            new_h.data_ptr<scalar_t>(), new_cell.data_ptr<scalar_t>(),
            input_gate.data_ptr<scalar_t>(), output_gate.data_ptr<scalar_t>(),
            candidate_cell.data_ptr<scalar_t>(), B, S);
    }));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return {new_h, new_cell, input_gate, output_gate, candidate_cell, X, gates};
}

std::vector<torch::Tensor> lltm_ext_backward_cuda(torch::Tensor grad_h, torch::Tensor grad_cell,
                                                  torch::Tensor new_cell,
                                                  torch::Tensor input_gate,
                                                  torch::Tensor output_gate,
                                                  torch::Tensor candidate_cell, torch::Tensor X,
                                                  torch::Tensor gates, torch::Tensor weights)
{
    auto d_old_cell = torch::empty_like(new_cell);
    auto d_gates = torch::empty_like(gates);
    const int B = new_cell.size(0), S = new_cell.size(1);
    const int threads = 256;
    const dim3 blocks((S + threads - 1) / threads, B);
    auto stream = at::cuda::getCurrentCUDAStream();
    AT_DISPATCH_FLOATING_TYPES(X.scalar_type(), "lltm_ext_backward", ([&] {
        bwd_kernel<scalar_t><<<blocks, threads, 0, stream>>>(
            grad_h.data_ptr<scalar_t>(), grad_cell.data_ptr<scalar_t>(),
            new_cell.data_ptr<scalar_t>(), input_gate.data_ptr<scalar_t>(),
            output_gate.data_ptr<scalar_t>(), candidate_cell.data_ptr<scalar_t>(),
            gates.data_ptr<scalar_t>(), d_old_cell.data_ptr<scalar_t>(),
            d_gates.data_ptr<scalar_t>(), B, S);
    }));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    auto d_weights = d_gates.t().mm(X);
    auto d_bias = d_gates.sum(/*dim=*/0, /*keepdim=*/false);
    auto d_X = d_gates.mm(weights);
    auto d_old_h = d_X.slice(/*dim=*/1, 0, S);
    auto d_input = d_X.slice(/*dim=*/1, S);
    return {d_old_h, d_input, d_weights, d_bias, d_old_cell};
}
