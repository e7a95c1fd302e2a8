/* SPDX-License-Identifier: Apache-2.0 */
/*
 * profile.c: castor run --profile. Runs a program with each kernel launch
 * timed by the runtime (rt_program_run_profile: the monotonic clock
 * around every launch, only when a profile is asked for) and turns the
 * events into two reports: a table per kernel and per layer (mean time a
 * run, share of the measured run time, GFLOP/s, bytes moved) and a
 * Chrome trace (the JSON Perfetto and chrome://tracing open).
 *
 * Everything the reports name comes from the program's launches, which
 * codegen filled (rt_launch: name, layer, flops_per_row, bytes_per_row,
 * bytes_fixed): the runtime never sees the IR. A share is a launch's time
 * over the run time measured around the backend's run, so the shares sum
 * to the time the kernels take of a run; what is left is the runtime's own
 * work (buffer table, thread wake-ups between launches).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"

/* One row of a table: a kernel, or a layer (the sum of its kernels). */
typedef struct prof_row {
  const char *name, *layer;
  int n_kernels;
  int64_t ns, flops, bytes; /* over all runs */
  int64_t cpu_ns, cpu_max_ns, span_ns; /* kernels: their tiles' CPU time, all threads' and the busiest's, and their
                                        * span on free threads (rt_profile_event), over all runs */
  int64_t n_row, n_col;       /* kernels: the split of the last run */
} prof_row;

static const char *layer_name(const rt_launch *l) { return l->layer ? l->layer : "(none)"; }

static void json_str(str_buf *out, const char *s) {
  str_buf_putc(out, '"');
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') str_buf_printf(out, "\\%c", *p);
    else if (*p < 0x20) str_buf_printf(out, "\\u%04x", *p);
    else str_buf_putc(out, (char)*p);
  }
  str_buf_putc(out, '"');
}

/* "1.25 MB", "340 kB", "96 B" */
static void bytes_str(char *buf, size_t n, double b) {
  if (b >= 1e9) snprintf(buf, n, "%.2f GB", b / 1e9);
  else if (b >= 1e6) snprintf(buf, n, "%.2f MB", b / 1e6);
  else if (b >= 1e3) snprintf(buf, n, "%.1f kB", b / 1e3);
  else snprintf(buf, n, "%.0f B", b);
}

static void print_rows(str_buf *out, const char *what, const prof_row *rows, int n, int runs, double run_ms,
                       int width) {
  str_buf_printf(out, "%-*s %s  %9s %7s %9s %10s\n", width, what, what[0] == 'k' ? "layer               " : "kernels",
                 "ms/run", "share", "GFLOP/s", "moved/run");
  for (int i = 0; i < n; i++) {
    const prof_row *r = &rows[i];
    double ms = (double)r->ns / 1e6 / runs;
    char gf[32], moved[32];
    if (r->flops > 0 && r->ns > 0) snprintf(gf, sizeof gf, "%.2f", (double)r->flops / (double)r->ns);
    else snprintf(gf, sizeof gf, "-");
    bytes_str(moved, sizeof moved, (double)r->bytes / runs);
    if (what[0] == 'k')
      str_buf_printf(out, "%-*s %-20s  %9.4f %6.1f%% %9s %10s\n", width, r->name, r->layer, ms,
                     run_ms > 0 ? 100 * ms / run_ms : 0.0, gf, moved);
    else
      str_buf_printf(out, "%-*s %7d  %9.4f %6.1f%% %9s %10s\n", width, r->name, r->n_kernels, ms,
                     run_ms > 0 ? 100 * ms / run_ms : 0.0, gf, moved);
  }
}

/* The split table: how each launch was cut over the threads and the CPU
 * time of its tiles (rt_profile_event), which load changes much less than
 * its wall time. balance = CPU time of all threads / (threads x the
 * busiest thread's): 100% when every thread worked as long as the busiest. */
