// A minimal torch extension: scale a CUDA float tensor by 2 in a kernel (abi_probe_kernel.cu).
// Built by make_probe_wheel.py against another torch's headers and C++ ABI, it is the
// "undefined symbol after a torch bump" case that `envbuilder certify` must catch.
#include <torch/extension.h>

void launch_double(const float* in, float* out, int64_t n);

torch::Tensor double_it(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat, "expects a CUDA float tensor");
  auto y = torch::empty_like(x);
  launch_double(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
  return y;
}

PYBIND11_MODULE(_C, m) { m.def("double_it", &double_it, "y = 2 * x on the GPU"); }
