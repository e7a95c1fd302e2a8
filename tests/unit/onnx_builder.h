/*
 * onnx_builder.h: ONNX models built in a test with protobuf-c's generated
 * structures (formats/onnx.pb-c.h) and packed to bytes, so each test states
 * exactly the file it feeds. Everything lives in the arena ob_arena; the
 * suites that include this set it in their fixture. Header-only (static
 * inline) so that each suite takes what it uses.
 */
#ifndef CASTOR_TESTS_ONNX_BUILDER_H
#define CASTOR_TESTS_ONNX_BUILDER_H

#include "formats/onnx.h"
#include "formats/onnx.pb-c.h"
#include "util/util.h"

#include <string.h>

static arena *ob_arena;

static inline char *ob_str(const char *s) { return arena_strdup(ob_arena, s); }

/* A tensor value NAME of elem type and dims; params[r], if not NULL, makes
 * dimension r the symbolic dim_param params[r] (params may be NULL). */
static inline Onnx__ValueInfoProto *ob_value(const char *name, int elem, int rank, const int64_t *dims,
                                             const char *const *params) {
  Onnx__TensorShapeProto *sh = arena_alloc(ob_arena, sizeof *sh);
  onnx__tensor_shape_proto__init(sh);
  sh->n_dim = (size_t)rank;
  sh->dim = arena_alloc(ob_arena, (size_t)(rank + 1) * sizeof *sh->dim);
  for (int r = 0; r < rank; r++) {
    Onnx__TensorShapeProto__Dimension *d = arena_alloc(ob_arena, sizeof *d);
    onnx__tensor_shape_proto__dimension__init(d);
    if (params && params[r]) {
      d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      d->dim_param = ob_str(params[r]);
    } else {
      d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      d->dim_value = dims[r];
    }
    sh->dim[r] = d;
  }
  Onnx__TypeProto__Tensor *tt = arena_alloc(ob_arena, sizeof *tt);
  onnx__type_proto__tensor__init(tt);
  tt->has_elem_type = 1, tt->elem_type = elem, tt->shape = sh;
  Onnx__TypeProto *tp = arena_alloc(ob_arena, sizeof *tp);
  onnx__type_proto__init(tp);
  tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE, tp->tensor_type = tt;
  Onnx__ValueInfoProto *v = arena_alloc(ob_arena, sizeof *v);
  onnx__value_info_proto__init(v);
  v->name = ob_str(name), v->type = tp;
  return v;
}

static inline Onnx__TensorProto *ob_tensor(const char *name, int dtype, int rank, const int64_t *dims,
                                           const void *raw, size_t nbytes) {
  Onnx__TensorProto *t = arena_alloc(ob_arena, sizeof *t);
  onnx__tensor_proto__init(t);
  t->name = ob_str(name), t->has_data_type = 1, t->data_type = dtype;
  t->n_dims = (size_t)rank;
  t->dims = arena_alloc(ob_arena, (size_t)(rank + 1) * sizeof *t->dims);
  for (int r = 0; r < rank; r++) t->dims[r] = dims[r];
  t->has_raw_data = 1;
  t->raw_data.len = nbytes;
  t->raw_data.data = arena_alloc(ob_arena, nbytes + 1);
  if (nbytes) memcpy(t->raw_data.data, raw, nbytes);
  return t;
}

static inline Onnx__AttributeProto *ob_attr_int(const char *name, int64_t v) {
  Onnx__AttributeProto *a = arena_alloc(ob_arena, sizeof *a);
  onnx__attribute_proto__init(a);
  a->name = ob_str(name), a->has_type = 1, a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
  a->has_i = 1, a->i = v;
  return a;
}

static inline Onnx__AttributeProto *ob_attr_ints(const char *name, int n, const int64_t *v) {
  Onnx__AttributeProto *a = arena_alloc(ob_arena, sizeof *a);
  onnx__attribute_proto__init(a);
  a->name = ob_str(name), a->has_type = 1, a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
  a->n_ints = (size_t)n;
  a->ints = arena_alloc(ob_arena, (size_t)(n + 1) * sizeof *a->ints);
  for (int i = 0; i < n; i++) a->ints[i] = v[i];
  return a;
}

