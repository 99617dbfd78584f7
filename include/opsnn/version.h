// The opsnn version and the source revision this library was built from, for records that must say what
// produced them (metrics.jsonl's summary, opsnn-experiment's results).
#pragma once

namespace opsnn {

// The project version from CMakeLists.txt ("0.1.0").
const char* version();
// `git describe --always --dirty` of the source tree at build time (a commit, "-dirty" when tracked files
// had changes), refreshed on every build; "unknown" when the sources are not a git checkout.
const char* git_revision();

}  // namespace opsnn
