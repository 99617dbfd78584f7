// The image decoders (src/data/image_decode.cpp) against Pillow: tests/golden/images/ holds small PNG and
// JPEG files and golden.json what Pillow decodes each to after .convert("RGB") (tools/gen_golden_images.py,
// run on the GPU machine, which has Pillow). PNG must match exactly; JPEG within 1 per channel (both use
// libjpeg-turbo's accurate integer IDCT and fancy upsampling).
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/image_decode.h"
#include "support/catch.h"
#include "support/image_files.h"

using namespace opsnn::data;

TEST_CASE("image decode golden: PNG and JPEG files decode as Pillow decodes them", "[data][image]") {
  const std::string folder = std::string(OPSNN_GOLDEN_DIR) + "/images/";
  std::ifstream file(folder + "golden.json");
  REQUIRE(file.good());
  const nlohmann::json golden = nlohmann::json::parse(file);
  int cases = 0;
  for (const auto& [name, expected] : golden.at("cases").items()) {
    INFO(name << " (Pillow mode " << expected.at("mode").get<std::string>() << ")");
    const std::vector<uint8_t> bytes = opsnn::testing::read_bytes(folder + name);
    REQUIRE_FALSE(bytes.empty());
    const RgbImage image = decode_image(bytes, name);  // full size: no DCT scaling
    REQUIRE(image.width == expected.at("width").get<int64_t>());
    REQUIRE(image.height == expected.at("height").get<int64_t>());
    const std::vector<int> rgb = expected.at("rgb").get<std::vector<int>>();
    REQUIRE(image.pixels.size() == rgb.size());
    const bool jpeg = name.size() > 4 && name.substr(name.size() - 4) == ".jpg";
    int worst = 0;
    for (size_t i = 0; i < rgb.size(); ++i) worst = std::max(worst, std::abs(int(image.pixels[i]) - rgb[i]));
    CHECK(worst <= (jpeg ? 1 : 0));
    ++cases;
  }
  CHECK(cases >= 11);
}
