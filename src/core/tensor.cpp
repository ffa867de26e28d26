// Views, owning buffers, and the copy / convert / fill helpers that work across devices.
#include <tnn/tensor.h>

#include "core/gpu_bridge.h"
#include "core/parallel.h"

#include <tnn/module.h>

#include <cstdlib>
#include <cstring>
#include <sstream>

namespace tnn {

void Stream::synchronize() const {
    if (m_device.is_cpu()) return;
#ifdef TNN_WITH_GPU
    gpu_bridge::synchronize(*this);
#else
    throw_no_gpu_backend("Stream::synchronize");
#endif  // TNN_WITH_GPU
}

View View::rows_slice(int64_t begin, int64_t n) const {
    if (begin < 0 || n < 0 || begin + n > rows) throw ShapeError(msg("rows_slice(", begin, ", ", n, ") out of range for ", rows, " rows"));
    View v = *this;
    v.data = static_cast<char*>(data) + begin * stride * static_cast<int64_t>(dtype_size(dtype));
    v.rows = n;
    return v;
}

View View::cols_slice(int64_t begin, int64_t n) const {
    if (begin < 0 || n < 0 || begin + n > cols) throw ShapeError(msg("cols_slice(", begin, ", ", n, ") out of range for ", cols, " cols"));
    View v = *this;
    v.data = static_cast<char*>(data) + begin * static_cast<int64_t>(dtype_size(dtype));
    v.cols = n;
    return v;
}

ConstView ConstView::rows_slice(int64_t begin, int64_t n) const {
    View v(const_cast<void*>(data), dtype, device, rows, cols, stride);
    return v.rows_slice(begin, n);
}

ConstView ConstView::cols_slice(int64_t begin, int64_t n) const {
    View v(const_cast<void*>(data), dtype, device, rows, cols, stride);
    return v.cols_slice(begin, n);
}

std::string describe(const ConstView& v) {
    std::ostringstream os;
    os << "[" << v.rows << ", " << v.cols << "] " << dtype_name(v.dtype) << " on " << v.device.str();
    if (v.stride != v.cols) os << " (stride " << v.stride << ")";
    return os.str();
}

Buffer::Buffer(Device device, size_t bytes) : m_device(device) { resize(bytes); }
Buffer::~Buffer() { release(); }

Buffer::Buffer(Buffer&& o) noexcept
    : m_device(o.m_device), m_bytes(o.m_bytes), m_data(o.m_data), m_temporary(o.m_temporary), m_stream(o.m_stream) {
    o.m_bytes = 0;
    o.m_data = nullptr;
}

Buffer Buffer::temporary(const Stream& stream, size_t bytes) {
    if (stream.device().is_cpu()) return Buffer(Device::cpu(), bytes);
    Buffer b;
    b.m_device = stream.device();
    if (bytes == 0) return b;
#ifdef TNN_WITH_GPU
    b.m_data = gpu_bridge::alloc_temporary(stream, bytes);
    b.m_bytes = bytes;
    b.m_temporary = true;
    b.m_stream = stream.native();
#else
    throw_no_gpu_backend("GPU memory allocation");
#endif  // TNN_WITH_GPU
    return b;
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
    if (this != &o) {
        release();
        m_device = o.m_device;
        m_bytes = o.m_bytes;
        m_data = o.m_data;
        m_temporary = o.m_temporary;
        m_stream = o.m_stream;
        o.m_bytes = 0;
        o.m_data = nullptr;
    }
    return *this;
}

void Buffer::release() {
    if (!m_data) return;
    if (m_device.is_cpu()) {
        std::free(m_data);
    } else {
#ifdef TNN_WITH_GPU
        if (m_temporary)
            gpu_bridge::free_temporary(Stream::gpu(m_stream, m_device.index), m_data, m_bytes);
        else
            gpu_bridge::free(m_device.index, m_data);
#endif  // TNN_WITH_GPU
    }
    m_data = nullptr;
    m_bytes = 0;
    m_temporary = false;
}

void Buffer::resize(size_t bytes) {
    if (bytes == m_bytes) return;
    release();
    if (bytes == 0) return;
    if (m_device.is_cpu()) {
        const size_t rounded = (bytes + 63) / 64 * 64;
        m_data = std::aligned_alloc(64, rounded);
        if (!m_data) throw Error(msg("out of host memory allocating ", bytes, " bytes"));
    } else {
#ifdef TNN_WITH_GPU
        m_data = gpu_bridge::malloc(m_device.index, bytes);
#else
        throw_no_gpu_backend("GPU memory allocation");
#endif  // TNN_WITH_GPU
    }
    m_bytes = bytes;
}

Tensor::Tensor(int64_t rows, int64_t cols, DType dtype, Device device)
    : m_buffer(device, static_cast<size_t>(std::max<int64_t>(0, rows) * std::max<int64_t>(0, cols)) * dtype_size(dtype)),
      m_dtype(dtype), m_rows(rows), m_cols(cols) {
    if (rows < 0 || cols < 0) throw ShapeError(msg("Tensor: negative shape [", rows, ", ", cols, "]"));
}

Tensor Tensor::temporary(const Stream& stream, int64_t rows, int64_t cols, DType dtype) {
    if (rows < 0 || cols < 0) throw ShapeError(msg("Tensor: negative shape [", rows, ", ", cols, "]"));
    Tensor t;
    t.m_buffer = Buffer::temporary(stream, static_cast<size_t>(rows * cols) * dtype_size(dtype));
    t.m_dtype = dtype;
    t.m_rows = rows;
    t.m_cols = cols;
    return t;
}

Tensor Tensor::to(Device device, const Stream& stream) const {
    Tensor out(m_rows, m_cols, m_dtype, device);
    const Stream s = device.is_gpu() ? Stream::gpu(stream.device().is_gpu() ? stream.native() : nullptr, device.index)
                     : this->device().is_gpu() ? Stream::gpu(stream.device().is_gpu() ? stream.native() : nullptr, this->device().index)
                                               : Stream::cpu();
    copy_bytes(s, out.data(), device, data(), this->device(), bytes());
    s.synchronize();
    return out;
}

namespace {

// A host copy of t converted to T (float or double).
template <typename T> std::vector<T> host_vector(const Tensor& t) {
    Tensor host = t.device().is_cpu() ? Tensor() : t.to(Device::cpu());
    const Tensor& src = t.device().is_cpu() ? t : host;
    std::vector<T> out(static_cast<size_t>(t.numel()));
    convert(Stream::cpu(), src.view(), View(out.data(), dtype_of<T>::value, Device::cpu(), t.rows(), t.cols()));
    return out;
}

}  // namespace

std::vector<float> Tensor::to_float_vector() const { return host_vector<float>(*this); }
std::vector<double> Tensor::to_double_vector() const { return host_vector<double>(*this); }

void copy_bytes(const Stream& stream, void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
    if (bytes == 0) return;
    if (dst_device.is_cpu() && src_device.is_cpu()) {
        std::memcpy(dst, src, bytes);
        return;
    }
#ifdef TNN_WITH_GPU
    gpu_bridge::memcpy(stream, dst, src, bytes);
#else
    throw_no_gpu_backend("copy to or from GPU memory");
#endif  // TNN_WITH_GPU
}

namespace {

void check_same_shape(const char* what, ConstView a, ConstView b) {
    if (a.rows != b.rows || a.cols != b.cols)
        throw ShapeError(msg(what, ": shapes differ: ", describe(a), " vs ", describe(b)));
}

template <typename S, typename D> void convert_cpu_typed(ConstView src, View dst) {
    parallel_for(src.rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, src.cols)), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
            for (int64_t c = 0; c < src.cols; ++c) dst.at<D>(r, c) = D(static_cast<acc_t<S>>(src.at<S>(r, c)));
    });
}

}  // namespace

