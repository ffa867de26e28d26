// Composite encoding (tcnn's CompositeEncoding): nested encodings applied to slices of the input
// dimensions, their outputs concatenated, summed or multiplied; and the NRC / OneBlobFrequency
// preset, which tcnn defines as a Composite (TriangleWave on 3 dims, OneBlob on 5, Identity on the rest).
//
// Layout (tcnn's): in a concatenation, nested output i starts at a multiple of the next nested
// encoding's required_output_alignment; the lanes in between hold nested i's padding value. Sum and
// Product pad every nested output to a common width the same way and reduce lane by lane.
#include "core/parallel.h"
#include "encodings/encoding_registry.h"
#include "encodings/encodings_gpu.h"

#include <numeric>
#include <vector>

namespace tnn {

namespace {

enum class Reduction { Concatenation, Sum, Product };
const std::vector<std::string>& reduction_names() {
    static const std::vector<std::string> names = {"Concatenation", "Sum", "Product"};
    return names;
}

struct Nested {
    std::shared_ptr<Encoding> encoding;
    uint32_t input_begin = 0;   // first input dimension it encodes
    uint32_t output_begin = 0;  // first output lane (Concatenation; 0 for Sum and Product)
    uint32_t padded_width = 0;  // its output lanes plus the padding lanes after them
    size_t param_offset = 0;    // into the composite's parameter vector

    uint32_t width() const { return encoding->n_output_dims(); }
    uint32_t n_dims() const { return encoding->n_input_dims(); }
};

// A nested encoding's dL/dx when the caller wants dL/din: a temporary that add_to_input_grad then
// adds into dL/din's columns of that encoding (nested encodings may share input dimensions, so their
// dL/dx add up rather than overwrite). view() is what the nested backward pass gets.
class NestedInputGrad {
public:
    NestedInputGrad(const Stream& stream, View* dL_din, const Nested& n, ConstView in)
        : m_dL_din(dL_din), m_begin(n.input_begin) {
        if (!dL_din) return;
        m_dx = Tensor::temporary(stream, in.rows, n.n_dims(), in.dtype);
        m_view = m_dx.view();
    }
    View* view() { return m_dL_din ? &m_view : nullptr; }
    void add_to_input_grad(const Stream& stream) const {
        if (m_dL_din) add(stream, m_dx.view(), m_dL_din->cols_slice(m_begin, m_dx.cols()));
    }

private:
    View* m_dL_din;
    uint32_t m_begin;
    Tensor m_dx;
    View m_view;
};

struct CompositeContext : Context {
    std::vector<std::unique_ptr<Context>> nested;
    std::vector<Tensor> outputs;  // Sum / Product: each nested output, [rows, width_i] in the composite's dtype
    Stream stream;                // of the forward pass (GPU: `outputs` is its temporary memory)
};

// A GPU backward pass on another stream than its forward first waits for the forward's work, and
// leaves the forward's stream waiting for itself (the context's memory returns to that stream's pool).
class ForwardStreamOrder {
public:
    ForwardStreamOrder(const Stream& stream, const CompositeContext& ctx) : m_stream(stream), m_ctx(ctx) {
#ifdef TNN_WITH_GPU
        if (stream.device().is_gpu()) composite_gpu::stream_wait(stream, ctx.stream);
#endif  // TNN_WITH_GPU
    }
    ~ForwardStreamOrder() {
#ifdef TNN_WITH_GPU
        try {
            if (m_stream.device().is_gpu()) composite_gpu::stream_wait(m_ctx.stream, m_stream);
        } catch (const Error& e) {
            log(LogLevel::warning, msg("Composite encoding: could not order the forward stream after backward: ", e.what()));
        }
#endif  // TNN_WITH_GPU
    }
    ForwardStreamOrder(const ForwardStreamOrder&) = delete;
    ForwardStreamOrder& operator=(const ForwardStreamOrder&) = delete;

private:
    const Stream& m_stream;
    const CompositeContext& m_ctx;
};

class CompositeEncoding final : public Encoding, public AlignedOutput {
public:
    CompositeEncoding(uint32_t n_dims, uint32_t n_outputs, size_t n_params, DType dtype, Reduction reduction,
                      std::vector<Nested> nested)
        : Encoding(n_dims, n_outputs, n_params, dtype, dtype), m_reduction(reduction), m_nested(std::move(nested)) {}

