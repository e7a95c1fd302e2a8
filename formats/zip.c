/*
 * zip.c: the ZIP reader (formats/zip.h). The end-of-central-directory
 * record (EOCD) is looked for backwards from the end (it may be followed by
 * a comment of up to 65535 bytes); a ZIP64 locator right before it leads to
 * the ZIP64 EOCD. Each central directory entry then names one member; its
 * local header is read and compared. Nothing is read beyond len, and every
 * sum of offsets and sizes is computed in 64 bits after checking that each
 * term lies inside the file, so it cannot overflow.
 */
#include "formats/zip.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

enum {
  SIG_LOCAL = 0x04034b50,
  SIG_CENTRAL = 0x02014b50,
  SIG_EOCD = 0x06054b50,
  SIG_EOCD64 = 0x06064b50,
  SIG_LOC64 = 0x07064b50,
  LOCAL_LEN = 30,
  CENTRAL_LEN = 46,
  EOCD_LEN = 22,
  EOCD64_LEN = 56,
  LOC64_LEN = 20,
};

static uint16_t rd16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const unsigned char *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }

static bool fail(zip_error *err, uint64_t off, const char *fmt, ...) CASTOR_PRINTF(3, 4);
static bool fail(zip_error *err, uint64_t off, const char *fmt, ...) {
  err->off = off;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err->msg, sizeof err->msg, fmt, ap);
  va_end(ap);
  return false;
}

/* Does [off, off + n) lie inside [0, end)? */
static bool inside(uint64_t off, uint64_t n, uint64_t end) { return off <= end && n <= end - off; }

/* The ZIP64 extended information extra field (id 1) of a central entry:
 * each of usize, csize, offset that is 0xFFFFFFFF in the fixed part comes
 * from it, in that order. */
static bool zip64_extra(const unsigned char *ex, size_t n, uint64_t ex_off, zip_member *m,
                        bool need_u, bool need_c, bool need_o, zip_error *err) {
  size_t p = 0;
  while (p + 4 <= n) {
    uint16_t id = rd16(ex + p), sz = rd16(ex + p + 2);
    if (sz > n - p - 4)
      return fail(err, ex_off + p, "member '%s': extra field 0x%04x of %u bytes runs past its entry",
                  m->name, id, sz);
    if (id == 1) {
      const unsigned char *f = ex + p + 4;
      size_t q = 0;
      uint64_t *want[3] = {need_u ? &m->size : NULL, need_c ? &m->comp_size : NULL,
                           need_o ? &m->header_off : NULL};
      for (int k = 0; k < 3; k++) {
        if (!want[k]) continue;
        if (q + 8 > sz)
          return fail(err, ex_off + p, "member '%s': ZIP64 extra field of %u bytes is too short",
                      m->name, sz);
        *want[k] = rd64(f + q);
        q += 8;
      }
      return true;
    }
    p += 4 + (size_t)sz;
  }
  return fail(err, ex_off, "member '%s': sizes say ZIP64 but the entry has no ZIP64 extra field",
              m->name);
}

