// MXSIM_TEST_ASAN: defined when the tests (and the mxsim binary they run)
// are built with AddressSanitizer, whose shadow memory needs more address
// space than the tests' `ulimit -v` caps allow (those tests skip there).
#pragma once
#if defined(__SANITIZE_ADDRESS__)
#define MXSIM_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MXSIM_TEST_ASAN 1
#endif
#endif
