/*
 * onnx_wire.h: a protobuf wire-format writer for the ONNX models the
 * robustness tests and benchmarks generate (tests/onnx/onnx_gen.c,
 * tests/unit/check_onnx.c): messages built inside out into growable byte
 * buffers, with no recursion, so that a graph nested 3,000 deep or a chain
 * of a million nodes is written in linear time and constant stack.
 * Header-only (static inline functions); test and benchmark code only.
 *
 * Field numbers are onnx.proto's (ModelProto.graph = 7, GraphProto.node =
 * 1, NodeProto.attribute = 5, AttributeProto.g = 6, ...), named below.
 */
#ifndef CASTOR_TESTS_ONNX_WIRE_H
#define CASTOR_TESTS_ONNX_WIRE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct wbuf {
  unsigned char *data;
  size_t len, cap;
} wbuf;

enum {
  /* ModelProto */ W_MODEL_IR_VERSION = 1, W_MODEL_GRAPH = 7, W_MODEL_OPSET = 8,
  /* OperatorSetIdProto */ W_OPSET_DOMAIN = 1, W_OPSET_VERSION = 2,
  /* GraphProto */ W_GRAPH_NODE = 1, W_GRAPH_NAME = 2, W_GRAPH_INIT = 5, W_GRAPH_INPUT = 11,
  W_GRAPH_OUTPUT = 12,
  /* NodeProto */ W_NODE_INPUT = 1, W_NODE_OUTPUT = 2, W_NODE_NAME = 3, W_NODE_OP = 4,
  W_NODE_ATTR = 5,
  /* AttributeProto */ W_ATTR_NAME = 1, W_ATTR_G = 6, W_ATTR_TYPE = 20,
  /* TensorProto */ W_TENSOR_DIMS = 1, W_TENSOR_DTYPE = 2, W_TENSOR_NAME = 8, W_TENSOR_RAW = 9,
  W_TENSOR_EXTERNAL = 13, W_TENSOR_LOCATION = 14,
  /* StringStringEntryProto */ W_ENTRY_KEY = 1, W_ENTRY_VALUE = 2,
  /* ValueInfoProto, TypeProto, TypeProto.Tensor, TensorShapeProto, Dimension */
  W_VI_NAME = 1, W_VI_TYPE = 2, W_TYPE_TENSOR = 1, W_TT_ELEM = 1, W_TT_SHAPE = 2,
  W_SHAPE_DIM = 1, W_DIM_VALUE = 1, W_DIM_PARAM = 2,
};

static inline void wbuf_put(wbuf *b, const void *p, size_t n) {
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n) cap *= 2;
    unsigned char *d = realloc(b->data, cap);
    if (!d) {
      fprintf(stderr, "onnx_wire: out of memory\n");
      exit(2);
    }
    b->data = d, b->cap = cap;
  }
  if (n) memcpy(b->data + b->len, p, n);
  b->len += n;
}

static inline void wbuf_varint(wbuf *b, uint64_t v) {
  unsigned char t[10];
  size_t n = 0;
  do {
    t[n++] = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    v >>= 7;
  } while (v);
  wbuf_put(b, t, n);
}

static inline void wbuf_int(wbuf *b, unsigned field, uint64_t v) {
  wbuf_varint(b, (uint64_t)field << 3);
  wbuf_varint(b, v);
}

static inline void wbuf_bytes(wbuf *b, unsigned field, const void *p, size_t n) {
  wbuf_varint(b, (uint64_t)field << 3 | 2);
  wbuf_varint(b, n);
  wbuf_put(b, p, n);
}

static inline void wbuf_str(wbuf *b, unsigned field, const char *s) { wbuf_bytes(b, field, s, strlen(s)); }

/* Appends message m as field `field` of b, and empties m for reuse. */
static inline void wbuf_msg(wbuf *b, unsigned field, wbuf *m) {
  wbuf_bytes(b, field, m->data, m->len);
  m->len = 0;
}

static inline void wbuf_free(wbuf *b) {
  free(b->data);
  *b = (wbuf){0};
}

