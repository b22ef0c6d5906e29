// MedianPool on the GPU, for the op opmarket-median-pool declares: one thread per output
// element (batch, row, column, channel) of an NHWC input, in a grid-stride loop. Each thread
// gathers its window's in-bounds values (SAME windows at the edge take fewer), and returns
// NaN if one is NaN, else the middle value, or the mean of the two middle ones for an even
// count (numpy.median's rule, as the base plugin's CPU kernel computes it).
//
// Windows of up to kLocal values are sorted in registers/local memory (insertion sort:
// 3x3 and 5x5 windows are the common case); larger ones select the middle ranks by counting,
// O(k^2) reads but no buffer. A C interface for opmarket_median_pool_cuda13 (ctypes, host
// arrays), and the device entry opm_median_pool_device (opmarket/cuda_kernel.h) that framework
// bridges call on their own GPU buffers and stream.
//
// The per-window code is __host__ __device__: opm_median_pool_on_host runs the very same
// function over every output element on the CPU, so that its results are checked against
// the numpy reference on machines without a GPU (tests/test_gpu_companions.py).
#include <cuda_runtime.h>
#include <opmarket/cuda.cuh>  // opmarket_cuda_devices(), round_trip, DeviceCall

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace {

constexpr int kLocal = 49;  // up to 7x7 windows in a local array

enum MedianPoolDtype : int { kFloat = 0, kDouble = 1 };

struct Geometry {
  int64_t n, h, w, c;     // input NHWC
  int64_t kh, kw;         // window
  int64_t sh, sw;         // strides
  int64_t oh, ow;         // output rows and columns
  int64_t top, left;      // SAME padding before (0 for VALID)
};

template <typename T>
__host__ __device__ T nan_of() {
  return static_cast<T>(NAN);
}

// The value of rank r (0-based, ascending) among the window's k values, by counting.
template <typename T>
__host__ __device__ T rank_by_counting(const T* img, const Geometry& g, int64_t ya, int64_t yb,
                              int64_t xa, int64_t xb, int64_t r) {
  for (int64_t y = ya; y < yb; ++y) {
    for (int64_t x = xa; x < xb; ++x) {
      const T v = img[(y * g.w + x) * g.c];
      int64_t less = 0, equal = 0;
      for (int64_t y2 = ya; y2 < yb; ++y2) {
        for (int64_t x2 = xa; x2 < xb; ++x2) {
          const T u = img[(y2 * g.w + x2) * g.c];
          less += u < v;
          equal += u == v;
        }
      }
      if (less <= r && r < less + equal) return v;
    }
  }
  return nan_of<T>();  // not reached for a NaN-free window
}

template <typename T>
__host__ __device__ T window_median(const T* img, const Geometry& g, int64_t y0, int64_t x0) {
  const int64_t ya = y0 > 0 ? y0 : 0, yb = y0 + g.kh < g.h ? y0 + g.kh : g.h;
  const int64_t xa = x0 > 0 ? x0 : 0, xb = x0 + g.kw < g.w ? x0 + g.kw : g.w;
  const int64_t k = (yb - ya) * (xb - xa);
  if (k <= 0) return nan_of<T>();
  if (k <= kLocal) {
    T buf[kLocal];
    int n = 0;
    for (int64_t y = ya; y < yb; ++y) {
      for (int64_t x = xa; x < xb; ++x) {
        const T v = img[(y * g.w + x) * g.c];
        if (v != v) return v;  // NaN
        int i = n++;
        while (i > 0 && buf[i - 1] > v) {
          buf[i] = buf[i - 1];
          --i;
        }
        buf[i] = v;
      }
    }
    return n % 2 ? buf[n / 2] : (buf[n / 2 - 1] + buf[n / 2]) / T(2);
  }
  for (int64_t y = ya; y < yb; ++y) {
    for (int64_t x = xa; x < xb; ++x) {
      const T v = img[(y * g.w + x) * g.c];
      if (v != v) return v;
    }
  }
  const T hi = rank_by_counting(img, g, ya, yb, xa, xb, k / 2);
  if (k % 2) return hi;
  return (rank_by_counting(img, g, ya, yb, xa, xb, k / 2 - 1) + hi) / T(2);
}

// Output element i (NHWC order): the median of its window.
template <typename T>
__host__ __device__ T output_element(const T* in, const Geometry& g, int64_t i) {
  const int64_t ch = i % g.c;
  const int64_t ox = (i / g.c) % g.ow;
  const int64_t oy = (i / (g.c * g.ow)) % g.oh;
  const int64_t b = i / (g.c * g.ow * g.oh);
  const T* img = in + b * g.h * g.w * g.c + ch;
  return window_median(img, g, oy * g.sh - g.top, ox * g.sw - g.left);
}

template <typename T>
__global__ void MedianPoolKernel(const T* __restrict__ in, T* __restrict__ out, Geometry g) {
  const int64_t total = g.n * g.oh * g.ow * g.c;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    out[i] = output_element(in, g, i);
  }
}

