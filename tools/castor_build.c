/* SPDX-License-Identifier: Apache-2.0 */
/*
 * castor_build.c: `castor build`, ahead-of-time compilation.
 *
 *   castor build MODEL [-o NAME] [--emit=exe|obj|ir|llvm|asm|ptx] [--prefix=ID]
 *                [--target=cpu|cuda] [--sm=sm_NN]
 *                [--cpu=CPU] [--features=LIST] [--policy P] [-O N] ...
 *
 * The model goes through castor_compile's own pipeline (castor_compile_to,
 * api/internal.h), then codegen/cpu/cg_aot.c emits the JIT's kernels with the
 * weights into an object file. `exe` (the default) links that object with
 * the AOT main driver and the static runtime by running the system C
 * compiler ($CC, else cc): the executable needs no LLVM. Those archives
 * are found through $CASTOR_AOT_LIBDIR, else next to this executable
 * (/proc/self/exe, then CASTOR_AOT_RELDIR: an installed castor), else in
 * the build tree it was built in (CASTOR_AOT_BUILD_LIBDIR).
 */
#include <errno.h>
#include <limits.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "api/internal.h"
#include "tools/castor_build.h"
#include "tools/options.h"

#ifndef CASTOR_AOT_RELDIR
#define CASTOR_AOT_RELDIR "../lib/castor"
#endif
#ifndef CASTOR_AOT_BUILD_LIBDIR
#define CASTOR_AOT_BUILD_LIBDIR ""
#endif
#ifndef CASTOR_AOT_LINK_FLAGS
#define CASTOR_AOT_LINK_FLAGS ""
#endif

extern char **environ;

static const char *const aot_libs[] = {"libcastor_aot_main.a", "libcastor_formats.a", "libcastor_runtime.a",
                                       "libcastor_util.a"};
enum { N_AOT_LIBS = sizeof aot_libs / sizeof *aot_libs };

static int usage(FILE *f, int rc) {
  fprintf(f,
          "usage: castor build MODEL [-o NAME] [--emit=KIND] [options]\n"
          "\n"
          "Compiles MODEL ahead of time: the kernels `castor run` JIT-compiles, with the\n"
          "weights, into an executable or an object file (same CPU, bit-identical results).\n"
          "\n"
          "  -o NAME             output (default: the model file's name without its folder\n"
          "                      and extension, in the current directory, for exe; that\n"
          "                      name plus .o for obj; stdout for ir, llvm, asm and ptx)\n"
          "  --target=cpu|cuda   cuda: PTX for NVIDIA GPUs (with --emit=ptx; needs no GPU)\n"
          "  --sm=sm_NN          --target=cuda: the PTX architecture (default sm_80)\n"
          "  --emit=KIND         exe   a standalone executable (default); it links the castor\n"
          "                            runtime statically and needs no LLVM; NAME --help\n"
          "                      obj   NAME.o plus NAME.h declaring <prefix>_run()\n"
          "                      ir    the castor IR after the pipeline\n"
          "                      llvm  the LLVM IR of the object\n"
          "                      asm   the host assembly of the object\n"
          "                      ptx   PTX of the cuda target (stdout without -o)\n"
          "  --prefix=ID         prefix of the object's symbols (default: the model's name)\n"
          "  --cpu=CPU           target CPU (default: this host's, as the JIT)\n"
          "  --features=LIST     target features, e.g. +avx2,+fma (default: this host's)\n"
          "  --weights FILE      weights (.safetensors) instead of the model's 'weights' line\n"
          "                      (.cast), or in place of an ONNX model's, by key\n"
          "  --weights-seed S    seed of the init (Keras's initializers) without a weights file (0)\n"
          "  --dim NAME=VALUE    ONNX models: bind the symbolic dimension NAME to VALUE\n"
          "  --policy P          dtype policy instead of the model's 'policy' line\n"
          "  --fp32-ops=LIST     force these ops to float32 (IR op names)\n"
          "  --fp32-layers=LIST  force these layers to float32 (layer names)\n"
          "  --keep-16bit-outputs  leave 16-bit model outputs 16-bit\n"
          "  --pad8              pad 16-bit matmuls to multiples of 8 (always on for cuda)\n"
          "  -O N                LLVM optimization level 0-3 (default 2: castor's short\n"
          "                      kernel pipeline; 1 and 3: LLVM's default<O1>/<O3>)\n"
          "  --batch B           bind the batch N to B rows: static shapes\n"
          "\n"
          "An executable is linked by $CC (default cc) with the AOT runtime archives from\n"
          "$CASTOR_AOT_LIBDIR, else the install next to this castor, else its build tree.\n");
  return rc;
}