/* A float tensor value_info NAME: [batch, dims...] ("batch" symbolic). */
static inline void wbuf_value_info(wbuf *b, unsigned field, const char *name, int rank,
                            const int64_t *dims) {
  wbuf shape = {0}, dim = {0}, tt = {0}, tp = {0}, vi = {0};
  wbuf_str(&dim, W_DIM_PARAM, "batch");
  wbuf_msg(&shape, W_SHAPE_DIM, &dim);
  for (int r = 0; r < rank; r++) {
    wbuf_int(&dim, W_DIM_VALUE, (uint64_t)dims[r]);
    wbuf_msg(&shape, W_SHAPE_DIM, &dim);
  }
  wbuf_int(&tt, W_TT_ELEM, 1); /* float */
  wbuf_msg(&tt, W_TT_SHAPE, &shape);
  wbuf_msg(&tp, W_TYPE_TENSOR, &tt);
  wbuf_str(&vi, W_VI_NAME, name);
  wbuf_msg(&vi, W_VI_TYPE, &tp);
  wbuf_msg(b, field, &vi);
  wbuf_free(&shape), wbuf_free(&dim), wbuf_free(&tt), wbuf_free(&tp), wbuf_free(&vi);
}

/* A ModelProto (IR version 8, the default domain at `opset`) around the
 * GraphProto g; g is emptied. */
static inline void wbuf_model(wbuf *out, wbuf *g, int opset) {
  wbuf os = {0};
  wbuf_int(out, W_MODEL_IR_VERSION, 8);
  wbuf_str(&os, W_OPSET_DOMAIN, "");
  wbuf_int(&os, W_OPSET_VERSION, (uint64_t)opset);
  wbuf_msg(out, W_MODEL_OPSET, &os);
  wbuf_msg(out, W_MODEL_GRAPH, g);
  wbuf_free(&os);
}

/* A model whose graph holds an If node whose then_branch holds an If node
 * ... `levels` deep (each level nests a GraphProto, a NodeProto and an
 * AttributeProto: 3 message levels; the model and the outer graph are 2
 * more). */
static inline void wbuf_deep_if(wbuf *out, int levels) {
  wbuf g = {0}, node = {0}, attr = {0};
  wbuf_str(&g, W_GRAPH_NAME, "g0");
  for (int k = 1; k <= levels; k++) {
    char name[32];
    wbuf_str(&attr, W_ATTR_NAME, "then_branch");
    wbuf_int(&attr, W_ATTR_TYPE, 5); /* GRAPH */
    wbuf_msg(&attr, W_ATTR_G, &g);
    wbuf_str(&node, W_NODE_INPUT, "c");
    snprintf(name, sizeof name, "y%d", k);
    wbuf_str(&node, W_NODE_OUTPUT, name);
    wbuf_str(&node, W_NODE_OP, "If");
    wbuf_msg(&node, W_NODE_ATTR, &attr);
    wbuf_msg(&g, W_GRAPH_NODE, &node);
    snprintf(name, sizeof name, "g%d", k);
    wbuf_str(&g, W_GRAPH_NAME, name);
  }
  wbuf_model(out, &g, 17);
  wbuf_free(&g), wbuf_free(&node), wbuf_free(&attr);
}

/* A model computing y = x + w over x [batch, 4] (the default domain at
 * opset 17) whose initializer w of `numel` floats keeps its data in the
 * external file `location` (at offset 0). */
static inline void wbuf_external_model(wbuf *out, int64_t numel, const char *location) {
  wbuf g = {0}, node = {0}, t = {0}, e = {0};
  const int64_t width = 4;
  wbuf_str(&g, W_GRAPH_NAME, "external");
  wbuf_int(&t, W_TENSOR_DIMS, (uint64_t)numel);
  wbuf_int(&t, W_TENSOR_DTYPE, 1); /* float */
  wbuf_str(&t, W_TENSOR_NAME, "w");
  wbuf_str(&e, W_ENTRY_KEY, "location");
  wbuf_str(&e, W_ENTRY_VALUE, location);
  wbuf_msg(&t, W_TENSOR_EXTERNAL, &e);
  wbuf_int(&t, W_TENSOR_LOCATION, 1); /* EXTERNAL */
  wbuf_msg(&g, W_GRAPH_INIT, &t);
  wbuf_str(&node, W_NODE_INPUT, "x");
  wbuf_str(&node, W_NODE_INPUT, "w");
  wbuf_str(&node, W_NODE_OUTPUT, "y");
  wbuf_str(&node, W_NODE_NAME, "add");
  wbuf_str(&node, W_NODE_OP, "Add");
  wbuf_msg(&g, W_GRAPH_NODE, &node);
  wbuf_value_info(&g, W_GRAPH_INPUT, "x", 1, &width);
  wbuf_value_info(&g, W_GRAPH_OUTPUT, "y", 1, &width);
  wbuf_model(out, &g, 17);
  wbuf_free(&g), wbuf_free(&node), wbuf_free(&t), wbuf_free(&e);
}

