// create_encoding: the otype registry of every encoding, and the dtype rules they share.
#include <tnn/encoding.h>

#include "encodings/encoding_registry.h"

namespace tnn {

const Registry<EncodingFactory>& encoding_registry() {
    static const Registry<EncodingFactory> registry = [] {
        Registry<EncodingFactory> r("encoding");
        register_identity_encoding(r);
        register_frequency_encoding(r);
        register_triangle_wave_encoding(r);
        register_oneblob_encoding(r);
        register_spherical_harmonics_encoding(r);
        register_grid_encodings(r);
        register_permuto_encoding(r);
        register_composite_encodings(r);
        register_empty_encoding(r);
        return r;
    }();
    return registry;
}

std::vector<std::string> encoding_names() { return encoding_registry().names(); }

std::unique_ptr<Encoding> create_encoding(uint32_t n_dims, const json& config, DType dtype) {
    const std::string otype = require_otype(config, "encoding");
    const EncodingFactory& factory = encoding_registry().get(otype);
    const std::string name = encoding_registry().canonical_name(otype);
    if (n_dims == 0) throw ConfigError(msg(name, " encoding: n_dims must be at least 1"));
    ConfigReader r(config, name + " encoding");
    auto enc = factory(n_dims, dtype, r);
    r.finish();
    return enc;
}

}  // namespace tnn
