/* SPDX-License-Identifier: Apache-2.0 */
/*
 * onnx_conformance.c: runs ONNX's own test data (Debian libonnx-testdata:
 * node tests and PyTorch-converted models) through castor and tallies the
 * results per op type (tests/onnx/README.md).
 *
 *   onnx_conformance [options] DATA_DIR...
 *     --table FILE      write the per-op table (markdown) to FILE
 *     --expect FILE     compare the table with FILE (docs/onnx.md's generated part);
 *                       exit 1 on any difference
 *     --one-per-op      run only the first test of each op type (sanitizer and
 *                       emulated-CPU runs)
 *     --filter SUBSTR   run only tests whose directory name contains SUBSTR
 *     -v                print every test's outcome and error
 *
 * A test is a directory with model.onnx and test_data_set_N/{input,output}_K.pb.
 * Every graph input is bound to its data with bind_where_needed (castor's
 * static-shape mode: an op that needs a value at compile time reads it; the
 * rest stay run-time inputs), the model is compiled for the CPU under
 * float32 and each output compared with ONNX's expected output within
 * ONNX's tolerances for float32 (rtol 1e-3, atol 1e-7: |got - want| <=
 * atol + rtol * |want|, NaN where NaN is expected).
 *
 * Outcomes: pass; fail (ran and differed, or castor failed on a model it
 * claims to support); unsupported op (castor's one error naming the op);
 * unsupported dtype (a tensor type castor does not compute in, e.g. double
 * or uint8: counted apart, as the issue asks). A test counts once in the
 * totals and once under each op type its graph uses.
 */
#include "castor.h"
#include "formats/onnx.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum outcome { PASS, FAIL, UNSUP_OP, UNSUP_DTYPE, N_OUTCOMES };
static const char *const outcome_names[] = {"pass", "fail", "unsupported op", "unsupported dtype"};

typedef struct op_count {
  char op[64];
  int n[N_OUTCOMES];
} op_count;

static op_count ops[512];
static int n_ops;
static int totals[N_OUTCOMES];
static int verbose;

static op_count *op_slot(const char *op) {
  for (int i = 0; i < n_ops; i++)
    if (!strcmp(ops[i].op, op)) return &ops[i];
  if (n_ops == (int)(sizeof ops / sizeof *ops)) return NULL;
  snprintf(ops[n_ops].op, sizeof ops[n_ops].op, "%s", op);
  return &ops[n_ops++];
}

static char *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0;
  char *b = malloc(cap);
  size_t k;
  while ((k = fread(b + n, 1, cap - n, f)) > 0) {
    n += k;
    if (n == cap) b = realloc(b, cap *= 2);
  }
  fclose(f);
  *len = n;
  return b;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* castor_dtype of an ONNX dtype castor tensors hold, or -1. */
static int castor_of(int dtype) {
  switch (dtype) {
  case ONNX_FLOAT: return CASTOR_F32;
  case ONNX_FLOAT16: return CASTOR_F16;
  case ONNX_BFLOAT16: return CASTOR_BF16;
  case ONNX_INT32: return CASTOR_I32;
  case ONNX_INT64: return CASTOR_I64;
  case ONNX_BOOL: return CASTOR_BOOL;
  default: return -1;
  }
}

typedef struct test_data {
  arena *a;
  onnx_tensor in[16], out[16];
  int n_in, n_out;
} test_data;

static bool read_pb_set(const char *dir, const char *prefix, onnx_tensor *ts, int *n, arena *a,
                        char *why, size_t whylen) {
  *n = 0;
  for (int k = 0; k < 16; k++) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s_%d.pb", dir, prefix, k);
    size_t len;
    char *b = read_all(path, &len);
    if (!b) break;
    diag_sink *d = diag_sink_create();
    bool ok = onnx_tensor_read(path, b, len, a, &ts[k], d);
    if (!ok) snprintf(why, whylen, "%s", diag_first_error(d));
    diag_sink_destroy(d);
    free(b);
    if (!ok) return false;
    *n = k + 1;
  }
  return true;
}

static bool close_enough(float got, float want) {
  if (isnan(want)) return isnan(got);
  if (isinf(want)) return got == want;
  return fabsf(got - want) <= 1e-7f + 1e-3f * fabsf(want);
}

/* An error castor reports as CASTOR_ERR_UNSUPPORTED: an op, attribute or
 * form of an op it does not compute (counted as "unsupported op"), or a
 * tensor type it does not compute in ("unsupported dtype"). Any other
 * error on a model castor claims to read is a failure. */
