// Catch2 entry point for the opsnn test program (the one translation unit that defines main). Including
// <opsnn/opsnn.h> registers the built-in backends, optimizers, models and datasets before any test runs.
#include "opsnn/opsnn.h"

#if defined(OPSNN_CATCH2_MAJOR) && OPSNN_CATCH2_MAJOR >= 3
#include "support/catch.h"

int main(int argc, char* argv[]) { return Catch::Session().run(argc, argv); }
#else
#define CATCH_CONFIG_MAIN
#include "support/catch.h"
#endif
