/* SPDX-License-Identifier: Apache-2.0 */
/*
 * replay_main.c: main() for a fuzz target built without libFuzzer (any
 * compiler): runs LLVMFuzzerTestOneInput once on each file named on the
 * command line and on each file of each directory named. ctest replays
 * tests/fuzz/regress/<target>/ this way, under the normal and the
 * sanitizer builds.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/fuzz/fuzz.h"

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return fprintf(stderr, "replay: cannot open %s\n", path), 1;
  size_t cap = 1 << 16, len = 0, n;
  unsigned char *buf = malloc(cap);
  while (buf && (n = fread(buf + len, 1, cap - len, f)) > 0)
    if ((len += n) == cap) buf = realloc(buf, cap *= 2);
  fclose(f);
  if (!buf) return fprintf(stderr, "replay: out of memory on %s\n", path), 1;
  /* an exact-size copy, so that ASan sees a read past the input's end */
  unsigned char *exact = malloc(len ? len : 1);
  memcpy(exact, buf, len);
  free(buf);
  LLVMFuzzerTestOneInput(exact, len);
  free(exact);
  return 0;
}

int main(int argc, char **argv) {
  int rc = 0, n = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode)) {
      DIR *dir = opendir(argv[i]);
      struct dirent *e;
      while (dir && (e = readdir(dir))) {
        if (e->d_name[0] == '.') continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
        rc |= run_file(path), n++;
      }
      if (dir) closedir(dir);
    } else {
      rc |= run_file(argv[i]), n++;
    }
  }
  printf("replay: %d input(s) ran\n", n);
  return rc;
}
