// FullyFusedMLP, host side: config validation and errors, the shared-memory planner (pure host
// code, tested on the CPU), and the module that hands validated GPU calls to the entry points in
// fully_fused_mlp.cu and CPU calls to the CPU backend (MlpReference<T> with the kernels' rounding).
// Compiled in every build: a CPU-only build creates and runs FullyFusedMLP on the CPU.
#include "networks/fully_fused_mlp.h"

#include "networks/activation.h"
#include "networks/fused_loss.h"
#include "networks/network_registry.h"
#include "networks/portable_mlp.h"

#include <algorithm>
#include <mutex>
#include <optional>
#include <tuple>

namespace tnn {

namespace ffm {

Shape shape_of(const MlpLayout& l) {
    Shape s;
    s.width = static_cast<int>(l.width);
    s.n_in = static_cast<int>(l.n_input_dims);
    s.pin = static_cast<int>(l.padded_input_dims);
    s.n_out = static_cast<int>(l.n_output_dims);
    s.pout = static_cast<int>(l.padded_output_dims);
    s.n_hidden = static_cast<int>(l.n_hidden_layers);
    s.bias = l.bias;
    return s;
}

int copy_vector_bytes(const void* ptr, int64_t stride_bytes, int64_t row_bytes) {
    const auto addr = reinterpret_cast<uintptr_t>(ptr);
    for (int v : {16, 8, 4})
        if (addr % v == 0 && stride_bytes % v == 0 && row_bytes % v == 0) return v;
    return 2;
}

int dx_store_values(const void* dx, int64_t stride, int elem_bytes, int cap) {
    // A row size of 8 bytes: 16-byte units would need 16-byte rows, so 8 bytes is the widest answer.
    int v = std::max(1, copy_vector_bytes(dx, stride * elem_bytes, 8) / elem_bytes);
    if (cap > 0) v = std::min(v, cap >= 4 ? 4 : cap >= 2 ? 2 : 1);
    return v;
}

bool pair_aligned(const void* p, int64_t stride, int elem_bytes) {
    return copy_vector_bytes(p, stride * elem_bytes, 2 * elem_bytes) >= 2 * elem_bytes;
}

namespace {

std::mutex g_override_mutex;
PlanOverride g_override;

int64_t align16(int64_t v) { return (v + 15) / 16 * 16; }
int64_t align1024(int64_t v) { return (v + 1023) / 1024 * 1024; }
// An odd number of 16-byte units: the 8 rows a warp reads in C-fragment order (row g, 4 bytes at
// column 2t) then fall in 8 distinct 4-bank groups, as with the +8-element padding of 16-bit tiles.
int64_t align16_odd(int64_t v) { return align16(v) / 16 % 2 ? align16(v) : align16(v) + 16; }

// Blocks of `warps` warps with `smem` bytes that fit on one SM at once (0: the block does not fit).
int occupancy(const DeviceLimits& d, int64_t smem, int warps) {
    if (smem > d.smem_per_block) return 0;
    const int by_smem = static_cast<int>(d.smem_per_sm / (smem + 1024));  // 1 KB reserved per block
    const int regs_per_warp = (d.regs_per_thread * 32 + 255) / 256 * 256;   // allocation granularity
    const int by_regs = d.regs_per_sm / (regs_per_warp * warps);
    const int by_warps = d.max_warps_per_sm / warps;
    return std::max(0, std::min({by_smem, by_regs, by_warps, 32}));
}

// Lexicographic preference: lower tier, then more resident warps per SM (up to 16, beyond which
// latency is hidden anyway), then bigger blocks (fewer copies of the weights per SM).
using Score = std::tuple<int, int, int>;
Score score(int tier, int warps, int blocks_per_sm) {
    return {-tier, std::min(16, warps * blocks_per_sm), warps};
}

// Whether plan p is the wgmma kernel's 12-warp block computing dL/dparams, which the planner puts
// before the lower tier among blocks of as many warps (backward_score) and before two m16 tiles per warp
// (plan_backward): at 32->64->16 a 12-warp block fits with dW on chip too, which only the mma.sync kernel
// has, and the wgmma block was faster than both (B = 2^21, fused step 0.717 vs 0.923 ms on chip and
// 0.844 ms with two tiles; forward + backward 0.836 vs 0.935 with two tiles; H200, run 94 of 2026-12-01,
// docs/fully_fused_mlp.md round 12). Unmeasured, so left to the tiers: the 8-warp width-128 blocks (one
// hidden layer keeps dW on chip there) and passes without dL/dparams.
bool preferred_wgmma(const BackwardPlan& p, bool want_dw) { return p.wgmma && want_dw && p.n_warps == 12; }

// Backward: weights resident, then at least 4 warps per SM, then more resident warps up to 8 (a
// 12-warp block counts 12), then the preferred wgmma block (preferred_wgmma), then the lower tier,
// then more warps up to 16, then bigger blocks.
// (Measured on the H200: 4 -> 8 warps per SM beat keeping dW on chip; at 64->64->64 one 12-warp
// block with dy read in place and dW in the block's global slot beat one 8-warp block with
// everything on chip, fused training step 1.526 vs 1.777 ms, forward + backward 1.624 vs 1.685 ms
// (2026-11-30, run 20); other ways past 8 warps per SM are unmeasured, so the lower tier wins there.)
using BackwardScore = std::tuple<int, int, int, int, int, int, int>;
BackwardScore backward_score(const BackwardPlan& p, bool want_dw, bool resident, bool enough, int tier) {
    const int warps = p.n_warps, per_sm = warps * p.blocks_per_sm;
    return {resident ? 1 : 0, enough ? 1 : 0, warps == 12 ? 12 : std::min(8, per_sm),
            preferred_wgmma(p, want_dw) ? 1 : 0, -tier, std::min(16, per_sm), warps};
}

ForwardPlan layout_forward(const Shape& s, int in_bytes, int out_bytes, int nw, bool resident) {
    ForwardPlan p;
    p.n_warps = nw;
    p.rows_per_warp = 16 * forward_m_tiles(static_cast<uint32_t>(s.width));
    p.weights_resident = resident;
    const int64_t R = int64_t(nw) * p.rows_per_warp;
    p.raw_stride = static_cast<int>(align16(int64_t(s.n_in) * in_bytes));
    p.x_stride = s.pin + 8;
    int64_t off = align16(resident ? s.resident_weight_bytes() : s.max_slot_bytes());
    p.off_raw = off;
    off += R * p.raw_stride;
    p.off_x = off;
    off += R * p.x_stride * 2;
    const int64_t out_row = align16(int64_t(s.n_out) * out_bytes);
    if (out_row <= int64_t(p.x_stride) * 2) {
        // The input tile is dead once layer 0 has read it: outputs are staged in its rows.
        p.off_out = p.off_x;
        p.out_stride = p.x_stride * 2;
    } else {
        p.off_out = off;
        p.out_stride = static_cast<int>(out_row);
        off += R * p.out_stride;
    }
    p.smem_bytes = off;
    return p;
}

BackwardPlan layout_backward(const Shape& s, int in_bytes, int dy_bytes, Activation act, bool want_dw, int nw, int m_tiles,
                             bool resident, bool stash_smem, bool dw_smem, bool dy_smem, bool wgmma) {
    BackwardPlan p;
    p.n_warps = nw;
    p.rows_per_warp = 16 * m_tiles;
    p.weights_resident = resident;
    p.stash_in_smem = stash_smem;
    p.dw_in_smem = dw_smem;
    p.dy_in_smem = dy_smem;
    p.wgmma = wgmma;
    const int64_t R = int64_t(nw) * p.rows_per_warp;
    p.raw_stride = static_cast<int>(align16(int64_t(s.n_in) * in_bytes));
    p.dy_stride = static_cast<int>(align16_odd(int64_t(s.n_out) * dy_bytes));
    // The backward kernel indexes the stash tiles and the hidden layers' dz tiles with the
    // compile-time pitch W + 8 (= act_stride); only the top layer's dz (pout columns) uses dz_stride.
    // The wgmma kernels' tiles are atoms of 64 columns without padding (the swizzle spreads the banks;
    // the strides are the atoms' rows), width / 64 atoms per stash and dz tile, and start on 1024-byte
    // boundaries (the swizzle's period); their dynamic shared memory gets 1024 bytes more, so that the
    // kernel can round its base up to such a boundary.
    p.x_stride = wgmma ? 64 : s.pin + 8;
    p.act_stride = wgmma ? 64 : s.width + 8;
    p.dz_stride = wgmma ? 64 : std::max(s.width, s.pout) + 8;
    const int64_t act_cols = wgmma ? s.width : p.act_stride, dz_cols = wgmma ? s.width : p.dz_stride;
    p.n_stashes = derivative_from_output(act) ? 1 : 2;
    auto tile_start = [&](int64_t o) { return wgmma ? align1024(o) : o; };
    int64_t off = align16(resident ? s.resident_weight_bytes() : s.max_slot_bytes());
    p.off_raw = off;
    off += R * p.raw_stride;
    p.off_dy = off;
    if (dy_smem) off += R * p.dy_stride;
    p.off_x = off = tile_start(off);
    off += R * p.x_stride * 2;
    const int64_t stash = int64_t(s.n_hidden) * p.n_stashes * R * act_cols * 2;
    if (stash_smem) {
        p.off_stash = off = tile_start(off);
        off += stash;
    } else {
        p.off_awork = off;
        off += 2 * R * p.act_stride * 2;
        p.stash_bytes_per_block = (stash + 255) / 256 * 256;
    }
    p.off_dz = off = tile_start(off);
    off += 2 * R * dz_cols * 2;
    p.off_dw = off;
    if (dw_smem && want_dw) off += align16(s.n_params() * 4);
    p.smem_bytes = off + (wgmma ? 1024 : 0);
    return p;
}

[[noreturn]] void throw_too_large(const Shape& s, const char* pass, const DeviceLimits& d) {
    throw UnsupportedError(msg("FullyFusedMLP: the ", pass, " pass of a width-", s.width, " network with ", s.pin,
                               " padded inputs and ", s.pout, " padded outputs does not fit in ", d.smem_per_block,
                               " bytes of shared memory per block (one layer's weights, [out x (in + 8)] 16-bit, must "
                               "fit); use BlasLtMLP (any width) or PortableMLP"));
}

}  // namespace

bool same_dw_order(const BackwardPlan& a, int grid_a, const BackwardPlan& b, int grid_b) {
    return a.wgmma == b.wgmma && a.n_warps == b.n_warps && a.rows_per_warp == b.rows_per_warp && grid_a == grid_b;
}

void set_plan_override(const PlanOverride& o) {
    std::lock_guard<std::mutex> lock(g_override_mutex);
    g_override = o;
}

PlanOverride plan_override() {
    std::lock_guard<std::mutex> lock(g_override_mutex);
    return g_override;
}

ForwardPlan plan_forward(const Shape& s, int in_bytes, int out_bytes, const DeviceLimits& d, const PlanOverride& o) {
    ForwardPlan best;
    Score best_score{};
    bool found = false;
    for (bool resident : {true, false}) {
        if (resident && o.stream_weights) continue;
        for (int nw : {8, 4, 2, 1}) {
            if (o.forward_warps && nw != o.forward_warps) continue;
            ForwardPlan p = layout_forward(s, in_bytes, out_bytes, nw, resident);
            p.blocks_per_sm = occupancy(d, p.smem_bytes, nw);
            if (p.blocks_per_sm == 0) continue;
            const bool enough = nw * p.blocks_per_sm >= 8;
            const Score sc = score((resident ? 0 : 1) + (enough ? 0 : 2), nw, p.blocks_per_sm);
            if (!found || sc > best_score) best = p, best_score = sc, found = true;
        }
    }
    if (!found) throw_too_large(s, "forward", d);
    return best;
}

namespace {

// The best plan with m_tiles m16 tiles per warp; nullopt when nothing fits.
std::optional<BackwardPlan> plan_backward_tiles(const Shape& s, int in_bytes, int dy_bytes, Activation act, bool want_dw,
                                                const DeviceLimits& d, const PlanOverride& o, int m_tiles) {
    BackwardPlan best;
    BackwardScore best_score{};
    bool found = false;
    // Modes from fastest to most frugal: everything on chip; dW accumulators in the block's global
    // slot; dy read in place (the 12-warp kernels only); the activation stash in global scratch;
    // weights reloaded per layer. Up to 8 resident warps per SM come before the tiers: the backward is
    // latency bound, and the H200 measured 8 warps with dW in global memory 1.75x faster than 4 warps
    // with everything on chip (32->128->16, 2026-11-29). A 12-warp block (kernels that allow it,
    // weights and stash on chip) comes before 8 warps (backward_score).
    const bool in_place = d.max_warps_per_block > kMaxWarps;  // the kernel can read dy in place
    int mode = 0;
    for (bool resident : {true, false})
        for (bool stash_smem : {true, false})
            for (bool dy_smem : {true, false})
                for (bool dw_smem : {true, false}) {
                    const int tier = mode++;
                    if ((resident && o.stream_weights) || (stash_smem && o.stash_in_global) ||
                        (dw_smem && o.dw_in_global) || (dy_smem && o.dy_global) || (!dy_smem && !in_place))
                        continue;
                    for (int nw : {12, 8, 4, 2, 1}) {
                        if (nw > d.max_warps_per_block || (o.backward_warps && nw != o.backward_warps)) continue;
                        if (nw > kMaxWarps && !(resident && stash_smem)) continue;
                        // dy in place is measured only as what makes a 12-warp block fit; smaller blocks
                        // take it when asked for (PlanOverride::dy_global), so their plans stay as before.
                        if (!dy_smem && nw <= kMaxWarps && !o.dy_global) continue;
                        // The wgmma kernel where it applies: its warps (12 at width 64, 8 at 128) of one
                        // tile, the kernel for ReLU hidden layers and a linear output (whose limits d are),
                        // shapes it covers, weights and stash on chip (12 warps have them anyway). (Its dW
                        // partials are in global memory.)
                        const bool wgmma = d.wgmma && !o.no_wgmma && nw == wgmma_backward_warps(s.width) &&
                                           m_tiles == 1 && resident && stash_smem && !dw_smem && act == Activation::ReLU &&
                                           wgmma_backward_shape(s.width, s.pin, s.pout, s.bias);
                        BackwardPlan p = layout_backward(s, in_bytes, dy_bytes, act, want_dw, nw, m_tiles, resident,
                                                         stash_smem, dw_smem, dy_smem, wgmma);
                        p.blocks_per_sm = occupancy(d, p.smem_bytes, nw);
                        if (p.blocks_per_sm == 0) continue;
                        const bool enough = nw * p.blocks_per_sm >= 4;
                        const BackwardScore sc = backward_score(p, want_dw, resident, enough, tier);
                        if (!found || sc > best_score) best = p, best_score = sc, found = true;
                    }
                }
    if (!found) return std::nullopt;
    return best;
}

}  // namespace

BackwardPlan plan_backward(const Shape& s, int in_bytes, int dy_bytes, Activation act, bool want_dw,
                           const DeviceLimits& d, const PlanOverride& o, const DeviceLimits* d_mt2) {
    const auto width = static_cast<uint32_t>(s.width);
    {
        // The kernel the plan will run for an override: its tiles, else one tile (two tiles never
        // have more than 8 warps or dy in place).
        const DeviceLimits& k = o.backward_m_tiles == 2 && d_mt2 ? *d_mt2 : d;
        const char* which = " (the NVIDIA kernels for ReLU hidden layers and a linear output, widths 16 to 64, one "
                            "m16 tile per warp)";
        const int w = o.backward_warps;
        if (w && w != 1 && w != 2 && w != 4 && w != 8 && w != 12)
            throw UnsupportedError(msg("FullyFusedMLP: ", w, " warps per backward block; valid: 1, 2, 4, 8, or 12",
                                       which));
        if (w > k.max_warps_per_block)
            throw UnsupportedError(msg("FullyFusedMLP: ", w, " warps per block exceed the backward kernel's ",
                                       k.max_warps_per_block, " at width ", s.width, "; 12 only for", which));
        if (w > kMaxWarps && (o.stream_weights || o.stash_in_global))
            throw UnsupportedError(msg("FullyFusedMLP: ", w, " warps per backward block need the weights and the "
                                       "activation stash in shared memory (no stream_weights / stash_in_global)"));
        if (o.dy_global && k.max_warps_per_block <= kMaxWarps)
            throw UnsupportedError(msg("FullyFusedMLP: the backward kernel of this width-", s.width,
                                       " network stages dL/doutput in shared memory; reading it in place is for",
                                       which));
    }
    if (o.backward_m_tiles) {
        if (!has_backward_m_tiles(width, o.backward_m_tiles))
            throw UnsupportedError(msg("FullyFusedMLP: no backward kernel with ", o.backward_m_tiles,
                                       " m16 tiles per warp at width ", s.width,
                                       " on this backend (1 always; 2 on NVIDIA up to width 64)"));
        const auto p = plan_backward_tiles(s, in_bytes, dy_bytes, act, want_dw, d, o, o.backward_m_tiles);
        if (!p) throw_too_large(s, "backward", d);
        return *p;
    }
    const auto one = plan_backward_tiles(s, in_bytes, dy_bytes, act, want_dw, d, o, 1);
    if (!one) throw_too_large(s, "backward", d);
    if (!d_mt2 || !has_backward_m_tiles(width, 2)) return *one;
    if (preferred_wgmma(*one, want_dw)) return *one;  // before two tiles (preferred_wgmma)
    // Two m16 tiles per warp halve the weight-fragment loads and the per-layer synchronisation per
    // row; they pay off when the plan keeps the resident warps (up to 8 per SM), the weights and the
    // stash on chip. H200, B = 2^21, fwd+bwd (2026-11-30): 32->64->16 0.898 vs 1.129 ms (dW then in
    // global memory) and 32->16->16 0.387 vs 0.484 ms; 64->64->64 only fits 4 warps with two tiles
    // and was 1.775 vs 1.548 ms.
    // Two tiles may not fit at all where one does (wide inputs, an override of the warps).
    const auto two = plan_backward_tiles(s, in_bytes, dy_bytes, act, want_dw, *d_mt2, o, 2);
    if (!two) return *one;
    auto warps_per_sm = [](const BackwardPlan& p) { return std::min(8, p.n_warps * p.blocks_per_sm); };
    const bool keeps = warps_per_sm(*two) >= warps_per_sm(*one) && two->weights_resident >= one->weights_resident &&
                       two->stash_in_smem >= one->stash_in_smem;
    return keeps ? *two : *one;
}

}  // namespace ffm

namespace {

struct FusedContext : Context {};  // backward recomputes the forward pass: nothing to keep

class FullyFusedMlp final : public CpuReferenceNetwork, private FusedLossStep {
public:
    FullyFusedMlp(const MlpLayout& layout, DType dtype, DType output_dtype)
        : CpuReferenceNetwork(layout, dtype, output_dtype, kCpuRounding) {}
    std::string name() const override { return "FullyFusedMLP"; }
    // The CPU backend always runs; GPUs of every GPU build (CUDA: sm_80+; HIP: gfx12) have kernels,
    // other GPUs get an error from the launcher.
    bool supports_device(Device) const override { return true; }
    // True for the CPU backend; on a GPU backward_backward_input is refused before any work, naming the
    // backends that have it (the fused second-order kernel does not exist yet).
    bool supports_backward_backward() const override { return true; }
    std::string backward_backward_refusal(Device d) const override {
        if (d.is_cpu()) return {};
        return "FullyFusedMLP has second derivatives on the CPU only (no fused second-order GPU kernel yet); use "
               "BlasLtMLP (tcnn's CutlassMLP) or PortableMLP (float32) on the GPU for double backward";
    }
    const FusedLossStep* fused_loss_step() const override { return this; }

private:
    // The CPU backend rounds where the kernels round (fully_fused_mlp_kernels.cuh): input, hidden
    // activations, every dz and the stashed f'(z) to the network dtype; sums in fp32.
    static constexpr MlpRounding kCpuRounding{true};

#if defined(TNN_WITH_GPU)
    void inference_gpu(const Stream& stream, ConstView input, View output, const void* params) const override {
        ffm::gpu_forward(m_layout, param_dtype(), stream, input, output, params);
    }

