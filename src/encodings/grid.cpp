// Multi-resolution grid encodings (tcnn's GridEncoding: otypes Grid, HashGrid, DenseGrid, TiledGrid):
// config parsing, tcnn's level table and parameter layout, its initialisation order, and the CPU
// reference of forward, backward and the second-order pass. Index/hash/interpolation maths lives in
// grid_math.h, shared with the GPU kernels.
//
// Parameters are level-major; within a level entry-major with the feature fastest. Parameter
// gradients are reduced one level per task, rows in order, so they never depend on the thread count.
#include "core/parallel.h"
#include "encodings/encoding_registry.h"
#include "encodings/grid_gpu.h"
#include "encodings/grid_math.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

namespace tnn {

namespace {

using grid::AxisWeight;
using grid::GridType;
using grid::HashType;
using grid::Interpolation;
using grid::kMaxDims;

const std::vector<std::string>& grid_type_names() {
    static const std::vector<std::string> names = {"Hash", "Dense", "Tiled"};
    return names;
}
const std::vector<std::string>& hash_names() {
    static const std::vector<std::string> names = {"Prime", "CoherentPrime", "ReversedPrime", "Rng", "BaseConvert"};
    return names;
}
const std::vector<std::string>& interpolation_names() {
    static const std::vector<std::string> names = {"Nearest", "Linear", "Smoothstep"};
    return names;
}

struct GridOptions {
    uint32_t n_dims = 3, n_levels = 16, n_features_per_level = 2, log2_hashmap_size = 19, base_resolution = 16;
    float per_level_scale = 2.0f;
    GridType type = GridType::Hash;
    HashType hash = HashType::CoherentPrime;
    Interpolation interpolation = Interpolation::Linear;
    bool stochastic_interpolation = false;
    bool deterministic = false;  // GPU: ordered (fixed-point) parameter-gradient reduction; the CPU always is
};

struct GridLevel {
    uint32_t offset = 0, size = 0;  // in entries (feature vectors)
    uint32_t resolution = 0;
    float scale = 0;
};

struct GridContext : Context {
    float max_level = 1000.0f;  // the value forward ran with, so backward matches it
};

class GridEncoding final : public Encoding, public AlignedOutput {
public:
    GridEncoding(const GridOptions& o, DType dtype, std::vector<GridLevel> levels, size_t n_params)
        : Encoding(o.n_dims, o.n_levels * o.n_features_per_level, n_params, dtype, dtype),
          m_options(o),
          m_levels(std::move(levels)) {
#ifdef TNN_WITH_GPU
        m_gpu.n_dims = o.n_dims;
        m_gpu.n_levels = o.n_levels;
        m_gpu.n_features = o.n_features_per_level;
        m_gpu.dtype = dtype;
        m_gpu.type = o.type;
        m_gpu.hash = o.hash;
        m_gpu.interpolation = o.interpolation;
        m_gpu.stochastic_interpolation = o.stochastic_interpolation;
        m_gpu.deterministic = o.deterministic;
        m_gpu.n_params = n_params;
        for (uint32_t l = 0; l < o.n_levels; ++l) {
            const GridLevel& L = m_levels[l];
            m_gpu.levels[l] = grid_gpu::make_level_info(o.type, o.n_dims, L.offset, L.size, L.resolution, L.scale);
        }
#endif  // TNN_WITH_GPU
    }

    std::string name() const override {
        return m_options.type == GridType::Hash ? "HashGrid"
                                                : (m_options.type == GridType::Dense ? "DenseGrid" : "TiledGrid");
    }
    json hyperparams() const override {
        json j = {{"otype", "Grid"},
                  {"type", grid_type_names()[static_cast<size_t>(m_options.type)]},
                  {"n_levels", m_options.n_levels},
                  {"n_features_per_level", m_options.n_features_per_level},
                  {"base_resolution", m_options.base_resolution},
                  {"per_level_scale", m_options.per_level_scale},
                  {"interpolation", interpolation_names()[static_cast<size_t>(m_options.interpolation)]},
                  {"hash", hash_names()[static_cast<size_t>(m_options.hash)]}};
        if (m_options.type == GridType::Hash) j["log2_hashmap_size"] = m_options.log2_hashmap_size;
        if (m_options.stochastic_interpolation) j["stochastic_interpolation"] = true;
        if (m_options.deterministic) j["deterministic"] = true;
        return j;
    }

