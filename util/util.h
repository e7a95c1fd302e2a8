/*
 * util.h: the bottom layer of castor. Arenas, growable vectors, string
 * buffers, the always-on assert, a seeded PRNG, overflow-checked size
 * arithmetic and the one hash map (hmap). Every other library may include this; it includes nothing of
 * castor's. Diagnostics live in diag.h, 16-bit float conversions in half.h.
 */
#ifndef CASTOR_UTIL_H
#define CASTOR_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* ---- internal bugs: always on, never used for user errors ---- */

void castor_assert_fail(const char *expr, const char *file, int line);

#define CASTOR_ASSERT(e) \
  ((e) ? (void)0 : castor_assert_fail(#e, __FILE__, __LINE__))
#define CASTOR_UNREACHABLE() castor_assert_fail("unreachable", __FILE__, __LINE__)

#if defined(__GNUC__)
#define CASTOR_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define CASTOR_PRINTF(f, a)
#endif

/* ---- heap helpers that end the process on out-of-memory (the only sane
 * reaction in a compiler: castor's error and status 1, never an abort;
 * mem_out_of_memory, sys.h). The public API reports CASTOR_ERR_NOMEM for
 * tensor data, whose size the user controls, and sizes read from files are
 * checked against the memory limit before they are allocated. ---- */

void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);

/* ---- arena: owns every node of a graph; nothing is freed one by one ---- */

typedef struct arena arena;

arena *arena_create(void);
void arena_destroy(arena *a);              /* NULL is a no-op */
void arena_reset(arena *a);                /* frees everything, keeps the arena */
void *arena_alloc(arena *a, size_t n);     /* 16-byte aligned, zeroed */
void *arena_alloc_aligned(arena *a, size_t n, size_t align); /* zeroed */
char *arena_strdup(arena *a, const char *s);
char *arena_strndup(arena *a, const char *s, size_t n);
char *arena_printf(arena *a, const char *fmt, ...) CASTOR_PRINTF(2, 3);
size_t arena_bytes_used(const arena *a);

/* ---- vectors: type-generic growable arrays on the heap ----
 * Declare as `VEC(int) v = {0};`, push with vec_push(&v, x), free with
 * vec_free(&v). */

#define VEC(T) struct { T *data; size_t len, cap; }
#define vec_push(v, x)                                                   \
  do {                                                                   \
    if ((v)->len == (v)->cap) {                                          \
      (v)->cap = (v)->cap ? (v)->cap * 2 : 8;                            \
      (v)->data = xrealloc((v)->data, (v)->cap * sizeof *(v)->data);     \
    }                                                                    \
    (v)->data[(v)->len++] = (x);                                         \
  } while (0)
#define vec_free(v) (free((v)->data), (v)->data = NULL, (v)->len = (v)->cap = 0)

/* ---- string buffer ---- */

typedef struct str_buf {
  char *data; /* always NUL-terminated once anything was appended */
  size_t len, cap;
} str_buf;

void str_buf_init(str_buf *b);
void str_buf_fini(str_buf *b);
void str_buf_clear(str_buf *b);
void str_buf_append(str_buf *b, const char *s, size_t n);
void str_buf_puts(str_buf *b, const char *s);
void str_buf_putc(str_buf *b, char c);
void str_buf_printf(str_buf *b, const char *fmt, ...) CASTOR_PRINTF(2, 3);
void str_buf_vprintf(str_buf *b, const char *fmt, va_list ap);
const char *str_buf_cstr(str_buf *b); /* "" when empty */
char *str_buf_take(str_buf *b);       /* caller frees; buffer is reset */

bool str_eq(const char *a, const char *b);

/* Length (1-4) of the valid UTF-8 sequence at s, with avail bytes there
 * (avail >= 1); 0 for a bad lead byte, a missing continuation, an overlong
 * form, a surrogate or a code point beyond U+10FFFF. */
size_t str_utf8_len(const void *s, size_t avail);

/* Levenshtein distance of a[0..na) and b[0..nb), for "did you mean"
 * suggestions; a large number when either is longer than 63 bytes. */
int str_edit_distance(const char *a, size_t na, const char *b, size_t nb);

/* A whole decimal integer in [lo, hi]; false on anything else. */
bool str_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);
/* Command-line option `--name=value` or `--name value` at argv[*i]: the
 * value (advancing *i past a separate value), NULL if argv[*i] is not
 * --name; *missing is set when --name has no value. Shared by the CLI and
 * the AOT executables' driver. */