    std::string name() const override { return "Composite"; }
    json hyperparams() const override {
        json nested = json::array();
        for (const Nested& n : m_nested) {
            json j = n.encoding->hyperparams();
            j["n_dims_to_encode"] = n.n_dims();
            j["dims_to_encode_begin"] = n.input_begin;
            nested.push_back(j);
        }
        return {{"otype", "Composite"},
                {"reduction", reduction_names()[static_cast<size_t>(m_reduction)]},
                {"nested", nested}};
    }
    // Nested encodings draw from the same stream, in order (tcnn).
    void init_params(Pcg32& rng, float* params) const override {
        for (const Nested& n : m_nested) n.encoding->init_params(rng, params + n.param_offset);
    }
    // The network pads after the last nested output (Concatenation); Sum and Product reduce the
    // nested padding lanes like any other lane.
    float padding_value() const override {
        if (m_reduction == Reduction::Concatenation) return m_nested.back().encoding->padding_value();
        float v = m_reduction == Reduction::Sum ? 0.0f : 1.0f;
        for (const Nested& n : m_nested)
            v = m_reduction == Reduction::Sum ? v + n.encoding->padding_value() : v * n.encoding->padding_value();
        return v;
    }
    void set_max_level(float max_level) override {
        for (const Nested& n : m_nested) n.encoding->set_max_level(max_level);
    }
    uint32_t required_output_alignment() const override {
        uint32_t a = 1;
        for (const Nested& n : m_nested) a = std::lcm(a, tnn::required_output_alignment(*n.encoding));
        return a;
    }
    bool supports_device(Device d) const override {
        for (const Nested& n : m_nested)
            if (!n.encoding->supports_device(d)) return false;
        return true;
    }
    bool supports_backward_backward() const override {
        for (const Nested& n : m_nested)
            if (!n.encoding->supports_backward_backward()) return false;
        return true;
    }
    std::string backward_backward_refusal(Device d) const override {
        for (const Nested& n : m_nested)
            if (std::string why = n.encoding->backward_backward_refusal(d); !why.empty()) return why;
        return {};
    }

private:
    static constexpr int64_t kGrain = 256;  // rows per parallel chunk of the reductions; rows are independent

    template <typename F> void with_type(F&& f) const { dispatch_dtype(param_dtype(), f); }

    const void* nested_params(const void* params, const Nested& n) const {
        return params ? static_cast<const char*>(params) + n.param_offset * dtype_size(param_dtype()) : nullptr;
    }
    void* nested_params(void* params, const Nested& n) const {
        return params ? static_cast<char*>(params) + n.param_offset * dtype_size(param_dtype()) : nullptr;
    }
    ConstView nested_input(ConstView v, const Nested& n) const { return v.cols_slice(n.input_begin, n.n_dims()); }

    // The value lane k of nested i contributes to a reduction: its output, or its padding value.
    template <typename T> acc_t<T> reduced_lane(const CompositeContext& ctx, size_t i, int64_t r, uint32_t k) const {
        const Nested& n = m_nested[i];
        return k < n.width() ? load_as<T>(ctx.outputs[i].view(), r, k)
                             : static_cast<acc_t<T>>(n.encoding->padding_value());
    }

    std::unique_ptr<Context> forward_impl(const Stream& stream, ConstView in, View out, const void* params,
                                          bool prepare_input_gradients) const override {
        return run_forward(stream, in, out, params, prepare_input_gradients, false);
    }
    void inference_impl(const Stream& stream, ConstView in, View out, const void* params) const override {
        run_forward(stream, in, out, params, false, true);
    }

