// oneDNN convolutions: one primitive per shape, direction and bias use, created on first use and kept.
// oneDNN picks its layouts (format "any": channel-blocked ones, for its direct JIT kernels, which beat its
// plain-layout im2col path by up to 2x); tensors are reordered into them and results back, through
// buffers each primitive keeps, and wrapped as they are where the layouts agree. A shape for which oneDNN
// has only its reference implementation counts as unsupported (Eigen is faster). Matrix products go to
// oneDNN's row-major sgemm.
#include "ops/cpu/onednn.h"

#include <array>
#include <atomic>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "opsnn/core/error.h"

#if OPSNN_HAVE_ONEDNN
#include <dnnl.hpp>
#endif

namespace opsnn::ops::onednn {
namespace {

Policy read_policy() {
  const char* value = std::getenv("OPSNN_CPU_ENGINE");
  const std::string_view text = value == nullptr ? std::string_view() : std::string_view(value);
  if (text.empty()) return built() ? Policy::onednn : Policy::eigen;
  for (Policy candidate : {Policy::eigen, Policy::onednn, Policy::timed}) {
    if (text != policy_name(candidate)) continue;
    OPSNN_CHECK_AS(ConfigError, candidate == Policy::eigen || built(), "OPSNN_CPU_ENGINE=", text,
                   ": this build has no oneDNN (configure with libdnnl-dev installed, OPSNN_WITH_ONEDNN)");
    return candidate;
  }
  throw ConfigError(detail::concat("OPSNN_CPU_ENGINE=", text, ": expected eigen, onednn or auto"));
}

std::mutex& choices_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::map<ShapeKey, bool>& choices() {
  static std::map<ShapeKey, bool> table;
  return table;
}

std::atomic<int>& policy_slot() {
  static std::atomic<int> slot{static_cast<int>(read_policy())};
  return slot;
}

}  // namespace

Policy policy() { return static_cast<Policy>(policy_slot().load(std::memory_order_relaxed)); }

const char* policy_name(Policy value) {
  switch (value) {
    case Policy::eigen:
      return "eigen";
    case Policy::onednn:
      return "onednn";
    case Policy::timed:
      return "auto";
  }
  return "unknown";
}

void set_policy(Policy value) {
  OPSNN_CHECK_AS(UsageError, value == Policy::eigen || built(), "oneDNN engine policy: this build has no oneDNN");
  policy_slot().store(static_cast<int>(value), std::memory_order_relaxed);
}

int chosen(const ShapeKey& key) {
  std::lock_guard<std::mutex> lock(choices_mutex());
  auto found = choices().find(key);
  return found == choices().end() ? -1 : (found->second ? 1 : 0);
}

void choose(const ShapeKey& key, bool use) {
  std::lock_guard<std::mutex> lock(choices_mutex());
  choices()[key] = use;
}

ShapeKey conv_key(const ConvDims& d, Direction direction) {
  const Conv2dGeometry& g = d.geometry;
  return {1 + static_cast<int64_t>(direction),
          d.batch,
          d.in_channels,
          d.in_h,
          d.in_w,
          d.out_channels,
          d.kernel_h,
          d.kernel_w,
          d.out_h,
          d.out_w,
          g.stride_h,
          g.stride_w,
          g.pad_h,
          g.pad_w,
          0};
}

#if OPSNN_HAVE_ONEDNN

namespace {

using dnnl::memory;
using Tag = memory::format_tag;

// Right padding that gives exactly the output size (oneDNN wants both sides).
int64_t right_padding(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t pad) {
  return (out - 1) * stride + kernel - in - pad;
}

dnnl::engine& engine() {
  static dnnl::engine cpu(dnnl::engine::kind::cpu, 0);
  return cpu;
}

memory::desc plain(const memory::dims& dims, Tag tag) { return memory::desc(dims, memory::data_type::f32, tag); }

// The memory descriptors and geometry of one convolution in oneDNN's terms: the tensors' plain layouts
// and the "any" ones the primitive descriptors choose from.
struct Descriptors {
  memory::desc src, weights, bias, dst;        // the tensors as they are
  memory::desc any_src, any_weights, any_dst;  // what oneDNN may reorder them to
  memory::dims strides, padding_l, padding_r;
  explicit Descriptors(const ConvDims& d, bool with_bias) {
    const Conv2dGeometry& g = d.geometry;
    const memory::dims src_dims{d.batch, d.in_channels, d.in_h, d.in_w};
    const memory::dims weight_dims{d.out_channels, d.in_channels, d.kernel_h, d.kernel_w};
    const memory::dims dst_dims{d.batch, d.out_channels, d.out_h, d.out_w};
    src = plain(src_dims, Tag::nchw);
    weights = plain(weight_dims, Tag::oihw);
    if (with_bias) bias = plain({d.out_channels}, Tag::x);
    dst = plain(dst_dims, Tag::nchw);
    any_src = plain(src_dims, Tag::any);
    any_weights = plain(weight_dims, Tag::any);
    any_dst = plain(dst_dims, Tag::any);
    strides = {g.stride_h, g.stride_w};
    padding_l = {g.pad_h, g.pad_w};
    padding_r = {right_padding(d.in_h, d.out_h, d.kernel_h, g.stride_h, g.pad_h),
                 right_padding(d.in_w, d.out_w, d.kernel_w, g.stride_w, g.pad_w)};
  }
};

dnnl::convolution_forward::primitive_desc forward_pd(const Descriptors& m) {
#if DNNL_VERSION_MAJOR >= 3
  return dnnl::convolution_forward::primitive_desc(engine(), dnnl::prop_kind::forward_training,
                                                   dnnl::algorithm::convolution_direct, m.any_src, m.any_weights,
                                                   m.bias, m.any_dst, m.strides, m.padding_l, m.padding_r);
#else
  dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                       m.any_src, m.any_weights, m.bias, m.any_dst, m.strides, m.padding_l,
                                       m.padding_r);
  return dnnl::convolution_forward::primitive_desc(desc, engine());
#endif
}

dnnl::convolution_backward_data::primitive_desc backward_data_pd(const Descriptors& m) {
  const auto hint = forward_pd(m);
#if DNNL_VERSION_MAJOR >= 3
  return dnnl::convolution_backward_data::primitive_desc(engine(), dnnl::algorithm::convolution_direct, m.any_src,
                                                         m.any_weights, m.any_dst, m.strides, m.padding_l, m.padding_r,
                                                         hint);
#else
  dnnl::convolution_backward_data::desc desc(dnnl::algorithm::convolution_direct, m.any_src, m.any_weights, m.any_dst,
                                             m.strides, m.padding_l, m.padding_r);
  return dnnl::convolution_backward_data::primitive_desc(desc, engine(), hint);
#endif
}

dnnl::convolution_backward_weights::primitive_desc backward_weights_pd(const Descriptors& m) {
  const auto hint = forward_pd(m);
#if DNNL_VERSION_MAJOR >= 3
  return dnnl::convolution_backward_weights::primitive_desc(engine(), dnnl::algorithm::convolution_direct, m.any_src,
                                                            m.any_weights, m.any_dst, m.strides, m.padding_l,
                                                            m.padding_r, hint);
#else
  dnnl::convolution_backward_weights::desc desc(dnnl::algorithm::convolution_direct, m.any_src, m.any_weights,
                                                m.any_dst, m.strides, m.padding_l, m.padding_r);
  return dnnl::convolution_backward_weights::primitive_desc(desc, engine(), hint);
#endif
}

// One tensor argument of a primitive: its plain layout, the primitive's, and when they differ the buffer
// in the primitive's layout and the reorder between the two (into it for inputs, out of it for outputs).
struct Argument {
  int id = 0;
  bool output = false;
  memory::desc user, inner;
  memory buffer;
  dnnl::reorder convert;
  bool reordered() const { return user != inner; }
};

// A created primitive with its arguments, and whether oneDNN has more than its reference implementation.
struct Primitive {
  dnnl::primitive primitive;
  std::vector<Argument> arguments;
  bool fast = false;
  std::mutex mutex;  // the argument buffers are shared by the calls of one shape

