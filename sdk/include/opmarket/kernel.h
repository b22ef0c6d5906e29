// opmarket/kernel.h: the C++ SDK for opmarket kernels, with two doors from one source.
//
// One header, found with `python -c "import opmarket.sdk; print(opmarket.sdk.get_include())"`
// (as pybind11.get_include()). It gives a kernel author what TensorFlow's op_kernel.h gives:
//
//   opmarket::Tensor<T>        a view of a tensor: an input, or an output from allocate<T>(shape)
//   opmarket::release_gil()    let other Python threads run during the computation (a no-op
//                              when no Python called the kernel)
//   OPM_REQUIRES(cond, ...)    a check that raises opmarket.sdk.InvalidArgumentError in Python
//   opmarket::shard(total, cost_per_unit, fn)
//                              a parallel-for over the library's thread pool, sized by the
//                              intra-op threads setting (OPMARKET_INTRA_OP_THREADS, or
//                              opmarket.sdk.set_intra_op_threads); TensorFlow's Shard
//   OPM_LIBRARY(name, lib)     the module: ops (REGISTER_OP's spec strings) and kernels
//                              (REGISTER_KERNEL_BUILDER's constraints) that
//                              opmarket.load_library(path) or a plugin's register hook reads
//
// The library is a pybind11 module (the Python door: opmarket.ops calls the kernels as Python
// functions) and, from the same source, a C-ABI plugin (opmarket/c_api.h: OPM_LIBRARY defines
// OPM_InitPlugin too): every CPU kernel whose parameters are Tensor<T>s then attrs of C types
// gets a create/compute/delete entry that framework bridges call with no Python (the C door).
// On that door outputs come from the caller's allocator and nothing touches Python, so a
// kernel must not use pybind11 itself (py::gil_scoped_release aborts there: use
// opmarket::release_gil()).
//
// Everything lives in namespace opmarket with hidden visibility, so two libraries built with
// different versions of this header never share a symbol (each has its own thread pool).
// See docs/native.md.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pthread.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "opmarket/c_api.h"

#ifndef OPM_PYTHON_ONLY
// py::gil_scoped_release aborts the process on the C door, where no GIL is held: a kernel
// that uses it does not compile. Use opmarket::release_gil(); or define OPM_PYTHON_ONLY before
// including this header to keep every kernel of the library on the Python door.
#define gil_scoped_release gil_scoped_release_aborts_on_the_C_door_use_opmarket_release_gil
#endif

// Bumped when what a library declares (__opmarket_library__) changes shape. Format 2 added
// each kernel's C-ABI entry ("capi", "capi_reason", "capi_bridge_version").
#define OPMARKET_LIBRARY_FORMAT 2

namespace opmarket __attribute__((visibility("hidden"))) {

namespace py = pybind11;

// --- errors ------------------------------------------------------------------------------

// Thrown by OPM_REQUIRES; reaches Python as opmarket.sdk.InvalidArgumentError. Safe to throw from
// shard workers: shard rethrows the first one in the calling thread.
class InvalidArgument : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}
}  // namespace detail

// OPM_REQUIRES(x.rank() == 1, "ZeroOut expects a 1-D vector, got rank ", x.rank());
// The message parts are streamed together; evaluated only when the check fails.
#define OPM_REQUIRES(cond, ...)                                                   \
  do {                                                                            \
    if (!(cond)) {                                                                \
      throw ::opmarket::InvalidArgument(::opmarket::detail::str_cat(__VA_ARGS__)); \
    }                                                                             \
  } while (0)

// --- dtypes ------------------------------------------------------------------------------

