// Trainer: parameters (fp32 master + model dtype copy), gradients and per-step buffers on one
// device; step = forward, loss, backward, optimizer, all queued on the caller's stream. On a GPU a
// step whose views repeat is captured into a graph once and replayed (trainer.h, docs/gpu.md).
#include <tnn/checkpoint.h>
#include <tnn/trainer.h>

#include "core/gpu_bridge.h"
#include "core/view_check.h"
#include "losses/loss_gpu.h"
#include "networks/fused_loss.h"
#include "optimizers/optimizer_impl.h"

#include <typeinfo>

namespace tnn {

namespace {

// What a captured step depends on besides the trainer's own buffers: the stream and the views.
struct StepViews {
    void* stream = nullptr;
    ConstView input, target, pdf;  // pdf.data == nullptr: no pdf
};

#ifdef TNN_WITH_GPU
bool same_view(const ConstView& a, const ConstView& b) {
    return a.data == b.data && a.dtype == b.dtype && a.device == b.device && a.rows == b.rows && a.cols == b.cols &&
           a.stride == b.stride;
}

bool same_views(const StepViews& a, const StepViews& b) {
    return a.stream == b.stream && same_view(a.input, b.input) && same_view(a.target, b.target) &&
           same_view(a.pdf, b.pdf);
}

// The step that captures: the first two run eagerly (modules finish their lazy setup, caches fill).
constexpr int kStepsBeforeCapture = 2;
#endif  // TNN_WITH_GPU

// The network the fused step runs (trainer.h), or null: the model, or the network behind its input
// encoding, where the network fuses with the trainer's loss.
const Module* fusable_network(const Module& model, const Loss& loss, Device device, LossKind* kind) {
    if (!loss_kind_of(loss, kind)) return nullptr;
    // Exactly NetworkWithInputEncoding: a subclass may do more in its passes than the fused step does.
    const auto* nwie = typeid(model) == typeid(NetworkWithInputEncoding)
                           ? static_cast<const NetworkWithInputEncoding*>(&model)
                           : nullptr;
    const Module& net = nwie ? static_cast<const Module&>(nwie->network()) : model;
    return can_fuse_loss(net, device, *kind) ? &net : nullptr;
}

}  // namespace

struct Trainer::Impl {
    Buffer params_fp32, params, grads;
    float* external_fp32 = nullptr;  // bind_params: the caller's master weights, else params_fp32
    float* master() const { return external_fp32 ? external_fp32 : params_fp32.ptr<float>(); }
    // A step on the legacy default stream, which cannot capture, runs its graph on this stream of the
    // trainer's own, ordered after and before the caller's work by events.
    void* own_stream = nullptr;
    int own_stream_device = 0;
    // Per-step buffers, reused while the batch size stays the same.
    Tensor output, dL_doutput, loss_values, inference_params;
    json config;
    int64_t batch = -1;  // rows the per-step buffers are sized for
    bool unfused_buffers = false;  // output and dL_doutput exist (only the unfused step uses them)
    // This step's fused network (fusable_network) and loss kind, or null: set by step() before the
    // step runs eagerly or is captured.
    const Module* fused_net = nullptr;
    LossKind fused_kind = LossKind::l2;
    bool has_loss = false;
    bool fused_loss = true;  // set_fused_loss

    // GPU graphs. `graph` replays a step with the views `graph_views`; the last `seen_count` steps
    // (refused ones included) had the views `seen`, which are captured when that count reaches 3.
    bool use_graphs = true;
    StepViews seen, graph_views;
    int seen_count = 0;
    uint32_t expected_step = 0;  // the optimizer's step count after the last step: another one means a reset
    void* graph = nullptr;
    int graph_device = 0;
    uint64_t captures = 0, graph_steps = 0;

