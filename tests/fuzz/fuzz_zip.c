/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_zip.c: the ZIP reader (formats/zip.c) on arbitrary bytes: zip_open,
 * then zip_read of every member (at most 1 MiB each, so a deflate bomb is
 * an error, not an allocation). Invariants: success xor an error with a
 * message and an offset inside the file; every member's header and data
 * inside the file, found by zip_find under its name; an extracted member has
 * exactly its stated size and is read whole (ASan sees an overrun).
 */
#include "tests/fuzz/fuzz.h"

#include <string.h>

#include "formats/zip.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  zip_archive z;
  zip_error err = {0};
  if (!zip_open(&z, data, size, &err)) {
    if (!err.msg[0]) fuzz_fail("an error without a message", "");
    if (err.off > size) fuzz_fail("an error offset past the file", err.msg);
    return 0;
  }
  unsigned sum = 0;
  for (int i = 0; i < z.n_members; i++) {
    const zip_member *m = &z.members[i];
    if (m->data_off > size || m->comp_size > size - m->data_off || m->header_off >= size)
      fuzz_fail("a member outside the file", m->name);
    if (zip_find(&z, m->name) != m) fuzz_fail("zip_find misses a member", m->name);
    unsigned char *out;
    size_t len;
    zip_error e2 = {0};
    if (zip_read(&z, m, 1 << 20, &out, &len, &e2)) {
      if (len != m->size || out[len] != 0) fuzz_fail("an extracted member of the wrong size", m->name);
      for (size_t k = 0; k < len; k++) sum += out[k];
      free(out);
    } else if (!e2.msg[0] || e2.off > size) {
      fuzz_fail("a read error without a message or with an offset past the file", e2.msg);
    }
  }
  zip_fini(&z);
  return (int)(sum & 0);
}
