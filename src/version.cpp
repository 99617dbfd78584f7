// opsnn::version() (opsnn/version.h); git_revision() is generated at build time (third_party/cmake/git_revision.cmake).
#include "opsnn/version.h"

const char* opsnn::version() { return OPSNN_VERSION; }