// The opmarket dtype name of a C++ element type, for type constraints.
template <typename T>
constexpr const char* dtype_name() {
  if constexpr (std::is_same_v<T, float>) return "float";
  else if constexpr (std::is_same_v<T, double>) return "double";
  else if constexpr (std::is_same_v<T, int8_t>) return "int8";
  else if constexpr (std::is_same_v<T, int16_t>) return "int16";
  else if constexpr (std::is_same_v<T, int32_t>) return "int32";
  else if constexpr (std::is_same_v<T, int64_t>) return "int64";
  else if constexpr (std::is_same_v<T, uint8_t>) return "uint8";
  else if constexpr (std::is_same_v<T, uint16_t>) return "uint16";
  else if constexpr (std::is_same_v<T, uint32_t>) return "uint32";
  else if constexpr (std::is_same_v<T, uint64_t>) return "uint64";
  else if constexpr (std::is_same_v<T, bool>) return "bool";
  else static_assert(sizeof(T) == 0, "no opmarket dtype for this C++ type");
}

// The C API's number of a C++ element type (TensorFlow's DataType).
template <typename T>
constexpr OPM_DataType dtype_enum() {
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

// --- tensors -----------------------------------------------------------------------------

// A view of a C-contiguous, row-major tensor of T: a kernel argument or result. It holds a
// pointer, a shape and (on the Python door) a reference to the numpy array whose memory it
// is; copying a Tensor never touches Python. As an argument from Python it accepts an array
// of exactly T without a copy (dispatch guarantees the dtype; a non-contiguous array is copied
// once); from the C door it is the caller's buffer.
template <typename T>
class Tensor {
 public:
  using value_type = T;

  Tensor() = default;
  // A view of `data`; `owner` keeps the memory alive (null: someone else does).
  Tensor(T* data, std::vector<int64_t> shape, bool writable = true,
         std::shared_ptr<void> owner = nullptr)
      : data_(data), shape_(std::move(shape)), writable_(writable), owner_(std::move(owner)) {
    size_ = 1;
    for (int64_t d : shape_) size_ *= d;
  }

  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_[static_cast<size_t>(i)]; }
  int64_t size() const { return size_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  std::string shape_string() const {
    std::string s = "[";
    for (int i = 0; i < rank(); ++i) s += (i ? "," : "") + std::to_string(dim(i));
    return s + "]";
  }

  const T* data() const { return data_; }
  // Writable data: for outputs from allocate(); a read-only input throws.
  T* mutable_data() {
    OPM_REQUIRES(writable_, "tensor is read-only");
    return data_;
  }
  bool writable() const { return writable_; }
  const T& flat(int64_t i) const { return data_[i]; }
  T& flat(int64_t i) { return data_[i]; }

  // Row-major element access: x(i, j, k).
  template <typename... Index>
  const T& operator()(Index... index) const {
    return data_[offset(index...)];
  }
  template <typename... Index>
  T& operator()(Index... index) {
    return data_[offset(index...)];
  }

  // What keeps the memory alive: the numpy array (a PyObject*) on the Python door, else null.
  const std::shared_ptr<void>& owner() const { return owner_; }

 private:
  template <typename... Index>
  int64_t offset(Index... index) const {
    const int64_t idx[] = {static_cast<int64_t>(index)...};
    int64_t off = 0;
    for (int i = 0; i < static_cast<int>(sizeof...(Index)); ++i) off = off * dim(i) + idx[i];
    return off;
  }

  T* data_ = nullptr;
  std::vector<int64_t> shape_;
  int64_t size_ = 0;
  bool writable_ = false;
  std::shared_ptr<void> owner_;
};

namespace detail {

// The output allocator of the C-door call running on this thread (the caller's memory);
// null on the Python door, where outputs are numpy arrays.
class OutputAllocator {
 public:
  virtual ~OutputAllocator() = default;
  virtual void* allocate(OPM_DataType dtype, size_t item_size,
                         const std::vector<int64_t>& shape) = 0;
};
inline thread_local OutputAllocator* current_allocator = nullptr;

// A numpy array as a Tensor: the view keeps a reference, dropped with the GIL taken.
template <typename T>
Tensor<T> tensor_of_array(py::array_t<T, py::array::c_style | py::array::forcecast> array) {
  T* data = const_cast<T*>(array.data());
  std::vector<int64_t> shape(array.shape(), array.shape() + array.ndim());
  const bool writable = array.writeable();
  std::shared_ptr<void> owner(array.release().ptr(), [](void* p) {
    PyGILState_STATE gil = PyGILState_Ensure();
    Py_DECREF(static_cast<PyObject*>(p));
    PyGILState_Release(gil);
  });
  return Tensor<T>(data, std::move(shape), writable, std::move(owner));
}

}  // namespace detail

// A new, uninitialized output of the given shape (TensorFlow's allocate_output): the k-th
// call is the kernel's output k. From the C door it is the caller's memory; from Python a
// numpy array, so call it before opmarket::release_gil().
template <typename T>
Tensor<T> allocate(const std::vector<int64_t>& shape) {
  if (detail::OutputAllocator* a = detail::current_allocator) {
    return Tensor<T>(static_cast<T*>(a->allocate(dtype_enum<T>(), sizeof(T), shape)), shape);
  }
  if (!PyGILState_Check()) {
    throw std::logic_error(
        "opmarket::allocate without the GIL: allocate outputs before opmarket::release_gil()");
  }
  std::vector<py::ssize_t> dims(shape.begin(), shape.end());
  return detail::tensor_of_array<T>(py::array_t<T>(dims));
}

// What opmarket::release_gil() returns: the GIL is released while it lives (on the Python
// door; nothing to release on the C door, where no Python called the kernel).
class [[nodiscard]] ReleasedGil {
 public:
  ReleasedGil() {
    if (!detail::current_allocator && Py_IsInitialized() && PyGILState_Check()) {
      state_ = PyEval_SaveThread();
    }
  }
  ~ReleasedGil() {
    if (state_) PyEval_RestoreThread(state_);
  }
  ReleasedGil(const ReleasedGil&) = delete;
  ReleasedGil& operator=(const ReleasedGil&) = delete;

 private:
  PyThreadState* state_ = nullptr;
};

// auto no_gil = opmarket::release_gil();  in place of py::gil_scoped_release, which aborts
// the process on the C door (no GIL there to release).
inline ReleasedGil release_gil() { return ReleasedGil(); }

}  // namespace opmarket