    std::unique_ptr<CompositeContext> run_forward(const Stream& stream, ConstView in, View out, const void* params,
                                                  bool prepare, bool inference) const {
        auto ctx = std::make_unique<CompositeContext>();
        ctx->stream = stream;
        for (size_t i = 0; i < m_nested.size(); ++i) {
            const Nested& n = m_nested[i];
            View y;
            if (m_reduction == Reduction::Concatenation) {
                y = out.cols_slice(n.output_begin, n.width());
                fill(stream, out.cols_slice(n.output_begin + n.width(), n.padded_width - n.width()),
                     n.encoding->padding_value());
            } else {
                ctx->outputs.push_back(Tensor::temporary(stream, in.rows, n.width(), param_dtype()));
                y = ctx->outputs.back().view();
            }
            if (inference)
                n.encoding->inference(stream, nested_input(in, n), y, nested_params(params, n));
            else
                ctx->nested.push_back(
                    n.encoding->forward(stream, nested_input(in, n), y, nested_params(params, n), prepare));
        }
        if (m_reduction == Reduction::Concatenation) return ctx;
#ifdef TNN_WITH_GPU
        if (in.device.is_gpu()) {
            composite_gpu::reduce(stream, m_reduction == Reduction::Product, output_lanes(*ctx), out);
            return ctx;
        }
#endif  // TNN_WITH_GPU
        with_type([&](auto t) {
            using T = decltype(t);
            using A = acc_t<T>;
            parallel_for(in.rows, kGrain, [&](int64_t r0, int64_t r1) {
                for (int64_t r = r0; r < r1; ++r)
                    for (uint32_t k = 0; k < n_output_dims(); ++k) {
                        A v = m_reduction == Reduction::Sum ? A(0) : A(1);
                        for (size_t i = 0; i < m_nested.size(); ++i)
                            v = m_reduction == Reduction::Sum ? v + reduced_lane<T>(*ctx, i, r, k)
                                                              : v * reduced_lane<T>(*ctx, i, r, k);
                        store_output<T>(out, r, k, v);
                    }
            });
        });
        return ctx;
    }

    const CompositeContext& context(const Context& ctx) const {
        const auto* c = dynamic_cast<const CompositeContext*>(&ctx);
        if (!c || c->nested.size() != m_nested.size())
            throw Error(msg(describe(), ": backward needs the context of this module's forward (not inference)"));
        return *c;
    }

    // dL/dy_i of nested i: a slice of dL/dy (Concatenation, Sum) or, for Product,
    // dL/dy_i = dL/dy * prod_{l != i} y_l, written into `storage`.
    ConstView nested_output_gradient(const Stream& stream, const CompositeContext& ctx, size_t i, ConstView dL_dout,
                                     Tensor& storage) const {
        const Nested& n = m_nested[i];
        if (m_reduction == Reduction::Concatenation) return dL_dout.cols_slice(n.output_begin, n.width());
        if (m_reduction == Reduction::Sum) return dL_dout.cols_slice(0, n.width());
        storage = Tensor::temporary(stream, dL_dout.rows, n.width(), param_dtype());
#ifdef TNN_WITH_GPU
        if (dL_dout.device.is_gpu()) {
            composite_gpu::product_gradient(stream, output_lanes(ctx), i, dL_dout, storage.view());
            return storage.view();
        }
#endif  // TNN_WITH_GPU
        with_type([&](auto t) {
            using T = decltype(t);
            using A = acc_t<T>;
            View s = storage.view();
            parallel_for(dL_dout.rows, kGrain, [&](int64_t r0, int64_t r1) {
                for (int64_t r = r0; r < r1; ++r)
                    for (uint32_t k = 0; k < n.width(); ++k) {
                        A v = load_as<T>(dL_dout, r, k);
                        for (size_t l = 0; l < m_nested.size(); ++l)
                            if (l != i) v *= reduced_lane<T>(ctx, l, r, k);
                        store_output<T>(s, r, k, v);
                    }
            });
        });
        return storage.view();
    }

    ConstView nested_output(const CompositeContext& ctx, size_t i, ConstView out) const {
        const Nested& n = m_nested[i];
        return m_reduction == Reduction::Concatenation ? out.cols_slice(n.output_begin, n.width())
                                                       : ConstView(ctx.outputs[i].view());
    }