template <typename T>
int run_on_host(const void* in, void* out, const Geometry& g) {
  const int64_t total = g.n * g.oh * g.ow * g.c;
  for (int64_t i = 0; i < total; ++i) {
    static_cast<T*>(out)[i] = output_element(static_cast<const T*>(in), g, i);
  }
  return 0;
}

// Host arrays in and out: copy in, run, copy back.
template <typename T>
int run(const void* host_in, void* host_out, const Geometry& g, char* err, int errlen) {
  const int64_t total = g.n * g.oh * g.ow * g.c;
  const auto launch = [&g, total](const T* in, T* out) {
    const int threads = 256;
    const int64_t blocks = (total + threads - 1) / threads;
    MedianPoolKernel<T><<<static_cast<int>(blocks < 65535 ? blocks : 65535), threads>>>(in, out,
                                                                                        g);
  };
  return opmarket::cuda::round_trip<T>(host_in, static_cast<size_t>(g.n * g.h * g.w * g.c),
                                       host_out, static_cast<size_t>(total), launch,
                                       "MedianPool on the GPU", err, errlen);
}

template <typename T>
void launch_on(const opmarket::cuda::DeviceCall& call, const T* in, T* out, const Geometry& g) {
  const int64_t total = g.n * g.oh * g.ow * g.c;
  if (total == 0) return;
  const int threads = 256;
  const int64_t blocks = (total + threads - 1) / threads;
  MedianPoolKernel<T><<<static_cast<int>(blocks < 65535 ? blocks : 65535), threads, 0,
                        call.stream()>>>(in, out, g);
  call.launched("MedianPool on the GPU");
}

// One spatial dimension's output size and padding before, as the base plugin's output_size
// (TensorFlow's MaxPool); false with the message when it would be negative.
bool output_size(int64_t size, int64_t k, int64_t stride, bool same, const char* dim,
                 int64_t* out, int64_t* before, std::string* error) {
  if (same) {
    *out = (size + stride - 1) / stride;
    const int64_t total = (*out - 1) * stride + k - size;
    *before = total > 0 ? total / 2 : 0;
    return true;
  }
  *out = (size - k + stride) / stride;  // truncated, as TensorFlow's
  *before = 0;
  if (*out >= 0) return true;
  *error = std::string("Computed output ") + dim + " would be negative: " +
           std::to_string(*out) + " [input " + dim + ": " + std::to_string(size) +
           ", ksize: " + std::to_string(k) + ", stride: " + std::to_string(stride) + "]";
  return false;
}

