// opmarket/c_api.hpp: a header-only C++ layer over the ABI-stable C API (opmarket/c_api.h).
//
// The RFC's "ABI-stable C++ header-only API": classes named as TensorFlow's C++ API
// (Tensor, OpKernel, OpKernelConstruction, OpKernelContext, OpDefBuilder, KernelDefBuilder,
// OP_REQUIRES) compiled into the plugin itself, so that only the C API crosses the
// boundary: no C++ type, exception or allocator reaches opmarket. Exceptions a kernel throws
// are caught here and become a failed status. Everything has hidden visibility.
//
//   class ZeroOutOp : public opmarket::OpKernel {
//    public:
//     explicit ZeroOutOp(opmarket::OpKernelConstruction* c) : OpKernel(c) {
//       OP_REQUIRES_OK(c, c->GetAttr("preserve_index", &index_));
//     }
//     void Compute(opmarket::OpKernelContext* c) override { ... }
//   };
//   static void init(OPM_Status* status) {
//     opmarket::RegisterKernelBuilder<ZeroOutOp>(
//         "ZeroOutOp", opmarket::Name("Opm>ZeroOut").Device(opmarket::DEVICE_CPU)
//                          .TypeConstraint<float>("T"), status);
//   }
//   OPM_PLUGIN_INIT(init)
#pragma once

#include <cstdint>
#include <cstring>
#include <exception>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "opmarket/c_api.h"

namespace opmarket __attribute__((visibility("hidden"))) {

constexpr const char* DEVICE_CPU = "CPU";
constexpr const char* DEVICE_GPU = "GPU";

namespace detail {
template <typename... Args>
std::string StrCat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}
}  // namespace detail

// The C type number of a C++ element type (DataTypeToEnum<T>::value).
template <typename T>
constexpr OPM_DataType DataTypeToEnum() {
  if constexpr (std::is_same_v<T, float>) return OPM_FLOAT;
  else if constexpr (std::is_same_v<T, double>) return OPM_DOUBLE;
  else if constexpr (std::is_same_v<T, int8_t>) return OPM_INT8;
  else if constexpr (std::is_same_v<T, int16_t>) return OPM_INT16;
  else if constexpr (std::is_same_v<T, int32_t>) return OPM_INT32;
  else if constexpr (std::is_same_v<T, int64_t>) return OPM_INT64;
  else if constexpr (std::is_same_v<T, uint8_t>) return OPM_UINT8;
  else if constexpr (std::is_same_v<T, uint16_t>) return OPM_UINT16;
  else if constexpr (std::is_same_v<T, uint32_t>) return OPM_UINT32;
  else if constexpr (std::is_same_v<T, uint64_t>) return OPM_UINT64;
  else if constexpr (std::is_same_v<T, bool>) return OPM_BOOL;
  else static_assert(sizeof(T) == 0, "no opmarket dtype for this C++ type");
}

// A status owned by the host, released with this object.
class Status {
 public:
  Status() : s_(OPM_NewStatus()) {}
  Status(OPM_Code code, const std::string& message) : Status() { Update(code, message); }
  ~Status() { if (s_) OPM_DeleteStatus(s_); }
  Status(Status&& other) noexcept : s_(std::exchange(other.s_, nullptr)) {}
  Status(const Status&) = delete;
  Status& operator=(const Status&) = delete;

  bool ok() const { return code() == OPM_OK; }
  OPM_Code code() const { return OPM_GetCode(s_); }
  std::string message() const { return OPM_Message(s_); }
  void Update(OPM_Code code, const std::string& message) {
    OPM_SetStatus(s_, code, message.c_str());
  }
  OPM_Status* get() const { return s_; }

 private:
  OPM_Status* s_;
};

// A tensor the host owns: an input (read-only) or an allocated output.
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(OPM_Tensor* t) : t_(t) {}

  OPM_DataType dtype() const { return OPM_TensorType(t_); }
  int dims() const { return OPM_NumDims(t_); }
  int64_t dim_size(int i) const { return OPM_Dim(t_, i); }
  int64_t NumElements() const {
    int64_t n = 1;
    for (int i = 0; i < dims(); ++i) n *= dim_size(i);
    return n;
  }
  size_t TotalBytes() const { return OPM_TensorByteSize(t_); }
  std::vector<int64_t> shape() const {
    std::vector<int64_t> s(static_cast<size_t>(dims()));
    for (int i = 0; i < dims(); ++i) s[static_cast<size_t>(i)] = dim_size(i);
    return s;
  }
  std::string DebugShape() const {
    std::string s = "[";
    for (int i = 0; i < dims(); ++i) s += (i ? "," : "") + std::to_string(dim_size(i));
    return s + "]";
  }
  template <typename T>
  const T* flat() const { return static_cast<const T*>(OPM_TensorData(t_)); }
  template <typename T>
  T* flat() { return static_cast<T*>(OPM_TensorData(t_)); }
  OPM_Tensor* get() const { return t_; }

 private:
  OPM_Tensor* t_ = nullptr;
};