    // tcnn's order of draws (tcnn_uniform_init), values in [-1e-4, 1e-4).
    void init_params(Pcg32& rng, float* params) const override { tcnn_uniform_init(rng, n_params(), -1e-4f, 1e-4f, params); }

    float padding_value() const override { return 0.0f; }
    void set_max_level(float max_level) override { m_max_level.store(max_level); }
    uint32_t required_output_alignment() const override { return m_options.n_features_per_level; }
    // GPU kernels exist for fp32, fp16 and bf16 (fp64 is the CPU oracle's precision).
    bool supports_device(Device d) const override { return d.is_cpu() || param_dtype() != DType::f64; }
    bool supports_backward_backward() const override { return true; }

private:
    // Rows per parallel chunk for the row-parallel passes (rows are independent there).
    static constexpr int64_t kGrain = 128;

    template <typename F> void with_type(F&& f) const { dispatch_dtype(param_dtype(), f); }

    uint32_t n_feat() const { return m_options.n_features_per_level; }  // features per level
    uint32_t n_corners() const { return 1u << m_options.n_dims; }
    bool interpolates() const { return m_options.interpolation != Interpolation::Nearest; }
    bool active(uint32_t level, float max_level) const {
        return grid::level_active(level, max_level, m_options.n_levels, m_options.n_features_per_level);
    }

    // Weights of row r's position at one level (in the acc type: fp64 for the fp64 reference).
    template <typename A> void locate(ConstView in, int64_t r, const GridLevel& L, AxisWeight<A>* axis) const {
        for (uint32_t d = 0; d < m_options.n_dims; ++d)
            axis[d] = grid::axis_weight<A>(load_input<A>(in, r, d), static_cast<A>(L.scale), m_options.interpolation);
    }
    // Entry index of the vertex at `pos` in level L.
    uint32_t entry(const GridLevel& L, const uint32_t* pos) const {
        return grid::grid_index(m_options.type, m_options.hash, m_options.n_dims, L.size, L.resolution, pos);
    }
    template <typename A> uint32_t corner_entry(const GridLevel& L, const AxisWeight<A>* axis, uint32_t corner) const {
        uint32_t cell[kMaxDims], pos[kMaxDims];
        for (uint32_t d = 0; d < m_options.n_dims; ++d) cell[d] = axis[d].cell;
        grid::corner_position(m_options.n_dims, cell, corner, pos);
        return entry(L, pos);
    }

    // ---- forward: y_{l,f} = sum_c W_c V_c[f] (Nearest: the value at the lower vertex) -------------

    static std::unique_ptr<GridContext> make_context(float max_level) {
        auto ctx = std::make_unique<GridContext>();
        ctx->max_level = max_level;
        return ctx;
    }

    std::unique_ptr<Context> forward_cpu(const Stream&, ConstView in, View out, const void* params,
                                         bool) const override {
        auto ctx = make_context(m_max_level.load());
        inference_rows(in, out, params, ctx->max_level);
        return ctx;
    }

    void inference_cpu(const Stream&, ConstView in, View out, const void* params) const override {
        inference_rows(in, out, params, m_max_level.load());
    }

    void inference_rows(ConstView in, View out, const void* params, float max_level) const {
        with_type([&](auto t) {
            forward_rows<decltype(t)>(in, out, static_cast<const decltype(t)*>(params), max_level);
        });
    }

#ifdef TNN_WITH_GPU
    // ---- GPU passes (grid.cu): the same level table, the switched-off levels as a count -------------

    uint32_t n_active_levels(float max_level) const {
        return grid::n_active_levels(max_level, m_options.n_levels, m_options.n_features_per_level);
    }

