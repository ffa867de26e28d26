// FullyFusedMLP internals shared by the host module (fully_fused_mlp.cpp), the CUDA launchers
// (fully_fused_mlp.cu) and the kernels (fully_fused_mlp_kernels.cuh): the shape maths in
// host+device form, the shared-memory plan (pure host code, unit-tested on the CPU) and the
// kernel argument block. Nothing here names a GPU vendor.
#pragma once

#include <tnn/network.h>

#include "core/loss_math.h"
#include "networks/activation.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace tnn::ffm {

// Widths the kernels are instantiated for.
constexpr uint32_t kWidths[] = {16, 32, 64, 128};
constexpr bool is_supported_width(uint32_t w) { return w == 16 || w == 32 || w == 64 || w == 128; }
// Most warps per block (the kernels' __launch_bounds__).
constexpr int kMaxWarps = 8;

// Rows one warp owns per tile: the forward kernel keeps MT = 2 m16 tiles per warp below width
// 128 (each weight fragment read from shared memory feeds two MMAs). The backward kernel has one
// m16 tile per warp everywhere and, on NVIDIA up to width 64, also two (at width 128 it would spill);
// plan_backward picks two where the plan keeps as many resident warps and as much on chip.
constexpr int forward_m_tiles(uint32_t width) { return width <= 64 ? 2 : 1; }
constexpr bool has_backward_m_tiles(uint32_t width, int m_tiles) {
#if defined(TNN_WITH_HIP)
    return m_tiles == 1;
#else
    return m_tiles == 1 || (m_tiles == 2 && width <= 64);
#endif  // TNN_WITH_HIP
}

// Most warps per block of a backward kernel: 12 for the ReLU / linear-output kernels with one m16
// tile per warp up to width 64 (their __launch_bounds__ allow 168 registers a thread; ptxas gives the
// width-64 one 156, sm_90, 2026-11-30), kMaxWarps for the others (up to 255 registers). Those 12-warp
// kernels can also read dL/doutput (or the fused step's target) in place in the output layer instead
// of staging it in shared memory (BackwardPlan::dy_in_smem false): at 64->64->64 twelve warps of one
// tile fit only so. The planner knows a kernel's bound from its attributes
// (DeviceLimits::max_warps_per_block).
constexpr int backward_max_warps(uint32_t width, bool relu, int m_tiles) {
#if defined(TNN_WITH_HIP)
    (void)width, (void)relu, (void)m_tiles;
    return kMaxWarps;
#else
    return relu && m_tiles == 1 && width <= 64 ? 12 : kMaxWarps;
#endif  // TNN_WITH_HIP
}
constexpr bool backward_reads_dy_in_place(uint32_t width, bool relu, int m_tiles) {
    return backward_max_warps(width, relu, m_tiles) > kMaxWarps;
}

// The wgmma flavours of the backward kernel (NVIDIA sm_90a: Hopper's warpgroup MMA). They are the
// one-tile ReLU / linear-output kernels of width 64 (12 warps) and 128 (8 warps) with their input,
// activation and dz tiles in a 128-byte-swizzled layout (atoms of rows of 64 elements, 16-byte chunk
// index XOR row % 8: the canonical layout wgmma reads from shared memory, bench/wgmma_probe.cu; at
// width 128 a tile is two atoms, columns 0..63 and 64..127), and the weight gradients by wgmma over all
// the block's rows (m64n32k16, K = 192 or 128), each block of 64 rows and 32 columns of a layer by one
// warpgroup while the others go on with the chain (the warpgroups take the layers' blocks in turn),
// added to the block's partial slot in global memory with red.global.add. Deterministic, and the fused
// step equals the unfused one bit for bit (same kernel); dL/dinput and the loss values equal the
// mma.sync kernel's bit for bit (at width 128 the hidden layers' forward and chain are wgmmas too,
// with A from registers: equal as long as wgmma's bits equal mma.sync's, which the probe found and the
// GPU tests check), dL/dparams only to rounding (other k order within the tile).
// The planner takes them for plans of wgmma_backward_warps warps and one tile, shapes they cover
// (wgmma_backward_shape), dW in global memory, on devices and builds that have them
// (DeviceLimits::wgmma), unless PlanOverride::no_wgmma.
constexpr int kWgmmaWarps = 12;
constexpr int wgmma_backward_warps(int width) { return width == 64 ? kWgmmaWarps : width == 128 ? kMaxWarps : 0; }
constexpr bool wgmma_backward_shape(int width, int pin, int pout, bool bias) {
    return (width == 64 || width == 128) && pin <= 64 && pout <= 64 && !bias;
}

