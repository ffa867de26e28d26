// tinycudann._C: the compiled half of the Python package. It never includes torch headers: tensors
// cross as raw addresses (Python ints), row counts, dtype names, a device index and a native stream
// handle, so one build works with every torch version. Nothing here synchronises a device. It also
// carries the small torch-free part of tcnn's `_C` (Precision, LogSeverity, batch_size_granularity,
// ...); tcnn's tensor-taking methods live in Python (modules.NativeModule).
#include "trainer_bindings.h"

#include <tnn/tnn.h>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>

#include <cstdint>
#include <memory>
#include <string>

namespace py = pybind11;

namespace {

// Where a call runs: device < 0 is the CPU, otherwise a GPU index with its native stream handle
// (cudaStream_t / hipStream_t as an integer; 0 is the legacy default stream).
tnn::Stream make_stream(int device, uintptr_t stream) {
    if (device < 0) return tnn::Stream::cpu();
    return tnn::Stream::gpu(reinterpret_cast<void*>(stream), device);
}

tnn::Device make_device(int device) { return device < 0 ? tnn::Device::cpu() : tnn::Device::gpu(device); }

void* ptr(uintptr_t address) { return reinterpret_cast<void*>(address); }

// Configs arrive as dicts (or JSON text); nlohmann parses the JSON text that Python's json module writes.
tnn::json to_json(const py::object& config) {
    if (py::isinstance<py::str>(config)) return tnn::json::parse(config.cast<std::string>());
    const auto text = py::module_::import("json").attr("dumps")(config).cast<std::string>();
    return tnn::json::parse(text);
}

py::object to_python(const tnn::json& j) { return py::module_::import("json").attr("loads")(j.dump()); }

// tcnn's precision enum. Fp32 and Fp16 keep tcnn's values: a pickled tcnn Encoding stores its
// precision as that integer. Bf16 and Fp64 are ours.
enum class Precision { Fp32 = 0, Fp16 = 1, Bf16 = 2, Fp64 = 3 };

tnn::DType to_dtype(Precision p) {
    switch (p) {
        case Precision::Fp32: return tnn::DType::f32;
        case Precision::Fp16: return tnn::DType::f16;
        case Precision::Bf16: return tnn::DType::bf16;
        case Precision::Fp64: return tnn::DType::f64;
    }
    throw tnn::DTypeError(tnn::msg("tinycudann: unknown Precision value ", static_cast<int>(p),
                                   "; valid: Fp32, Fp16, Bf16, Fp64"));
}

Precision to_precision(tnn::DType t) {
    switch (t) {
        case tnn::DType::f32: return Precision::Fp32;
        case tnn::DType::f16: return Precision::Fp16;
        case tnn::DType::bf16: return Precision::Bf16;
        case tnn::DType::f64: return Precision::Fp64;
    }
    throw tnn::DTypeError("tinycudann: unknown dtype");
}

// tcnn's log severities; the library's info and warning map to Info and Warning.
enum class LogSeverity { Info, Debug, Warning, Error, Success };

// One forward pass's state, kept by the autograd node that made it. It also keeps the module alive,
// so a context outliving its Python module still points at valid code.
// A default-constructed one is empty: what tcnn's fwd returns after an inference-only pass.
struct NativeContext {
    std::shared_ptr<const tnn::Module> module;
    std::unique_ptr<tnn::Context> ctx;
    int64_t rows = 0;
    int device = -1;
};

class NativeModule {
public:
    explicit NativeModule(std::shared_ptr<tnn::Module> m) : m_module(std::move(m)) {}
    const std::shared_ptr<tnn::Module>& shared() const { return m_module; }

    uint32_t n_input_dims() const { return m_module->n_input_dims(); }
    uint32_t n_output_dims() const { return m_module->n_output_dims(); }
    size_t n_params() const { return m_module->n_params(); }
    size_t n_matrix_params() const { return m_module->n_matrix_params(); }
    std::string param_dtype() const { return tnn::dtype_name(m_module->param_dtype()); }
    std::string output_dtype() const { return tnn::dtype_name(m_module->output_dtype()); }
    std::string input_dtype() const { return tnn::dtype_name(m_module->input_dtype()); }
    Precision param_precision() const { return to_precision(m_module->param_dtype()); }
    Precision output_precision() const { return to_precision(m_module->output_dtype()); }
    bool accepts_input_dtype(const std::string& t) const { return m_module->accepts_input_dtype(tnn::parse_dtype(t)); }
    std::string name() const { return m_module->name(); }
    std::string describe() const { return m_module->describe(); }
    py::object hyperparams() const { return to_python(m_module->hyperparams()); }
    bool supports_device(int device) const { return m_module->supports_device(make_device(device)); }
    // Without a device: on some device; with one (-1: the CPU): there.
    bool supports_backward_backward(std::optional<int> device) const {
        return device ? m_module->supports_backward_backward_on(make_device(*device))
                      : m_module->supports_backward_backward();
    }

