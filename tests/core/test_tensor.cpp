// Tests of src/core/tensor.cpp, storage.cpp and device.cpp: factories, views, copies and dtype
// conversions, error messages naming both sides, CPU alignment, rehome/set_data, Device parsing.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <set>
#include <vector>

#include "core/cpu_services.h"
#include "opsnn/core/device.h"
#include "opsnn/core/error.h"
#include "opsnn/core/storage.h"
#include "opsnn/core/tensor.h"
#include "support/catch.h"

using namespace opsnn;

namespace {

const DType kAllDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8};

// [2, 3, 4] holding 0, 1, ..., 23.
Tensor arange_234() {
  std::vector<float> values(24);
  for (int i = 0; i < 24; ++i) values[static_cast<size_t>(i)] = static_cast<float>(i);
  return Tensor::from_vector(values, {2, 3, 4});
}

}  // namespace

TEST_CASE("factories make contiguous tensors of the requested shape, dtype and value", "[core]") {
  Tensor zeros = Tensor::zeros({2, 3});
  CHECK(zeros.shape() == Shape{2, 3});
  CHECK(zeros.strides() == Shape{3, 1});
  CHECK(zeros.dtype() == DType::f32);
  CHECK(zeros.device() == kCPU);
  CHECK(zeros.numel() == 6);
  CHECK(zeros.nbytes() == 24);
  CHECK(zeros.is_contiguous());
  CHECK(zeros.to_vector<float>() == std::vector<float>(6, 0.0f));
  CHECK(Tensor::ones({4}, DType::i64).to_vector<int64_t>() == std::vector<int64_t>(4, 1));
  CHECK(Tensor::full({2, 2}, 2.5, DType::f16).to_vector<float>() == std::vector<float>(4, 2.5f));
  Tensor scalar = Tensor::scalar(3.0, DType::f64);
  CHECK(scalar.dim() == 0);
  CHECK(scalar.numel() == 1);
  CHECK(scalar.item() == 3.0);
  Tensor from_values = Tensor::from_vector<int32_t>({1, 2, 3, 4, 5, 6}, {3, 2}, DType::f32);
  CHECK(from_values.dtype() == DType::f32);
  CHECK(from_values.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  Tensor empty = Tensor::zeros({0, 5});
  CHECK(empty.numel() == 0);
  CHECK(empty.to_vector<float>().empty());
  CHECK(empty.clone().shape() == Shape{0, 5});
  CHECK(zeros.size(-1) == 3);
  CHECK(zeros.size(0) == 2);
  CHECK_THROWS_AS(zeros.size(2), ShapeError);
  CHECK(zeros.str() == "f32[2, 3] on cpu");
  CHECK(Tensor().str() == "undefined tensor");
  CHECK_THROWS_WITH(Tensor().shape(), Catch::Contains("undefined Tensor"));
}

TEST_CASE("factory errors name the offending shape or count", "[core]") {
  CHECK_THROWS_AS(Tensor::empty({2, -1}), ShapeError);
  CHECK_THROWS_WITH(Tensor::empty({2, -1}), Catch::Contains("[2, -1]"));
  CHECK_THROWS_AS(Tensor::from_vector<float>({1, 2, 3}, {2, 2}), ShapeError);
  CHECK_THROWS_WITH(Tensor::from_vector<float>({1, 2, 3}, {2, 2}),
                    Catch::Contains("3 values") && Catch::Contains("[2, 2]"));
  CHECK_THROWS_WITH(Tensor::zeros({2, 2}).item(), Catch::Contains("[2, 2]"));
}

TEST_CASE("element and byte counts that overflow int64 are a ShapeError, not a wrapped size", "[core]") {
  // 2^62 x 4 x 4 wraps to 0 in int64: an allocation of 0 bytes that loops would then write past.
  const int64_t huge = int64_t{1} << 62;
  CHECK_THROWS_AS(shape_numel({huge, 4, 4}), ShapeError);
  CHECK_THROWS_WITH(shape_numel({huge, 4, 4}), Catch::Contains("[4611686018427387904, 4, 4]"));
  CHECK_THROWS_AS(Tensor::empty({huge, 4, 4}), ShapeError);
  // 2^61 elements fit int64, their 2^63 f32 bytes do not.
  CHECK_THROWS_WITH(Tensor::empty({int64_t{1} << 61}), Catch::Contains("bytes") && Catch::Contains("f32"));
  // An empty tensor holds no elements whatever the other extents, but its strides must still fit.
  CHECK(shape_numel({huge, 4, 0}) == 0);
  CHECK_THROWS_AS(Tensor::empty({huge, 4, 0}), ShapeError);
  CHECK(Tensor::empty({huge, 0}).numel() == 0);
}

TEST_CASE("slice, select, transpose and permute are views sharing storage", "[core]") {
  Tensor base = arange_234();
  Tensor sliced = base.slice(1, 1, 3);
  CHECK(sliced.shape() == Shape{2, 2, 4});
  CHECK(sliced.storage() == base.storage());
  CHECK(sliced.offset() == 4);
  CHECK_FALSE(sliced.is_contiguous());
  CHECK(sliced.to_vector<float>() == std::vector<float>{4, 5, 6, 7, 8, 9, 10, 11, 16, 17, 18, 19, 20, 21, 22, 23});
  Tensor rows = base.slice(0, 1, 2);
  CHECK(rows.is_contiguous());
  CHECK(rows.offset() == 12);
  Tensor selected = base.select(2, 1);
  CHECK(selected.shape() == Shape{2, 3});
  CHECK(selected.to_vector<float>() == std::vector<float>{1, 5, 9, 13, 17, 21});
  CHECK(base.select(-1, 3).to_vector<float>() == std::vector<float>{3, 7, 11, 15, 19, 23});
  Tensor transposed = base.select(0, 0).transpose(0, 1);
  CHECK(transposed.shape() == Shape{4, 3});
  CHECK(transposed.strides() == Shape{1, 4});
  CHECK(transposed.to_vector<float>() == std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  Tensor permuted = base.permute({2, 0, 1});
  CHECK(permuted.shape() == Shape{4, 2, 3});
  CHECK(permuted.strides() == Shape{1, 12, 4});
  std::vector<float> permuted_values = permuted.to_vector<float>();
  CHECK(permuted_values[0] == 0);
  CHECK(permuted_values[1] == 4);
  CHECK(permuted_values[3] == 12);
  CHECK(permuted_values[6] == 1);  // [1, 0, 0] of the permuted view is base[0, 0, 1]
  // A write through a view is seen by the base.
  base.select(0, 1).select(0, 2).fill_(-1.0);
  CHECK(base.to_vector<float>()[20] == -1.0f);
  CHECK(base.to_vector<float>()[19] == 19.0f);
}

TEST_CASE("view errors name the shapes", "[core]") {
  Tensor base = arange_234();
  CHECK_THROWS_WITH(base.slice(1, 2, 4), Catch::Contains("[2, 4)") && Catch::Contains("[2, 3, 4]"));
  CHECK_THROWS_AS(base.slice(1, 2, 1), ShapeError);
  CHECK_THROWS_AS(base.select(0, 2), ShapeError);
  CHECK_THROWS_AS(base.select(3, 0), ShapeError);
  CHECK_THROWS_AS(base.transpose(0, 3), ShapeError);
  CHECK_THROWS_AS(base.permute({0, 1}), ShapeError);
  CHECK_THROWS_WITH(base.permute({0, 0, 1}), Catch::Contains("repeated"));
}

TEST_CASE("view reshapes contiguous tensors, inferring one -1", "[core]") {
  Tensor base = arange_234();
  Tensor flat = base.view({-1});
  CHECK(flat.shape() == Shape{24});
  CHECK(flat.storage() == base.storage());
  CHECK(base.view({4, -1}).shape() == Shape{4, 6});
  CHECK(base.view({-1, 2, 3}).shape() == Shape{4, 2, 3});
  CHECK(base.slice(0, 1, 2).view({3, 4}).offset() == 12);
  CHECK(base.slice(0, 1, 2).view({3, 4}).to_vector<float>()[0] == 12.0f);
  CHECK_THROWS_WITH(base.view({5, -1}), Catch::Contains("[5, -1]") && Catch::Contains("[2, 3, 4]"));
  CHECK_THROWS_WITH(base.view({-1, -1}), Catch::Contains("more than one -1"));
  CHECK_THROWS_WITH(base.view({5, 5}), Catch::Contains("[2, 3, 4]") && Catch::Contains("[5, 5]"));
  CHECK_THROWS_WITH(base.transpose(0, 1).view({24}), Catch::Contains("non-contiguous"));
}

TEST_CASE("contiguous returns the same handle when already contiguous, else a compact copy", "[core]") {
  Tensor base = arange_234();
  CHECK(base.contiguous().same(base));
  Tensor transposed = base.transpose(0, 2);
  Tensor compact = transposed.contiguous();
  CHECK_FALSE(compact.same(transposed));
  CHECK(compact.is_contiguous());
  CHECK(compact.shape() == Shape{4, 3, 2});
  CHECK(compact.to_vector<float>() == transposed.to_vector<float>());
  CHECK(compact.storage() != base.storage());
}

TEST_CASE("clone copies into new storage", "[core]") {
  Tensor base = arange_234();
  Tensor copy = base.clone();
  CHECK(copy.storage() != base.storage());
  CHECK(copy.to_vector<float>() == base.to_vector<float>());
  copy.fill_(7.0);
  CHECK(base.to_vector<float>()[5] == 5.0f);
  Tensor strided_copy = base.select(2, 0).clone();
  CHECK(strided_copy.is_contiguous());
  CHECK(strided_copy.to_vector<float>() == std::vector<float>{0, 4, 8, 12, 16, 20});
}

TEST_CASE("to(dtype) converts between every pair of dtypes", "[core]") {
  // Values exact in every dtype (u8 holds 0..255; bf16 holds integers up to 256 exactly).
  const std::vector<double> values{0, 1, 2, 3, 100, 7, 255, 128};
  for (DType from : kAllDTypes) {
    Tensor source = Tensor::from_vector<double>(values, {2, 4}, from);
    REQUIRE(source.dtype() == from);
    for (DType to : kAllDTypes) {
      INFO(dtype_name(from) << " -> " << dtype_name(to));
      Tensor converted = source.to(to);
      CHECK(converted.dtype() == to);
      CHECK(converted.shape() == Shape{2, 4});
      CHECK(converted.to_vector<double>() == values);
      CHECK(converted.same(source) == (from == to));
      // A strided source converts too.
      CHECK(source.transpose(0, 1).to(to).to_vector<double>() == std::vector<double>{0, 100, 1, 7, 2, 255, 3, 128});
    }
  }
  // Negative values for the signed types, and the C++ truncation toward zero for float -> int.
  Tensor negatives = Tensor::from_vector<float>({-2.75f, 2.75f, -1.0f}, {3});
  CHECK(negatives.to(DType::i32).to_vector<int32_t>() == std::vector<int32_t>{-2, 2, -1});
  CHECK(negatives.to(DType::i64).to_vector<int64_t>() == std::vector<int64_t>{-2, 2, -1});
  CHECK(negatives.to(DType::f16).to_vector<float>() == std::vector<float>{-2.75f, 2.75f, -1.0f});
  CHECK(negatives.to(DType::bf16).to_vector<float>() == std::vector<float>{-2.75f, 2.75f, -1.0f});
  // Rounding, not truncation, to the 16-bit float types.
  Tensor inexact = Tensor::from_vector<float>({1.0f + 3.0f / 2048.0f}, {1});
  CHECK(inexact.to(DType::f16).to_vector<float>()[0] == 1.0f + 2.0f / 1024.0f);
  CHECK(Tensor::from_vector<int64_t>({65520}, {1}).to(DType::f16).to_vector<float>()[0] ==
        std::numeric_limits<float>::infinity());
}

TEST_CASE("floating -> integer copies saturate and take NaN to 0, fills refuse what no integer holds", "[core]") {
  // static_cast gave NaN -> INT_MIN, 1e20 -> INT_MIN and -5 -> 251 (undefined behaviour); the copies now
  // truncate toward zero and clamp to the type's range, NaN giving 0, as the CUDA copies do.
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> values{nan, inf, -inf, 1e20, -1e20, -5.0, 300.7, -0.9, 255.9, 2147483647.9, -2147483648.9};
  for (DType from : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    INFO("from " << dtype_name(from));
    const Tensor source =
        Tensor::from_vector<double>(values, {static_cast<int64_t>(values.size())}, DType::f64).to(from);
    const std::vector<double> exact = source.to_vector<double>();  // the values as rounded into `from`
    for (DType to : {DType::u8, DType::i32, DType::i64}) {
      INFO("to " << dtype_name(to));
      const double low = to == DType::u8 ? 0.0 : to == DType::i32 ? -2147483648.0 : -9223372036854775808.0;
      const double high = to == DType::u8 ? 255.0 : to == DType::i32 ? 2147483647.0 : 9223372036854775807.0;
      const std::vector<double> got = source.to(to).to_vector<double>();
      for (size_t i = 0; i < exact.size(); ++i) {
        const double expected = std::isnan(exact[i]) ? 0.0 : std::clamp(std::trunc(exact[i]), low, high);
        CHECK(got[i] == expected);
      }
      // A strided copy (the same conversion) and copy_ agree.
      Tensor destination = Tensor::zeros({static_cast<int64_t>(values.size())}, to);
      destination.copy_(source);
      CHECK(destination.to_vector<double>() == got);
    }
  }
  CHECK(Tensor::from_vector<float>({-5.0f}, {1}).to(DType::u8).to_vector<uint8_t>() == std::vector<uint8_t>{0});
  CHECK(Tensor::from_vector<double>({1e20}, {1}).to(DType::i32).to_vector<int32_t>() ==
        std::vector<int32_t>{std::numeric_limits<int32_t>::max()});

  // A fill is one value the caller chose: no integer stands for it, so it is refused, naming both.
  CHECK_THROWS_MATCHES(
      Tensor::full({2}, inf, DType::i64), TypeError,
      Catch::Message("fill: value inf is not representable as i64 (NaN, infinite or out of its range)"));
  CHECK_THROWS_AS(Tensor::full({2}, nan, DType::i32), TypeError);
  CHECK_THROWS_AS(Tensor::full({2}, -1.0, DType::u8), TypeError);
  CHECK_THROWS_AS(Tensor::full({2}, 256.0, DType::u8), TypeError);
  CHECK_THROWS_AS(Tensor::zeros({2}, DType::i32).fill_(2147483648.0), TypeError);
  CHECK_THROWS_AS(Tensor::full({2}, 9223372036854775808.0, DType::i64), TypeError);
  // The extremes of each range and truncated fractions still fill.
  CHECK(Tensor::full({1}, 255.5, DType::u8).to_vector<uint8_t>() == std::vector<uint8_t>{255});
  CHECK(Tensor::full({1}, -0.5, DType::u8).to_vector<uint8_t>() == std::vector<uint8_t>{0});
  CHECK(Tensor::full({1}, -2147483648.0, DType::i32).to_vector<int32_t>()[0] == std::numeric_limits<int32_t>::min());
  CHECK(Tensor::full({1}, -9223372036854775808.0, DType::i64).to_vector<int64_t>()[0] ==
        std::numeric_limits<int64_t>::min());
  CHECK(Tensor::full({1}, inf).to_vector<float>()[0] == std::numeric_limits<float>::infinity());  // floats take it
}

TEST_CASE("copy_ fills contiguous and strided destinations, converting dtype", "[core]") {
  Tensor destination = Tensor::zeros({3, 4});
  Tensor source = Tensor::from_vector<double>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {3, 4});
  destination.copy_(source);
  CHECK(destination.to_vector<double>() == source.to_vector<double>());

  // Into a transposed view: element [i][j] of the view is base[j][i].
  Tensor base = Tensor::zeros({4, 3});
  base.transpose(0, 1).copy_(source);
  CHECK(base.to_vector<float>() == std::vector<float>{1, 5, 9, 2, 6, 10, 3, 7, 11, 4, 8, 12});

  // Into a column slice (non-contiguous), leaving the rest untouched.
  Tensor grid = Tensor::full({3, 4}, -1.0, DType::f16);
  grid.slice(1, 1, 3).copy_(Tensor::from_vector<int32_t>({10, 11, 20, 21, 30, 31}, {3, 2}));
  CHECK(grid.to_vector<float>() == std::vector<float>{-1, 10, 11, -1, -1, 20, 21, -1, -1, 30, 31, -1});

  // Into a row slice (contiguous, at an offset).
  Tensor rows = Tensor::zeros({3, 2}, DType::i64);
  rows.slice(0, 1, 2).copy_(Tensor::from_vector<float>({5.0f, 6.0f}, {1, 2}));
  CHECK(rows.to_vector<int64_t>() == std::vector<int64_t>{0, 0, 5, 6, 0, 0});

  // From a strided source into a strided destination of the same storage's transpose.
  Tensor square = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
  Tensor target = Tensor::zeros({2, 2});
  target.transpose(0, 1).copy_(square.transpose(0, 1));
  CHECK(target.to_vector<float>() == square.to_vector<float>());

  CHECK_THROWS_AS(destination.copy_(Tensor::zeros({4, 3})), ShapeError);
  CHECK_THROWS_WITH(destination.copy_(Tensor::zeros({4, 3})),
                    Catch::Contains("copy_") && Catch::Contains("[3, 4]") && Catch::Contains("[4, 3]"));
}

TEST_CASE("fill_ writes every element and needs a contiguous tensor", "[core]") {
  for (DType dtype : kAllDTypes) {
    Tensor t = Tensor::empty({5, 3}, dtype);
    t.fill_(3.0);
    CHECK(t.to_vector<double>() == std::vector<double>(15, 3.0));
    t.zero_();
    CHECK(t.to_vector<double>() == std::vector<double>(15, 0.0));
  }
  Tensor t = Tensor::zeros({4, 4});
  t.slice(0, 1, 3).fill_(2.0);
  CHECK(t.to_vector<float>() == std::vector<float>{0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0});
  CHECK_THROWS_WITH(t.transpose(0, 1).fill_(1.0), Catch::Contains("contiguous"));
}

TEST_CASE("add_ accumulates with alpha and names both sides on mismatch", "[core]") {
  Tensor a = Tensor::from_vector<float>({1, 2, 3}, {3});
  a.add_(Tensor::from_vector<float>({10, 20, 30}, {3}), 0.5);
  CHECK(a.to_vector<float>() == std::vector<float>{6, 12, 18});
  Tensor half_precision = Tensor::ones({3}, DType::bf16);
  half_precision.add_(Tensor::ones({3}, DType::bf16), 2.0);
  CHECK(half_precision.to_vector<float>() == std::vector<float>(3, 3.0f));
  // A strided source is compacted first.
  Tensor matrix = Tensor::zeros({2, 2});
  matrix.add_(Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2}).transpose(0, 1));
  CHECK(matrix.to_vector<float>() == std::vector<float>{1, 3, 2, 4});

  CHECK_THROWS_AS(a.add_(Tensor::ones({4})), ShapeError);
  CHECK_THROWS_WITH(a.add_(Tensor::ones({4})),
                    Catch::Contains("add_") && Catch::Contains("[3]") && Catch::Contains("[4]"));
  CHECK_THROWS_AS(a.add_(Tensor::ones({3}, DType::f64)), TypeError);
  CHECK_THROWS_WITH(a.add_(Tensor::ones({3}, DType::f64)), Catch::Contains("f32") && Catch::Contains("f64"));
  CHECK_THROWS_AS(Tensor::ones({3}, DType::i32).add_(Tensor::ones({3}, DType::i32)), TypeError);
  CHECK_THROWS_WITH(matrix.transpose(0, 1).add_(Tensor::ones({2, 2})), Catch::Contains("contiguous"));
}

