/*
 * castor-opt: text IR in, pipeline, text IR out (like LLVM's opt). Exists
 * so that every pass can be tested and debugged alone.
 *
 *   castor-opt FILE.cir --passes=verify,dce [--verify-each]
 *              [--dump-after=PASS|all] [--dump-dir=DIR] [-o OUT]
 */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "passes/passes.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: castor-opt FILE.cir --passes=LIST [options]\n"
          "\n"
          "Reads castor text IR (FILE or - for stdin), runs the passes in LIST\n"
          "(comma-separated) and prints the resulting IR.\n"
          "\n"
          "options:\n"
          "  --passes=LIST       passes to run, in order (available: %s)\n"
          "  --verify-each       verify the IR after every pass\n"
          "  --fp32-ops=LIST     autocast: force these ops to f32\n"
          "  --fp32-layers=LIST  autocast: force these layers to f32\n"
          "  --keep-16bit-outputs  autocast: do not cast 16-bit outputs to f32\n"
          "  --policy=P          set the graph's policy before the passes run\n"
          "  --loss=L, --optimizer=O, --learning-rate=LR, --momentum=M, --nesterov, --centered, --rho=R,\n"
          "  --beta-1=B, --beta-2=B, --epsilon=E, --loss-scale=dynamic|none|N, --loss-scale-min=S,\n"
          "  --weight-decay=W (adamw), --loss-scale-initial=S, --loss-scale-growth-steps=N,\n"
          "  --clipnorm=C, --clipvalue=C, --global-clipnorm=C,\n"
          "  --from-logits        grad: the loss, optimizer and loss scale (docs/training.md)\n"
          "  --dump-after=PASS   print the IR after PASS (or 'all') to stderr\n"
          "  --dump-dir=DIR      write dumps to DIR/NN.after-PASS.cir instead\n"
          "  -o FILE             write the result to FILE instead of stdout\n"
          "  -h, --help          show this help\n",
          pass_list());
}

static const char *opt_value(const char *arg, const char *name) {
  size_t n = strlen(name);
  return strncmp(arg, name, n) == 0 && arg[n] == '=' ? arg + n + 1 : NULL;
}

static bool is_train_option(const char *a) {
  static const char *const keys[] = {"loss=", "optimizer=", "learning-rate=", "momentum=", "rho=", "beta-1=",
                                     "beta-2=", "epsilon=", "loss-scale=", "loss-scale-min=",
                                     "weight-decay=", "loss-scale-initial=", "loss-scale-growth-steps=",
                                     "clipnorm=", "clipvalue=", "global-clipnorm="};
  for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
    if (!strncmp(a, keys[i], strlen(keys[i]))) return true;
  return false;
}

/* Registered with atexit by main: standard output flushed and closed, and
 * a write error (a full disk, /dev/full, a file-size limit) reported with
 * exit status 1, so that output cut short never ends in status 0. A
 * descriptor closed before the start (`>&-`) with nothing written is not
 * an error. */
static void close_stdout(void) {
  int e = 0;
  bool bad = ferror(stdout) != 0;
  if (fflush(stdout) != 0) bad = true, e = errno;
  if (fclose(stdout) != 0 && errno != EBADF && !bad) bad = true, e = errno;
  if (!bad) return;
  fprintf(stderr, "%s: error: cannot write standard output%s%s\n", "castor-opt", e ? ": " : "", e ? strerror(e) : "");
  _exit(1);
}