typedef enum emit_kind { EMIT_EXE, EMIT_OBJ, EMIT_IR, EMIT_LLVM, EMIT_ASM, EMIT_PTX } emit_kind;

typedef struct build {
  const char *model, *out, *prefix, *cpu, *features;
  const char *weights; /* --weights, an input too */
  emit_kind emit;
  bool reported; /* an error was printed already */
  const char *sm; /* --target=cuda: the PTX architecture (NULL: sm_80) */
  char *prefix_owned, *out_owned, *header_path, *tmp_dir, *tmp_obj, *libdir;
} build;

/* ---- finding the AOT archives and running the C compiler ---- */

static bool has_aot_libs(const char *dir) {
  char path[PATH_MAX];
  for (size_t i = 0; i < sizeof aot_libs / sizeof *aot_libs; i++) {
    if (snprintf(path, sizeof path, "%s/%s", dir, aot_libs[i]) >= (int)sizeof path) return false;
    if (access(path, R_OK) != 0) return false;
  }
  return true;
}

/* The directory holding aot_libs, or NULL after an error message. */
static char *find_aot_libdir(bool report) {
  const char *env = getenv("CASTOR_AOT_LIBDIR");
  if (env && env[0]) {
    if (has_aot_libs(env)) return strdup(env);
    if (report)
      cli_error("$CASTOR_AOT_LIBDIR ('%s') lacks the AOT runtime (%s, %s, %s, %s)", env, aot_libs[0], aot_libs[1],
            aot_libs[2], aot_libs[3]);
    return NULL;
  }
  char self[PATH_MAX], dir[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  char *installed = NULL;
  if (n > 0) {
    self[n] = 0;
    char *slash = strrchr(self, '/');
    if (slash) *slash = 0;
    if (snprintf(dir, sizeof dir, "%s/%s", self, CASTOR_AOT_RELDIR) < (int)sizeof dir) {
      char *real = has_aot_libs(dir) ? realpath(dir, NULL) : NULL;
      if (real) return real;
      installed = dir;
    }
  }
  if (CASTOR_AOT_BUILD_LIBDIR[0] && has_aot_libs(CASTOR_AOT_BUILD_LIBDIR)) return strdup(CASTOR_AOT_BUILD_LIBDIR);
  if (report)
    cli_error("cannot find the AOT runtime (%s) in %s%s%s; set $CASTOR_AOT_LIBDIR to its directory", aot_libs[0],
        installed ? installed : "(no /proc/self/exe)", CASTOR_AOT_BUILD_LIBDIR[0] ? " or " : "",
        CASTOR_AOT_BUILD_LIBDIR);
  return NULL;
}

/* Runs argv[0] (found on $PATH) and waits; false after an error message. */
static bool run_command(char **argv) {
  pid_t pid;
  int err = posix_spawnp(&pid, argv[0], NULL, NULL, argv, environ);
  if (err) {
    cli_error("cannot run the C compiler '%s': %s (install one, or set $CC)", argv[0], strerror(err));
    return false;
  }
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) {
      cli_error("waiting for '%s': %s", argv[0], strerror(errno));
      return false;
    }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return true;
  if (WIFEXITED(status)) cli_error("linking failed: '%s' exited with status %d", argv[0], WEXITSTATUS(status));
  else cli_error("linking failed: '%s' was killed by signal %d", argv[0], WTERMSIG(status));
  return false;
}

/* cc -o OUT OBJ <aot archives> -lm -lpthread -ldl, with $CC split at spaces */
static bool link_executable(build *b, const char *obj) {
  VEC(char *) argv = {0};
  const char *cc_env = getenv("CC");
  char *cc = strdup(cc_env && cc_env[0] ? cc_env : "cc");
  for (char *tok = strtok(cc, " \t"); tok; tok = strtok(NULL, " \t")) vec_push(&argv, tok);
  if (!argv.len) vec_push(&argv, "cc");
  char *flags = strdup(CASTOR_AOT_LINK_FLAGS);
  for (char *tok = strtok(flags, " "); tok; tok = strtok(NULL, " ")) vec_push(&argv, tok);
  char *libs[N_AOT_LIBS];
  vec_push(&argv, "-o");
  vec_push(&argv, (char *)b->out);
  vec_push(&argv, (char *)obj);
  for (int i = 0; i < N_AOT_LIBS; i++) {
    size_t n = strlen(b->libdir) + strlen(aot_libs[i]) + 2;
    libs[i] = xmalloc(n);
    snprintf(libs[i], n, "%s/%s", b->libdir, aot_libs[i]);
    vec_push(&argv, libs[i]);
  }
  vec_push(&argv, "-lm");
  vec_push(&argv, "-lpthread");
  vec_push(&argv, "-ldl");
  vec_push(&argv, NULL);
  bool ok = run_command(argv.data);
  if (!ok) remove(b->out);
  for (int i = 0; i < N_AOT_LIBS; i++) free(libs[i]);
  free(flags);
  free(cc);
  vec_free(&argv);
  return ok;
}

