// Permuto encoding (multiresolution hashed permutohedral lattices; Rosu & Behnke's PermutoSDF, tcnn's
// `Permuto`): config parsing with tcnn's keys, the level table, tcnn's initialisation, and the CPU
// reference of forward, backward and the second-order pass. The lattice maths is permuto_math.h,
// shared with the GPU kernels (permuto.cu).
//
// Parameters are level-major; each level is a table of 2^log2_hashmap_size entries of
// n_features_per_level values (feature fastest). Parameter gradients are reduced one level per task,
// rows in order, so they never depend on the thread count.
#include "encodings/permuto.h"

#include "core/parallel.h"
#include "encodings/encoding_registry.h"
#include "encodings/permuto_gpu.h"
#include "encodings/permuto_math.h"

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <vector>

namespace tnn {

PermutoLevels permuto_levels(uint32_t n_dims, uint32_t n_levels, float base_scale, float per_level_scale,
                             uint32_t seed) {
    PermutoLevels L;
    L.n_dims = n_dims;
    L.n_levels = n_levels;
    L.level_scale.resize(n_levels);
    L.scale.resize(static_cast<size_t>(n_levels) * n_dims);
    L.shift.resize(static_cast<size_t>(n_levels) * n_dims);
    for (uint32_t l = 0; l < n_levels; ++l) {
        L.level_scale[l] = permuto::level_scale(base_scale, per_level_scale, l);
        for (uint32_t i = 0; i < n_dims; ++i)
            L.scale[static_cast<size_t>(l) * n_dims + i] = L.level_scale[l] * permuto::dim_factor(i);
        permuto::level_shifts(seed, l, n_dims, L.shift.data() + static_cast<size_t>(l) * n_dims);
    }
    return L;
}

namespace {

using permuto::kMaxDims;
using permuto::Simplex;

struct PermutoOptions {
    uint32_t n_dims = 3, n_levels = 16, n_features_per_level = 2, log2_hashmap_size = 19;
    float base_scale = 16.0f, per_level_scale = 2.0f;
    uint32_t max_input_grad_dims = 3, seed = 1337;
    bool deterministic = false;  // GPU: ordered (fixed-point) parameter-gradient reduction; the CPU always is
};

size_t permuto_n_params(const PermutoOptions& o) {
    return (static_cast<size_t>(o.n_levels) << o.log2_hashmap_size) * o.n_features_per_level;
}

struct PermutoContext : Context {
    float max_level = 1000.0f;  // the value forward ran with, so backward matches it
};

class PermutoEncoding final : public Encoding, public AlignedOutput {
public:
    PermutoEncoding(const PermutoOptions& o, DType dtype, PermutoLevels levels)
        : Encoding(o.n_dims, o.n_levels * o.n_features_per_level, permuto_n_params(o), dtype, dtype),
          m_options(o),
          m_levels(std::move(levels)) {
#ifdef TNN_WITH_GPU
        m_gpu.n_dims = o.n_dims;
        m_gpu.n_levels = o.n_levels;
        m_gpu.n_features = o.n_features_per_level;
        m_gpu.log2_table = o.log2_hashmap_size;
        m_gpu.seed = o.seed;
        m_gpu.n_grad_dims = o.max_input_grad_dims;
        m_gpu.dtype = dtype;
        m_gpu.deterministic = o.deterministic;
        m_gpu.n_params = n_params();
        for (uint32_t l = 0; l < o.n_levels; ++l) m_gpu.scales[l] = m_levels.level_scale[l];
        for (uint32_t i = 0; i < o.n_dims; ++i) m_gpu.dim_factors[i] = permuto::dim_factor(i);
#endif  // TNN_WITH_GPU
    }

