// opmarket/kernel_capi.h: the C door of opmarket/kernel.h, which includes it (not a header
// to include on its own).
//
// Each kernel a library declares with lib.kernel(op, name, fn, py::arg(...)...) is also
// offered through the C API (opmarket/c_api.h) when it can be: it runs on the CPU, its
// parameters are Tensor<T> inputs followed by attrs of C types (signed integers, float,
// double, bool, std::string, std::vector of integers or floats) all named by py::arg, and
// it returns a Tensor<T> or a std::tuple of them. Its create reads the attrs by name through
// the host, its compute wraps the caller's tensors as Tensor<T> views and lets allocate<T>
// hand out the caller's outputs, in order. Exceptions become a failed status
// (InvalidArgument: INVALID_ARGUMENT; anything else: INTERNAL). The create functions are
// trampolines from a fixed table (the C API's create gets no user data).
#pragma once

namespace opmarket __attribute__((visibility("hidden"))) {
namespace detail {

// A failure that carries the host's status code (an output the caller could not allocate).
class StatusError : public std::runtime_error {
 public:
  StatusError(OPM_Code c, const std::string& message) : std::runtime_error(message), code(c) {}
  OPM_Code code;
};

// A status of the host's, for one call.
class HostStatus {
 public:
  HostStatus() : s_(OPM_NewStatus()) {}
  ~HostStatus() { OPM_DeleteStatus(s_); }
  HostStatus(const HostStatus&) = delete;
  HostStatus& operator=(const HostStatus&) = delete;
  OPM_Status* get() const { return s_; }
  bool ok() const { return OPM_GetCode(s_) == OPM_OK; }
  void raise() const {
    if (!ok()) throw StatusError(OPM_GetCode(s_), OPM_Message(s_));
  }

