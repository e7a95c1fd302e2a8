/*
 * util.c: arena, heap helpers, string buffers, checked size arithmetic, the
 * seeded PRNG and the one hash map. See util.h for the contracts.
 */
#include "util/util.h"
#include "util/sys.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

void castor_assert_fail(const char *expr, const char *file, int line) {
  fprintf(stderr, "castor: internal error: %s:%d: assertion '%s' failed\n", file, line, expr);
  abort();
}

static void *check_alloc(void *p) {
  if (!p) mem_out_of_memory("malloc");
  return p;
}

void *xmalloc(size_t n) { return check_alloc(malloc(n ? n : 1)); }
void *xcalloc(size_t n, size_t size) { return check_alloc(calloc(n ? n : 1, size ? size : 1)); }
void *xrealloc(void *p, size_t n) { return check_alloc(realloc(p, n ? n : 1)); }
char *xstrdup(const char *s) {
  size_t n = strlen(s) + 1;
  return memcpy(xmalloc(n), s, n);
}

/* ---- arena ----
 * A list of blocks; small requests are carved from the current block, large
 * ones (over a quarter block) get a block of their own so weights of tens of
 * megabytes do not waste a block's tail. Blocks of ARENA_MAPPED bytes and
 * more (weights: a compile converts and packs tens of megabytes) are
 * mappings of their own: fresh pages are zero, so they need no memset (a
 * pass over every byte, and the page faults before the data's own pass).
 * Their data starts on a 2 MiB boundary, so that a kernel that gives
 * transparent huge pages unasked (enabled=always) can. They do not ask
 * (madvise MADV_HUGEPAGE): under the common defrag=madvise, about half of
 * the seed MLP's compiles then stalled 95-180 ms in direct compaction
 * (bench/results/compile-2026-11-26.md). */

enum { ARENA_BLOCK = 64 * 1024 };
#define ARENA_MAPPED ((size_t)2 << 20)
#define ARENA_HUGE ((size_t)2 << 20)

typedef struct arena_block {
  struct arena_block *next;
  size_t used, size;
  _Alignas(16) unsigned char data[];
} arena_block;

typedef struct arena_mapping {
  struct arena_mapping *next;
  size_t len; /* of the mapping, this header included */
} arena_mapping;

struct arena {
  arena_block *head;     /* current small-object block */
  arena_block *big;      /* dedicated blocks */
  arena_mapping *mapped; /* dedicated mappings (ARENA_MAPPED and up) */
  size_t total;
};

arena *arena_create(void) { return xcalloc(1, sizeof(arena)); }

static void free_blocks(arena_block *b) {
  while (b) {
    arena_block *n = b->next;
    free(b);
    b = n;
  }
}

void arena_reset(arena *a) {
  free_blocks(a->head);
  free_blocks(a->big);
  a->head = a->big = NULL;
  for (arena_mapping *m = a->mapped, *next; m; m = next) {
    next = m->next;
    munmap(m, m->len);
  }
  a->mapped = NULL;
  a->total = 0;
}

void arena_destroy(arena *a) {
  if (!a) return;
  arena_reset(a);
  free(a);
}

/* may_fail: NULL (the arena unchanged) instead of an abort when the
 * memory is not there (arena_try_alloc_aligned, sys.h). */