    std::string name() const override { return "Permuto"; }
    json hyperparams() const override {
        json j = {{"otype", "Permuto"},
                  {"n_levels", m_options.n_levels},
                  {"n_features_per_level", m_options.n_features_per_level},
                  {"log2_hashmap_size", m_options.log2_hashmap_size},
                  {"base_scale", m_options.base_scale},
                  {"per_level_scale", m_options.per_level_scale},
                  {"interpolation", "Linear"},
                  {"max_input_grad_dims", m_options.max_input_grad_dims},
                  {"seed", m_options.seed}};
        if (m_options.deterministic) j["deterministic"] = true;
        return j;
    }

    // tcnn's order of draws (tcnn_uniform_init), values in [-1e-4, 1e-4).
    void init_params(Pcg32& rng, float* params) const override {
        tcnn_uniform_init(rng, n_params(), -1e-4f, 1e-4f, params);
    }

    float padding_value() const override { return 0.0f; }  // tcnn pads Permuto outputs with 0
    void set_max_level(float max_level) override { m_max_level.store(max_level); }
    uint32_t required_output_alignment() const override { return m_options.n_features_per_level; }
    // GPU kernels exist for fp32, fp16 and bf16 (fp64 is the CPU oracle's precision).
    bool supports_device(Device d) const override { return d.is_cpu() || param_dtype() != DType::f64; }
    bool supports_backward_backward() const override { return true; }

private:
    static constexpr int64_t kGrain = 128;  // rows per parallel chunk of the row-parallel passes

    uint32_t n_dims() const { return m_options.n_dims; }
    uint32_t n_feat() const { return m_options.n_features_per_level; }
    uint32_t n_grad_dims() const { return m_options.max_input_grad_dims; }
    uint32_t table_mask() const { return static_cast<uint32_t>((uint64_t(1) << m_options.log2_hashmap_size) - 1); }
    size_t level_values() const { return (size_t(1) << m_options.log2_hashmap_size) * n_feat(); }
    bool active(uint32_t level, float max_level) const {
        return grid::level_active(level, max_level, m_options.n_levels, m_options.n_features_per_level);
    }
    uint32_t n_active_levels(float max_level) const {
        return grid::n_active_levels(max_level, m_options.n_levels, m_options.n_features_per_level);
    }

    // Row r's simplex at level l, its weights and the entries of its vertices (value offsets within
    // the level).
    template <typename A> struct Point {
        Simplex<A, kMaxDims> s;
        A w[kMaxDims + 1];
        size_t value[kMaxDims + 1];
    };
    template <typename A> void locate(ConstView in, int64_t r, uint32_t l, Point<A>& p) const {
        A x[kMaxDims];
        for (uint32_t i = 0; i < n_dims(); ++i) x[i] = load_input<A>(in, r, i);
        permuto::locate(n_dims(), x, m_levels.shift_of(l), m_levels.scale_of(l), p.s);
        permuto::barycentric(n_dims(), p.s.rest, p.s.rank, A(1), p.w);
        for (uint32_t k = 0; k <= n_dims(); ++k)
            p.value[k] =
                static_cast<size_t>(permuto::vertex_entry(n_dims(), p.s.rem0, p.s.rank, k, table_mask())) * n_feat();
    }
    // dW_k along the row's v (the second-order pass's dL'/d(dL/dx)).
    template <typename A> void tangent(ConstView v, int64_t r, uint32_t l, const Point<A>& p, A* E) const {
        A vv[kMaxDims];
        for (uint32_t i = 0; i < n_dims(); ++i) vv[i] = load_input<A>(v, r, i);
        permuto::weight_tangent(n_dims(), n_grad_dims(), p.s, vv, m_levels.scale_of(l), E);
    }

    static float context_max_level(const Context& ctx) {
        const auto* c = dynamic_cast<const PermutoContext*>(&ctx);
        if (!c) throw Error("Permuto encoding: backward got a context from another module");
        return c->max_level;
    }

    // ---- forward: y_{l,f} = sum_k w_k V_k[f] ---------------------------------------------------------

    static std::unique_ptr<PermutoContext> make_context(float max_level) {
        auto ctx = std::make_unique<PermutoContext>();
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
        dispatch_dtype(param_dtype(), [&](auto t) {
            forward_rows<decltype(t)>(in, out, static_cast<const decltype(t)*>(params), max_level);
        });
    }

#ifdef TNN_WITH_GPU
    // ---- GPU passes (permuto.cu) -------------------------------------------------------------------------

