// Early parameter gradients: a caller that can use the first part of a module's dL/dparams before the
// module's backward returns (the Trainer stepping its optimizer beside the rest of the backward)
// opens a GradReadyScope around the backward call; a module whose backward finishes a prefix of its
// gradient early (the GPU grid's fast and deterministic passes over groups of levels) reports it
// through the scope. Thread-local: only the backward called on this thread, on the scope's stream, for
// the scope's dL/dparams array sees it.
#pragma once

#include <tnn/tensor.h>

#include <cstddef>
#include <functional>

namespace tnn {

class GradReadyScope {
public:
    // ready(stream, n) is called at most once per scope, from inside the module's backward, at the point
    // of `stream`'s order where the first n values of dL/dparams hold their final values; from there on
    // that backward neither writes those values nor reads the parameters they belong to. Work the
    // callback queues on `stream` (or on a stream forked from it there) may use them.
    using Ready = std::function<void(const Stream& stream, size_t n_final)>;
    GradReadyScope(const Stream& stream, const void* dL_dparams, Ready ready);
    ~GradReadyScope();
    GradReadyScope(const GradReadyScope&) = delete;
    GradReadyScope& operator=(const GradReadyScope&) = delete;

    // For a module's backward: the open scope's callback when it was opened for this stream and this
    // dL/dparams array and has not been called yet, else nullptr. Calling it marks the scope used.
    static Ready* claim(const Stream& stream, const void* dL_dparams);
    bool used() const { return m_used; }

private:
    Stream m_stream;
    const void* m_dL_dparams;
    Ready m_ready;
    bool m_used = false;
    GradReadyScope* m_outer;
};

}  // namespace tnn
