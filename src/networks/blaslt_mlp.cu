// BlasLtMLP on the GPU: one vendor BLAS-Lt GEMM per layer and pass (gpu/blaslt.h: cuBLASLt or
// hipBLASLt) with bias and ReLU fused into the library's epilogue where it offers one, our own
// elementwise kernels for every other activation, and weight gradients summed over the batch in
// fixed slabs so that training is bitwise reproducible. Kernels first, then plans, then the passes.
//
// Row-major [rows, features] tensors are column-major [features, rows] matrices to the library, so
// every GEMM below is written in that view: a layer's forward is D[N, M] = W^T-view(A) x act[K, M].
#include "networks/blaslt_mlp.h"

#include "gpu/blaslt.h"
#include "gpu/gpu.h"
#include "networks/activation.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>

namespace tnn::blaslt_mlp {

bool gpu_library_available() { return TNN_HAS_BLASLT != 0; }

#if TNN_HAS_BLASLT

namespace {

using gpu::ceil_div;
using gpu::elementwise_grid;
using gpu::kElementwiseThreads;
using gpu::round_up;

// ---- Kernels. Element types are device storage types (float, gpu_half, gpu_bf16); arithmetic is
// fp32 (gpu::to_acc / from_acc round to nearest even), the activation is a runtime argument (the
// kernels are memory bound; a uniform switch costs nothing).

// out[r, c] = round_D(in[r, c]) for c < n_in, round_D(pad) for n_in <= c < n_padded: tcnn's padded
// input lanes, written straight into the first layer's operand (no host-side copy).
template <typename S, typename D>
__global__ void blaslt_mlp_pad_input_kernel(const S* __restrict__ in, int64_t ld_in, int64_t n_in, int64_t rows,
                                            int64_t n_padded, float pad, D* __restrict__ out) {
    const int64_t n = rows * n_padded;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t r = i / n_padded, c = i % n_padded;
        out[i] = gpu::from_acc<D>(c < n_in ? gpu::to_acc(in[r * ld_in + c]) : pad);
    }
}

// The unfused forward epilogue: z += bias (kept in place when keep_z, for the backward pass), then
// out = round_D(act(z)). z is the fp32 GEMM result [rows, cols] with leading dimension ld_z.
template <typename B, typename D>
__global__ void blaslt_mlp_bias_act_kernel(float* __restrict__ z, int64_t ld_z, const B* __restrict__ bias,
                                           Activation act, bool keep_z, int64_t rows, int64_t cols,
                                           D* __restrict__ out, int64_t ld_out) {
    const int64_t n = rows * cols;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t r = i / cols, c = i % cols;
        float v = z[r * ld_z + c];
        if (bias) v += gpu::to_acc(bias[c]);
        if (keep_z) z[r * ld_z + c] = v;
        out[r * ld_out + c] = gpu::from_acc<D>(activation_forward(act, v));
    }
}

// out[r, c] = round_D(g[r, c] * act'(saved[r, c])) (just round_D(g) for None). `saved` is the fp32
// pre-activation, or for ReLU / LeakyReLU the stored activation (z > 0 exactly when act(z) > 0).
template <typename G, typename S, typename D>
__global__ void blaslt_mlp_act_grad_kernel(const G* __restrict__ g, int64_t ld_g, const S* __restrict__ saved,
                                           int64_t ld_saved, Activation act, int64_t rows, int64_t cols,
                                           D* __restrict__ out, int64_t ld_out) {
    const int64_t n = rows * cols;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t r = i / cols, c = i % cols;
        float v = gpu::to_acc(g[r * ld_g + c]);
        if (act != Activation::None) v *= activation_derivative(act, gpu::to_acc(saved[r * ld_saved + c]));
        out[r * ld_out + c] = gpu::from_acc<D>(v);
    }
}

// partials[slab, c] = sum over the rows r of slab blockIdx.y of g[r, c], r ascending (bias gradients).
// Grid: (column blocks, slabs).
template <typename G>
__global__ void blaslt_mlp_column_sum_kernel(const G* __restrict__ g, int64_t ld_g, int64_t rows, int64_t cols,
                                             int64_t slab_rows, float* __restrict__ partials) {
    const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, slab = blockIdx.y;
    if (c >= cols) return;
    const int64_t r_end = (slab + 1) * slab_rows < rows ? (slab + 1) * slab_rows : rows;
    float sum = 0.0f;
    for (int64_t r = slab * slab_rows; r < r_end; ++r) sum += gpu::to_acc(g[r * ld_g + c]);
    partials[slab * cols + c] = sum;
}

// out[i] = round_T(sum over slabs s = 0, 1, ... of partials[s * n + i]), added to the old value in
// fp32 first when accumulating: the order depends only on the number of slabs.
template <typename T>
__global__ void blaslt_mlp_reduce_slabs_kernel(const float* __restrict__ partials, int64_t n, int64_t slabs,
                                               T* __restrict__ out, bool accumulate) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        float sum = 0.0f;
        for (int64_t s = 0; s < slabs; ++s) sum += partials[s * n + i];
        if (accumulate) sum = gpu::to_acc(out[i]) + sum;
        out[i] = gpu::from_acc<T>(sum);
    }
}

// Second order (the maths in portable_mlp.cpp). The output layer's d and e, rows [0, rows) and
// [rows, 2 rows) of out: d = round_D(u act'(z)), e = round_D(u act''(z) zdot). z (fp32) is unused for
// None; zdot is the fp32 tangent of z.
template <typename G, typename D>
__global__ void blaslt_mlp_second_output_kernel(const G* __restrict__ u, int64_t ld_u, const float* __restrict__ z,
                                                const float* __restrict__ zdot, int64_t ld_z, Activation act,
                                                int64_t rows, int64_t cols, D* __restrict__ out, int64_t ld_out) {
    const int64_t n = rows * cols;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t r = i / cols, c = i % cols;
        const float g = gpu::to_acc(u[r * ld_u + c]);
        float d = g, e = 0.0f;
        if (act != Activation::None) {
            const float zz = z[r * ld_z + c];
            d = g * activation_derivative(act, zz);
            e = g * activation_second_derivative(act, zz) * zdot[r * ld_z + c];
        }
        out[r * ld_out + c] = gpu::from_acc<D>(d);
        out[(rows + r) * ld_out + c] = gpu::from_acc<D>(e);
    }
}

// A hidden layer's d and e from prod = [W^T d; W^T e] (fp32, [2 rows, cols]): d = round_D(g act'),
// e = round_D(h act' + g act'' zdot) into rows [0, rows) and [rows, 2 rows) of out. act' reads `saved`
// as blaslt_mlp_act_grad_kernel does; act'' (0 for None / ReLU / LeakyReLU) the fp32 pre-activation.
template <typename S, typename D>
__global__ void blaslt_mlp_second_combine_kernel(const float* __restrict__ prod, int64_t ld_prod,
                                                 const S* __restrict__ saved, int64_t ld_saved,
                                                 const float* __restrict__ pre, const float* __restrict__ zdot,
                                                 int64_t ld_pre, Activation act, int64_t rows, int64_t cols,
                                                 D* __restrict__ out, int64_t ld_out) {
    const int64_t n = rows * cols;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t r = i / cols, c = i % cols;
        const float g = prod[r * ld_prod + c], h = prod[(rows + r) * ld_prod + c];
        float d1 = 1.0f;
        if (act != Activation::None) d1 = activation_derivative(act, gpu::to_acc(saved[r * ld_saved + c]));
        float e = h * d1;
        if (!derivative_from_output(act))
            e += g * activation_second_derivative(act, pre[r * ld_pre + c]) * zdot[r * ld_pre + c];
        out[r * ld_out + c] = gpu::from_acc<D>(g * d1);
        out[(rows + r) * ld_out + c] = gpu::from_acc<D>(e);
    }
}

