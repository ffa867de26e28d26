// Fuzz target: the `tnn` program's image reader (PNG through libpng, JPEG through libjpeg-turbo,
// everything else refused). The pixel limit is lowered to 2^20 so that an execution stays fast; the
// check itself is the one load_image uses. A tnn::Error is a correct refusal; any other exception,
// a crash, a leak or a hang is a finding.
#include "image.h"

#include <tnn/error.h>

#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        tnn::app::decode_image(data, size, "input", uint64_t{1} << 20);
    } catch (const tnn::Error&) {
    }
    return 0;
}
