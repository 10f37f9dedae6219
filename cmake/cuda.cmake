# CUDA backend (src/backend/cuda): CUDA C kernels + cuBLAS + cuDNN.
# Architectures: 90 (Hopper: H100/H200, the benchmark target), 80 (A100),
# 89 (Ada: L4/L40/RTX 40xx), 120 (Blackwell consumer). Override with
# -DCMAKE_CUDA_ARCHITECTURES=...
if(NOT CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 80 89 90)
endif()
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
find_library(CUDNN_LIB cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/lib/x86_64-linux-gnu)
find_path(CUDNN_INCLUDE cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/include)
if(NOT CUDNN_LIB OR NOT CUDNN_INCLUDE)
  message(FATAL_ERROR "DITTO_CUDA: cuDNN not found (libcudnn + cudnn.h)")
endif()
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
file(GLOB DITTO_CUDA_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/backend/cuda/*.cu)
target_sources(ditto_lib PRIVATE ${DITTO_CUDA_SOURCES})
set_target_properties(ditto_lib PROPERTIES CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}")
target_compile_definitions(ditto_lib PUBLIC DITTO_HAVE_CUDA)
target_include_directories(ditto_lib PRIVATE ${CUDNN_INCLUDE})
target_link_libraries(ditto_lib PUBLIC CUDA::cudart CUDA::cublas CUDA::cublasLt ${CUDNN_LIB})
set_source_files_properties(${DITTO_CUDA_SOURCES} PROPERTIES COMPILE_OPTIONS "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-fvisibility=hidden;--expt-relaxed-constexpr>")