 private:
  OPM_Status* s_;
};

// --- what a kernel function looks like -----------------------------------------------------

template <typename F>
struct fn_traits : fn_traits<decltype(&F::operator())> {};
template <typename R, typename... A>
struct fn_traits<R (*)(A...)> {
  using result = std::decay_t<R>;
  using params = std::tuple<std::decay_t<A>...>;
};
template <typename C, typename R, typename... A>
struct fn_traits<R (C::*)(A...) const> : fn_traits<R (*)(A...)> {};
template <typename C, typename R, typename... A>
struct fn_traits<R (C::*)(A...)> : fn_traits<R (*)(A...)> {};

template <typename X>
struct is_tensor : std::false_type {};
template <typename T>
struct is_tensor<Tensor<T>> : std::true_type {};

template <typename X>
struct vector_of {
  static constexpr bool value = false;
  using type = void;
};
template <typename E>
struct vector_of<std::vector<E>> {
  static constexpr bool value = true;
  using type = E;
};

template <typename A>
constexpr bool is_scalar_attr() {
  return std::is_same_v<A, bool> || (std::is_integral_v<A> && std::is_signed_v<A>) ||
         std::is_floating_point_v<A>;
}
template <typename A>
constexpr bool is_capi_attr() {
  if constexpr (vector_of<A>::value) {
    using E = typename vector_of<A>::type;
    return !std::is_same_v<E, bool> && is_scalar_attr<E>();
  } else {
    return is_scalar_attr<A>() || std::is_same_v<A, std::string>;
  }
}

template <typename R>
struct result_traits : std::false_type {};
template <typename T>
struct result_traits<Tensor<T>> : std::true_type {};
template <typename... T>
struct result_traits<std::tuple<Tensor<T>...>> : std::true_type {};

template <typename Params, size_t I = 0>
constexpr size_t leading_tensors() {
  if constexpr (I < std::tuple_size_v<Params>) {
    if constexpr (is_tensor<std::tuple_element_t<I, Params>>::value) {
      return leading_tensors<Params, I + 1>();
    } else {
      return I;
    }
  } else {
    return I;
  }
}

// The types of Params from index N on (only in decltype).
template <typename Params, size_t N, size_t... I>
std::tuple<std::tuple_element_t<N + I, Params>...> tuple_tail(std::index_sequence<I...>);

template <typename Params, size_t N, size_t... I>
constexpr bool attrs_ok(std::index_sequence<I...>) {
  return (is_capi_attr<std::tuple_element_t<N + I, Params>>() && ...);
}
template <typename Params, size_t N, size_t... I>
constexpr int attrs_bridge_version(std::index_sequence<I...>) {
  return std::max({1, (vector_of<std::tuple_element_t<N + I, Params>>::value ? 2 : 1)...});
}

template <typename F>
struct Signature {
  using Params = typename fn_traits<F>::params;
  using Result = typename fn_traits<F>::result;
  static constexpr size_t arity = std::tuple_size_v<Params>;
  static constexpr size_t inputs = leading_tensors<Params>();
  using AttrIndex = std::make_index_sequence<arity - inputs>;
  static constexpr bool result_ok = result_traits<Result>::value;
  static constexpr bool params_ok = attrs_ok<Params, inputs>(AttrIndex{});
  // The bridge interface version (capi_bridge.h) that serves its attrs: 2 for list attrs.
  static constexpr int bridge_version = attrs_bridge_version<Params, inputs>(AttrIndex{});
};

// --- attrs, read in create ---------------------------------------------------------------

template <typename A>
void read_attr(OPM_OpKernelConstruction* c, const char* name, A* out, OPM_Status* s) {
  if constexpr (std::is_same_v<A, bool>) {
    uint8_t v = 0;
    OPM_OpKernelConstruction_GetAttrBool(c, name, &v, s);
    *out = v != 0;
  } else if constexpr (std::is_integral_v<A>) {
    int64_t v = 0;
    OPM_OpKernelConstruction_GetAttrInt64(c, name, &v, s);
    if (OPM_GetCode(s) == OPM_OK && (v < static_cast<int64_t>(std::numeric_limits<A>::min()) ||
                                     v > static_cast<int64_t>(std::numeric_limits<A>::max()))) {
      OPM_SetStatus(s, OPM_INVALID_ARGUMENT,
                    str_cat("attr '", name, "' value ", v, " does not fit the kernel's type")
                        .c_str());
    }
    *out = static_cast<A>(v);
  } else if constexpr (std::is_floating_point_v<A>) {
    float v = 0;
    OPM_OpKernelConstruction_GetAttrFloat(c, name, &v, s);
    *out = static_cast<A>(v);
  } else if constexpr (std::is_same_v<A, std::string>) {
    size_t n = 0;
    OPM_OpKernelConstruction_GetAttrString(c, name, nullptr, 0, &n, s);
    if (OPM_GetCode(s) != OPM_OK) return;
    out->resize(n);
    OPM_OpKernelConstruction_GetAttrString(c, name, out->data(), n, &n, s);
  } else {
    using E = typename vector_of<A>::type;
    using Raw = std::conditional_t<std::is_integral_v<E>, int64_t, float>;
    size_t n = 0;
    auto get = [&](Raw* values, size_t max_values) {
      if constexpr (std::is_integral_v<E>) {
        OPM_OpKernelConstruction_GetAttrInt64List(c, name, values, max_values, &n, s);
      } else {
        OPM_OpKernelConstruction_GetAttrFloatList(c, name, values, max_values, &n, s);
      }
    };
    get(nullptr, 0);
    if (OPM_GetCode(s) != OPM_OK) return;
    std::vector<Raw> raw(n);
    get(raw.data(), n);
    out->assign(raw.begin(), raw.end());
  }
}

template <typename Attrs, size_t... I>
bool read_attrs(OPM_OpKernelConstruction* c, const std::vector<std::string>& names,
                Attrs& attrs, OPM_Status* s, std::index_sequence<I...>) {
  (void)c, (void)names, (void)attrs, (void)s;  // a kernel without attrs reads none
  bool ok = true;
  ((ok = ok && (read_attr(c, names[I].c_str(), &std::get<I>(attrs), s),
                OPM_GetCode(s) == OPM_OK)),
   ...);
  return ok;
}

// --- a call: inputs as views, outputs from the caller ---------------------------------------

class Call final : public OutputAllocator {
 public:
  explicit Call(OPM_OpKernelContext* ctx)
      : ctx_(ctx), outputs_(static_cast<size_t>(OPM_NumOutputs(ctx)), nullptr),
        previous_(current_allocator) {
    current_allocator = this;
  }
  ~Call() override { current_allocator = previous_; }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  template <typename T>
  Tensor<T> input(int i) {
    OPM_Tensor* t = OPM_GetInput(ctx_, i, status_.get());
    status_.raise();
    OPM_REQUIRES(OPM_TensorType(t) == dtype_enum<T>(), "input ", i, " has dtype number ",
                 OPM_TensorType(t), "; the kernel takes ", dtype_name<T>());
    std::vector<int64_t> shape(static_cast<size_t>(OPM_NumDims(t)));
    for (size_t d = 0; d < shape.size(); ++d) shape[d] = OPM_Dim(t, static_cast<int>(d));
    return Tensor<T>(static_cast<T*>(OPM_TensorData(t)), std::move(shape), false);
  }