  void add(int id, bool output, const memory::desc& user, const memory::desc& inner) {
    Argument argument{id, output, user, inner, {}, {}};
    if (argument.reordered()) {
      argument.buffer = memory(inner, engine());
      argument.convert = output ? dnnl::reorder(dnnl::reorder::primitive_desc(engine(), inner, engine(), user))
                                : dnnl::reorder(dnnl::reorder::primitive_desc(engine(), user, engine(), inner));
    }
    arguments.push_back(std::move(argument));
  }
};

// Slot of the primitive cache: the three directions, forward with bias as a fourth.
constexpr int kForwardWithBias = 3;

Primitive& primitive_for(const ConvDims& dims, int slot) {
  static std::mutex mutex;
  static std::map<ShapeKey, std::unique_ptr<Primitive>> cache;
  ShapeKey key = conv_key(dims, Direction::forward);
  key.back() = slot;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto found = cache.find(key); found != cache.end()) return *found->second;
  auto made = std::make_unique<Primitive>();
  try {
    const Descriptors m(dims, slot == kForwardWithBias);
    std::string implementation;
    if (slot == static_cast<int>(Direction::backward_data)) {
      const auto pd = backward_data_pd(m);
      implementation = pd.impl_info_str();
      made->primitive = dnnl::convolution_backward_data(pd);
      made->add(DNNL_ARG_DIFF_DST, false, m.dst, pd.diff_dst_desc());
      made->add(DNNL_ARG_WEIGHTS, false, m.weights, pd.weights_desc());
      made->add(DNNL_ARG_DIFF_SRC, true, m.src, pd.diff_src_desc());
    } else if (slot == static_cast<int>(Direction::backward_weights)) {
      const auto pd = backward_weights_pd(m);
      implementation = pd.impl_info_str();
      made->primitive = dnnl::convolution_backward_weights(pd);
      made->add(DNNL_ARG_DIFF_DST, false, m.dst, pd.diff_dst_desc());
      made->add(DNNL_ARG_SRC, false, m.src, pd.src_desc());
      made->add(DNNL_ARG_DIFF_WEIGHTS, true, m.weights, pd.diff_weights_desc());
    } else {
      const auto pd = forward_pd(m);
      implementation = pd.impl_info_str();
      made->primitive = dnnl::convolution_forward(pd);
      made->add(DNNL_ARG_SRC, false, m.src, pd.src_desc());
      made->add(DNNL_ARG_WEIGHTS, false, m.weights, pd.weights_desc());
      if (slot == kForwardWithBias) made->add(DNNL_ARG_BIAS, false, m.bias, pd.bias_desc());
      made->add(DNNL_ARG_DST, true, m.dst, pd.dst_desc());
    }
    made->fast = implementation.rfind("ref", 0) != 0;
  } catch (const dnnl::error&) {
    made->fast = false;  // not expressible in oneDNN (e.g. padding larger than the kernel): Eigen runs it
  }
  return *cache.emplace(key, std::move(made)).first->second;
}

