// GradReadyScope (grad_ready.h): one open scope per thread at a time, nested scopes restore the outer one.
#include "core/grad_ready.h"

#include <utility>

namespace tnn {

namespace {
thread_local GradReadyScope* t_open = nullptr;
}  // namespace

GradReadyScope::GradReadyScope(const Stream& stream, const void* dL_dparams, Ready ready)
    : m_stream(stream), m_dL_dparams(dL_dparams), m_ready(std::move(ready)), m_outer(t_open) {
    t_open = this;
}

GradReadyScope::~GradReadyScope() { t_open = m_outer; }

GradReadyScope::Ready* GradReadyScope::claim(const Stream& stream, const void* dL_dparams) {
    GradReadyScope* s = t_open;
    if (!s || s->m_used || !s->m_ready || dL_dparams != s->m_dL_dparams || stream.device() != s->m_stream.device() ||
        stream.native() != s->m_stream.native())
        return nullptr;
    s->m_used = true;
    return &s->m_ready;
}

}  // namespace tnn