// The layer geometry of an MlpLayout in a form kernels can use. Matches MlpLayout's
// weight_offset / bias_offset / n_params exactly (tested).
struct Shape {
    int width = 0, n_in = 0, pin = 0, n_out = 0, pout = 0, n_hidden = 0;
    bool bias = false;

    TNN_HD int n_layers() const { return n_hidden + 1; }
    TNN_HD int layer_in(int l) const { return l == 0 ? pin : width; }
    TNN_HD int layer_out(int l) const { return l == n_hidden ? pout : width; }
    // Parameter offsets (elements), as MlpLayout.
    TNN_HD int64_t weight_offset(int l) const {
        if (l == 0) return 0;
        return int64_t(width) * pin + int64_t(l - 1) * width * width;
    }
    TNN_HD int64_t n_matrix_params() const { return weight_offset(n_hidden) + int64_t(pout) * width; }
    TNN_HD int64_t bias_offset(int l) const { return n_matrix_params() + int64_t(l) * width; }
    TNN_HD int64_t n_params() const {
        return bias ? n_matrix_params() + int64_t(n_hidden) * width + pout : n_matrix_params();
    }
    // A layer's slot in shared memory: its [out][in + pad] 16-bit matrix, then (with bias) its
    // out fp32 biases. Slots are back to back when the weights stay resident.
    TNN_HD int64_t slot_bytes(int l) const {
        return int64_t(layer_out(l)) * (layer_in(l) + 8) * 2 + (bias ? int64_t(layer_out(l)) * 4 : 0);
    }
    TNN_HD int64_t slot_offset(int l) const {
        if (l == 0) return 0;
        return slot_bytes(0) + int64_t(l - 1) * slot_bytes(1);  // layers 1..n_hidden-1 share a size
    }
    TNN_HD int64_t resident_weight_bytes() const { return slot_offset(n_hidden) + slot_bytes(n_hidden); }
    TNN_HD int64_t max_slot_bytes() const {
        int64_t m = slot_bytes(0);
        if (slot_bytes(n_hidden) > m) m = slot_bytes(n_hidden);
        if (n_hidden > 1 && slot_bytes(1) > m) m = slot_bytes(1);
        return m;
    }
    // Weight-gradient accumulators (fp32, in shared memory or the block's global slot) use the
    // parameter layout's offsets, but inside a layer's [out][in] block they are in fragment order:
    // the 16x8 C tile (mt, nt) occupies 128 floats, lane L's four elements at 4 L (mma_layout.h), so
    // every lane adds its accumulators with one conflict-free float4 read-modify-write. Biases are
    // plain. fragment_index maps a parameter index of a matrix to that order.
    TNN_HD int64_t fragment_index(int64_t param) const {
        if (param >= n_matrix_params()) return param;
        const int l = param < weight_offset(1)          ? 0
                      : param >= weight_offset(n_hidden) ? n_hidden
                                                         : 1 + static_cast<int>((param - weight_offset(1)) / (int64_t(width) * width));
        const int in = layer_in(l);
        const int64_t local = param - weight_offset(l);
        const int row = static_cast<int>(local / in), col = static_cast<int>(local % in);
        const int lane = 4 * (row % 8) + (col % 8) / 2, elem = 2 * ((row % 16) / 8) + col % 2;
        return weight_offset(l) + ((int64_t(row / 16) * (in / 8) + col / 8) * 32 + lane) * 4 + elem;
    }
};

Shape shape_of(const MlpLayout& layout);