    // Fills n_params() fp32 values at a host address.
    void initial_params(uint64_t seed, uintptr_t params_fp32) const {
        m_module->init_params(seed, static_cast<float*>(ptr(params_fp32)));
    }

    // params_dtype: the dtype of the values at `params`; when it is not the module's (fp32 master weights
    // of a half-precision module), they are rounded into a stream-ordered temporary first: one launch from
    // here instead of a cast through torch on every call.
    void inference(int device, uintptr_t stream, int64_t rows, uintptr_t input, const std::string& input_dtype,
                   uintptr_t output, uintptr_t params, const std::string& params_dtype) const {
        const tnn::DType in_t = tnn::parse_dtype(input_dtype);
        const tnn::DType p_t = params_dtype.empty() ? m_module->param_dtype() : tnn::parse_dtype(params_dtype);
        py::gil_scoped_release release;
        const tnn::Stream s = make_stream(device, stream);
        if (p_t == m_module->param_dtype() || m_module->n_params() == 0) {
            m_module->inference(s, in_view(device, rows, input, in_t), out_view(device, rows, output), ptr(params));
            return;
        }
        const auto n = static_cast<int64_t>(m_module->n_params());
        tnn::Tensor rounded = tnn::Tensor::temporary(s, 1, n, m_module->param_dtype());
        tnn::convert(s, tnn::ConstView(ptr(params), p_t, make_device(device), 1, n), rounded.view());
        m_module->inference(s, in_view(device, rows, input, in_t), out_view(device, rows, output), rounded.data());
    }

    NativeContext forward(int device, uintptr_t stream, int64_t rows, uintptr_t input, const std::string& input_dtype,
                      uintptr_t output, uintptr_t params, bool prepare_input_gradients) const {
        const tnn::DType in_t = tnn::parse_dtype(input_dtype);
        NativeContext c;
        c.module = m_module;
        c.rows = rows;
        c.device = device;
        py::gil_scoped_release release;
        const tnn::Stream s = make_stream(device, stream);
        c.ctx = m_module->forward(s, in_view(device, rows, input, in_t), out_view(device, rows, output), ptr(params),
                                  prepare_input_gradients);
        return c;
    }

    // Optional outputs (dL_dinput, dL_dparams) are absent when their address is 0.
    void backward(const NativeContext& ctx, int device, uintptr_t stream, int64_t rows, uintptr_t input,
                  const std::string& input_dtype, uintptr_t output, uintptr_t dL_doutput, uintptr_t dL_dinput,
                  uintptr_t dL_dparams, uintptr_t params, bool accumulate) const {
        check_context(ctx, device, rows, "backward");
        const tnn::DType in_t = tnn::parse_dtype(input_dtype);
        py::gil_scoped_release release;
        const tnn::Stream s = make_stream(device, stream);
        tnn::View dL_din = in_view(device, rows, dL_dinput, in_t);
        m_module->backward(s, *ctx.ctx, in_view(device, rows, input, in_t), out_view(device, rows, output),
                           out_view(device, rows, dL_doutput), dL_dinput ? &dL_din : nullptr, ptr(dL_dparams),
                           ptr(params), accumulate ? tnn::GradMode::accumulate : tnn::GradMode::overwrite);
    }