static void *arena_alloc_impl(arena *a, size_t n, size_t align, bool may_fail) {
  CASTOR_ASSERT(align && (align & (align - 1)) == 0 && align <= 4096);
  if (n == 0) n = 1;
  if (n >= ARENA_MAPPED) {
    /* the header in the first page, the data from the next 2 MiB boundary */
    if (n > SIZE_MAX / 2) return may_fail ? NULL : check_alloc(NULL);
    size_t len = n + ARENA_HUGE + sizeof(arena_mapping);
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return may_fail ? NULL : check_alloc(NULL);
    a->total += n;
    arena_mapping *h = m;
    h->len = len;
    h->next = a->mapped;
    a->mapped = h;
    uintptr_t p = ((uintptr_t)(h + 1) + ARENA_HUGE - 1) & ~(uintptr_t)(ARENA_HUGE - 1);
    return (void *)p; /* zero: fresh pages */
  }
  if (n + align > ARENA_BLOCK / 4) {
    arena_block *b = malloc(sizeof(arena_block) + n + align);
    if (!b) return may_fail ? NULL : check_alloc(NULL);
    a->total += n;
    b->next = a->big;
    a->big = b;
    uintptr_t p = ((uintptr_t)b->data + align - 1) & ~(uintptr_t)(align - 1);
    memset((void *)p, 0, n);
    return (void *)p;
  }
  a->total += n;
  arena_block *b = a->head;
  if (b) {
    uintptr_t p = ((uintptr_t)b->data + b->used + align - 1) & ~(uintptr_t)(align - 1);
    if (p + n <= (uintptr_t)b->data + b->size) {
      b->used = p + n - (uintptr_t)b->data;
      memset((void *)p, 0, n);
      return (void *)p;
    }
  }
  b = xmalloc(sizeof(arena_block) + ARENA_BLOCK);
  b->next = a->head;
  b->size = ARENA_BLOCK;
  a->head = b;
  uintptr_t p = ((uintptr_t)b->data + align - 1) & ~(uintptr_t)(align - 1);
  b->used = p + n - (uintptr_t)b->data;
  memset((void *)p, 0, n);
  return (void *)p;
}

void *arena_alloc_aligned(arena *a, size_t n, size_t align) {
  return arena_alloc_impl(a, n, align, false);
}

void *arena_try_alloc_aligned(arena *a, size_t n, size_t align) {
  return arena_alloc_impl(a, n, align, true);
}

void *arena_alloc(arena *a, size_t n) { return arena_alloc_aligned(a, n, 16); }

char *arena_strndup(arena *a, const char *s, size_t n) {
  char *d = arena_alloc_aligned(a, n + 1, 1);
  memcpy(d, s, n);
  d[n] = 0;
  return d;
}

char *arena_strdup(arena *a, const char *s) { return arena_strndup(a, s, strlen(s)); }

char *arena_printf(arena *a, const char *fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  CASTOR_ASSERT(n >= 0);
  char *d = arena_alloc_aligned(a, (size_t)n + 1, 1);
  vsnprintf(d, (size_t)n + 1, fmt, ap2);
  va_end(ap2);
  return d;
}

size_t arena_bytes_used(const arena *a) { return a->total; }

/* ---- str_buf ---- */

void str_buf_init(str_buf *b) { b->data = NULL, b->len = b->cap = 0; }
void str_buf_fini(str_buf *b) {
  free(b->data);
  str_buf_init(b);
}
void str_buf_clear(str_buf *b) {
  b->len = 0;
  if (b->data) b->data[0] = 0;
}

static void str_buf_reserve(str_buf *b, size_t extra) {
  if (b->len + extra + 1 <= b->cap) return;
  size_t cap = b->cap ? b->cap : 64;
  while (cap < b->len + extra + 1) cap *= 2;
  b->data = xrealloc(b->data, cap);
  b->cap = cap;
}

void str_buf_append(str_buf *b, const char *s, size_t n) {
  str_buf_reserve(b, n);
  memcpy(b->data + b->len, s, n);
  b->len += n;
  b->data[b->len] = 0;
}
void str_buf_puts(str_buf *b, const char *s) { str_buf_append(b, s, strlen(s)); }
void str_buf_putc(str_buf *b, char c) { str_buf_append(b, &c, 1); }

void str_buf_vprintf(str_buf *b, const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  CASTOR_ASSERT(n >= 0);
  str_buf_reserve(b, (size_t)n);
  vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap2);
  va_end(ap2);
  b->len += (size_t)n;
}

void str_buf_printf(str_buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  str_buf_vprintf(b, fmt, ap);
  va_end(ap);
}

const char *str_buf_cstr(str_buf *b) { return b->data ? b->data : ""; }

char *str_buf_take(str_buf *b) {
  char *d = b->data ? b->data : xstrdup("");
  str_buf_init(b);
  return d;
}

bool str_eq(const char *a, const char *b) { return a && b && strcmp(a, b) == 0; }

size_t str_utf8_len(const void *p, size_t avail) {
  const unsigned char *s = p;
  unsigned c = s[0], cp, min;
  size_t n;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) n = 2, cp = c & 0x1f, min = 0x80;
  else if (c >= 0xe0 && c <= 0xef) n = 3, cp = c & 0x0f, min = 0x800;
  else if (c >= 0xf0 && c <= 0xf4) n = 4, cp = c & 0x07, min = 0x10000;
  else return 0;
  if (avail < n) return 0;
  for (size_t i = 1; i < n; i++) {
    if ((s[i] & 0xc0) != 0x80) return 0;
    cp = cp << 6 | (s[i] & 0x3f);
  }
  return cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff) ? 0 : n;
}

