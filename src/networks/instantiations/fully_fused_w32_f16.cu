// FullyFusedMLP kernels for width 32, float16 (one instantiation per translation unit so that a
// change rebuilds in parallel and a single width can be rebuilt alone).
// The architecture picks the kernels at compile time: NVIDIA mma.sync or AMD gfx12 WMMA.
#if defined(TNN_WITH_CUDA)
#include "networks/fully_fused_mlp_kernels.cuh"
#elif defined(TNN_WITH_HIP)
#include "networks/fully_fused_mlp_gfx12.cuh"
#endif  // TNN_WITH_CUDA

#if defined(TNN_WITH_GPU)
template struct tnn::ffm::Kernels<tnn::half, 32>;
#endif  // TNN_WITH_GPU