// Runs the primitive of (dims, slot) on the tensors' buffers, given in its arguments' order.
void execute(const ConvDims& dims, int slot, std::initializer_list<const void*> buffers) {
  Primitive& entry = primitive_for(dims, slot);
  OPSNN_CHECK(entry.fast, "oneDNN convolution asked for a shape it does not support");
  OPSNN_CHECK(buffers.size() == entry.arguments.size(), "oneDNN convolution: ", buffers.size(), " buffers for ",
              entry.arguments.size(), " arguments");
  std::lock_guard<std::mutex> lock(entry.mutex);
  try {
    dnnl::stream stream(engine());
    std::unordered_map<int, memory> arguments;
    std::vector<std::pair<Argument*, memory>> outputs;
    const void* const* buffer = buffers.begin();
    for (Argument& argument : entry.arguments) {
      memory user(argument.user, engine(), const_cast<void*>(*buffer++));
      if (!argument.reordered()) {
        arguments.emplace(argument.id, user);
        continue;
      }
      if (argument.output)
        outputs.emplace_back(&argument, user);
      else
        argument.convert.execute(stream, user, argument.buffer);
      arguments.emplace(argument.id, argument.buffer);
    }
    entry.primitive.execute(stream, arguments);
    for (auto& [argument, user] : outputs) argument->convert.execute(stream, argument->buffer, user);
    stream.wait();
  } catch (const dnnl::error& failure) {
    throw Error(detail::concat("oneDNN convolution failed: ", failure.what()));
  }
}

}  // namespace

bool built() { return true; }

bool conv_supported(const ConvDims& dims) {
  // The verdict per shape, so that a call after the first costs one lookup (not one per direction).
  static std::mutex mutex;
  static std::map<ShapeKey, bool> verdicts;
  const ShapeKey key = conv_key(dims, Direction::forward);
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto found = verdicts.find(key); found != verdicts.end()) return found->second;
  }
  bool supported = true;
  const Descriptors m(dims, false);
  if (m.padding_r[0] < 0 || m.padding_r[1] < 0) supported = false;
  for (int slot = 0; supported && slot <= kForwardWithBias; ++slot) supported = primitive_for(dims, slot).fast;
  std::lock_guard<std::mutex> lock(mutex);
  return verdicts.emplace(key, supported).first->second;
}

void conv_forward(const ConvDims& dims, const float* x, const float* w, const float* b, float* y) {
  if (b != nullptr)
    execute(dims, kForwardWithBias, {x, w, b, y});
  else
    execute(dims, static_cast<int>(Direction::forward), {x, w, y});
}

void conv_backward_data(const ConvDims& dims, const float* dy, const float* w, float* dx) {
  execute(dims, static_cast<int>(Direction::backward_data), {dy, w, dx});
}

void conv_backward_weights(const ConvDims& dims, const float* dy, const float* x, float* dw) {
  execute(dims, static_cast<int>(Direction::backward_weights), {dy, x, dw});
}

void sgemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* out, int64_t ldo) {
  const dnnl_status_t status =
      dnnl_sgemm(transpose_a ? 'T' : 'N', transpose_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, out, ldo);
  OPSNN_CHECK(status == dnnl_success, "oneDNN sgemm failed (status ", static_cast<int>(status), ") on ", m, "x", k,
              " times ", k, "x", n);
}

#else  // built without oneDNN

bool built() { return false; }
bool conv_supported(const ConvDims&) { return false; }

namespace {
[[noreturn]] void not_built() { throw Error("this build of opsnn has no oneDNN (OPSNN_WITH_ONEDNN)"); }
}  // namespace

void conv_forward(const ConvDims&, const float*, const float*, const float*, float*) { not_built(); }
void conv_backward_data(const ConvDims&, const float*, const float*, float*) { not_built(); }
void conv_backward_weights(const ConvDims&, const float*, const float*, float*) { not_built(); }
void sgemm(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t, float, float*,
           int64_t) {
  not_built();
}

#endif

}  // namespace opsnn::ops::onednn