// ---- Types.

// Calls f(X{}) with X the device storage type of an MLP dtype.
template <typename F> void dispatch_storage(DType t, F&& f) {
    switch (t) {
        case DType::f32: f(float{}); return;
        case DType::f16: f(gpu_half{}); return;
        case DType::bf16: f(gpu_bf16{}); return;
        case DType::f64: break;
    }
    throw DTypeError(msg("BlasLtMLP: no GPU storage type for ", dtype_name(t), "; valid choices: float32, float16, "
                         "bfloat16"));
}

gpu_blaslt_data_type_t library_type(DType t) {
    switch (t) {
        case DType::f32: return gpu_blaslt_r_32f;
        case DType::f16: return gpu_blaslt_r_16f;
        case DType::bf16: return gpu_blaslt_r_16bf;
        case DType::f64: break;
    }
    throw DTypeError(msg("BlasLtMLP: ", dtype_name(t), " is not a BLAS-Lt operand type here; valid choices: float32, "
                         "float16, bfloat16"));
}

// Largest power of two (at most 256) dividing the address: what the library may assume of a pointer.
int64_t alignment_of(const void* p) {
    const auto a = reinterpret_cast<uintptr_t>(p);
    int64_t al = 1;
    while (al < 256 && a % static_cast<uintptr_t>(al * 2) == 0) al *= 2;
    return al;
}

// Some library kernels read the bias vector with 16-byte loads whatever its alignment (the alignment
// preferences cover A, B, C and D only): a less aligned bias is added by our own kernel instead.
constexpr int64_t kMinBiasAlignment = 16;
// Leading dimension of our own activation buffers: 8 elements keep every row 16-byte aligned, which
// the tensor-core kernels want.
constexpr int64_t kLdMultiple = 8;
// Workspace the heuristic may ask for; split-K is off on cuBLASLt (a preference hipBLASLt does not
// have: docs/amd.md), so the chosen kernels rarely need any.
constexpr uint64_t kMaxWorkspaceBytes = 8u << 20;
// Plans of one module before the cache starts over (a workload with ever-new batch sizes).
constexpr size_t kMaxPlans = 1024;

// ---- GEMM plans. One GEMM in the library's column-major view: D[m, n] = op(A)[m, k] op(B)[k, n]
// (+ beta D), batched over `batch` equally strided problems, with an optional epilogue.
enum class Epilogue : int64_t { none, bias, relu_mask, relu_mask_bias, drelu };

bool epilogue_has_bias(Epilogue e) { return e == Epilogue::bias || e == Epilogue::relu_mask_bias; }
bool epilogue_has_mask(Epilogue e) {
    return e == Epilogue::relu_mask || e == Epilogue::relu_mask_bias || e == Epilogue::drelu;
}

gpu_blaslt_epilogue_t library_epilogue(Epilogue e) {
    switch (e) {
        case Epilogue::none: return gpu_blaslt_epilogue_default;
        case Epilogue::bias: return gpu_blaslt_epilogue_bias;
        case Epilogue::relu_mask: return gpu_blaslt_epilogue_relu_aux;
        case Epilogue::relu_mask_bias: return gpu_blaslt_epilogue_relu_aux_bias;
        case Epilogue::drelu: return gpu_blaslt_epilogue_drelu;
    }
    return gpu_blaslt_epilogue_default;
}

// Everything the library's choice depends on, pointer alignments included: the cache key. All
// int64_t, so that memcmp orders it.
struct GemmSpec {
    int64_t device = 0;
    int64_t m = 0, n = 0, k = 0, batch = 1;
    int64_t trans_a = 0, trans_b = 0;  // 1: the operand is stored transposed
    int64_t type_ab = 0, type_d = 0, compute = 0;
    int64_t lda = 0, ldb = 0, ldd = 0;
    int64_t stride_a = 0, stride_b = 0, stride_d = 0;  // elements between batched problems
    int64_t epilogue = 0, mask_ld = 0;
    int64_t align_a = 0, align_b = 0, align_d = 0, align_bias = 0, align_mask = 0;

    bool operator<(const GemmSpec& o) const { return std::memcmp(this, &o, sizeof(GemmSpec)) < 0; }
    std::string describe() const {
        return msg("GEMM m=", m, " n=", n, " k=", k, " batch=", batch, " trans_a=", trans_a, " trans_b=", trans_b,
                   " types=", type_ab, "/", type_d, " ld=", lda, "/", ldb, "/", ldd, " epilogue=", epilogue,
                   " alignments=", align_a, "/", align_b, "/", align_d);
    }
};
static_assert(sizeof(GemmSpec) == 23 * sizeof(int64_t), "GemmSpec must have no padding (it is compared bytewise)");

struct GemmPlan {
    // The library offered an algorithm (and, for an epilogue, accepted it when first enqueued).
    std::atomic<bool> ok{false};
    gpu_blaslt_matmul_desc_t desc = nullptr;
    gpu_blaslt_matrix_layout_t a = nullptr, b = nullptr, d = nullptr;
    gpu_blaslt_algo_t algo{};
    size_t workspace_bytes = 0;
    // The bias and mask pointers are attributes of the shared descriptor: set and enqueue under it.
    std::mutex mutex;

    GemmPlan() = default;
    GemmPlan(const GemmPlan&) = delete;
    GemmPlan& operator=(const GemmPlan&) = delete;
    ~GemmPlan() {
        if (a) (void)gpu_blaslt_matrix_layout_destroy(a);
        if (b) (void)gpu_blaslt_matrix_layout_destroy(b);
        if (d) (void)gpu_blaslt_matrix_layout_destroy(d);
        if (desc) (void)gpu_blaslt_matmul_desc_destroy(desc);
    }
};

template <typename V> void set_desc(gpu_blaslt_matmul_desc_t desc, decltype(gpu_blaslt_desc_transa) attr, const V& v) {
    TNN_BLASLT_CHECK(gpu_blaslt_matmul_desc_set_attribute(desc, attr, &v, sizeof(V)));
}

template <typename V> void set_pref(gpu_blaslt_preference_t pref, decltype(gpu_blaslt_pref_max_workspace_bytes) attr,
                                    const V& v) {
    TNN_BLASLT_CHECK(gpu_blaslt_preference_set_attribute(pref, attr, &v, sizeof(V)));
}

gpu_blaslt_matrix_layout_t make_layout(int64_t type, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                                       int64_t stride) {
    gpu_blaslt_matrix_layout_t layout = nullptr;
    TNN_BLASLT_CHECK(gpu_blaslt_matrix_layout_create(&layout, static_cast<gpu_blaslt_data_type_t>(type),
                                                     static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld));
    if (batch > 1) {
        const int32_t count = static_cast<int32_t>(batch);
        TNN_BLASLT_CHECK(gpu_blaslt_matrix_layout_set_attribute(layout, gpu_blaslt_layout_batch_count, &count,
                                                                sizeof(count)));
        TNN_BLASLT_CHECK(gpu_blaslt_matrix_layout_set_attribute(layout, gpu_blaslt_layout_strided_batch_offset,
                                                                &stride, sizeof(stride)));
    }
    return layout;
}