#include "opmarket/kernel_threads.h"
#include "opmarket/kernel_capi.h"

namespace opmarket __attribute__((visibility("hidden"))) {

// --- declaring ops and kernels ------------------------------------------------------------

// REGISTER_OP: spec strings as opmarket's op() builder takes them.
class OpBuilder {
 public:
  explicit OpBuilder(std::string name) : name_(std::move(name)) {}
  OpBuilder& input(std::string spec) { inputs_.push_back(std::move(spec)); return *this; }
  OpBuilder& output(std::string spec) { outputs_.push_back(std::move(spec)); return *this; }
  OpBuilder& attr(std::string spec) { attrs_.push_back(std::move(spec)); return *this; }
  OpBuilder& doc(std::string text) { doc_ = std::move(text); return *this; }
  OpBuilder& set_is_stateful(bool value = true) { stateful_ = value; return *this; }

  py::dict declaration() const {
    py::dict d;
    d["kind"] = "op";
    d["name"] = name_;
    d["inputs"] = inputs_;
    d["outputs"] = outputs_;
    d["attrs"] = attrs_;
    d["doc"] = doc_;
    d["stateful"] = stateful_;
    return d;
  }

 private:
  std::string name_;
  std::vector<std::string> inputs_, outputs_, attrs_;
  std::string doc_;
  bool stateful_ = false;
};

// REGISTER_KERNEL_BUILDER: where and for which types a kernel function runs.
class KernelBuilder {
 public:
  KernelBuilder(std::string op, std::string name, std::vector<std::string> args)
      : op_(std::move(op)), name_(std::move(name)), args_(std::move(args)) {}
  KernelBuilder& device(std::string name) { device_ = std::move(name); return *this; }
  template <typename T>
  KernelBuilder& type_constraint(const std::string& attr) {
    return type_constraint(attr, std::vector<std::string>{dtype_name<T>()});
  }
  KernelBuilder& type_constraint(const std::string& attr, std::vector<std::string> dtypes) {
    constraints_.emplace_back(attr, std::move(dtypes));
    return *this;
  }
  KernelBuilder& host_memory(std::string arg) { host_memory_.push_back(std::move(arg)); return *this; }
  KernelBuilder& priority(int value) { priority_ = value; return *this; }
  KernelBuilder& label(std::string value) { label_ = std::move(value); return *this; }
  // The attrs the function takes by keyword, for a kernel of an op declared elsewhere (for
  // the library's own ops they are read from the py::arg names).
  KernelBuilder& attrs(std::vector<std::string> names) { attrs_ = std::move(names); has_attrs_ = true; return *this; }

