/*
 * zip.h: a ZIP archive reader (PKWARE APPNOTE 6.3), for the containers
 * castor imports: a Keras 3 model (.keras) is a ZIP of config.json,
 * metadata.json and model.weights.h5, which Keras writes stored
 * (uncompressed). Stored and deflated members are read (deflate through
 * zlib), ZIP64 archives too; encrypted members, multi-disk archives and
 * any other method are refused.
 *
 * The archive is a byte range the caller owns and keeps alive. zip_open
 * trusts the central directory for names, sizes and offsets and checks
 * every one of them: the end-of-central-directory record inside the file,
 * the directory inside the file and before that record, each entry's fixed
 * part, name and extra fields inside the directory, each local header and
 * its data inside the file and before the directory, the local header's
 * name equal to the directory's, its sizes and CRC equal to the directory's
 * unless it defers them to a data descriptor (flag bit 3), member names
 * unique (by hash: linear in the number of members). zip_read checks the
 * uncompressed size against the caller's limit and the ratio bound below
 * before allocating it (an allocation that fails is an error, not an
 * abort), then the size inflated and the CRC-32.
 *
 * Errors come back as a zip_error (byte offset + message naming the member)
 * for the caller to word into a diagnostic, like formats/json.h.
 */
#ifndef CASTOR_FORMATS_ZIP_H
#define CASTOR_FORMATS_ZIP_H

#include "util/diag.h"
#include "util/util.h"

/* Members an archive may hold (a .keras file has three). A deflated
 * member may extract to at most ZIP_MAX_RATIO times its compressed size
 * plus ZIP_RATIO_SLACK bytes: deflate reaches 1032:1 on runs of zeros, so
 * without a bound a 2 MB archive could claim (and be given) 2 GiB; JSON
 * and weights deflate by well under 100:1, and Keras stores its members
 * uncompressed. */
enum { ZIP_MAX_MEMBERS = 65535, ZIP_MAX_RATIO = 100, ZIP_RATIO_SLACK = 1 << 20 };

typedef struct zip_member {
  const char *name;   /* NUL-terminated copy; no NUL inside */
  uint16_t method;    /* 0 stored, 8 deflated */
  uint32_t crc32;
  uint64_t comp_size; /* bytes of data in the archive */
  uint64_t size;      /* bytes once extracted */
  uint64_t header_off; /* of its local header */
  uint64_t data_off;   /* of its data */
} zip_member;

typedef struct zip_archive {
  const unsigned char *data;
  size_t len;
  zip_member *members;
  int n_members;
  char *names; /* storage of the members' names */
} zip_archive;

typedef struct zip_error {
  uint64_t off;   /* byte offset in the archive where the problem is */
  char msg[320];  /* e.g. "member 'config.json': local header name is 'x'" */
} zip_error;

/* Reads the directory of the archive data[0..len). On failure returns false,
 * fills *err, and *z needs no zip_fini. */
bool zip_open(zip_archive *z, const void *data, size_t len, zip_error *err);
void zip_fini(zip_archive *z);
/* The member called name, or NULL. */
const zip_member *zip_find(const zip_archive *z, const char *name);
/* Extracts a member into a fresh buffer (*out, *out_len; caller frees;
 * one NUL byte follows the data so text can be parsed in place). A member
 * larger than max_size is an error that says so. */
bool zip_read(const zip_archive *z, const zip_member *m, uint64_t max_size, unsigned char **out,
              size_t *out_len, zip_error *err);

/* ---- write (zip_write.c) ---- */

typedef struct zip_entry {
  const char *name; /* unique, 1 to 65535 bytes */
  const void *data;
  uint64_t size;
} zip_entry;

/* Writes the members, stored (uncompressed) with their CRC-32, as one ZIP
 * archive that replaces path atomically (util/atomic_file.h: a
 * non-regular target is never replaced). ZIP64 fields where a size or an
 * offset needs them, or everywhere with zip64 (tests). Bad arguments are
 * DIAG_KIND_INVALID_ARGUMENT errors, I/O failures DIAG_KIND_IO ones. */
bool zip_write(const char *path, const zip_entry *members, int n, bool zip64, diag_sink *d);

#endif