// Descriptors and the heuristic's best algorithm for one spec. `bias` / `mask` are this call's
// pointers: the heuristic reads their alignment from them. ok = false when nothing fits.
std::shared_ptr<GemmPlan> create_plan(gpu_blaslt_handle_t handle, const GemmSpec& s, const void* bias,
                                      const void* mask) {
    auto p = std::make_shared<GemmPlan>();
    const auto e = static_cast<Epilogue>(s.epilogue);
    TNN_BLASLT_CHECK(gpu_blaslt_matmul_desc_create(&p->desc, static_cast<gpu_blaslt_compute_type_t>(s.compute),
                                                   gpu_blaslt_r_32f));
    const gpu_blaslt_operation_t op_a = s.trans_a ? gpu_blaslt_op_t : gpu_blaslt_op_n;
    const gpu_blaslt_operation_t op_b = s.trans_b ? gpu_blaslt_op_t : gpu_blaslt_op_n;
    set_desc(p->desc, gpu_blaslt_desc_transa, op_a);
    set_desc(p->desc, gpu_blaslt_desc_transb, op_b);
    set_desc(p->desc, gpu_blaslt_desc_epilogue, library_epilogue(e));
    if (epilogue_has_bias(e)) {
        set_desc(p->desc, gpu_blaslt_desc_bias_pointer, bias);
        // The bias is stored in the network dtype, the type of A and B (and of D: fused only then).
        if constexpr (gpu_blaslt_sets_bias_data_type)
            set_desc(p->desc, gpu_blaslt_desc_bias_data_type, static_cast<gpu_blaslt_data_type_t>(s.type_ab));
    }
    if (epilogue_has_mask(e)) {
        set_desc(p->desc, gpu_blaslt_desc_aux_pointer, mask);
        set_desc(p->desc, gpu_blaslt_desc_aux_ld, s.mask_ld);
    }
    // Stored shapes: op(A) is m x k, op(B) is k x n, D is m x n.
    p->a = s.trans_a ? make_layout(s.type_ab, s.k, s.m, s.lda, s.batch, s.stride_a)
                     : make_layout(s.type_ab, s.m, s.k, s.lda, s.batch, s.stride_a);
    p->b = s.trans_b ? make_layout(s.type_ab, s.n, s.k, s.ldb, s.batch, s.stride_b)
                     : make_layout(s.type_ab, s.k, s.n, s.ldb, s.batch, s.stride_b);
    p->d = make_layout(s.type_d, s.m, s.n, s.ldd, s.batch, s.stride_d);

    gpu_blaslt_preference_t pref = nullptr;
    TNN_BLASLT_CHECK(gpu_blaslt_preference_create(&pref));
    gpu_blaslt_heuristic_result_t result{};
    int returned = 0;
    gpu_blaslt_status_t status = gpu_blaslt_success;
    try {
        set_pref(pref, gpu_blaslt_pref_max_workspace_bytes, kMaxWorkspaceBytes);
        if constexpr (gpu_blaslt_has_selection_preferences) {
            // No split-K: its reductions either round partial sums to the output type or add them in
            // an order that we do not control; our own slabs split long reductions instead.
            set_pref(pref, gpu_blaslt_pref_reduction_scheme_mask, gpu_blaslt_reduction_scheme_none);
            set_pref(pref, gpu_blaslt_pref_min_alignment_a, static_cast<uint32_t>(s.align_a));
            set_pref(pref, gpu_blaslt_pref_min_alignment_b, static_cast<uint32_t>(s.align_b));
            set_pref(pref, gpu_blaslt_pref_min_alignment_c, static_cast<uint32_t>(s.align_d));
            set_pref(pref, gpu_blaslt_pref_min_alignment_d, static_cast<uint32_t>(s.align_d));
        }
        status = gpu_blaslt_algo_get_heuristic(handle, p->desc, p->a, p->b, p->d, p->d, pref, 1, &result, &returned);
    } catch (...) {
        (void)gpu_blaslt_preference_destroy(pref);
        throw;
    }
    (void)gpu_blaslt_preference_destroy(pref);
    // "No algorithm" arrives as NOT_SUPPORTED or as zero results; either way the caller falls back
    // (or, for a GEMM without an epilogue, reports it).
    p->ok.store(status == gpu_blaslt_success && returned > 0 && result.state == gpu_blaslt_success);
    if (p->ok.load()) {
        p->algo = result.algo;
        p->workspace_bytes = result.workspaceSize;
    }
    count_plan_created();
    return p;
}

// One library handle per device, created on first use and kept for the life of the process
// (destroying it at exit could run after the driver has shut down).
gpu_blaslt_handle_t library_handle(int device) {
    static std::mutex mutex;
    static std::map<int, gpu_blaslt_handle_t> handles;
    std::lock_guard<std::mutex> lock(mutex);
    auto it = handles.find(device);
    if (it != handles.end()) return it->second;
    gpu::DeviceGuard guard(device);
    gpu_blaslt_handle_t h = nullptr;
    TNN_BLASLT_CHECK(gpu_blaslt_create(&h));
    handles[device] = h;
    return h;
}

}  // namespace

// The plans of one module (its layout, dtype and compute type are fixed), created on first use per
// spec and shared by every thread that calls the module.
class PlanCache {
public:
    PlanCache(const MlpLayout& layout, DType dtype, bool tf32)
        : layout(layout), dtype(dtype),
          compute(dtype == DType::f32 && tf32 ? gpu_blaslt_compute_32f_fast_tf32 : gpu_blaslt_compute_32f) {}

    std::shared_ptr<GemmPlan> get(gpu_blaslt_handle_t handle, const GemmSpec& spec, const void* bias,
                                  const void* mask) {
        {
            std::lock_guard<std::mutex> lock(m_mutex);
            auto it = m_plans.find(spec);
            if (it != m_plans.end()) return it->second;
        }
        // The heuristic runs outside the lock; two threads racing for one spec build it twice and the
        // first one stored wins, so every caller uses the same algorithm.
        std::shared_ptr<GemmPlan> plan = create_plan(handle, spec, bias, mask);
        std::lock_guard<std::mutex> lock(m_mutex);
        if (m_plans.size() >= kMaxPlans) m_plans.clear();  // plans in use stay alive through their shared_ptr
        return m_plans.emplace(spec, std::move(plan)).first->second;
    }

    const MlpLayout layout;
    const DType dtype;
    const gpu_blaslt_compute_type_t compute;

private:
    std::mutex m_mutex;
    std::map<GemmSpec, std::shared_ptr<GemmPlan>> m_plans;
};

std::shared_ptr<PlanCache> make_plan_cache(const MlpLayout& layout, DType dtype, bool tf32) {
    return std::make_shared<PlanCache>(layout, dtype, tf32);
}

namespace {

// Scratch that grows within one call and goes back to the stream's pool at its end. In steady state
// (the same shapes as an earlier call) every request is served from the pool: capture-safe.
class GrowBuffer {
public:
    explicit GrowBuffer(const Stream& stream) : m_stream(stream) {}
    void* get(size_t bytes) {
        if (bytes == 0) return nullptr;
        if (m_buffer.bytes() < bytes) m_buffer = Buffer::temporary(m_stream, bytes);
        return m_buffer.data();
    }

private:
    Stream m_stream;
    Buffer m_buffer;
};

// Byte offset into a buffer of `dtype` elements.
const void* element(const void* base, int64_t index, DType dtype) {
    return static_cast<const char*>(base) + index * static_cast<int64_t>(dtype_size(dtype));
}
void* element(void* base, int64_t index, DType dtype) {
    return static_cast<char*>(base) + index * static_cast<int64_t>(dtype_size(dtype));
}

// A row-major [rows, cols] operand: pointer, dtype, leading dimension (elements between rows).
struct Operand {
    const void* ptr = nullptr;
    DType dtype = DType::f32;
    int64_t ld = 0;
};
struct Output {
    void* ptr = nullptr;
    DType dtype = DType::f32;
    int64_t ld = 0;
};

// Everything one forward or backward call needs.
struct Call {
    PlanCache& plans;
    const Stream& stream;
    gpu_stream_t native;
    int device;
    gpu_blaslt_handle_t handle;
    bool fused;  // the epilogue policy for this call
    GrowBuffer workspace, weight_partials, bias_partials;

