// The computations of the three first-party ops, for the frameworks' own custom ops that
// bench/bridges.py measures opmarket's bridges against: ZeroOut as plugins/zero_out_c computes
// it, TimeTwo as plugins/time_two's CPU functor, MedianPool's 3x3 stride-1 VALID fast path as
// plugins/median_pool runs it (its median3x3.inc, AVX2 where the CPU has it, else SSE2; no
// -march flags). Single-threaded: the benchmark runs opmarket's kernels on one intra-op
// thread too, so both sides do the same work.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace bench {

template <typename T>
inline void zero_out(const T* in, T* out, int64_t n, int64_t keep) {
  std::fill(out, out + n, T(0));
  if (keep >= 0 && keep < n) out[keep] = in[keep];
}

inline void time_two(const float* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = in[i] * 2.0f;
}

namespace median {

// Only the float network is used; median3x3.inc also instantiates double (scalar here).
struct ScalarD {
  using V = double;
  using M = bool;
  static constexpr int64_t W = 1;
  static V load(const double* p) { return *p; }
  static void store(double* p, V v) { *p = v; }
  static V min(V a, V b) { return b < a ? b : a; }
  static V max(V a, V b) { return a < b ? b : a; }
  static M no_nan() { return false; }
  static M or_nan(M m, V a, V b) { return m || a != a || b != b; }
  static bool any(M m) { return m; }
};

#if defined(__x86_64__)
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
using VecD = ScalarD;
#include "median3x3.inc"
}  // namespace sse2
#undef OPM_SIMD_TARGET

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
using VecD = ScalarD;
#include "median3x3.inc"
}  // namespace avx2
#undef OPM_SIMD_TARGET

using RowFn = bool (*)(const float*, const float*, const float*, float*, int64_t, int64_t,
                       float*, float*, float*);

inline RowFn row_fn() {
  static const RowFn fn = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") ? &avx2::row_float : &sse2::row_float;
  }();
  return fn;
}
#else
#define OPM_SIMD_TARGET
namespace portable {
struct VecF {
  using V = float;
  using M = bool;
  static constexpr int64_t W = 1;
  static V load(const float* p) { return *p; }
  static void store(float* p, V v) { *p = v; }
  static V min(V a, V b) { return b < a ? b : a; }
  static V max(V a, V b) { return a < b ? b : a; }
  static M no_nan() { return false; }
  static M or_nan(M m, V a, V b) { return m || a != a || b != b; }
  static bool any(M m) { return m; }
};
using VecD = ScalarD;
#include "median3x3.inc"
}  // namespace portable
#undef OPM_SIMD_TARGET

using RowFn = bool (*)(const float*, const float*, const float*, float*, int64_t, int64_t,
                       float*, float*, float*);

inline RowFn row_fn() { return &portable::row_float; }
#endif

// The exact median of one 3x3 window (the plugin's path for rows holding a NaN).
inline float window_median(const float* in, int64_t w, int64_t c, int64_t y, int64_t x) {
  float v[9];
  int k = 0;
  for (int64_t dy = 0; dy < 3; ++dy) {
    for (int64_t dx = 0; dx < 3; ++dx) {
      const float f = in[((y + dy) * w + x + dx) * c];
      if (f != f) return f;
      v[k++] = f;
    }
  }
  std::nth_element(v, v + 4, v + 9);
  return v[4];
}

}  // namespace median

// MedianPool with ksize [1, 3, 3, 1], strides [1, 1, 1, 1], VALID, on an NHWC float image:
// out is n x (h - 2) x (w - 2) x c.
inline void median_pool_3x3(const float* in, float* out, int64_t n, int64_t h, int64_t w,
                            int64_t c) {
  const int64_t oh = h - 2, ow = w - 2, per_row = ow * c;
  if (oh <= 0 || ow <= 0 || c <= 0) return;
  std::vector<float> lo(per_row + 2 * c), mid(per_row + 2 * c), hi(per_row + 2 * c);
  const median::RowFn row = median::row_fn();
  for (int64_t r = 0; r < n * oh; ++r) {
    const int64_t b = r / oh, y = r % oh;
    const float* image = in + b * h * w * c;
    const float* r0 = image + y * w * c;
    float* orow = out + r * per_row;
    if (row(r0, r0 + w * c, r0 + 2 * w * c, orow, per_row, c, lo.data(), mid.data(),
            hi.data())) {
      continue;
    }
    for (int64_t x = 0; x < ow; ++x) {
      for (int64_t ch = 0; ch < c; ++ch) {
        orow[x * c + ch] = median::window_median(image + ch, w, c, y, x);
      }
    }
  }
}

}  // namespace bench
