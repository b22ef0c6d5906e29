// A tiny library for tests/sdk/test_native.py: every part of opmarket/kernel.h once.
#include <opmarket/kernel.h>

#include <set>
#include <thread>

namespace {

// out = x * factor, sharded; a negative factor is refused by OPM_REQUIRES.
template <typename T>
opmarket::Tensor<T> Scale(opmarket::Tensor<T> x, double factor) {
  OPM_REQUIRES(factor >= 0, "Scale needs factor >= 0, got ", factor);
  auto out = opmarket::allocate<T>(x.shape());
  const T* in = x.data();
  T* o = out.mutable_data();
  auto no_gil = opmarket::release_gil();
  opmarket::shard(x.size(), 1000, [&](int64_t start, int64_t limit) {
    for (int64_t i = start; i < limit; ++i) o[i] = static_cast<T>(in[i] * factor);
  });
  return out;
}

// How many times shard visited each index, and how many distinct threads ran ranges.
pybind11::tuple Visits(int64_t total, int64_t cost) {
  std::vector<int> seen(total, 0);
  std::mutex mu;
  std::set<std::thread::id> threads;
  {
    auto no_gil = opmarket::release_gil();
    opmarket::shard(total, cost, [&](int64_t start, int64_t limit) {
      for (int64_t i = start; i < limit; ++i) ++seen[i];
      std::lock_guard<std::mutex> lock(mu);
      threads.insert(std::this_thread::get_id());
    });
  }
  return pybind11::make_tuple(seen, threads.size());
}

// Throws from inside a shard range: the error must reach Python as InvalidArgument.
void FailInShard(int64_t bad) {
  auto no_gil = opmarket::release_gil();
  opmarket::shard(1000, 100000, [&](int64_t start, int64_t limit) {
    OPM_REQUIRES(!(start <= bad && bad < limit), "index ", bad, " is bad");
  });
}

// Returns its input (a kernel of the built-in Identity op).
opmarket::Tensor<float> Identity(opmarket::Tensor<float> input) { return input; }

}  // namespace

OPM_LIBRARY(_tiny, lib) {
  lib.op("Opm>TinyScale")
      .input("x: T")
      .output("y: T")
      .attr("T: {float, double}")
      .attr("factor: float = 2.0")
      .doc("Multiplies x by factor.");
  lib.kernel("Opm>TinyScale", "scale_float", &Scale<float>, pybind11::arg("x"),
             pybind11::arg("factor"))
      .type_constraint<float>("T");
  lib.kernel("Opm>TinyScale", "scale_double", &Scale<double>, pybind11::arg("x"),
             pybind11::arg("factor"))
      .type_constraint<double>("T");
  // A kernel of an op declared elsewhere (the built-in Identity): its attrs named with
  // .attrs() (none), chosen only by label, its input kept in host memory.
  lib.kernel("Identity", "identity_float", &Identity, pybind11::arg("input"))
      .type_constraint<float>("T")
      .attrs({})
      .host_memory("input")
      .label("tiny")
      .priority(3);
  lib.module().def("visits", &Visits);
  lib.module().def("fail_in_shard", &FailInShard);
}