int main(int argc, char **argv) {
  atexit(close_stdout);
  signal(SIGXFSZ, SIG_IGN);
  const char *file = NULL, *passes = NULL, *out_path = NULL, *policy = NULL;
  pass_options po;
  pass_options_init(&po);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else if ((v = opt_value(a, "--passes"))) {
      passes = v;
    } else if ((v = opt_value(a, "--fp32-ops"))) {
      po.autocast.fp32_ops = v;
    } else if ((v = opt_value(a, "--fp32-layers"))) {
      po.autocast.fp32_layers = v;
    } else if (!strcmp(a, "--keep-16bit-outputs")) {
      po.autocast.keep_16bit_outputs = true;
    } else if ((v = opt_value(a, "--policy"))) {
      policy = v;
    } else if (!strcmp(a, "--from-logits")) {
      po.train.from_logits = true;
    } else if (!strcmp(a, "--nesterov")) {
      po.train.nesterov = true;
    } else if (!strcmp(a, "--centered")) {
      po.train.centered = true;
    } else if (a[0] == '-' && a[1] == '-' && strchr(a, '=') && is_train_option(a + 2)) {
      diag_sink *d = diag_sink_create();
      char key[64];
      snprintf(key, sizeof key, "%.*s", (int)(strchr(a, '=') - a - 2), a + 2);
      bool ok = pass_train_option(&po.train, key, strchr(a, '=') + 1, d);
      if (!ok) fprintf(stderr, "castor-opt: %s", diag_text(d));
      diag_sink_destroy(d);
      if (!ok) return 1;
    } else if (!strcmp(a, "--verify-each")) {
      po.verify_each = true;
    } else if ((v = opt_value(a, "--dump-after"))) {
      po.dump_after = v;
    } else if ((v = opt_value(a, "--dump-dir"))) {
      po.dump_dir = v;
    } else if (!strcmp(a, "-o") && i + 1 < argc) {
      out_path = argv[++i];
    } else if (a[0] == '-' && a[1]) {
      fprintf(stderr, "castor-opt: error: unknown option '%s' (see --help)\n", a);
      return 1;
    } else if (!file) {
      file = a;
    } else {
      fprintf(stderr, "castor-opt: error: more than one input file ('%s' and '%s')\n", file, a);
      return 1;
    }
  }
  if (!file) {
    fprintf(stderr, "castor-opt: error: no input file (see --help)\n");
    return 1;
  }
  if (!passes) passes = "";

  char *text = NULL;
  size_t len = 0;
  str_buf why;
  str_buf_init(&why);
  bool read_ok = !strcmp(file, "-")
                     ? str_read_fd_max(0, IR_MAX_TEXT_BYTES, &text, &len, &why)
                     : str_read_file_max(file, IR_MAX_TEXT_BYTES, &text, &len, &why);
  if (!read_ok) {
    fprintf(stderr, "castor-opt: error: cannot read '%s': %s\n", !strcmp(file, "-") ? "<stdin>" : file,
            str_buf_cstr(&why));
    str_buf_fini(&why);
    return 1;
  }
  str_buf_fini(&why);
  if (!strcmp(file, "-")) file = "<stdin>";

  diag_sink *d = diag_sink_create();
  str_buf dumps, out;
  str_buf_init(&dumps);
  str_buf_init(&out);
  po.dump_out = &dumps;
  int rc = 1;
  ir_graph *g = pass_pipeline_check(passes, d) ? ir_parse(file, text, len, d) : NULL;
  if (g && policy && !ir_policy_from_name(policy, strlen(policy), &g->policy)) {
    diag_error(d, (diag_loc){0}, "unknown policy '%s' (float32, float16, bfloat16, mixed_float16, mixed_bfloat16)", policy);
  } else if (g && pass_run_pipeline(g, passes, &po, d)) {
    ir_print(g, &out);
    rc = 0;
  }
  fputs(str_buf_cstr(&dumps), stderr);
  fputs(diag_text(d), stderr);
  if (rc == 0) {
    FILE *f = out_path ? fopen(out_path, "wb") : stdout;
    if (!f || fputs(str_buf_cstr(&out), f) == EOF || (out_path && fclose(f) != 0)) {
      fprintf(stderr, "castor-opt: error: cannot write '%s': %s\n", out_path ? out_path : "<stdout>",
              strerror(errno));
      rc = 1;
    }
  }
  str_buf_fini(&dumps);
  str_buf_fini(&out);
  ir_graph_destroy(g);
  diag_sink_destroy(d);
  free(text);
  return rc;
}
