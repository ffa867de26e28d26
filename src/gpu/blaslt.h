// The vendor BLAS-Lt library (cuBLASLt on CUDA, hipBLASLt on HIP) under our gpu_blaslt_* names, for
// BlasLtMLP. Only the names BlasLtMLP uses are mapped. TNN_HAS_BLASLT is 1 where the build links a
// BLAS-Lt library; elsewhere this header declares nothing and BlasLtMLP refuses to run.
#pragma once

#include "gpu/gpu.h"

#include <cstddef>
#include <cstdint>

// CUDA builds always link cuBLASLt (CMakeLists.txt). HIP builds have hipBLASLt where CMake found
// ROCm's package and defined TNN_WITH_HIPBLASLT (cmake/hip.cmake; Debian has none): then its header
// must be there, and a missing one is a build error, not a build without BlasLtMLP on the GPU.
#if defined(TNN_WITH_CUDA)
#include <cublasLt.h>
#define TNN_HAS_BLASLT 1
#elif defined(TNN_WITH_HIP) && defined(TNN_WITH_HIPBLASLT)
#include <hipblaslt/hipblaslt.h>
#define TNN_HAS_BLASLT 1
#else
#define TNN_HAS_BLASLT 0
#endif  // TNN_WITH_CUDA

#if TNN_HAS_BLASLT

