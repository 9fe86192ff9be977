// The samples' EXPECT: a failed condition is printed with its place and the program exits 1,
// so tests and scripts/gpu-check.sh see which check failed (common.h, driver_check.h).
#pragma once
#include <cstdio>
#include <cstdlib>

#define EXPECT(cond)                                                                  \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);        \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)