// Elements lane, lane + 32, lane + 64, ... of a [rows][cols] grid as (row r, column c), stepped
// without a division per element: cols is a run-time value, and a 32-bit division is ~20-30
// instructions on the critical path of the kernels' copy loops; the walk divides twice in all, or
// shifts when cols is a power of two (measured: the divisions of the walks were ~8% of the
// backward kernel's instructions).
// (32: the NVIDIA warp the mma.sync kernels are written for.)
struct GridWalk {
    int r, c, dr, dc, cols;
    TNN_HD GridWalk(int lane, int cols_) : cols(cols_) {
        if (cols > 0 && (cols & (cols - 1)) == 0) {  // a power of two (the usual row sizes): shifts, not divisions
            const int sh = log2_pow2(cols);
            r = lane >> sh;
            dr = 32 >> sh;
        } else {
            r = lane / cols;
            dr = 32 / cols;
        }
        c = lane - r * cols;
        dc = 32 - dr * cols;
    }
    static TNN_HD int log2_pow2(int x) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
        return __ffs(x) - 1;
#else
        return __builtin_ctz(static_cast<unsigned>(x));
#endif
    }
    TNN_HD void next() {
        c += dc;
        r += dr;
        if (c >= cols) c -= cols, ++r;
    }
};

// GridWalk that also keeps the byte offsets of the element in two row-major arrays in step
// (offset = r * pitch + c * element bytes in each), so a copy loop adds precomputed increments per
// element instead of multiplying out row * pitch (a 64-bit multiply for global pitches). OA / OB:
// int64_t for global memory, int for shared memory.
template <typename OA, typename OB> struct GridWalk2 : GridWalk {
    OA a, a_step, a_wrap;
    OB b, b_step, b_wrap;
    TNN_HD GridWalk2(int lane, int cols_, OA a_pitch, int a_elem, OB b_pitch, int b_elem) : GridWalk(lane, cols_) {
        a = OA(r) * a_pitch + OA(c) * a_elem;
        b = OB(r) * b_pitch + OB(c) * b_elem;
        a_step = OA(dr) * a_pitch + OA(dc) * a_elem;
        b_step = OB(dr) * b_pitch + OB(dc) * b_elem;
        a_wrap = a_pitch - OA(cols) * a_elem;  // one row down, cols elements back
        b_wrap = b_pitch - OB(cols) * b_elem;
    }
    // Whether the column ever wraps (cols does not divide 32). When it does not, next_row() steps
    // without the wrap test: a compare and two adds fewer per element in the copy loops.
    TNN_HD bool wraps() const { return dc != 0; }
    TNN_HD void next_row() {
        r += dr;
        a += a_step;
        b += b_step;
    }
    TNN_HD void next() {
        c += dc;
        r += dr;
        a += a_step;
        b += b_step;
        if (c >= cols) {
            c -= cols;
            ++r;
            a += a_wrap;
            b += b_wrap;
        }
    }
};

// The activations whose derivative the backward pass reads off the stored activation (activation.h);
// the others store f'(z) rounded to the network dtype next to it.
using tnn::derivative_from_output;

// ---- Shared-memory plans. Offsets are bytes into the dynamic shared memory of one block; every
// region is 16-byte aligned. Rows are block-local: warp w owns rows [w * rows_per_warp, ...).
struct ForwardPlan {
    int n_warps = 0, rows_per_warp = 0;
    bool weights_resident = true;  // all layers loaded once per block, else one slot reloaded per layer
    int64_t off_weights = 0, off_raw = 0, off_x = 0, off_out = 0, smem_bytes = 0;
    int raw_stride = 0, out_stride = 0;  // bytes per row of the raw input / output staging
    int x_stride = 0;                    // elements per row of the 16-bit input tile
    int blocks_per_sm = 0;
};

struct BackwardPlan {
    int n_warps = 0, rows_per_warp = 0;
    bool weights_resident = true;
    bool stash_in_smem = true;  // activations of the recomputed forward pass, else in global scratch
    bool dw_in_smem = true;     // fp32 weight-gradient accumulators, else in the block's global slot
    bool dy_in_smem = true;     // dL/doutput (or the staged target) in shared memory, else read from
                                // global memory by the output layer (no dy region)
    bool wgmma = false;         // the wgmma kernel (wgmma_backward_shape): x, stash and dz tiles as
                                // swizzled atoms of 64 columns (two per stash and dz tile at width
                                // 128), 1024-byte aligned from a 1024-byte aligned base
    int64_t off_weights = 0, off_raw = 0, off_dy = 0, off_x = 0, off_stash = 0, off_awork = 0, off_dz = 0,
            off_dw = 0, smem_bytes = 0;
    int raw_stride = 0, dy_stride = 0;      // bytes per row
    int x_stride = 0, act_stride = 0, dz_stride = 0;  // elements per row
    int n_stashes = 0;                      // activation tiles per hidden layer: 1 (a) or 2 (a, f'(z))
    int64_t stash_bytes_per_block = 0;      // global scratch per block when !stash_in_smem
    int blocks_per_sm = 0;
};

