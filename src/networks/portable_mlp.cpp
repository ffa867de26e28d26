// PortableMLP: CPU reference (MlpReference<T>, plain loops over blocks of 64 rows, templated on the
// storage type) and the host side of the module. The GPU kernels live in portable_mlp.cu.
#include "networks/portable_mlp.h"

#include "core/parallel.h"
#include "networks/activation.h"
#include "networks/network_registry.h"

#include <algorithm>

namespace tnn {

namespace {

// Reductions over the batch use a number of row groups that depends only on the batch size, so
// the summation order (and the bits) never depend on the thread count.
int64_t reduction_group_rows(int64_t rows, int64_t block) {
    const int64_t groups = 32;
    const int64_t per = std::max<int64_t>(1024, (rows + groups - 1) / groups);
    return (per + block - 1) / block * block;
}

template <typename T> acc_t<T> load_as(ConstView v, int64_t r, int64_t c) {
    using A = acc_t<T>;
    switch (v.dtype) {
        case DType::f32: return static_cast<A>(v.at<float>(r, c));
        case DType::f64: return static_cast<A>(v.at<double>(r, c));
        case DType::f16: return static_cast<A>(static_cast<float>(v.at<half>(r, c)));
        case DType::bf16: return static_cast<A>(static_cast<float>(v.at<bfloat16>(r, c)));
    }
    return A(0);
}

template <typename A> void store_as(View v, int64_t r, int64_t c, A x) {
    switch (v.dtype) {
        case DType::f32: v.at<float>(r, c) = static_cast<float>(x); break;
        case DType::f64: v.at<double>(r, c) = static_cast<double>(x); break;
        case DType::f16: v.at<half>(r, c) = half(static_cast<float>(x)); break;
        case DType::bf16: v.at<bfloat16>(r, c) = bfloat16(static_cast<float>(x)); break;
    }
}

}  // namespace

// The maths, per row (rows are independent; parameter gradients sum over the rows). Layers
// l = 0 .. L-1 with W_l [out_l x in_l] and b_l [out_l]; f is the hidden activation, g the output
// activation; products of vectors are elementwise.
//
// forward        a_{-1} = [x, pad]                                   [padded_in]
//                z_l = W_l a_{l-1} + b_l                              [out_l]
//                a_l = f(z_l) (l < L-1),   y = g(z_{L-1})             [width], [padded_out]; n_out kept
// backward       given u = dL/dy                                      [n_out], 0 on the padded lanes
//                d_{L-1} = u g'(z_{L-1}),   d_{l-1} = (W_l^T d_l) f'(z_{l-1})
//                dL/dW_l = sum_rows d_l a_{l-1}^T,   dL/db_l = sum_rows d_l,   dL/dx = (W_0^T d_0)[:n_in]
// second order   L' is a function of q = dL/dx; given v = dL'/dq      [n_in]
//                q = J^T u with J = dy/dx, so L' = <v, J^T u> = <u, J v> = <u, ydot>: ydot is the
//                forward tangent of y along the input direction [v, 0] (the padding is constant):
//                adot_{-1} = [v, 0]                                   [padded_in]
//                zdot_l = W_l adot_{l-1}                              [out_l] (the bias has no tangent)
//                adot_l = f'(z_l) zdot_l,   ydot = g'(z_{L-1}) zdot_{L-1}
//                Reverse through both graphs: the adjoint of zdot_l is d_l (the first-order recursion
//                again); the adjoint e_l of z_l collects the second-derivative terms:
//                e_{L-1} = u g''(z_{L-1}) zdot_{L-1}
//                e_{l-1} = (W_l^T e_l) f'(z_{l-1}) + (W_l^T d_l) f''(z_{l-1}) zdot_{l-1}
//                dL'/du   = ydot                                      [n_out]
//                dL'/dW_l = sum_rows (d_l adot_{l-1}^T + e_l a_{l-1}^T) [out_l x in_l]
//                dL'/db_l = sum_rows e_l                              [out_l]
//                dL'/dx   = (W_0^T e_0)[:n_in]                        [n_in]
//                f'' = 0 for None, ReLU and LeakyReLU (ReLU's kink has measure zero): with such hidden
//                and output activations every e_l is 0, dL'/dx = 0 and dL'/db = 0.

// forward: a_0 = [round_T(x), pad], z_l = W_l a_{l-1} (+ b_l), a_l = round_T(act(z_l));
// the output layer's act(z) goes to the output dtype directly.
template <typename T>
std::unique_ptr<typename MlpReference<T>::Ctx> MlpReference<T>::forward(ConstView input, View output, const T* params,
                                                                        bool keep_context) const {
    const int64_t rows = input.rows, n_blocks = chunk_count(rows, kBlock), B = kBlock;
    const uint32_t n_layers = m_l.n_layers();
    auto ctx = std::make_unique<Ctx>();
    ctx->rows = rows;
    if (keep_context) {
        ctx->input.assign(static_cast<size_t>(n_blocks) * m_l.padded_input_dims * B, A(0));
        ctx->pre.resize(n_layers);
        ctx->post.resize(n_layers);
        for (uint32_t l = 0; l < n_layers; ++l) {
            ctx->pre[l].assign(static_cast<size_t>(n_blocks) * m_l.layer_out(l) * B, A(0));
            ctx->post[l].assign(static_cast<size_t>(n_blocks) * m_l.layer_out(l) * B, A(0));
        }
    }
    parallel_for(n_blocks, 1, [&](int64_t b0, int64_t b1) {
        std::vector<A> cur, z, next;
        for (int64_t blk = b0; blk < b1; ++blk) {
            const int64_t r0 = blk * B, nr = std::min(B, rows - r0);
            cur.assign(static_cast<size_t>(m_l.padded_input_dims) * B, A(0));
            for (uint32_t i = 0; i < m_l.padded_input_dims; ++i)
                for (int64_t r = 0; r < nr; ++r)
                    cur[i * B + r] = i < m_l.n_input_dims ? round_to<T>(load_as<T>(input, r0 + r, i))
                                                          : round_to<T>(static_cast<A>(m_l.input_pad_value));
            if (keep_context) std::copy(cur.begin(), cur.end(), ctx->input.begin() + blk * m_l.padded_input_dims * B);
            for (uint32_t l = 0; l < n_layers; ++l) {
                const uint32_t n_in = m_l.layer_in(l), n_out = m_l.layer_out(l);
                const bool last = l + 1 == n_layers;
                const Activation act = last ? m_l.output_activation : m_l.activation;
                const T* W = params + m_l.weight_offset(l);
                z.assign(static_cast<size_t>(n_out) * B, A(0));
                for (uint32_t o = 0; o < n_out; ++o) {
                    A* zo = &z[o * B];
                    if (m_l.bias) {
                        const A bo = static_cast<A>(params[m_l.bias_offset(l) + o]);
                        for (int64_t r = 0; r < nr; ++r) zo[r] = bo;
                    }
                    for (uint32_t i = 0; i < n_in; ++i) {
                        const A w = static_cast<A>(W[static_cast<size_t>(o) * n_in + i]);
                        const A* ai = &cur[i * B];
                        for (int64_t r = 0; r < nr; ++r) zo[r] += w * ai[r];
                    }
                }
                next.assign(static_cast<size_t>(n_out) * B, A(0));
                for (size_t k = 0; k < next.size(); ++k) {
                    const A a = activation_forward(act, z[k]);
                    next[k] = last ? a : round_to<T>(a);
                }
                if (keep_context) {
                    std::copy(z.begin(), z.end(), ctx->pre[l].begin() + blk * n_out * B);
                    std::copy(next.begin(), next.end(), ctx->post[l].begin() + blk * n_out * B);
                }
                std::swap(cur, next);
            }
            for (int64_t r = 0; r < nr; ++r)
                for (uint32_t o = 0; o < m_l.n_output_dims; ++o) store_as(output, r0 + r, o, cur[o * B + r]);
        }
    });
    return ctx;
}

// backward: dz_L = round_T(g * act_out'(z_L)); dW_l = sum_rows dz_l a_{l-1}^T; db_l = sum_rows dz_l;
// dz_{l-1} = round_T((W_l^T dz_l) * act'(z_{l-1})); dL/dx = (W_0^T dz_0)[:n_in]. act' of None / ReLU /
// LeakyReLU is read off a_{l-1} (equal to reading z_{l-1} except where a tiny z rounds to 0 in T).
template <typename T>
void MlpReference<T>::backward(const Ctx& ctx, ConstView dL_doutput, View* dL_dinput, T* dL_dparams,
                               const T* params, GradMode mode) const {
    const int64_t rows = ctx.rows, B = kBlock;
    const uint32_t n_layers = m_l.n_layers();
    const size_t n_params = m_l.n_params();
    const int64_t group_rows = reduction_group_rows(rows, B);
    std::vector<A> grad(dL_dparams ? n_params : 0, A(0));

    auto process_group = [&](int64_t g0, int64_t g1, A* dparams) {
        std::vector<A> dz, dprev, a_rows;
        for (int64_t r0 = g0; r0 < g1; r0 += B) {
            const int64_t blk = r0 / B, nr = std::min(B, rows - r0);
            const uint32_t n_top = m_l.padded_output_dims;
            dz.assign(static_cast<size_t>(n_top) * B, A(0));
            const A* z_top = &ctx.pre[n_layers - 1][blk * n_top * B];
            for (uint32_t o = 0; o < m_l.n_output_dims; ++o)
                for (int64_t r = 0; r < nr; ++r)
                    dz[o * B + r] = round_to<T>(load_as<T>(dL_doutput, r0 + r, o) *
                                                activation_derivative(m_l.output_activation, z_top[o * B + r]));
            for (int64_t l = n_layers - 1; l >= 0; --l) {
                const uint32_t n_in = m_l.layer_in(l), n_out = m_l.layer_out(l);
                const A* a_prev = l == 0 ? &ctx.input[blk * n_in * B] : &ctx.post[l - 1][blk * n_in * B];
                if (dparams) {
                    // dW[o][i] += dz[o][r] * a[i][r], rows in order. The block's activations are
                    // transposed to [row][feature] first so that the innermost loop runs over
                    // independent i (vectorisable without reassociating any sum).
                    a_rows.resize(static_cast<size_t>(nr) * n_in);
                    for (uint32_t i = 0; i < n_in; ++i)
                        for (int64_t r = 0; r < nr; ++r) a_rows[r * n_in + i] = a_prev[i * B + r];
                    A* dW = dparams + m_l.weight_offset(l);
                    for (uint32_t o = 0; o < n_out; ++o) {
                        const A* dzo = &dz[o * B];
                        A* dWo = dW + static_cast<size_t>(o) * n_in;
                        for (int64_t r = 0; r < nr; ++r) {
                            const A g = dzo[r];
                            const A* ar = &a_rows[r * n_in];
                            for (uint32_t i = 0; i < n_in; ++i) dWo[i] += g * ar[i];
                        }
                        if (m_l.bias) {
                            A s = A(0);
                            for (int64_t r = 0; r < nr; ++r) s += dzo[r];
                            dparams[m_l.bias_offset(l) + o] += s;
                        }
                    }
                }
                if (l == 0 && !dL_dinput) break;
                const T* W = params + m_l.weight_offset(l);
                dprev.assign(static_cast<size_t>(n_in) * B, A(0));
                for (uint32_t o = 0; o < n_out; ++o) {
                    const A* dzo = &dz[o * B];
                    for (uint32_t i = 0; i < n_in; ++i) {
                        const A w = static_cast<A>(W[static_cast<size_t>(o) * n_in + i]);
                        A* di = &dprev[i * B];
                        for (int64_t r = 0; r < nr; ++r) di[r] += w * dzo[r];
                    }
                }
                if (l == 0) {
                    for (int64_t r = 0; r < nr; ++r)
                        for (uint32_t i = 0; i < m_l.n_input_dims; ++i) store_as(*dL_dinput, r0 + r, i, dprev[i * B + r]);
                    break;
                }
                const A* z_prev = &ctx.pre[l - 1][blk * n_in * B];
                const A* a_below = &ctx.post[l - 1][blk * n_in * B];
                const Activation act = m_l.activation;
                if (derivative_from_output(act)) {
                    for (size_t k = 0; k < dprev.size(); ++k)
                        dprev[k] = round_to<T>(dprev[k] * activation_derivative(act, a_below[k]));
                } else {
                    for (size_t k = 0; k < dprev.size(); ++k) {
                        const A d = activation_derivative(act, z_prev[k]);
                        dprev[k] = round_to<T>(dprev[k] * (m_rounding.derivative_in_storage ? round_to<T>(d) : d));
                    }
                }
                std::swap(dz, dprev);
            }
        }
    };

    if (dL_dparams) {
        parallel_reduce<A>(rows, group_rows, n_params, grad.data(),
                           [&](int64_t g0, int64_t g1, A* partial) { process_group(g0, g1, partial); });
        for (size_t i = 0; i < n_params; ++i)
            dL_dparams[i] = mode == GradMode::accumulate ? T(static_cast<A>(dL_dparams[i]) + grad[i]) : T(grad[i]);
    } else {
        parallel_for(rows, group_rows, [&](int64_t g0, int64_t g1) { process_group(g0, g1, nullptr); });
    }
}

// second order (the maths above): per block, the tangent forward (zdot, adot per layer), then the
// reverse sweep carrying d (rounded as in backward) and e; e is skipped while it is identically zero.
template <typename T>
void MlpReference<T>::backward_backward_input(const Ctx& ctx, ConstView dL_ddLdinput, ConstView dL_doutput,
                                              View* dL_ddLdoutput, View* dL_dinput, T* dL_dparams, const T* params,
                                              GradMode mode) const {
    const int64_t rows = ctx.rows, B = kBlock;
    const uint32_t n_layers = m_l.n_layers(), top = n_layers - 1;
    const size_t n_params = m_l.n_params();
    const int64_t group_rows = reduction_group_rows(rows, B);
    const Activation act = m_l.activation, out_act = m_l.output_activation;
    const bool sweep = dL_dinput || dL_dparams;
    std::vector<A> grad(dL_dparams ? n_params : 0, A(0));

    // f'(z) and f''(z) of hidden layer l at element k of a block (f' read off the stored activation
    // where the kernels read it there; both rounded to T where the backend stashes them).
    const bool stash = m_rounding.derivative_in_storage;
    auto hidden_d1 = [&](uint32_t l, int64_t blk, size_t k) {
        const size_t at = static_cast<size_t>(blk) * m_l.width * B + k;
        if (derivative_from_output(act)) return activation_derivative(act, ctx.post[l][at]);
        const A d = activation_derivative(act, ctx.pre[l][at]);
        return stash ? round_to<T>(d) : d;
    };
    auto hidden_d2 = [&](uint32_t l, int64_t blk, size_t k) {
        const A d = activation_second_derivative(act, ctx.pre[l][static_cast<size_t>(blk) * m_l.width * B + k]);
        return stash ? round_to<T>(d) : d;
    };

    auto process_group = [&](int64_t g0, int64_t g1, A* dparams) {
        std::vector<std::vector<A>> zdot(n_layers), adot(n_layers);  // adot[l] is adot_{l-1}
        std::vector<A> d, e, gd, ge, a_rows, t_rows;
        for (int64_t r0 = g0; r0 < g1; r0 += B) {
            const int64_t blk = r0 / B, nr = std::min(B, rows - r0);
            // Tangent forward.
            adot[0].assign(static_cast<size_t>(m_l.padded_input_dims) * B, A(0));
            for (uint32_t i = 0; i < m_l.n_input_dims; ++i)
                for (int64_t r = 0; r < nr; ++r) adot[0][i * B + r] = round_to<T>(load_as<T>(dL_ddLdinput, r0 + r, i));
            for (uint32_t l = 0; l < n_layers; ++l) {
                const uint32_t n_in = m_l.layer_in(l), n_out = l == top ? m_l.n_output_dims : m_l.layer_out(l);
                const T* W = params + m_l.weight_offset(l);
                zdot[l].assign(static_cast<size_t>(m_l.layer_out(l)) * B, A(0));
                for (uint32_t o = 0; o < n_out; ++o) {
                    A* zo = &zdot[l][o * B];
                    for (uint32_t i = 0; i < n_in; ++i) {
                        const A w = static_cast<A>(W[static_cast<size_t>(o) * n_in + i]);
                        const A* ai = &adot[l][i * B];
                        for (int64_t r = 0; r < nr; ++r) zo[r] += w * ai[r];
                    }
                }
                if (l == top) break;
                adot[l + 1].resize(zdot[l].size());
                for (size_t k = 0; k < zdot[l].size(); ++k) adot[l + 1][k] = round_to<T>(zdot[l][k] * hidden_d1(l, blk, k));
            }
            const A* z_top = &ctx.pre[top][blk * m_l.padded_output_dims * B];
            if (dL_ddLdoutput)
                for (int64_t r = 0; r < nr; ++r)
                    for (uint32_t o = 0; o < m_l.n_output_dims; ++o)
                        store_as(*dL_ddLdoutput, r0 + r, o,
                                 activation_derivative(out_act, z_top[o * B + r]) * zdot[top][o * B + r]);
            if (!sweep) continue;

            // Reverse sweep: d as in backward, e alongside.
            const uint32_t n_top = m_l.padded_output_dims;
            d.assign(static_cast<size_t>(n_top) * B, A(0));
            e.assign(static_cast<size_t>(n_top) * B, A(0));
            bool e_zero = derivative_from_output(out_act);
            for (uint32_t o = 0; o < m_l.n_output_dims; ++o)
                for (int64_t r = 0; r < nr; ++r) {
                    const A u = load_as<T>(dL_doutput, r0 + r, o), z = z_top[o * B + r];
                    d[o * B + r] = round_to<T>(u * activation_derivative(out_act, z));
                    if (!e_zero)
                        e[o * B + r] = round_to<T>(u * activation_second_derivative(out_act, z) * zdot[top][o * B + r]);
                }
            for (int64_t l = top; l >= 0; --l) {
                const uint32_t n_in = m_l.layer_in(l), n_out = m_l.layer_out(l);
                const A* a_prev = l == 0 ? &ctx.input[blk * n_in * B] : &ctx.post[l - 1][blk * n_in * B];
                const A* t_prev = adot[l].data();
                if (dparams) {
                    // dW[o][i] += d[o][r] adot[i][r] + e[o][r] a[i][r], rows in order ([row][feature]
                    // copies as in backward).
                    a_rows.resize(static_cast<size_t>(nr) * n_in);
                    t_rows.resize(static_cast<size_t>(nr) * n_in);
                    for (uint32_t i = 0; i < n_in; ++i)
                        for (int64_t r = 0; r < nr; ++r) {
                            a_rows[r * n_in + i] = a_prev[i * B + r];
                            t_rows[r * n_in + i] = t_prev[i * B + r];
                        }
                    A* dW = dparams + m_l.weight_offset(l);
                    for (uint32_t o = 0; o < n_out; ++o) {
                        const A* d_o = &d[o * B];
                        const A* e_o = &e[o * B];
                        A* dWo = dW + static_cast<size_t>(o) * n_in;
                        for (int64_t r = 0; r < nr; ++r) {
                            const A gd_r = d_o[r], ge_r = e_o[r];
                            const A* ar = &a_rows[r * n_in];
                            const A* tr = &t_rows[r * n_in];
                            for (uint32_t i = 0; i < n_in; ++i) dWo[i] += gd_r * tr[i] + ge_r * ar[i];
                        }
                        if (m_l.bias) {
                            A s = A(0);
                            for (int64_t r = 0; r < nr; ++r) s += e_o[r];
                            dparams[m_l.bias_offset(l) + o] += s;
                        }
                    }
                }
                if (l == 0 && !dL_dinput) break;
                const T* W = params + m_l.weight_offset(l);
                // gd = W^T d (not needed at the bottom), ge = W^T e.
                gd.assign(static_cast<size_t>(n_in) * B, A(0));
                ge.assign(static_cast<size_t>(n_in) * B, A(0));
                for (uint32_t o = 0; o < n_out; ++o) {
                    const A* d_o = &d[o * B];
                    const A* e_o = &e[o * B];
                    for (uint32_t i = 0; i < n_in; ++i) {
                        const A w = static_cast<A>(W[static_cast<size_t>(o) * n_in + i]);
                        A* gdi = &gd[i * B];
                        A* gei = &ge[i * B];
                        if (l > 0)
                            for (int64_t r = 0; r < nr; ++r) gdi[r] += w * d_o[r];
                        if (!e_zero)
                            for (int64_t r = 0; r < nr; ++r) gei[r] += w * e_o[r];
                    }
                }
                if (l == 0) {
                    for (int64_t r = 0; r < nr; ++r)
                        for (uint32_t i = 0; i < m_l.n_input_dims; ++i) store_as(*dL_dinput, r0 + r, i, ge[i * B + r]);
                    break;
                }
                const uint32_t below = static_cast<uint32_t>(l - 1);
                const A* zd = zdot[below].data();
                const bool second = !derivative_from_output(act);
                for (size_t k = 0; k < gd.size(); ++k) {
                    const A d1 = hidden_d1(below, blk, k);
                    ge[k] = ge[k] * d1;
                    if (second) ge[k] += gd[k] * hidden_d2(below, blk, k) * zd[k];
                    ge[k] = round_to<T>(ge[k]);
                    gd[k] = round_to<T>(gd[k] * d1);
                }
                e_zero = e_zero && !second;
                std::swap(d, gd);
                std::swap(e, ge);
            }
        }
    };

    if (dL_dparams) {
        parallel_reduce<A>(rows, group_rows, n_params, grad.data(),
                           [&](int64_t g0, int64_t g1, A* partial) { process_group(g0, g1, partial); });
        for (size_t i = 0; i < n_params; ++i)
            dL_dparams[i] = mode == GradMode::accumulate ? T(static_cast<A>(dL_dparams[i]) + grad[i]) : T(grad[i]);
    } else {
        parallel_for(rows, group_rows, [&](int64_t g0, int64_t g1) { process_group(g0, g1, nullptr); });
    }
}

template class MlpReference<float>;
template class MlpReference<double>;
template class MlpReference<half>;
template class MlpReference<bfloat16>;

namespace mlp_cpu {

std::unique_ptr<Context> forward(const MlpLayout& layout, DType dtype, MlpRounding rounding, ConstView input,
                                 View output, const void* params, bool keep_context) {
    return dispatch_dtype(dtype, [&](auto t) -> std::unique_ptr<Context> {
        using T = decltype(t);
        return MlpReference<T>(layout, rounding).forward(input, output, static_cast<const T*>(params), keep_context);
    });
}

namespace {
// The reference's context of a CPU forward of this network over `input`'s rows, or an error.
template <typename T>
const typename MlpReference<T>::Ctx& reference_context(const std::string& who, const char* method, const Context& ctx,
                                                       ConstView input) {
    const auto* c = dynamic_cast<const typename MlpReference<T>::Ctx*>(&ctx);
    if (!c || c->pre.empty())
        throw Error(msg(who, ": ", method, " got a context that does not come from a CPU forward of this network "
                             "(forward with the same module on the same device, keeping the context)"));
    if (c->rows != input.rows)
        throw ShapeError(msg(who, ": ", method, " got ", input.rows, " rows, its forward pass had ", c->rows));
    return *c;
}
}  // namespace

void backward(const MlpLayout& layout, DType dtype, MlpRounding rounding, const std::string& who, const Context& ctx,
              ConstView input, ConstView dL_doutput, View* dL_dinput, void* dL_dparams, const void* params,
              GradMode mode) {
    dispatch_dtype(dtype, [&](auto t) {
        using T = decltype(t);
        const auto& c = reference_context<T>(who, "backward", ctx, input);
        MlpReference<T>(layout, rounding)
            .backward(c, dL_doutput, dL_dinput, static_cast<T*>(dL_dparams), static_cast<const T*>(params), mode);
    });
}

void backward_backward_input(const MlpLayout& layout, DType dtype, MlpRounding rounding, const std::string& who,
                             const Context& ctx, ConstView input, ConstView dL_ddLdinput, ConstView dL_doutput,
                             View* dL_ddLdoutput, View* dL_dinput, void* dL_dparams, const void* params,
                             GradMode mode) {
    dispatch_dtype(dtype, [&](auto t) {
        using T = decltype(t);
        const auto& c = reference_context<T>(who, "backward_backward_input", ctx, input);
        MlpReference<T>(layout, rounding)
            .backward_backward_input(c, dL_ddLdinput, dL_doutput, dL_ddLdoutput, dL_dinput,
                                     static_cast<T*>(dL_dparams), static_cast<const T*>(params), mode);
    });
}

}  // namespace mlp_cpu

namespace {

class PortableMlp final : public CpuReferenceNetwork {
public:
    PortableMlp(const MlpLayout& layout, DType dtype, DType output_dtype)
        : CpuReferenceNetwork(layout, dtype, output_dtype, {}) {}
    std::string name() const override { return "PortableMLP"; }
    // The GPU implementation is fp32 only (fp64 is the CPU oracle's precision).
    bool supports_device(Device d) const override { return d.is_cpu() || param_dtype() == DType::f32; }
    // Every activation has a second derivative (activation.h), on the CPU and the GPU.
    bool supports_backward_backward() const override { return true; }

private:
#ifdef TNN_WITH_GPU
    std::unique_ptr<Context> forward_gpu(const Stream& stream, ConstView input, View output, const void* params,
                                         bool) const override {
        return portable_mlp_gpu::forward(m_layout, stream, input, output, static_cast<const float*>(params));
    }