static void print_split(str_buf *out, const prof_row *rows, int n, int runs, int threads, int width) {
  str_buf_printf(out, "\nsplit: each launch's tiles (rows x columns) and their CPU time a run (thread CPU clock "
                      "around each tile)\n");
  str_buf_printf(out, "%-*s %11s %9s %9s %8s %9s\n", width, "kernel", "tiles", "cpu ms", "busiest", "balance", "span");
  int64_t cpu = 0, busiest = 0, span = 0;
  for (int i = 0; i < n; i++) {
    const prof_row *r = &rows[i];
    char tiles[40];
    snprintf(tiles, sizeof tiles, "%lldx%lld", (long long)r->n_row, (long long)r->n_col);
    double bal = r->cpu_max_ns > 0 ? 100.0 * (double)r->cpu_ns / ((double)threads * (double)r->cpu_max_ns) : 0.0;
    str_buf_printf(out, "%-*s %11s %9.4f %9.4f %7.1f%% %9.4f\n", width, r->name, tiles, (double)r->cpu_ns / 1e6 / runs,
                   (double)r->cpu_max_ns / 1e6 / runs, bal, (double)r->span_ns / 1e6 / runs);
    cpu += r->cpu_ns, busiest += r->cpu_max_ns, span += r->span_ns;
  }
  str_buf_printf(out, "%-*s %11s %9.4f %9.4f %7.1f%% %9.4f\n", width, "(all)", "", (double)cpu / 1e6 / runs,
                 (double)busiest / 1e6 / runs,
                 busiest > 0 ? 100.0 * (double)cpu / ((double)threads * (double)busiest) : 0.0,
                 (double)span / 1e6 / runs);
}

static void write_trace(str_buf *out, const rt_program *rt, const rt_profile *prof, int64_t batch, int threads) {
  str_buf_puts(out, "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"program\": ");
  json_str(out, rt->name);
  str_buf_printf(out, ", \"batch\": %" PRId64 ", \"threads\": %d, \"version\": ", batch, threads);
  json_str(out, CASTOR_VERSION_STRING);
  str_buf_puts(out, "},\n\"traceEvents\": [\n");
  str_buf_puts(out, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": 1, \"args\": {\"name\": ");
  json_str(out, rt->name);
  str_buf_puts(out, "}}");
  int run = 0;
  for (size_t e = 0; e < prof->events.len; e++) {
    const rt_profile_event *ev = &prof->events.data[e];
    str_buf_puts(out, ",\n{\"name\": ");
    if (ev->launch < 0) {
      str_buf_printf(out, "\"run %d\", \"cat\": \"run\"", run++);
    } else {
      const rt_launch *l = &rt->launches[ev->launch];
      json_str(out, l->name);
      str_buf_puts(out, ", \"cat\": ");
      json_str(out, layer_name(l));
    }
    str_buf_printf(out, ", \"ph\": \"X\", \"ts\": %.3f, \"dur\": %.3f, \"pid\": 1, \"tid\": 1", (double)ev->start_ns / 1e3,
                   (double)ev->dur_ns / 1e3);
    if (ev->launch >= 0) {
      const rt_launch *l = &rt->launches[ev->launch];
      int64_t rows = l->batched ? batch : l->rows_fixed;
      str_buf_puts(out, ", \"args\": {\"layer\": ");
      json_str(out, layer_name(l));
      str_buf_printf(out, ", \"flops\": %" PRId64 ", \"bytes\": %" PRId64 "}", l->flops_per_row * rows,
                     l->bytes_per_row * batch + l->bytes_fixed);
    } else {
      str_buf_printf(out, ", \"args\": {\"batch\": %" PRId64 "}", batch);
    }
    str_buf_putc(out, '}');
  }
  str_buf_puts(out, "\n]}\n");
}