void copy(const Stream& stream, ConstView src, View dst) {
    check_same_shape("copy", src, dst);
    if (src.dtype != dst.dtype)
        throw DTypeError(msg("copy: dtypes differ (", dtype_name(src.dtype), " -> ", dtype_name(dst.dtype), "); use convert"));
    if (src.rows == 0 || src.cols == 0) return;
    const size_t es = dtype_size(src.dtype);
    if (src.device.is_cpu() && dst.device.is_cpu()) {
        for (int64_t r = 0; r < src.rows; ++r)
            std::memcpy(static_cast<char*>(dst.data) + r * dst.stride * es, static_cast<const char*>(src.data) + r * src.stride * es, src.cols * es);
        return;
    }
#ifdef TNN_WITH_GPU
    gpu_bridge::memcpy_2d(stream, dst.data, dst.stride * es, src.data, src.stride * es, src.cols * es, src.rows);
#else
    throw_no_gpu_backend("copy to or from GPU memory");
#endif  // TNN_WITH_GPU
}

void convert(const Stream& stream, ConstView src, View dst) {
    check_same_shape("convert", src, dst);
    if (src.device != dst.device)
        throw DeviceError(msg("convert: devices differ (", src.device.str(), " -> ", dst.device.str(), ")"));
    if (src.rows == 0 || src.cols == 0) return;
    if (src.device.is_gpu()) {
#ifdef TNN_WITH_GPU
        gpu_bridge::convert(stream, src, dst);
        return;
#else
        throw_no_gpu_backend("convert on the GPU");
#endif  // TNN_WITH_GPU
    }
    dispatch_dtype(src.dtype, [&](auto s) {
        using S = decltype(s);
        dispatch_dtype(dst.dtype, [&](auto d) {
            using D = decltype(d);
            convert_cpu_typed<S, D>(src, dst);
        });
    });
}