TEST_CASE("Tensor::add_converted_ adds another floating dtype as add_ of the converted tensor", "[core]") {
  const Tensor source = Tensor::from_vector<float>({0.1f, -3.3f, 1e-3f, 7.0f}, {4});
  for (DType source_dtype : {DType::bf16, DType::f16, DType::f64, DType::f32}) {
    Tensor a = Tensor::from_vector<float>({1.0f, 2.0f, 3.0f, 4.0f}, {4}), b = a.clone();
    const Tensor converted_source = source.to(source_dtype);
    a.add_converted_(converted_source);
    b.add_(converted_source.to(DType::f32));
    INFO(dtype_name(source_dtype));
    CHECK(a.to_vector<float>() == b.to_vector<float>());
  }
  Tensor wide = Tensor::zeros({4}, DType::f64);
  wide.add_converted_(source.to(DType::bf16)).add_converted_(source.to(DType::bf16));
  std::vector<double> twice = source.to(DType::bf16).to_vector<double>();
  for (double& value : twice) value *= 2.0;  // exact: bf16 values doubled in f64
  CHECK(wide.to_vector<double>() == twice);
  Tensor f32 = Tensor::zeros({4});
  CHECK_THROWS_AS(f32.add_converted_(Tensor::ones({4}, DType::i32)), TypeError);
  CHECK_THROWS_WITH(f32.add_converted_(Tensor::ones({4}, DType::i32)), Catch::Contains("floating"));
  CHECK_THROWS_AS(f32.add_converted_(Tensor::ones({5}, DType::bf16)), ShapeError);
}