/* ---- outputs ---- */

/* Fails early, before compiling, if path's directory cannot take a file. */
static bool check_writable(const char *path) {
  if (!strcmp(path, "-")) return true;
  struct stat st;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
    cli_error("cannot write '%s': it is a directory", path);
    return false;
  }
  char *dir = strdup(path), *slash = strrchr(dir, '/');
  if (slash) slash[slash == dir ? 1 : 0] = 0;
  const char *d = slash ? dir : ".";
  bool ok = access(d, W_OK) == 0;
  if (!ok) cli_error("cannot write '%s': %s", path, strerror(errno));
  else if (stat(path, &st) == 0 && access(path, W_OK) != 0) ok = false, cli_error("cannot write '%s': %s", path, strerror(errno));
  free(dir);
  return ok;
}

/* The model file's name without its folder and extension
 * ("samples/mnist_mlp.cast" -> "mnist_mlp"): a default output's name,
 * written to the current directory. NULL when nothing is left. */
static char *file_stem(const char *path) {
  const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
  const char *dot = strrchr(base, '.');
  size_t n = dot && dot != base ? (size_t)(dot - base) : strlen(base);
  if (!n) return NULL;
  char *s = xmalloc(n + 1);
  memcpy(s, base, n);
  s[n] = 0;
  return s;
}

/* Output names and checks, once the model's name is known; false after an
 * error message. Runs before the expensive part of the compilation. */
static bool prepare(build *b, const char *model_name) {
  str_buf id;
  str_buf_init(&id);
  bool ok = true;
  if (b->prefix) { /* a given prefix must already be an identifier */
    cg_aot_c_identifier(&id, b->prefix);
    if (strcmp(str_buf_cstr(&id), b->prefix))
      ok = false, cli_error("--prefix '%s' is not a usable C identifier (try '%s')", b->prefix, str_buf_cstr(&id));
  } else {
    cg_aot_c_identifier(&id, model_name);
    b->prefix = b->prefix_owned = str_buf_take(&id);
  }
  str_buf_fini(&id);
  if (!ok) return false;
  if (!b->out && (b->emit == EMIT_EXE || b->emit == EMIT_OBJ)) { /* named after the model's file */
    char *stem = file_stem(b->model);
    if (!stem) return cli_error("cannot name the output after '%s': give -o NAME", b->model), false;
    if (b->emit == EMIT_EXE) {
      b->out = b->out_owned = stem;
    } else {
      size_t n = strlen(stem) + 3;
      b->out = b->out_owned = xmalloc(n);
      snprintf(b->out_owned, n, "%s.o", stem);
      free(stem);
    }
    struct stat in_st, out_st; /* `castor build model` in model's folder: never over the model */
    if (stat(b->model, &in_st) == 0 && stat(b->out, &out_st) == 0 && in_st.st_dev == out_st.st_dev &&
        in_st.st_ino == out_st.st_ino)
      return cli_error("the output would be '%s', the model file itself: give -o NAME", b->out), false;
  } else if (!b->out) {
    b->out = "-";
  }
  if ((b->emit == EMIT_EXE || b->emit == EMIT_OBJ) && !strcmp(b->out, "-"))
    return cli_error("--emit=%s writes files: give -o NAME", b->emit == EMIT_EXE ? "exe" : "obj"), false;
  if (b->emit == EMIT_OBJ) { /* NAME.o -> NAME.h, else NAME.h beside NAME */
    size_t n = strlen(b->out);
    bool dot_o = n > 2 && !strcmp(b->out + n - 2, ".o");
    b->header_path = xmalloc(n + 3);
    snprintf(b->header_path, n + 3, "%.*s.h", (int)(dot_o ? n - 2 : n), b->out);
    if (!check_writable(b->header_path)) return false;
  }
  if (!check_writable(b->out)) return false;
  const cli_file ins[] = {{"model file", b->model}, {"--weights file", b->weights}};
  const cli_file outs[] = {{"-o", strcmp(b->out, "-") ? b->out : NULL}, {"the header", b->header_path}};
  if (!cli_outputs_distinct(ins, 2, outs, 2)) return false;
  if (b->emit == EMIT_OBJ || b->emit == EMIT_EXE) {
    b->libdir = find_aot_libdir(b->emit == EMIT_EXE);
    if (!b->libdir && b->emit == EMIT_EXE) return false;
  }
  if (b->emit == EMIT_EXE) {
    const char *tmp = getenv("TMPDIR");
    tmp = tmp && tmp[0] ? tmp : "/tmp";
    size_t n = strlen(tmp) + 32;
    b->tmp_dir = xmalloc(n);
    snprintf(b->tmp_dir, n, "%s/castor-build-XXXXXX", tmp);
    if (!mkdtemp(b->tmp_dir)) {
      cli_error("cannot create a temporary directory in '%s': %s", tmp, strerror(errno));
      free(b->tmp_dir), b->tmp_dir = NULL;
      return false;
    }
    b->tmp_obj = xmalloc(n + 16);
    snprintf(b->tmp_obj, n + 16, "%s/model.o", b->tmp_dir);
  }
  return true;
}