    Call(PlanCache& p, const Stream& s)
        : plans(p), stream(s), native(gpu::native_stream(s)), device(s.device().index),
          handle(library_handle(s.device().index)), fused(fused_epilogues()), workspace(s), weight_partials(s),
          bias_partials(s) {}

    int64_t type(DType t) const { return static_cast<int64_t>(library_type(t)); }

    GemmSpec spec(int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b, DType type_d) const {
        GemmSpec s;
        s.device = device;
        s.m = m;
        s.n = n;
        s.k = k;
        s.trans_a = trans_a;
        s.trans_b = trans_b;
        s.type_ab = type(plans.dtype);
        s.type_d = type(type_d);
        s.compute = static_cast<int64_t>(plans.compute);
        return s;
    }

    // Enqueues a planned GEMM: D = A B (+ beta D), with the bias / mask pointers of this call.
    gpu_blaslt_status_t enqueue(GemmPlan& plan, const void* a, const void* b, float beta, void* d, const void* bias,
                                const void* mask) {
        void* ws = workspace.get(plan.workspace_bytes);
        const float alpha = 1.0f;
        std::lock_guard<std::mutex> lock(plan.mutex);
        if (bias) set_desc(plan.desc, gpu_blaslt_desc_bias_pointer, bias);
        if (mask) set_desc(plan.desc, gpu_blaslt_desc_aux_pointer, mask);
        return gpu_blaslt_matmul(handle, plan.desc, &alpha, a, plan.a, b, plan.b, &beta, d, plan.d, d, plan.d,
                                 &plan.algo, ws, plan.workspace_bytes, native);
    }
    void run(GemmPlan& plan, const void* a, const void* b, float beta, void* d) {
        TNN_BLASLT_CHECK(enqueue(plan, a, b, beta, d, nullptr, nullptr));
    }
    // An epilogue GEMM the library validates only when enqueued: if it refuses (before launching
    // anything), the plan is marked unusable and the caller takes the unfused path, now and later.
    bool try_run(GemmPlan& plan, const void* a, const void* b, void* d, const void* bias, const void* mask) {
        if (!plan.ok.load()) return false;
        if (enqueue(plan, a, b, 0.0f, d, bias, mask) == gpu_blaslt_success) return true;
        plan.ok.store(false);
        return false;
    }