/* The EOCD (and ZIP64 EOCD): the directory's offset, size and entry count. */
static bool read_eocd(const unsigned char *d, uint64_t len, uint64_t *cd_off, uint64_t *cd_size,
                      uint64_t *n_entries, uint64_t *cd_end, zip_error *err) {
  if (len < EOCD_LEN)
    return fail(err, 0, "truncated: %llu bytes is shorter than the end-of-central-directory record",
                (unsigned long long)len);
  uint64_t lo = len > EOCD_LEN + 65535 ? len - EOCD_LEN - 65535 : 0;
  uint64_t e = len - EOCD_LEN;
  for (;; e--) {
    if (rd32(d + e) == SIG_EOCD && e + EOCD_LEN + rd16(d + e + 20) == len) break;
    if (e == lo)
      return fail(err, len,
                  "no end-of-central-directory record (the file is truncated or not a ZIP archive)");
  }
  uint16_t disk = rd16(d + e + 4), cd_disk = rd16(d + e + 6);
  uint64_t n_disk = rd16(d + e + 8), n = rd16(d + e + 10);
  uint64_t size = rd32(d + e + 12), off = rd32(d + e + 16);
  *cd_end = e;
  if (n == 0xFFFF || size == 0xFFFFFFFF || off == 0xFFFFFFFF) {
    if (e < LOC64_LEN || rd32(d + e - LOC64_LEN) != SIG_LOC64)
      return fail(err, e, "end-of-central-directory record says ZIP64 but no ZIP64 locator precedes it");
    const unsigned char *l = d + e - LOC64_LEN;
    uint64_t e64 = rd64(l + 8);
    if (rd32(l + 4) != 0 || rd32(l + 16) != 1)
      return fail(err, e - LOC64_LEN, "multi-disk ZIP64 archives are not supported");
    if (!inside(e64, EOCD64_LEN, e - LOC64_LEN) || rd32(d + e64) != SIG_EOCD64)
      return fail(err, e - LOC64_LEN, "ZIP64 locator points at offset %llu, where no ZIP64 "
                  "end-of-central-directory record is", (unsigned long long)e64);
    const unsigned char *r = d + e64;
    disk = rd32(r + 16) ? 1 : 0;
    cd_disk = rd32(r + 20) ? 1 : 0;
    n_disk = rd64(r + 24), n = rd64(r + 32), size = rd64(r + 40), off = rd64(r + 48);
    *cd_end = e64;
  }
  if (disk != 0 || cd_disk != 0 || n_disk != n)
    return fail(err, e, "multi-disk (spanned) archives are not supported");
  if (n > ZIP_MAX_MEMBERS)
    return fail(err, e, "%llu members, more than the %d castor reads", (unsigned long long)n,
                ZIP_MAX_MEMBERS);
  if (!inside(off, size, *cd_end))
    return fail(err, e, "central directory at offset %llu of %llu bytes does not end before the "
                "end record at offset %llu (truncated or corrupt archive)",
                (unsigned long long)off, (unsigned long long)size, (unsigned long long)*cd_end);
  *cd_off = off, *cd_size = size, *n_entries = n;
  return true;
}

/* The local header of m: checks it, sets data_off and the data's bounds. */
static bool read_local(const unsigned char *d, uint64_t cd_off, uint64_t entry, zip_member *m,
                       uint16_t flags, zip_error *err) {
  uint64_t h = m->header_off;
  if (!inside(h, LOCAL_LEN, cd_off) || rd32(d + h) != SIG_LOCAL)
    return fail(err, entry, "member '%s': no local header at offset %llu", m->name,
                (unsigned long long)h);
  uint16_t lflags = rd16(d + h + 6), method = rd16(d + h + 8);
  uint16_t nlen = rd16(d + h + 26), xlen = rd16(d + h + 28);
  if (!inside(h + LOCAL_LEN, (uint64_t)nlen + xlen, cd_off))
    return fail(err, h, "member '%s': local header's name and extra fields run past the data",
                m->name);
  if (nlen != strlen(m->name) || memcmp(d + h + LOCAL_LEN, m->name, nlen) != 0)
    return fail(err, h, "member '%s': local header names '%.*s'", m->name, (int)(nlen < 200 ? nlen : 200),
                (const char *)d + h + LOCAL_LEN);
  if (method != m->method || (lflags & 8) != (flags & 8))
    return fail(err, h, "member '%s': local header disagrees with the central directory "
                "(method or flags)", m->name);
  if (!(flags & 8)) {
    uint64_t lc = rd32(d + h + 18), lu = rd32(d + h + 22);
    uint32_t lcrc = rd32(d + h + 14);
    bool z64 = lc == 0xFFFFFFFF || lu == 0xFFFFFFFF;
    if (lcrc != m->crc32 || (!z64 && (lc != m->comp_size || lu != m->size)))
      return fail(err, h, "member '%s': local header's sizes or CRC (%llu, %llu, %08x) differ "
                  "from the central directory's (%llu, %llu, %08x)", m->name,
                  (unsigned long long)lc, (unsigned long long)lu, lcrc,
                  (unsigned long long)m->comp_size, (unsigned long long)m->size, m->crc32);
  }
  m->data_off = h + LOCAL_LEN + nlen + xlen;
  if (!inside(m->data_off, m->comp_size, cd_off))
    return fail(err, m->data_off, "member '%s': its %llu bytes of data at offset %llu run past "
                "the central directory at offset %llu (truncated or corrupt archive)", m->name,
                (unsigned long long)m->comp_size, (unsigned long long)m->data_off,
                (unsigned long long)cd_off);
  return true;
}