TEST_CASE("check_same_* helpers name both sides", "[core]") {
  Tensor a = Tensor::zeros({2, 3});
  CHECK_THROWS_WITH(check_same_shape(a, Tensor::zeros({3}), "my_op"),
                    Catch::Contains("my_op") && Catch::Contains("[2, 3]") && Catch::Contains("[3]"));
  CHECK_THROWS_WITH(check_same_dtype(a, Tensor::zeros({2, 3}, DType::u8), "my_op"),
                    Catch::Contains("my_op") && Catch::Contains("f32") && Catch::Contains("u8"));
  CHECK_NOTHROW(check_same_device(a, Tensor::zeros({1}), "my_op"));
  if (cuda_device_count() > 0) {  // only where a GPU exists can two devices differ
    Tensor on_gpu = Tensor::zeros({2, 3}, DType::f32, Device(DeviceType::cuda, 0));
    CHECK_THROWS_AS(check_same_device(a, on_gpu, "my_op"), DeviceError);
    CHECK_THROWS_WITH(check_same_device(a, on_gpu, "my_op"),
                      Catch::Contains("my_op") && Catch::Contains("cpu") && Catch::Contains("cuda:0"));
    CHECK_THROWS_AS(a.add_(on_gpu), DeviceError);
  }
}

TEST_CASE("CPU storage is 64-byte aligned", "[core]") {
  for (int64_t count : {1, 3, 17, 64, 1000, 4097}) {
    for (DType dtype : {DType::u8, DType::f16, DType::f32, DType::f64}) {
      Tensor t = Tensor::empty({count}, dtype);
      CHECK(reinterpret_cast<uintptr_t>(t.data_ptr()) % kCpuAlignmentBytes == 0);
    }
  }
  Storage storage(5, kCPU);
  CHECK(reinterpret_cast<uintptr_t>(storage.data()) % 64 == 0);
  CHECK(storage.bytes() == 5);
}

