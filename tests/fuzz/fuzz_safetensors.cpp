// libFuzzer target: the safetensors decoder (opsnn::train::decode_safetensors). An accepted file must
// encode back to the same tensors (the reader checks every offset, so nothing it accepts is unreadable).
#include <stdexcept>
#include <string>

#include "fuzz_support.h"
#include "opsnn/train/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  opsnn::train::SafetensorsContents contents;
  if (!opsnn::fuzz::expect_clean_refusal(
          [&] { contents = opsnn::train::decode_safetensors(opsnn::fuzz::as_text(data, size), "fuzz.safetensors"); }))
    return 0;
  // What the decoder accepted encodes again, and that encoding decodes to the same tensors.
  opsnn::fuzz::expect_success([&] {
    const std::string again = opsnn::train::encode_safetensors(contents.tensors, contents.metadata);
    const opsnn::train::SafetensorsContents reread = opsnn::train::decode_safetensors(again, "fuzz-encoded");
    if (reread.tensors.size() != contents.tensors.size() || reread.metadata != contents.metadata)
      throw std::runtime_error("the re-encoded file decodes differently");
    if (opsnn::train::encode_safetensors(reread.tensors, reread.metadata) != again)
      throw std::runtime_error("encoding is not stable");
  });
  return 0;
}