    ~Impl() {
        drop_graph();
#ifdef TNN_WITH_GPU
        if (own_stream) gpu_bridge::destroy_stream(own_stream_device, own_stream);
#endif  // TNN_WITH_GPU
    }
    // After anything the graph holds a pointer to changed (per-step buffers, optimizer state arrays).
    void drop_graph() noexcept {
#ifdef TNN_WITH_GPU
        gpu_bridge::destroy_graph(graph_device, graph);
#endif  // TNN_WITH_GPU
        graph = nullptr;
        seen_count = 0;
    }
    // Forward, loss and backward of one step: the part of a step without the optimizer.
    void forward_loss_backward(Trainer& t, const Stream& stream, ConstView input, ConstView target,
                               const ConstView* data_pdf);
    // The same as one fused kernel for `net` (fusable_network), after the input encoding's forward pass.
    void fused_forward_loss_backward(Trainer& t, const Stream& stream, ConstView input, ConstView target,
                                     const Module& net, LossKind kind);
    // Runs the step from a graph (capturing it first when due); false: the caller runs it eagerly.
    bool graph_step(Trainer& t, const Stream& stream, ConstView input, ConstView target, const ConstView* data_pdf);
};

namespace {

json full_config(const Module& model, const Loss& loss, const Optimizer& opt) {
    json j = {{"loss", loss.hyperparams()}, {"optimizer", opt.hyperparams()}};
    if (const auto* nwie = dynamic_cast<const NetworkWithInputEncoding*>(&model)) {
        j["encoding"] = nwie->encoding().hyperparams();
        j["network"] = nwie->network().hyperparams();
    } else {
        j["model"] = model.hyperparams();
    }
    return j;
}

}  // namespace

Trainer::Trainer(std::shared_ptr<Module> model, std::shared_ptr<Loss> loss, std::shared_ptr<Optimizer> optimizer,
                 Device device, uint64_t seed)
    : m_impl(std::make_unique<Impl>()), m_model(std::move(model)), m_loss(std::move(loss)),
      m_optimizer(std::move(optimizer)), m_device(device), m_seed(seed) {
    if (!m_model || !m_loss || !m_optimizer) throw ConfigError("Trainer: model, loss and optimizer must not be null");
    if (!m_model->supports_device(device))
        throw UnsupportedError(msg("Trainer: ", m_model->describe(), " does not run on ", device.str()));
    const DType t = m_model->param_dtype();
    m_loss_scale = (t == DType::f16 || t == DType::bf16) ? 128.0f : 1.0f;
    const size_t n = m_model->n_params();
    m_impl->params_fp32 = Buffer(device, n * sizeof(float));
    m_impl->params = t == DType::f32 ? Buffer() : Buffer(device, n * dtype_size(t));
    m_impl->grads = Buffer(device, n * dtype_size(t));
    m_impl->config = full_config(*m_model, *m_loss, *m_optimizer);

    std::vector<float> init(n);
    m_model->init_params(seed, init.data());
    const Stream stream = device.is_cpu() ? Stream::cpu() : Stream::gpu(nullptr, device.index);
    set_params(stream, init.data());
    stream.synchronize();
}

namespace {

// A part of a full config, or its default; a config that is not a JSON object is a ConfigError here,
// whichever of the delegating constructor's arguments is evaluated first.
json config_part(const json& config, const char* key, const json& fallback) {
    if (!config.is_object()) throw ConfigError(msg("Trainer: the config must be a JSON object, got ", config.type_name()));
    return config.value(key, fallback);
}

}  // namespace

Trainer::Trainer(uint32_t n_input_dims, uint32_t n_output_dims, const json& config, Device device, uint64_t seed)
    : Trainer(create_model(n_input_dims, n_output_dims, config),
              create_loss(config_part(config, "loss", json{{"otype", "L2"}})),
              create_optimizer(config_part(config, "optimizer", json{{"otype", "Adam"}})), device, seed) {}

Trainer::~Trainer() = default;

uint32_t Trainer::step_count() const { return m_optimizer->step_count(); }
json Trainer::config() const { return m_impl->config; }
const float* Trainer::params_fp32() const { return m_impl->master(); }
const void* Trainer::params() const {
    return m_model->param_dtype() == DType::f32 ? static_cast<const void*>(m_impl->master()) : m_impl->params.data();
}

std::vector<float> Trainer::params_host(const Stream& stream) const {
    std::vector<float> out(m_model->n_params());
    copy_bytes(stream, out.data(), Device::cpu(), m_impl->master(), m_device, out.size() * sizeof(float));
    stream.synchronize();
    return out;
}

void Trainer::set_params(const Stream& stream, const float* host_params) {
    const size_t n = m_model->n_params();
    copy_bytes(stream, m_impl->master(), m_device, host_params, Device::cpu(), n * sizeof(float));
    refresh_param_copy(stream);
    m_optimizer->allocate(m_device, n, m_model->n_matrix_params());
    m_impl->has_loss = false;
    m_impl->drop_graph();  // the optimizer's state arrays are new
    m_impl->expected_step = m_optimizer->step_count();
}

void Trainer::refresh_param_copy(const Stream& stream) {
    const auto n = static_cast<int64_t>(m_model->n_params());
    if (m_model->param_dtype() == DType::f32 || n == 0) return;
    convert(stream, ConstView(m_impl->master(), DType::f32, m_device, 1, n),
            View(m_impl->params.data(), m_model->param_dtype(), m_device, 1, n));
}

void Trainer::bind_params(const Stream& stream, float* params_fp32) {
    if (!params_fp32) throw ConfigError("Trainer::bind_params: the parameter address is null");
    if (stream.device() != m_device)
        throw DeviceError(msg("Trainer::bind_params: the trainer lives on ", m_device.str(), " but got a stream on ",
                              stream.device().str()));
    const auto n = static_cast<int64_t>(m_model->n_params());
    // The same checks as any view the trainer reads (device memory of its GPU, not null).
    check_view("Trainer::bind_params", "params", ConstView(params_fp32, DType::f32, m_device, 1, n), 1, n, m_device,
               "the trainer");
    Impl& s = *m_impl;
    if (s.external_fp32 != params_fp32) {
        s.drop_graph();  // it holds the old address
        s.external_fp32 = params_fp32;
        s.params_fp32 = Buffer();
    }
    refresh_param_copy(stream);
}

void Trainer::step(const Stream& stream, ConstView input, ConstView target, const ConstView* data_pdf) {
    const std::string who = "Trainer::step";
    if (stream.device() != m_device || input.device != m_device)
        throw DeviceError(msg(who, ": the trainer lives on ", m_device.str(), " but got a stream on ",
                              stream.device().str(), " and input on ", input.device.str()));
    // Checked here in full, not only by the loss: the fused step (set_fused_loss) hands the target to a
    // kernel without Loss::evaluate.
    check_view(who, "target", target, input.rows, m_model->n_output_dims(), m_device, "the trainer");
    // The loss takes targets in the dtype the model takes inputs in: fp32, fp64 for fp64 models.
    if (target.dtype != m_model->input_dtype())
        throw DTypeError(msg(who, ": target must be ", dtype_name(m_model->input_dtype()), ", got ", dtype_name(target.dtype)));

    Impl& s = *m_impl;
    const int64_t rows = input.rows, n_out = m_model->n_output_dims();
    if (s.batch != rows) {
        s.batch = rows;
        s.drop_graph();  // it holds the old per-step buffers
        s.loss_values = Tensor(rows, n_out, m_model->input_dtype(), m_device);
        s.output = Tensor();
        s.dL_doutput = Tensor();
        s.unfused_buffers = false;
    }
    s.fused_net = s.fused_loss && !data_pdf ? fusable_network(*m_model, *m_loss, m_device, &s.fused_kind) : nullptr;
    // The unfused step's output and dL/doutput, allocated by the first step of a batch size that needs
    // them (a fused step does not); a graph that uses them was dropped above when the size changed.
    if (!s.fused_net && !s.unfused_buffers) {
        s.output = Tensor(rows, n_out, m_model->output_dtype(), m_device);
        s.dL_doutput = Tensor(rows, n_out, m_model->output_dtype(), m_device);
        s.unfused_buffers = true;
    }
    if (!(m_device.is_gpu() && s.use_graphs && s.graph_step(*this, stream, input, target, data_pdf))) {
        s.forward_loss_backward(*this, stream, input, target, data_pdf);
        const DType t = m_model->param_dtype();
        void* weights = t == DType::f32 ? static_cast<void*>(s.master()) : s.params.data();
        m_optimizer->step(stream, m_loss_scale, s.master(), weights, t, s.grads.data(), t);
    }
    s.has_loss = true;
    s.expected_step = m_optimizer->step_count();
}

void Trainer::Impl::forward_loss_backward(Trainer& t, const Stream& stream, ConstView input, ConstView target,
                                          const ConstView* data_pdf) {
    // The caller may have written its master weights since the last step: the step reads them anew.
    if (external_fp32) t.refresh_param_copy(stream);
    if (fused_net) {
        fused_forward_loss_backward(t, stream, input, target, *fused_net, fused_kind);
        return;
    }
    const void* p = t.params();
    auto ctx = t.m_model->forward(stream, input, output.view(), p, false);
    t.m_loss->evaluate(stream, t.m_loss_scale, output.view(), target, data_pdf, loss_values.view(), dL_doutput.view());
    t.m_model->backward(stream, *ctx, input, output.view(), dL_doutput.view(), nullptr, grads.data(), p,
                        GradMode::overwrite);
}

void Trainer::Impl::fused_forward_loss_backward(Trainer& t, const Stream& stream, ConstView input, ConstView target,
                                                const Module& net, LossKind kind) {
    const void* p = t.params();
    View values = loss_values.view();
    const auto* nwie = &net == t.m_model.get() ? nullptr : static_cast<const NetworkWithInputEncoding*>(t.m_model.get());
    if (!nwie) {
        fused_loss_backward(net, stream, input, target, kind, t.m_loss_scale, values, nullptr, grads.data(), p);
        return;
    }
    // As NetworkWithInputEncoding's forward and backward: parameters [network, encoding].
    const Encoding& enc = nwie->encoding();
    const size_t off = nwie->encoding_params_offset();
    const char* p_enc = static_cast<const char*>(p) + off;
    Tensor encoded = Tensor::temporary(stream, input.rows, enc.n_output_dims(), enc.output_dtype());
    auto enc_ctx = enc.forward(stream, input, encoded.view(), p_enc, false);
    if (enc.n_params() == 0) {
        fused_loss_backward(net, stream, encoded.view(), target, kind, t.m_loss_scale, values, nullptr,
                                 grads.data(), p);
        return;
    }
    Tensor dL_dencoded = Tensor::temporary(stream, input.rows, enc.n_output_dims(), enc.output_dtype());
    View dL_dencoded_view = dL_dencoded.view();
    fused_loss_backward(net, stream, encoded.view(), target, kind, t.m_loss_scale, values, &dL_dencoded_view,
                             grads.data(), p);
    enc.backward(stream, *enc_ctx, input, encoded.view(), dL_dencoded.view(), nullptr,
                 static_cast<char*>(grads.data()) + off, p_enc, GradMode::overwrite);
}

bool Trainer::Impl::graph_step(Trainer& t, const Stream& stream, ConstView input, ConstView target,
                               const ConstView* data_pdf) {
#ifdef TNN_WITH_GPU
    // An optimizer from outside the library has no GPU halves; a stream the caller is capturing already
    // gets the eager step (whose optimizer refuses it). The legacy default stream cannot capture: its
    // graph runs on the trainer's own stream (Impl::own_stream).
    GpuSplitStep* split = gpu_split(*t.m_optimizer);
    if (!split || gpu_bridge::is_capturing(stream)) return false;
    const StepViews views{stream.native(), input, target, data_pdf ? *data_pdf : ConstView()};
    // The optimizer was reset (new state arrays) behind the trainer's back.
    if (t.m_optimizer->step_count() != expected_step) drop_graph();
    const bool replay = graph && same_views(views, graph_views);
    if (!replay) {
        if (seen_count > 0 && same_views(views, seen)) {
            ++seen_count;
        } else {
            seen = views;
            seen_count = 1;
        }
        if (seen_count <= kStepsBeforeCapture) return false;
    }

    Stream work = stream;
    if (!stream.native()) {
        const int dev = t.m_device.index;
        if (!own_stream) {
            own_stream = gpu_bridge::create_stream(dev);
            own_stream_device = dev;
        }
        work = Stream::gpu(own_stream, dev);
        gpu_bridge::stream_wait(work, stream);
    }
    // The caller's later work waits for this step however it leaves; a join that fails then has
    // nothing left to order (the device is in error, and the next call reports it).
    struct Join {
        const Stream &caller, &work;
        ~Join() {
            if (work.native() == caller.native()) return;
            try {
                gpu_bridge::stream_wait(caller, work);
            } catch (...) {
            }
        }
    } join{stream, work};
    const DType dt = t.m_model->param_dtype();
    void* weights = dt == DType::f32 ? static_cast<void*>(master()) : params.data();
    const GpuStepArgs args{t.m_loss_scale, master(), weights, dt, grads.data(), dt};
    // The optimizer's host half runs on every step, outside the graph: its scalars reach the device
    // before the replayed kernels read them.
    split->gpu_prepare(work, args, true);
    if (!replay) {
        drop_graph();  // one graph at a time: the views of the latest steps replace the old ones
        try {
            gpu_bridge::begin_capture(work);
            forward_loss_backward(t, work, input, target, data_pdf);
            split->gpu_record(work, args);
            graph = gpu_bridge::end_capture(work);
            graph_device = t.m_device.index;
            graph_views = views;
            ++captures;
        } catch (const std::exception& e) {
            gpu_bridge::abort_capture(work);
            use_graphs = false;
            log(LogLevel::warning, msg("Trainer: capturing the training step into a graph failed, so steps run "
                                       "without graphs from now on: ", e.what()));
            // The optimizer's host half has run: finish this step eagerly.
            forward_loss_backward(t, work, input, target, data_pdf);
            split->gpu_record(work, args);
            return true;
        }
    }
    gpu_bridge::launch_graph(work, graph);
    ++graph_steps;
    return true;
#else
    return false;
#endif  // TNN_WITH_GPU
}

void Trainer::set_use_graphs(bool on) {
    m_impl->use_graphs = on;
    if (!on) m_impl->drop_graph();
}
bool Trainer::use_graphs() const { return m_impl->use_graphs; }
void Trainer::set_fused_loss(bool on) {
    m_impl->fused_loss = on;
    m_impl->drop_graph();  // it holds the other kind of step
}
bool Trainer::fused_loss() const {
    LossKind kind;
    return m_impl->fused_loss && fusable_network(*m_model, *m_loss, m_device, &kind) != nullptr;
}
uint64_t Trainer::graph_captures() const { return m_impl->captures; }
uint64_t Trainer::graph_steps() const { return m_impl->graph_steps; }

double Trainer::loss(const Stream& stream) const {
    if (!m_impl->has_loss) throw Error("Trainer::loss: no training step has run since the parameters were set");
    return sum(stream, m_impl->loss_values.view());
}

void Trainer::inference(const Stream& stream, ConstView input, View output) const {
    const float* w = m_optimizer->inference_weights_fp32();
    if (!w) {
        m_model->inference(stream, input, output, params());
        return;
    }
    const DType t = m_model->param_dtype();
    const int64_t n = static_cast<int64_t>(m_model->n_params());
    if (t == DType::f32) {
        m_model->inference(stream, input, output, w);
        return;
    }
    Tensor& p = m_impl->inference_params;
    if (p.numel() != n || p.dtype() != t) p = Tensor(1, n, t, m_device);
    convert(stream, ConstView(w, DType::f32, m_device, 1, n), p.view());
    m_model->inference(stream, input, output, p.data());
}

void Trainer::save(const Stream& stream, const std::string& path) const {
    CheckpointData d;
    d.config = m_impl->config;
    d.n_input_dims = m_model->n_input_dims();
    d.n_output_dims = m_model->n_output_dims();
    d.param_dtype = m_model->param_dtype();
    d.seed = m_seed;
    d.step = m_optimizer->step_count();
    d.params_fp32 = params_host(stream);
    d.optimizer_state = m_optimizer->state(stream);
    write_checkpoint(path, d);
}

void Trainer::load(const Stream& stream, const std::string& path) {
    CheckpointData d = read_checkpoint(path);
    auto mismatch = [&](const std::string& what) {
        return CheckpointError(msg("checkpoint '", path, "' does not fit this trainer: ", what));
    };
    if (d.n_input_dims != m_model->n_input_dims() || d.n_output_dims != m_model->n_output_dims())
        throw mismatch(msg("it has ", d.n_input_dims, " -> ", d.n_output_dims, " dims, the trainer ",
                           m_model->n_input_dims(), " -> ", m_model->n_output_dims()));
    if (d.param_dtype != m_model->param_dtype())
        throw mismatch(msg("parameter dtype ", dtype_name(d.param_dtype), " vs ", dtype_name(m_model->param_dtype())));
    for (const char* key : {"encoding", "network", "model", "loss", "optimizer"}) {
        const json mine = m_impl->config.value(key, json()), theirs = d.config.value(key, json());
        if (mine != theirs) throw mismatch(msg("'", key, "' differs: checkpoint ", theirs.dump(), ", trainer ", mine.dump()));
    }
    if (d.params_fp32.size() != m_model->n_params())
        throw mismatch(msg(d.params_fp32.size(), " parameters vs ", m_model->n_params()));
    // A checkpoint whose optimizer state is refused leaves the trainer as it was: weights and state are
    // put back before the error leaves.
    const std::vector<float> old_params = params_host(stream);
    const std::vector<StateBlob> old_state = m_optimizer->state(stream);
    try {
        set_params(stream, d.params_fp32.data());
        m_optimizer->load_state(stream, d.optimizer_state);
    } catch (...) {
        set_params(stream, old_params.data());
        m_optimizer->load_state(stream, old_state);
        m_impl->expected_step = m_optimizer->step_count();
        stream.synchronize();
        throw;
    }
    m_impl->expected_step = m_optimizer->step_count();
    m_seed = d.seed;
    stream.synchronize();
}

}  // namespace tnn