    void backward_impl(const Stream& stream, const Context& ctx_in, ConstView in, ConstView out, ConstView dL_dout,
                       View* dL_din, void* dL_dparams, const void* params, GradMode mode) const override {
        const CompositeContext& ctx = context(ctx_in);
        const ForwardStreamOrder order(stream, ctx);
        if (dL_din) fill(stream, *dL_din, 0.0);
        for (size_t i = 0; i < m_nested.size(); ++i) {
            const Nested& n = m_nested[i];
            Tensor g_storage;
            const ConstView g = nested_output_gradient(stream, ctx, i, dL_dout, g_storage);
            NestedInputGrad dx(stream, dL_din, n, in);
            n.encoding->backward(stream, *ctx.nested[i], nested_input(in, n), nested_output(ctx, i, out), g, dx.view(),
                                 nested_params(dL_dparams, n), nested_params(params, n), mode);
            dx.add_to_input_grad(stream);
        }
    }

    // Every nested encoding runs its own second-order pass on its slice of dL'/d(dL/dx) with its own
    // dL/dy_i; dL'/d(dL/dy) gathers their dL'/d(dL/dy_i) w_i back through the reduction. For Product,
    // dL/dy_i = g * prod_{l != i} y_l also depends on the other outputs, which adds
    //   dL'/dy_l = sum_{i != l} w_i g prod_{m != i, l} y_m,
    // pushed through nested l's first-order backward into dL'/dx and dL'/dparams.
    void backward_backward_input_impl(const Stream& stream, const Context& ctx_in, ConstView in, ConstView dL_ddLdin,
                                      ConstView dL_dout, View* dL_ddLdout, View* dL_din, void* dL_dparams,
                                      const void* params, GradMode mode) const override {
        const CompositeContext& ctx = context(ctx_in);
        const ForwardStreamOrder order(stream, ctx);
        const bool product = m_reduction == Reduction::Product;
        if (dL_din) fill(stream, *dL_din, 0.0);
        if (dL_ddLdout) fill(stream, *dL_ddLdout, 0.0);
        std::vector<Tensor> w(m_nested.size());  // dL'/d(dL/dy_i) when they must be reduced
        for (size_t i = 0; i < m_nested.size(); ++i) {
            const Nested& n = m_nested[i];
            Tensor g_storage;
            const ConstView g = nested_output_gradient(stream, ctx, i, dL_dout, g_storage);
            View w_view;
            const bool want_w = dL_ddLdout || (product && (dL_din || dL_dparams));
            if (want_w) {
                if (m_reduction == Reduction::Concatenation) {
                    w_view = dL_ddLdout->cols_slice(n.output_begin, n.width());
                } else {
                    w[i] = Tensor::temporary(stream, in.rows, n.width(), param_dtype());
                    w_view = w[i].view();
                }
            }
            NestedInputGrad dx(stream, dL_din, n, in);
            n.encoding->backward_backward_input(stream, *ctx.nested[i], nested_input(in, n),
                                                dL_ddLdin.cols_slice(n.input_begin, n.n_dims()), g,
                                                want_w ? &w_view : nullptr, dx.view(), nested_params(dL_dparams, n),
                                                nested_params(params, n), mode);
            dx.add_to_input_grad(stream);
        }
        if (m_reduction == Reduction::Concatenation) return;
#ifdef TNN_WITH_GPU
        if (in.device.is_gpu()) {
            reduction_second_order_gpu(stream, ctx, in, dL_dout, w, dL_ddLdout, dL_din, dL_dparams, params);
            return;
        }
#endif  // TNN_WITH_GPU

        with_type([&](auto t) {
            using T = decltype(t);
            using A = acc_t<T>;
            // The product of the other nested lanes, leaving out i and (if set) l.
            auto others = [&](int64_t r, uint32_t k, size_t i, size_t l) {
                A p = A(1);
                for (size_t m = 0; m < m_nested.size(); ++m)
                    if (m != i && m != l) p *= reduced_lane<T>(ctx, m, r, k);
                return p;
            };
            auto w_at = [&](size_t i, int64_t r, uint32_t k) {
                return k < m_nested[i].width() ? load_as<T>(w[i].view(), r, k) : A(0);
            };
            if (dL_ddLdout) {
                View out = *dL_ddLdout;
                parallel_for(in.rows, kGrain, [&](int64_t r0, int64_t r1) {
                    for (int64_t r = r0; r < r1; ++r)
                        for (uint32_t k = 0; k < n_output_dims(); ++k) {
                            A s = A(0);
                            for (size_t i = 0; i < m_nested.size(); ++i)
                                s += product ? w_at(i, r, k) * others(r, k, i, i) : w_at(i, r, k);
                            store_output<T>(out, r, k, s);
                        }
                });
            }
            if (!product || (!dL_din && !dL_dparams)) return;
            for (size_t l = 0; l < m_nested.size(); ++l) {
                const Nested& n = m_nested[l];
                Tensor u(in.rows, n.width(), param_dtype());
                View u_view = u.view();
                parallel_for(in.rows, kGrain, [&](int64_t r0, int64_t r1) {
                    for (int64_t r = r0; r < r1; ++r)
                        for (uint32_t k = 0; k < n.width(); ++k) {
                            A s = A(0);
                            for (size_t i = 0; i < m_nested.size(); ++i)
                                if (i != l) s += w_at(i, r, k) * others(r, k, i, l);
                            store_output<T>(u_view, r, k, load_as<T>(dL_dout, r, k) * s);
                        }
                });
                NestedInputGrad dx(stream, dL_din, n, in);
                n.encoding->backward(stream, *ctx.nested[l], nested_input(in, n), nested_output(ctx, l, ConstView()),
                                     u.view(), dx.view(), nested_params(dL_dparams, n), nested_params(params, n),
                                     GradMode::accumulate);
                dx.add_to_input_grad(stream);
            }
        });
    }

#ifdef TNN_WITH_GPU
    // ---- GPU: the same reductions as the CPU loops above, as kernels (composite.cu) --------------