TEST_CASE("CPU buffers of 8 MB and more are staggered past their 2 MB region boundary", "[core]") {
  const uintptr_t huge_page = uintptr_t{2} << 20;
  std::vector<Tensor> buffers;
  std::set<uintptr_t> offsets;  // within a 4 KB page
  for (int64_t megabytes : {8, 8, 8, 8, 9, 33}) {
    Tensor t = Tensor::zeros({megabytes << 18});  // fp32: 4 bytes each
    const auto address = reinterpret_cast<uintptr_t>(t.data_ptr());
    CHECK(address % kCpuAlignmentBytes == 0);
    CHECK(address % huge_page < 16 * 1024);  // a few lines past the boundary of its huge-page region
    offsets.insert(address % 4096);
    CHECK(t.to_vector<float>().back() == 0.0f);  // usable to its last byte
    t.data<float>()[t.numel() - 1] = 1.0f;
    t.data<float>()[0] = 2.0f;
    CHECK(t.to_vector<float>().back() == 1.0f);
    buffers.push_back(t);
  }
  // Buffers allocated one after another do not share their low address bits (a fused step streams them
  // together); freeing them (here, under the sanitizers in CI) returns each whole region.
  CHECK(offsets.size() >= 4);
  buffers.clear();
  Tensor small = Tensor::zeros({1000});
  CHECK(reinterpret_cast<uintptr_t>(small.data_ptr()) % kCpuAlignmentBytes == 0);
}