bool zip_open(zip_archive *z, const void *data, size_t len, zip_error *err) {
  *z = (zip_archive){.data = data, .len = len};
  const unsigned char *d = data;
  uint64_t cd_off = 0, cd_size = 0, n = 0, cd_end = 0;
  if (!read_eocd(d, len, &cd_off, &cd_size, &n, &cd_end, err)) return false;
  /* Sizes from the file are checked against what the file holds before
   * anything is allocated from them: each entry takes CENTRAL_LEN bytes of
   * the directory, which lies inside the file. */
  if (n > cd_size / CENTRAL_LEN)
    return fail(err, cd_end, "the end record claims %llu members, more than a central directory "
                "of %llu bytes holds (truncated or corrupt archive)", (unsigned long long)n,
                (unsigned long long)cd_size);
  z->members = xcalloc(n + 1, sizeof *z->members);
  z->names = xmalloc(cd_size + 1);
  size_t names_used = 0;
  hmap seen; /* name -> its member: the duplicate check in linear time */
  hmap_init(&seen, HMAP_STRINGS);
  hmap_reserve(&seen, (size_t)n);
  uint64_t p = cd_off, end = cd_off + cd_size;
  for (uint64_t i = 0; i < n; i++) {
    if (!inside(p, CENTRAL_LEN, end) || rd32(d + p) != SIG_CENTRAL) {
      fail(err, p, "central directory entry %llu of %llu is missing or corrupt at offset %llu",
           (unsigned long long)i + 1, (unsigned long long)n, (unsigned long long)p);
      goto fail;
    }
    const unsigned char *c = d + p;
    uint16_t flags = rd16(c + 8), method = rd16(c + 10);
    uint16_t nlen = rd16(c + 28), xlen = rd16(c + 30), clen = rd16(c + 32);
    if (!inside(p + CENTRAL_LEN, (uint64_t)nlen + xlen + clen, end)) {
      fail(err, p, "central directory entry %llu runs past the directory's end",
           (unsigned long long)i + 1);
      goto fail;
    }
    zip_member *m = &z->members[i];
    m->name = z->names + names_used;
    if (memchr(c + CENTRAL_LEN, 0, nlen)) {
      fail(err, p + CENTRAL_LEN, "central directory entry %llu: member name contains a NUL byte",
           (unsigned long long)i + 1);
      goto fail;
    }
    memcpy(z->names + names_used, c + CENTRAL_LEN, nlen);
    z->names[names_used + nlen] = '\0';
    names_used += nlen + 1u;
    m->method = method;
    m->crc32 = rd32(c + 16);
    m->comp_size = rd32(c + 20);
    m->size = rd32(c + 24);
    m->header_off = rd32(c + 42);
    bool nu = m->size == 0xFFFFFFFF, nc = m->comp_size == 0xFFFFFFFF;
    bool no = m->header_off == 0xFFFFFFFF;
    if ((nu || nc || no) &&
        !zip64_extra(c + CENTRAL_LEN + nlen, xlen, p + CENTRAL_LEN + nlen, m, nu, nc, no, err))
      goto fail;
    if (flags & 1) {
      fail(err, p, "member '%s' is encrypted, which castor does not read", m->name);
      goto fail;
    }
    if (method != 0 && method != 8) {
      fail(err, p, "member '%s' uses compression method %u; castor reads stored (0) and "
           "deflated (8) members", m->name, method);
      goto fail;
    }
    if (method == 0 && m->comp_size != m->size) {
      fail(err, p, "member '%s' is stored but its sizes differ (%llu compressed, %llu "
           "uncompressed)", m->name, (unsigned long long)m->comp_size, (unsigned long long)m->size);
      goto fail;
    }
    if (hmap_put_str(&seen, m->name, nlen, m)) {
      fail(err, p, "member '%s' appears twice in the central directory", m->name);
      goto fail;
    }
    if (!read_local(d, cd_off, p, m, flags, err)) goto fail;
    z->n_members++;
    p += CENTRAL_LEN + (uint64_t)nlen + xlen + clen;
  }
  if (p != end) {
    fail(err, p, "central directory has %llu bytes after its %llu entries",
         (unsigned long long)(end - p), (unsigned long long)n);
    goto fail;
  }
  hmap_fini(&seen);
  return true;
fail:
  hmap_fini(&seen);
  zip_fini(z);
  return false;
}

