// The torch cpp_extension equivalent of saxpy.cu: the same kernel (included,
// not copied) behind a pybind11 binding. The edit-to-live benchmark rewrites
// the SAXPY_BIAS line below, in this file, because torch.utils.cpp_extension
// decides whether to rebuild from the content of the listed sources. It
// lives apart from bench/kernels/ so that `jitop build bench/kernels` only
// sees NVRTC sources; saxpy.cu is found through extra_include_paths.
#define SAXPY_BIAS 0.0f
#include "saxpy.cu"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <torch/extension.h>

// y = a * x + y + SAXPY_BIAS on the current stream, in place. Not static:
// the load_inline variant declares it in its C++ source and binds it there.
void saxpy_launch(torch::Tensor x, torch::Tensor y, double a)
{
    TORCH_CHECK(x.is_cuda() && y.is_cuda(), "saxpy: tensors must be on the GPU");
    TORCH_CHECK(x.scalar_type() == torch::kFloat && y.scalar_type() == torch::kFloat,
                "saxpy: tensors must be float32");
    TORCH_CHECK(x.numel() == y.numel(), "saxpy: x and y differ in size");
    const int n = static_cast<int>(x.numel());
    const int block = 256;
    const int grid = (n + block - 1) / block;
    saxpy<<<grid, block, 0, at::cuda::getCurrentCUDAStream()>>>(
        n, static_cast<float>(a), x.data_ptr<float>(), y.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// load_inline generates its own binding (functions=["saxpy_launch"]).
#ifndef SAXPY_NO_MODULE
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)
{
    m.def("saxpy_launch", &saxpy_launch, "y = a * x + y + SAXPY_BIAS (in place)");
}
#endif