// The tile layout the wgmma kernels' descriptors and tile sizes assume for shape s (layout_backward
// makes it for wgmma plans): one m16 tile per warp, one stash per hidden layer, 64-element rows of the
// x, stash and dz tiles' atoms, the x tile (64 columns), the stash (n_hidden tiles of s.width columns)
// and the two dz tiles (s.width columns) in that order without overlap, each 1024-byte aligned, and
// 1024 bytes of shared memory beyond the plan's regions for aligning the base; at width 128, where the
// hidden layers' weights (slots 1 .. n_hidden-1, when there are any) are swizzled atoms too
// (load_slot_sw), those slots on 1024-byte boundaries. The launcher refuses a wgmma plan without it
// (e.g. a plan laid out for another width).
inline bool wgmma_tile_layout(const BackwardPlan& p, const Shape& s) {
    const int64_t R = int64_t(p.n_warps) * p.rows_per_warp, tile = R * s.width * 2;
    const bool hidden_atoms = s.width != 128 || s.n_hidden < 2 ||
                              (p.off_weights % 1024 == 0 && s.slot_offset(1) % 1024 == 0 && s.slot_bytes(1) % 1024 == 0);
    return p.rows_per_warp == 16 && p.n_stashes == 1 && p.x_stride == 64 && p.act_stride == 64 &&
           p.dz_stride == 64 && p.off_x % 1024 == 0 && p.off_stash % 1024 == 0 && p.off_dz % 1024 == 0 &&
           p.off_x + R * 64 * 2 <= p.off_stash && p.off_stash + s.n_hidden * tile <= p.off_dz &&
           p.off_dz + 2 * tile <= p.off_dw && p.off_dw + 1024 <= p.smem_bytes && hidden_atoms;
}

// Whether two backward plans of one network, launched over the same rows with grids grid_a and
// grid_b, sum dW over the same rows in the same order (the same kernel kind, rows per block and
// blocks): the fused training step may run the unfused step's plan only as such a variant (another
// target staging, dy rows or not), so that its dL/dparams equal the unfused step's bit for bit.
bool same_dw_order(const BackwardPlan& a, int grid_a, const BackwardPlan& b, int grid_b);

// What the planner may use. smem_per_sm and regs_* are for the occupancy estimate only.
struct DeviceLimits {
    int64_t smem_per_block = 0, smem_per_sm = 0;
    int regs_per_sm = 65536, regs_per_thread = 128, max_warps_per_sm = 64;
    int max_warps_per_block = kMaxWarps;  // the kernel's __launch_bounds__ (backward_max_warps); a backward
                                          // kernel above kMaxWarps also reads dy in place
    bool wgmma = false;  // the backward kernel has a wgmma flavour that runs here (sm_90 device, sm_90a build)
};

// Test and benchmark hooks: force a fallback (so small configs exercise the paths deep or wide
// networks take) or a warp count. Zero / false means "the planner decides". Process-wide.
struct PlanOverride {
    int forward_warps = 0, backward_warps = 0;
    bool stream_weights = false, stash_in_global = false, dw_in_global = false;
    bool generic_kernels = false;  // ReLU / None networks too take the kernels that switch at run time
    int backward_m_tiles = 0;      // m16 tiles per warp in the backward pass (1 or 2)
    bool fused_target_global = false;  // the fused training step reads the target from global memory
    bool dy_global = false;  // the backward reads dL/doutput (and the fused step its target) in place in
                             // the output layer: no dy rows in shared memory (backward_reads_dy_in_place)
    bool no_wgmma = false;   // never the wgmma backward kernel (the mma.sync one instead)
    int dx_values = 0;       // values per dL/dinput store at most (1, 2 or 4; 0: what the rows allow; dx_store_values)
};
void set_plan_override(const PlanOverride& o);
PlanOverride plan_override();
// Sets an override for its lifetime, then the planner's defaults again (also when a test or a benchmark
// row throws).
struct PlanOverrideScope {
    explicit PlanOverrideScope(const PlanOverride& o) { set_plan_override(o); }
    ~PlanOverrideScope() { set_plan_override({}); }
    PlanOverrideScope(const PlanOverrideScope&) = delete;
    PlanOverrideScope& operator=(const PlanOverrideScope&) = delete;
};