void add(const Stream& stream, ConstView src, View dst) {
    check_same_shape("add", src, dst);
    if (src.dtype != dst.dtype)
        throw DTypeError(msg("add: dtypes differ (", dtype_name(src.dtype), " vs ", dtype_name(dst.dtype), ")"));
    if (src.device != dst.device)
        throw DeviceError(msg("add: devices differ (", src.device.str(), " vs ", dst.device.str(), ")"));
    if (src.rows == 0 || src.cols == 0) return;
    if (dst.device.is_gpu()) {
#ifdef TNN_WITH_GPU
        gpu_bridge::add(stream, src, dst);
        return;
#else
        throw_no_gpu_backend("add on the GPU");
#endif  // TNN_WITH_GPU
    }
    dispatch_dtype(dst.dtype, [&](auto d) {
        using D = decltype(d);
        using A = acc_t<D>;
        for (int64_t r = 0; r < dst.rows; ++r)
            for (int64_t c = 0; c < dst.cols; ++c)
                dst.at<D>(r, c) = D(static_cast<A>(dst.at<D>(r, c)) + static_cast<A>(src.at<D>(r, c)));
    });
}

void fill(const Stream& stream, View dst, double value) {
    if (dst.rows == 0 || dst.cols == 0) return;
    if (dst.device.is_gpu()) {
#ifdef TNN_WITH_GPU
        gpu_bridge::fill(stream, dst, value);
        return;
#else
        throw_no_gpu_backend("fill on the GPU");
#endif  // TNN_WITH_GPU
    }
    dispatch_dtype(dst.dtype, [&](auto d) {
        using D = decltype(d);
        const D v = static_cast<D>(value);
        for (int64_t r = 0; r < dst.rows; ++r)
            for (int64_t c = 0; c < dst.cols; ++c) dst.at<D>(r, c) = v;
    });
}

}  // namespace tnn
