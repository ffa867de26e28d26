// The validating half of every optimizer (allocate, step, state round trips), the otype registry
// behind create_optimizer, and the helpers the implementations share (optimizer_impl.h). A GPU step
// runs the optimizer's two GPU halves (GpuSplitStep); the CPU-only build gets stubs for their launchers.
#include "optimizers/optimizer_impl.h"

#include <tnn/module.h>

#include "core/gpu_bridge.h"

#include <algorithm>
#include <cmath>

namespace tnn {

namespace {

const Registry<OptimizerFactory>& optimizer_registry() {
    static const Registry<OptimizerFactory> registry = [] {
        Registry<OptimizerFactory> r("optimizer");
        register_adam(r);
        register_sgd(r);
        register_novograd(r);
        register_exponential_decay(r);
        register_ema(r);
        register_average(r);
        register_lookahead(r);
        register_batched(r);
        register_composite(r);
        r.reject("Shampoo", "tcnn builds it only with cuSOLVER and tiny-rdna4-nn does not implement it");
        return r;
    }();
    return registry;
}

void check_device(const std::string& who, Device device) {
    if (!device.is_gpu()) return;
#ifdef TNN_WITH_GPU
    if (device.index < 0 || device.index >= gpu_bridge::device_count())
        throw DeviceError(msg(who, ": no GPU with index ", device.index, " (", gpu_bridge::device_count(), " present)"));
#else
    throw_no_gpu_backend(who);
#endif  // TNN_WITH_GPU
}

void check_pointer(const std::string& who, const char* arg, const void* ptr, Device device) {
    if (!ptr) throw ShapeError(msg(who, ": ", arg, " is a null pointer"));
#ifdef TNN_WITH_GPU
    if (device.is_gpu() && !gpu_bridge::is_device_pointer(ptr, device.index))
        throw DeviceError(msg(who, ": ", arg, " is not memory of ", device.str()));
#endif  // TNN_WITH_GPU
}

}  // namespace

// ---- Optimizer base ----

void Optimizer::allocate(Device device, size_t n_params, size_t n_matrix_params) {
    const std::string who = msg(name(), " optimizer allocate");
    if (n_matrix_params > n_params)
        throw ShapeError(msg(who, ": n_matrix_params (", n_matrix_params, ") exceeds n_params (", n_params, ")"));
    if (n_params > UINT32_MAX)
        throw ShapeError(msg(who, ": ", n_params, " parameters exceed the 2^32-1 that step counters index"));
    check_device(who, device);
    m_device = device;
    m_n_params = n_params;
    m_n_matrix_params = n_matrix_params;
    m_step = 0;
    m_allocated = false;
    allocate_impl();
    // State arrays are zeroed on the device's default stream (allocate has no stream): finish that
    // before the caller's streams, which may not synchronise with it, read them.
    if (device.is_gpu()) Stream::gpu(nullptr, device.index).synchronize();
    m_allocated = true;
}

void Optimizer::step(const Stream& stream, float loss_scale, float* weights_fp32, void* weights, DType weights_dtype,
                     const void* gradients, DType grad_dtype) {
    const std::string who = msg(name(), " optimizer step");
    if (!m_allocated) throw Error(msg(who, ": allocate() must be called before the first step"));
    if (stream.device() != m_device)
        throw DeviceError(msg(who, ": the stream is for ", stream.device().str(), " but the optimizer state is on ",
                              m_device.str()));
    if (!std::isfinite(loss_scale) || loss_scale <= 0.0f)
        throw InputError(msg(who, ": loss_scale must be a positive finite number, got ", loss_scale));
    if (m_n_params > 0) {
        check_pointer(who, "weights_fp32", weights_fp32, m_device);
        check_pointer(who, "weights", weights, m_device);
        check_pointer(who, "gradients", gradients, m_device);
        if (weights == static_cast<void*>(weights_fp32) && weights_dtype != DType::f32)
            throw DTypeError(msg(who, ": weights alias weights_fp32, so weights_dtype must be float32, got ",
                                 dtype_name(weights_dtype)));
    }
    if (m_device.is_gpu()) {
#ifdef TNN_WITH_GPU
        // A graph would replay this step's scalars (step count, learning rate) on every launch.
        if (gpu_bridge::is_capturing(stream))
            throw UnsupportedError(msg(who, ": the stream is capturing a graph, whose replays would all reuse this "
                                            "step's step count and learning rate; let the Trainer capture training "
                                            "steps (it runs the optimizer's host half before each replay)"));
#endif  // TNN_WITH_GPU
        if (GpuSplitStep* split = gpu_split(*this)) {
            // Both halves back to back; gpu_prepare advances the step counter.
            const GpuStepArgs args{loss_scale, weights_fp32, weights, weights_dtype, gradients, grad_dtype};
            split->gpu_prepare(stream, args, true);
            split->gpu_record(stream, args);
            return;
        }
    }
    step_impl(stream, loss_scale, weights_fp32, weights, weights_dtype, gradients, grad_dtype);
    ++m_step;
}

std::vector<StateBlob> Optimizer::state(const Stream& stream) const {
    const std::string who = msg(name(), " optimizer state");
    if (stream.device() != m_device)
        throw DeviceError(msg(who, ": the stream is for ", stream.device().str(), " but the optimizer state is on ",
                              m_device.str()));
    std::vector<StateBlob> out = {scalar_blob("n_params", static_cast<double>(m_n_params)),
                                  scalar_blob("step", static_cast<double>(m_step))};
    for (auto& b : state_impl(stream)) out.push_back(std::move(b));
    if (m_device.is_gpu()) stream.synchronize();  // the blobs are host bytes the caller reads now
    return out;
}

void Optimizer::load_state(const Stream& stream, const std::vector<StateBlob>& blobs) {
    const std::string who = msg(name(), " optimizer load_state");
    if (!m_allocated) throw Error(msg(who, ": allocate() must be called before load_state()"));
    // The blobs this optimizer would write itself are the schema: same names, dtypes and sizes, in the
    // same order (blobs of equal size in another order would load into the wrong arrays).
    const std::vector<StateBlob> expected = state(stream);
    for (size_t i = 0; i < expected.size(); ++i) {
        const StateBlob& e = expected[i];
        auto it = std::find_if(blobs.begin(), blobs.end(), [&](const StateBlob& b) { return b.name == e.name; });
        if (it == blobs.end())
            throw CheckpointError(msg(who, ": the state has no '", e.name, "' (saved by a different optimizer config?)"));
        if (it->dtype != e.dtype || it->bytes.size() != e.bytes.size())
            throw CheckpointError(msg(who, ": '", e.name, "' is ", it->bytes.size(), " bytes of ", dtype_name(it->dtype),
                                      ", expected ", e.bytes.size(), " bytes of ", dtype_name(e.dtype)));
        if (it != blobs.begin() + static_cast<std::ptrdiff_t>(i))
            throw CheckpointError(msg(who, ": '", e.name, "' is state number ", it - blobs.begin(), ", expected ", i,
                                      " (the state is out of order)"));
    }
    // Blobs past the schema's are other optimizers' state or repeats.
    if (blobs.size() > expected.size())
        throw CheckpointError(msg(who, ": unexpected state '", blobs[expected.size()].name,
                                  "' (saved by a different optimizer config?)"));
    for (const auto& b : blobs) {
        // Scalars are hyperparameters and counters: finite, and learning rates non-negative, as in a config.
        if (b.dtype != DType::f64) continue;
        double v;
        std::memcpy(&v, b.bytes.data(), sizeof(v));
        if (!std::isfinite(v)) throw CheckpointError(msg(who, ": '", b.name, "' is ", v, ", must be finite"));
        if (b.name.find("learning_rate") != std::string::npos && v < 0)
            throw CheckpointError(msg(who, ": '", b.name, "' is ", v, ", must be at least 0"));
    }
    const double n_params = blob_scalar(blobs, "n_params");
    if (n_params != static_cast<double>(m_n_params))
        throw CheckpointError(msg(who, ": the state is for ", n_params, " parameters, this optimizer has ", m_n_params));
    const double step = blob_scalar(blobs, "step");
    if (!(step >= 0 && step <= UINT32_MAX && step == std::floor(step)))
        throw CheckpointError(msg(who, ": invalid step counter ", step));
    load_state_impl(stream, blobs);
    m_step = static_cast<uint32_t>(step);
}

// ---- create_optimizer ----

std::unique_ptr<Optimizer> create_optimizer_at(const json& config, const std::string& path, const char* extra_key) {
    if (!config.is_object()) throw ConfigError(msg(path, ": optimizer config must be a JSON object, got ", config.type_name()));
    std::string otype = "Adam";  // tcnn's default when the key is absent
    if (config.contains("otype")) otype = require_otype(config, path.c_str());
    const OptimizerFactory* factory = nullptr;
    std::string name;
    try {
        factory = &optimizer_registry().get(otype);
        name = optimizer_registry().canonical_name(otype);
    } catch (const ConfigError& e) {
        throw ConfigError(msg(path, ": ", e.what()));
    }
    ConfigReader reader(config, msg(path, " (", name, ")"));
    if (extra_key) reader.mark_known(extra_key);
    auto opt = (*factory)(reader, path);
    reader.finish();
    return opt;
}

std::unique_ptr<Optimizer> create_optimizer(const json& config) { return create_optimizer_at(config, "optimizer"); }

std::vector<std::string> optimizer_names() { return optimizer_registry().names(); }

std::unique_ptr<Optimizer> create_nested_optimizer(ConfigReader& reader, const std::string& path) {
    if (!reader.has("nested")) {
        reader.mark_known("nested");
        return create_optimizer_at(json::object(), path + ".nested");
    }
    return create_optimizer_at(reader.get_json("nested"), path + ".nested");
}

double get_float_below(ConfigReader& reader, const char* key, double def, double min, double max_exclusive) {
    const double v = reader.get_float(key, def);
    if (!(v >= min && v < max_exclusive)) reader.fail(key, msg("must be in [", min, ", ", max_exclusive, "), got ", v));
    return v;
}

GpuSplitStep* gpu_split(Optimizer& opt) { return dynamic_cast<GpuSplitStep*>(&opt); }

GpuSplitStep& nested_gpu_split(Optimizer& opt) {
    GpuSplitStep* split = gpu_split(opt);
    if (!split) throw UnsupportedError(msg(opt.name(), " optimizer: no GPU implementation"));
    return *split;
}

// ---- state helpers ----

template <typename E> void StateArray<E>::allocate(Device device, size_t n) {
    static_assert(sizeof(E) == 4, "state arrays hold 4-byte elements");
    m_buffer = Buffer(device, n * sizeof(E));
    m_size = n;
    if (n == 0) return;
    if (device.is_cpu()) {
        std::memset(m_buffer.data(), 0, n * sizeof(E));
    } else {
        // Zero bits are 0.0f and 0u alike; allocate() has no stream, so use the device's default one.
        fill(Stream::gpu(nullptr, device.index), View(m_buffer.data(), DType::f32, device, 1, static_cast<int64_t>(n)), 0.0);
    }
}

template <typename E> StateBlob StateArray<E>::to_blob(const Stream& stream, const std::string& name) const {
    StateBlob b;
    b.name = name;
    b.dtype = DType::f32;
    b.bytes.resize(m_size * sizeof(E));
    if (m_size) copy_bytes(stream, b.bytes.data(), Device::cpu(), m_buffer.data(), m_buffer.device(), b.bytes.size());
    return b;
}

template <typename E> void StateArray<E>::from_blob(const Stream& stream, const StateBlob& blob) {
    if (blob.bytes.size() != m_size * sizeof(E))
        throw CheckpointError(msg("optimizer state '", blob.name, "': ", blob.bytes.size(), " bytes, expected ",
                                  m_size * sizeof(E)));
    if (m_size) copy_bytes(stream, m_buffer.data(), m_buffer.device(), blob.bytes.data(), Device::cpu(), blob.bytes.size());
}

template class StateArray<float>;
template class StateArray<uint32_t>;

StateBlob scalar_blob(const std::string& name, double value) {
    StateBlob b;
    b.name = name;
    b.dtype = DType::f64;
    b.bytes.resize(sizeof(double));
    std::memcpy(b.bytes.data(), &value, sizeof(double));
    return b;
}

const StateBlob& find_blob(const std::vector<StateBlob>& blobs, const std::string& name) {
    for (const auto& b : blobs)
        if (b.name == name) return b;
    throw CheckpointError(msg("optimizer state has no '", name, "'"));
}

double blob_scalar(const std::vector<StateBlob>& blobs, const std::string& name) {
    const StateBlob& b = find_blob(blobs, name);
    if (b.dtype != DType::f64 || b.bytes.size() != sizeof(double))
        throw CheckpointError(msg("optimizer state '", name, "' must be one float64 value"));
    double v;
    std::memcpy(&v, b.bytes.data(), sizeof(double));
    return v;
}

void append_prefixed(std::vector<StateBlob>& out, const std::vector<StateBlob>& nested, const std::string& prefix) {
    for (const auto& b : nested) {
        out.push_back(b);
        out.back().name = prefix + b.name;
    }
}

std::vector<StateBlob> strip_prefix(const std::vector<StateBlob>& blobs, const std::string& prefix) {
    std::vector<StateBlob> out;
    for (const auto& b : blobs) {
        if (b.name.compare(0, prefix.size(), prefix) != 0) continue;
        out.push_back(b);
        out.back().name = b.name.substr(prefix.size());
    }
    return out;
}

// ---- weight copies ----

void weights_as_float(const void* weights, DType weights_dtype, size_t n, float* out) {
    dispatch_dtype(weights_dtype, [&](auto w) {
        using W = decltype(w);
        const W* src = static_cast<const W*>(weights);
        for_each_param(n, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) out[i] = to_float(src[i]);
        });
    });
}