    // Nested output i as padded lanes (its padding value beyond its width).
    std::vector<composite_gpu::Lanes> output_lanes(const CompositeContext& ctx) const {
        std::vector<composite_gpu::Lanes> lanes(m_nested.size());
        for (size_t i = 0; i < m_nested.size(); ++i)
            lanes[i] = {ctx.outputs[i].data(), m_nested[i].width(), m_nested[i].width(),
                        m_nested[i].encoding->padding_value()};
        return lanes;
    }

    // The Sum / Product tail of backward_backward_input_impl: dL'/d(dL/dy) from the nested w_i, and for
    // Product the extra dL'/dy_l pushed through nested l's first-order backward.
    void reduction_second_order_gpu(const Stream& stream, const CompositeContext& ctx, ConstView in, ConstView dL_dout,
                                    const std::vector<Tensor>& w, View* dL_ddLdout, View* dL_din, void* dL_dparams,
                                    const void* params) const {
        const bool product = m_reduction == Reduction::Product;
        const std::vector<composite_gpu::Lanes> y = output_lanes(ctx);
        std::vector<composite_gpu::Lanes> wl(m_nested.size());
        for (size_t i = 0; i < m_nested.size(); ++i) wl[i] = {w[i].data(), m_nested[i].width(), m_nested[i].width(), 0.0f};
        if (dL_ddLdout) composite_gpu::second_order_output(stream, product, y, wl, *dL_ddLdout);
        if (!product || (!dL_din && !dL_dparams)) return;
        for (size_t l = 0; l < m_nested.size(); ++l) {
            const Nested& n = m_nested[l];
            Tensor u = Tensor::temporary(stream, in.rows, n.width(), param_dtype());
            composite_gpu::product_second_order(stream, y, wl, l, dL_dout, u.view());
            NestedInputGrad dx(stream, dL_din, n, in);
            n.encoding->backward(stream, *ctx.nested[l], nested_input(in, n), nested_output(ctx, l, ConstView()),
                                 u.view(), dx.view(), nested_params(dL_dparams, n), nested_params(params, n),
                                 GradMode::accumulate);
            dx.add_to_input_grad(stream);
        }
    }
#endif  // TNN_WITH_GPU