// ---- Vendor mapping. Types are aliases, constants constexpr, functions macros. Keep both lists in
// the same order. hipBLASLt (ROCm 6.3+: hipblas-common's hipblasStatus_t / hipblasComputeType_t, HIP's
// hipDataType) mirrors cuBLASLt's calls one for one; where it differs, the constexpr flags at the end
// of each list say so and docs/amd.md names each difference.
#if defined(TNN_WITH_CUDA)
using gpu_blaslt_handle_t = cublasLtHandle_t;
using gpu_blaslt_status_t = cublasStatus_t;
using gpu_blaslt_matmul_desc_t = cublasLtMatmulDesc_t;
using gpu_blaslt_matrix_layout_t = cublasLtMatrixLayout_t;
using gpu_blaslt_preference_t = cublasLtMatmulPreference_t;
using gpu_blaslt_algo_t = cublasLtMatmulAlgo_t;
using gpu_blaslt_heuristic_result_t = cublasLtMatmulHeuristicResult_t;
using gpu_blaslt_data_type_t = cudaDataType_t;
using gpu_blaslt_compute_type_t = cublasComputeType_t;
using gpu_blaslt_operation_t = cublasOperation_t;
using gpu_blaslt_epilogue_t = cublasLtEpilogue_t;
constexpr gpu_blaslt_status_t gpu_blaslt_success = CUBLAS_STATUS_SUCCESS;
constexpr gpu_blaslt_data_type_t gpu_blaslt_r_32f = CUDA_R_32F;
constexpr gpu_blaslt_data_type_t gpu_blaslt_r_16f = CUDA_R_16F;
constexpr gpu_blaslt_data_type_t gpu_blaslt_r_16bf = CUDA_R_16BF;
constexpr gpu_blaslt_compute_type_t gpu_blaslt_compute_32f = CUBLAS_COMPUTE_32F;
constexpr gpu_blaslt_compute_type_t gpu_blaslt_compute_32f_fast_tf32 = CUBLAS_COMPUTE_32F_FAST_TF32;
constexpr gpu_blaslt_operation_t gpu_blaslt_op_n = CUBLAS_OP_N;
constexpr gpu_blaslt_operation_t gpu_blaslt_op_t = CUBLAS_OP_T;
constexpr gpu_blaslt_epilogue_t gpu_blaslt_epilogue_default = CUBLASLT_EPILOGUE_DEFAULT;
constexpr gpu_blaslt_epilogue_t gpu_blaslt_epilogue_bias = CUBLASLT_EPILOGUE_BIAS;
constexpr gpu_blaslt_epilogue_t gpu_blaslt_epilogue_relu_aux = CUBLASLT_EPILOGUE_RELU_AUX;
constexpr gpu_blaslt_epilogue_t gpu_blaslt_epilogue_relu_aux_bias = CUBLASLT_EPILOGUE_RELU_AUX_BIAS;
constexpr gpu_blaslt_epilogue_t gpu_blaslt_epilogue_drelu = CUBLASLT_EPILOGUE_DRELU;
constexpr auto gpu_blaslt_desc_transa = CUBLASLT_MATMUL_DESC_TRANSA;
constexpr auto gpu_blaslt_desc_transb = CUBLASLT_MATMUL_DESC_TRANSB;
constexpr auto gpu_blaslt_desc_epilogue = CUBLASLT_MATMUL_DESC_EPILOGUE;
constexpr auto gpu_blaslt_desc_bias_pointer = CUBLASLT_MATMUL_DESC_BIAS_POINTER;
constexpr auto gpu_blaslt_desc_bias_data_type = CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE;
constexpr auto gpu_blaslt_desc_aux_pointer = CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER;
constexpr auto gpu_blaslt_desc_aux_ld = CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD;
constexpr auto gpu_blaslt_layout_batch_count = CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT;
constexpr auto gpu_blaslt_layout_strided_batch_offset = CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET;
constexpr auto gpu_blaslt_pref_max_workspace_bytes = CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES;
constexpr auto gpu_blaslt_pref_reduction_scheme_mask = CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK;
constexpr auto gpu_blaslt_pref_min_alignment_a = CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES;
constexpr auto gpu_blaslt_pref_min_alignment_b = CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES;
constexpr auto gpu_blaslt_pref_min_alignment_c = CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES;
constexpr auto gpu_blaslt_pref_min_alignment_d = CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES;
constexpr uint32_t gpu_blaslt_reduction_scheme_none = CUBLASLT_REDUCTION_SCHEME_NONE;
#define gpu_blaslt_create cublasLtCreate
#define gpu_blaslt_matmul_desc_create cublasLtMatmulDescCreate
#define gpu_blaslt_matmul_desc_destroy cublasLtMatmulDescDestroy
#define gpu_blaslt_matmul_desc_set_attribute cublasLtMatmulDescSetAttribute
#define gpu_blaslt_matrix_layout_create cublasLtMatrixLayoutCreate
#define gpu_blaslt_matrix_layout_destroy cublasLtMatrixLayoutDestroy
#define gpu_blaslt_matrix_layout_set_attribute cublasLtMatrixLayoutSetAttribute
#define gpu_blaslt_preference_create cublasLtMatmulPreferenceCreate
#define gpu_blaslt_preference_destroy cublasLtMatmulPreferenceDestroy
#define gpu_blaslt_preference_set_attribute cublasLtMatmulPreferenceSetAttribute
#define gpu_blaslt_algo_get_heuristic cublasLtMatmulAlgoGetHeuristic
#define gpu_blaslt_matmul cublasLtMatmul
#define gpu_blaslt_status_name cublasLtGetStatusName
// cuBLASLt's heuristic takes a reduction-scheme mask (we forbid split-K) and the operands' alignments.
constexpr bool gpu_blaslt_has_selection_preferences = true;
// RELU_AUX stores a bit mask of the ReLU conditions (leading dimension in bits, a multiple of 128),
// which DRELU reads back.
constexpr bool gpu_blaslt_has_relu_mask = true;
// cuBLASLt documents an unset bias type as D's type (ours: the bias is fused only where D has the
// network dtype), so the attribute is left unset.
constexpr bool gpu_blaslt_sets_bias_data_type = false;
#else
using gpu_blaslt_handle_t = hipblasLtHandle_t;
using gpu_blaslt_status_t = hipblasStatus_t;
using gpu_blaslt_matmul_desc_t = hipblasLtMatmulDesc_t;
using gpu_blaslt_matrix_layout_t = hipblasLtMatrixLayout_t;
using gpu_blaslt_preference_t = hipblasLtMatmulPreference_t;
using gpu_blaslt_algo_t = hipblasLtMatmulAlgo_t;
using gpu_blaslt_heuristic_result_t = hipblasLtMatmulHeuristicResult_t;
using gpu_blaslt_data_type_t = hipDataType;
using gpu_blaslt_compute_type_t = hipblasComputeType_t;
using gpu_blaslt_operation_t = hipblasOperation_t;
using gpu_blaslt_epilogue_t = hipblasLtEpilogue_t;
constexpr gpu_blaslt_status_t gpu_blaslt_success = HIPBLAS_STATUS_SUCCESS;
constexpr gpu_blaslt_data_type_t gpu_blaslt_r_32f = HIP_R_32F;
constexpr gpu_blaslt_data_type_t gpu_blaslt_r_16f = HIP_R_16F;
constexpr gpu_blaslt_data_type_t gpu_blaslt_r_16bf = HIP_R_16BF;
constexpr gpu_blaslt_compute_type_t gpu_blaslt_compute_32f = HIPBLAS_COMPUTE_32F;
// RDNA has no TF32: "tf32" computes in plain fp32 there.
constexpr gpu_blaslt_compute_type_t gpu_blaslt_compute_32f_fast_tf32 = HIPBLAS_COMPUTE_32F;
constexpr gpu_blaslt_operation_t gpu_blaslt_op_n = HIPBLAS_OP_N;
constexpr gpu_blaslt_operation_t gpu_blaslt_op_t = HIPBLAS_OP_T;
constexpr gpu_blaslt_epilogue_t gpu_blaslt_epilogue_default = HIPBLASLT_EPILOGUE_DEFAULT;
constexpr gpu_blaslt_epilogue_t gpu_blaslt_epilogue_bias = HIPBLASLT_EPILOGUE_BIAS;
// hipBLASLt has no RELU_AUX / RELU_AUX_BIAS / DRELU epilogues (its AUX epilogues are GELU's, which
// store the pre-activation): the HIP build keeps ReLU in our own kernels (gpu_blaslt_has_relu_mask =
// false), and these never reach the library.
constexpr gpu_blaslt_epilogue_t gpu_blaslt_epilogue_relu_aux = HIPBLASLT_EPILOGUE_DEFAULT;
constexpr gpu_blaslt_epilogue_t gpu_blaslt_epilogue_relu_aux_bias = HIPBLASLT_EPILOGUE_DEFAULT;
constexpr gpu_blaslt_epilogue_t gpu_blaslt_epilogue_drelu = HIPBLASLT_EPILOGUE_DEFAULT;
constexpr auto gpu_blaslt_desc_transa = HIPBLASLT_MATMUL_DESC_TRANSA;
constexpr auto gpu_blaslt_desc_transb = HIPBLASLT_MATMUL_DESC_TRANSB;
constexpr auto gpu_blaslt_desc_epilogue = HIPBLASLT_MATMUL_DESC_EPILOGUE;
constexpr auto gpu_blaslt_desc_bias_pointer = HIPBLASLT_MATMUL_DESC_BIAS_POINTER;
constexpr auto gpu_blaslt_desc_bias_data_type = HIPBLASLT_MATMUL_DESC_BIAS_DATA_TYPE;
constexpr auto gpu_blaslt_desc_aux_pointer = HIPBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER;
constexpr auto gpu_blaslt_desc_aux_ld = HIPBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD;
constexpr auto gpu_blaslt_layout_batch_count = HIPBLASLT_MATRIX_LAYOUT_BATCH_COUNT;
constexpr auto gpu_blaslt_layout_strided_batch_offset = HIPBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET;
constexpr auto gpu_blaslt_pref_max_workspace_bytes = HIPBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES;
// hipBLASLt's preferences are the workspace size and a search mode only: no reduction-scheme or
// alignment preferences (gpu_blaslt_has_selection_preferences = false); never passed there.
constexpr auto gpu_blaslt_pref_reduction_scheme_mask = HIPBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES;
constexpr auto gpu_blaslt_pref_min_alignment_a = HIPBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES;
constexpr auto gpu_blaslt_pref_min_alignment_b = HIPBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES;
constexpr auto gpu_blaslt_pref_min_alignment_c = HIPBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES;
constexpr auto gpu_blaslt_pref_min_alignment_d = HIPBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES;
constexpr uint32_t gpu_blaslt_reduction_scheme_none = 0;
#define gpu_blaslt_create hipblasLtCreate
#define gpu_blaslt_matmul_desc_create hipblasLtMatmulDescCreate
#define gpu_blaslt_matmul_desc_destroy hipblasLtMatmulDescDestroy
#define gpu_blaslt_matmul_desc_set_attribute hipblasLtMatmulDescSetAttribute
#define gpu_blaslt_matrix_layout_create hipblasLtMatrixLayoutCreate
#define gpu_blaslt_matrix_layout_destroy hipblasLtMatrixLayoutDestroy
#define gpu_blaslt_matrix_layout_set_attribute hipblasLtMatrixLayoutSetAttribute
#define gpu_blaslt_preference_create hipblasLtMatmulPreferenceCreate
#define gpu_blaslt_preference_destroy hipblasLtMatmulPreferenceDestroy
#define gpu_blaslt_preference_set_attribute hipblasLtMatmulPreferenceSetAttribute
#define gpu_blaslt_algo_get_heuristic hipblasLtMatmulAlgoGetHeuristic
#define gpu_blaslt_matmul hipblasLtMatmul
// hipBLASLt has no status-to-string function of its own (hipBLAS's lives in another library).
inline const char* gpu_blaslt_status_name(gpu_blaslt_status_t) { return "hipblasStatus_t"; }
constexpr bool gpu_blaslt_has_selection_preferences = false;
constexpr bool gpu_blaslt_has_relu_mask = false;
// hipBLASLt's header names no default for an unset bias type (its descriptor starts with an invalid
// type): the bias's type is set on every bias epilogue.
constexpr bool gpu_blaslt_sets_bias_data_type = true;
#endif  // TNN_WITH_CUDA

namespace tnn::gpu {

// Every BLAS-Lt call goes through TNN_BLASLT_CHECK: a failure throws DeviceError naming the call,
// the file, the line and the library's status.
[[noreturn]] inline void throw_blaslt_error(gpu_blaslt_status_t status, const char* what, const char* file, int line) {
    throw DeviceError(msg(what, " failed at ", file, ":", line, ": ", gpu_blaslt_status_name(status), " (status ",
                          static_cast<int>(status), ")"));
}

#define TNN_BLASLT_CHECK(expr)                                                                           \
    do {                                                                                                 \
        const gpu_blaslt_status_t tnn_blaslt_status_ = (expr);                                           \
        if (tnn_blaslt_status_ != gpu_blaslt_success)                                                   \
            ::tnn::gpu::throw_blaslt_error(tnn_blaslt_status_, #expr, __FILE__, __LINE__);               \
    } while (0)

}  // namespace tnn::gpu

#endif  // TNN_HAS_BLASLT
