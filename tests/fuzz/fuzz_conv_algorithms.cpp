// libFuzzer target: the convolution-choice file conv_algorithms.json (opsnn::ops::load_conv_algorithms).
// In the fuzzing build there is no GPU backend, so every entry is parsed and validated, then counted.
#include "fuzz_support.h"
#include "opsnn/ops/backend.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  opsnn::fuzz::expect_clean_refusal(
      [&] { opsnn::ops::load_conv_algorithms(opsnn::fuzz::as_text(data, size), "conv_algorithms.json"); });
  return 0;
}