    // The backward kernel recomputes the forward pass: the context only marks where it came from.
    std::unique_ptr<Context> forward_gpu(const Stream& stream, ConstView input, View output, const void* params,
                                         bool) const override {
        ffm::gpu_forward(m_layout, param_dtype(), stream, input, output, params);
        return std::make_unique<FusedContext>();
    }

    void backward_gpu(const Stream& stream, const Context& ctx, ConstView input, ConstView, ConstView dL_doutput,
                      View* dL_dinput, void* dL_dparams, const void* params, GradMode mode) const override {
        if (!dynamic_cast<const FusedContext*>(&ctx))
            throw Error(msg(describe(), ": backward got a context that does not come from a GPU forward of this "
                                        "network"));
        ffm::gpu_backward(m_layout, param_dtype(), stream, input, dL_doutput, dL_dinput, dL_dparams, params, mode);
    }
#endif  // TNN_WITH_GPU

    // The ReLU / linear-output CUDA kernels carry the loss (the generic ones are at their register limit;
    // the gfx12 kernels have no fused step, and a CPU build no kernels at all).
    bool fuses_loss(Device device, LossKind kind) const override {
#if defined(TNN_WITH_CUDA)
        return m_layout.activation == Activation::ReLU && m_layout.output_activation == Activation::None &&
               !ffm::plan_override().generic_kernels && device.is_gpu() && is_fused_loss_kind(kind);
#else
        (void)device, (void)kind;
        return false;
#endif  // TNN_WITH_CUDA
    }