    std::unique_ptr<Context> forward_gpu(const Stream& stream, ConstView in, View out, const void* params,
                                         bool) const override {
        auto ctx = make_context(m_max_level.load());
        permuto_gpu::forward(m_gpu, stream, in, out, params, n_active_levels(ctx->max_level));
        return ctx;
    }

    void inference_gpu(const Stream& stream, ConstView in, View out, const void* params) const override {
        permuto_gpu::forward(m_gpu, stream, in, out, params, n_active_levels(m_max_level.load()));
    }

    void backward_gpu(const Stream& stream, const Context& ctx, ConstView in, ConstView, ConstView dL_dout,
                      View* dL_din, void* dL_dparams, const void* params, GradMode mode) const override {
        permuto_gpu::backward(m_gpu, stream, in, dL_dout, dL_din, dL_dparams, params, mode,
                              n_active_levels(context_max_level(ctx)));
    }

    void backward_backward_input_gpu(const Stream& stream, const Context& ctx, ConstView in, ConstView dL_ddLdin,
                                     ConstView dL_dout, View* dL_ddLdout, View* dL_din, void* dL_dparams,
                                     const void* params, GradMode mode) const override {
        permuto_gpu::backward_backward_input(m_gpu, stream, in, dL_ddLdin, dL_dout, dL_ddLdout, dL_din, dL_dparams,
                                             params, mode, n_active_levels(context_max_level(ctx)));
    }
#endif  // TNN_WITH_GPU

    template <typename T> void forward_rows(ConstView in, View out, const T* params, float max_level) const {
        using A = acc_t<T>;
        parallel_for(in.rows, kGrain, [&](int64_t r0, int64_t r1) {
            Point<A> p;
            A y[8];
            // Level-outer within a chunk: one level's table stays in cache across the chunk's rows.
            for (uint32_t l = 0; l < m_options.n_levels; ++l) {
                const T* V = params + l * level_values();
                for (int64_t r = r0; r < r1; ++r) {
                    std::fill(y, y + n_feat(), A(0));
                    if (active(l, max_level)) {
                        locate(in, r, l, p);
                        // fma in vertex order, as tcnn's kernel accumulates.
                        for (uint32_t k = 0; k <= n_dims(); ++k)
                            for (uint32_t f = 0; f < n_feat(); ++f)
                                y[f] = hd::fma(p.w[k], static_cast<A>(V[p.value[k] + f]), y[f]);
                    }
                    for (uint32_t f = 0; f < n_feat(); ++f) store_output<T>(out, r, l * n_feat() + f, y[f]);
                }
            }
        });
    }

    // ---- backward ---------------------------------------------------------------------------------------
    // dL/dV_k[f] += w_k g_{l,f};  dL/dx = input_gradient(G), G_k = dL/dw_k = sum_f g_{l,f} (V_k[f] - V_0[f])
    // (grid::value_step: the weights sum to 1, so their derivatives sum to 0 and vertex 0's value can be
    // taken off every vertex's, which keeps the terms small where neighbouring values are close).

    void backward_cpu(const Stream&, const Context& ctx, ConstView in, ConstView, ConstView dL_dout, View* dL_din,
                      void* dL_dparams, const void* params, GradMode mode) const override {
        const float max_level = context_max_level(ctx);
        dispatch_dtype(param_dtype(), [&](auto t) {
            using T = decltype(t);
            if (dL_dparams) param_gradients<T>(in, dL_dout, nullptr, static_cast<T*>(dL_dparams), mode, max_level);
            if (dL_din) input_gradients<T>(in, dL_dout, *dL_din, static_cast<const T*>(params), max_level);
        });
    }