    // A plan for a GEMM without epilogue: the library must offer one.
    std::shared_ptr<GemmPlan> required(const GemmSpec& s) {
        auto plan = plans.get(handle, s, nullptr, nullptr);
        if (!plan->ok)
            throw UnsupportedError(msg("BlasLtMLP: the BLAS-Lt library offers no algorithm for ", s.describe(),
                                       "; use PortableMLP for this configuration"));
        return plan;
    }
};

bool keeps_preactivation(Activation a) {
    return a != Activation::None && a != Activation::ReLU && a != Activation::LeakyReLU;
}

int64_t hidden_ld(const MlpLayout& l) { return round_up<int64_t>(l.width, kLdMultiple); }
int64_t top_ld(const MlpLayout& l) { return round_up<int64_t>(l.n_output_dims, kLdMultiple); }
// ReLU mask of one hidden layer: a bit per (feature, row), features along a leading dimension of a
// multiple of 128 bits (the library's rule); columns are rows of the batch.
int64_t mask_ld(const MlpLayout& l) { return round_up<int64_t>(l.width, 128); }
int64_t mask_bytes(const MlpLayout& l, int64_t rows) { return mask_ld(l) / 8 * rows; }

struct BlasLtContext : Context {
    Stream stream;
    int64_t rows = 0;
    std::vector<Tensor> post;  // per hidden layer: a_l, [rows, hidden_ld] in the network dtype
    std::vector<Tensor> pre;   // per hidden layer: z_l in fp32 (activations whose derivative needs z)
    std::vector<Tensor> mask;  // per hidden layer: the ReLU mask when the forward epilogue wrote one
    Tensor pre_out;            // [rows, top_ld] fp32 z of the output layer when it has an activation
};

// The first layer's operand: the input itself when it already is the padded operand, otherwise
// the padded copy written into `padded` by a kernel.
Operand first_operand(Call& call, ConstView input, Tensor& padded) {
    const MlpLayout& l = call.plans.layout;
    const DType t = call.plans.dtype;
    if (input.dtype == t && l.n_input_dims == l.padded_input_dims) return Operand{input.data, t, input.stride};
    const int64_t M = input.rows;
    padded = Tensor::temporary(call.stream, M, l.padded_input_dims, t);
    dispatch_storage(input.dtype, [&](auto s) {
        using S = decltype(s);
        dispatch_storage(t, [&](auto d) {
            using D = decltype(d);
            blaslt_mlp_pad_input_kernel<S, D><<<elementwise_grid(M * l.padded_input_dims), kElementwiseThreads, 0,
                                                call.native>>>(input.ptr<S>(), input.stride, l.n_input_dims, M,
                                                               l.padded_input_dims, l.input_pad_value,
                                                               padded.ptr<D>());
            TNN_GPU_CHECK_LAUNCH("blaslt_mlp_pad_input_kernel");
        });
    });
    return Operand{padded.data(), t, l.padded_input_dims};
}

void launch_bias_act(Call& call, float* z, int64_t ld_z, const void* bias, Activation act, bool keep_z, int64_t rows,
                     int64_t cols, Output out) {
    dispatch_storage(call.plans.dtype, [&](auto b) {
        using B = decltype(b);
        dispatch_storage(out.dtype, [&](auto d) {
            using D = decltype(d);
            blaslt_mlp_bias_act_kernel<B, D><<<elementwise_grid(rows * cols), kElementwiseThreads, 0, call.native>>>(
                z, ld_z, static_cast<const B*>(bias), act, keep_z, rows, cols, static_cast<D*>(out.ptr), out.ld);
            TNN_GPU_CHECK_LAUNCH("blaslt_mlp_bias_act_kernel");
        });
    });
}

void launch_act_grad(Call& call, Operand g, Operand saved, Activation act, int64_t rows, int64_t cols, Output out) {
    dispatch_storage(g.dtype, [&](auto gt) {
        using G = decltype(gt);
        dispatch_storage(saved.dtype, [&](auto st) {
            using S = decltype(st);
            dispatch_storage(out.dtype, [&](auto dt) {
                using D = decltype(dt);
                blaslt_mlp_act_grad_kernel<G, S, D><<<elementwise_grid(rows * cols), kElementwiseThreads, 0,
                                                      call.native>>>(
                    static_cast<const G*>(g.ptr), g.ld, static_cast<const S*>(saved.ptr), saved.ld, act, rows, cols,
                    static_cast<D*>(out.ptr), out.ld);
                TNN_GPU_CHECK_LAUNCH("blaslt_mlp_act_grad_kernel");
            });
        });
    });
}

// ---- Forward. Layer l: D[N, M] = W_l[N, K] a_{l-1}[K, M] in the library's view (A = W stored
// [K, N] column-major and transposed, B = the activations), then bias and activation.
//   Fused (policy on, activation None or ReLU, bias absent or aligned and of D's type): the library
//   writes the layer's output in its final dtype; ReLU layers also write the mask for the backward.
//   Unfused: the GEMM writes fp32 z, our kernel adds the bias and applies the activation.
// `saved` is the training context (nullptr for inference: buffers then live for the call only).
void forward_layers(Call& call, ConstView input, View output, const void* params, BlasLtContext* saved) {
    const MlpLayout& l = call.plans.layout;
    const DType t = call.plans.dtype;
    const int64_t M = input.rows, ldh = hidden_ld(l);
    Tensor padded, ping, pong, mask_scratch;
    Operand a = first_operand(call, input, padded);
    for (uint32_t layer = 0; layer < l.n_layers(); ++layer) {
        const bool last = layer == l.n_hidden_layers;
        const int64_t K = l.layer_in(layer), N = last ? l.n_output_dims : l.width;
        const Activation act = last ? l.output_activation : l.activation;
        const void* W = element(params, static_cast<int64_t>(l.weight_offset(layer)), t);
        const void* bias = l.bias ? element(params, static_cast<int64_t>(l.bias_offset(layer)), t) : nullptr;

        Output dest;
        if (last) {
            dest = Output{output.data, output.dtype, output.stride};
        } else {
            Tensor* buf = nullptr;
            if (saved) {
                saved->post[layer] = Tensor::temporary(call.stream, M, ldh, t);
                buf = &saved->post[layer];
            } else {
                buf = layer % 2 == 0 ? &ping : &pong;
                if (buf->numel() == 0) *buf = Tensor::temporary(call.stream, M, ldh, t);
            }
            dest = Output{buf->data(), t, ldh};
        }

        GemmSpec s = call.spec(N, M, K, true, false, dest.dtype);
        s.lda = K;
        s.ldb = a.ld;
        s.align_a = alignment_of(W);
        s.align_b = alignment_of(a.ptr);

        // The fused path.
        const bool relu = act == Activation::ReLU && !last && gpu_blaslt_has_relu_mask;
        const bool bias_fusable = !bias || (alignment_of(bias) >= kMinBiasAlignment && dest.dtype == t);
        const bool wants_epilogue = bias || act != Activation::None;
        bool done = false;
        if ((act == Activation::None || relu) && bias_fusable && (call.fused || !wants_epilogue)) {
            GemmSpec f = s;
            f.ldd = dest.ld;
            f.align_d = alignment_of(dest.ptr);
            void* mask = nullptr;
            if (relu) {
                Tensor* m = saved ? &saved->mask[layer] : &mask_scratch;
                // mask_bytes is a multiple of 16 (the leading dimension is a multiple of 128 bits).
                if (m->numel() == 0) *m = Tensor::temporary(call.stream, 1, mask_bytes(l, M) / 4, DType::f32);
                mask = m->data();
                f.mask_ld = mask_ld(l);
                f.align_mask = alignment_of(mask);
            }
            f.epilogue = static_cast<int64_t>(relu ? (bias ? Epilogue::relu_mask_bias : Epilogue::relu_mask)
                                                   : (bias ? Epilogue::bias : Epilogue::none));
            f.align_bias = bias ? alignment_of(bias) : 0;
            auto plan = call.plans.get(call.handle, f, bias, mask);
            if (call.try_run(*plan, W, a.ptr, dest.ptr, bias, mask)) {
                count_gemm(false, wants_epilogue, false);
                done = true;
            } else if (relu && saved) {
                saved->mask[layer] = Tensor();  // no mask: the backward reads the activations instead
            }
            if (!done && wants_epilogue) count_gemm(false, false, true);
        }

        if (!done) {
            // z in fp32: kept in the context when the backward needs it, else scratch for this layer.
            const int64_t ldz = last ? top_ld(l) : ldh;
            Tensor z_scratch;
            Tensor* z = &z_scratch;
            const bool keep_z = saved && (last ? act != Activation::None : keeps_preactivation(act));
            if (keep_z) z = last ? &saved->pre_out : &saved->pre[layer];
            *z = Tensor::temporary(call.stream, M, ldz, DType::f32);
            GemmSpec u = s;
            u.type_d = call.type(DType::f32);
            u.ldd = ldz;
            u.align_d = alignment_of(z->data());
            auto plan = call.required(u);
            call.run(*plan, W, a.ptr, 0.0f, z->data());
            launch_bias_act(call, z->ptr<float>(), ldz, bias, act, keep_z, M, N, dest);
        }
        a = Operand{dest.ptr, t, ldh};
    }
}

// ---- Backward.

// The split of a weight gradient's reduction over the batch. It depends only on the shapes, so the
// summation order, and with it every bit, is fixed. `full` slabs of slab_rows rows (a multiple of
// 128, so that every slab starts as aligned as the whole operand) run as one batched GEMM, the
// remaining `tail` rows as one more GEMM; the fp32 partial sums are then added in slab order.
struct SlabPlan {
    int64_t slab_rows = 0, full = 0, tail = 0;
    int64_t parts() const { return full + (tail > 0 ? 1 : 0); }
};

SlabPlan plan_slabs(int64_t batch, int64_t n_in, int64_t n_out) {
    constexpr int64_t kTargetProblems = 256;        // output tiles x slabs: a couple of waves on big GPUs
    constexpr int64_t kMinSlabRows = 512;           // below this a slab does too little work
    constexpr int64_t kMaxPartialFloats = 1 << 24;  // 64 MiB of partial sums at most
    const int64_t tiles = ceil_div<int64_t>(n_in, 128) * ceil_div<int64_t>(n_out, 128);
    int64_t slabs = std::min({ceil_div(batch, kMinSlabRows), std::max<int64_t>(1, kTargetProblems / tiles),
                              std::max<int64_t>(1, kMaxPartialFloats / (n_in * n_out))});
    slabs = std::max<int64_t>(1, slabs);
    SlabPlan p;
    p.slab_rows = round_up<int64_t>(ceil_div(batch, slabs), 128);
    p.full = batch / p.slab_rows;
    p.tail = batch - p.full * p.slab_rows;
    return p;
}

// dW[N, K] (row-major, as the parameters) = sum over rows of dz[r, N] a[r, K]; in the library's
// view D[K, N] = A[K, rows] B^T, with A = the layer input and B = dz. Written in the network dtype
// (overwrite or accumulate: beta = 1), or as fp32 slab partials plus the ordered reduction.
void weight_gradient(Call& call, Operand a, Operand g, int64_t rows, int64_t K, int64_t N, void* dW, bool accumulate) {
    const DType t = call.plans.dtype;
    const SlabPlan p = plan_slabs(rows, K, N);
    GemmSpec s = call.spec(K, N, 0, false, true, t);
    s.lda = a.ld;
    s.ldb = g.ld;
    s.ldd = K;
    s.align_a = alignment_of(a.ptr);
    s.align_b = alignment_of(g.ptr);
    if (p.parts() == 1) {
        s.k = rows;
        s.align_d = alignment_of(dW);
        call.run(*call.required(s), a.ptr, g.ptr, accumulate ? 1.0f : 0.0f, dW);
        return;
    }
    float* partials = static_cast<float*>(call.weight_partials.get(sizeof(float) * p.parts() * K * N));
    s.type_d = call.type(DType::f32);
    s.align_d = alignment_of(partials);
    if (p.full > 0) {
        GemmSpec f = s;
        f.k = p.slab_rows;
        f.batch = p.full;
        f.stride_a = p.slab_rows * a.ld;
        f.stride_b = p.slab_rows * g.ld;
        f.stride_d = K * N;
        if (f.batch == 1) f.stride_a = f.stride_b = f.stride_d = 0;
        call.run(*call.required(f), a.ptr, g.ptr, 0.0f, partials);
    }
    if (p.tail > 0) {
        GemmSpec r = s;
        r.k = p.tail;
        const int64_t row0 = p.full * p.slab_rows;
        const void* a_tail = element(a.ptr, row0 * a.ld, a.dtype);
        const void* g_tail = element(g.ptr, row0 * g.ld, g.dtype);
        float* d_tail = partials + p.full * K * N;
        r.align_a = alignment_of(a_tail);
        r.align_b = alignment_of(g_tail);
        r.align_d = alignment_of(d_tail);
        call.run(*call.required(r), a_tail, g_tail, 0.0f, d_tail);
    }
    dispatch_storage(t, [&](auto x) {
        using T = decltype(x);
        blaslt_mlp_reduce_slabs_kernel<T><<<elementwise_grid(K * N), kElementwiseThreads, 0, call.native>>>(
            partials, K * N, p.parts(), static_cast<T*>(dW), accumulate);
        TNN_GPU_CHECK_LAUNCH("blaslt_mlp_reduce_slabs_kernel");
    });
}

// db[N] = sum over rows of dz[r, N]: fixed slabs of rows summed in row order, then in slab order.
void bias_gradient(Call& call, Operand g, int64_t rows, int64_t N, void* db, bool accumulate) {
    const int64_t slab_rows = std::max<int64_t>(256, ceil_div<int64_t>(rows, 1024));
    const int64_t slabs = ceil_div(rows, slab_rows);
    float* partials = static_cast<float*>(call.bias_partials.get(sizeof(float) * slabs * N));
    constexpr int kThreads = 128;
    const dim3 grid(static_cast<unsigned>(ceil_div<int64_t>(N, kThreads)), static_cast<unsigned>(slabs));
    dispatch_storage(g.dtype, [&](auto x) {
        using G = decltype(x);
        blaslt_mlp_column_sum_kernel<G><<<grid, kThreads, 0, call.native>>>(static_cast<const G*>(g.ptr), g.ld, rows,
                                                                            N, slab_rows, partials);
        TNN_GPU_CHECK_LAUNCH("blaslt_mlp_column_sum_kernel");
    });
    dispatch_storage(call.plans.dtype, [&](auto x) {
        using T = decltype(x);
        blaslt_mlp_reduce_slabs_kernel<T><<<elementwise_grid(N), kElementwiseThreads, 0, call.native>>>(
            partials, N, slabs, static_cast<T*>(db), accumulate);
        TNN_GPU_CHECK_LAUNCH("blaslt_mlp_reduce_slabs_kernel");
    });
}

// dA[rows, m] = dz[rows, k] W[k, m-part] (the first m columns of the row-major [k, K_l] matrix W),
// times act'(z below). In the library's view D[m, rows] = A[m, k] B[k, rows] with A = W stored
// [K_l, k] column-major. Fused: the library writes dest directly (no activation, or ReLU through
// the forward's mask); unfused: fp32 product, then our kernel.
void data_gradient(Call& call, Operand g, const void* W, int64_t ld_w, int64_t rows, int64_t k, int64_t m,
                   Activation act, const void* mask, Operand saved, Output dest) {
    GemmSpec s = call.spec(m, rows, k, false, false, dest.dtype);
    s.lda = ld_w;
    s.ldb = g.ld;
    s.align_a = alignment_of(W);
    s.align_b = alignment_of(g.ptr);
    const bool drelu = act == Activation::ReLU && mask && gpu_blaslt_has_relu_mask;
    if (act == Activation::None || (drelu && call.fused)) {
        GemmSpec f = s;
        f.ldd = dest.ld;
        f.align_d = alignment_of(dest.ptr);
        if (drelu) {
            f.epilogue = static_cast<int64_t>(Epilogue::drelu);
            f.mask_ld = mask_ld(call.plans.layout);
            f.align_mask = alignment_of(mask);
        }
        auto plan = call.plans.get(call.handle, f, nullptr, drelu ? mask : nullptr);
        if (call.try_run(*plan, W, g.ptr, dest.ptr, nullptr, drelu ? mask : nullptr)) {
            count_gemm(true, drelu, false);
            return;
        }
        if (drelu) count_gemm(true, false, true);
    }
    const int64_t ldz = round_up<int64_t>(m, kLdMultiple);
    Tensor z = Tensor::temporary(call.stream, rows, ldz, DType::f32);
    GemmSpec u = s;
    u.type_d = call.type(DType::f32);
    u.ldd = ldz;
    u.align_d = alignment_of(z.data());
    call.run(*call.required(u), W, g.ptr, 0.0f, z.data());
    launch_act_grad(call, Operand{z.data(), DType::f32, ldz}, saved, act, rows, m, dest);
}

// Writes the padded copy of `input` (lanes past n_in hold `pad`) into rows of `out` ([rows, padded_in]
// in the network dtype).
void pad_into(Call& call, ConstView input, float pad, void* out) {
    const MlpLayout& l = call.plans.layout;
    const DType t = call.plans.dtype;
    const int64_t M = input.rows;
    dispatch_storage(input.dtype, [&](auto s) {
        using S = decltype(s);
        dispatch_storage(t, [&](auto d) {
            using D = decltype(d);
            blaslt_mlp_pad_input_kernel<S, D><<<elementwise_grid(M * l.padded_input_dims), kElementwiseThreads, 0,
                                                call.native>>>(input.ptr<S>(), input.stride, l.n_input_dims, M,
                                                               l.padded_input_dims, pad, static_cast<D*>(out));
            TNN_GPU_CHECK_LAUNCH("blaslt_mlp_pad_input_kernel");
        });
    });
}

// D[m, n] = op(A) op(B) in fp32, no epilogue, into a [n, ldd] row-major buffer: the library view of
// every second-order product (spec as in forward_layers / data_gradient).
void gemm_f32(Call& call, int64_t m, int64_t n, int64_t k, bool trans_a, const void* a, int64_t lda, Operand b,
              float* d, int64_t ldd) {
    GemmSpec s = call.spec(m, n, k, trans_a, false, DType::f32);
    s.lda = lda;
    s.ldb = b.ld;
    s.ldd = ldd;
    s.align_a = alignment_of(a);
    s.align_b = alignment_of(b.ptr);
    s.align_d = alignment_of(d);
    call.run(*call.required(s), a, b.ptr, 0.0f, d);
}

}  // namespace

