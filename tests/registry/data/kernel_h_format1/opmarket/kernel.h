// opmarket/kernel.h: the C++ SDK for opmarket kernels written with pybind11.
//
// One header, found with `python -c "import opmarket.sdk; print(opmarket.sdk.get_include())"`
// (as pybind11.get_include()). It gives a kernel author what TensorFlow's op_kernel.h gives:
//
//   opmarket::Tensor<T>        typed access to a numpy input, and outputs (allocate<T>(shape))
//   OPM_REQUIRES(cond, ...)    a check that raises opmarket.sdk.InvalidArgumentError in Python
//   opmarket::shard(total, cost_per_unit, fn)
//                              a parallel-for over the library's thread pool, sized by the
//                              intra-op threads setting (OPMARKET_INTRA_OP_THREADS, or
//                              opmarket.sdk.set_intra_op_threads); TensorFlow's Shard
//   OPM_LIBRARY(name, lib)     the module: ops (REGISTER_OP's spec strings) and kernels
//                              (REGISTER_KERNEL_BUILDER's constraints) that
//                              opmarket.load_library(path) or a plugin's register hook reads
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
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
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

// Bumped when what a library declares (__opmarket_library__) changes shape.
#define OPMARKET_LIBRARY_FORMAT 1

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

// --- tensors -----------------------------------------------------------------------------

// A C-contiguous numpy array of T, as a kernel argument or result. As an argument it accepts
// an array of exactly T without a copy (dispatch guarantees the dtype; a non-contiguous
// array is copied once). It keeps the array alive; copying a Tensor copies a reference.
template <typename T>
class Tensor {
 public:
  using Array = py::array_t<T, py::array::c_style | py::array::forcecast>;

  Tensor() = default;
  explicit Tensor(Array array) : array_(std::move(array)) {
    data_ = const_cast<T*>(array_.data());
    rank_ = static_cast<int>(array_.ndim());
    size_ = static_cast<int64_t>(array_.size());
  }

  int rank() const { return rank_; }
  int64_t dim(int i) const { return static_cast<int64_t>(array_.shape(i)); }
  int64_t size() const { return size_; }
  std::vector<int64_t> shape() const {
    return std::vector<int64_t>(array_.shape(), array_.shape() + rank_);
  }
  std::string shape_string() const {
    std::string s = "[";
    for (int i = 0; i < rank_; ++i) s += (i ? "," : "") + std::to_string(dim(i));
    return s + "]";
  }

  const T* data() const { return data_; }
  // Writable data: for outputs from allocate(); an input that numpy marks read-only throws.
  T* mutable_data() {
    OPM_REQUIRES(array_.writeable(), "tensor is read-only");
    return data_;
  }
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

  const Array& array() const { return array_; }

 private:
  template <typename... Index>
  int64_t offset(Index... index) const {
    const int64_t idx[] = {static_cast<int64_t>(index)...};
    int64_t off = 0;
    for (int i = 0; i < static_cast<int>(sizeof...(Index)); ++i) off = off * dim(i) + idx[i];
    return off;
  }

  Array array_;
  T* data_ = nullptr;
  int rank_ = 0;
  int64_t size_ = 0;
};

// A new, uninitialized output of the given shape (TensorFlow's allocate_output). Call it with
// the GIL held (before py::gil_scoped_release).
template <typename T>
Tensor<T> allocate(const std::vector<int64_t>& shape) {
  std::vector<py::ssize_t> dims(shape.begin(), shape.end());
  return Tensor<T>(typename Tensor<T>::Array(dims));
}

// --- threads -----------------------------------------------------------------------------

namespace detail {

// The intra-op threads setting lives in Python (opmarket.sdk._threads) as one C int whose
// address the library reads at import; reading it is one load.
inline std::atomic<const int*>& threads_setting() {
  static std::atomic<const int*> setting{nullptr};
  return setting;
}

inline thread_local bool in_pool_worker = false;

// A fixed set of workers; run() hands out blocks [0, n) to them and the calling thread, and
// returns when every block ran. One run at a time; a caller that finds the pool busy, or a
// block that shards again, runs its blocks inline instead of waiting.
class ThreadPool {
 public:
  explicit ThreadPool(int workers) : size_(workers + 1) {
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { loop(); });
  }
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return size_; }

  void run(int64_t n, const std::function<void(int64_t)>& block) {
    std::unique_lock<std::mutex> busy(run_mu_, std::try_to_lock);
    if (!busy.owns_lock() || in_pool_worker || threads_.empty() || n <= 1) {
      for (int64_t i = 0; i < n; ++i) block(i);
      return;
    }
    Job job(&block, n);
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = &job;
      ++generation_;
    }
    wake_.notify_all();
    work(job);
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return job.finished.load() == n && active_ == 0; });
    job_ = nullptr;
    lock.unlock();
    if (job.error) std::rethrow_exception(job.error);
  }

 private:
  struct Job {
    Job(const std::function<void(int64_t)>* f, int64_t count) : fn(f), n(count) {}
    const std::function<void(int64_t)>* fn;
    int64_t n;
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> finished{0};
    std::mutex error_mu;
    std::exception_ptr error;
  };

  static void work(Job& job) {
    for (int64_t i; (i = job.next.fetch_add(1)) < job.n;) {
      try {
        (*job.fn)(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(job.error_mu);
        if (!job.error) job.error = std::current_exception();
      }
      job.finished.fetch_add(1);
    }
  }

  void loop() {
    in_pool_worker = true;
    uint64_t seen = 0;
    for (;;) {
      Job* job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return stop_ || (job_ != nullptr && generation_ != seen); });
        if (stop_) return;
        seen = generation_;
        job = job_;
        ++active_;
      }
      work(*job);
      {
        std::lock_guard<std::mutex> lock(mu_);
        --active_;
      }
      done_.notify_all();
    }
  }

  const int size_;
  std::vector<std::thread> threads_;
  std::mutex run_mu_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable done_;
  Job* job_ = nullptr;
  uint64_t generation_ = 0;
  int active_ = 0;
  bool stop_ = false;
};