TEST_CASE("rehome moves the values into new storage and every handle follows", "[core]") {
  Tensor parameter = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  parameter.set_requires_grad(true);
  Tensor other_handle = parameter;  // shares the TensorImpl
  auto arena = std::make_shared<Storage>(64 * sizeof(float), kCPU);
  parameter.rehome(arena, 16);
  CHECK(other_handle.storage() == arena);
  CHECK(other_handle.offset() == 16);
  CHECK(other_handle.data_ptr() == static_cast<char*>(arena->data()) + 16 * sizeof(float));
  CHECK(other_handle.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(other_handle.requires_grad());
  // Writes through an arena view are seen through the parameter.
  Tensor::view_of(arena, 16, {6}, DType::f32).fill_(9.0);
  CHECK(parameter.to_vector<float>() == std::vector<float>(6, 9.0f));

  // A strided tensor becomes a contiguous view with its logical values.
  Tensor transposed = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}).transpose(0, 1);
  transposed.rehome(arena, 32);
  CHECK(transposed.is_contiguous());
  CHECK(transposed.shape() == Shape{3, 2});
  CHECK(transposed.to_vector<float>() == std::vector<float>{1, 4, 2, 5, 3, 6});

  auto small = std::make_shared<Storage>(4 * sizeof(float), kCPU);
  CHECK_THROWS_WITH(parameter.rehome(small, 0), Catch::Contains("[2, 3]") && Catch::Contains("16 bytes"));
  CHECK(parameter.storage() == arena);  // unchanged after the failure
  // A null storage was dereferenced (SIGSEGV).
  CHECK_THROWS_MATCHES(parameter.rehome(nullptr, 0), UsageError,
                       Catch::Message("rehome: null storage for a tensor of [2, 3]"));
  CHECK(parameter.storage() == arena);
}

