// MedianPool: the median of each sliding window over NHWC input, with MaxPool's ksize,
// strides and padding, as one fused, multi-threaded kernel (the seed's motivating example
// for a native op). Windows are sharded by output row with opmarket::shard.
//
// Two paths give the same results:
//  - exact: gather the window's in-bounds values, nth_element, and for an even count the
//    mean of the two middle values (numpy.median's rule); a window with a NaN gives NaN.
//  - fast, for 3x3 windows with stride 1 (VALID, and SAME away from the border): a min/max
//    network on SIMD vectors, compiled for SSE2 (every x86-64 CPU) and AVX2 (functions with
//    the target("avx2") attribute) and chosen at run time with __builtin_cpu_supports; no
//    -march flags. A row holding a NaN
//    falls back to the exact path.
#include <opmarket/kernel.h>
// OPM_MEDIAN_POOL_PORTABLE builds the non-x86 variant on x86 too (to check it compiles).
#if defined(__x86_64__) && !defined(OPM_MEDIAN_POOL_PORTABLE)
#define OPM_MEDIAN_POOL_X86 1
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace {

namespace py = pybind11;

// --- SIMD variants of the 3x3 fast path ------------------------------------------------------

#if OPM_MEDIAN_POOL_X86
#define OPM_SIMD_TARGET
namespace sse2 {
struct VecF {
  using V = __m128;
  using M = __m128;
  static constexpr int64_t W = 4;
  static V load(const float* p) { return _mm_loadu_ps(p); }
  static void store(float* p, V v) { _mm_storeu_ps(p, v); }
  static V min(V a, V b) { return _mm_min_ps(a, b); }
  static V max(V a, V b) { return _mm_max_ps(a, b); }
  static M no_nan() { return _mm_setzero_ps(); }
  static M or_nan(M m, V a, V b) { return _mm_or_ps(m, _mm_cmpunord_ps(a, b)); }
  static bool any(M m) { return _mm_movemask_ps(m) != 0; }
};
struct VecD {
  using V = __m128d;
  using M = __m128d;
  static constexpr int64_t W = 2;
  static V load(const double* p) { return _mm_loadu_pd(p); }
  static void store(double* p, V v) { _mm_storeu_pd(p, v); }
  static V min(V a, V b) { return _mm_min_pd(a, b); }
  static V max(V a, V b) { return _mm_max_pd(a, b); }
  static M no_nan() { return _mm_setzero_pd(); }
  static M or_nan(M m, V a, V b) { return _mm_or_pd(m, _mm_cmpunord_pd(a, b)); }
  static bool any(M m) { return _mm_movemask_pd(m) != 0; }
};
#include "median3x3.inc"
}  // namespace sse2
#undef OPM_SIMD_TARGET

// Every function below carries the avx2 target attribute (OPM_SIMD_TARGET): only these
// use AVX2, and only when best_isa() says the CPU has it.
#define OPM_SIMD_TARGET __attribute__((target("avx2")))
namespace avx2 {
struct VecF {
  using V = __m256;
  using M = __m256;
  static constexpr int64_t W = 8;
  OPM_SIMD_TARGET static V load(const float* p) { return _mm256_loadu_ps(p); }
  OPM_SIMD_TARGET static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  OPM_SIMD_TARGET static V min(V a, V b) { return _mm256_min_ps(a, b); }
  OPM_SIMD_TARGET static V max(V a, V b) { return _mm256_max_ps(a, b); }
  OPM_SIMD_TARGET static M no_nan() { return _mm256_setzero_ps(); }
  OPM_SIMD_TARGET static M or_nan(M m, V a, V b) {
    return _mm256_or_ps(m, _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
  }
  OPM_SIMD_TARGET static bool any(M m) { return _mm256_movemask_ps(m) != 0; }
};
struct VecD {
  using V = __m256d;
  using M = __m256d;
  static constexpr int64_t W = 4;
  OPM_SIMD_TARGET static V load(const double* p) { return _mm256_loadu_pd(p); }
  OPM_SIMD_TARGET static void store(double* p, V v) { _mm256_storeu_pd(p, v); }
  OPM_SIMD_TARGET static V min(V a, V b) { return _mm256_min_pd(a, b); }
  OPM_SIMD_TARGET static V max(V a, V b) { return _mm256_max_pd(a, b); }
  OPM_SIMD_TARGET static M no_nan() { return _mm256_setzero_pd(); }
  OPM_SIMD_TARGET static M or_nan(M m, V a, V b) {
    return _mm256_or_pd(m, _mm256_cmp_pd(a, b, _CMP_UNORD_Q));
  }
  OPM_SIMD_TARGET static bool any(M m) { return _mm256_movemask_pd(m) != 0; }
};
#include "median3x3.inc"
}  // namespace avx2
#undef OPM_SIMD_TARGET

#else  // elsewhere: the same network on scalars, for the compiler to vectorize as it can
#define OPM_SIMD_TARGET
namespace portable {
template <typename T>
struct Scalar {
  using V = T;
  using M = bool;
  static constexpr int64_t W = 1;
  static V load(const T* p) { return *p; }
  static void store(T* p, V v) { *p = v; }
  static V min(V a, V b) { return b < a ? b : a; }
  static V max(V a, V b) { return a < b ? b : a; }
  static M no_nan() { return false; }
  static M or_nan(M m, V a, V b) { return m || a != a || b != b; }
  static bool any(M m) { return m; }
};
using VecF = Scalar<float>;
using VecD = Scalar<double>;
#include "median3x3.inc"
}  // namespace portable
#undef OPM_SIMD_TARGET
namespace sse2 = portable;
namespace avx2 = portable;
#endif

template <typename T>
using RowFn = bool (*)(const T*, const T*, const T*, T*, int64_t, int64_t, T*, T*, T*);

// AVX2 where the CPU has it, else SSE2 (AVX-512 measured slower than AVX2 here: the loop is
// bound by memory, not lanes). use_isa("sse2") forces SSE2, for tests and comparisons.
std::string& isa_override() {
  static std::string value;
  return value;
}

std::string best_isa() {
#if OPM_MEDIAN_POOL_X86
  __builtin_cpu_init();
  if (isa_override() != "sse2" && __builtin_cpu_supports("avx2")) return "avx2";
  return "sse2";
#else
  return "portable";
#endif
}

template <typename T>
RowFn<T> row_fn(const std::string& isa);
template <>
RowFn<float> row_fn<float>(const std::string& isa) {
  return isa == "avx2" ? &avx2::row_float : &sse2::row_float;
}
template <>
RowFn<double> row_fn<double>(const std::string& isa) {
  return isa == "avx2" ? &avx2::row_double : &sse2::row_double;
}

// --- the op -----------------------------------------------------------------------------------

struct Window {
  int64_t size, stride, out, pad_before;
};

// MaxPool's output size and padding (TensorFlow's GetWindowedOutputSize).
Window window(int64_t in, int64_t size, int64_t stride, bool same, const char* dim) {
  Window w{size, stride, 0, 0};
  if (same) {
    w.out = (in + stride - 1) / stride;
    const int64_t needed = std::max<int64_t>((w.out - 1) * stride + size - in, 0);
    w.pad_before = needed / 2;
  } else {
    w.out = (in - size + stride) / stride;  // truncates toward zero, as TensorFlow's does
    OPM_REQUIRES(w.out >= 0, "Computed output ", dim, " would be negative: ", w.out,
                 " [input ", dim, ": ", in, ", ksize: ", size, ", stride: ", stride, "]");
  }
  return w;
}

// The exact median of one window's in-bounds values (NaN if one of them is NaN).
template <typename T>
T window_median(const T* image, int64_t h, int64_t w, int64_t c, int64_t y0, int64_t x0,
                const Window& wy, const Window& wx, std::vector<T>& buf) {
  const int64_t ya = std::max<int64_t>(y0, 0), yb = std::min(y0 + wy.size, h);
  const int64_t xa = std::max<int64_t>(x0, 0), xb = std::min(x0 + wx.size, w);
  buf.clear();
  for (int64_t y = ya; y < yb; ++y) {
    const T* row = image + (y * w) * c;
    for (int64_t x = xa; x < xb; ++x) {
      const T v = row[x * c];
      if (std::isnan(v)) return std::numeric_limits<T>::quiet_NaN();
      buf.push_back(v);
    }
  }
  const size_t k = buf.size();
  if (k == 0) return std::numeric_limits<T>::quiet_NaN();  // not reachable: SAME covers a value
  auto mid = buf.begin() + k / 2;
  std::nth_element(buf.begin(), mid, buf.end());
  if (k % 2 == 1) return *mid;
  const T low = *std::max_element(buf.begin(), mid);
  return (low + *mid) / T(2);
}

template <typename T>
opmarket::Tensor<T> MedianPool(opmarket::Tensor<T> input, std::vector<int64_t> ksize,
                               std::vector<int64_t> strides, const std::string& padding) {
  OPM_REQUIRES(input.rank() == 4, "MedianPool expects a 4-D NHWC input, got shape ",
               input.shape_string());
  OPM_REQUIRES(ksize.size() == 4, "Sliding window ksize field must specify 4 dimensions");
  OPM_REQUIRES(strides.size() == 4, "Sliding window stride field must specify 4 dimensions");
  OPM_REQUIRES(ksize[0] == 1 && strides[0] == 1,
               "Pooling is not yet supported on the batch dimension.");
  OPM_REQUIRES(ksize[3] == 1 && strides[3] == 1, "MedianPool does not pool over depth.");
  for (int i = 1; i < 3; ++i) {
    OPM_REQUIRES(ksize[i] > 0, "Sliding window ksize must be positive, got ", ksize[i]);
    OPM_REQUIRES(strides[i] > 0, "Sliding window stride must be positive, got ", strides[i]);
  }
  OPM_REQUIRES(padding == "VALID" || padding == "SAME",
               "padding must be 'VALID' or 'SAME', got '", padding, "'");
  const bool same = padding == "SAME";
  const int64_t n = input.dim(0), h = input.dim(1), w = input.dim(2), c = input.dim(3);
  const Window wy = window(h, ksize[1], strides[1], same, "rows");
  const Window wx = window(w, ksize[2], strides[2], same, "cols");
  auto output = opmarket::allocate<T>({n, wy.out, wx.out, c});
  const T* in = input.data();
  T* out = output.mutable_data();
  if (output.size() == 0) return output;

  const bool fast = wy.size == 3 && wx.size == 3 && wy.stride == 1 && wx.stride == 1;
  const RowFn<T> row = row_fn<T>(best_isa());
  // Output columns [xa, xb) have every window inside the image: the fast path's range.
  const int64_t xa = std::min(wx.out, wx.pad_before);
  const int64_t xb = std::max(xa, std::min(wx.out, w - wx.size + wx.pad_before + 1));
  const int64_t per_row = wx.out * c;
  const int64_t cost = fast ? per_row * 10 : per_row * (wy.size * wx.size * 8 + 40);

  auto no_gil = opmarket::release_gil();
  opmarket::shard(n * wy.out, cost, [&](int64_t start, int64_t limit) {
    std::vector<T> buf, lo, mid, hi;
    if (fast) {
      lo.resize(per_row + 2 * c);
      mid.resize(per_row + 2 * c);
      hi.resize(per_row + 2 * c);
    }
    for (int64_t r = start; r < limit; ++r) {
      const int64_t b = r / wy.out, oy = r % wy.out;
      const T* image = in + b * h * w * c;
      T* orow = out + r * per_row;
      const int64_t y0 = oy * wy.stride - wy.pad_before;
      int64_t done_a = 0, done_b = 0;  // output columns [done_a, done_b) already written
      if (fast && y0 >= 0 && y0 + 3 <= h && xb > xa) {
        const int64_t x0 = xa - wx.pad_before;  // input column of the first window's left edge
        const T* r0 = image + (y0 * w + x0) * c;
        if (row(r0, r0 + w * c, r0 + 2 * w * c, orow + xa * c, (xb - xa) * c, c, lo.data(),
                mid.data(), hi.data())) {
          done_a = xa;
          done_b = xb;
        }
      }
      for (int64_t ox = 0; ox < wx.out; ++ox) {
        if (ox == done_a && done_b > done_a) {
          ox = done_b - 1;
          continue;
        }
        const int64_t x0 = ox * wx.stride - wx.pad_before;
        for (int64_t ch = 0; ch < c; ++ch) {
          orow[ox * c + ch] = window_median(image + ch, h, w, c, y0, x0, wy, wx, buf);
        }
      }
    }
  });
  return output;
}

}  // namespace

OPM_LIBRARY(_median_pool, lib) {
  lib.op("Opm>MedianPool")
      .attr("T: {float, double} = DT_FLOAT")
      .attr("ksize: list(int) >= 4")
      .attr("strides: list(int) >= 4")
      .attr("padding: {'SAME', 'VALID'}")
      .input("input: T")
      .output("output: T")
      .doc(R"doc(
Median pooling: the median of each sliding window of an NHWC input.

As MaxPool, with the median instead of the maximum. With SAME padding a window at the edge
takes the median of its in-bounds values; an even count of values gives the mean of the two
middle ones, as numpy.median does. A window holding a NaN gives NaN.

input: 4-D with shape [batch, height, width, channels].
output: The pooled values, [batch, out_height, out_width, channels].
ksize: The window size for each dimension of the input; 1 for batch and channels.
strides: The stride of the window for each dimension of the input; 1 for batch and channels.
padding: The type of padding algorithm to use, as MaxPool's.
)doc");
  lib.kernel("Opm>MedianPool", "median_pool_float", &MedianPool<float>, py::arg("input"),
             py::arg("ksize"), py::arg("strides"), py::arg("padding"))
      .type_constraint<float>("T");
  lib.kernel("Opm>MedianPool", "median_pool_double", &MedianPool<double>, py::arg("input"),
             py::arg("ksize"), py::arg("strides"), py::arg("padding"))
      .type_constraint<double>("T");
  lib.module().def(
      "use_isa",
      [](const std::string& isa) {
        OPM_REQUIRES(isa == "sse2" || isa == "best", "use_isa takes 'sse2' or 'best', got '",
                     isa, "'");
        isa_override() = isa;
      },
      py::arg("isa"), "Force the SSE2 fast path ('sse2') or let the CPU choose ('best').");
  lib.module().def("isa", &best_isa,
                   "The instruction set of the 3x3 fast path on this CPU (sse2 or avx2).");
}