    Reduction m_reduction;
    std::vector<Nested> m_nested;
};

// ---- config ----------------------------------------------------------------------------------------

uint32_t read_dims_key(const json& entry, const char* key, const std::string& where) {
    const json& v = entry.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 0x7FFFFFFF)
        throw ConfigError(msg(where, ": key '", key, "' must be a non-negative integer, got ", v.dump()));
    return static_cast<uint32_t>(v.get<int64_t>());
}

// create_encoding for one nested entry, read in place: its ConfigReader already knows the keys the
// Composite reads, so the entry's subtree is not copied (a copy per level costs depth x size).
std::unique_ptr<Encoding> create_nested_encoding(uint32_t n_dims, const json& entry, DType dtype) {
    const std::string otype = require_otype(entry, "encoding");
    const EncodingFactory& factory = encoding_registry().get(otype);
    ConfigReader r(entry, encoding_registry().canonical_name(otype) + " encoding");
    r.mark_known("n_dims_to_encode");
    r.mark_known("dims_to_encode_begin");
    auto enc = factory(n_dims, dtype, r);
    r.finish();
    return enc;
}

std::unique_ptr<Encoding> create_composite(uint32_t n_dims, DType dtype, ConfigReader& cfg) {
    const std::string where = cfg.where();
    const json& nested = cfg.get_json("nested");
    const auto reduction = get_enum_choice<Reduction>(cfg, "reduction", "Concatenation", reduction_names());
    if (!nested.is_array() || nested.empty())
        cfg.fail("nested", msg("must be a non-empty array of encoding configs, got ", nested.dump()));

    // tcnn's rule: entries take n_dims_to_encode dimensions one after the other, starting at
    // dims_to_encode_begin when given; one entry may omit n_dims_to_encode and takes the rest.
    uint64_t total = 0;
    bool any_begin = false;
    std::vector<size_t> unspecified;
    for (size_t i = 0; i < nested.size(); ++i) {
        const std::string w = msg(where, ": nested[", i, "]");
        if (!nested[i].is_object())
            throw ConfigError(msg(w, " must be an encoding config object, got ", nested[i].dump()));
        if (nested[i].contains("n_dims_to_encode"))
            total += read_dims_key(nested[i], "n_dims_to_encode", w);
        else
            unspecified.push_back(i);
        if (nested[i].contains("dims_to_encode_begin")) {
            any_begin = true;
            if (!nested[i].contains("n_dims_to_encode"))
                throw ConfigError(msg(w, ": 'dims_to_encode_begin' needs 'n_dims_to_encode' as well"));
        }
    }
    if (unspecified.size() > 1)
        throw ConfigError(msg(where,
                              ": only one nested entry may omit 'n_dims_to_encode' (it takes the remaining "
                              "dims), but nested[",
                              unspecified[0], "] and nested[", unspecified[1], "] both do"));
    if (!unspecified.empty() && any_begin)
        throw ConfigError(msg(where, ": nested[", unspecified[0],
                              "] omits 'n_dims_to_encode', which is ambiguous once "
                              "'dims_to_encode_begin' is used; give every entry 'n_dims_to_encode'"));
    if (!any_begin && total > n_dims)
        throw ConfigError(msg(where, ": the nested entries encode ", total,
                              " dims in total, but the composite has only ", n_dims, " input dims"));
    const uint32_t rest = any_begin ? 0 : n_dims - static_cast<uint32_t>(total);

    std::vector<Nested> parts;
    std::vector<bool> covered(n_dims, false);
    uint32_t offset = 0;
    size_t n_params = 0;
    for (size_t i = 0; i < nested.size(); ++i) {
        const std::string w = msg(where, ": nested[", i, "]");
        const bool specified = nested[i].contains("n_dims_to_encode");
        const uint32_t n = specified ? read_dims_key(nested[i], "n_dims_to_encode", w) : rest;
        if (nested[i].contains("dims_to_encode_begin")) offset = read_dims_key(nested[i], "dims_to_encode_begin", w);
        if (static_cast<uint64_t>(offset) + n > n_dims)
            throw ConfigError(msg(w, " encodes dims [", offset, ", ", static_cast<uint64_t>(offset) + n,
                                  ") but the composite has only ", n_dims, " input dims"));
        if (n > 0) {
            Nested part;
            try {
                part.encoding = create_nested_encoding(n, nested[i], dtype);
            } catch (const ConfigError& e) {
                throw ConfigError(msg(w, ": ", e.what()));
            }
            part.input_begin = offset;
            part.param_offset = n_params;
            n_params += part.encoding->n_params();
            for (uint32_t d = offset; d < offset + n; ++d) covered[d] = true;
            parts.push_back(std::move(part));
        }
        offset += n;
    }
    if (parts.empty())
        throw ConfigError(msg(where, ": no nested entry encodes any dimension (every 'n_dims_to_encode' is 0)"));
    for (uint32_t d = 0; d < n_dims; ++d)
        if (!covered[d])
            log(LogLevel::warning, msg(where, ": input dim ", d, " is not encoded by any nested entry and is ignored"));

    // Output lanes (tcnn's alignment rule; see the top of the file).
    uint32_t n_outputs = 0;
    if (reduction == Reduction::Concatenation) {
        for (size_t i = 0; i < parts.size(); ++i) {
            const uint32_t align = i + 1 < parts.size() ? required_output_alignment(*parts[i + 1].encoding) : 1;
            parts[i].output_begin = n_outputs;
            parts[i].padded_width = (n_outputs + parts[i].width() + align - 1) / align * align - n_outputs;
            n_outputs += parts[i].padded_width;
        }
    } else {
        uint32_t align = 1;
        for (const Nested& p : parts) align = std::lcm(align, required_output_alignment(*p.encoding));
        for (Nested& p : parts) p.padded_width = (p.width() + align - 1) / align * align;
        for (const Nested& p : parts)
            if (p.padded_width != parts[0].padded_width) {
                std::vector<std::string> widths;
                for (const Nested& q : parts) widths.push_back(msg(q.encoding->name(), " ", q.width()));
                throw ConfigError(msg(where, ": reduction '", reduction_names()[static_cast<size_t>(reduction)],
                                      "' needs nested outputs of one width, got ", join(widths),
                                      " (padded to multiples of ", align, ")"));
            }
        n_outputs = parts[0].padded_width;
    }
    return std::unique_ptr<Encoding>(
        new CompositeEncoding(n_dims, n_outputs, n_params, dtype, reduction, std::move(parts)));
}

}  // namespace