TEST_CASE("set_grad refuses gradients of another dtype, shape, or layout, naming both", "[core]") {
  // Accepted before: .grad ended up f64 or i32 on an f32 tensor, or a strided view that backward then
  // failed to accumulate into.
  Tensor x = Tensor::ones({2, 2}).set_requires_grad(true);
  CHECK_THROWS_MATCHES(x.set_grad(Tensor::zeros({2, 2}, DType::f64)), TypeError,
                       Catch::Message("set_grad: gradient of dtype f64 for a f32 tensor (needs the tensor's own "
                                      "floating dtype)"));
  CHECK_THROWS_AS(x.set_grad(Tensor::zeros({2, 2}, DType::i32)), TypeError);
  CHECK_THROWS_MATCHES(x.set_grad(Tensor::zeros({2, 2}).transpose(0, 1)), ShapeError,
                       Catch::Message("set_grad: gradient of shape [2, 2] must be contiguous, got a strided view"));
  CHECK_THROWS_AS(x.set_grad(Tensor::zeros({4})), ShapeError);
  CHECK_FALSE(x.grad().defined());
  x.set_grad(Tensor::full({2, 2}, 1.0));
  x.set_grad(Tensor());  // clearing stays allowed
  CHECK_FALSE(x.grad().defined());
}