  // allocate<T>: the k-th allocation is output k; any after the op's outputs is scratch.
  void* allocate(OPM_DataType dtype, size_t item_size,
                 const std::vector<int64_t>& shape) override {
    const size_t k = next_++;
    if (k < outputs_.size()) {
      outputs_[k] = allocate_output(k, dtype, shape);
      return OPM_TensorData(outputs_[k]);
    }
    size_t bytes = item_size;
    for (int64_t d : shape) bytes *= static_cast<size_t>(d);
    scratch_.emplace_back(new char[bytes ? bytes : 1]);
    return scratch_.back().get();
  }

  // The kernel's result i lands in output i: it is already there (a view of output i), or,
  // when the kernel allocated no output i, it is copied into a new one (an input returned
  // as it is, a scratch tensor). An output i allocated for something else is an error: it
  // may be what another result views.
  template <typename T>
  void finish(size_t i, const Tensor<T>& r) {
    OPM_REQUIRES(i < outputs_.size(), "the kernel returned more outputs than its op has");
    OPM_Tensor* t = outputs_[i];
    if (t && OPM_TensorData(t) == static_cast<const void*>(r.data()) &&
        OPM_TensorType(t) == dtype_enum<T>() && same_shape(t, r.shape())) {
      return;
    }
    if (t) {
      throw std::logic_error(str_cat("result ", i, " is not the tensor the kernel allocated ",
                                     i, "-th: allocate outputs first, in order"));
    }
    t = outputs_[i] = allocate_output(i, dtype_enum<T>(), r.shape());
    if (r.size() > 0) std::memcpy(OPM_TensorData(t), r.data(), sizeof(T) * r.size());
  }

 private:
  OPM_Tensor* allocate_output(size_t i, OPM_DataType dtype, const std::vector<int64_t>& shape) {
    OPM_Tensor* t = OPM_AllocateOutput(ctx_, static_cast<int>(i), dtype, shape.data(),
                                       static_cast<int>(shape.size()), status_.get());
    status_.raise();
    return t;
  }
  static bool same_shape(OPM_Tensor* t, const std::vector<int64_t>& shape) {
    if (OPM_NumDims(t) != static_cast<int>(shape.size())) return false;
    for (size_t d = 0; d < shape.size(); ++d) {
      if (OPM_Dim(t, static_cast<int>(d)) != shape[d]) return false;
    }
    return true;
  }

  OPM_OpKernelContext* ctx_;
  HostStatus status_;
  std::vector<OPM_Tensor*> outputs_;
  std::vector<std::unique_ptr<char[]>> scratch_;
  size_t next_ = 0;
  OutputAllocator* previous_;
};

// --- create, compute, delete --------------------------------------------------------------

class CapiState {
 public:
  virtual ~CapiState() = default;
  virtual void compute(OPM_OpKernelContext* ctx) = 0;
};

class CapiEntry {
 public:
  virtual ~CapiEntry() = default;
  virtual CapiState* create(OPM_OpKernelConstruction* c) const = 0;
};

template <typename F>
class CapiKernel final : public CapiState {
  using Sig = Signature<F>;
  using Attrs = decltype(tuple_tail<typename Sig::Params, Sig::inputs>(typename Sig::AttrIndex{}));

 public:
  CapiKernel(F fn, Attrs attrs) : fn_(std::move(fn)), attrs_(std::move(attrs)) {}