    // Parameter gradients, one level per task: each level owns its slice of the gradient vector, and rows
    // are added in order. With v (the second-order pass), vertex k's coefficient is the weight tangent
    // E_k = sum_i v_i dw_k/dx_i instead of w_k.
    template <typename T> void param_gradients(ConstView in, ConstView dL_dout, const ConstView* v, T* dL_dparams,
                                               GradMode mode, float max_level) const {
        using A = acc_t<T>;
        parallel_for(m_options.n_levels, 1, [&](int64_t l0, int64_t l1) {
            for (int64_t li = l0; li < l1; ++li) {
                const uint32_t l = static_cast<uint32_t>(li);
                const bool contributes = active(l, max_level);
                if (!contributes && mode == GradMode::accumulate) continue;
                std::vector<A> acc(contributes ? level_values() : 0, A(0));
                Point<A> p;
                A g[8], E[kMaxDims + 1];
                for (int64_t r = 0; contributes && r < in.rows; ++r) {
                    locate(in, r, l, p);
                    if (v) tangent(*v, r, l, p, E);
                    const A* coef = v ? E : p.w;
                    for (uint32_t f = 0; f < n_feat(); ++f) g[f] = load_as<T>(dL_dout, r, l * n_feat() + f);
                    for (uint32_t k = 0; k <= n_dims(); ++k)
                        for (uint32_t f = 0; f < n_feat(); ++f) acc[p.value[k] + f] += coef[k] * g[f];
                }
                T* out = dL_dparams + l * level_values();
                if (contributes)
                    for (size_t i = 0; i < acc.size(); ++i) write_param_gradient(out + i, acc[i], mode);
                else
                    std::fill(out, out + level_values(), T(0.0f));  // overwrite: a level that is off has gradient 0
            }
        });
    }

    template <typename T>
    void input_gradients(ConstView in, ConstView dL_dout, View dL_din, const T* params, float max_level) const {
        using A = acc_t<T>;
        parallel_for(in.rows, kGrain, [&](int64_t r0, int64_t r1) {
            Point<A> p;
            A dx[kMaxDims], dxl[kMaxDims], G[kMaxDims + 1];
            for (int64_t r = r0; r < r1; ++r) {
                std::fill(dx, dx + n_dims(), A(0));
                for (uint32_t l = 0; l < m_options.n_levels; ++l) {
                    if (!active(l, max_level)) continue;
                    locate(in, r, l, p);
                    const T* V = params + l * level_values();
                    for (uint32_t k = 0; k <= n_dims(); ++k) {
                        A gv = A(0);
                        for (uint32_t f = 0; f < n_feat(); ++f)
                            gv += load_as<T>(dL_dout, r, l * n_feat() + f) *
                                  grid::value_step(static_cast<A>(V[p.value[k] + f]), static_cast<A>(V[p.value[0] + f]));
                        G[k] = gv;
                    }
                    permuto::input_gradient(n_dims(), n_grad_dims(), p.s, G, m_levels.scale_of(l), dxl);
                    for (uint32_t i = 0; i < n_dims(); ++i) dx[i] += dxl[i];
                }
                for (uint32_t i = 0; i < n_dims(); ++i) store_input(dL_din, r, i, dx[i]);
            }
        });
    }

    // ---- second-order pass ---------------------------------------------------------------------------
    // L' depends on dL/dx = sum_l sum_k (dw_k/dx)^T sum_f g_{l,f} V_k[f]; with v = dL'/d(dL/dx) and
    // E_k = sum_i v_i dw_k/dx_i:
    //   dL'/dg_{l,f} = sum_k E_k V_k[f]   (as V_k - V_0: the E_k sum to 0)
    //   dL'/dV_k[f] += g_{l,f} E_k
    //   dL'/dx        = 0: the weights are linear in x inside a simplex (their Hessian is zero), and the
    //                   simplex is locally constant.