void inference(PlanCache& plans, const Stream& stream, ConstView input, View output, const void* params) {
    gpu::DeviceGuard guard(stream.device().index);
    Call call(plans, stream);
    forward_layers(call, input, output, params, nullptr);
}

std::unique_ptr<Context> forward(PlanCache& plans, const Stream& stream, ConstView input, View output,
                                 const void* params) {
    gpu::DeviceGuard guard(stream.device().index);
    Call call(plans, stream);
    auto ctx = std::make_unique<BlasLtContext>();
    ctx->stream = stream;
    ctx->rows = input.rows;
    const uint32_t n_hidden = plans.layout.n_hidden_layers;
    ctx->post.resize(n_hidden);
    ctx->pre.resize(n_hidden);
    ctx->mask.resize(n_hidden);
    forward_layers(call, input, output, params, ctx.get());
    return ctx;
}

void backward(PlanCache& plans, const Stream& stream, const Context& context, ConstView input, ConstView dL_doutput,
              View* dL_dinput, void* dL_dparams, const void* params, GradMode mode) {
    const auto* ctx = dynamic_cast<const BlasLtContext*>(&context);
    if (!ctx) throw Error("BlasLtMLP backward: the context does not come from a GPU forward of this module");
    if (ctx->rows != input.rows)
        throw ShapeError(msg("BlasLtMLP backward: the forward pass had ", ctx->rows, " rows, the input has ",
                             input.rows));
    if (!dL_dinput && !dL_dparams) return;
    gpu::DeviceGuard guard(stream.device().index);
    Call call(plans, stream);
    // A backward on another stream than its forward first waits for the forward's work.
    gpu::stream_wait(stream, ctx->stream);

    const MlpLayout& l = plans.layout;
    const DType t = plans.dtype;
    const int64_t M = input.rows, ldh = hidden_ld(l);
    const uint32_t top = l.n_hidden_layers;
    const bool accumulate = mode == GradMode::accumulate;

    // dz of the output layer: dL/doutput itself when it already is (no activation, network dtype),
    // else round_T(dL/doutput * act_out'(z)).
    Operand g{dL_doutput.data, dL_doutput.dtype, dL_doutput.stride};
    Tensor dz_top;
    if (l.output_activation != Activation::None || dL_doutput.dtype != t) {
        const int64_t ld = top_ld(l);
        dz_top = Tensor::temporary(stream, M, ld, t);
        const Operand z{ctx->pre_out.numel() ? ctx->pre_out.data() : nullptr, DType::f32, ld};
        launch_act_grad(call, g, z, l.output_activation, M, l.n_output_dims, Output{dz_top.data(), t, ld});
        g = Operand{dz_top.data(), t, ld};
    }

    Tensor padded;
    const Operand a0 = dL_dparams ? first_operand(call, input, padded) : Operand{};
    Tensor dz[2];
    for (uint32_t i = 0; i < std::min<uint32_t>(l.n_hidden_layers, 2); ++i) dz[i] = Tensor::temporary(stream, M, ldh, t);

    for (int64_t layer = top; layer >= 0; --layer) {
        const uint32_t li = static_cast<uint32_t>(layer);
        const int64_t K = l.layer_in(li), N = layer == top ? l.n_output_dims : l.width;
        const void* W = element(params, static_cast<int64_t>(l.weight_offset(li)), t);
        if (dL_dparams) {
            const Operand a_prev = layer == 0 ? a0 : Operand{ctx->post[li - 1].data(), t, ldh};
            void* dW = element(dL_dparams, static_cast<int64_t>(l.weight_offset(li)), t);
            weight_gradient(call, a_prev, g, M, K, N, dW, accumulate);
            // The padded output rows of W_out get no gradient: zero when overwriting.
            const int64_t pad_rows = static_cast<int64_t>(l.layer_out(li)) - N;
            if (pad_rows > 0 && !accumulate)
                TNN_GPU_CHECK(gpu_memset_async(element(dW, N * K, t), 0, pad_rows * K * dtype_size(t), call.native));
            if (l.bias) {
                void* db = element(dL_dparams, static_cast<int64_t>(l.bias_offset(li)), t);
                bias_gradient(call, g, M, N, db, accumulate);
                if (pad_rows > 0 && !accumulate)
                    TNN_GPU_CHECK(gpu_memset_async(element(db, N, t), 0, pad_rows * dtype_size(t), call.native));
            }
        }
        if (layer > 0) {
            const uint32_t below = li - 1;
            const Activation act = l.activation;
            const Operand saved = keeps_preactivation(act) ? Operand{ctx->pre[below].data(), DType::f32, ldh}
                                                           : Operand{ctx->post[below].data(), t, ldh};
            const void* mask = ctx->mask[below].numel() ? ctx->mask[below].data() : nullptr;
            Tensor& out = dz[below % 2];
            data_gradient(call, g, W, K, M, N, l.width, act, mask, saved, Output{out.data(), t, ldh});
            g = Operand{out.data(), t, ldh};
        } else if (dL_dinput) {
            // Only the real input lanes get a gradient; the padded lanes are constants.
            data_gradient(call, g, W, K, M, N, l.n_input_dims, Activation::None, nullptr, Operand{},
                          Output{dL_dinput->data, dL_dinput->dtype, dL_dinput->stride});
        }
    }
    // The context's memory returns to the forward stream's pool when the context dies: make that
    // stream wait for this backward, so a later allocation there cannot overwrite what it still reads.
    gpu::stream_wait(ctx->stream, stream);
}

