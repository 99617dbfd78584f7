// Tests of tools/profile_categories.py on a generated Nsight Compute CSV: kernels land in their op
// categories with their summed time and share, largest first; a file without ncu's header is refused
// with exit 2. Returns early with a note where no python3 is found.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "support/catch.h"
#include "support/run_program.h"
#include "support/temporary_folder.h"

TEST_CASE("profile_categories.py: ncu kernel times summed per op category, a non-ncu file refused", "[tools]") {
  if (std::system("python3 -c 'import csv' > /dev/null 2>&1") != 0) {
    WARN("skipped: no python3");
    return;
  }
  opsnn::testing::TemporaryFolder folder("opsnn-profile-categories-test");
  const std::string script = std::string(OPSNN_SOURCE_DIR) + "/tools/profile_categories.py";
  {
    // What ncu prints: its own lines, the header, a units row, then one row per kernel ("1,500" style).
    std::ofstream csv(folder.path / "ncu.csv");
    csv << "==PROF== Connected to process 1\n"
        << "\"ID\",\"Kernel Name\",\"gpu__time_duration.sum\"\n"
        << "\"\",\"\",\"nsecond\"\n"
        << "\"0\",\"void norm::row_moments_kernel<opsnn::BFloat16, 8>(const T1 *)\",\"3,000\"\n"
        << "\"1\",\"sm90_xmma_fprop_implicit_gemm_bf16bf16\",\"1,000\"\n"
        << "\"2\",\"void norm::row_moments_kernel<opsnn::BFloat16, 8>(const T1 *)\",\"2,000\"\n"
        << "\"3\",\"void optim::sgd_kernel<float, float, NoCopy>(optim::FusedBuffers)\",\"4,000\"\n"
        << "\"4\",\"mystery_kernel\",\"10,000\"\n"
        << "\"5\",\"void opsnn::cuda::pooled_grad_input_kernel<opsnn::BFloat16>(const T1 *)\",\"500\"\n";
    std::ofstream(folder.path / "not_ncu.csv") << "a,b,c\n1,2,3\n";
  }
  opsnn::testing::Outcome table = opsnn::testing::run_program("python3", {script, "ncu.csv"}, folder.path);
  INFO(table.output);
  REQUIRE(table.exit_code == 0);
  // 20.5 us in all: 10 + 5 + 4 + 1 + 0.5.
  const size_t other = table.output.find("| other (loss, workspace set-up, small reductions) | 1 | 0.01 | 48.8% |");
  const size_t statistics = table.output.find("| batch norm forward statistics | 2 | 0.01 | 24.4% |");
  const size_t optimizer = table.output.find("| optimizer step | 1 | 0.00 | 19.5% |");
  const size_t forward = table.output.find("| convolution forward (cuDNN) | 1 | 0.00 | 4.9% |");
  // The fused stem's input-gradient pass has its own category, not batch norm's input gradient.
  const size_t stem = table.output.find("| stem batch norm + relu + max pool (fused) | 1 | 0.00 | 2.4% |");
  REQUIRE(other != std::string::npos);
  REQUIRE(statistics != std::string::npos);
  REQUIRE(optimizer != std::string::npos);
  REQUIRE(forward != std::string::npos);
  REQUIRE(stem != std::string::npos);
  CHECK((other < statistics && statistics < optimizer && optimizer < forward && forward < stem));  // largest first
  CHECK(table.output.find("| total | 6 | 0.02 | 100% |") != std::string::npos);

  opsnn::testing::Outcome refused = opsnn::testing::run_program("python3", {script, "not_ncu.csv"}, folder.path);
  INFO(refused.output);
  REQUIRE(refused.exit_code == 2);
  REQUIRE(refused.output.find("not_ncu.csv has no ncu header with gpu__time_duration.sum") != std::string::npos);
}
