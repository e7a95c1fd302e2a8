/*
 * sys.c: memory limits, fallible arena allocations and opening files
 * beneath a folder (sys.h). Everything that reads a size or a path from an
 * untrusted file calls these before it allocates or opens.
 */
#include "util/sys.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <unistd.h>

/* ---- memory ---- */

typedef enum { LIMIT_NONE, LIMIT_AS, LIMIT_DATA, LIMIT_MACHINE } limit_kind;

static int64_t limit_of(limit_kind *kind) {
  int64_t best = INT64_MAX;
  *kind = LIMIT_NONE;
  struct rlimit rl;
  if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
      (uint64_t)rl.rlim_cur < (uint64_t)best)
    best = (int64_t)rl.rlim_cur, *kind = LIMIT_AS;
  if (getrlimit(RLIMIT_DATA, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
      (uint64_t)rl.rlim_cur < (uint64_t)best)
    best = (int64_t)rl.rlim_cur, *kind = LIMIT_DATA;
  struct sysinfo si;
  if (sysinfo(&si) == 0) {
    uint64_t m = ((uint64_t)si.totalram + si.totalswap) * (si.mem_unit ? si.mem_unit : 1);
    if (m > 0 && m < (uint64_t)best) best = (int64_t)m, *kind = LIMIT_MACHINE;
  }
  return best;
}

int64_t mem_limit_bytes(void) {
  limit_kind k;
  return limit_of(&k);
}

/* The process's virtual size (/proc/self/statm), or 0 if unknown. */
static int64_t mapped_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "re");
  if (!f) return 0;
  unsigned long long pages = 0;
  int got = fscanf(f, "%llu", &pages);
  fclose(f);
  long ps = sysconf(_SC_PAGESIZE);
  return got == 1 && ps > 0 ? (int64_t)pages * ps : 0;
}

bool mem_fits(int64_t n) {
  limit_kind k;
  int64_t lim = limit_of(&k);
  if (n < 0) return false;
  if (k == LIMIT_AS) lim -= mapped_bytes();
  return n <= lim;
}

const char *str_bytes(int64_t n) {
  static _Thread_local char buf[2][32];
  static _Thread_local int which;
  char *b = buf[which ^= 1];
  static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (n < 1024) {
    snprintf(b, sizeof buf[0], "%lld bytes", (long long)n);
    return b;
  }
  double v = (double)n;
  int u = -1;
  while (v >= 1024 && u < 5) v /= 1024, u++;
  snprintf(b, sizeof buf[0], "%.1f %s", v, units[u]);
  return b;
}

const char *mem_limit_text(void) {
  static _Thread_local char buf[128];
  limit_kind k;
  int64_t lim = limit_of(&k);
  const char *why = k == LIMIT_AS     ? "ulimit -v"
                    : k == LIMIT_DATA ? "ulimit -d"
                                      : "the machine's memory and swap";
  if (k == LIMIT_NONE)
    snprintf(buf, sizeof buf, "castor cannot allocate that much memory");
  else
    snprintf(buf, sizeof buf, "more than castor may allocate (%s: %s)", why, str_bytes(lim));
  return buf;
}

_Noreturn void mem_out_of_memory(const char *what) {
  char buf[512];
  int n = snprintf(buf, sizeof buf, "castor: error: out of memory (%s); %s\n", what,
                   mem_limit_text());
  if (n > 0) (void)!write(2, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
  _exit(1);
}

/* ---- opening beneath a folder ---- */

/* Per-component walk: each component opened from the one before with
 * O_NOFOLLOW (a link: ELOOP; a directory opened O_DIRECTORY). */
static int open_walk(int dirfd, const char *path, int flags) {
  int cur = dirfd;
  const char *p = path;
  for (;;) {
    const char *e = strchr(p, '/');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    const char *rest = e ? e + 1 : p + n;
    while (*rest == '/') rest++;
    bool last = !*rest;
    char comp[NAME_MAX + 1];
    int next;
    if (n > NAME_MAX) {
      next = -1, errno = ENAMETOOLONG;
    } else {
      memcpy(comp, p, n);
      comp[n] = 0;
      next = openat(cur, n ? comp : ".",
                    last ? flags | O_NOFOLLOW : O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    int saved = errno;
    struct stat st; /* O_DIRECTORY is checked first: a link to a folder gives ENOTDIR */
    if (next < 0 && saved == ENOTDIR && fstatat(cur, comp, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISLNK(st.st_mode))
      saved = ELOOP;
    if (cur != dirfd) close(cur);
    if (next < 0 || last) return errno = saved, next;
    cur = next;
    p = rest;
  }
}

int file_open_beneath(int dirfd, const char *path, bool use_openat2) {
  if (!*path || path[0] == '/') return errno = EXDEV, -1;
  for (const char *p = path; *p;) { /* a component equal to "..": leaves or may leave */
    const char *e = strchr(p, '/');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    if (n == 2 && p[0] == '.' && p[1] == '.') return errno = EXDEV, -1;
    p += n + (e ? 1 : 0);
  }
  const int flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;
#ifdef SYS_openat2
  if (use_openat2) {
    struct open_how how = {.flags = (uint64_t)flags,
                           .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
    int fd = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof how);
    if (fd >= 0 || (errno != ENOSYS && errno != EPERM)) return fd;
  }
#endif
  return open_walk(dirfd, path, flags);
}