void zip_fini(zip_archive *z) {
  free(z->members);
  free(z->names);
  *z = (zip_archive){0};
}

const zip_member *zip_find(const zip_archive *z, const char *name) {
  for (int i = 0; i < z->n_members; i++)
    if (strcmp(z->members[i].name, name) == 0) return &z->members[i];
  return NULL;
}

bool zip_read(const zip_archive *z, const zip_member *m, uint64_t max_size, unsigned char **out,
              size_t *out_len, zip_error *err) {
  *out = NULL, *out_len = 0;
  if (m->size > max_size || m->size > SIZE_MAX - 1)
    return fail(err, m->header_off, "member '%s' is %llu bytes once extracted, more than the "
                "%llu castor reads", m->name, (unsigned long long)m->size,
                (unsigned long long)max_size);
  /* The size the directory claims is what gets allocated, and inflation
   * stops there: bounded by the compressed size, so that a small archive
   * cannot claim gigabytes (a stored member's data lies in the file). */
  if (m->method != 0 && m->size > ZIP_MAX_RATIO * m->comp_size + ZIP_RATIO_SLACK)
    return fail(err, m->header_off, "member '%s' claims %llu bytes from %llu compressed bytes, "
                "more than %d times as many (the bound that stops deflate bombs)", m->name,
                (unsigned long long)m->size, (unsigned long long)m->comp_size, ZIP_MAX_RATIO);
  unsigned char *buf = malloc((size_t)m->size + 1);
  if (!buf)
    return fail(err, m->header_off, "member '%s': out of memory for its %llu bytes", m->name,
                (unsigned long long)m->size);
  const unsigned char *src = z->data + m->data_off;
  if (m->method == 0) {
    memcpy(buf, src, (size_t)m->size);
  } else {
    z_stream s = {0};
    if (inflateInit2(&s, -MAX_WBITS) != Z_OK) {
      free(buf);
      return fail(err, m->data_off, "member '%s': zlib cannot start inflating", m->name);
    }
    uint64_t in_left = m->comp_size, out_left = m->size;
    s.next_in = (Bytef *)src;
    s.next_out = buf;
    int rc = Z_OK;
    while (rc == Z_OK) {
      uInt ai = in_left > UINT32_MAX ? UINT32_MAX : (uInt)in_left;
      uInt ao = out_left > UINT32_MAX ? UINT32_MAX : (uInt)out_left;
      s.avail_in = ai, s.avail_out = ao;
      rc = inflate(&s, Z_NO_FLUSH);
      in_left -= ai - s.avail_in, out_left -= ao - s.avail_out;
      if (rc == Z_OK && ((ai == s.avail_in && ao == s.avail_out) || (in_left == 0 && ai == 0) ||
                         (out_left == 0 && ao == 0)))
        rc = Z_BUF_ERROR; /* no progress */
    }
    inflateEnd(&s);
    if (rc != Z_STREAM_END || out_left != 0 || in_left != 0) {
      uint64_t at = m->data_off + (m->comp_size - in_left);
      free(buf);
      if (rc == Z_STREAM_END)
        return fail(err, at, "member '%s': deflate stream gives %llu bytes, the directory says "
                    "%llu (or leaves %llu compressed bytes unused)", m->name,
                    (unsigned long long)(m->size - out_left), (unsigned long long)m->size,
                    (unsigned long long)in_left);
      return fail(err, at, "member '%s': corrupt or truncated deflate data (zlib: %s, after %llu "
                  "of %llu bytes)", m->name, s.msg ? s.msg : "the data ends early",
                  (unsigned long long)(m->size - out_left), (unsigned long long)m->size);
    }
  }
  uint32_t crc = 0;
  for (uint64_t done = 0; done < m->size;) {
    uInt n = m->size - done > UINT32_MAX ? UINT32_MAX : (uInt)(m->size - done);
    crc = (uint32_t)crc32(crc, buf + done, n);
    done += n;
  }
  if (crc != m->crc32) {
    free(buf);
    return fail(err, m->data_off, "member '%s': CRC-32 is %08x, the directory says %08x "
                "(corrupt archive)", m->name, crc, m->crc32);
  }
  buf[m->size] = 0;
  *out = buf, *out_len = (size_t)m->size;
  return true;
}
