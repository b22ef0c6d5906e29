// The three ops as an ordinary TensorFlow C++ custom op library (REGISTER_OP and
// REGISTER_KERNEL_BUILDER, as TensorFlow's "Adding a new op" guide writes them), with the
// computations of kernels.h. bench/bridges.py builds it against tf.sysconfig's flags.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

#include <string>
#include <vector>

#include "kernels.h"

using namespace tensorflow;

REGISTER_OP("BenchZeroOut")
    .Attr("T: {float, int32} = DT_INT32")
    .Attr("preserve_index: int >= 0 = 0")
    .Input("to_zero: T")
    .Output("zeroed: T")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      shape_inference::ShapeHandle s;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, &s));
      c->set_output(0, s);
      return OkStatus();
    });

REGISTER_OP("BenchTimeTwo")
    .Attr("T: {float} = DT_FLOAT")
    .Input("input: T")
    .Output("output: T")
    .SetShapeFn(shape_inference::UnchangedShape);

REGISTER_OP("BenchMedianPool")
    .Attr("T: {float} = DT_FLOAT")
    .Attr("ksize: list(int) >= 4")
    .Attr("strides: list(int) >= 4")
    .Attr("padding: {'SAME', 'VALID'}")
    .Input("input: T")
    .Output("output: T")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      shape_inference::ShapeHandle s;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &s));
      shape_inference::DimensionHandle h, w;
      TF_RETURN_IF_ERROR(c->Subtract(c->Dim(s, 1), 2, &h));
      TF_RETURN_IF_ERROR(c->Subtract(c->Dim(s, 2), 2, &w));
      c->set_output(0, c->MakeShape({c->Dim(s, 0), h, w, c->Dim(s, 3)}));
      return OkStatus();
    });

template <typename T>
class ZeroOutOp : public OpKernel {
 public:
  explicit ZeroOutOp(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("preserve_index", &preserve_index_));
  }

  void Compute(OpKernelContext* context) override {
    const Tensor& input = context->input(0);
    OP_REQUIRES(context, TensorShapeUtils::IsVector(input.shape()),
                errors::InvalidArgument("ZeroOut expects a 1-D vector."));
    const int64_t n = input.NumElements();
    OP_REQUIRES(context, preserve_index_ < n,
                errors::InvalidArgument("preserve_index out of range"));
    Tensor* output = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, input.shape(), &output));
    bench::zero_out(input.flat<T>().data(), output->flat<T>().data(), n, preserve_index_);
  }

 private:
  int64_t preserve_index_ = 0;
};

class TimeTwoOp : public OpKernel {
 public:
  explicit TimeTwoOp(OpKernelConstruction* context) : OpKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const Tensor& input = context->input(0);
    Tensor* output = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, input.shape(), &output));
    bench::time_two(input.flat<float>().data(), output->flat<float>().data(),
                    input.NumElements());
  }
};

class MedianPoolOp : public OpKernel {
 public:
  explicit MedianPoolOp(OpKernelConstruction* context) : OpKernel(context) {
    std::vector<int32> ksize, strides;
    std::string padding;
    OP_REQUIRES_OK(context, context->GetAttr("ksize", &ksize));
    OP_REQUIRES_OK(context, context->GetAttr("strides", &strides));
    OP_REQUIRES_OK(context, context->GetAttr("padding", &padding));
    OP_REQUIRES(context,
                ksize == std::vector<int32>({1, 3, 3, 1}) &&
                    strides == std::vector<int32>({1, 1, 1, 1}) && padding == "VALID",
                errors::Unimplemented("this MedianPool does 3x3, stride 1, VALID only"));
  }

  void Compute(OpKernelContext* context) override {
    const Tensor& input = context->input(0);
    OP_REQUIRES(context, input.dims() == 4 && input.dim_size(1) >= 3 && input.dim_size(2) >= 3,
                errors::InvalidArgument("MedianPool expects NHWC of at least 3x3"));
    const int64_t n = input.dim_size(0), h = input.dim_size(1), w = input.dim_size(2),
                  c = input.dim_size(3);
    Tensor* output = nullptr;
    OP_REQUIRES_OK(context,
                   context->allocate_output(0, TensorShape({n, h - 2, w - 2, c}), &output));
    bench::median_pool_3x3(input.flat<float>().data(), output->flat<float>().data(), n, h, w,
                           c);
  }
};

REGISTER_KERNEL_BUILDER(
    Name("BenchZeroOut").Device(DEVICE_CPU).TypeConstraint<int32>("T"), ZeroOutOp<int32>);
REGISTER_KERNEL_BUILDER(
    Name("BenchZeroOut").Device(DEVICE_CPU).TypeConstraint<float>("T"), ZeroOutOp<float>);
REGISTER_KERNEL_BUILDER(Name("BenchTimeTwo").Device(DEVICE_CPU), TimeTwoOp);
REGISTER_KERNEL_BUILDER(Name("BenchMedianPool").Device(DEVICE_CPU), MedianPoolOp);