TEST_CASE("set_data points every handle at new data and keeps autograd fields", "[core]") {
  Tensor parameter = Tensor::zeros({2, 2}).set_requires_grad(true);
  parameter.set_name("layer.weight");
  parameter.set_grad(Tensor::ones({2, 2}));
  Tensor handle = parameter;
  Tensor replacement = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
  parameter.set_data(replacement);
  CHECK(handle.storage() == replacement.storage());
  CHECK(handle.to_vector<float>() == std::vector<float>{1, 2, 3, 4});
  CHECK(handle.requires_grad());
  CHECK(handle.name() == "layer.weight");
  CHECK(handle.grad().to_vector<float>() == std::vector<float>(4, 1.0f));
  CHECK_FALSE(handle.same(replacement));
}

TEST_CASE("detach shares data but drops autograd state", "[core]") {
  Tensor x = Tensor::ones({3}).set_requires_grad(true);
  Tensor detached = x.detach();
  CHECK(detached.storage() == x.storage());
  CHECK_FALSE(detached.requires_grad());
  CHECK(detached.is_leaf());
  CHECK_THROWS_WITH(Tensor::ones({3}, DType::i64).set_requires_grad(true), Catch::Contains("i64"));
  CHECK_THROWS_AS(x.set_grad(Tensor::ones({4})), ShapeError);
  x.set_sparse_grad(true);
  CHECK(x.sparse_grad());
}