    std::unique_ptr<Context> forward_gpu(const Stream& stream, ConstView in, View out, const void* params,
                                         bool) const override {
        auto ctx = make_context(m_max_level.load());
        grid_gpu::forward(m_gpu, stream, in, out, params, n_active_levels(ctx->max_level));
        return ctx;
    }

    void inference_gpu(const Stream& stream, ConstView in, View out, const void* params) const override {
        grid_gpu::forward(m_gpu, stream, in, out, params, n_active_levels(m_max_level.load()));
    }

    void backward_gpu(const Stream& stream, const Context& ctx, ConstView in, ConstView, ConstView dL_dout,
                      View* dL_din, void* dL_dparams, const void* params, GradMode mode) const override {
        grid_gpu::backward(m_gpu, stream, in, dL_dout, dL_din, dL_dparams, params, mode,
                           n_active_levels(context_max_level(ctx)));
    }

    void backward_backward_input_gpu(const Stream& stream, const Context& ctx, ConstView in, ConstView dL_ddLdin,
                                     ConstView dL_dout, View* dL_ddLdout, View* dL_din, void* dL_dparams,
                                     const void* params, GradMode mode) const override {
        grid_gpu::backward_backward_input(m_gpu, stream, in, dL_ddLdin, dL_dout, dL_ddLdout, dL_din, dL_dparams,
                                          params, mode, n_active_levels(context_max_level(ctx)));
    }
#endif  // TNN_WITH_GPU

    template <typename T> void forward_rows(ConstView in, View out, const T* params, float max_level) const {
        using A = acc_t<T>;
        parallel_for(in.rows, kGrain, [&](int64_t r0, int64_t r1) {
            AxisWeight<A> axis[kMaxDims];
            std::vector<A> y(n_feat());
            // Level-outer within a chunk: one level's table stays in cache across the chunk's rows.
            for (uint32_t l = 0; l < m_options.n_levels; ++l)
                for (int64_t r = r0; r < r1; ++r) {
                    const GridLevel& L = m_levels[l];
                    std::fill(y.begin(), y.end(), A(0));
                    if (active(l, max_level)) {
                        locate(in, r, L, axis);
                        const T* V = params + static_cast<size_t>(L.offset) * n_feat();
                        if (!interpolates()) {
                            const size_t e = static_cast<size_t>(corner_entry(L, axis, 0)) * n_feat();
                            for (uint32_t f = 0; f < n_feat(); ++f) y[f] = static_cast<A>(V[e + f]);
                        } else {
                            for (uint32_t c = 0; c < n_corners(); ++c) {
                                const A W = grid::corner_weight(m_options.n_dims, axis, c);
                                const size_t e = static_cast<size_t>(corner_entry(L, axis, c)) * n_feat();
                                // fma, in corner order, as tcnn's kernel accumulates (bit-identical in fp32).
                                for (uint32_t f = 0; f < n_feat(); ++f)
                                    y[f] = hd::fma(W, static_cast<A>(V[e + f]), y[f]);
                            }
                        }
                    }
                    for (uint32_t f = 0; f < n_feat(); ++f) store_output<T>(out, r, l * n_feat() + f, y[f]);
                }
        });
    }

    // ---- backward -------------------------------------------------------------------------------
    // dL/dV_c[f] += W_c g_{l,f} (Nearest: the lower vertex; stochastic: one sampled corner),
    // dL/dx_d = sum_l sum_c dW_c/dx_d sum_f g_{l,f} (V_c[f] - V_0[f])  (grid::value_step: the weights
    // sum to 1, so their derivatives sum to 0 and corner 0's value can be taken off every corner's).

    static float context_max_level(const Context& ctx) {
        const auto* c = dynamic_cast<const GridContext*>(&ctx);
        if (!c) throw Error("grid encoding: backward got a context from another module");
        return c->max_level;
    }