/* A tensor attribute (Constant's value, ConstantOfShape's value). */
static inline Onnx__AttributeProto *ob_attr_tensor(const char *name, Onnx__TensorProto *t) {
  Onnx__AttributeProto *a = arena_alloc(ob_arena, sizeof *a);
  onnx__attribute_proto__init(a);
  a->name = ob_str(name), a->has_type = 1, a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
  a->t = t;
  return a;
}

enum { OB_MAX = 64 };

typedef struct ob_model {
  Onnx__ModelProto m;
  Onnx__GraphProto g;
  Onnx__OperatorSetIdProto *opsets[2];
  Onnx__NodeProto *nodes[OB_MAX];
  Onnx__TensorProto *inits[OB_MAX];
  Onnx__ValueInfoProto *ins[8], *outs[8];
} ob_model;

static inline ob_model *ob_model_new(int64_t opset) {
  ob_model *mb = arena_alloc(ob_arena, sizeof *mb);
  memset(mb, 0, sizeof *mb);
  onnx__model_proto__init(&mb->m);
  onnx__graph_proto__init(&mb->g);
  mb->m.has_ir_version = 1, mb->m.ir_version = 8;
  Onnx__OperatorSetIdProto *o = arena_alloc(ob_arena, sizeof *o);
  onnx__operator_set_id_proto__init(o);
  o->domain = ob_str(""), o->has_version = 1, o->version = opset;
  mb->opsets[0] = o;
  mb->m.n_opset_import = 1, mb->m.opset_import = mb->opsets;
  mb->m.graph = &mb->g;
  mb->g.name = ob_str("g");
  mb->g.node = mb->nodes, mb->g.initializer = mb->inits, mb->g.input = mb->ins, mb->g.output = mb->outs;
  return mb;
}

/* Adds node "OP(ins...) -> out" named NAME with up to two attributes
 * (NULL: none); ins "" is an omitted optional input. */
static inline Onnx__NodeProto *ob_node(ob_model *mb, const char *op, const char *name, const char *const *ins,
                                       int n_in, const char *out, Onnx__AttributeProto *a0,
                                       Onnx__AttributeProto *a1) {
  Onnx__NodeProto *n = arena_alloc(ob_arena, sizeof *n);
  onnx__node_proto__init(n);
  n->op_type = ob_str(op), n->name = ob_str(name);
  n->n_input = (size_t)n_in;
  n->input = arena_alloc(ob_arena, (size_t)(n_in + 1) * sizeof *n->input);
  for (int i = 0; i < n_in; i++) n->input[i] = ob_str(ins[i]);
  n->n_output = 1;
  n->output = arena_alloc(ob_arena, sizeof *n->output);
  n->output[0] = ob_str(out);
  n->attribute = arena_alloc(ob_arena, 3 * sizeof *n->attribute);
  if (a0) n->attribute[n->n_attribute++] = a0;
  if (a1) n->attribute[n->n_attribute++] = a1;
  mb->nodes[mb->g.n_node++] = n;
  return n;
}

/* An int64 initializer NAME of the given values, 1-D (rank 1) or a scalar (rank 0). */
static inline void ob_init_i64(ob_model *mb, const char *name, int rank, int n, const int64_t *v) {
  mb->inits[mb->g.n_initializer++] = ob_tensor(name, ONNX_INT64, rank, (int64_t[]){n}, v, (size_t)n * sizeof *v);
}

static inline char *ob_pack(ob_model *mb, size_t *len) {
  *len = onnx__model_proto__get_packed_size(&mb->m);
  char *b = arena_alloc(ob_arena, *len + 1);
  onnx__model_proto__pack(&mb->m, (uint8_t *)b);
  return b;
}

#endif
