/* SPDX-License-Identifier: Apache-2.0 */
/*
 * zip_write.c: the ZIP writer (formats/zip.h, zip_write): stored members,
 * as Keras writes a .keras archive (Python's zipfile, ZIP_STORED), each
 * with its CRC-32 (zlib's) and sizes in its local header (no data
 * descriptor), then the central directory and its end record. A member,
 * an offset or the directory past 4 GiB - 1 (or, for tests, every one with
 * `zip64`) uses the ZIP64 fields zip.c reads: the extended information
 * extra field (the sizes and offset the fixed part marks 0xFFFFFFFF, in
 * that order), the ZIP64 end record and its locator. The date is
 * 1980-01-01 00:00 (zipfile's for writestr members, and deterministic).
 * The archive goes through util/atomic_file.h, as every file castor
 * writes.
 */
#include "formats/zip.h"

#include "util/atomic_file.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

enum { DOS_DATE = (0 << 9) | (1 << 5) | 1, VERSION = 45, MADE_BY = (3 << 8) | 45 };
static const uint64_t MAX32 = 0xFFFFFFFFu;

typedef struct rec {
  unsigned char b[128];
  size_t n;
} rec;
static void le(rec *r, uint64_t v, int n) {
  for (int i = 0; i < n; i++) r->b[r->n++] = (unsigned char)(v >> (8 * i));
}

static uint32_t crc_of(const unsigned char *p, uint64_t n) {
  uLong c = crc32(0L, Z_NULL, 0);
  while (n) {
    uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
    c = crc32(c, p, k);
    p += k, n -= k;
  }
  return (uint32_t)c;
}

bool zip_write(const char *path, const zip_entry *members, int n, bool zip64, diag_sink *d) {
  if (n < 0 || n > ZIP_MAX_MEMBERS) {
    diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, (diag_loc){path, 0, 0}, "cannot write %d members to a ZIP archive", n);
    return false;
  }
  for (int i = 0; i < n; i++) {
    size_t len = members[i].name ? strlen(members[i].name) : 0;
    if (!len || len > 65535 || (members[i].size && !members[i].data)) {
      diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, (diag_loc){path, 0, 0},
                      "cannot write ZIP member %d: no name, a name over 65535 bytes, or no data", i);
      return false;
    }
    for (int j = 0; j < i; j++)
      if (!strcmp(members[i].name, members[j].name)) {
        diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, (diag_loc){path, 0, 0}, "ZIP member '%s' given twice",
                        members[i].name);
        return false;
      }
  }
  uint32_t *crc = xcalloc((size_t)n + 1, sizeof *crc);
  uint64_t *off = xcalloc((size_t)n + 1, sizeof *off);
  atomic_file af;
  if (!atomic_file_begin(&af, path, d)) {
    free(crc), free(off);
    return false;
  }
  uint64_t pos = 0;
  for (int i = 0; i < n; i++) { /* local header, data */
    const zip_entry *m = &members[i];
    size_t nl = strlen(m->name);
    bool big = zip64 || m->size >= MAX32;
    crc[i] = crc_of(m->data, m->size);
    off[i] = pos;
    rec r = {0};
    le(&r, 0x04034b50, 4), le(&r, VERSION, 2), le(&r, 0, 2), le(&r, 0, 2), le(&r, 0, 2), le(&r, DOS_DATE, 2);
    le(&r, crc[i], 4), le(&r, big ? MAX32 : m->size, 4), le(&r, big ? MAX32 : m->size, 4);
    le(&r, nl, 2), le(&r, big ? 20 : 0, 2);
    atomic_file_write(&af, r.b, r.n);
    atomic_file_write(&af, m->name, nl);
    r.n = 0;
    if (big) le(&r, 1, 2), le(&r, 16, 2), le(&r, m->size, 8), le(&r, m->size, 8);
    atomic_file_write(&af, r.b, r.n);
    if (m->size) atomic_file_write(&af, m->data, (size_t)m->size);
    pos += 30 + nl + r.n + m->size;
  }
  uint64_t cd = pos;
  for (int i = 0; i < n; i++) { /* central directory */
    const zip_entry *m = &members[i];
    size_t nl = strlen(m->name);
    bool big_size = zip64 || m->size >= MAX32, big_off = zip64 || off[i] >= MAX32;
    rec x = {0}; /* the ZIP64 extra field */
    if (big_size || big_off) {
      le(&x, 1, 2), le(&x, (big_size ? 16 : 0) + (big_off ? 8 : 0), 2);
      if (big_size) le(&x, m->size, 8), le(&x, m->size, 8);
      if (big_off) le(&x, off[i], 8);
    }
    rec r = {0};
    le(&r, 0x02014b50, 4), le(&r, MADE_BY, 2), le(&r, VERSION, 2), le(&r, 0, 2), le(&r, 0, 2), le(&r, 0, 2);
    le(&r, DOS_DATE, 2), le(&r, crc[i], 4), le(&r, big_size ? MAX32 : m->size, 4);
    le(&r, big_size ? MAX32 : m->size, 4), le(&r, nl, 2), le(&r, x.n, 2), le(&r, 0, 2), le(&r, 0, 2);
    le(&r, 0, 2), le(&r, (uint64_t)0100644 << 16, 4), le(&r, big_off ? MAX32 : off[i], 4);
    atomic_file_write(&af, r.b, r.n);
    atomic_file_write(&af, m->name, nl);
    atomic_file_write(&af, x.b, x.n);
    pos += 46 + nl + x.n;
  }
  uint64_t cd_size = pos - cd;
  bool big = zip64 || cd >= MAX32 || cd_size >= MAX32 || n >= 0xFFFF;
  rec r = {0};
  if (big) { /* ZIP64 end of central directory record and its locator */
    le(&r, 0x06064b50, 4), le(&r, 44, 8), le(&r, MADE_BY, 2), le(&r, VERSION, 2), le(&r, 0, 4), le(&r, 0, 4);
    le(&r, (uint64_t)n, 8), le(&r, (uint64_t)n, 8), le(&r, cd_size, 8), le(&r, cd, 8);
    le(&r, 0x07064b50, 4), le(&r, 0, 4), le(&r, pos, 8), le(&r, 1, 4);
  }
  le(&r, 0x06054b50, 4), le(&r, 0, 2), le(&r, 0, 2), le(&r, big ? 0xFFFF : (uint64_t)n, 2);
  le(&r, big ? 0xFFFF : (uint64_t)n, 2), le(&r, big ? MAX32 : cd_size, 4), le(&r, big ? MAX32 : cd, 4), le(&r, 0, 2);
  atomic_file_write(&af, r.b, r.n);
  free(crc), free(off);
  return atomic_file_commit(&af, d);
}