    void backward_cpu(const Stream&, const Context& ctx, ConstView in, ConstView, ConstView dL_dout, View* dL_din,
                      void* dL_dparams, const void* params, GradMode mode) const override {
        const float max_level = context_max_level(ctx);
        with_type([&](auto t) {
            using T = decltype(t);
            if (dL_dparams) param_gradients<T>(in, dL_dout, nullptr, static_cast<T*>(dL_dparams), mode, max_level);
            if (dL_din) input_gradients<T>(in, dL_dout, *dL_din, static_cast<const T*>(params), max_level);
        });
    }

    // Parameter gradients, one level per task: each level owns its slice of the gradient vector, and
    // rows are added in order. With v (the second-order pass), the weight of corner c is
    // E_c = sum_g v_g dW_c/dx_g instead of W_c.
    template <typename T> void param_gradients(ConstView in, ConstView dL_dout, const ConstView* v, T* dL_dparams,
                                               GradMode mode, float max_level) const {
        using A = acc_t<T>;
        parallel_for(m_options.n_levels, 1, [&](int64_t l0, int64_t l1) {
            for (int64_t li = l0; li < l1; ++li) {
                const uint32_t l = static_cast<uint32_t>(li);
                const GridLevel& L = m_levels[l];
                std::vector<A> acc(static_cast<size_t>(L.size) * n_feat(), A(0));
                const bool contributes = active(l, max_level) && (!v || interpolates());
                AxisWeight<A> axis[kMaxDims];
                A g[8], vg[kMaxDims], grad[kMaxDims];
                for (int64_t r = 0; contributes && r < in.rows; ++r) {
                    locate(in, r, L, axis);
                    for (uint32_t f = 0; f < n_feat(); ++f) g[f] = load_as<T>(dL_dout, r, l * n_feat() + f);
                    auto add = [&](uint32_t corner, A weight) {
                        const size_t e = static_cast<size_t>(corner_entry(L, axis, corner)) * n_feat();
                        for (uint32_t f = 0; f < n_feat(); ++f) acc[e + f] += weight * g[f];
                    };
                    if (v) {
                        for (uint32_t d = 0; d < m_options.n_dims; ++d) vg[d] = load_input<A>(*v, r, d);
                        for (uint32_t c = 0; c < n_corners(); ++c) {
                            grid::corner_weight_gradient(m_options.n_dims, axis, c, grad);
                            A E = A(0);
                            for (uint32_t d = 0; d < m_options.n_dims; ++d) E += vg[d] * grad[d];
                            add(c, E);
                        }
                    } else if (!interpolates()) {
                        add(0, A(1));
                    } else if (m_options.stochastic_interpolation) {
                        // tcnn: one corner per element and level, upper along d when sample < w_d.
                        const float s =
                            grid::stochastic_sample(static_cast<uint32_t>(r + static_cast<int64_t>(l) * in.rows));
                        uint32_t corner = 0;
                        for (uint32_t d = 0; d < m_options.n_dims; ++d)
                            if (!(static_cast<A>(s) >= axis[d].w)) corner |= 1u << d;
                        add(corner, A(1));
                    } else {
                        for (uint32_t c = 0; c < n_corners(); ++c)
                            add(c, grid::corner_weight(m_options.n_dims, axis, c));
                    }
                }
                if (!contributes && mode == GradMode::accumulate) continue;
                T* out = dL_dparams + static_cast<size_t>(L.offset) * n_feat();
                for (size_t i = 0; i < acc.size(); ++i) write_param_gradient(out + i, acc[i], mode);
            }
        });
    }

