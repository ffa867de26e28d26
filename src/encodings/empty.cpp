// Empty encoding (tcnn's EmptyEncoding): swallows its inputs and produces no outputs; useful as a
// Composite entry that ignores some dimensions. Its input gradient is zero.
#include "encodings/encoding_registry.h"

namespace tnn {

namespace {

class EmptyEncoding final : public Encoding {
public:
    EmptyEncoding(uint32_t n_dims, DType dtype) : Encoding(n_dims, 0, 0, dtype, dtype) {}

    std::string name() const override { return "Empty"; }
    json hyperparams() const override { return {{"otype", "Empty"}}; }
    void init_params(Pcg32&, float*) const override {}
    // Only fills (tnn::fill runs on every device).
    bool supports_device(Device d) const override { return d.is_cpu() || param_dtype() != DType::f64; }
    bool supports_backward_backward() const override { return true; }

private:
    std::unique_ptr<Context> forward_impl(const Stream&, ConstView, View, const void*, bool) const override {
        return std::make_unique<EmptyContext>();
    }
    void backward_impl(const Stream& stream, const Context&, ConstView, ConstView, ConstView, View* dL_din, void*,
                       const void*, GradMode) const override {
        if (dL_din) fill(stream, *dL_din, 0.0);
    }
    void backward_backward_input_impl(const Stream& stream, const Context&, ConstView, ConstView, ConstView, View*,
                                      View* dL_din, void*, const void*, GradMode) const override {
        if (dL_din) fill(stream, *dL_din, 0.0);
    }
};

}  // namespace

void register_empty_encoding(Registry<EncodingFactory>& r) {
    r.add("Empty", [](uint32_t n_dims, DType dtype, ConfigReader&) {
        return std::unique_ptr<Encoding>(new EmptyEncoding(n_dims, dtype));
    });
}

}  // namespace tnn