int str_edit_distance(const char *a, size_t na, const char *b, size_t nb) {
  int row[64];
  if (na > 63 || nb > 63) return 1 << 20;
  for (size_t j = 0; j <= nb; j++) row[j] = (int)j;
  for (size_t i = 1; i <= na; i++) {
    int diag = row[0];
    row[0] = (int)i;
    for (size_t j = 1; j <= nb; j++) {
      int up = row[j], best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      diag = up;
    }
  }
  return row[nb];
}

bool str_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

const char *str_opt_arg(int argc, char **argv, int *i, const char *name, bool *missing) {
  const char *a = argv[*i];
  size_t n = strlen(name);
  if (strncmp(a, name, n) != 0) return NULL;
  if (a[n] == '=') return a + n + 1;
  if (a[n] != 0) return NULL;
  if (*i + 1 >= argc) {
    *missing = true;
    return NULL;
  }
  return argv[++*i];
}
bool str_has_prefix(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

bool str_read_file(const char *path, char **out_data, size_t *out_len) {
  struct stat st;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
    errno = EISDIR;
    return false;
  }
  FILE *f = fopen(path, "rb");
  if (!f) return false;
  str_buf b;
  str_buf_init(&b);
  char chunk[65536];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) str_buf_append(&b, chunk, n);
  int err = ferror(f);
  fclose(f);
  if (err) {
    str_buf_fini(&b);
    errno = EIO;
    return false;
  }
  *out_len = b.len;
  *out_data = str_buf_take(&b);
  return true;
}

const char *str_file_kind(unsigned mode) {
  switch (mode & S_IFMT) {
  case S_IFREG: return "a regular file";
  case S_IFDIR: return "a directory";
  case S_IFCHR: return "a character device";
  case S_IFBLK: return "a block device";
  case S_IFIFO: return "a pipe";
  case S_IFSOCK: return "a socket";
  default: return "not a file";
  }
}

/* "it has N bytes, more than the limit of M (64 MiB)"; have < 0: a pipe
 * that went on past the limit. */
static void too_big(str_buf *why, int64_t have, int64_t max) {
  if (have >= 0) str_buf_printf(why, "it has %lld bytes, more than the limit of %lld", (long long)have, (long long)max);
  else str_buf_printf(why, "it holds more than the limit of %lld bytes", (long long)max);
  if (max >= 1 << 20 && max % (1 << 20) == 0) str_buf_printf(why, " (%lld MiB)", (long long)(max >> 20));
}

bool str_read_fd_max(int fd, int64_t max_bytes, char **out_data, size_t *out_len, str_buf *why) {
  struct stat st;
  if (fstat(fd, &st) != 0) {
    str_buf_puts(why, strerror(errno));
    return false;
  }
  if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode)) {
    str_buf_printf(why, "not a regular file (%s)", str_file_kind((unsigned)st.st_mode));
    return false;
  }
  if (S_ISREG(st.st_mode) && st.st_size > max_bytes) {
    too_big(why, (int64_t)st.st_size, max_bytes);
    return false;
  }
  /* A regular file may still grow while it is read, and a pipe has no size:
   * either way reading stops one chunk past the limit. */
  str_buf b;
  str_buf_init(&b);
  char chunk[65536];
  for (;;) {
    ssize_t n = read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      str_buf_puts(why, strerror(errno));
      str_buf_fini(&b);
      return false;
    }
    if (n == 0) break;
    if ((int64_t)(b.len + (size_t)n) > max_bytes) {
      too_big(why, -1, max_bytes);
      str_buf_fini(&b);
      return false;
    }
    str_buf_append(&b, chunk, (size_t)n);
  }
  *out_len = b.len;
  *out_data = str_buf_take(&b);
  return true;
}

bool str_read_file_max(const char *path, int64_t max_bytes, char **out_data, size_t *out_len,
                       str_buf *why) {
  /* O_NONBLOCK: opening a FIFO with no writer, or a device, must not hang;
   * it is cleared again before a pipe is read. */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    str_buf_puts(why, strerror(errno));
    return false;
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  bool ok = str_read_fd_max(fd, max_bytes, out_data, out_len, why);
  close(fd);
  return ok;
}

