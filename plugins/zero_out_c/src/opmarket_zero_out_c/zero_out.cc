// ZeroOut's kernel on the ABI-stable C++ layer (opmarket/c_api.hpp) over the C API: the
// same op as plugins/zero_out's pybind11 kernel, as a plain shared library that carries no
// Python and hands opmarket no C++ type. Registered with the label "c_abi", so dispatch
// keeps choosing the pybind11 kernel unless a call asks for this one.
#include <opmarket/c_api.hpp>

#include <algorithm>
#include <cstdint>

namespace {

template <typename T>
class ZeroOutOp : public opmarket::OpKernel {
 public:
  explicit ZeroOutOp(opmarket::OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("preserve_index", &preserve_index_));
    OP_REQUIRES(context, preserve_index_ >= 0, "Need preserve_index >= 0, got ",
                preserve_index_);
  }

  void Compute(opmarket::OpKernelContext* context) override {
    opmarket::Tensor input = context->input(0);
    OP_REQUIRES(context, input.dims() == 1, "ZeroOut expects a 1-D vector, got shape ",
                input.DebugShape());
    const int64_t n = input.dim_size(0);
    OP_REQUIRES(context, preserve_index_ < n, "preserve_index out of range: ",
                preserve_index_, " for a vector of ", n, " elements");
    opmarket::Tensor output;
    OP_REQUIRES_OK(context, context->allocate_output(0, opmarket::DataTypeToEnum<T>(),
                                                     input.shape(), &output));
    T* out = output.flat<T>();
    std::fill(out, out + n, T(0));
    out[preserve_index_] = input.flat<T>()[preserve_index_];
  }

 private:
  int64_t preserve_index_ = 0;
};

template <typename T>
void RegisterZeroOut(const char* name, OPM_Status* status) {
  if (OPM_GetCode(status) != OPM_OK) return;
  opmarket::RegisterKernelBuilder<ZeroOutOp<T>>(
      name,
      opmarket::Name("Opm>ZeroOut").Device(opmarket::DEVICE_CPU).TypeConstraint<T>("T")
          .Label("c_abi"),
      status);
}

void Init(OPM_Status* status) {
  // The op as plugins/zero_out declares it (an identical declaration is no conflict).
  opmarket::OpDefBuilder("Opm>ZeroOut")
      .Attr("T: {float, double, int32} = DT_INT32")
      .Attr("preserve_index: int >= 0 = 0")
      .Input("to_zero: T")
      .Output("zeroed: T")
      .Register(status);
  RegisterZeroOut<float>("ZeroOutOp<float>", status);
  RegisterZeroOut<double>("ZeroOutOp<double>", status);
  RegisterZeroOut<int32_t>("ZeroOutOp<int32>", status);
}

}  // namespace

OPM_PLUGIN_INIT(Init)