void register_composite_encodings(Registry<EncodingFactory>& r) {
    r.add("Composite",
          [](uint32_t n_dims, DType dtype, ConfigReader& cfg) { return create_composite(n_dims, dtype, cfg); });
    // Neural radiance caching's input encoding: a 3D position (TriangleWave), 5 scalars (OneBlob),
    // the rest passed through (Identity).
    for (const char* otype : {"NRC", "OneBlobFrequency"})
        r.add(otype, [](uint32_t n_dims, DType dtype, ConfigReader& cfg) {
            const uint32_t n_frequencies = cfg.get_uint("n_frequencies", 12, 0, kMaxFrequencies);
            const uint32_t n_bins = cfg.get_uint("n_bins", 4, 1, kMaxOneBlobBins);
            if (n_dims < 8)
                throw ConfigError(msg(cfg.where(),
                                      ": needs at least 8 input dims (3 TriangleWave-encoded, 5 "
                                      "OneBlob-encoded, the rest passed through), got ",
                                      n_dims));
            json triangle = json::object(), oneblob = json::object(), identity = json::object();
            triangle["otype"] = "TriangleWave";
            triangle["n_dims_to_encode"] = 3;
            triangle["n_frequencies"] = n_frequencies;
            oneblob["otype"] = "OneBlob";
            oneblob["n_dims_to_encode"] = 5;
            oneblob["n_bins"] = n_bins;
            identity["otype"] = "Identity";
            json composite = json::object();
            composite["otype"] = "Composite";
            composite["nested"] = json::array({triangle, oneblob, identity});
            try {
                return create_encoding(n_dims, composite, dtype);
            } catch (const ConfigError& e) {
                throw ConfigError(msg(cfg.where(), ": ", e.what()));
            }
        });
}

}  // namespace tnn
