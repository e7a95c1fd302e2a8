/*
 * sys.h: what castor asks of the operating system about untrusted input,
 * beside util.h: whether a size a file states fits the memory castor may
 * use (checked before it is allocated), an arena allocation that fails
 * instead of aborting, and opening a file beneath a folder without
 * following links and without blocking (external data beside a model).
 * Linux: openat2 where the kernel has it, per-component O_NOFOLLOW opens
 * where it does not.
 */
#ifndef CASTOR_UTIL_SYS_H
#define CASTOR_UTIL_SYS_H

#include "util/util.h"

/* The bytes castor may allocate in all: the smallest of the address-space
 * and data-segment limits (RLIMIT_AS, RLIMIT_DATA: `ulimit -v`, `ulimit
 * -d`) and the machine's memory and swap (sysinfo); INT64_MAX when none is
 * known. Read anew at each call (a test lowers the limit). */
int64_t mem_limit_bytes(void);
/* Whether n bytes (n >= 0) fit that limit, less what the process already
 * maps (its virtual size) where the limit is an address-space one. */
bool mem_fits(int64_t n);
/* "castor may allocate at most 1.0 GiB here (ulimit -v)" or "... (the
 * machine's memory and swap)": the end of an out-of-memory message
 * (static storage, this thread's). */
const char *mem_limit_text(void);
/* "1.0 TiB", "512 MiB", "17 bytes" (static storage, this thread's; two
 * buffers, so two calls may share one message). */
const char *str_bytes(int64_t n);

/* The end of a process that ran out of memory where no error can be
 * returned (xmalloc, an arena, LLVM's allocation failure handlers): writes
 * "castor: error: out of memory (WHAT); <mem_limit_text>" to stderr with
 * no allocation and ends the process with status 1 (_exit: no exit
 * handlers, which might allocate or find LLVM mid-compile). Never SIGABRT:
 * running out of memory is the user's limit, not castor's bug. */
_Noreturn void mem_out_of_memory(const char *what);

/* arena_alloc_aligned, or NULL when the memory is not there (the arena
 * unchanged): for sizes a file states, which must be an error, not an
 * abort. */
void *arena_try_alloc_aligned(arena *a, size_t n, size_t align);

/* Opens path (relative) beneath the directory dirfd for reading: no
 * symbolic link is followed on the way, not even one that stays inside;
 * a '..' component, an absolute path or a magic link is refused; the open
 * never blocks (O_NONBLOCK: a FIFO or a device opens at once, and the
 * caller's fstat refuses what is not a regular file). Returns the
 * descriptor (O_CLOEXEC), or -1 with errno: ELOOP for a link, EXDEV for a
 * path that leaves dirfd. use_openat2 false takes the fallback of kernels
 * without openat2 (per-component openat with O_NOFOLLOW), which tests run
 * directly. */
int file_open_beneath(int dirfd, const char *path, bool use_openat2);

#endif