static enum outcome classify_error(castor_status st, const char *msg) {
  if (st != CASTOR_ERR_UNSUPPORTED) return FAIL;
  static const char *const dtypes[] = {"double", "uint8", "int8", "uint16", "int16", "uint32",
                                        "uint64", "string", "complex64", "complex128", "bool",
                                        "int32", "int64", "float16", "bfloat16"};
  if (strstr(msg, "of type") || strstr(msg, "Cast to") || strstr(msg, "tensor '"))
    for (size_t i = 0; i < sizeof dtypes / sizeof *dtypes; i++)
      if (strstr(msg, dtypes[i])) return UNSUP_DTYPE;
  return UNSUP_OP;
}

/* Runs one test directory; returns its outcome and fills why. */
static enum outcome run_test(castor_context *ctx, const char *dir, const onnx_model *m, char *why,
                             size_t whylen) {
  char path[4200];
  snprintf(path, sizeof path, "%s/test_data_set_0", dir);
  test_data td = {.a = arena_create()};
  enum outcome res = FAIL;
  castor_tensor *bt[16] = {0};
  const char *bn[16];
  castor_model *model = NULL;
  castor_program *prog = NULL;
  castor_tensor *outs[16] = {0}, *ins[16] = {0};
  const onnx_graph *g = &m->graph;
  for (int i = 0; i < g->n_inputs + g->n_outputs; i++) {
    const onnx_value_info *v = i < g->n_inputs ? &g->inputs[i] : &g->outputs[i - g->n_inputs];
    if (!v->is_tensor) {
      snprintf(why, whylen, "%s '%s' is not a tensor (a sequence, map or optional)",
               i < g->n_inputs ? "input" : "output", v->name);
      res = UNSUP_DTYPE;
      goto done;
    }
  }
  if (!read_pb_set(path, "input", td.in, &td.n_in, td.a, why, whylen) ||
      !read_pb_set(path, "output", td.out, &td.n_out, td.a, why, whylen))
    goto done;
  /* graph inputs that are not initializers, in order: input_K.pb binds the K-th */
  int k = 0;
  int n_bind = 0;
  for (int i = 0; i < g->n_inputs && k < td.n_in; i++) {
    bool init = false;
    for (int j = 0; j < g->n_initializers; j++) init |= !strcmp(g->initializers[j].name, g->inputs[i].name);
    if (init) continue;
    const onnx_tensor *t = &td.in[k++];
    int cd = castor_of(t->dtype);
    if (cd < 0) {
      snprintf(why, whylen, "input '%s' is %s", g->inputs[i].name, onnx_dtype_name(t->dtype));
      res = UNSUP_DTYPE;
      goto done;
    }
    if (castor_tensor_create(ctx, (castor_dtype)cd, t->rank, t->dims, &bt[n_bind]) != CASTOR_OK) {
      snprintf(why, whylen, "input '%s': %s", g->inputs[i].name, castor_context_last_error(ctx));
      res = UNSUP_DTYPE;
      goto done;
    }
    if (t->nbytes) memcpy(castor_tensor_data(bt[n_bind]), t->data, t->nbytes);
    bn[n_bind++] = g->inputs[i].name;
  }
  for (int i = 0; i < td.n_out; i++) /* integers and booleans: compared exactly */
    if (td.out[i].dtype != ONNX_FLOAT && td.out[i].dtype != ONNX_INT64 && td.out[i].dtype != ONNX_INT32 &&
        td.out[i].dtype != ONNX_BOOL) {
      snprintf(why, whylen, "output %d is %s", i, onnx_dtype_name(td.out[i].dtype));
      res = UNSUP_DTYPE;
      /* still load: an unsupported op comes first */
    }
  castor_load_options lo;
  castor_load_options_init(&lo);
  lo.bind_names = bn, lo.bind_tensors = bt, lo.n_binds = n_bind, lo.bind_where_needed = 1;
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  castor_status st = castor_model_load_file(ctx, path, &lo, &model);
  if (st != CASTOR_OK) {
    snprintf(why, whylen, "%s", castor_context_last_error(ctx));
    enum outcome c = classify_error(st, why);
    res = c == FAIL && res == UNSUP_DTYPE ? UNSUP_DTYPE : c;
    goto done;
  }
  if (res == UNSUP_DTYPE) goto done;
  castor_compile_options co;
  castor_compile_options_init(&co);
  co.threads = 1;
  if (castor_compile(model, &co, &prog) != CASTOR_OK) {
    snprintf(why, whylen, "%s", castor_context_last_error(ctx));
    goto done;
  }
  /* the program's inputs: the float, integer and bool inputs in graph order, found by index */
  int np = castor_program_num_inputs(prog), used = 0;
  for (int i = 0; i < n_bind && used < np; i++) {
    castor_dtype dt = castor_tensor_dtype(bt[i]);
    if (dt == CASTOR_F32 || dt == CASTOR_I64 || dt == CASTOR_I32 || dt == CASTOR_BOOL) ins[used++] = bt[i];
  }
  if (used != np) {
    snprintf(why, whylen, "the program has %d inputs, the test gives %d", np, used);
    goto done;
  }
  int no = castor_program_num_outputs(prog);
  if (no != td.n_out) {
    snprintf(why, whylen, "the program has %d outputs, the test expects %d", no, td.n_out);
    goto done;
  }
  if (castor_program_run(prog, ins, np, outs, no) != CASTOR_OK) {
    snprintf(why, whylen, "run: %s", castor_context_last_error(ctx));
    goto done;
  }
  for (int o = 0; o < no; o++) {
    const onnx_tensor *want = &td.out[o];
    if (castor_tensor_numel(outs[o]) != want->numel) {
      snprintf(why, whylen, "output %d has %lld elements, expected %lld", o,
               (long long)castor_tensor_numel(outs[o]), (long long)want->numel);
      goto done;
    }
    if (want->dtype != ONNX_FLOAT) { /* integers and booleans: exactly, in the output's dtype */
      int cd = castor_of(want->dtype);
      if (castor_tensor_dtype(outs[o]) != (castor_dtype)cd) {
        snprintf(why, whylen, "output %d is %s, expected %s", o, castor_dtype_name(castor_tensor_dtype(outs[o])),
                 onnx_dtype_name(want->dtype));
        goto done;
      }
      if (want->nbytes && memcmp(castor_tensor_data(outs[o]), want->data, want->nbytes) != 0) {
        snprintf(why, whylen, "output %d (%s) differs from the expected values", o, onnx_dtype_name(want->dtype));
        goto done;
      }
      continue;
    }
    if (castor_tensor_dtype(outs[o]) != CASTOR_F32) {
      snprintf(why, whylen, "output %d is %s, expected float", o, castor_dtype_name(castor_tensor_dtype(outs[o])));
      goto done;
    }
    const float *gv = castor_tensor_data(outs[o]), *wv = want->data;
    for (int64_t e = 0; e < want->numel; e++)
      if (!close_enough(gv[e], wv[e])) {
        snprintf(why, whylen, "output %d element %lld: got %.9g, expected %.9g", o, (long long)e,
                 gv[e], wv[e]);
        goto done;
      }
  }
  res = PASS;
done:
  for (int i = 0; i < 16; i++) castor_tensor_destroy(outs[i]), castor_tensor_destroy(bt[i]);
  castor_program_destroy(prog);
  castor_model_destroy(model);
  arena_destroy(td.a);
  return res;
}