// Second order (the maths in portable_mlp.cpp; rounding as MlpReference<T>): the tangent forward, one
// fp32 GEMM per layer and act' in launch_act_grad (adot = round_T(zdot act'(z)), zdot kept in fp32 where
// act'' needs it); then the reverse sweep, in which d and e of a layer sit one above the other in one
// [2M, ld] buffer of the network dtype: W^T [d; e] is one GEMM, and with [adot; a] stacked likewise
// (a copied next to adot) the weight gradient sum_r d adot^T + e a^T is one reduction over 2M rows
// (weight_gradient's slabs and rounding). The bias gradient sums e.
void backward_backward_input(PlanCache& plans, const Stream& stream, const Context& context, ConstView input,
                             ConstView dL_ddLdinput, ConstView dL_doutput, View* dL_ddLdoutput, View* dL_dinput,
                             void* dL_dparams, const void* params, GradMode mode) {
    const auto* ctx = dynamic_cast<const BlasLtContext*>(&context);
    if (!ctx)
        throw Error("BlasLtMLP backward_backward_input: the context does not come from a GPU forward of this module");
    if (ctx->rows != input.rows)
        throw ShapeError(msg("BlasLtMLP backward_backward_input: the forward pass had ", ctx->rows,
                             " rows, the input has ", input.rows));
    if (!dL_ddLdoutput && !dL_dinput && !dL_dparams) return;
    gpu::DeviceGuard guard(stream.device().index);
    Call call(plans, stream);
    gpu::stream_wait(stream, ctx->stream);

    const MlpLayout& l = plans.layout;
    const DType t = plans.dtype;
    const int64_t M = input.rows, ldh = hidden_ld(l), ldt = top_ld(l), n_out = l.n_output_dims;
    const int64_t pin = l.padded_input_dims;
    const uint32_t top = l.n_hidden_layers;
    const Activation act = l.activation, out_act = l.output_activation;
    const bool smooth = !derivative_from_output(act);  // act'' != 0: e needs the hidden layers' zdot
    const bool sweep = dL_dinput || dL_dparams;
    const bool stack = dL_dparams != nullptr;  // [adot; a] for the weight gradient
    const int64_t stack_rows = stack ? 2 * M : M;
    const size_t ts = dtype_size(t);

    // Tangent forward. in_stack: [round_T(v), 0 pad] (and [x, pad] below it when stacking).
    Tensor in_stack = Tensor::temporary(stream, stack_rows, pin, t);
    pad_into(call, dL_ddLdinput, 0.0f, in_stack.data());
    if (stack) pad_into(call, input, l.input_pad_value, element(in_stack.data(), M * pin, t));
    std::vector<Tensor> adot(top), zdot(top);
    Tensor zdot_top = Tensor::temporary(stream, M, ldt, DType::f32);
    Tensor ydot_scratch;
    Output ydot;
    if (dL_ddLdoutput) {
        ydot = Output{dL_ddLdoutput->data, dL_ddLdoutput->dtype, dL_ddLdoutput->stride};
    } else {
        ydot_scratch = Tensor::temporary(stream, M, ldt, DType::f32);
        ydot = Output{ydot_scratch.data(), DType::f32, ldt};
    }
    Operand tan{in_stack.data(), t, pin};
    Tensor z_scratch;  // zdot of a hidden layer when act'' does not need it later
    for (uint32_t layer = 0; layer <= top; ++layer) {
        const int64_t K = l.layer_in(layer);
        const void* W = element(params, static_cast<int64_t>(l.weight_offset(layer)), t);
        if (layer == top) {
            gemm_f32(call, n_out, M, K, true, W, K, tan, zdot_top.ptr<float>(), ldt);
            const Operand z{ctx->pre_out.numel() ? ctx->pre_out.data() : nullptr, DType::f32, ldt};
            launch_act_grad(call, Operand{zdot_top.data(), DType::f32, ldt}, z, out_act, M, n_out, ydot);
            break;
        }
        Tensor* zd = &z_scratch;
        if (smooth) zd = &zdot[layer];
        if (zd->numel() == 0) *zd = Tensor::temporary(stream, M, ldh, DType::f32);
        gemm_f32(call, l.width, M, K, true, W, K, tan, zd->ptr<float>(), ldh);
        adot[layer] = Tensor::temporary(stream, stack_rows, ldh, t);
        const Operand saved = keeps_preactivation(act) ? Operand{ctx->pre[layer].data(), DType::f32, ldh}
                                                       : Operand{ctx->post[layer].data(), t, ldh};
        launch_act_grad(call, Operand{zd->data(), DType::f32, ldh}, saved, act, M, l.width,
                        Output{adot[layer].data(), t, ldh});
        if (stack)
            TNN_GPU_CHECK(gpu_memcpy_async(element(adot[layer].data(), M * ldh, t), ctx->post[layer].data(),
                                           static_cast<size_t>(M * ldh) * ts, gpu_memcpy_default, call.native));
        tan = Operand{adot[layer].data(), t, ldh};
    }
    if (!sweep) {
        gpu::stream_wait(ctx->stream, stream);
        return;
    }

    // d and e of the output layer.
    Tensor de_top = Tensor::temporary(stream, 2 * M, ldt, t);
    dispatch_storage(dL_doutput.dtype, [&](auto gt) {
        using G = decltype(gt);
        dispatch_storage(t, [&](auto dt) {
            using D = decltype(dt);
            blaslt_mlp_second_output_kernel<G, D><<<elementwise_grid(M * n_out), kElementwiseThreads, 0,
                                                    call.native>>>(
                dL_doutput.ptr<G>(), dL_doutput.stride, ctx->pre_out.numel() ? ctx->pre_out.ptr<float>() : nullptr,
                zdot_top.ptr<float>(), ldt, out_act, M, n_out, de_top.ptr<D>(), ldt);
            TNN_GPU_CHECK_LAUNCH("blaslt_mlp_second_output_kernel");
        });
    });
    Tensor de[2];
    for (uint32_t i = 0; i < std::min<uint32_t>(top, 2); ++i) de[i] = Tensor::temporary(stream, 2 * M, ldh, t);
    Tensor prod = top > 0 ? Tensor::temporary(stream, 2 * M, ldh, DType::f32) : Tensor();
    const bool accumulate = mode == GradMode::accumulate;

    Operand g{de_top.data(), t, ldt};
    for (int64_t layer = top; layer >= 0; --layer) {
        const uint32_t li = static_cast<uint32_t>(layer);
        const int64_t K = l.layer_in(li), N = layer == top ? n_out : l.width;
        const void* W = element(params, static_cast<int64_t>(l.weight_offset(li)), t);
        const Operand e{element(g.ptr, M * g.ld, t), t, g.ld};
        if (dL_dparams) {
            const Operand ta = layer == 0 ? Operand{in_stack.data(), t, pin} : Operand{adot[li - 1].data(), t, ldh};
            void* dW = element(dL_dparams, static_cast<int64_t>(l.weight_offset(li)), t);
            weight_gradient(call, ta, g, 2 * M, K, N, dW, accumulate);
            // The padded output rows of W_out get no gradient: zero when overwriting.
            const int64_t pad_rows = static_cast<int64_t>(l.layer_out(li)) - N;
            if (pad_rows > 0 && !accumulate)
                TNN_GPU_CHECK(gpu_memset_async(element(dW, N * K, t), 0, pad_rows * K * ts, call.native));
            if (l.bias) {
                void* db = element(dL_dparams, static_cast<int64_t>(l.bias_offset(li)), t);
                bias_gradient(call, e, M, N, db, accumulate);
                if (pad_rows > 0 && !accumulate)
                    TNN_GPU_CHECK(gpu_memset_async(element(db, N, t), 0, pad_rows * ts, call.native));
            }
        }
        if (layer == 0) {
            // dL'/dx = (W_0^T e_0)[:n_in]; the padded lanes are constants.
            if (dL_dinput)
                data_gradient(call, e, W, K, M, N, l.n_input_dims, Activation::None, nullptr, Operand{},
                              Output{dL_dinput->data, dL_dinput->dtype, dL_dinput->stride});
            break;
        }
        // [W^T d; W^T e] in one GEMM over 2M rows (library view D[width, 2M] = W[width, N] [d; e][N, 2M]).
        const uint32_t below = li - 1;
        gemm_f32(call, l.width, 2 * M, N, false, W, K, g, prod.ptr<float>(), ldh);
        Tensor& out = de[below % 2];
        const Operand saved = keeps_preactivation(act) ? Operand{ctx->pre[below].data(), DType::f32, ldh}
                                                       : Operand{ctx->post[below].data(), t, ldh};
        const float* pre = ctx->pre[below].numel() ? ctx->pre[below].ptr<float>() : nullptr;
        const float* zd = smooth ? zdot[below].ptr<float>() : nullptr;
        dispatch_storage(saved.dtype, [&](auto st) {
            using S = decltype(st);
            dispatch_storage(t, [&](auto dt) {
                using D = decltype(dt);
                blaslt_mlp_second_combine_kernel<S, D><<<elementwise_grid(M * l.width), kElementwiseThreads, 0,
                                                         call.native>>>(
                    prod.ptr<float>(), ldh, static_cast<const S*>(saved.ptr), saved.ld, pre, zd, ldh, act, M, l.width,
                    out.ptr<D>(), ldh);
                TNN_GPU_CHECK_LAUNCH("blaslt_mlp_second_combine_kernel");
            });
        });
        g = Operand{out.data(), t, ldh};
    }
    gpu::stream_wait(ctx->stream, stream);
}

#else  // !TNN_HAS_BLASLT

class PlanCache {};

std::shared_ptr<PlanCache> make_plan_cache(const MlpLayout&, DType, bool) { return std::make_shared<PlanCache>(); }

void inference(PlanCache&, const Stream&, ConstView, View, const void*) {
    throw UnsupportedError(kUnavailableMessage);
}
std::unique_ptr<Context> forward(PlanCache&, const Stream&, ConstView, View, const void*) {
    throw UnsupportedError(kUnavailableMessage);
}
void backward(PlanCache&, const Stream&, const Context&, ConstView, ConstView, View*, void*, const void*, GradMode) {
    throw UnsupportedError(kUnavailableMessage);
}
void backward_backward_input(PlanCache&, const Stream&, const Context&, ConstView, ConstView, ConstView, View*, View*,
                             void*, const void*, GradMode) {
    throw UnsupportedError(kUnavailableMessage);
}

#endif  // TNN_HAS_BLASLT

}  // namespace tnn::blaslt_mlp