TEST_CASE("Device::parse accepts cpu, cuda and cuda:N and names bad text", "[core]") {
  CHECK(Device::parse("cpu") == kCPU);
  CHECK(Device::parse("cuda") == Device(DeviceType::cuda, 0));
  CHECK(Device::parse("cuda:3") == Device(DeviceType::cuda, 3));
  CHECK(Device::parse("cuda:3").str() == "cuda:3");
  CHECK(Device::parse("cuda").str() == "cuda:0");
  CHECK(kCPU.str() == "cpu");
  CHECK(Device::parse("cuda:12").index == 12);
  for (const char* bad : {"gpu", "CPU", "cuda:", "cuda:-1", "cuda:x", "cuda:1a", "cuda:0:1", "", " cpu"}) {
    INFO("text '" << bad << "'");
    CHECK_THROWS_AS(Device::parse(bad), DeviceError);
    CHECK_THROWS_WITH(Device::parse(bad),
                      Catch::Contains(std::string("'") + bad + "'") && Catch::Contains("cpu, cuda, cuda:N"));
  }
}

TEST_CASE("moving to a CUDA device without one throws a clear DeviceError", "[core]") {
  Tensor t = Tensor::ones({4});
  CHECK(t.to(kCPU).same(t));
  if (cuda_device_count() > 0) {  // on a GPU machine the round trip must work instead
    Device gpu(DeviceType::cuda, 0);
    Tensor on_gpu = t.to(gpu);
    CHECK(on_gpu.device() == gpu);
    CHECK(on_gpu.to(kCPU).to_vector<float>() == std::vector<float>(4, 1.0f));
    Device missing(DeviceType::cuda, cuda_device_count());
    CHECK_THROWS_AS(t.to(missing), DeviceError);
    return;
  }
  Device gpu(DeviceType::cuda, 0);
  CHECK_FALSE(device_available(gpu));
  CHECK(device_available(kCPU));
  CHECK_THROWS_AS(t.to(gpu), DeviceError);
  CHECK_THROWS_WITH(t.to(gpu), Catch::Contains("cuda:0") && Catch::Contains("not available"));
  CHECK_THROWS_AS(Tensor::zeros({2}, DType::f32, gpu), DeviceError);
  // Even an empty tensor cannot claim to live on an absent device.
  CHECK_THROWS_AS(Tensor::zeros({0}, DType::f32, gpu), DeviceError);
  CHECK_THROWS_AS(Tensor::empty({0, 3}).to(gpu), DeviceError);
}