  py::dict declaration(const py::module_& m) const {
    py::dict d;
    d["kind"] = "kernel";
    d["op"] = op_;
    d["name"] = name_;
    d["fn"] = m.attr(name_.c_str());
    d["device"] = device_;
    d["constraints"] = constraints_;
    d["host_memory"] = host_memory_;
    d["priority"] = priority_;
    d["label"] = label_;
    d["args"] = args_;
    if (has_attrs_) d["attrs"] = attrs_;
    d["capi"] = capi_registered_;
    d["capi_reason"] = capi_.reason;
    d["capi_bridge_version"] = capi_.bridge_version;
    return d;
  }

  // Hand the C entry (if any) to the library's C-ABI registration; else say why not.
  void offer_capi(size_t slot) {
    capi_registered_ = false;
    if (!capi_.entry) return;
    std::string device = device_;
    std::transform(device.begin(), device.end(), device.begin(), ::toupper);
    if (device != "CPU") {
      capi_.reason = "a " + device_ + " kernel (the C door passes host memory only)";
      return;
    }
    if (slot >= detail::kMaxCapiKernels) {
      capi_.reason = "more C entries in one library than kernel.h's table holds";
      return;
    }
    detail::CapiKernelDecl decl{op_, name_, "CPU", {}, host_memory_, priority_, label_,
                                capi_.entry};
    for (const auto& [attr, names] : constraints_) {
      std::vector<OPM_DataType> dtypes;
      for (const auto& n : names) {
        OPM_DataType t = detail::dtype_enum_of(n);
        if (!t) {
          capi_.reason = "type constraint " + attr + " names " + n + ", which has no C number";
          return;
        }
        dtypes.push_back(t);
      }
      decl.constraints.emplace_back(attr, std::move(dtypes));
    }
    detail::capi_kernels().push_back(std::move(decl));
    capi_registered_ = true;
  }

  detail::CapiOffer capi_;

 private:
  std::string op_, name_;
  std::vector<std::string> args_;
  std::string device_ = "CPU";
  std::vector<std::pair<std::string, std::vector<std::string>>> constraints_;
  std::vector<std::string> host_memory_;
  int priority_ = 0;
  std::string label_;
  std::vector<std::string> attrs_;
  bool has_attrs_ = false;
  bool capi_registered_ = false;
};

namespace detail {
template <typename E>
void collect_arg_name(std::vector<std::string>& out, const E& extra) {
  if constexpr (std::is_base_of_v<py::arg, E>) out.emplace_back(extra.name ? extra.name : "");
}

inline void translate_errors(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const InvalidArgument& e) {
    // Imported here, with the GIL held; the class object stays alive with its module.
    py::object cls = py::module_::import("opmarket.sdk._errors").attr("InvalidArgumentError");
    PyErr_SetString(cls.ptr(), e.what());
  }
}
}  // namespace detail

