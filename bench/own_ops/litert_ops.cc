// The three ops as LiteRT custom-op kernels (LiteRtCustomOpKernel: Init, GetOutputLayouts,
// Run, Destroy), registered with LiteRtAddCustomOpKernelOption as opmarket.litert registers
// its own, with the computations of kernels.h. Each kernel's user data is its op's attrs
// (ZeroOut's preserve_index), set when it is registered. ai-edge-litert ships no headers:
// the few declarations needed are below, with LiteRT's ABI-stable layouts.
#include <cstddef>
#include <cstdint>

#include "kernels.h"

extern "C" {

typedef int LiteRtStatus;  // kLiteRtStatusOk is 0
typedef struct LiteRtTensorBufferT* LiteRtTensorBuffer;

typedef struct {
  unsigned int rank : 7;
  unsigned int has_strides : 1;
  int32_t dimensions[8];
  uint32_t strides[8];
} LiteRtLayout;

typedef struct {
  int element_type;
  LiteRtLayout layout;
} LiteRtRankedTensorType;

LiteRtStatus LiteRtGetTensorBufferTensorType(LiteRtTensorBuffer, LiteRtRankedTensorType*);
LiteRtStatus LiteRtLockTensorBuffer(LiteRtTensorBuffer, void** host_memory_addr, int lock_mode);
LiteRtStatus LiteRtUnlockTensorBuffer(LiteRtTensorBuffer);

typedef struct {
  LiteRtStatus (*Init)(void* user_data, const void* init_data, size_t init_data_size);
  LiteRtStatus (*GetOutputLayouts)(void* user_data, size_t num_inputs,
                                   const LiteRtLayout* input_layouts, size_t num_outputs,
                                   LiteRtLayout* output_layouts);
  LiteRtStatus (*Run)(void* user_data, size_t num_inputs, const LiteRtTensorBuffer* inputs,
                      size_t num_outputs, LiteRtTensorBuffer* outputs);
  LiteRtStatus (*Destroy)(void* user_data);
} LiteRtCustomOpKernel;

}  // extern "C"

namespace {

constexpr LiteRtStatus kOk = 0, kInvalidArgument = 1, kRuntimeFailure = 3;
constexpr int kLockRead = 0, kLockWrite = 1;

LiteRtStatus Init(void*, const void*, size_t) { return kOk; }
LiteRtStatus Destroy(void*) { return kOk; }

LiteRtStatus SameLayout(void*, size_t n_in, const LiteRtLayout* in, size_t n_out,
                        LiteRtLayout* out) {
  if (n_in != 1 || n_out != 1) return kInvalidArgument;
  out[0] = in[0];
  return kOk;
}

LiteRtStatus PooledLayout(void*, size_t n_in, const LiteRtLayout* in, size_t n_out,
                          LiteRtLayout* out) {
  if (n_in != 1 || n_out != 1 || in[0].rank != 4) return kInvalidArgument;
  if (in[0].dimensions[1] < 3 || in[0].dimensions[2] < 3) return kInvalidArgument;
  out[0] = in[0];
  out[0].has_strides = 0;
  out[0].dimensions[1] -= 2;
  out[0].dimensions[2] -= 2;
  return kOk;
}

// The input's and output's host memory, locked for the call, and the input's dims.
struct Locked {
  LiteRtTensorBuffer in, out;
  void* src = nullptr;
  void* dst = nullptr;
  LiteRtRankedTensorType type{};
  bool ok = false;

  Locked(LiteRtTensorBuffer i, LiteRtTensorBuffer o) : in(i), out(o) {
    if (LiteRtGetTensorBufferTensorType(in, &type) != kOk) return;
    if (LiteRtLockTensorBuffer(in, &src, kLockRead) != kOk) return;
    if (LiteRtLockTensorBuffer(out, &dst, kLockWrite) != kOk) {
      LiteRtUnlockTensorBuffer(in);
      src = nullptr;
      return;
    }
    ok = true;
  }
  ~Locked() {
    if (!ok) return;
    LiteRtUnlockTensorBuffer(out);
    LiteRtUnlockTensorBuffer(in);
  }
  int64_t count() const {
    int64_t n = 1;
    for (unsigned k = 0; k < type.layout.rank; ++k) n *= type.layout.dimensions[k];
    return n;
  }
};

LiteRtStatus RunZeroOut(void* user_data, size_t n_in, const LiteRtTensorBuffer* inputs,
                        size_t n_out, LiteRtTensorBuffer* outputs) {
  if (n_in != 1 || n_out != 1) return kInvalidArgument;
  Locked t(inputs[0], outputs[0]);
  if (!t.ok) return kRuntimeFailure;
  const int64_t keep = *static_cast<const int64_t*>(user_data);
  bench::zero_out(static_cast<const int32_t*>(t.src), static_cast<int32_t*>(t.dst), t.count(),
                  keep);
  return kOk;
}

LiteRtStatus RunTimeTwo(void*, size_t n_in, const LiteRtTensorBuffer* inputs, size_t n_out,
                        LiteRtTensorBuffer* outputs) {
  if (n_in != 1 || n_out != 1) return kInvalidArgument;
  Locked t(inputs[0], outputs[0]);
  if (!t.ok) return kRuntimeFailure;
  bench::time_two(static_cast<const float*>(t.src), static_cast<float*>(t.dst), t.count());
  return kOk;
}

LiteRtStatus RunMedianPool(void*, size_t n_in, const LiteRtTensorBuffer* inputs, size_t n_out,
                           LiteRtTensorBuffer* outputs) {
  if (n_in != 1 || n_out != 1) return kInvalidArgument;
  Locked t(inputs[0], outputs[0]);
  if (!t.ok) return kRuntimeFailure;
  const int32_t* d = t.type.layout.dimensions;
  if (t.type.layout.rank != 4) return kInvalidArgument;
  bench::median_pool_3x3(static_cast<const float*>(t.src), static_cast<float*>(t.dst), d[0],
                         d[1], d[2], d[3]);
  return kOk;
}

}  // namespace

// extern "C" on each (not a block): a namespace-scope const would have internal linkage.
extern "C" const LiteRtCustomOpKernel bench_litert_zero_out = {Init, SameLayout, RunZeroOut,
                                                               Destroy};
extern "C" const LiteRtCustomOpKernel bench_litert_time_two = {Init, SameLayout, RunTimeTwo,
                                                               Destroy};
extern "C" const LiteRtCustomOpKernel bench_litert_median_pool = {Init, PooledLayout,
                                                                  RunMedianPool, Destroy};