castor_status castor_program_profile(castor_program *p, castor_tensor *const *inputs, int n_inputs, int runs,
                                     str_buf *table, str_buf *trace) {
  rt_profile prof;
  rt_profile_init(&prof);
  double total_ms = 0;
  int64_t batch = 0;
  castor_status st = castor_program_profile_runs(p, inputs, n_inputs, runs, &prof, &total_ms, &batch);
  if (st != CASTOR_OK) {
    rt_profile_fini(&prof);
    return st;
  }
  const rt_program *rt = castor_program_desc(p);
  int n = rt->n_launches;
  prof_row *kernels = xcalloc((size_t)n + 1, sizeof *kernels), *layers = xcalloc((size_t)n + 1, sizeof *layers);
  int n_layers = 0;
  arena *names = arena_create();
  for (int i = 0; i < n; i++) {
    const rt_launch *l = &rt->launches[i];
    /* the algorithm where the kernel took a special one: "k3 [winograd]" */
    kernels[i].name = l->algo ? arena_printf(names, "%s [%s]", l->name, l->algo) : l->name;
    kernels[i].layer = layer_name(l);
    kernels[i].n_kernels = 1;
  }
  int64_t kernel_ns = 0, run_ns = 0;
  for (size_t e = 0; e < prof.events.len; e++) {
    const rt_profile_event *ev = &prof.events.data[e];
    if (ev->launch < 0) {
      run_ns += ev->dur_ns;
      continue;
    }
    const rt_launch *l = &rt->launches[ev->launch];
    prof_row *k = &kernels[ev->launch];
    k->ns += ev->dur_ns;
    k->flops += l->flops_per_row * (l->batched ? batch : l->rows_fixed);
    k->bytes += l->bytes_per_row * batch + l->bytes_fixed;
    kernel_ns += ev->dur_ns;
    k->cpu_ns += ev->cpu_ns, k->cpu_max_ns += ev->cpu_max_ns, k->span_ns += ev->span_ns;
    k->n_row = ev->n_row, k->n_col = ev->n_col;
  }
  /* layers in the order their first kernel runs */
  int width = 6;
  for (int i = 0; i < n; i++) {
    int j = 0;
    while (j < n_layers && strcmp(layers[j].name, kernels[i].layer)) j++;
    if (j == n_layers) layers[n_layers++].name = kernels[i].layer;
    layers[j].n_kernels++;
    layers[j].ns += kernels[i].ns, layers[j].flops += kernels[i].flops, layers[j].bytes += kernels[i].bytes;
    int w = (int)strlen(kernels[i].name);
    width = w > width ? w : width;
  }
  double run_ms = total_ms / runs, kernels_ms = (double)kernel_ns / 1e6 / runs;
  bool batched = false;
  for (int i = 0; i < rt->n_inputs; i++) batched = batched || (rt->inputs[i].rank > 0 && rt->inputs[i].dims[0] < 0);
  char at[48];
  if (batched) snprintf(at, sizeof at, "at batch %" PRId64, batch);
  else snprintf(at, sizeof at, "(static shapes)");
  int threads = castor_program_threads(p);
  str_buf_printf(table,
                 "profile: %d run%s of '%s' %s on %d thread%s: %.4f ms a run (measured around each run); "
                 "kernels %.4f ms (%.1f%%), %d launches\n\n",
                 runs, runs == 1 ? "" : "s", rt->name, at, threads, threads == 1 ? "" : "s", run_ms, kernels_ms,
                 run_ms > 0 ? 100 * kernels_ms / run_ms : 0.0, n);
  print_rows(table, "kernel", kernels, n, runs, run_ms, width);
  str_buf_putc(table, '\n');
  print_rows(table, "layer", layers, n_layers, runs, run_ms, width);
  double runtime_ms = (double)(run_ns - kernel_ns) / 1e6 / runs;
  str_buf_printf(table, "\noutside the kernels: %.4f ms a run (%.1f%%): %.4f ms in the runtime (buffer table, "
                 "workspace), the rest in the API's checks\n",
                 run_ms - kernels_ms, run_ms > 0 ? 100 * (run_ms - kernels_ms) / run_ms : 0.0, runtime_ms);
  print_split(table, kernels, n, runs, threads, width);
  if (trace) write_trace(trace, rt, &prof, batch, threads);
  free(kernels), free(layers);
  arena_destroy(names);
  rt_profile_fini(&prof);
  return CASTOR_OK;
}