class OpKernelConstruction {
 public:
  explicit OpKernelConstruction(OPM_OpKernelConstruction* ctx) : ctx_(ctx) {}

  // GetAttr(name, &value) for int32_t, int64_t, float, bool, std::string and OPM_DataType.
  Status GetAttr(const char* name, int32_t* v) {
    Status s; OPM_OpKernelConstruction_GetAttrInt32(ctx_, name, v, s.get()); return s;
  }
  Status GetAttr(const char* name, int64_t* v) {
    Status s; OPM_OpKernelConstruction_GetAttrInt64(ctx_, name, v, s.get()); return s;
  }
  Status GetAttr(const char* name, float* v) {
    Status s; OPM_OpKernelConstruction_GetAttrFloat(ctx_, name, v, s.get()); return s;
  }
  Status GetAttr(const char* name, bool* v) {
    Status s;
    uint8_t b = 0;
    OPM_OpKernelConstruction_GetAttrBool(ctx_, name, &b, s.get());
    if (s.ok()) *v = b != 0;
    return s;
  }
  Status GetAttrType(const char* name, OPM_DataType* v) {
    Status s; OPM_OpKernelConstruction_GetAttrType(ctx_, name, v, s.get()); return s;
  }
  Status GetAttr(const char* name, std::string* v) {
    Status s;
    size_t n = 0;
    OPM_OpKernelConstruction_GetAttrString(ctx_, name, nullptr, 0, &n, s.get());
    if (!s.ok()) return s;
    v->resize(n);
    OPM_OpKernelConstruction_GetAttrString(ctx_, name, v->data(), n, &n, s.get());
    return s;
  }
  void CtxFailure(const Status& s) { OPM_OpKernelConstruction_Failure(ctx_, s.get()); }
  void CtxFailure(OPM_Code code, const std::string& message) {
    CtxFailure(Status(code, message));
  }

 private:
  OPM_OpKernelConstruction* ctx_;
};

class OpKernelContext {
 public:
  explicit OpKernelContext(OPM_OpKernelContext* ctx) : ctx_(ctx) {}

  int num_inputs() const { return OPM_NumInputs(ctx_); }
  int num_outputs() const { return OPM_NumOutputs(ctx_); }
  // The input; on a bad index the context fails and the tensor is empty.
  Tensor input(int i) {
    Status s;
    OPM_Tensor* t = OPM_GetInput(ctx_, i, s.get());
    if (!s.ok()) CtxFailure(s);
    return Tensor(t);
  }
  Status allocate_output(int i, OPM_DataType dtype, const std::vector<int64_t>& shape,
                         Tensor* out) {
    Status s;
    OPM_Tensor* t = OPM_AllocateOutput(ctx_, i, dtype, shape.data(),
                                       static_cast<int>(shape.size()), s.get());
    if (s.ok()) *out = Tensor(t);
    return s;
  }
  void CtxFailure(const Status& s) { OPM_OpKernelContext_Failure(ctx_, s.get()); }
  void CtxFailure(OPM_Code code, const std::string& message) {
    CtxFailure(Status(code, message));
  }

 private:
  OPM_OpKernelContext* ctx_;
};

// The base of kernels: constructed once per attr set (create), Compute per call, deleted.
class OpKernel {
 public:
  explicit OpKernel(OpKernelConstruction*) {}
  virtual ~OpKernel() = default;
  virtual void Compute(OpKernelContext* ctx) = 0;
};

// OP_REQUIRES(ctx, cond, message parts...): fail the call with INVALID_ARGUMENT and return.
#define OP_REQUIRES(CTX, COND, ...)                                                    \
  do {                                                                                 \
    if (!(COND)) {                                                                     \
      (CTX)->CtxFailure(OPM_INVALID_ARGUMENT, ::opmarket::detail::StrCat(__VA_ARGS__)); \
      return;                                                                          \
    }                                                                                  \
  } while (0)

// OP_REQUIRES_OK(ctx, status): fail the call with the status and return unless it is OK.
#define OP_REQUIRES_OK(CTX, STATUS)          \
  do {                                       \
    ::opmarket::Status opm_s_ = (STATUS);    \
    if (!opm_s_.ok()) {                      \
      (CTX)->CtxFailure(opm_s_);             \
      return;                                \
    }                                        \
  } while (0)

// REGISTER_OP's builder, registered from the plugin's init: Register(status).
class OpDefBuilder {
 public:
  explicit OpDefBuilder(const char* name) : b_(OPM_NewOpDefinitionBuilder(name)) {}
  ~OpDefBuilder() { if (b_) OPM_DeleteOpDefinitionBuilder(b_); }
  OpDefBuilder(const OpDefBuilder&) = delete;
  OpDefBuilder& operator=(const OpDefBuilder&) = delete;

