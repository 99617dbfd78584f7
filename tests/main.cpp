// Catch2 entry point for the opsnn test program (the one translation unit that defines main).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