    void backward_backward_input_cpu(const Stream& stream, const Context& ctx, ConstView in, ConstView dL_ddLdin,
                                     ConstView dL_dout, View* dL_ddLdout, View* dL_din, void* dL_dparams,
                                     const void* params, GradMode mode) const override {
        const float max_level = context_max_level(ctx);
        dispatch_dtype(param_dtype(), [&](auto t) {
            using T = decltype(t);
            if (dL_dparams) param_gradients<T>(in, dL_dout, &dL_ddLdin, static_cast<T*>(dL_dparams), mode, max_level);
            if (dL_ddLdout) output_gradient_second_order<T>(in, dL_ddLdin, *dL_ddLdout, static_cast<const T*>(params),
                                                            max_level);
        });
        if (dL_din) fill(stream, *dL_din, 0.0);
    }

    template <typename T> void output_gradient_second_order(ConstView in, ConstView v, View dL_ddLdout, const T* params,
                                                            float max_level) const {
        using A = acc_t<T>;
        parallel_for(in.rows, kGrain, [&](int64_t r0, int64_t r1) {
            Point<A> p;
            A E[kMaxDims + 1], dg[8];
            for (int64_t r = r0; r < r1; ++r)
                for (uint32_t l = 0; l < m_options.n_levels; ++l) {
                    std::fill(dg, dg + n_feat(), A(0));
                    if (active(l, max_level)) {
                        locate(in, r, l, p);
                        tangent(v, r, l, p, E);
                        const T* V = params + l * level_values();
                        for (uint32_t k = 0; k <= n_dims(); ++k)
                            for (uint32_t f = 0; f < n_feat(); ++f)
                                dg[f] += E[k] * grid::value_step(static_cast<A>(V[p.value[k] + f]),
                                                                 static_cast<A>(V[p.value[0] + f]));
                    }
                    for (uint32_t f = 0; f < n_feat(); ++f) store_output<T>(dL_ddLdout, r, l * n_feat() + f, dg[f]);
                }
        });
    }