// What OPM_LIBRARY hands its body: declare ops and kernels; module() for anything else.
class Library {
 public:
  explicit Library(py::module_ m) : module_(std::move(m)) {
    py::register_local_exception_translator(detail::translate_errors);
    py::object addr = py::module_::import("opmarket.sdk._threads").attr("_setting_address")();
    detail::threads_setting().store(reinterpret_cast<const int*>(addr.cast<uintptr_t>()));
    module_.def("intra_op_threads", &intra_op_threads,
                "The intra-op threads setting as this library reads it.");
  }

  OpBuilder& op(std::string name) { return ops_.emplace_back(std::move(name)); }

  // A kernel of `op`: `fn` becomes module attribute `name`, called with the op's inputs
  // positionally and the attrs named by py::arg extras (py::arg("preserve_index")) by keyword.
  template <typename Func, typename... Extra>
  KernelBuilder& kernel(std::string op, const std::string& name, Func&& fn,
                        const Extra&... extra) {
    std::vector<std::string> args;
    (detail::collect_arg_name(args, extra), ...);
    detail::CapiOffer capi = detail::capi_offer(std::decay_t<Func>(fn), args);
    module_.def(name.c_str(), std::forward<Func>(fn), extra...);
    KernelBuilder& k = kernels_.emplace_back(std::move(op), name, std::move(args));
    k.capi_ = std::move(capi);
    return k;
  }

  py::module_& module() { return module_; }

  void finish() {
    detail::capi_kernels().clear();
    for (auto& k : kernels_) k.offer_capi(detail::capi_kernels().size());
    py::list decls;
    for (const auto& o : ops_) decls.append(o.declaration());
    for (const auto& k : kernels_) decls.append(k.declaration(module_));
    module_.attr("__opmarket_library__") = py::make_tuple(OPMARKET_LIBRARY_FORMAT, decls);
  }

 private:
  py::module_ module_;
  std::deque<OpBuilder> ops_;
  std::deque<KernelBuilder> kernels_;
};

}  // namespace opmarket

namespace pybind11 {
namespace detail {
template <typename T>
struct type_caster<opmarket::Tensor<T>> {
  using Array = pybind11::array_t<T, pybind11::array::c_style | pybind11::array::forcecast>;
  PYBIND11_TYPE_CASTER(opmarket::Tensor<T>, const_name("numpy.ndarray"));

  bool load(handle src, bool convert) {
    if (!convert && !Array::check_(src)) return false;
    Array array = Array::ensure(src);
    if (!array) {
      PyErr_Clear();
      return false;
    }
    value = opmarket::detail::tensor_of_array<T>(std::move(array));
    return true;
  }

  static handle cast(const opmarket::Tensor<T>& src, return_value_policy, handle) {
    if (src.owner()) return handle(static_cast<PyObject*>(src.owner().get())).inc_ref();
    // A view of memory no array owns: the result is a copy.
    std::vector<pybind11::ssize_t> dims(src.shape().begin(), src.shape().end());
    pybind11::array_t<T> copy(dims);
    if (src.size() > 0) std::memcpy(copy.mutable_data(), src.data(), sizeof(T) * src.size());
    return copy.release();
  }
};
}  // namespace detail
}  // namespace pybind11

// The library module: OPM_LIBRARY(_zero_out, lib) { lib.op("Opm>ZeroOut")...; }
// It is the pybind11 module `name` and a C-ABI plugin whose OPM_InitPlugin registers the C
// entries of the kernels the module declared (so Python imports the module first).
#define OPM_LIBRARY(name, lib)                                              \
  static void opm_library_body_##name(::opmarket::Library& lib);            \
  PYBIND11_MODULE(name, m) {                                                \
    ::opmarket::Library opm_library_(m);                                    \
    opm_library_body_##name(opm_library_);                                  \
    opm_library_.finish();                                                  \
  }                                                                         \
  static void opm_library_capi_##name(OPM_Status* status) {                 \
    ::opmarket::detail::register_capi_kernels(status);                      \
  }                                                                         \
  OPM_PLUGIN_INIT(opm_library_capi_##name)                                  \
  static void opm_library_body_##name(::opmarket::Library& lib)