static void run_dir(castor_context *ctx, const char *root, const char *filter, int one_per_op) {
  DIR *dp = opendir(root);
  if (!dp) {
    fprintf(stderr, "onnx_conformance: cannot open %s\n", root);
    exit(2);
  }
  char **names = NULL;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(dp)))
    if (e->d_name[0] != '.') {
      names = realloc(names, (size_t)(n + 1) * sizeof *names);
      names[n++] = strdup(e->d_name);
    }
  closedir(dp);
  qsort(names, (size_t)n, sizeof *names, cmp_str);
  for (int i = 0; i < n; i++) {
    if (filter && !strstr(names[i], filter)) goto next;
    char dir[2048], path[4096];
    snprintf(dir, sizeof dir, "%s/%s", root, names[i]);
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    size_t len;
    char *bytes = read_all(path, &len);
    if (!bytes) goto next;
    diag_sink *d = diag_sink_create();
    onnx_model *m = onnx_model_read(path, bytes, len, dir, d);
    free(bytes);
    if (!m) {
      fprintf(stderr, "onnx_conformance: %s: %s", names[i], diag_first_error(d));
      diag_sink_destroy(d);
      goto next;
    }
    diag_sink_destroy(d);
    /* the op types of the graph, each once */
    const char *types[64];
    int nt = 0;
    for (int k = 0; k < m->graph.n_nodes && nt < 64; k++) {
      bool seen = false;
      for (int j = 0; j < nt; j++) seen |= !strcmp(types[j], m->graph.nodes[k].op_type);
      if (!seen) types[nt++] = m->graph.nodes[k].op_type;
    }
    bool skip = false;
    if (one_per_op && nt == 1) {
      op_count *c = op_slot(types[0]);
      skip = c && (c->n[0] + c->n[1] + c->n[2] + c->n[3]) > 0;
    }
    if (!skip && !(one_per_op && nt != 1)) {
      char why[1024] = "";
      enum outcome r = run_test(ctx, dir, m, why, sizeof why);
      totals[r]++;
      for (int j = 0; j < nt; j++) {
        op_count *c = op_slot(types[j]);
        if (c) c->n[r]++;
      }
      size_t wl = strlen(why);
      while (wl && why[wl - 1] == '\n') why[--wl] = 0; /* diagnostics end in a newline */
      if (verbose || r == FAIL) printf("%-17s %s%s%s\n", outcome_names[r], names[i], wl ? ": " : "", why);
    }
    onnx_model_free(m);
  next:
    free(names[i]);
  }
  free(names);
}

