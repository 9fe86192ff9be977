/* The C interface between gpool's emulated GPU backend and a plugin of CPU kernels.
 *
 * A plugin is a shared library that exports
 *     const gpool_emu_kernel* gpool_emulated_kernels(size_t* count);
 * returning a table of CPU implementations keyed by the kernel's mangled device name (as
 * __cudaRegisterFunction reports it, e.g. "_Z9vectorAddPKfS0_Pfi"). The server calls an entry
 * once per launch with the whole grid: the implementation loops over blocks and threads itself.
 * Parameters arrive packed exactly as the GPU would see them (at the offsets of the kernel's
 * parameter layout), so structs by value are byte-exact. Device pointers are host pointers in the
 * server's worker. A kernel returns 0, or non-zero after writing a message to `error`, which the
 * program sees as cudaErrorLaunchFailure at its next synchronizing call.
 * Thread safety: kernels of one session run one at a time on its worker thread. */
#ifndef GPOOL_REMOTE_SERVER_EMULATED_KERNELS_H_
#define GPOOL_REMOTE_SERVER_EMULATED_KERNELS_H_

#include <stddef.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpool_emu_dim3 {
  unsigned x, y, z;
} gpool_emu_dim3;

typedef struct gpool_emu_launch {
  gpool_emu_dim3 grid, block;
  unsigned shared_mem;
  const unsigned char* params;     /* packed parameter buffer */
  const unsigned* param_offsets;   /* offset of parameter i in params */
  const unsigned* param_sizes;
  unsigned param_count;
  /* Address of a __device__ or __constant__ variable of the kernel's module, or NULL. */
  void* (*symbol)(void* ctx, const char* name);
  void* ctx;
  char* error;
  size_t error_capacity;
} gpool_emu_launch;

typedef int (*gpool_emu_kernel_fn)(const gpool_emu_launch* launch);

typedef struct gpool_emu_kernel {
  const char* name; /* mangled device name */
  gpool_emu_kernel_fn fn;
} gpool_emu_kernel;

typedef const gpool_emu_kernel* (*gpool_emulated_kernels_fn)(size_t* count);

#ifdef __cplusplus
}  /* extern "C" */

/* Reads parameter i as T (memcpy: parameters need not be aligned for T in the buffer). */
template <typename T>
inline T gpool_emu_param(const gpool_emu_launch* l, unsigned i) {
  T v{};
  if (i < l->param_count && l->param_sizes[i] == sizeof(T)) {
    memcpy(&v, l->params + l->param_offsets[i], sizeof(T));
  }
  return v;
}
#endif

#endif  /* GPOOL_REMOTE_SERVER_EMULATED_KERNELS_H_ */