static castor_status emit(const ir_graph *g, const cg_backend *be, const cg_backend_options *bo, void *arg,
                          diag_sink *d) {
  build *b = arg;
  if (!prepare(b, g->name)) return b->reported = true, CASTOR_ERR_IO;
  if (b->emit == EMIT_IR || b->emit == EMIT_PTX) { /* text: the IR, or PTX (cg_nvptx.c) */
    str_buf s;
    str_buf_init(&s);
    if (b->emit == EMIT_IR) ir_print(g, &s);
    else if (!cg_backend_check(be, g, d) || !be->emit(g, bo, CG_EMIT_PTX, &s, d))
      return str_buf_fini(&s), castor_status_from_diag(d, CASTOR_ERR_CODEGEN);
    FILE *f = strcmp(b->out, "-") ? fopen(b->out, "w") : stdout;
    bool ok = f && fputs(str_buf_cstr(&s), f) >= 0;
    if (f && f != stdout && fclose(f) != 0) ok = false;
    if (!ok) diag_error_kind(d, DIAG_KIND_IO, (diag_loc){0}, "cannot write '%s': %s", b->out, strerror(errno));
    str_buf_fini(&s);
    return ok ? CASTOR_OK : CASTOR_ERR_IO;
  }
  cg_options co = bo->cg;
  co.cpu = b->cpu, co.features = b->features;
  cg_aot_options ao;
  cg_aot_options_init(&ao);
  ao.prefix = b->prefix;
  ao.source = b->model;
  char about[512];
  snprintf(about, sizeof about, "castor %s, model '%s' from %s, policy %s", castor_version(), g->name, b->model,
           ir_policy_name(g->policy));
  ao.about = about;
  cg_aot_kind kind = b->emit == EMIT_LLVM ? CG_AOT_LLVM : b->emit == EMIT_ASM ? CG_AOT_ASM : CG_AOT_OBJ;
  const char *path = b->out;
  str_buf hint;
  str_buf_init(&hint);
  if (b->emit == EMIT_OBJ) {
    ao.header_path = b->header_path;
    const char *obj = strrchr(b->out, '/') ? strrchr(b->out, '/') + 1 : b->out;
    str_buf_printf(&hint,
                   " * Link: the object needs only the static castor runtime (no LLVM), e.g.\n"
                   " *   cc -c app.c && cc app.o %s -L%s -lcastor_runtime -lcastor_util -lm -lpthread\n"
                   " * or, with castor installed: cc app.o %s $(pkg-config --libs castor-runtime)\n",
                   obj, b->libdir ? b->libdir : "<castor's lib/castor>", obj);
    ao.link_hint = str_buf_cstr(&hint);
  } else if (b->emit == EMIT_EXE) {
    ao.entry = true;
    path = b->tmp_obj;
  }
  bool ok = cg_compile_aot(g, &co, &ao, kind, path, d);
  str_buf_fini(&hint);
  return ok ? CASTOR_OK : CASTOR_ERR_IO;
}

/* ---- arguments ---- */

