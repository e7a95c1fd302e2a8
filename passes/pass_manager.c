/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pass_manager.c: runs a pipeline string ("verify,dce") over a graph.
 *
 * For each pass: run it with a fresh scratch arena, reset the arena, verify
 * the graph if asked (a pass that breaks an invariant is named in the
 * error), and dump the graph after it if asked. Dumps go to a buffer or to
 * DIR/NN.after-PASS.cir, numbered by position in the pipeline.
 */
#include "passes/passes.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

typedef struct pass_entry {
  const char *name;
  pass_fn fn;
  const char *summary;
} pass_entry;

static const pass_entry pass_table[] = {
#define PASS(ident, name, summary) {name, pass_##ident##_run, summary},
#include "passes/passes.def"
#undef PASS
};
enum { N_PASSES = sizeof pass_table / sizeof pass_table[0] };

void pass_options_init(pass_options *o) {
  memset(o, 0, sizeof *o);
  pass_train_options_init(&o->train);
}

pass_fn pass_lookup(const char *name, size_t len) {
  for (int i = 0; i < N_PASSES; i++)
    if (strlen(pass_table[i].name) == len && memcmp(pass_table[i].name, name, len) == 0)
      return pass_table[i].fn;
  return NULL;
}

const char *pass_list(void) {
  static char buf[512];
  if (!buf[0]) {
    size_t n = 0;
    for (int i = 0; i < N_PASSES; i++)
      n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s", i ? "," : "", pass_table[i].name);
  }
  return buf;
}

/* Splits the pipeline into names; calls fn(name, len, index) for each;
 * stops on the first false. Reports empty names and unknown passes. */
static bool check_names(const char *pipeline, diag_sink *d) {
  const char *p = pipeline;
  if (!*p) return true;
  for (;;) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == 0) {
      diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, (diag_loc){0}, "empty pass name in pipeline '%s'", pipeline);
      return false;
    }
    if (!pass_lookup(p, len)) {
      diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, (diag_loc){0}, "unknown pass '%.*s' in pipeline '%s' (passes: %s)", (int)len, p,
                 pipeline, pass_list());
      return false;
    }
    if (!e) return true;
    p = e + 1;
  }
}

bool pass_pipeline_check(const char *pipeline, diag_sink *d) { return check_names(pipeline, d); }

static bool dump(const ir_graph *g, const pass_options *o, int index, const char *name,
                 diag_sink *d) {
  str_buf b;
  str_buf_init(&b);
  ir_print(g, &b);
  bool ok = true;
  if (o->dump_dir) {
    if (mkdir(o->dump_dir, 0777) != 0 && errno != EEXIST) {
      diag_error_kind(d, DIAG_KIND_IO, (diag_loc){0}, "cannot create dump directory '%s': %s", o->dump_dir,
                 strerror(errno));
      ok = false;
    } else {
      char path[4096];
      snprintf(path, sizeof path, "%s/%02d.after-%s.cir", o->dump_dir, index, name);
      FILE *f = fopen(path, "wb");
      if (!f || fwrite(b.data, 1, b.len, f) != b.len) {
        diag_error_kind(d, DIAG_KIND_IO, (diag_loc){0}, "cannot write '%s': %s", path, strerror(errno));
        ok = false;
      }
      if (f && fclose(f) != 0 && ok) {
        diag_error_kind(d, DIAG_KIND_IO, (diag_loc){0}, "cannot write '%s': %s", path, strerror(errno));
        ok = false;
      }
    }
  } else if (o->dump_out) {
    str_buf_printf(o->dump_out, "# IR after %s\n", name);
    str_buf_puts(o->dump_out, str_buf_cstr(&b));
  }
  str_buf_fini(&b);
  return ok;
}

bool pass_run_pipeline(ir_graph *g, const char *pipeline, const pass_options *o, diag_sink *d) {
  pass_options defaults;
  if (!o) pass_options_init(&defaults), o = &defaults;
  if (!check_names(pipeline, d)) return false;
  if (o->dump_after && strcmp(o->dump_after, "all") != 0 &&
      !pass_lookup(o->dump_after, strlen(o->dump_after))) {
    diag_error_kind(d, DIAG_KIND_INVALID_ARGUMENT, (diag_loc){0}, "unknown pass '%s' in --dump-after (passes: %s, or all)",
               o->dump_after, pass_list());
    return false;
  }
  arena *scratch = arena_create();
  bool ok = true;
  int index = 0;
  for (const char *p = pipeline; ok && *p;) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)len, p);
    pass_context ctx = {d, scratch, o};
    int errors_before = diag_error_count(d);
    ok = pass_lookup(p, len)(g, &ctx);
    arena_reset(scratch);
    ir_graph_renumber(g);
    if (ok && diag_error_count(d) > errors_before) ok = false;
    index++;
    if (ok && o->verify_each && !ir_verify(g, d)) {
      diag_note(d, (diag_loc){0}, "the IR is invalid after pass '%s'", name);
      ok = false;
    }
    if (ok && o->dump_after && (strcmp(o->dump_after, "all") == 0 || strcmp(o->dump_after, name) == 0))
      ok = dump(g, o, index, name, d);
    p = e ? e + 1 : p + len;
  }
  arena_destroy(scratch);
  return ok;
}