  void compute(OPM_OpKernelContext* ctx) override {
    Call call(ctx);
    auto inputs = read_inputs(call, std::make_index_sequence<Sig::inputs>{});
    auto result = std::apply(
        [&](auto&... in) {
          return std::apply([&](auto&... at) { return fn_(std::move(in)..., at...); }, attrs_);
        },
        inputs);
    if constexpr (is_tensor<decltype(result)>::value) {
      call.finish(0, result);
    } else {
      finish_all(call, result, std::make_index_sequence<std::tuple_size_v<decltype(result)>>{});
    }
  }

 private:
  template <size_t... I>
  auto read_inputs(Call& call, std::index_sequence<I...>) {
    return std::tuple<std::tuple_element_t<I, typename Sig::Params>...>{
        call.template input<typename std::tuple_element_t<I, typename Sig::Params>::value_type>(
            static_cast<int>(I))...};
  }
  template <typename R, size_t... I>
  static void finish_all(Call& call, const R& result, std::index_sequence<I...>) {
    (call.finish(I, std::get<I>(result)), ...);
  }

  F fn_;
  Attrs attrs_;
};

template <typename F>
class CapiEntryImpl final : public CapiEntry {
  using Sig = Signature<F>;
  using Attrs = decltype(tuple_tail<typename Sig::Params, Sig::inputs>(typename Sig::AttrIndex{}));

 public:
  CapiEntryImpl(F fn, std::vector<std::string> attr_names)
      : fn_(std::move(fn)), attr_names_(std::move(attr_names)) {}

  CapiState* create(OPM_OpKernelConstruction* c) const override {
    HostStatus s;
    Attrs attrs;
    if (!read_attrs(c, attr_names_, attrs, s.get(), typename Sig::AttrIndex{})) {
      OPM_OpKernelConstruction_Failure(c, s.get());
      return nullptr;
    }
    return new CapiKernel<F>(fn_, std::move(attrs));
  }