/* ---- checked arithmetic ---- */

bool size_mul_ok(int64_t a, int64_t b, int64_t *out) {
  return !__builtin_mul_overflow(a, b, out) && *out >= 0;
}
bool size_add_ok(int64_t a, int64_t b, int64_t *out) {
  return !__builtin_add_overflow(a, b, out) && *out >= 0;
}

/* ---- rng ---- */

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void rng_init(rng *r, uint64_t seed) {
  for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t rng_next(rng *r) {
  uint64_t *s = r->s;
  uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0], s[3] ^= s[1], s[1] ^= s[2], s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

double rng_uniform(rng *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; }

float rng_uniform_f32(rng *r, float lo, float hi) {
  return (float)(lo + (hi - lo) * rng_uniform(r));
}

uint64_t str_hash(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
  return h;
}

/* ---- hmap: open addressing, linear probing, a power-of-two table at most
 * half full that doubles when an insert would pass that. String keys hash
 * with FNV-1a over their bytes (str_hash's function, which must not change:
 * it seeds weights), pointer keys with murmur3's fmix64 so that nearby
 * addresses spread. Each slot keeps its key's hash, so growing rehashes
 * nothing and probes compare the hash before the bytes. ---- */

static uint64_t hash_bytes(const char *s, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
  return h;
}

static uint64_t hash_ptr(const void *p) {
  uint64_t x = (uint64_t)(uintptr_t)p;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

void hmap_init(hmap *m, hmap_keys keys) { *m = (hmap){.keys = keys}; }

void hmap_fini(hmap *m) {
  free(m->slots);
  m->slots = NULL;
  m->cap = m->len = 0;
}

static bool key_eq(const hmap *m, const hmap_slot *e, const void *key, size_t len, uint64_t h) {
  if (e->hash != h) return false;
  if (m->keys == HMAP_POINTERS) return e->key == key;
  return e->len == len && memcmp(e->key, key, len) == 0;
}

/* The slot that holds the key, or the empty slot where it would go. */
static hmap_slot *find(const hmap *m, const void *key, size_t len, uint64_t h) {
  size_t mask = m->cap - 1;
  for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
    hmap_slot *e = &m->slots[i];
    if (!e->key || key_eq(m, e, key, len, h)) return e;
  }
}

void hmap_reserve(hmap *m, size_t n) {
  if (2 * n < m->cap) return;
  size_t cap = m->cap ? m->cap : 16;
  while (2 * n >= cap) cap *= 2;
  hmap_slot *old = m->slots;
  size_t old_cap = m->cap;
  m->slots = xcalloc(cap, sizeof *m->slots);
  m->cap = cap;
  for (size_t i = 0; i < old_cap; i++)
    if (old[i].key) *find(m, old[i].key, old[i].len, old[i].hash) = old[i];
  free(old);
}

static void *get(const hmap *m, const void *key, size_t len, uint64_t h) {
  return m->cap ? find(m, key, len, h)->value : NULL;
}

static void *put(hmap *m, const void *key, size_t len, uint64_t h, void *value) {
  CASTOR_ASSERT(key && value);
  hmap_reserve(m, m->len + 1);
  hmap_slot *e = find(m, key, len, h);
  if (e->key) return e->value;
  *e = (hmap_slot){key, len, h, value};
  m->len++;
  return NULL;
}

void *hmap_get_str(const hmap *m, const char *s, size_t n) {
  CASTOR_ASSERT(m->keys == HMAP_STRINGS);
  return get(m, s, n, hash_bytes(s, n));
}

void *hmap_get_ptr(const hmap *m, const void *p) {
  CASTOR_ASSERT(m->keys == HMAP_POINTERS);
  return get(m, p, 0, hash_ptr(p));
}

void *hmap_put_str(hmap *m, const char *s, size_t n, void *value) {
  CASTOR_ASSERT(m->keys == HMAP_STRINGS);
  return put(m, s, n, hash_bytes(s, n), value);
}

void *hmap_put_ptr(hmap *m, const void *p, void *value) {
  CASTOR_ASSERT(m->keys == HMAP_POINTERS);
  return put(m, p, 0, hash_ptr(p), value);
}
