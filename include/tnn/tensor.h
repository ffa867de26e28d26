// Tensor views (never owning, row-major [rows, cols] with a row stride in elements), owning
// buffers and tensors, and streams. Every module call takes views; only Buffer/Tensor own memory,
// through the allocator of their device.
#pragma once

#include <tnn/dtype.h>
#include <tnn/error.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace tnn {

// A non-owning handle to an execution queue. On the CPU it is empty (work runs synchronously on
// the calling thread and the library's thread pool); on a GPU it wraps a native stream handle
// (cudaStream_t / hipStream_t, nullptr = the legacy default stream) that the caller owns.
class Stream {
public:
    Stream() = default;
    static Stream cpu() { return Stream(); }
    static Stream gpu(void* native_handle, int device_index = 0) {
        Stream s;
        s.m_device = Device::gpu(device_index);
        s.m_native = native_handle;
        return s;
    }
    Device device() const { return m_device; }
    void* native() const { return m_native; }
    void synchronize() const;  // waits for the work queued so far (no-op on the CPU)

private:
    Device m_device = Device::cpu();
    void* m_native = nullptr;
};

struct View {
    void* data = nullptr;
    DType dtype = DType::f32;
    Device device = Device::cpu();
    int64_t rows = 0, cols = 0, stride = 0;  // stride: elements between consecutive rows (>= cols)

    View() = default;
    View(void* d, DType t, Device dev, int64_t r, int64_t c, int64_t s = -1)
        : data(d), dtype(t), device(dev), rows(r), cols(c), stride(s < 0 ? c : s) {}

    template <typename T> T* ptr() const { return static_cast<T*>(data); }
    template <typename T> T& at(int64_t r, int64_t c) const { return static_cast<T*>(data)[r * stride + c]; }
    bool contiguous() const { return stride == cols || rows <= 1; }
    int64_t numel() const { return rows * cols; }
    View rows_slice(int64_t begin, int64_t n) const;
    View cols_slice(int64_t begin, int64_t n) const;
};

struct ConstView {
    const void* data = nullptr;
    DType dtype = DType::f32;
    Device device = Device::cpu();
    int64_t rows = 0, cols = 0, stride = 0;

    ConstView() = default;
    ConstView(const void* d, DType t, Device dev, int64_t r, int64_t c, int64_t s = -1)
        : data(d), dtype(t), device(dev), rows(r), cols(c), stride(s < 0 ? c : s) {}
    ConstView(const View& v) : data(v.data), dtype(v.dtype), device(v.device), rows(v.rows), cols(v.cols), stride(v.stride) {}

    template <typename T> const T* ptr() const { return static_cast<const T*>(data); }
    template <typename T> const T& at(int64_t r, int64_t c) const { return static_cast<const T*>(data)[r * stride + c]; }
    bool contiguous() const { return stride == cols || rows <= 1; }
    int64_t numel() const { return rows * cols; }
    ConstView rows_slice(int64_t begin, int64_t n) const;
    ConstView cols_slice(int64_t begin, int64_t n) const;
};

std::string describe(const ConstView& v);  // "[4096, 32] float32 on gpu:0 (stride 32)" for messages

// Owning, uninitialised device or host memory (64-byte aligned on the CPU). Move-only.
class Buffer {
public:
    Buffer() = default;
    Buffer(Device device, size_t bytes);
    // Per-call scratch: on a GPU it comes from the stream-ordered caching allocator and goes back to
    // it (for reuse by later work on the same stream) when the Buffer dies; no device sync, capture-safe.
    static Buffer temporary(const Stream& stream, size_t bytes);
    ~Buffer();
    Buffer(Buffer&& o) noexcept;
    Buffer& operator=(Buffer&& o) noexcept;
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;

    void* data() const { return m_data; }
    size_t bytes() const { return m_bytes; }
    Device device() const { return m_device; }
    template <typename T> T* ptr() const { return static_cast<T*>(m_data); }
    void resize(size_t bytes);  // contents are not preserved

private:
    void release();
    Device m_device = Device::cpu();
    size_t m_bytes = 0;
    void* m_data = nullptr;
    bool m_temporary = false;
    void* m_stream = nullptr;  // native stream of a temporary GPU buffer
};

// A Buffer with a dtype and a [rows, cols] shape (contiguous).
class Tensor {
public:
    Tensor() = default;
    Tensor(int64_t rows, int64_t cols, DType dtype, Device device = Device::cpu());
    static Tensor temporary(const Stream& stream, int64_t rows, int64_t cols, DType dtype);  // see Buffer::temporary

    View view() { return View(m_buffer.data(), m_dtype, m_buffer.device(), m_rows, m_cols); }
    ConstView view() const { return ConstView(m_buffer.data(), m_dtype, m_buffer.device(), m_rows, m_cols); }
    operator View() { return view(); }
    operator ConstView() const { return view(); }
    void* data() const { return m_buffer.data(); }
    template <typename T> T* ptr() const { return m_buffer.ptr<T>(); }
    DType dtype() const { return m_dtype; }
    Device device() const { return m_buffer.device(); }
    int64_t rows() const { return m_rows; }
    int64_t cols() const { return m_cols; }
    int64_t numel() const { return m_rows * m_cols; }
    size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(m_dtype); }

    Tensor to(Device device, const Stream& stream = Stream()) const;  // synchronous copy
    std::vector<float> to_float_vector() const;                          // host copy, converted to fp32
    std::vector<double> to_double_vector() const;                        // host copy, converted to fp64

private:
    Buffer m_buffer;
    DType m_dtype = DType::f32;
    int64_t m_rows = 0, m_cols = 0;
};

// Copies src into dst (same shape and dtype), any devices, strided views allowed. Asynchronous on
// the stream for GPU work.
void copy(const Stream& stream, ConstView src, View dst);
// Elementwise dtype conversion src -> dst (same shape and device; dtypes may differ).
void convert(const Stream& stream, ConstView src, View dst);
// dst += src elementwise (same shape, dtype and device).
void add(const Stream& stream, ConstView src, View dst);
// Fills a view with a value (converted to its dtype).
void fill(const Stream& stream, View dst, double value);
// Copies raw bytes between host and device (either direction, or within one).
void copy_bytes(const Stream& stream, void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);

}  // namespace tnn