const char *str_opt_arg(int argc, char **argv, int *i, const char *name, bool *missing);
bool str_has_prefix(const char *s, const char *prefix);

/* Reads a whole file; returns false and sets errno on failure. The buffer is
 * NUL-terminated (not counted in *out_len); free it with free(). */
bool str_read_file(const char *path, char **out_data, size_t *out_len);

/* Reads a whole untrusted file of at most max_bytes (model text, IR text):
 * a regular file, whose size is checked before anything is read, or a pipe,
 * read until its end or until it passes max_bytes. Anything else (a
 * directory, a device such as /dev/zero, a socket) is refused unread. On
 * failure returns false and appends the reason to *why: "not a regular file
 * (a character device)", "it has 70000000 bytes, more than the limit of
 * 67108864 (64 MiB)", "it holds more than the limit of 67108864 bytes (64
 * MiB)" (a pipe), or strerror's text. The buffer is NUL-terminated (not
 * counted in *out_len); free it with free(). str_read_fd_max reads an open
 * descriptor (stdin) the same way. */
bool str_read_file_max(const char *path, int64_t max_bytes, char **out_data, size_t *out_len,
                       str_buf *why);
bool str_read_fd_max(int fd, int64_t max_bytes, char **out_data, size_t *out_len, str_buf *why);
/* "a character device", "a directory", ... for a stat mode that is neither
 * a regular file nor a pipe: the words of the messages above. */
const char *str_file_kind(unsigned mode);

/* ---- overflow-checked size arithmetic ---- */

bool size_mul_ok(int64_t a, int64_t b, int64_t *out);
bool size_add_ok(int64_t a, int64_t b, int64_t *out);

/* ---- seeded PRNG (splitmix64 seeding, xoshiro256**): reproducible across
 * hosts, used for Glorot init and random inputs ---- */

typedef struct rng {
  uint64_t s[4];
} rng;

void rng_init(rng *r, uint64_t seed);
uint64_t rng_next(rng *r);
double rng_uniform(rng *r);             /* [0, 1) with 53 random bits */
float rng_uniform_f32(rng *r, float lo, float hi);

/* FNV-1a hash of a string: derives a per-tensor seed from the model seed. */
uint64_t str_hash(const char *s);

/* ---- the one hash map ----
 * Keys are strings (compared by content, given as bytes and a length, so a
 * lexer can look up a token in place) or pointers (compared by address); a
 * map holds one kind. Values are non-NULL pointers. Keys and values are not
 * copied: they must outlive the map (an arena's strings and nodes do). Open
 * addressing over a heap table kept at most half full (hmap_fini frees it);
 * O(1) expected lookups and inserts; no removal (castor's maps only grow,
 * then go). */

typedef enum hmap_keys { HMAP_STRINGS, HMAP_POINTERS } hmap_keys;

typedef struct hmap_slot {
  const void *key; /* NULL: empty */
  size_t len;      /* string keys: bytes */
  uint64_t hash;
  void *value;
} hmap_slot;

typedef struct hmap {
  hmap_slot *slots;
  size_t cap, len; /* cap: 0 or a power of two > 2 * len */
  hmap_keys keys;
} hmap;

/* An empty map (no allocation yet); hmap_fini releases it. */
void hmap_init(hmap *m, hmap_keys keys);
void hmap_fini(hmap *m);
/* Makes room for n entries in all, so that n inserts do not regrow. */
void hmap_reserve(hmap *m, size_t n);

/* The value of string key s[0..n), or NULL. */
void *hmap_get_str(const hmap *m, const char *s, size_t n);
/* The value of pointer key p, or NULL. */
void *hmap_get_ptr(const hmap *m, const void *p);
/* Adds key -> value (value non-NULL) unless the key is there: returns the
 * value already there (the map unchanged), or NULL when it added. */
void *hmap_put_str(hmap *m, const char *s, size_t n, void *value);
void *hmap_put_ptr(hmap *m, const void *p, void *value);

#endif
