/*
 * LD_PRELOAD shim for the bench's "alloc" section: PHP's allocator grows large blocks as it does
 * on Windows, where the published php-curl study saw RETURNTRANSFER downloads slow down as files
 * grew.
 *
 * Zend MM keeps a large string (a RETURNTRANSFER body) in a mapping of its own. On Linux it grows
 * it in place with mremap() (no MREMAP_MAYMOVE), so appending is cheap at any size. On Windows it
 * cannot grow a block in place; it sizes blocks in 2 MiB steps instead and, when the string
 * outgrows one, allocates a new block and copies the whole string into it (zend_alloc.c,
 * zend_mm_alloc_huge and zend_mm_realloc_huge). Here mremap() may grow a mapping in place only
 * within its 2 MiB step; past it, it fails, and Zend MM takes the same allocate-and-copy path.
 * Every other call is passed through unchanged.
 *
 * Built by bench/lib/alloc.js: cc -O2 -shared -fPIC -o no-inplace-growth.so no-inplace-growth.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/types.h>

#define STEP ((size_t)2 << 20)
#define STEPS(n) (((n) + STEP - 1) / STEP)

void *mremap (void *old, size_t old_size, size_t new_size, int flags, ...)
{
  static void *(*real)(void *, size_t, size_t, int, ...);
  if (!real) real = (void *(*)(void *, size_t, size_t, int, ...))dlsym(RTLD_NEXT, "mremap");
  if (!(flags & MREMAP_MAYMOVE) && STEPS(new_size) > STEPS(old_size)) {
    errno = ENOMEM; /* growing in place past the 2 MiB step: refused */
    return MAP_FAILED;
  }
  va_list ap;
  va_start(ap, flags);
  void *to = (flags & MREMAP_FIXED) ? va_arg(ap, void *) : NULL;
  va_end(ap);
  return real(old, old_size, new_size, flags, to);
}
