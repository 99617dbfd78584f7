// Whether this test binary runs under AddressSanitizer (the -DOPSNN_SANITIZE / OPSNN_FUZZ build). Its
// allocator ends the process on a request larger than it supports instead of throwing std::bad_alloc,
// so the few tests that check how a library call reports an impossible allocation skip that check there.
#pragma once

namespace opsnn::testing {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif
#else
inline constexpr bool kAddressSanitizer = false;
#endif

}  // namespace opsnn::testing
