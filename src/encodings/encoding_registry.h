// How encodings plug into create_encoding: one factory per otype, listed in encoding.cpp.
#pragma once

#include <tnn/encoding.h>

#include <functional>

namespace tnn {

// Builds an encoding of n_dims inputs with parameter/output dtype `dtype`; reads its keys from `r`
// (the reader's finish() is called by create_encoding).
using EncodingFactory = std::function<std::unique_ptr<Encoding>(uint32_t n_dims, DType dtype, ConfigReader& r)>;

const Registry<EncodingFactory>& encoding_registry();

// One registration function per encoding file.
void register_identity_encoding(Registry<EncodingFactory>& r);

// Converts the elements of an fp32/fp64 input view to acc type A (CPU reference helper).
template <typename A> inline A load_input(ConstView v, int64_t r, int64_t c) {
    return v.dtype == DType::f64 ? static_cast<A>(v.at<double>(r, c)) : static_cast<A>(v.at<float>(r, c));
}

// Stores an acc-type value into a view of storage type T.
template <typename T, typename A> inline void store_output(View v, int64_t r, int64_t c, A x) { v.at<T>(r, c) = T(x); }
template <> inline void store_output<float, float>(View v, int64_t r, int64_t c, float x) { v.at<float>(r, c) = x; }
template <> inline void store_output<double, double>(View v, int64_t r, int64_t c, double x) { v.at<double>(r, c) = x; }

}  // namespace tnn
