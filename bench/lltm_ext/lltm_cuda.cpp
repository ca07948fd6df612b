// The LLTM cell as the PyTorch C++/CUDA extension tutorial builds it, written
// here from the math of issue 5 to be the peer jitop is measured against:
// forward = cat + addmm + one fused elementwise kernel, backward = one fused
// elementwise kernel + two mm's. Built with torch.utils.cpp_extension.load.
#include <torch/extension.h>

#include <vector>

std::vector<torch::Tensor> lltm_ext_forward_cuda(torch::Tensor input, torch::Tensor weights,
                                                 torch::Tensor bias, torch::Tensor old_h,
                                                 torch::Tensor old_cell);
std::vector<torch::Tensor> lltm_ext_backward_cuda(torch::Tensor grad_h, torch::Tensor grad_cell,
                                                  torch::Tensor new_cell,
                                                  torch::Tensor input_gate,
                                                  torch::Tensor output_gate,
                                                  torch::Tensor candidate_cell, torch::Tensor X,
                                                  torch::Tensor gates, torch::Tensor weights);

static void check(const torch::Tensor &t, const char *name)
{
    TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
    TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
}

std::vector<torch::Tensor> lltm_forward(torch::Tensor input, torch::Tensor weights,
                                        torch::Tensor bias, torch::Tensor old_h,
                                        torch::Tensor old_cell)
{
    check(input, "input");
    check(weights, "weights");
    check(bias, "bias");
    check(old_h, "old_h");
    check(old_cell, "old_cell");
    return lltm_ext_forward_cuda(input, weights, bias, old_h, old_cell);
}

std::vector<torch::Tensor> lltm_backward(torch::Tensor grad_h, torch::Tensor grad_cell,
                                         torch::Tensor new_cell, torch::Tensor input_gate,
                                         torch::Tensor output_gate, torch::Tensor candidate_cell,
                                         torch::Tensor X, torch::Tensor gates,
                                         torch::Tensor weights)
{
    check(grad_h, "grad_h");
    check(grad_cell, "grad_cell");
    return lltm_ext_backward_cuda(grad_h, grad_cell, new_cell, input_gate, output_gate,
                                  candidate_cell, X, gates, weights);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)
{
    m.def("forward", &lltm_forward, "LLTM forward (CUDA)");
    m.def("backward", &lltm_backward, "LLTM backward (CUDA)");
}