    template <typename T>
    void input_gradients(ConstView in, ConstView dL_dout, View dL_din, const T* params, float max_level) const {
        using A = acc_t<T>;
        parallel_for(in.rows, kGrain, [&](int64_t r0, int64_t r1) {
            AxisWeight<A> axis[kMaxDims];
            A dx[kMaxDims], grad[kMaxDims];
            for (int64_t r = r0; r < r1; ++r) {
                for (uint32_t d = 0; d < m_options.n_dims; ++d) dx[d] = A(0);
                for (uint32_t l = 0; interpolates() && l < m_options.n_levels; ++l) {
                    if (!active(l, max_level)) continue;
                    const GridLevel& L = m_levels[l];
                    locate(in, r, L, axis);
                    const T* V = params + static_cast<size_t>(L.offset) * n_feat();
                    const size_t e0 = static_cast<size_t>(corner_entry(L, axis, 0)) * n_feat();
                    for (uint32_t c = 0; c < n_corners(); ++c) {
                        const size_t e = static_cast<size_t>(corner_entry(L, axis, c)) * n_feat();
                        A gv = A(0);
                        for (uint32_t f = 0; f < n_feat(); ++f)
                            gv += load_as<T>(dL_dout, r, l * n_feat() + f) *
                                  grid::value_step(static_cast<A>(V[e + f]), static_cast<A>(V[e0 + f]));
                        grid::corner_weight_gradient(m_options.n_dims, axis, c, grad);
                        for (uint32_t d = 0; d < m_options.n_dims; ++d) dx[d] += grad[d] * gv;
                    }
                }
                for (uint32_t d = 0; d < m_options.n_dims; ++d) store_input(dL_din, r, d, dx[d]);
            }
        });
    }

    // ---- second-order pass ---------------------------------------------------------------------
    // L' depends on dL/dx_g = sum_l sum_c dW_c/dx_g sum_f g_{l,f} V_c[f]; with v = dL'/d(dL/dx):
    //   dL'/dg_{l,f} = sum_c E_c V_c[f],  E_c = sum_g v_g dW_c/dx_g
    //   dL'/dV_c[f] += g_{l,f} E_c
    //   dL'/dx_h     = sum_l sum_c (sum_g v_g d2W_c/(dx_g dx_h)) sum_f g_{l,f} V_c[f]
    // Nearest has zero derivatives in x, so all three vanish. The rows' sums take V_c - V_0 for V_c, as
    // dL/dx does: E_c and the Hessian terms sum to 0 over the corners as well.

    void backward_backward_input_cpu(const Stream&, const Context& ctx, ConstView in, ConstView dL_ddLdin,
                                     ConstView dL_dout, View* dL_ddLdout, View* dL_din, void* dL_dparams,
                                     const void* params, GradMode mode) const override {
        const float max_level = context_max_level(ctx);
        with_type([&](auto t) {
            using T = decltype(t);
            if (dL_dparams) param_gradients<T>(in, dL_dout, &dL_ddLdin, static_cast<T*>(dL_dparams), mode, max_level);
            if (dL_ddLdout || dL_din)
                second_order_rows<T>(in, dL_ddLdin, dL_dout, dL_ddLdout, dL_din, static_cast<const T*>(params),
                                     max_level);
        });
    }

    template <typename T> void second_order_rows(ConstView in, ConstView v_in, ConstView dL_dout, View* dL_ddLdout,
                                                 View* dL_din, const T* params, float max_level) const {
        using A = acc_t<T>;
        parallel_for(in.rows, kGrain, [&](int64_t r0, int64_t r1) {
            AxisWeight<A> axis[kMaxDims];
            A v[kMaxDims], dx[kMaxDims], grad[kMaxDims], hv[kMaxDims], dg[8];
            for (int64_t r = r0; r < r1; ++r) {
                for (uint32_t d = 0; d < m_options.n_dims; ++d) {
                    v[d] = load_input<A>(v_in, r, d);
                    dx[d] = A(0);
                }
                for (uint32_t l = 0; l < m_options.n_levels; ++l) {
                    for (uint32_t f = 0; f < n_feat(); ++f) dg[f] = A(0);
                    if (active(l, max_level) && interpolates()) {
                        const GridLevel& L = m_levels[l];
                        locate(in, r, L, axis);
                        const T* V = params + static_cast<size_t>(L.offset) * n_feat();
                        const size_t e0 = static_cast<size_t>(corner_entry(L, axis, 0)) * n_feat();
                        for (uint32_t c = 0; c < n_corners(); ++c) {
                            const size_t e = static_cast<size_t>(corner_entry(L, axis, c)) * n_feat();
                            grid::corner_weight_gradient(m_options.n_dims, axis, c, grad);
                            A E = A(0);
                            for (uint32_t d = 0; d < m_options.n_dims; ++d) E += v[d] * grad[d];
                            A gv = A(0);
                            for (uint32_t f = 0; f < n_feat(); ++f) {
                                const A val = grid::value_step(static_cast<A>(V[e + f]), static_cast<A>(V[e0 + f]));
                                dg[f] += E * val;
                                gv += load_as<T>(dL_dout, r, l * n_feat() + f) * val;
                            }
                            if (dL_din) {
                                grid::corner_weight_hessian_dot(m_options.n_dims, axis, c, v, hv);
                                for (uint32_t d = 0; d < m_options.n_dims; ++d) dx[d] += hv[d] * gv;
                            }
                        }
                    }
                    if (dL_ddLdout)
                        for (uint32_t f = 0; f < n_feat(); ++f)
                            store_output<T>(*dL_ddLdout, r, l * n_feat() + f, dg[f]);
                }
                if (dL_din)
                    for (uint32_t d = 0; d < m_options.n_dims; ++d) store_input(*dL_din, r, d, dx[d]);
            }
        });
    }

