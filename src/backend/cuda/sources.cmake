# The CUDA backend (docs/cuda.md): a module, libhandgrad_cuda.so, built beside the
# handgrad command when CMake finds a CUDA compiler, and loaded only when a program asks
# for the CUDA device or NCCL (backend/cuda_module.h). So the library and the command
# link no CUDA library, and a CPU run maps none, whatever the build found.
# Machine code for Hopper (sm_90a, which also allows wgmma/setmaxnreg) plus compute_90
# PTX that the driver can compile for later GPUs. Kernels are templates over the compute
# type (fp32, bf16) and, for attention, the head-size width; keep that product small,
# since every instantiation is compiled twice (SASS and PTX). A register spill or any
# use of local memory in a kernel is a ptxas warning, and so fails the build.
add_library(handgrad_cuda MODULE
  backend/cuda/module.c
  backend/cuda/cuda.cu
  backend/cuda/gemm.cu
  backend/cuda/matmul.cu
  backend/cuda/lora.cu
  backend/cuda/gelu.cu
  backend/cuda/activation.cu
  backend/cuda/rope.cu
  backend/cuda/layernorm.cu
  backend/cuda/encoder.cu
  backend/cuda/attention.cu
  backend/cuda/attention_rows.cu
  backend/cuda/attention_cached.cu
  backend/cuda/classifier.cu
  backend/cuda/adamw.cu
)
target_include_directories(handgrad_cuda PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src)
set_target_properties(handgrad_cuda PROPERTIES
  CUDA_ARCHITECTURES OFF
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}
  C_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden CUDA_VISIBILITY_PRESET hidden)
target_compile_options(handgrad_cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:
  -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_90,code=compute_90
  --Werror all-warnings -Xptxas=-warn-spills,-warn-lmem-usage -Xcompiler=-Wall,-Wextra,-Werror -lineinfo>)
target_link_libraries(handgrad_cuda PRIVATE CUDA::cudart CUDA::cublasLt)
# the library knows the backend exists, where the build tree put the module, and where an
# installed command finds it relative to its own folder (bin/../lib)
file(RELATIVE_PATH HG_BIN_TO_LIB ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_FULL_LIBDIR})
target_compile_definitions(handgrad PRIVATE HG_HAVE_CUDA
  HG_CUDA_MODULE_BUILD_PATH="$<TARGET_FILE:handgrad_cuda>" HG_CUDA_MODULE_BIN_TO_LIB="${HG_BIN_TO_LIB}")
# building anything that links the library builds the module too
add_dependencies(handgrad handgrad_cuda)
# cuDNN's fused attention (cudnn_attention.c): compiled where cuDNN's headers are found,
# never linked (the library is loaded at run time), so the module builds and runs without
# cuDNN and then uses its own attention kernels.
find_path(CUDNN_GRAPH_INCLUDE_DIR cudnn_graph.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
if(CUDNN_GRAPH_INCLUDE_DIR)
  target_sources(handgrad_cuda PRIVATE backend/cuda/cudnn_attention.c)
  target_compile_definitions(handgrad_cuda PRIVATE HG_HAVE_CUDNN)
  target_include_directories(handgrad_cuda PRIVATE ${CUDNN_GRAPH_INCLUDE_DIR})
  find_package(Threads REQUIRED)
  target_link_libraries(handgrad_cuda PRIVATE ${CMAKE_DL_LIBS} Threads::Threads m)
endif()