    void fused_loss_backward(const Stream& stream, ConstView input, ConstView target, LossKind kind, float loss_scale,
                             View values, View* dL_dinput, void* dL_dparams, const void* params) const override {
        const char* what = "fused training step";
        check_io(what, stream, input, nullptr, params);
        if (input.device.is_cpu())
            throw UnsupportedError(msg(describe(), " ", what, ": runs on the GPU only (on the CPU, run forward, "
                                       "the loss and backward)"));
        if (!is_fused_loss_kind(kind))
            throw UnsupportedError(msg(describe(), " ", what, ": the loss is not one the kernel computes (L2, L1, "
                                       "RelativeL2, RelativeL1, MAPE, SMAPE)"));
        const int64_t rows = input.rows, n_out = n_output_dims();
        check_arg(what, "target", target, rows, n_out, DType::f32, input.device);
        check_arg(what, "values", values, rows, n_out, DType::f32, input.device);
        if (dL_dinput) check_arg(what, "dL_dinput", *dL_dinput, rows, n_input_dims(), input.dtype, input.device);
        if (rows == 0) {
            zero_params_gradient(stream, input.device, dL_dparams, GradMode::overwrite);
            return;
        }
#if defined(TNN_WITH_GPU)
        const ffm::FusedLoss loss{kind, loss_scale, target, values, output_dtype() == DType::f32};
        ffm::gpu_backward(m_layout, param_dtype(), stream, input, ConstView(), dL_dinput, dL_dparams, params,
                          GradMode::overwrite, &loss);
#endif  // TNN_WITH_GPU
    }
};

}  // namespace

void register_fully_fused_mlp(Registry<NetworkFactory>& registry) {
    // Every dtype is listed so that the factory (not the generic check) reports unsupported ones
    // with the alternatives.
    registry.add("FullyFusedMLP",
                 NetworkFactory{DType::f16,
                                {DType::f16, DType::bf16, DType::f32, DType::f64},
                                [](const MlpLayout& l, DType t, DType out, ConfigReader&, const std::string& who) {
                                    if (t != DType::f16 && t != DType::bf16)
                                        throw DTypeError(msg(who, ": dtype ", dtype_name(t),
                                                             " is not supported (tensor cores take float16 or "
                                                             "bfloat16); use PortableMLP or BlasLtMLP for ",
                                                             dtype_name(t)));
                                    if (!ffm::is_supported_width(l.width))
                                        throw ConfigError(msg(who, ": n_neurons ", l.width,
                                                              " is not supported; valid choices: 16, 32, 64, 128 "
                                                              "(use BlasLtMLP, tcnn's CutlassMLP, or PortableMLP for "
                                                              "other widths)"));
                                    if (l.n_hidden_layers < 1)
                                        throw ConfigError(msg(who, ": n_hidden_layers must be at least 1 (use "
                                                                   "BlasLtMLP or PortableMLP for a single linear "
                                                                   "layer)"));
                                    return std::unique_ptr<Network>(new FullyFusedMlp(l, t, out));
                                }});
}

}  // namespace tnn