// Both throw UnsupportedError naming the limit and the alternatives when nothing fits.
ForwardPlan plan_forward(const Shape& s, int in_bytes, int out_bytes, const DeviceLimits& d,
                         const PlanOverride& o = {});
// d_mt2: the limits of the two-m16-tile backward kernel (its registers differ), when the caller
// has that kernel; null plans one tile per warp unless the override asks for two (then d is theirs).
BackwardPlan plan_backward(const Shape& s, int in_bytes, int dy_bytes, Activation act, bool want_dw,
                           const DeviceLimits& d, const PlanOverride& o = {}, const DeviceLimits* d_mt2 = nullptr);

// ---- Kernel arguments (one struct for every kernel; passed by value as a __grid_constant__).
struct KernelArgs {
    Shape shape;
    int64_t rows = 0;
    float pad_value = 1.0f;
    Activation act = Activation::ReLU, out_act = Activation::None;
    bool relu = false;             // act == ReLU, out_act == None: the kernels compiled for that pair
    const void* params = nullptr;  // network dtype, MlpLayout order
    bool params_aligned = true;    // 16-byte aligned (cp.async 16); else 2-byte copies
    const void* in = nullptr;      // [rows, n_in], fp32 or the network dtype
    int64_t in_stride = 0;         // elements
    bool in_f32 = true;
    int in_vec = 16;               // bytes per copy of input rows (16, 8, 4, or 2 = element-wise)
    void* out = nullptr;           // [rows, n_out], fp32 or the network dtype
    int64_t out_stride = 0;
    bool out_f32 = false;
    int out_vec = 16;
    const void* dy = nullptr;      // dL/doutput, dtype of the output (or the fp32 target, staged_target)
    int64_t dy_stride = 0;
    int dy_vec = 16;
    bool dy_f32 = false;           // the staged dy rows are fp32
    bool dy_vec2 = false;          // dy rows (BackwardPlan::dy_in_smem false: read in place) aligned for pair loads
    void* dx = nullptr;            // dL/dinput (optional), dtype of the input
    int64_t dx_stride = 0;
    int dx_vec = 1;                // values per dx store: 4 (16-bit, rows 8-byte aligned), 2 (rows aligned for pairs) or 1
    float* dw_partials = nullptr;  // [gridDim.x][n_params] fp32, fragment order (Shape::fragment_index)
    void* grads = nullptr;         // gridDim.x == 1: dL/dparams (network dtype) written by the kernel itself
                                   // (not the wgmma kernel's plans: they take the partials and the reduction)
    bool accumulate = false;       // ... added to (GradMode::accumulate) instead of overwritten
    void* stash = nullptr;         // [gridDim.x][stash_bytes_per_block] when the stash is global
    // The fused training step (backward only): the kernel takes dL/dy from the loss of the recomputed
    // output (rounded to the output dtype: fp32 if out_f32, else T) and the fp32 target, as
    // Loss::evaluate does, writing the per-element values [rows, n_out] fp32. The target is staged
    // like dy (dy = target, dy_f32) when that plan has the unfused backward's tiles and grid, else read
    // from global memory in the epilogue under the unfused plan: either way dW sums the same rows in
    // the same order as the unfused backward.
    // Plans that read dy in place (dy_global: 12-warp blocks, or fewer warps on request) have no dy
    // rows; there the target rows of a tile are copied into the warp's raw input rows once they are
    // converted (target_in_raw, when a target row fits a raw row), in flight during the recomputed
    // forward pass; the next tile's input is then issued after the loss epilogue, during the backward.
    bool fused_loss = false;
    bool staged_target = false;
    bool target_in_raw = false;
    const float* target = nullptr;
    int64_t target_stride = 0;
    bool target_vec2 = false;      // target rows 8-byte aligned: pairs load as float2
    int target_vec = 4;            // bytes per copy of a target row into the raw rows (target_in_raw)
    LossKind loss_kind = LossKind::l2;
    float loss_scale = 1.0f, loss_n = 1.0f;  // loss_n: rows * n_out as the loss kernel rounds it
    // 1 / loss_n when loss_n is a power of two (else 0): then x / loss_n == x * loss_inv_n exactly, and
    // the epilogue multiplies instead of dividing (the same bits, no IEEE division subroutine).
    float loss_inv_n = 0.0f;
    float* values = nullptr;
    int64_t values_stride = 0;
    bool values_vec2 = false;      // values rows 8-byte aligned: pairs leave as float2
    ForwardPlan fwd;
    BackwardPlan bwd;
};

