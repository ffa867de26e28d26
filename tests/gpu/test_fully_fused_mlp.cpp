// FullyFusedMLP on the GPU, what only it has: its kernel plans forced onto the paths deep or wide
// networks take (weights streamed, stash and weight gradients in global memory, few warps, one or two
// m16 tiles, dL/doutput in place), the wgmma backward kernels against the reference and the mma.sync
// kernel, the store widths of dL/dinput, and the fused training step (loss gradient inside the backward
// kernel) against the unfused calls, on mlp_gpu_cases.h's tensor-core cases in float16 and bfloat16.
// The case list against the fp64 reference and the properties every backend has are
// test_gpu_networks.cpp's.
#include "mlp_gpu_cases.h"

#include "losses/loss_gpu.h"
#include "networks/fully_fused_mlp.h"
#include "networks/fused_loss.h"

#include <cmath>
#include <tuple>

using namespace tnn;
using namespace tnn::test;

namespace {

json ffm_config(const MlpCase& c, DType dtype) {
    return config_for(network_backend_named(std::string("FullyFusedMLP_") + dtype_name(dtype)), c);
}

// Whether this build has the backward kernel an override asks for (tiles per warp, warps per block,
// dL/doutput in place) for a case.
bool override_has_kernel(const MlpCase& c, const ffm::PlanOverride& o) {
    if (o.backward_m_tiles && !ffm::has_backward_m_tiles(c.width, o.backward_m_tiles)) return false;
    const bool relu = c.act == "ReLU" && c.out_act == "None" && !o.generic_kernels;
    const int tiles = o.backward_m_tiles ? o.backward_m_tiles : 1;
    if (o.dy_global && !ffm::backward_reads_dy_in_place(c.width, relu, tiles)) return false;
    return o.backward_warps <= ffm::backward_max_warps(c.width, relu, tiles);
}

TEST(FullyFusedMlpGpuPlans, FallbackPathsMatchTheReference) {
    // Small configs forced onto the paths deep or wide networks take: weights reloaded per layer,
    // activation stash in global memory, weight-gradient accumulators in global memory, few warps.
    TNN_SKIP_WITHOUT_GPU();
    // The generic kernels run on ReLU / None networks too (override 5), and a one-block batch writes
    // dL/dparams from the kernel itself, also from accumulators in global memory (w128_batch7_bias,
    // w32_batch1).
    std::vector<ffm::PlanOverride> overrides(13);
    overrides[0].stream_weights = true;
    overrides[1].stash_in_global = true;
    overrides[2].dw_in_global = true;
    overrides[3].stream_weights = overrides[3].stash_in_global = overrides[3].dw_in_global = true;
    overrides[3].forward_warps = 2, overrides[3].backward_warps = 2;
    overrides[4].forward_warps = 1, overrides[4].backward_warps = 1;
    overrides[5].generic_kernels = true;
    // Two m16 tiles per warp in the backward (widths <= 64 on NVIDIA): alone, with few warps, and
    // with the global-memory fallbacks ...
    overrides[6].backward_m_tiles = 2;
    overrides[7].backward_m_tiles = 2, overrides[7].backward_warps = 2;
    overrides[8] = overrides[3];
    overrides[8].backward_m_tiles = 2;
    // ... and one m16 tile where the planner would take two (the default of 32->64->16 and below
    // without the wgmma kernel).
    overrides[9].backward_m_tiles = 1;
    // dL/doutput read in place (no dy rows in shared memory) with 8 and with 12 warps of one tile (the
    // ReLU / linear-output kernels up to width 64 only: backward_max_warps; 12 is their default where
    // it fits with the weights and the stash on chip, e.g. w64_64to64).
    overrides[10].dy_global = true, overrides[10].backward_warps = 8;
    overrides[11].dy_global = true, overrides[11].backward_warps = 12, overrides[11].backward_m_tiles = 1;
    // 12 warps with dL/doutput staged where that fits (else the planner's next tier).
    overrides[12].backward_warps = 12, overrides[12].backward_m_tiles = 1;
    // One-tile plans on the mma.sync kernel: where the device has the wgmma kernel the planner would
    // take it for these (FullyFusedMlpGpuPlans.WgmmaBackward... covers that one).
    overrides[9].no_wgmma = overrides[11].no_wgmma = overrides[12].no_wgmma = true;
    for (const char* name :
         {"sine_sine_w64_bias_f32out", "w64_64to64_batch4099", "leaky_exponential_w16_deep5", "w128_batch7_bias",
          "w64_tail20_batch4116", "w32_batch1"})
        for (size_t i = 0; i < overrides.size(); ++i) {
            const MlpCase& c = gpu_case_named(name);
            if (!override_has_kernel(c, overrides[i])) continue;
            const auto net = create_network(c.n_in, c.n_out, ffm_config(c, DType::f16));
            const MlpData data = make_data(c, *net, 77);
            const MlpResult ref = run_fp64(*net, data), naive = run_naive(*net, data);
            ffm::PlanOverrideScope scope(overrides[i]);
            TestStream stream(Device::gpu(0));
            const MlpResult got = run_placed(*net, data, stream, c.strided);
            expect_no_worse_than(*net, c.batch, got, ref, naive, msg(c.name, " with override ", i));
        }
}

#ifdef TNN_WITH_CUDA
void check_wgmma_case(const MlpCase& c, DType dtype, const std::string& what, const Device& dev);
// check_wgmma_case for each case in both dtypes.
void expect_wgmma_cases(const std::vector<MlpCase>& cases) {
    const Device dev = Device::gpu(0);
    for (const MlpCase& c : cases)
        for (DType dtype : {DType::f16, DType::bf16}) {
            const std::string what = msg(c.name, " ", dtype_name(dtype));
            // An error (a CUDA fault, a plan that does not fit) names its case.
            try {
                check_wgmma_case(c, dtype, what, dev);
            } catch (const std::exception& e) {
                FAIL() << what << ": " << e.what();
            }
        }
}

// The wgmma backward kernels (BackwardPlan::wgmma: swizzled tiles, dW by wgmma) where the build
// and the device have them (an sm_90a build on an sm_90 GPU must): dL/dparams against the
// fp64 reference like every plan; dL/dinput and the fused step's loss values and dL/dinput bit for
// bit against the mma.sync kernel on the same block otherwise (at width 64 the chain and the forward
// pass are the same instructions, only dW is grouped otherwise; at width 128 the hidden layers' go
// through wgmma, whose bits bench/wgmma_probe.cu found equal to mma.sync's on the same operands). Both dtypes, inputs narrower than 64
// (the tiles' unused columns), 1 to 64 outputs, 1 to 3 hidden layers (at width 128 at most 2: a third
// does not fit on chip), 16-bit input and fp32 output, tails, and one block (its slot reduced, not
// written directly: red.global.add). The fused step equals the unfused one bit for bit under the
// width-64 kernel in FullyFusedMlpGpuFusedLoss (its default plan at 64->64->64 and the 12-warp
// overrides), under the width-128 one there only through the default plan of its width-128 case.
void check_wgmma_case(const MlpCase& c, DType dtype, const std::string& what, const Device& dev) {
    ffm::PlanOverride wg;  // the wgmma kernel's block: 12 warps at width 64, 8 at 128
    wg.backward_warps = ffm::wgmma_backward_warps(int(c.width)), wg.backward_m_tiles = 1, wg.dw_in_global = true;
    ffm::PlanOverride plain = wg;
    plain.no_wgmma = true;
    const auto net = create_network(c.n_in, c.n_out, ffm_config(c, dtype));
    const MlpData d = make_data(c, *net, 41);
    const MlpResult ref = run_fp64(*net, d), naive = run_naive(*net, d);
    MlpResult r[2];
    for (int i = 0; i < 2; ++i) {
        ffm::PlanOverrideScope scope(i == 0 ? wg : plain);
        TestStream stream(dev);
        r[i] = run_placed(*net, d, stream, false);
        // The plan the backward launched: the wgmma kernel, or not with the override.
        ASSERT_EQ(ffm::last_backward().plan.wgmma, i == 0) << what;
    }
    expect_no_worse_than(*net, c.batch, r[0], ref, naive, what + " wgmma");
    expect_same_bits(to_floats(r[0].dL_dinput), to_floats(r[1].dL_dinput), what + " dL/dinput");
    // The fused training step (L2), with and without dL/dinput.
    const Tensor target_host =
        host_tensor(random_vector(size_t(c.batch) * c.n_out, -1, 1, 43), c.batch, c.n_out, DType::f32);
    std::vector<float> grads_with_dx;  // the wgmma kernel's dL/dparams of the fused step
    for (const bool with_dx : {true, false}) {
        std::vector<float> values[2], dx[2], grads[2];
        for (int i = 0; i < 2; ++i) {
            ffm::PlanOverrideScope scope(i == 0 ? wg : plain);
            TestStream stream(dev);
            const Tensor x = to_device(d.x, dev), p = to_device(d.params, dev), t = to_device(target_host, dev);
            Tensor v(c.batch, c.n_out, DType::f32, dev), g(c.batch, c.n_in, d.x.dtype(), dev);
            Tensor gp(1, int64_t(net->n_params()), dtype, dev);
            fill(stream, v.view(), 7.0);
            fill(stream, g.view(), 7.0);
            View gv = g.view();
            fused_loss_backward(*net, stream, x.view(), t.view(), LossKind::l2, 128.0f, v.view(),
                                     with_dx ? &gv : nullptr, gp.data(), p.data());
            ASSERT_EQ(ffm::last_backward().plan.wgmma, i == 0) << what;
            stream.stream().synchronize();
            values[i] = to_floats(v.to(Device::cpu(), stream));
            dx[i] = to_floats(g.to(Device::cpu(), stream));
            grads[i] = to_floats(gp.to(Device::cpu(), stream));
        }
        const std::string how = what + (with_dx ? " fused step" : " fused step without dL/dinput");
        expect_same_bits(values[0], values[1], how + " loss values");
        expect_same_bits(dx[0], dx[1], how + " dL/dinput");
        // dL/dparams: the same bits without dL/dinput (the kernel stops after layer 0's dW).
        if (with_dx) grads_with_dx = grads[0];
        else expect_same_bits(grads[0], grads_with_dx, how + " dL/dparams vs with dL/dinput");
    }
}

// Whether the wgmma backward kernel of `width` runs here, in both dtypes. The choice is the device's
// compute capability and the build's code together: an sm_90a build on an sm_90 GPU must have it (a
// failure, not a skip); any other GPU, or a build without sm_90a (TNN_CUDA_ARCHITECTURES=90 or 80),
// must not, and runs the mma.sync kernel instead.
bool wgmma_here(int width) {
    const bool available = ffm::wgmma_backward_available(0, DType::f16, width);
#if defined(TNN_TEST_EXPECT_WGMMA)
    const bool hopper = gpu::device_properties(0).capability == gpu::kCcHopper;
    if (TNN_TEST_EXPECT_WGMMA && hopper)
        EXPECT_TRUE(available) << "an sm_90a build on an sm_90 GPU must have the width-" << width
                               << " wgmma backward kernel";
    if (!TNN_TEST_EXPECT_WGMMA || !hopper)
        EXPECT_FALSE(available) << "the width-" << width << " wgmma backward kernel on "
                                << gpu::device_properties(0).arch << " with a build of \"" << gpu_architectures() << "\"";
#endif  // TNN_TEST_EXPECT_WGMMA
    if (available) EXPECT_TRUE(ffm::wgmma_backward_available(0, DType::bf16, width)) << width;
    return available;
}

TEST(FullyFusedMlpGpuPlans, WgmmaBackwardMatchesTheReferenceAndTheMmaSyncKernel) {
    TNN_SKIP_WITHOUT_GPU();
    if (!wgmma_here(64)) GTEST_SKIP() << "no width-64 wgmma backward kernel on this device / build";
    const std::vector<MlpCase> cases = {
        gpu_case_named("w64_64to64_batch4099"),
        gpu_case_named("w64_32to16_batch65537"),
        {"w64_3to1_batch777", 3, 1, 64, 2, "ReLU", "None", false, 777, true, false, false, false},
        {"w64_64to16_h3_16bit_in_batch5000", 64, 16, 64, 3, "ReLU", "None", false, 5000, true, true, false, false},
        {"w64_17to33_f32out_batch100", 17, 33, 64, 1, "ReLU", "None", false, 100, true, false, true, false},
        {"w64_32to2_batch1", 32, 2, 64, 2, "ReLU", "None", false, 1, true, false, false, false},
        // Several tiles per block (132 blocks of 192 rows on an H200) with one and three hidden layers
        // (the top dz in either buffer, the column blocks dealt to other warpgroups), 40 inputs padded to 48
        // (the second column block of layer 0 half used) and 48 outputs.
        {"w64_40to64_h1_batch60001", 40, 64, 64, 1, "ReLU", "None", false, 60001, true, false, false, false},
        {"w64_32to48_h3_batch70001", 32, 48, 64, 3, "ReLU", "None", false, 70001, true, false, false, false},
    };
    expect_wgmma_cases(cases);
}

TEST(FullyFusedMlpGpuPlans, WgmmaBackwardAtWidth128MatchesTheReferenceAndTheMmaSyncKernel) {
    TNN_SKIP_WITHOUT_GPU();
    if (!wgmma_here(128)) GTEST_SKIP() << "no width-128 wgmma backward kernel on this device / build";
    const std::vector<MlpCase> cases = {
        // Width 128 (8 warps, two warpgroups; tiles of two swizzled atoms, dW in blocks of 64 rows and
        // 32 columns): the shape over several tiles per block, one hidden layer with 16-bit
        // input, 33 outputs with fp32 output, 2 outputs in one block, 3 -> 1 (FusedPlan.WgmmaKernelFor
        // EightWarpPlansAtWidth128 plans the same on the CPU).
        {"w128_32to16_batch65537", 32, 16, 128, 2, "ReLU", "None", false, 65537, true, false, false, false},
        {"w128_64to16_h1_16bit_in_batch5000", 64, 16, 128, 1, "ReLU", "None", false, 5000, true, true, false, false},
        {"w128_17to33_h1_f32out_batch1000", 17, 33, 128, 1, "ReLU", "None", false, 1000, true, false, true, false},
        {"w128_32to2_batch1", 32, 2, 128, 2, "ReLU", "None", false, 1, true, false, false, false},
        {"w128_3to1_h1_batch777", 3, 1, 128, 1, "ReLU", "None", false, 777, true, false, false, false},
        // 64 outputs (every warp's rows of the top layer's dW job stored), 40 inputs padded to 48 (layer
        // 0's second column block half used), one hidden layer over several tiles per block.
        {"w128_40to64_h1_batch70001", 40, 64, 128, 1, "ReLU", "None", false, 70001, true, false, false, false},
    };
    expect_wgmma_cases(cases);
    // Without an override the planner takes it for the shape on this device.
    const MlpCase& c = gpu_case_named("w128_32to16_batch1000");
    const auto net = create_network(c.n_in, c.n_out, ffm_config(c, DType::f16));
    const MlpData d = make_data(c, *net, 3);
    TestStream stream(Device::gpu(0));
    run_placed(*net, d, stream, false);
    const ffm::BackwardPlan plan = ffm::last_backward().plan;
    EXPECT_TRUE(plan.wgmma && plan.n_warps == 8);
}
#endif  // TNN_WITH_CUDA

// dL/dinput leaves the backward kernels in stores of 4 values (16-bit input: a quad's shuffled pairs),
// 2 (a lane's adjacent columns) or 1, the widest its rows are aligned for (KernelArgs::dx_vec;
// PlanOverride::dx_values caps it): the same values bit for bit with every cap, and nothing written
// outside the view (run_placed's sentinels). fp32 and 16-bit inputs, even and odd input widths, contiguous
// rows of odd pitch (one value per store), strided rows whose last store has columns past the view,
// tails, one and two m16 tiles per warp, the 12-warp mma.sync block and (where the device has it) the
// wgmma kernel; the fused training step too, with dL/dinput rows padded to a multiple of 4 plus 4 (so
// that 16-bit rows take 4-value stores, a last group of 1, 2 or 3 columns at input widths 5, 6, 3 and
// 7, and the padding must keep its sentinels), where the launcher's choice is checked too
// (last_backward().dx_vec).
#ifdef TNN_WITH_GPU  // ffm::last_backward exists in GPU builds only
TEST(FullyFusedMlpGpuPlans, InputGradientStoreWidthsGiveTheSameBits) {
    TNN_SKIP_WITHOUT_GPU();
    const Device dev = Device::gpu(0);
    std::vector<ffm::PlanOverride> plans(3);
    plans[1].backward_m_tiles = 2;
    plans[2].backward_warps = 12, plans[2].backward_m_tiles = 1, plans[2].no_wgmma = true;
    constexpr int kCaps[] = {0, 2, 1};  // dx_values: the widest the rows allow, pairs, one value
    std::vector<MlpCase> cases;
    for (const char* name : {"w64_32to16_batch65537", "w64_tail20_batch4116", "w128_32to16_batch1000",
                             "w64_64to64_batch4099", "strided_views_w64", "strided_16bit_w16",
                             "odd_16bit_input_3to5_w32", "w16_32to16_batch1000"})
        cases.push_back(gpu_case_named(name));
    for (const uint32_t n_in : {5u, 6u, 7u}) {  // 3 -> 5 with other input widths (ReLU / None: fused step)
        MlpCase c = gpu_case_named("odd_16bit_input_3to5_w32");
        c.n_in = n_in;
        c.name = msg("16bit_input_", n_in, "to5_w32");
        cases.push_back(c);
    }
    for (const MlpCase& base : cases)
        for (const bool input16 : {false, true})
            for (const DType dtype : {DType::f16, DType::bf16})
                for (size_t k = 0; k < plans.size(); ++k) {
                    MlpCase c = base;
                    if (c.input_in_network_dtype && !input16) continue;  // the same runs as with input16
                    c.input_in_network_dtype = c.input_in_network_dtype || input16;
                    if (!override_has_kernel(c, plans[k])) continue;
                    const std::string what = msg(c.name, input16 ? " 16-bit input " : " ", dtype_name(dtype), " plan ", k);
                    const auto net = create_network(c.n_in, c.n_out, ffm_config(c, dtype));
                    const MlpData d = make_data(c, *net, 91);
                    MlpResult r[3];
                    for (int i = 0; i < 3; ++i) {
                        ffm::PlanOverride o = plans[k];
                        o.dx_values = kCaps[i];
                        ffm::PlanOverrideScope scope(o);
                        TestStream stream(dev);
                        r[i] = run_placed(*net, d, stream, c.strided);
                    }
                    for (int i = 1; i < 3; ++i) {
                        const std::string how = msg(what, " at most ", kCaps[i], " per store");
                        expect_same_bits(to_floats(r[0].dL_dinput), to_floats(r[i].dL_dinput), how + " dL/dinput");
                        expect_same_bits(to_floats(r[0].dL_dparams), to_floats(r[i].dL_dparams), how + " dL/dparams");
                    }
                    if (!can_fuse_loss(*net, dev, LossKind::l2)) continue;
                    // The fused step with dL/dinput in rows padded to a multiple of 4 columns plus 4, every cap.
                    const Tensor target_host =
                        host_tensor(random_vector(size_t(c.batch) * c.n_out, -1, 1, 92), c.batch, c.n_out, DType::f32);
                    const int64_t pitch = (c.n_in + 3) / 4 * 4 + 4;
                    std::vector<float> dx[3], grads[3];
                    for (int i = 0; i < 3; ++i) {
                        ffm::PlanOverride o = plans[k];
                        o.dx_values = kCaps[i];
                        ffm::PlanOverrideScope scope(o);
                        TestStream stream(dev);
                        const Tensor x = to_device(d.x, dev), p = to_device(d.params, dev), t = to_device(target_host, dev);
                        Tensor v(c.batch, c.n_out, DType::f32, dev), g(c.batch, pitch, d.x.dtype(), dev);
                        Tensor gp(1, int64_t(net->n_params()), dtype, dev);
                        fill(stream, g.view(), kSentinel);
                        View gv = g.view().cols_slice(0, c.n_in);
                        // Rows of a multiple of 4 columns (the pitch) from an 8-byte aligned start: by default
                        // 4 values per store for a 16-bit dL/dinput, 2 for fp32 (8 bytes either way); a cap
                        // of 2 or 1 is taken as is.
                        ASSERT_EQ(reinterpret_cast<uintptr_t>(gv.data) % 8, 0u) << what;
                        fused_loss_backward(*net, stream, x.view(), t.view(), LossKind::l2, 128.0f, v.view(), &gv,
                                                 gp.data(), p.data());
                        EXPECT_EQ(ffm::last_backward().dx_vec, kCaps[i] ? kCaps[i] : c.input_in_network_dtype ? 4 : 2)
                            << what << " fused step, cap " << kCaps[i];
                        stream.stream().synchronize();
                        dx[i] = to_floats(g.to(Device::cpu(), stream));
                        grads[i] = to_floats(gp.to(Device::cpu(), stream));
                    }
                    for (size_t e = 0; e < dx[0].size(); ++e)
                        if (int64_t(e % pitch) >= c.n_in && dx[0][e] != kSentinel) {
                            ADD_FAILURE() << what << " fused step: dL/dinput written past the view at row " << e / pitch
                                          << ", column " << e % pitch;
                            break;
                        }
                    for (int i = 1; i < 3; ++i) {
                        const std::string how = msg(what, " fused step at most ", kCaps[i], " per store");
                        expect_same_bits(dx[0], dx[i], how + " dL/dinput");
                        expect_same_bits(grads[0], grads[i], how + " dL/dparams");
                    }
                }
}
#endif  // TNN_WITH_GPU

TEST(FullyFusedMlpGpuFusedLoss, EqualsForwardLossBackwardBitForBit) {
    // The fused training step (fused_loss_backward: the loss gradient taken inside the backward
    // kernel from the recomputed output) against the three calls it replaces, forward +
    // Loss::evaluate + backward: the same loss values, dL/dinput and dL/dparams, bit for bit. Every
    // ReLU / linear-output case (fp32 and 16-bit input and output, bias, batches 0, 1, 7 and tails),
    // both dtypes, every fused loss with the planner's choice, and L2 / RelativeL2 under the fallbacks.
    TNN_SKIP_WITHOUT_GPU();
    // The target is staged like dL/doutput where that keeps the unfused plan's tiles, else read from
    // global memory (the default of w64_32to16 with two m16 tiles, i.e. without the wgmma kernel; override
    // 2 forces two tiles); overrides 3 and 4 force the latter.
    std::vector<ffm::PlanOverride> overrides(11);
    overrides[1].backward_m_tiles = 1;
    overrides[1].no_wgmma = true;  // the mma.sync kernel's one-tile plans (the default covers wgmma's)
    overrides[2].backward_m_tiles = 2;
    overrides[3].stream_weights = overrides[3].stash_in_global = overrides[3].dw_in_global = true;
    overrides[3].backward_warps = 2;
    overrides[3].fused_target_global = overrides[4].fused_target_global = true;
    // Two tiles with the target from global memory: the chunk-0 prefetch next to chunks loaded in
    // place (64 outputs: chunks 1-3).
    overrides[5].backward_m_tiles = 2;
    overrides[5].fused_target_global = true;
    // dL/doutput (unfused) and the target (fused) read in place, at 8 warps and at 12 (the planner's
    // choice for the width-64 cases whose 12-warp plan keeps the weights and the stash on chip).
    overrides[6].dy_global = true, overrides[6].backward_warps = 8;
    overrides[7].dy_global = true, overrides[7].backward_warps = 12, overrides[7].backward_m_tiles = 1;
    overrides[7].no_wgmma = true;  // the mma.sync kernel (override 10 is the wgmma one)
    // With 12 warps the target goes through the raw input rows where a target row fits one
    // (KernelArgs::target_in_raw: override 7 for most cases; odd_16bit_input_3to5_w32 does not fit);
    // forced to global memory, it is loaded one output chunk ahead in registers (override 8).
    overrides[8] = overrides[7];
    overrides[8].fused_target_global = true;
    // The raw-row target on a plan of few warps with the weights streamed per layer (whose cp.async
    // waits also drain the target copy), the stash and dW in global memory.
    overrides[9] = overrides[3];
    overrides[9].fused_target_global = false;
    overrides[9].dy_global = true;
    // Override 7 with dW in global memory: the wgmma kernel (where the build and device have it) for every
    // width-64 case without bias and with <= 64 padded inputs and outputs, not only 64 inputs.
    overrides[10] = overrides[7];
    overrides[10].dw_in_global = true;
    overrides[10].no_wgmma = false;
    // The same at width 128 (8 warps): the width-128 wgmma kernel for its cases without bias.
    overrides.emplace_back();
    overrides[11].backward_warps = 8, overrides[11].backward_m_tiles = 1, overrides[11].dw_in_global = true;
    // Override 10 with the target loaded one output chunk ahead (what override 8 asked of the wgmma
    // kernel before override 7 was pinned to mma.sync).
    overrides.push_back(overrides[10]);
    overrides[12].fused_target_global = true;
    const Device dev = Device::gpu(0);
    // Plus batches whose N = rows * outputs is a power of two: there the epilogue multiplies by 1 / N
    // (KernelArgs::loss_inv_n) where the loss kernel divides by N; elsewhere it divides too.
    std::vector<MlpCase> cases = tensor_core_cases();
    cases.push_back({"w64_32to16_batch8192_pow2", 32, 16, 64, 2, "ReLU", "None", false, 8192, true, false, false, false});
    cases.push_back({"w64_64to64_batch4096_pow2_bias_f32out", 64, 64, 64, 2, "ReLU", "None", true, 4096, true, false, true, false});
    // A 12-warp plan that stages 16-bit dL/doutput but would read the 4-byte target in place: the
    // fused step must then read the target from global memory, not from rows it never staged.
    cases.push_back({"w64_64to16_h3_16bit_in_batch5000", 64, 16, 64, 3, "ReLU", "None", false, 5000, true, true, false, false});
    // Two outputs: 8-byte target rows, copied into the raw rows 8 bytes at a time (overrides 7, 9).
    cases.push_back({"w64_32to2_batch3001", 32, 2, 64, 2, "ReLU", "None", false, 3001, true, false, false, false});
    // Up to the seventeenth session the unfused plan here was the 12-warp mma.sync kernel with dW on chip
    // and the fused step's 4-byte plan the wgmma kernel, which ffm::same_dw_order refused; since the
    // planner puts the wgmma kernel first both are the wgmma kernel's (FusedPlan.Wgmma... on the CPU).
    cases.push_back({"w64_32to48_batch3001", 32, 48, 64, 2, "ReLU", "None", false, 3001, true, false, false, false});
    // Width 128 under override 11: one hidden layer, fp32 output, several tiles per block.
    cases.push_back({"w128_40to64_h1_f32out_batch70001", 40, 64, 128, 1, "ReLU", "None", false, 70001, true, false, true, false});
    int ran = 0;
    for (const MlpCase& c : cases) {
        if (c.act != "ReLU" || c.out_act != "None" || c.strided) continue;
        for (DType dtype : {DType::f16, DType::bf16})
            for (size_t oi = 0; oi < overrides.size(); ++oi) {
                if (!override_has_kernel(c, overrides[oi]) || (oi == 11 && c.width != 128)) continue;
                for (const char* loss_name : {"L2", "L1", "RelativeL2", "RelativeL1", "MAPE", "SMAPE"}) {
                    if (oi > 0 && std::string(loss_name) != "L2" && std::string(loss_name) != "RelativeL2") continue;
                    const std::string what = msg(c.name, " ", dtype_name(dtype), " ", loss_name, " override ", oi);
                    const auto net = create_network(c.n_in, c.n_out, ffm_config(c, dtype));
                    const auto loss = create_loss({{"otype", loss_name}});
                    LossKind kind;
                    ASSERT_TRUE(loss_kind_of(*loss, &kind)) << what;
                    ASSERT_TRUE(can_fuse_loss(*net, dev, kind)) << what;
                    const MlpData d = make_data(c, *net, 31);
                    const Tensor target_host = host_tensor(random_vector(size_t(c.batch) * c.n_out, -1, 1, 37), c.batch,
                                                           c.n_out, DType::f32);
                    ffm::PlanOverrideScope scope(overrides[oi]);
                    TestStream stream(dev);
                    const Tensor x = to_device(d.x, dev), p = to_device(d.params, dev), target = to_device(target_host, dev);
                    auto tensor = [&](int64_t cols, DType t) {
                        Tensor r(c.batch, cols, t, dev);
                        fill(stream, r.view(), 7.0);  // every value must be written
                        return r;
                    };
                    Tensor y = tensor(c.n_out, net->output_dtype()), dy = tensor(c.n_out, net->output_dtype());
                    Tensor values_a = tensor(c.n_out, DType::f32), values_b = tensor(c.n_out, DType::f32);
                    Tensor dx_a = tensor(c.n_in, x.dtype()), dx_b = tensor(c.n_in, x.dtype());
                    Tensor dp_a(1, int64_t(net->n_params()), dtype, dev), dp_b(1, int64_t(net->n_params()), dtype, dev);
                    fill(stream, dp_a.view(), 7.0);
                    fill(stream, dp_b.view(), 7.0);
                    constexpr float kLossScale = 128.0f;
                    auto ctx = net->forward(stream, x.view(), y.view(), p.data(), true);
                    loss->evaluate(stream, kLossScale, y.view(), target.view(), nullptr, values_a.view(), dy.view());
                    View dxa = dx_a.view(), dxb = dx_b.view();
                    net->backward(stream, *ctx, x.view(), y.view(), dy.view(), &dxa, dp_a.data(), p.data(),
                                  GradMode::overwrite);
                    fused_loss_backward(*net, stream, x.view(), target.view(), kind, kLossScale, values_b.view(), &dxb,
                                             dp_b.data(), p.data());
                    stream.stream().synchronize();
                    expect_same_bits(to_floats(values_b.to(Device::cpu(), stream)),
                                     to_floats(values_a.to(Device::cpu(), stream)), what + " loss values");
                    expect_same_bits(to_floats(dx_b.to(Device::cpu(), stream)), to_floats(dx_a.to(Device::cpu(), stream)),
                                     what + " dL/dinput");
                    expect_same_bits(to_floats(dp_b.to(Device::cpu(), stream)), to_floats(dp_a.to(Device::cpu(), stream)),
                                     what + " dL/dparams");
                    if (oi == 7 || oi == 9) {  // the Trainer's call for a network alone: no dL/dinput
                        Tensor values_c = tensor(c.n_out, DType::f32);
                        Tensor dp_c(1, int64_t(net->n_params()), dtype, dev);
                        fill(stream, dp_c.view(), 7.0);
                        fused_loss_backward(*net, stream, x.view(), target.view(), kind, kLossScale,
                                                 values_c.view(), nullptr, dp_c.data(), p.data());
                        stream.stream().synchronize();
                        expect_same_bits(to_floats(values_c.to(Device::cpu(), stream)),
                                         to_floats(values_a.to(Device::cpu(), stream)), what + " loss values, no dL/dinput");
                        expect_same_bits(to_floats(dp_c.to(Device::cpu(), stream)),
                                         to_floats(dp_a.to(Device::cpu(), stream)), what + " dL/dparams, no dL/dinput");
                    }
                    ++ran;
                }
            }
    }
    EXPECT_GT(ran, 100);
}

TEST(FullyFusedMlpGpuFusedLoss, StridedViewsAndFp32OutputGiveTheSameBits) {
    // The views a Trainer may pass: input, target and values as column slices of wider tensors, the
    // target and values one column in (bases not 8-byte aligned: scalar loads and stores), odd output
    // counts (17: a full 16-column chunk, whose in-place dy loads are then scalar too), several blocks,
    // fp32 and 16-bit outputs; the target modes (staged, global, in place with dy).
    TNN_SKIP_WITHOUT_GPU();
    const Device dev = Device::gpu(0);
    constexpr int64_t kRows = 4099;
    constexpr uint32_t kIn = 7;
    for (const uint32_t kOut : {3u, 17u})
    for (const bool out_f32 : {true, false})
        for (const int mode : {0, 1, 2}) {  // target staged, target from global memory, dy and target in place
            if (mode == 2 && !ffm::backward_reads_dy_in_place(64, true, 1)) continue;
            const bool global_target = mode == 1;
            const std::string what = msg(kOut, " outputs, ", out_f32 ? "fp32" : "fp16", " output, ",
                                         mode == 0 ? "staged target" : mode == 1 ? "global target" : "dy in place");
            json cfg = {{"otype", "FullyFusedMLP"}, {"n_neurons", 64}, {"n_hidden_layers", 2}, {"activation", "ReLU"},
                        {"output_activation", "None"}, {"bias", true}};
            if (out_f32) cfg["output_dtype"] = "float32";
            const auto net = create_network(kIn, kOut, cfg);
            const auto loss = create_loss({{"otype", "RelativeL2"}});
            std::vector<float> p32(net->n_params());
            net->init_params(5, p32.data());
            ffm::PlanOverride o;
            o.fused_target_global = global_target;
            o.dy_global = mode == 2;
            ffm::PlanOverrideScope scope(o);
            TestStream stream(dev);
            const Tensor p = to_device(host_tensor(widen(p32), 1, int64_t(p32.size()), DType::f16), dev);
            // A [rows, cols] slice starting at column `first` of a wider device tensor.
            auto slice = [&](const std::vector<double>& v, int64_t cols, int64_t first, DType t, Tensor& storage) {
                storage = Tensor(kRows + 2, cols + 3, t, dev);
                fill(stream, storage.view(), 0.0);
                View view = storage.view().rows_slice(0, kRows).cols_slice(first, cols);
                if (!v.empty()) copy(stream, host_tensor(v, kRows, cols, t).view(), view);
                return view;
            };
            Tensor xs, ts, vas, vbs, ys, dys, dxas, dxbs;
            const View x = slice(random_vector(size_t(kRows) * kIn, -1, 1, 3), kIn, 2, DType::f32, xs);
            const View target = slice(random_vector(size_t(kRows) * kOut, -1, 1, 4), kOut, 1, DType::f32, ts);
            View values_a = slice({}, kOut, 1, DType::f32, vas), values_b = slice({}, kOut, 1, DType::f32, vbs);
            // In place, dL/doutput one column in: rows not aligned for pair loads (scalar reads).
            View y = slice({}, kOut, 0, net->output_dtype(), ys),
                 dy = slice({}, kOut, mode == 2 ? 1 : 0, net->output_dtype(), dys);
            View dx_a = slice({}, kIn, 0, DType::f32, dxas), dx_b = slice({}, kIn, 0, DType::f32, dxbs);
            Tensor dp_a(1, int64_t(net->n_params()), DType::f16, dev), dp_b(1, int64_t(net->n_params()), DType::f16, dev);
            auto ctx = net->forward(stream, x, y, p.data(), true);
            loss->evaluate(stream, 128.0f, y, target, nullptr, values_a, dy);
            net->backward(stream, *ctx, x, y, dy, &dx_a, dp_a.data(), p.data(), GradMode::overwrite);
            fused_loss_backward(*net, stream, x, target, LossKind::relative_l2, 128.0f, values_b, &dx_b, dp_b.data(),
                                     p.data());
            stream.stream().synchronize();
            auto host = [&](const Tensor& t) { return to_floats(t.to(Device::cpu(), stream)); };
            // Whole storages: the fused step writes the values slice and nothing around it.
            expect_same_bits(host(vbs), host(vas), what + " loss values");
            expect_same_bits(host(dxbs), host(dxas), what + " dL/dinput");
            expect_same_bits(host(dp_b), host(dp_a), what + " dL/dparams");
        }
}

TEST(FullyFusedMlpGpuFusedLoss, RefusedWhereTheKernelsDoNotCarryIt) {
    // Only the ReLU / linear-output kernels carry the fused step, only for the elementwise losses, and
    // never on the CPU: everywhere else can_fuse_loss is false and a direct call is an error.
    const Device gpu = Device::gpu(0);
    const auto relu = create_network(3, 4, {{"otype", "FullyFusedMLP"}, {"n_neurons", 16}, {"activation", "ReLU"}});
    const auto tanh = create_network(3, 4, {{"otype", "FullyFusedMLP"}, {"n_neurons", 16}, {"activation", "Tanh"}});
    const auto sig = create_network(3, 4, {{"otype", "FullyFusedMLP"}, {"n_neurons", 16}, {"output_activation", "Sigmoid"}});
    const auto portable = create_network(3, 4, {{"otype", "PortableMLP"}, {"n_neurons", 16}, {"activation", "ReLU"}});
    EXPECT_FALSE(can_fuse_loss(*relu, Device::cpu(), LossKind::l2));
    EXPECT_FALSE(can_fuse_loss(*relu, gpu, LossKind::cross_entropy));
    EXPECT_FALSE(can_fuse_loss(*relu, gpu, LossKind::relative_l2_luminance));
    EXPECT_FALSE(can_fuse_loss(*tanh, gpu, LossKind::l2));
    EXPECT_FALSE(can_fuse_loss(*sig, gpu, LossKind::l2));
    EXPECT_FALSE(can_fuse_loss(*portable, gpu, LossKind::l2));
#if defined(TNN_WITH_CUDA)
    EXPECT_TRUE(can_fuse_loss(*relu, gpu, LossKind::smape));
#endif  // TNN_WITH_CUDA
    Tensor x(2, 3, DType::f32), t(2, 4, DType::f32), v(2, 4, DType::f32);
    std::vector<tnn::half> p(relu->n_params(), tnn::half(0.0f)), g(relu->n_params());
    EXPECT_THROW(fused_loss_backward(*relu, Stream::cpu(), x.view(), t.view(), LossKind::l2, 1.0f, v.view(), nullptr,
                                          g.data(), p.data()),
                 UnsupportedError);
    EXPECT_THROW(fused_loss_backward(*portable, Stream::cpu(), x.view(), t.view(), LossKind::l2, 1.0f, v.view(),
                                          nullptr, g.data(), p.data()),
                 UnsupportedError);
}

TEST(FullyFusedMlpGpuFusedLoss, BadViewsAreRefused) {
    // The fused step checks its views as the module's own passes do (Module::check_arg): shape, dtype,
    // device, and that a view labelled GPU is memory of that GPU.
    TNN_SKIP_WITHOUT_GPU();
    const Device dev = Device::gpu(0);
    const auto net = create_network(3, 4, {{"otype", "FullyFusedMLP"}, {"n_neurons", 16}, {"activation", "ReLU"}});
    if (!can_fuse_loss(*net, dev, LossKind::l2)) GTEST_SKIP() << "this build's kernels have no fused step";
    TestStream stream(dev);
    Tensor x(8, 3, DType::f32, dev), t(8, 4, DType::f32, dev), v(8, 4, DType::f32, dev);
    Tensor t_short(7, 4, DType::f32, dev), v16(8, 4, DType::f16, dev), t_host(8, 4, DType::f32);
    Tensor p(1, int64_t(net->n_params()), net->param_dtype(), dev), g(1, int64_t(net->n_params()), net->param_dtype(), dev);
    fill(stream, x.view(), 0.25);
    fill(stream, t.view(), 0.5);
    fill(stream, p.view(), 0.0);
    auto call = [&](ConstView target, View values) {
        fused_loss_backward(*net, stream, x.view(), target, LossKind::l2, 1.0f, values, nullptr, g.data(), p.data());
    };
    EXPECT_THROW(call(t_short.view(), v.view()), ShapeError);
    EXPECT_THROW(call(t.view(), v16.view()), DTypeError);
    EXPECT_THROW(call(t_host.view(), v.view()), DeviceError);
    View lie = t_host.view();
    lie.device = dev;
    EXPECT_THROW(call(lie, v.view()), DeviceError);
    EXPECT_NO_THROW(call(t.view(), v.view()));
    stream.stream().synchronize();
}

TEST(FullyFusedMlpGpuProps, BadConfigsRaise) {
    // Config errors need no GPU. (CPU calls run the CPU backend: tests/cpp/test_mlp_backends.cpp.)
    EXPECT_THROW(create_network(3, 4, {{"otype", "FullyFusedMLP"}, {"n_neurons", 48}}), ConfigError);
    EXPECT_THROW(create_network(3, 4, {{"otype", "FullyFusedMLP"}, {"n_neurons", 256}}), ConfigError);
    EXPECT_THROW(create_network(3, 4, {{"otype", "FullyFusedMLP"}, {"dtype", "float32"}}), DTypeError);
    EXPECT_THROW(create_network(3, 4, {{"otype", "FullyFusedMLP"}, {"output_dtype", "bfloat16"}}), DTypeError);
}

}  // namespace