 private:
  F fn_;
  std::vector<std::string> attr_names_;
};

inline void capi_failure(OPM_OpKernelContext* ctx, OPM_Code code, const char* message) {
  HostStatus s;
  OPM_SetStatus(s.get(), code, message);
  OPM_OpKernelContext_Failure(ctx, s.get());
}

inline void capi_compute(void* state, OPM_OpKernelContext* ctx) {
  try {
    static_cast<CapiState*>(state)->compute(ctx);
  } catch (const StatusError& e) {
    capi_failure(ctx, e.code, e.what());
  } catch (const InvalidArgument& e) {
    capi_failure(ctx, OPM_INVALID_ARGUMENT, e.what());
  } catch (const std::exception& e) {
    capi_failure(ctx, OPM_INTERNAL, e.what());
  } catch (...) {
    capi_failure(ctx, OPM_INTERNAL, "unknown C++ exception in the kernel");
  }
}

inline void capi_delete(void* state) { delete static_cast<CapiState*>(state); }

inline void* capi_create(const CapiEntry& entry, OPM_OpKernelConstruction* c) {
  try {
    return entry.create(c);
  } catch (const std::exception& e) {
    HostStatus s;
    OPM_SetStatus(s.get(), OPM_INTERNAL, e.what());
    OPM_OpKernelConstruction_Failure(c, s.get());
  }
  return nullptr;
}

// --- what the library registers through OPM_InitPlugin -----------------------------------

struct CapiKernelDecl {
  std::string op, name, device;
  std::vector<std::pair<std::string, std::vector<OPM_DataType>>> constraints;
  std::vector<std::string> host_memory;
  int priority = 0;
  std::string label;
  std::shared_ptr<const CapiEntry> entry;
};

// Filled when Python imports the module (OPM_LIBRARY's body ran); never destroyed.
inline std::vector<CapiKernelDecl>& capi_kernels() {
  static auto* kernels = new std::vector<CapiKernelDecl>();
  return *kernels;
}

constexpr size_t kMaxCapiKernels = 256;

template <size_t I>
void* capi_create_at(OPM_OpKernelConstruction* c) {
  return capi_create(*capi_kernels()[I].entry, c);
}
template <size_t... I>
std::array<OPM_KernelCreateFn, sizeof...(I)> capi_create_table(std::index_sequence<I...>) {
  return {&capi_create_at<I>...};
}
inline OPM_KernelCreateFn capi_create_fn(size_t i) {
  static const auto table = capi_create_table(std::make_index_sequence<kMaxCapiKernels>{});
  return table[i];
}

// OPM_InitPlugin's body: register every kernel that has a C entry.
inline void register_capi_kernels(OPM_Status* status) {
  const auto& kernels = capi_kernels();
  if (kernels.empty()) {
    OPM_SetStatus(status, OPM_FAILED_PRECONDITION,
                  "no C-ABI kernels: the library declares them when Python imports it "
                  "(import it first), and none of its kernels has a C entry");
    return;
  }
  for (size_t i = 0; i < kernels.size(); ++i) {
    const CapiKernelDecl& k = kernels[i];
    OPM_KernelBuilder* b = OPM_NewKernelBuilder(k.op.c_str(), k.device.c_str(),
                                                capi_create_fn(i), &capi_compute, &capi_delete);
    for (const auto& [attr, dtypes] : k.constraints) {
      for (OPM_DataType dtype : dtypes) {
        OPM_KernelBuilder_TypeConstraint(b, attr.c_str(), dtype, status);
        if (OPM_GetCode(status) != OPM_OK) {
          OPM_DeleteKernelBuilder(b);
          return;
        }
      }
    }
    for (const auto& arg : k.host_memory) OPM_KernelBuilder_HostMemory(b, arg.c_str());
    if (!k.label.empty()) OPM_KernelBuilder_Label(b, k.label.c_str());
    if (k.priority) OPM_KernelBuilder_Priority(b, k.priority);
    OPM_RegisterKernelBuilder(k.name.c_str(), b, status);
    if (OPM_GetCode(status) != OPM_OK) return;
  }
}

// The C number of a dtype name in a type constraint; 0 for none.
inline OPM_DataType dtype_enum_of(const std::string& name) {
  static const std::pair<const char*, OPM_DataType> names[] = {
      {"float", OPM_FLOAT},     {"float32", OPM_FLOAT},     {"double", OPM_DOUBLE},
      {"float64", OPM_DOUBLE},  {"half", OPM_HALF},         {"float16", OPM_HALF},
      {"bfloat16", OPM_BFLOAT16}, {"int8", OPM_INT8},       {"int16", OPM_INT16},
      {"int32", OPM_INT32},     {"int64", OPM_INT64},       {"uint8", OPM_UINT8},
      {"uint16", OPM_UINT16},   {"uint32", OPM_UINT32},     {"uint64", OPM_UINT64},
      {"bool", OPM_BOOL},       {"complex64", OPM_COMPLEX64}, {"complex128", OPM_COMPLEX128}};
  for (const auto& [n, t] : names) {
    if (name == n) return t;
  }
  return 0;
}

// What lib.kernel offers the C door: an entry, or why there is none.
struct CapiOffer {
  std::shared_ptr<const CapiEntry> entry;
  std::string reason;
  int bridge_version = 0;
};

template <typename F>
CapiOffer capi_offer(const F& fn, const std::vector<std::string>& names) {
  using Sig = Signature<F>;
#ifdef OPM_PYTHON_ONLY
  if (true) return {nullptr, "the library was built with OPM_PYTHON_ONLY", 0};
#endif
  if constexpr (!Sig::result_ok) {
    return {nullptr, "it returns neither an opmarket::Tensor<T> nor a std::tuple of them", 0};
  } else if constexpr (!Sig::params_ok) {
    return {nullptr,
            "a parameter after its Tensor<T> inputs is not an attr of a C type (a signed "
            "integer, float, double, bool, std::string, or a std::vector of integers or "
            "floats)",
            0};
  } else {
    if (names.size() != Sig::arity) {
      return {nullptr, "not every parameter is named with py::arg (the C entry reads attrs "
                       "by those names)", 0};
    }
    std::vector<std::string> attrs(names.begin() + Sig::inputs, names.end());
    return {std::make_shared<CapiEntryImpl<F>>(fn, std::move(attrs)), "", Sig::bridge_version};
  }
}

}  // namespace detail
}  // namespace opmarket