#if defined(TNN_WITH_GPU)
// The GPU entry points (fully_fused_mlp.cu; CUDA, or HIP with the gfx12 kernels), called by the
// module with validated arguments, rows > 0. The forward pass keeps no context: backward recomputes
// it from the input.
void gpu_forward(const MlpLayout& layout, DType dtype, const Stream& stream, ConstView input, View output,
                 const void* params);
// loss: the fused training step (dL_doutput unused): forward, loss and backward in the backward kernel.
struct FusedLoss {
    LossKind kind;
    float loss_scale;
    ConstView target;  // [rows, n_out] fp32
    View values;       // [rows, n_out] fp32
    bool output_f32;   // the network's output dtype is fp32 (else its dtype): how the output is rounded
};
void gpu_backward(const MlpLayout& layout, DType dtype, const Stream& stream, ConstView input, ConstView dL_doutput,
                  View* dL_dinput, void* dL_dparams, const void* params, GradMode mode,
                  const FusedLoss* loss = nullptr);
// Whether the wgmma backward kernel of `dtype` and `width` (64 or 128) runs on GPU `device`
// (DeviceLimits::wgmma): an sm_90 device and a build with sm_90a machine code and no plain sm_90 code
// (TNN_CUDA_WGMMA, set by CMake; the GPU tests check it on the H200).
bool wgmma_backward_available(int device, DType dtype, int width = 64);
// What the last backward launch of this process took (a test hook), read together: its plan (which kernel,
// tiles and target mode) and the values per dL/dinput store it gave the kernel (KernelArgs::dx_vec; 0: the
// launch had no dL/dinput). Calls that launch nothing (no rows, nothing to write) leave it as it was; the
// gfx12 kernels store one value at a time whatever dx_vec says.
struct LastBackward {
    BackwardPlan plan;
    int dx_vec = 0;
};
LastBackward last_backward();
#endif  // TNN_WITH_GPU

// Largest of 16/8/4/2 bytes dividing the address, the row pitch and the row size of a tensor.
int copy_vector_bytes(const void* ptr, int64_t stride_bytes, int64_t row_bytes);
// dL/dinput values per store of the CUDA backward kernels (KernelArgs::dx_vec) for rows at `dx`,
// `stride` elements of elem_bytes apart: the widest store of at most 8 bytes whose bytes divide the rows'
// start and pitch (4 16-bit values, 2, or 1), capped by `cap` (PlanOverride::dx_values; 0: no cap; other
// caps round down to 4, 2 or 1).
int dx_store_values(const void* dx, int64_t stride, int elem_bytes, int cap);
// Whether rows at `p`, `stride` elements of elem_bytes apart, take loads or stores of two adjacent values
// (KernelArgs::dy_vec2, target_vec2, values_vec2): the rows' start and pitch multiples of 2 * elem_bytes.
bool pair_aligned(const void* p, int64_t stride, int elem_bytes);

// ---- One (dtype, width) instantiation of the kernels, defined in
// src/networks/instantiations/fully_fused_w<W>_<dtype>.cu. H is the host storage type (half or
// bfloat16). *_info opt the kernel in to max_smem bytes of dynamic shared memory and report its
// registers; launches are asynchronous on the native stream and check the launch.
struct KernelInfo {
    int regs_per_thread = 0;
    int local_bytes = 0;  // spills and local arrays; 0 is expected
    int max_warps = 0;    // threads per block its __launch_bounds__ allow, / 32
    bool wgmma = false;   // backward: a wgmma flavour was compiled with the instructions (sm_90a code)
};
template <typename H, int W> struct Kernels {
    // relu: the flavour compiled for ReLU hidden layers and a linear output (KernelArgs::relu).
    static KernelInfo forward_info(int max_smem, bool relu);
    static KernelInfo backward_info(int max_smem, bool relu, int m_tiles);
    static void forward(const KernelArgs& args, int grid, void* stream);
    static void backward(const KernelArgs& args, int grid, void* stream);
};

}  // namespace tnn::ffm