    GridOptions m_options;
    std::vector<GridLevel> m_levels;
#ifdef TNN_WITH_GPU
    grid_gpu::GridDesc m_gpu;  // the level table as the kernels read it
#endif  // TNN_WITH_GPU
    // Coarse-to-fine: tcnn's default of 1000 leaves every level on.
    std::atomic<float> m_max_level{1000.0f};
};

// The level table of tcnn's GridEncodingTemplated constructor.
std::vector<GridLevel> make_levels(const GridOptions& o, uint64_t* total_entries) {
    std::vector<GridLevel> levels(o.n_levels);
    const float log2_scale = std::log2(o.per_level_scale);
    uint64_t offset = 0;
    for (uint32_t l = 0; l < o.n_levels; ++l) {
        GridLevel& L = levels[l];
        L.scale = grid::grid_scale(l, log2_scale, o.base_resolution);
        L.resolution = grid::grid_resolution(L.scale);
        const uint64_t size =
            grid::level_entries(o.type, o.n_dims, L.resolution, o.base_resolution, o.log2_hashmap_size);
        L.offset = static_cast<uint32_t>(offset);
        L.size = static_cast<uint32_t>(size);
        offset += size;
        if (offset * o.n_features_per_level > 0xFFFFFFFFull) break;  // reported by the caller
    }
    *total_entries = offset;
    return levels;
}

std::unique_ptr<Encoding> create_grid(const std::string& otype, uint32_t n_dims, DType dtype, ConfigReader& cfg) {
    GridOptions o;
    const std::string where = cfg.where();
    if (n_dims < 1 || n_dims > kMaxDims)
        throw ConfigError(msg(where, ": grids encode 1 to ", kMaxDims, " input dimensions, got ", n_dims));
    o.n_dims = n_dims;

    const std::string default_type =
        iequals(otype, "TiledGrid") ? "Tiled" : (iequals(otype, "DenseGrid") ? "Dense" : "Hash");
    std::string type = cfg.get_choice("type", default_type, {"Hash", "Dense", "Tiled", "Tile"});
    if (type == "Tile") type = "Tiled";  // tcnn's alias
    o.type = type == "Hash" ? GridType::Hash : (type == "Dense" ? GridType::Dense : GridType::Tiled);

    o.n_features_per_level = cfg.get_uint("n_features_per_level", 2);
    if (o.n_features_per_level != 1 && o.n_features_per_level != 2 && o.n_features_per_level != 4 &&
        o.n_features_per_level != 8)
        cfg.fail("n_features_per_level", msg("must be 1, 2, 4 or 8, got ", o.n_features_per_level));

    // tcnn lets "n_features" (or "n_grid_features") set n_levels * n_features_per_level instead.
    const char* n_features_key =
        cfg.has("n_features") ? "n_features" : (cfg.has("n_grid_features") ? "n_grid_features" : nullptr);
    cfg.mark_known("n_features");
    cfg.mark_known("n_grid_features");
    if (n_features_key) {
        if (cfg.has("n_levels"))
            cfg.fail(n_features_key, "and 'n_levels' may not both be given (one determines the other)");
        const uint32_t n_features =
            cfg.get_uint(n_features_key, 32, o.n_features_per_level, grid::kMaxLevels * o.n_features_per_level);
        if (n_features % o.n_features_per_level != 0)
            cfg.fail(n_features_key, msg("must be a multiple of n_features_per_level = ", o.n_features_per_level,
                                         ", got ", n_features));
        o.n_levels = n_features / o.n_features_per_level;
    } else {
        o.n_levels = cfg.get_uint("n_levels", 16, 1, grid::kMaxLevels);
    }

    o.log2_hashmap_size = cfg.get_uint("log2_hashmap_size", 19, 0, 31);
    o.base_resolution = cfg.get_uint("base_resolution", 16, 1, 0x7FFFFFFFu);
    // tcnn's default: 2 per level; Dense grids reach 256 vertices at the finest level. With a single
    // level the scale never matters (tcnn would divide by zero; we take 1).
    float default_scale = 2.0f;
    if (o.type == GridType::Dense)
        default_scale = o.n_levels > 1 ? std::exp(std::log(256.0f / static_cast<float>(o.base_resolution)) /
                                                  static_cast<float>(o.n_levels - 1))
                                       : 1.0f;
    o.per_level_scale = static_cast<float>(cfg.get_float_exclusive_min("per_level_scale", default_scale, 0.0, 1e30));

    o.interpolation = get_enum_choice<Interpolation>(cfg, "interpolation", "Linear", interpolation_names());
    o.hash = get_enum_choice<HashType>(cfg, "hash", "CoherentPrime", hash_names());
    o.stochastic_interpolation = cfg.get_bool("stochastic_interpolation", false);
    o.deterministic = cfg.get_bool("deterministic", false);
    if (cfg.get_bool("fixed_point_pos", false))
        cfg.fail("fixed_point_pos",
                 "true is not supported (tcnn uses fixed-point positions only in its JIT-fused "
                 "kernels); remove the key or set it to false");

    // Cells are 32-bit signed integers (tcnn's (int)floorf(pos)) and resolutions 32-bit unsigned: a level
    // whose scale reaches 2^31 (or overflows to inf) has no well-defined cells. Refused rather than left
    // to a saturated or wrapped resolution, which tcnn's arithmetic gives such levels.
    const float finest = grid::grid_scale(o.n_levels - 1, std::log2(o.per_level_scale), o.base_resolution);
    const float coarsest = grid::grid_scale(0, std::log2(o.per_level_scale), o.base_resolution);
    if (!(std::max(finest, coarsest) < 2147483648.0f))
        throw ConfigError(msg(where, ": level ", finest >= coarsest ? o.n_levels - 1 : 0u, " would have scale ",
                              std::max(finest, coarsest), "; every level's scale (base_resolution * per_level_scale^level"
                              " - 1) must be below 2^31: lower n_levels, base_resolution or per_level_scale"));
    uint64_t total_entries = 0;
    std::vector<GridLevel> levels = make_levels(o, &total_entries);
    const uint64_t n_params = total_entries * o.n_features_per_level;
    if (n_params > 0xFFFFFFFFull)
        throw ConfigError(msg(where,
                              ": the grid needs more than 2^32 - 1 parameters (tcnn indexes them with 32 bits); "
                              "lower n_levels, base_resolution, per_level_scale or log2_hashmap_size"));
    return std::unique_ptr<Encoding>(new GridEncoding(o, dtype, std::move(levels), static_cast<size_t>(n_params)));
}

}  // namespace

void register_grid_encodings(Registry<EncodingFactory>& r) {
    for (const char* otype : {"Grid", "HashGrid", "DenseGrid", "TiledGrid"})
        r.add(otype, [otype = std::string(otype)](uint32_t n_dims, DType dtype, ConfigReader& cfg) {
            return create_grid(otype, n_dims, dtype, cfg);
        });
}

}  // namespace tnn
