/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tmpdir_fixture.h: a fresh temporary directory per Check test, for the
 * suites of the file writers and readers (check_atomic_file,
 * check_safetensors_write, check_dataset, check_history). Header-only: each
 * suite includes it once and adds tmpdir_setup/tmpdir_teardown as a
 * checked fixture.
 */
#ifndef CASTOR_TMPDIR_FIXTURE_H
#define CASTOR_TMPDIR_FIXTURE_H

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[64];

static void tmpdir_setup(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/castor_check_XXXXXX");
  ck_assert_msg(mkdtemp(tmpdir) != NULL, "mkdtemp: %s", strerror(errno));
}

/* Removes the directory and what the test left in it (one level of
 * subdirectories). */
static void tmpdir_remove(const char *dir_path) {
  DIR *dir = opendir(dir_path);
  if (!dir) return;
  struct dirent *e;
  char path[512];
  while ((e = readdir(dir)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    snprintf(path, sizeof path, "%s/%s", dir_path, e->d_name);
    if (unlink(path) != 0) tmpdir_remove(path);
  }
  closedir(dir);
  rmdir(dir_path);
}

static void tmpdir_teardown(void) { tmpdir_remove(tmpdir); }

/* tmpdir/name in buf. */
static inline const char *tmp_path(const char *name, char *buf, size_t len) {
  snprintf(buf, len, "%s/%s", tmpdir, name);
  return buf;
}

/* Number of entries in tmpdir (to see that no temporary file is left). */
static inline int tmpdir_count(void) {
  DIR *dir = opendir(tmpdir);
  ck_assert(dir != NULL);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(dir)) != NULL)
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++;
  closedir(dir);
  return n;
}

static inline void write_bytes(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
  ck_assert(len == 0 || fwrite(data, 1, len, f) == len);
  fclose(f);
}

#endif
