// Which sanitizer this binary was built with (scripts/sanitize, scripts/fuzz), decided once for
// the code whose behaviour a sanitizer changes. Header only; GCC and clang spell it differently.
#ifndef TS_COMMON_SANITIZERS_H_
#define TS_COMMON_SANITIZERS_H_

#if defined(__SANITIZE_ADDRESS__)
#define TS_ADDRESS_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TS_ADDRESS_SANITIZER 1
#endif
#endif

#if defined(__SANITIZE_THREAD__)
#define TS_THREAD_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TS_THREAD_SANITIZER 1
#endif
#endif

namespace ts {

// AddressSanitizer reserves its shadow memory (terabytes of address space) when a process
// starts, and keeps freed memory in quarantine: an address-space limit (RLIMIT_AS) kills such a
// process before main, and its resident size says little about the code's own use.
#ifdef TS_ADDRESS_SANITIZER
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif

// ThreadSanitizer likewise maps a shadow of the whole address space.
#ifdef TS_THREAD_SANITIZER
inline constexpr bool kThreadSanitizer = true;
#else
inline constexpr bool kThreadSanitizer = false;
#endif

}  // namespace ts

#endif  // TS_COMMON_SANITIZERS_H_