/* x [batch, 16] through n Relu nodes n1..nN (values v1..vN). */
static inline void wbuf_chain_model(wbuf *out, int64_t n) {
  wbuf g = {0}, node = {0};
  char a[32], b[32] = "x";
  const int64_t width = 16;
  wbuf_str(&g, W_GRAPH_NAME, "chain");
  for (int64_t k = 1; k <= n; k++) {
    wbuf_str(&node, W_NODE_INPUT, b);
    snprintf(b, sizeof b, "v%lld", (long long)k);
    wbuf_str(&node, W_NODE_OUTPUT, b);
    snprintf(a, sizeof a, "n%lld", (long long)k);
    wbuf_str(&node, W_NODE_NAME, a);
    wbuf_str(&node, W_NODE_OP, "Relu");
    wbuf_msg(&g, W_GRAPH_NODE, &node);
  }
  wbuf_value_info(&g, W_GRAPH_INPUT, "x", 1, &width);
  wbuf_value_info(&g, W_GRAPH_OUTPUT, b, 1, &width);
  wbuf_model(out, &g, 17);
  wbuf_free(&g), wbuf_free(&node);
}

/* y = Relu(x) over x [batch, 4], and c = a + b of two int64 initializers
 * a [n, 1] and b [1, n] (zeros): a constant folded at import to n * n
 * elements from 16 n bytes of file. */
static inline void wbuf_broadcast_model(wbuf *out, int64_t n) {
  wbuf g = {0}, node = {0}, t = {0};
  const int64_t width = 4;
  void *zeros = calloc((size_t)n, 8);
  wbuf_str(&g, W_GRAPH_NAME, "broadcast");
  for (int k = 0; k < 2; k++) {
    wbuf_int(&t, W_TENSOR_DIMS, k ? 1 : (uint64_t)n);
    wbuf_int(&t, W_TENSOR_DIMS, k ? (uint64_t)n : 1);
    wbuf_int(&t, W_TENSOR_DTYPE, 7); /* int64 */
    wbuf_str(&t, W_TENSOR_NAME, k ? "b" : "a");
    wbuf_bytes(&t, W_TENSOR_RAW, zeros, (size_t)n * 8);
    wbuf_msg(&g, W_GRAPH_INIT, &t);
  }
  const char *nodes[2][4] = {{"a", "b", "c", "Add"}, {"x", NULL, "y", "Relu"}};
  for (int k = 0; k < 2; k++) {
    wbuf_str(&node, W_NODE_INPUT, nodes[k][0]);
    if (nodes[k][1]) wbuf_str(&node, W_NODE_INPUT, nodes[k][1]);
    wbuf_str(&node, W_NODE_OUTPUT, nodes[k][2]);
    wbuf_str(&node, W_NODE_NAME, nodes[k][3]);
    wbuf_str(&node, W_NODE_OP, nodes[k][3]);
    wbuf_msg(&g, W_GRAPH_NODE, &node);
  }
  wbuf_value_info(&g, W_GRAPH_INPUT, "x", 1, &width);
  wbuf_value_info(&g, W_GRAPH_OUTPUT, "y", 1, &width);
  wbuf_model(out, &g, 17);
  free(zeros);
  wbuf_free(&g), wbuf_free(&node), wbuf_free(&t);
}

/* One Sum node "sum" of x [batch, 4] given n times. */
static inline void wbuf_sum_model(wbuf *out, int64_t n) {
  wbuf g = {0}, node = {0};
  const int64_t width = 4;
  wbuf_str(&g, W_GRAPH_NAME, "sum");
  for (int64_t k = 0; k < n; k++) wbuf_str(&node, W_NODE_INPUT, "x");
  wbuf_str(&node, W_NODE_OUTPUT, "y");
  wbuf_str(&node, W_NODE_NAME, "sum");
  wbuf_str(&node, W_NODE_OP, "Sum");
  wbuf_msg(&g, W_GRAPH_NODE, &node);
  wbuf_value_info(&g, W_GRAPH_INPUT, "x", 1, &width);
  wbuf_value_info(&g, W_GRAPH_OUTPUT, "y", 1, &width);
  wbuf_model(out, &g, 17);
  wbuf_free(&g), wbuf_free(&node);
}

#endif