/* The shared options build takes. Its --target, --sm and --cpu are its own:
 * --target knows the AOT targets only, and --cpu names the object's CPU
 * (with --features), not the JIT's. */
enum { BUILD_OPTIONS = CLI_OPT_LOAD | CLI_OPT_POLICY | CLI_OPT_AUTOCAST | CLI_OPT_OPT | CLI_OPT_BATCH };

int castor_build_main(int argc, char **argv) {
  build b = {0};
  cli_options opts;
  cli_options_init(&opts);
  castor_compile_options *co = &opts.compile;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v;
    bool missing = false;
#define OPT(name) ((v = str_opt_arg(argc, argv, &i, name, &missing)) != NULL || missing)
#define NEED(what) \
  if (missing) return cli_error("%s needs %s", a, what)
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage(stdout, 0);
    cli_opt_result shared = cli_options_parse(&opts, BUILD_OPTIONS, argc, argv, &i);
    if (shared == CLI_OPT_ERROR) return 1;
    if (shared == CLI_OPT_TAKEN) continue;
    if (OPT("-o")) {
      NEED("an output file");
      b.out = v;
    } else if (OPT("--emit")) {
      NEED("a kind");
      if (!strcmp(v, "exe")) b.emit = EMIT_EXE;
      else if (!strcmp(v, "obj")) b.emit = EMIT_OBJ;
      else if (!strcmp(v, "ir")) b.emit = EMIT_IR;
      else if (!strcmp(v, "llvm")) b.emit = EMIT_LLVM;
      else if (!strcmp(v, "asm")) b.emit = EMIT_ASM;
      else if (!strcmp(v, "ptx")) b.emit = EMIT_PTX;
      else return cli_error("--emit takes exe, obj, ir, llvm, asm or ptx, got '%s'", v);
    } else if (OPT("--prefix")) {
      NEED("a C identifier");
      b.prefix = v;
    } else if (OPT("--cpu")) {
      NEED("a CPU name");
      b.cpu = v;
    } else if (OPT("--features")) {
      NEED("a feature list");
      b.features = v;
    } else if (OPT("--target")) {
      NEED("cpu or cuda");
      if (strcmp(v, "cpu") && strcmp(v, "cuda")) return cli_error("--target takes cpu or cuda, got '%s'", v);
      co->target = strcmp(v, "cuda") ? CASTOR_TARGET_CPU : CASTOR_TARGET_CUDA;
    } else if (OPT("--sm")) {
      NEED("a GPU architecture, e.g. sm_90");
      b.sm = co->sm = v;
    } else if (a[0] == '-' && a[1]) {
      return cli_unknown_option(a, "build", usage);
    } else if (!b.model) {
      b.model = a;
    } else {
      return cli_error("unexpected argument '%s' (see castor build --help)", a);
    }
#undef NEED
#undef OPT
  }
  if (!b.model) return cli_error("build: no model file given (see castor build --help)");
  b.weights = opts.load.weights_path;
  if (b.out && !b.out[0]) return cli_error("-o needs an output file");
  if (b.prefix && !b.prefix[0]) return cli_error("--prefix needs a C identifier");
  bool cuda = co->target == CASTOR_TARGET_CUDA;
  if (b.emit == EMIT_PTX && !cuda) return cli_error("--emit=ptx needs --target=cuda");
  if (cuda && b.emit != EMIT_PTX && b.emit != EMIT_IR)
    return cli_error("--target=cuda builds --emit=ptx (or ir), not a CPU executable or object");
  if (b.sm && !cuda) return cli_error("--sm needs --target=cuda");

  int rc = 1;
  castor_context *ctx = NULL;
  castor_model *m = NULL;
  castor_context_create(&ctx);
  if (cli_load_model(ctx, b.model, &opts, &m) != CASTOR_OK) goto done;
  if (castor_compile_to(m, co, NULL, emit, &b) != CASTOR_OK) {
    if (!b.reported) cli_put_diags(castor_context_last_error(ctx));
    goto done;
  }
  cli_put_diags(castor_context_last_warnings(ctx));
  if (b.emit == EMIT_EXE && !link_executable(&b, b.tmp_obj)) goto done;
  rc = 0;
done:
  if (b.tmp_obj) remove(b.tmp_obj);
  if (b.tmp_dir) rmdir(b.tmp_dir);
  free(b.tmp_obj), free(b.tmp_dir), free(b.libdir), free(b.header_path), free(b.prefix_owned), free(b.out_owned);
  castor_model_destroy(m);
  castor_context_destroy(ctx);
  return rc;
}
