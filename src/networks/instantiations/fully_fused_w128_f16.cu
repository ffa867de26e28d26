// FullyFusedMLP kernels for width 128, float16 (one instantiation per translation unit so that a
// change rebuilds in parallel and a single width can be rebuilt alone).
#if defined(TNN_WITH_CUDA)
#include "networks/fully_fused_mlp_kernels.cuh"

template struct tnn::ffm::Kernels<tnn::half, 128>;
#endif  // TNN_WITH_CUDA
