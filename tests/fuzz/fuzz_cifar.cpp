// libFuzzer target: the CIFAR record reader (opsnn::data::decode_cifar_records). The first input byte
// picks the variant (bit 0: CIFAR-100, else CIFAR-10) and the record count the file must hold (the other
// 7 bits, 0-127); the rest is the file.
#include <span>

#include "fuzz_support.h"
#include "opsnn/data/cifar.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const auto variant = mode & 1 ? opsnn::data::CifarVariant::cifar100 : opsnn::data::CifarVariant::cifar10;
  const int64_t expected = mode >> 1;
  const std::span<const uint8_t> file(data + 1, size - 1);
  opsnn::fuzz::expect_clean_refusal([&] {
    const opsnn::data::CifarRecords records = opsnn::data::decode_cifar_records(file, "fuzz.bin", variant, expected);
    // The reader promises exactly the expected records, labels below the class counts.
    if (records.count != expected || records.labels.size() != static_cast<size_t>(expected) ||
        records.pixels.size() != static_cast<size_t>(expected * opsnn::data::kCifarImageBytes))
      __builtin_trap();
    for (uint8_t label : records.labels)
      if (label >= opsnn::data::cifar_num_classes(variant)) __builtin_trap();
    for (uint8_t label : records.coarse_labels)
      if (label >= 20) __builtin_trap();
  });
  return 0;
}