void store_rounded(const float* values, void* weights, DType weights_dtype, size_t n) {
    if (weights_dtype == DType::f32 && weights == static_cast<const void*>(values)) return;
    dispatch_dtype(weights_dtype, [&](auto w) {
        using W = decltype(w);
        W* dst = static_cast<W*>(weights);
        for_each_param(n, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) dst[i] = from_float<W>(values[i]);
        });
    });
}

#ifndef TNN_WITH_GPU
// Without a GPU backend no optimizer is allocated on a GPU (allocate refuses), so these never run.
namespace optimizer_gpu {
void upload(const Stream&, void*, const void*, size_t) { throw_no_gpu_backend("optimizer"); }
void adam_step(const Stream&, const AdamScalars*, float, size_t, size_t, const void*, DType, float*, void*, DType,
               float*, float*, uint32_t*) {
    throw_no_gpu_backend("Adam optimizer");
}
void sgd_step(const Stream&, const SgdScalars*, float, size_t, const void*, DType, float*, void*, DType) {
    throw_no_gpu_backend("SGD optimizer");
}
size_t novograd_partials(size_t, size_t) { return 0; }
void novograd_step(const Stream&, const NovogradScalars*, float, size_t, size_t, const void*, DType, float*, void*,
                   DType, float*, float*, double*) {
    throw_no_gpu_backend("Novograd optimizer");
}
void ema_step(const Stream&, const EmaScalars*, size_t, const void*, DType, const float*, float*) {
    throw_no_gpu_backend("EMA optimizer");
}
void average_step(const Stream&, const AverageScalars*, size_t, const void*, DType, float*, float*) {
    throw_no_gpu_backend("Average optimizer");
}
void lookahead_step(const Stream&, const LookaheadScalars*, size_t, float*, void*, DType, float*) {
    throw_no_gpu_backend("Lookahead optimizer");
}
void batched_step(const Stream&, const BatchedScalars*, size_t, const void*, DType, float*, void*) {
    throw_no_gpu_backend("Batched optimizer");
}
void composite_gather(const Stream&, const uint32_t*, size_t, size_t, const float*, const float*, float*) {
    throw_no_gpu_backend("Composite optimizer");
}
}  // namespace optimizer_gpu
#endif  // !TNN_WITH_GPU

}  // namespace tnn