    void inference_gpu(const Stream& stream, ConstView input, View output, const void* params) const override {
        portable_mlp_gpu::inference(m_layout, stream, input, output, static_cast<const float*>(params));
    }

    void backward_gpu(const Stream& stream, const Context& ctx, ConstView input, ConstView, ConstView dL_doutput,
                      View* dL_dinput, void* dL_dparams, const void* params, GradMode mode) const override {
        portable_mlp_gpu::backward(m_layout, stream, ctx, input, dL_doutput, dL_dinput, static_cast<float*>(dL_dparams),
                                   static_cast<const float*>(params), mode);
    }

    void backward_backward_input_gpu(const Stream& stream, const Context& ctx, ConstView input,
                                     ConstView dL_ddLdinput, ConstView dL_doutput, View* dL_ddLdoutput,
                                     View* dL_dinput, void* dL_dparams, const void* params,
                                     GradMode mode) const override {
        portable_mlp_gpu::backward_backward_input(m_layout, stream, ctx, input, dL_ddLdinput, dL_doutput,
                                                  dL_ddLdoutput, dL_dinput, static_cast<float*>(dL_dparams),
                                                  static_cast<const float*>(params), mode);
    }
#endif  // TNN_WITH_GPU
};

}  // namespace

void register_portable_mlp(Registry<NetworkFactory>& registry) {
    registry.add("PortableMLP",
                 NetworkFactory{DType::f32,
                                {DType::f32, DType::f64},
                                [](const MlpLayout& l, DType t, DType out, ConfigReader&, const std::string&) {
                                    return std::unique_ptr<Network>(new PortableMlp(l, t, out));
                                }});
}

}  // namespace tnn