    void backward_backward_input(const NativeContext& ctx, int device, uintptr_t stream, int64_t rows, uintptr_t input,
                                 const std::string& input_dtype, uintptr_t dL_ddLdinput, uintptr_t dL_doutput,
                                 uintptr_t dL_ddLdoutput, uintptr_t dL_dinput, uintptr_t dL_dparams, uintptr_t params,
                                 bool accumulate) const {
        check_context(ctx, device, rows, "backward_backward_input");
        const tnn::DType in_t = tnn::parse_dtype(input_dtype);
        py::gil_scoped_release release;
        const tnn::Stream s = make_stream(device, stream);
        tnn::View dL_ddLdout = out_view(device, rows, dL_ddLdoutput);
        tnn::View dL_din = in_view(device, rows, dL_dinput, in_t);
        m_module->backward_backward_input(s, *ctx.ctx, in_view(device, rows, input, in_t),
                                          in_view(device, rows, dL_ddLdinput, in_t), out_view(device, rows, dL_doutput),
                                          dL_ddLdoutput ? &dL_ddLdout : nullptr, dL_dinput ? &dL_din : nullptr,
                                          ptr(dL_dparams), ptr(params),
                                          accumulate ? tnn::GradMode::accumulate : tnn::GradMode::overwrite);
    }

private:
    // Contiguous [rows, n] views; the module's own checks then validate shapes, dtypes and devices.
    tnn::View in_view(int device, int64_t rows, uintptr_t address, tnn::DType t) const {
        return tnn::View(ptr(address), t, make_device(device), rows, m_module->n_input_dims());
    }
    tnn::View out_view(int device, int64_t rows, uintptr_t address) const {
        return tnn::View(ptr(address), m_module->output_dtype(), make_device(device), rows, m_module->n_output_dims());
    }
    void check_context(const NativeContext& ctx, int device, int64_t rows, const char* method) const {
        if (!ctx.ctx || ctx.module != m_module)
            throw tnn::Error(tnn::msg(m_module->describe(), " ", method, ": the context comes from another module"));
        if (ctx.rows != rows || ctx.device != device)
            throw tnn::ShapeError(tnn::msg(m_module->describe(), " ", method, ": the context is for ", ctx.rows,
                                           " rows on ", make_device(ctx.device).str(), ", the call passes ", rows,
                                           " rows on ", make_device(device).str()));
    }