    PermutoOptions m_options;
    PermutoLevels m_levels;
#ifdef TNN_WITH_GPU
    permuto_gpu::PermutoDesc m_gpu;  // the level table as the kernels read it
#endif  // TNN_WITH_GPU
    // Coarse-to-fine: tcnn's default of 1000 leaves every level on.
    std::atomic<float> m_max_level{1000.0f};
};

// tcnn's scales_table / shifts_table keys (emitted by its hyperparams()): diagnostics derived from the
// other keys, accepted only when they match this lattice. tcnn's scales use rsqrtf (within 2 ulp of
// dim_factor) times the fp32 level scale: 8 eps32 relative (tcnn's own tolerance) covers both.
void check_table(ConfigReader& cfg, const char* key, const std::vector<float>& derived) {
    if (!cfg.has(key)) return;
    const json& t = cfg.get_json(key);
    if (!t.is_array() || t.size() != derived.size())
        cfg.fail(key, msg("must be an array of n_levels * n_dims = ", derived.size(), " numbers"));
    for (size_t i = 0; i < derived.size(); ++i) {
        if (!t[i].is_number()) cfg.fail(key, msg("element ", i, " must be a number, got ", t[i].dump()));
        const double got = t[i].get<double>(), want = derived[i];
        if (!(std::fabs(got - want) <= 8.0 * FLT_EPSILON * std::max(1.0, std::fabs(want))))
            cfg.fail(key, msg("element ", i, " is ", got, " but this configuration's lattice has ", want,
                              " (the table is derived from base_scale, per_level_scale and seed; it cannot set them)"));
    }
}

std::unique_ptr<Encoding> create_permuto(uint32_t n_dims, DType dtype, ConfigReader& cfg) {
    PermutoOptions o;
    const std::string where = cfg.where();
    if (n_dims < 1 || n_dims > kMaxDims)
        throw ConfigError(msg(where, ": encodes 1 to ", kMaxDims, " input dimensions, got ", n_dims));
    o.n_dims = n_dims;

    o.n_features_per_level = cfg.get_uint("n_features_per_level", 2);
    if (o.n_features_per_level != 1 && o.n_features_per_level != 2 && o.n_features_per_level != 4 &&
        o.n_features_per_level != 8)
        cfg.fail("n_features_per_level", msg("must be 1, 2, 4 or 8, got ", o.n_features_per_level));

    // tcnn lets "n_features" or "n_grid_features" set n_levels * n_features_per_level instead.
    const bool has_features = cfg.has("n_features"), has_grid_features = cfg.has("n_grid_features");
    if (has_features && has_grid_features) cfg.fail("n_features", "and 'n_grid_features' may not both be given");
    const char* n_features_key = has_features ? "n_features" : (has_grid_features ? "n_grid_features" : nullptr);
    if (n_features_key) {
        if (cfg.has("n_levels"))
            cfg.fail(n_features_key, "and 'n_levels' may not both be given (one determines the other)");
        const uint32_t n_features = cfg.get_uint(n_features_key, 32, o.n_features_per_level,
                                                 permuto::kMaxLevels * o.n_features_per_level);
        if (n_features % o.n_features_per_level != 0)
            cfg.fail(n_features_key, msg("must be a multiple of n_features_per_level = ", o.n_features_per_level,
                                         ", got ", n_features));
        o.n_levels = n_features / o.n_features_per_level;
    } else {
        o.n_levels = cfg.get_uint("n_levels", 16, 1, permuto::kMaxLevels);
    }

    o.log2_hashmap_size = cfg.get_uint("log2_hashmap_size", 19, 0, 31);
    o.base_scale = static_cast<float>(cfg.get_float("base_scale", 16.0, -FLT_MAX, FLT_MAX));
    o.per_level_scale = static_cast<float>(cfg.get_float_exclusive_min("per_level_scale", 2.0, 0.0, FLT_MAX));
    cfg.get_choice("interpolation", "Linear", {"Linear"});
    o.max_input_grad_dims = cfg.get_uint("max_input_grad_dims", n_dims, 0, n_dims);
    o.seed = static_cast<uint32_t>(cfg.get_int("seed", 1337, 0, 0xFFFFFFFFll));
    o.deterministic = cfg.get_bool("deterministic", false);

    const size_t n_params = permuto_n_params(o);
    if (n_params > 0xFFFFFFFFull)
        throw ConfigError(msg(where, ": n_levels * 2^log2_hashmap_size * n_features_per_level = ", n_params,
                              " parameters; at most 2^32 - 1 (tcnn indexes them with 32 bits): lower n_levels, "
                              "log2_hashmap_size or n_features_per_level"));

    PermutoLevels levels = permuto_levels(n_dims, o.n_levels, o.base_scale, o.per_level_scale, o.seed);
    // Lattice coordinates are 32-bit integers: for inputs in the contract's [0, 1] (shifts add at most 5),
    // |e_j| <= 6 |scale_l| (1 + sum_i dim_factor(i)), and the vertices' coordinates move up to 3 (d + 1)
    // further. A level whose coordinates could leave int32 is refused (tcnn refuses such scales too).
    double factor_sum = 1.0;
    for (uint32_t i = 0; i < n_dims; ++i) factor_sum += permuto::dim_factor(i);
    for (uint32_t l = 0; l < o.n_levels; ++l) {
        const double s = levels.level_scale[l];
        const double reach = 6.0 * std::fabs(s) * factor_sum + 3.0 * (n_dims + 1);
        if (!std::isfinite(s) || !(reach < 2147483648.0))
            throw ConfigError(msg(where, ": level ", l, " has scale ", s,
                                  " (base_scale * per_level_scale^level); its lattice coordinates would not fit 32 bits "
                                  "(at most about ", 2147483648.0 / (6.0 * factor_sum),
                                  "): lower base_scale, per_level_scale or n_levels"));
    }
    check_table(cfg, "scales_table", levels.scale);
    check_table(cfg, "shifts_table", levels.shift);
    return std::unique_ptr<Encoding>(new PermutoEncoding(o, dtype, std::move(levels)));
}

}  // namespace

void register_permuto_encoding(Registry<EncodingFactory>& r) { r.add("Permuto", create_permuto); }

}  // namespace tnn
