// Portability macros shared by host and device code; no third-party includes so nvcc can compile it.
#pragma once

#if defined(__CUDACC__)
#define OPSNN_HD __host__ __device__ __forceinline__
#else
#define OPSNN_HD inline
#endif
