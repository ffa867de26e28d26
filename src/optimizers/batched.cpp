// Batched: a larger effective batch by averaging the gradients of batch_size_multiplier consecutive
// steps (fp32 pool) and running the nested optimizer on every batch_size_multiplier-th call with the
// mean, rounded to the gradient dtype as tcnn does. step_count() counts calls; the nested one, updates.
// On the GPU the nested optimizer's kernels run on every call and do nothing between updates.
#include "optimizers/optimizer_impl.h"
#include "optimizers/optimizer_math.h"

namespace tnn {

namespace {

class Batched final : public SingleNestedOptimizer {
public:
    Batched(ConfigReader& r, const std::string& path) : SingleNestedOptimizer(create_nested_optimizer(r, path)) {
        m_batch_size_multiplier = r.get_uint("batch_size_multiplier", 16, 1);
    }

    std::string name() const override { return "Batched"; }
    json hyperparams() const override {
        return {{"otype", name()},
                {"nested", m_nested->hyperparams()},
                {"batch_size_multiplier", m_batch_size_multiplier}};
    }

private:
    void allocate_impl() override {
        allocate_nested();
        m_pool.allocate(m_device, m_n_params);
        m_scalars.allocate(m_device);
    }

    // The nested optimizer's gradients on the GPU: the pool itself (fp32) or its mean rounded to the
    // gradient dtype in m_mean.
    GpuStepArgs nested_args(const GpuStepArgs& a) const {
        GpuStepArgs n = a;
        n.gradients = a.grad_dtype == DType::f32 ? static_cast<const void*>(m_pool.data()) : m_mean.data();
        return n;
    }

    void step_impl(const Stream& stream, float loss_scale, float* weights_fp32, void* weights, DType weights_dtype,
                   const void* gradients, DType grad_dtype) override {
        const uint32_t mult = m_batch_size_multiplier;
        const bool first = m_step % mult == 0;
        float* pool = m_pool.data();
        dispatch_dtype(grad_dtype, [&](auto g) {
            using G = decltype(g);
            const G* grad = static_cast<const G*>(gradients);
            for_each_param(m_n_params, [&](int64_t b, int64_t e) {
                for (int64_t i = b; i < e; ++i) pool[i] = batched_accumulate(first, pool[i], to_float(grad[i]), mult);
            });
        });
        if ((m_step + 1) % mult != 0) return;
        if (grad_dtype == DType::f32) {
            m_nested->step(stream, loss_scale, weights_fp32, weights, weights_dtype, pool, grad_dtype);
            return;
        }
        Buffer mean = Buffer::temporary(stream, m_n_params * dtype_size(grad_dtype));
        store_rounded(pool, mean.data(), grad_dtype, m_n_params);
        m_nested->step(stream, loss_scale, weights_fp32, weights, weights_dtype, mean.data(), grad_dtype);
    }

    void gpu_prepare(const Stream& stream, const GpuStepArgs& args, bool active) override {
        const uint32_t mult = m_batch_size_multiplier;
        optimizer_gpu::BatchedScalars s{};
        if (active) {
            s = {m_step % mult == 0, (m_step + 1) % mult == 0, mult, 1};
            // Sized by the first step's gradient dtype and kept: a captured graph holds the pointer.
            const size_t mean_bytes = args.grad_dtype == DType::f32 ? 0 : m_n_params * dtype_size(args.grad_dtype);
            if (m_mean.bytes() < mean_bytes) m_mean = Buffer(m_device, mean_bytes);
        }
        m_scalars.upload(stream, s);
        nested_gpu().gpu_prepare(stream, nested_args(args), s.nested_active);
        if (active) ++m_step;
    }
    void gpu_record(const Stream& stream, const GpuStepArgs& args) override {
        optimizer_gpu::batched_step(stream, m_scalars.get(), m_n_params, args.gradients, args.grad_dtype,
                                    m_pool.data(), args.grad_dtype == DType::f32 ? nullptr : m_mean.data());
        nested_gpu().gpu_record(stream, nested_args(args));
    }

    std::vector<StateBlob> state_impl(const Stream& stream) const override {
        std::vector<StateBlob> out = {m_pool.to_blob(stream, "averaged_gradients")};
        nested_state(stream, out);
        return out;
    }
    void load_state_impl(const Stream& stream, const std::vector<StateBlob>& blobs) override {
        m_pool.from_blob(stream, find_blob(blobs, "averaged_gradients"));
        load_nested_state(stream, blobs);
    }

    uint32_t m_batch_size_multiplier;
    StateArray<float> m_pool;
    DeviceScalars<optimizer_gpu::BatchedScalars> m_scalars;
    Buffer m_mean;  // GPU, gradients other than fp32: the pool's mean in the gradient dtype
};

}  // namespace

void register_batched(Registry<OptimizerFactory>& registry) {
    registry.add("Batched",
                 [](ConfigReader& r, const std::string& path) { return std::unique_ptr<Optimizer>(new Batched(r, path)); });
}

}  // namespace tnn