// The pooling's numbers from the input and the attrs, checked as the base plugin checks them
// (its messages); false with the call failed.
bool device_geometry(const opmarket::cuda::DeviceCall& call, const OPMB_Tensor* in,
                     Geometry* g) {
  std::vector<int64_t> ksize, strides;
  std::string padding, error;
  if (!call.attr_int64_list("ksize", &ksize) || !call.attr_int64_list("strides", &strides) ||
      !call.attr_string("padding", &padding)) {
    return false;
  }
  if (in->ndim != 4) {
    return call.fail(OPM_INVALID_ARGUMENT, "MedianPool expects a 4-D NHWC input, got rank " +
                                               std::to_string(in->ndim));
  }
  if (ksize.size() != 4 || strides.size() != 4) {
    error = "Sliding window ksize and stride fields must specify 4 dimensions";
  } else if (ksize[0] != 1 || strides[0] != 1) {
    error = "Pooling is not yet supported on the batch dimension.";
  } else if (ksize[3] != 1 || strides[3] != 1) {
    error = "MedianPool does not pool over depth.";
  } else if (ksize[1] < 1 || ksize[2] < 1 || strides[1] < 1 || strides[2] < 1) {
    error = "Sliding window ksize and strides must be positive";
  } else if (padding != "SAME" && padding != "VALID") {
    error = "padding must be 'VALID' or 'SAME', got '" + padding + "'";
  }
  if (!error.empty()) return call.fail(OPM_INVALID_ARGUMENT, error);
  const bool same = padding == "SAME";
  *g = Geometry{in->dims[0], in->dims[1], in->dims[2], in->dims[3], ksize[1], ksize[2],
                strides[1],  strides[2],  0,           0,           0,        0};
  if (!output_size(g->h, g->kh, g->sh, same, "rows", &g->oh, &g->top, &error) ||
      !output_size(g->w, g->kw, g->sw, same, "cols", &g->ow, &g->left, &error)) {
    return call.fail(OPM_INVALID_ARGUMENT, error);
  }
  return true;
}

}  // namespace

// The device entry: output 0 = the median of each window of input 0 (NHWC), on the
// framework's stream.
OPM_CUDA_ENTRY void opm_median_pool_device(const OPM_CudaKernelCall* c) {
  const opmarket::cuda::DeviceCall call(c);
  const OPMB_Tensor* in = call.input(0);
  Geometry g{};
  if (in == nullptr || !device_geometry(call, in, &g)) return;
  const int64_t dims[4] = {g.n, g.oh, g.ow, g.c};
  const OPMB_Tensor* out = call.allocate(0, in->dtype, dims, 4);
  if (out == nullptr) return;
  switch (in->dtype) {
    case OPM_FLOAT:
      return launch_on(call, static_cast<const float*>(in->data), static_cast<float*>(out->data),
                       g);
    case OPM_DOUBLE:
      return launch_on(call, static_cast<const double*>(in->data),
                       static_cast<double*>(out->data), g);
    default:
      call.fail(OPM_INVALID_ARGUMENT, "MedianPool on the GPU takes float or double, got dtype " +
                                          std::to_string(in->dtype));
  }
}

extern "C" {

// The median of each window; shape[11] = n, h, w, c, kh, kw, sh, sw, oh, ow, top, left (the
// caller checked them). 0, or 1 with a message in err.
__attribute__((visibility("default"))) int opm_median_pool(int dtype, const void* in, void* out,
                                                           const int64_t* shape, char* err,
                                                           int errlen) {
  const Geometry g{shape[0], shape[1], shape[2], shape[3], shape[4],  shape[5],
                   shape[6], shape[7], shape[8], shape[9], shape[10], shape[11]};
  switch (dtype) {
    case kFloat: return run<float>(in, out, g, err, errlen);
    case kDouble: return run<double>(in, out, g, err, errlen);
    default:
      std::snprintf(err, errlen, "unknown dtype code %d", dtype);
      return 1;
  }
}

// The same computation on the CPU, element by element (for tests without a GPU).
__attribute__((visibility("default"))) int opm_median_pool_on_host(int dtype, const void* in,
                                                                   void* out,
                                                                   const int64_t* shape) {
  const Geometry g{shape[0], shape[1], shape[2], shape[3], shape[4],  shape[5],
                   shape[6], shape[7], shape[8], shape[9], shape[10], shape[11]};
  switch (dtype) {
    case kFloat: return run_on_host<float>(in, out, g);
    case kDouble: return run_on_host<double>(in, out, g);
    default: return 1;
  }
}

}  // extern "C"