  OpDefBuilder& Input(const char* spec) { OPM_OpDefinitionBuilderAddInput(b_, spec); return *this; }
  OpDefBuilder& Output(const char* spec) { OPM_OpDefinitionBuilderAddOutput(b_, spec); return *this; }
  OpDefBuilder& Attr(const char* spec) { OPM_OpDefinitionBuilderAddAttr(b_, spec); return *this; }
  OpDefBuilder& Doc(const char* text) { OPM_OpDefinitionBuilderSetDoc(b_, text); return *this; }
  OpDefBuilder& SetIsStateful() { OPM_OpDefinitionBuilderSetIsStateful(b_, 1); return *this; }
  OpDefBuilder& SetShapeFn(OPM_ShapeInferenceFn fn) {
    OPM_OpDefinitionBuilderSetShapeInferenceFunction(b_, fn);
    return *this;
  }
  void Register(OPM_Status* status) { OPM_RegisterOpDefinition(std::exchange(b_, nullptr), status); }

 private:
  OPM_OpDefinitionBuilder* b_;
};

// REGISTER_KERNEL_BUILDER's Name(...).Device(...).TypeConstraint<T>(...).
class KernelDefBuilder {
 public:
  explicit KernelDefBuilder(std::string op) : op_(std::move(op)) {}
  KernelDefBuilder& Device(const char* device) { device_ = device; return *this; }
  template <typename T>
  KernelDefBuilder& TypeConstraint(const char* attr) {
    return TypeConstraint(attr, DataTypeToEnum<T>());
  }
  KernelDefBuilder& TypeConstraint(const char* attr, OPM_DataType dtype) {
    constraints_.emplace_back(attr, dtype);
    return *this;
  }
  KernelDefBuilder& HostMemory(const char* arg) { host_memory_.emplace_back(arg); return *this; }
  KernelDefBuilder& Label(const char* label) { label_ = label; return *this; }
  KernelDefBuilder& Priority(int32_t priority) { priority_ = priority; return *this; }

 private:
  template <typename K>
  friend void RegisterKernelBuilder(const char*, const KernelDefBuilder&, OPM_Status*);
  std::string op_;
  std::string device_ = DEVICE_CPU;
  std::vector<std::pair<std::string, OPM_DataType>> constraints_;
  std::vector<std::string> host_memory_;
  std::string label_;
  int32_t priority_ = 0;
};

inline KernelDefBuilder Name(const char* op) { return KernelDefBuilder(op); }

namespace detail {
template <typename K>
void* Create(OPM_OpKernelConstruction* c) {
  OpKernelConstruction ctx(c);
  try {
    return new K(&ctx);
  } catch (const std::exception& e) {
    ctx.CtxFailure(OPM_INTERNAL, e.what());
  } catch (...) {
    ctx.CtxFailure(OPM_INTERNAL, "unknown C++ exception in the kernel's constructor");
  }
  return nullptr;
}
template <typename K>
void Compute(void* kernel, OPM_OpKernelContext* c) {
  OpKernelContext ctx(c);
  try {
    static_cast<K*>(kernel)->Compute(&ctx);
  } catch (const std::exception& e) {
    ctx.CtxFailure(OPM_INTERNAL, e.what());
  } catch (...) {
    ctx.CtxFailure(OPM_INTERNAL, "unknown C++ exception in Compute");
  }
}
template <typename K>
void Delete(void* kernel) { delete static_cast<K*>(kernel); }
}  // namespace detail

// Register kernel class K (an OpKernel) as `kernel_name`, from the plugin's init.
template <typename K>
void RegisterKernelBuilder(const char* kernel_name, const KernelDefBuilder& def,
                           OPM_Status* status) {
  OPM_KernelBuilder* b = OPM_NewKernelBuilder(def.op_.c_str(), def.device_.c_str(),
                                              &detail::Create<K>, &detail::Compute<K>,
                                              &detail::Delete<K>);
  for (const auto& [attr, dtype] : def.constraints_) {
    OPM_KernelBuilder_TypeConstraint(b, attr.c_str(), dtype, status);
    if (OPM_GetCode(status) != OPM_OK) {
      OPM_DeleteKernelBuilder(b);
      return;
    }
  }
  for (const auto& arg : def.host_memory_) OPM_KernelBuilder_HostMemory(b, arg.c_str());
  if (!def.label_.empty()) OPM_KernelBuilder_Label(b, def.label_.c_str());
  if (def.priority_) OPM_KernelBuilder_Priority(b, def.priority_);
  OPM_RegisterKernelBuilder(kernel_name, b, status);
}

}  // namespace opmarket