struct PoolHolder {
  std::mutex mu;
  std::shared_ptr<ThreadPool> pool;
};

inline PoolHolder& pool_holder() {
  // Never destroyed: workers must not be joined while the interpreter shuts down.
  static PoolHolder* holder = [] {
    auto* h = new PoolHolder();
    // A forked child has none of the parent's threads: forget the pool (and a mutex that
    // may have been held), build a new one on first use.
    pthread_atfork(nullptr, nullptr, [] { new (&pool_holder()) PoolHolder(); });
    return h;
  }();
  return *holder;
}

}  // namespace detail

// The intra-op threads setting: how many threads shard() uses, the caller included.
inline int intra_op_threads() {
  const int* setting = detail::threads_setting().load(std::memory_order_relaxed);
  int n = setting ? __atomic_load_n(setting, __ATOMIC_RELAXED) : 1;
  return n > 0 ? n : 1;
}

// The library's pool, rebuilt when the setting changed since the last call.
inline std::shared_ptr<detail::ThreadPool> thread_pool() {
  int want = intra_op_threads();
  auto& holder = detail::pool_holder();
  std::lock_guard<std::mutex> lock(holder.mu);
  if (!holder.pool || holder.pool->size() != want) {
    holder.pool.reset();  // joins the old workers (a run in progress holds its own reference)
    holder.pool = std::make_shared<detail::ThreadPool>(want - 1);
  }
  return holder.pool;
}

// Below this much work (in cost units, about cycles) a shard is not worth a thread.
constexpr int64_t kMinCostPerShard = 10000;

// TensorFlow's Shard: run fn(start, limit) over disjoint ranges covering [0, total), in
// parallel on the intra-op threads. cost_per_unit estimates the work of one unit (about
// cycles); small totals run inline. fn must be thread-safe and must not touch Python (release
// the GIL around the call); the first exception a range throws is rethrown here.
inline void shard(int64_t total, int64_t cost_per_unit,
                  const std::function<void(int64_t, int64_t)>& fn) {
  if (total <= 0) return;
  const int threads = intra_op_threads();
  const double work = static_cast<double>(total) * static_cast<double>(std::max<int64_t>(
                                                       cost_per_unit, 1));
  if (threads <= 1 || total == 1 || work < 2.0 * kMinCostPerShard) {
    fn(0, total);
    return;
  }
  // A few blocks per thread balance uneven blocks; no block is cheaper than kMinCostPerShard.
  const int64_t by_cost = static_cast<int64_t>(work / kMinCostPerShard);
  const int64_t shards = std::max<int64_t>(
      1, std::min<int64_t>({static_cast<int64_t>(threads) * 4, by_cost, total}));
  const int64_t block = (total + shards - 1) / shards;
  const int64_t blocks = (total + block - 1) / block;
  thread_pool()->run(blocks, [&](int64_t b) {
    const int64_t start = b * block;
    fn(start, std::min(total, start + block));
  });
}

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
    return d;
  }

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
    module_.def(name.c_str(), std::forward<Func>(fn), extra...);
    return kernels_.emplace_back(std::move(op), name, std::move(args));
  }

  py::module_& module() { return module_; }

  void finish() {
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
  using Array = typename opmarket::Tensor<T>::Array;
  PYBIND11_TYPE_CASTER(opmarket::Tensor<T>, const_name("numpy.ndarray"));

  bool load(handle src, bool convert) {
    if (!convert && !Array::check_(src)) return false;
    Array array = Array::ensure(src);
    if (!array) {
      PyErr_Clear();
      return false;
    }
    value = opmarket::Tensor<T>(std::move(array));
    return true;
  }

  static handle cast(const opmarket::Tensor<T>& src, return_value_policy, handle) {
    return src.array().inc_ref();
  }
};
}  // namespace detail
}  // namespace pybind11

// The library module: OPM_LIBRARY(_zero_out, lib) { lib.op("Opm>ZeroOut")...; }
#define OPM_LIBRARY(name, lib)                                   \
  static void opm_library_body_##name(::opmarket::Library& lib); \
  PYBIND11_MODULE(name, m) {                                     \
    ::opmarket::Library opm_library_(m);                         \
    opm_library_body_##name(opm_library_);                       \
    opm_library_.finish();                                       \
  }                                                              \
  static void opm_library_body_##name(::opmarket::Library& lib)