static int cmp_op(const void *a, const void *b) {
  return strcmp(((const op_count *)a)->op, ((const op_count *)b)->op);
}

static void write_table(FILE *f) {
  qsort(ops, (size_t)n_ops, sizeof *ops, cmp_op);
  fprintf(f, "| op type | pass | fail | unsupported op | unsupported dtype |\n");
  fprintf(f, "|---|---:|---:|---:|---:|\n");
  for (int i = 0; i < n_ops; i++)
    fprintf(f, "| %s | %d | %d | %d | %d |\n", ops[i].op, ops[i].n[PASS], ops[i].n[FAIL],
            ops[i].n[UNSUP_OP], ops[i].n[UNSUP_DTYPE]);
  fprintf(f, "| **all tests** | %d | %d | %d | %d |\n", totals[PASS], totals[FAIL], totals[UNSUP_OP],
          totals[UNSUP_DTYPE]);
}

int main(int argc, char **argv) {
  const char *table = NULL, *expect = NULL, *filter = NULL;
  int one_per_op = 0;
  castor_context *ctx;
  if (castor_context_create(&ctx) != CASTOR_OK) return 2;
  int ndirs = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--table") && i + 1 < argc) table = argv[++i];
    else if (!strcmp(argv[i], "--expect") && i + 1 < argc) expect = argv[++i];
    else if (!strcmp(argv[i], "--filter") && i + 1 < argc) filter = argv[++i];
    else if (!strcmp(argv[i], "--one-per-op")) one_per_op = 1;
    else if (!strcmp(argv[i], "-v")) verbose = 1;
    else {
      ndirs++;
      run_dir(ctx, argv[i], filter, one_per_op);
    }
  }
  if (!ndirs) {
    fprintf(stderr, "usage: onnx_conformance [--table FILE] [--expect FILE] [--one-per-op] "
                    "[--filter S] [-v] DATA_DIR...\n");
    return 2;
  }
  printf("onnx_conformance: %d pass, %d fail, %d unsupported op, %d unsupported dtype\n",
         totals[PASS], totals[FAIL], totals[UNSUP_OP], totals[UNSUP_DTYPE]);
  if (table) {
    FILE *f = fopen(table, "w");
    if (!f) return 2;
    write_table(f);
    fclose(f);
  }
  int status = 0;
  if (expect) {
    /* the generated table sits between two marker lines of the document */
    size_t len;
    char *doc = read_all(expect, &len);
    if (!doc) {
      fprintf(stderr, "onnx_conformance: cannot read %s\n", expect);
      return 2;
    }
    doc = realloc(doc, len + 1);
    doc[len] = 0;
    const char *b = strstr(doc, "<!-- onnx-table-begin -->\n"), *e = strstr(doc, "<!-- onnx-table-end -->");
    char *got = NULL;
    size_t got_len = 0;
    FILE *mf = open_memstream(&got, &got_len);
    write_table(mf);
    fclose(mf);
    if (!b || !e) {
      fprintf(stderr, "onnx_conformance: %s has no onnx-table markers\n", expect);
      status = 1;
    } else {
      b += strlen("<!-- onnx-table-begin -->\n");
      if ((size_t)(e - b) != got_len || memcmp(b, got, got_len) != 0) {
        fprintf(stderr, "onnx_conformance: the results differ from %s's table; if the change "
                        "is intended, regenerate it (tests/onnx/README.md)\n--- got:\n%s",
                expect, got);
        status = 1;
      }
    }
    free(got);
    free(doc);
  }
  castor_context_destroy(ctx);
  return status;
}
