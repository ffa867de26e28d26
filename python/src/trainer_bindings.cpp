// tinycudann._C.Trainer: the C++ Trainer (fused forward + loss + backward + optimizer, CUDA graphs) over
// a module of the package, its master weights bound to the module's torch parameter (Trainer::bind_params).
// Tensors cross as addresses, as in bindings.cpp; nothing here synchronises a device except loss().
#include "trainer_bindings.h"

#include <tnn/tnn.h>

#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace py = pybind11;

namespace {

tnn::Stream make_stream(int device, uintptr_t stream) {
    if (device < 0) return tnn::Stream::cpu();
    return tnn::Stream::gpu(reinterpret_cast<void*>(stream), device);
}

tnn::Device make_device(int device) { return device < 0 ? tnn::Device::cpu() : tnn::Device::gpu(device); }

tnn::json to_json(const py::object& config) {
    const auto text = py::module_::import("json").attr("dumps")(config).cast<std::string>();
    return tnn::json::parse(text);
}

py::object to_python(const tnn::json& j) { return py::module_::import("json").attr("loads")(j.dump()); }

class PyTrainer {
public:
    PyTrainer(std::shared_ptr<tnn::Module> model, const py::object& loss, const py::object& optimizer, int device,
              uint64_t seed)
        : m_device(device),
          m_trainer(std::make_unique<tnn::Trainer>(std::move(model), tnn::create_loss(to_json(loss)),
                                                   tnn::create_optimizer(to_json(optimizer)), make_device(device),
                                                   seed)) {}

    void bind_params(uintptr_t stream, uintptr_t params_fp32) {
        py::gil_scoped_release release;
        m_trainer->bind_params(make_stream(m_device, stream), reinterpret_cast<float*>(params_fp32));
    }

    // pdf_cols: 0 without a pdf, else 1 (per sample) or n_output_dims (per element).
    void step(uintptr_t stream, int64_t rows, uintptr_t input, uintptr_t target, uintptr_t pdf, int64_t pdf_cols) {
        const tnn::Device d = make_device(m_device);
        const tnn::Module& m = m_trainer->model();
        const tnn::DType t = m.input_dtype();
        const tnn::ConstView in(reinterpret_cast<const void*>(input), t, d, rows, m.n_input_dims());
        const tnn::ConstView tg(reinterpret_cast<const void*>(target), t, d, rows, m.n_output_dims());
        const tnn::ConstView pv(reinterpret_cast<const void*>(pdf), t, d, rows, pdf_cols);
        py::gil_scoped_release release;
        m_trainer->step(make_stream(m_device, stream), in, tg, pdf_cols > 0 ? &pv : nullptr);
    }

    double loss(uintptr_t stream) const {
        py::gil_scoped_release release;
        return m_trainer->loss(make_stream(m_device, stream));
    }

    // With the optimizer's inference weights (EMA, Average) where it has them, else the trained ones.
    void inference(uintptr_t stream, int64_t rows, uintptr_t input, uintptr_t output) const {
        const tnn::Device d = make_device(m_device);
        const tnn::Module& m = m_trainer->model();
        const tnn::ConstView in(reinterpret_cast<const void*>(input), m.input_dtype(), d, rows, m.n_input_dims());
        const tnn::View out(reinterpret_cast<void*>(output), m.output_dtype(), d, rows, m.n_output_dims());
        py::gil_scoped_release release;
        m_trainer->inference(make_stream(m_device, stream), in, out);
    }

    // The optimizer's state as (name, dtype name, bytes) triples, for state_dict().
    std::vector<std::tuple<std::string, std::string, py::bytes>> optimizer_state(uintptr_t stream) const {
        std::vector<tnn::StateBlob> blobs;
        {
            py::gil_scoped_release release;
            blobs = m_trainer->optimizer().state(make_stream(m_device, stream));
        }
        std::vector<std::tuple<std::string, std::string, py::bytes>> out;
        for (const auto& b : blobs)
            out.emplace_back(b.name, tnn::dtype_name(b.dtype),
                             py::bytes(reinterpret_cast<const char*>(b.bytes.data()), b.bytes.size()));
        return out;
    }

    void load_optimizer_state(uintptr_t stream, const std::vector<std::tuple<std::string, std::string, py::bytes>>& in) {
        std::vector<tnn::StateBlob> blobs;
        for (const auto& [name, dtype, bytes] : in) {
            tnn::StateBlob b;
            b.name = name;
            b.dtype = tnn::parse_dtype(dtype);
            const std::string s = bytes;
            b.bytes.assign(s.begin(), s.end());
            blobs.push_back(std::move(b));
        }
        py::gil_scoped_release release;
        const tnn::Stream s = make_stream(m_device, stream);
        m_trainer->optimizer().load_state(s, blobs);
        s.synchronize();  // the host bytes go out of scope
    }

    void save(uintptr_t stream, const std::string& path) const {
        py::gil_scoped_release release;
        m_trainer->save(make_stream(m_device, stream), path);
    }
    void load(uintptr_t stream, const std::string& path) {
        py::gil_scoped_release release;
        m_trainer->load(make_stream(m_device, stream), path);
    }

    tnn::Trainer& get() { return *m_trainer; }
    const tnn::Trainer& get() const { return *m_trainer; }

private:
    int m_device;
    std::unique_ptr<tnn::Trainer> m_trainer;
};

}  // namespace

void bind_trainer(py::module_& m, const std::function<std::shared_ptr<tnn::Module>(py::handle)>& module_of) {
    py::class_<PyTrainer>(m, "Trainer")
        .def(py::init([module_of](py::handle module, const py::object& loss, const py::object& optimizer, int device,
                                  uint64_t seed) {
                 return std::make_unique<PyTrainer>(module_of(module), loss, optimizer, device, seed);
             }),
             py::arg("module"), py::arg("loss"), py::arg("optimizer"), py::arg("device"), py::arg("seed"))
        .def("bind_params", &PyTrainer::bind_params)
        .def("step", &PyTrainer::step)
        .def("loss", &PyTrainer::loss)
        .def("inference", &PyTrainer::inference)
        .def("optimizer_state", &PyTrainer::optimizer_state)
        .def("load_optimizer_state", &PyTrainer::load_optimizer_state)
        .def("save", &PyTrainer::save)
        .def("load", &PyTrainer::load)
        .def("step_count", [](const PyTrainer& t) { return t.get().step_count(); })
        .def("learning_rate", [](const PyTrainer& t) { return t.get().optimizer().learning_rate(); })
        .def("set_learning_rate", [](PyTrainer& t, float lr) { t.get().optimizer().set_learning_rate(lr); })
        .def("use_graphs", [](const PyTrainer& t) { return t.get().use_graphs(); })
        .def("set_use_graphs", [](PyTrainer& t, bool on) { t.get().set_use_graphs(on); })
        .def("graph_captures", [](const PyTrainer& t) { return t.get().graph_captures(); })
        .def("graph_steps", [](const PyTrainer& t) { return t.get().graph_steps(); })
        .def("fused_loss", [](const PyTrainer& t) { return t.get().fused_loss(); })
        .def("loss_scale", [](const PyTrainer& t) { return t.get().loss_scale(); })
        .def("config", [](const PyTrainer& t) { return to_python(t.get().config()); });
}