    std::shared_ptr<tnn::Module> m_module;
};

// Library warnings (unknown config keys, ...) become Python UserWarnings, so `warnings` filters and
// pytest see them. A filter that turns warnings into errors raises from the call that warned.
void forward_log_to_python(tnn::LogLevel level, const std::string& message) {
    if (level == tnn::LogLevel::info || !Py_IsInitialized()) return;
    py::gil_scoped_acquire gil;
    if (PyErr_WarnEx(PyExc_UserWarning, ("tinycudann: " + message).c_str(), 1) != 0) throw py::error_already_set();
}

// tcnn's set_log_callback(callable(LogSeverity, str)); None restores the UserWarning forwarder. The
// module attribute _log_callback owns the callable and the C++ callback borrows it, so no C++ static
// owns a Python object past the interpreter. The library calls its callback under its log mutex:
// the GIL is released while the callback is swapped (a logging thread may be waiting for the GIL),
// and the old callable is dropped only after the swap, when no thread can still be calling it.
void set_python_log_callback(py::module_ m, const py::object& callback) {
    if (!callback.is_none() && !PyCallable_Check(callback.ptr()))
        throw py::type_error("tinycudann: set_log_callback takes a callable(LogSeverity, str) or None");
    py::object previous = m.attr("_log_callback");
    m.attr("_log_callback") = callback;
    tnn::LogCallback cb = forward_log_to_python;
    if (!callback.is_none()) {
        PyObject* fn = callback.ptr();
        cb = [fn](tnn::LogLevel level, const std::string& message) {
            if (!Py_IsInitialized()) return;
            py::gil_scoped_acquire gil;
            const py::handle callable(fn);
            callable(level == tnn::LogLevel::warning ? LogSeverity::Warning : LogSeverity::Info, message);
        };
    }
    {
        py::gil_scoped_release release;
        tnn::set_log_callback(std::move(cb));
    }
}

// Error types: tcnn raises RuntimeError for everything its C++ side refuses (and ValueError for an
// Encoding dtype it lacks), our package raised ValueError / TypeError. Each type below is all of
// those at once, so `except RuntimeError` (tcnn code) and `except ValueError` (ours) both catch it.
// They are created once per process and owned by the module (never freed: the module is never unloaded).
PyObject* g_tcnn_error = nullptr;        // TcnnError(RuntimeError): device and checkpoint failures
PyObject* g_tcnn_value_error = nullptr;  // TcnnValueError(TcnnError, ValueError): config, shape, unsupported, input
PyObject* g_tcnn_type_error = nullptr;   // TcnnTypeError(TcnnError, TypeError, ValueError): dtypes

PyObject* add_exception(py::module_& m, const char* name, const char* doc, std::initializer_list<PyObject*> bases) {
    py::tuple b(bases.size());
    size_t i = 0;
    for (PyObject* base : bases) b[i++] = py::reinterpret_borrow<py::object>(base);
    // Named after the package that exports it, so tracebacks and pickles say tinycudann.<name>.
    PyObject* type = PyErr_NewExceptionWithDoc((std::string("tinycudann.") + name).c_str(), doc, b.ptr(), nullptr);
    if (!type) throw py::error_already_set();
    m.add_object(name, py::handle(type));
    return type;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
    m.doc() = "tiny-rdna4-nn modules over raw pointers; use the tinycudann package, not this module directly";

    g_tcnn_error = add_exception(m, "TcnnError",
                                 "A tiny-rdna4-nn error; a RuntimeError, as every error of tcnn's C++ side.",
                                 {PyExc_RuntimeError});
    g_tcnn_value_error = add_exception(
        m, "TcnnValueError", "A bad config, shape, unsupported request or input: a ValueError and tcnn's RuntimeError.",
        {g_tcnn_error, PyExc_ValueError});
    g_tcnn_type_error = add_exception(
        m, "TcnnTypeError",
        "An unsupported or mismatched dtype: a TypeError, tcnn's RuntimeError, and the ValueError tcnn's Encoding raises.",
        {g_tcnn_error, PyExc_TypeError, PyExc_ValueError});

    // tnn errors keep their message and become the Python exception their kind calls for.
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const tnn::DTypeError& e) {
            PyErr_SetString(g_tcnn_type_error, e.what());
        } catch (const tnn::ConfigError& e) {
            PyErr_SetString(g_tcnn_value_error, e.what());
        } catch (const tnn::ShapeError& e) {
            PyErr_SetString(g_tcnn_value_error, e.what());
        } catch (const tnn::UnsupportedError& e) {
            PyErr_SetString(g_tcnn_value_error, e.what());
        } catch (const tnn::InputError& e) {
            PyErr_SetString(g_tcnn_value_error, e.what());
        } catch (const tnn::Error& e) {  // DeviceError, CheckpointError and plain Error
            PyErr_SetString(g_tcnn_error, e.what());
        } catch (const tnn::json::exception& e) {
            PyErr_SetString(g_tcnn_value_error, (std::string("tinycudann: invalid JSON config: ") + e.what()).c_str());
        }
    });

    m.attr("_log_callback") = py::none();
    tnn::set_log_callback(forward_log_to_python);
    // At exit the library's callback goes back to stderr before Python objects are torn down.
    py::module_::import("atexit").attr("register")(py::cpp_function([]() {
        py::gil_scoped_release release;  // as in set_python_log_callback
        tnn::set_log_callback(nullptr);
    }));

    py::enum_<Precision>(m, "Precision")
        .value("Fp32", Precision::Fp32)
        .value("Fp16", Precision::Fp16)
        .value("Bf16", Precision::Bf16)
        .value("Fp64", Precision::Fp64)
        .export_values();
    py::enum_<LogSeverity>(m, "LogSeverity")
        .value("Info", LogSeverity::Info)
        .value("Debug", LogSeverity::Debug)
        .value("Warning", LogSeverity::Warning)
        .value("Error", LogSeverity::Error)
        .value("Success", LogSeverity::Success)
        .export_values();

    py::class_<NativeContext>(m, "Context")
        .def(py::init<>())
        .def_property_readonly("valid", [](const NativeContext& c) { return static_cast<bool>(c.ctx); });

    py::class_<NativeModule>(m, "Module")
        .def("n_input_dims", &NativeModule::n_input_dims)
        .def("n_output_dims", &NativeModule::n_output_dims)
        .def("n_params", &NativeModule::n_params)
        .def("n_matrix_params", &NativeModule::n_matrix_params)
        .def("param_dtype", &NativeModule::param_dtype)
        .def("output_dtype", &NativeModule::output_dtype)
        .def("input_dtype", &NativeModule::input_dtype)
        .def("param_precision", &NativeModule::param_precision)
        .def("output_precision", &NativeModule::output_precision)
        .def("accepts_input_dtype", &NativeModule::accepts_input_dtype)
        .def("name", &NativeModule::name)
        .def("describe", &NativeModule::describe)
        .def("hyperparams", &NativeModule::hyperparams)
        .def("supports_device", &NativeModule::supports_device, py::arg("device"))
        .def("supports_backward_backward", &NativeModule::supports_backward_backward,
             py::arg("device") = std::nullopt)
        .def("initial_params", &NativeModule::initial_params, py::arg("seed"), py::arg("params_fp32"))
        .def("inference", &NativeModule::inference, py::arg("device"), py::arg("stream"), py::arg("rows"),
             py::arg("input"), py::arg("input_dtype"), py::arg("output"), py::arg("params"),
             py::arg("params_dtype") = std::string())
        .def("forward", &NativeModule::forward)
        .def("backward", &NativeModule::backward)
        .def("backward_backward_input", &NativeModule::backward_backward_input);

    m.def("create_encoding", [](uint32_t n_input_dims, const py::object& config, const std::string& dtype) {
        return NativeModule(tnn::create_encoding(n_input_dims, to_json(config), tnn::parse_dtype(dtype)));
    });
    m.def("create_encoding", [](uint32_t n_input_dims, const py::object& config, Precision precision) {
        return NativeModule(tnn::create_encoding(n_input_dims, to_json(config), to_dtype(precision)));
    });
    m.def("create_network", [](uint32_t n_input_dims, uint32_t n_output_dims, const py::object& config) {
        return NativeModule(tnn::create_network(n_input_dims, n_output_dims, to_json(config)));
    });
    m.def("create_network_with_input_encoding", [](uint32_t n_input_dims, uint32_t n_output_dims,
                                                   const py::object& encoding, const py::object& network) {
        return NativeModule(tnn::create_network_with_input_encoding(n_input_dims, n_output_dims, to_json(encoding),
                                                                to_json(network)));
    });
    m.def("network_dtype", [](const py::object& config) { return std::string(tnn::dtype_name(tnn::network_dtype(to_json(config)))); });
    m.def("encoding_names", &tnn::encoding_names);
    m.def("network_names", &tnn::network_names);

    bind_trainer(m, [](py::handle h) { return h.cast<const NativeModule&>().shared(); });

    m.def("version", &tnn::version);
    m.def("has_gpu_backend", &tnn::has_gpu_backend);
    m.def("gpu_backend_name", &tnn::gpu_backend_name);
    m.def("gpu_device_count", &tnn::gpu_device_count);
    m.def("gpu_device_description", &tnn::gpu_device_description);
    m.def("gpu_architectures", &tnn::gpu_architectures);
    m.def("gpu_device_code", &tnn::gpu_device_code);
    m.def("free_temporary_memory", &tnn::free_temporary_memory);
    m.def("memory_stats", [](int device) {
        const tnn::GpuMemoryStats s = tnn::gpu_memory_stats(device);
        py::dict d;
        d["temporary_reserved_bytes"] = s.temporary_reserved_bytes;
        d["temporary_in_use_bytes"] = s.temporary_in_use_bytes;
        d["driver_allocations"] = s.driver_allocations;
        d["driver_frees"] = s.driver_frees;
        return d;
    });
    m.def("set_deterministic", &tnn::set_deterministic);
    m.def("deterministic", &tnn::deterministic);
    m.def("set_num_threads", &tnn::set_num_threads);
    m.def("num_threads", &tnn::num_threads);

    // tcnn's small _C functions, with what they mean here.
    m.def("batch_size_granularity", []() { return uint32_t{1}; });  // any batch size runs; nothing is padded
    m.def("default_loss_scale", [](Precision p) { return p == Precision::Fp16 ? 128.0f : 1.0f; });
    m.def("has_networks", []() { return true; });
    // What Encoding(dtype=None) picks for parameters on the GPU; Fp32 where no GPU can run.
    m.def("preferred_precision", []() {
        return tnn::has_gpu_backend() && tnn::gpu_device_count() > 0 ? Precision::Fp16 : Precision::Fp32;
    });
    m.def("supports_jit_fusion", [](int) { return false; }, py::arg("device") = -1);
    // No runtime compilation exists here: the directories are accepted and unused.
    m.def("rtc_set_cache_dir", [](const std::string&) {});
    m.def("rtc_set_include_dir", [](const std::string&) {});
    m.def("set_log_callback", [m](const py::object& callback) { set_python_log_callback(m, callback); },
          py::arg("callback"));
}
