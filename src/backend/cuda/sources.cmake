# The CUDA backend (docs/cuda.md), added to libhandgrad when CMake finds a CUDA compiler.
# Machine code for Hopper (sm_90a, which also allows wgmma/setmaxnreg) plus compute_90
# PTX that the driver can compile for later GPUs. Kernels are templates over the compute
# type (fp32, bf16) and, for attention, the head-size width; keep that product small,
# since every instantiation is compiled twice (SASS and PTX).
target_sources(handgrad PRIVATE
  backend/cuda/cuda.cu
  backend/cuda/gemm.cu
  backend/cuda/matmul.cu
  backend/cuda/gelu.cu
  backend/cuda/activation.cu
  backend/cuda/rope.cu
  backend/cuda/layernorm.cu
  backend/cuda/encoder.cu
  backend/cuda/attention.cu
  backend/cuda/attention_fp32.cu
  backend/cuda/attention_cached.cu
  backend/cuda/classifier.cu
  backend/cuda/adamw.cu
)
set_target_properties(handgrad PROPERTIES CUDA_ARCHITECTURES OFF)
target_compile_options(handgrad PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:
  -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_90,code=compute_90
  --Werror all-warnings -Xcompiler=-Wall,-Wextra,-Werror -lineinfo>)
target_compile_definitions(handgrad PUBLIC HG_HAVE_CUDA)
target_link_libraries(handgrad PUBLIC CUDA::cudart CUDA::cublasLt)
