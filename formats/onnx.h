/*
 * onnx.h: ONNX files (onnx.proto, ModelProto and TensorProto) read into
 * plain C structures in an arena. The wire format is decoded by protobuf-c
 * with C generated at build time from the onnx.proto Debian ships
 * (libonnx-dev); this reader checks what protobuf cannot (element counts
 * against dims, data sizes, external data inside the model's directory) and
 * copies the parts castor uses into the structures below, so that nothing
 * above formats/ sees protobuf-c.
 *
 * Every tensor's data comes out as little-endian bytes of its element type,
 * however the file stored it (raw_data, float_data, int32_data, int64_data,
 * double_data, uint64_data, or an external file). Nothing here decides what
 * castor supports: dtypes, ops and opsets are the importer's business
 * (frontend/onnx).
 *
 * Limits: a model file of at most ONNX_MAX_FILE_BYTES; messages nested at
 * most ONNX_MAX_NESTING deep (protobuf C++'s default recursion limit),
 * checked by an iterative walk of the wire format before protobuf-c's
 * recursive decoder runs, so that no file can overflow the stack; at most
 * ONNX_MAX_NODES nodes in all graphs together (castor's IR_MAX_NODES,
 * counted by the same walk, so that a huge graph is refused before it is
 * decoded); protobuf-c's
 * allocations during decoding capped (ONNX_MAX_DECODE_BYTES), so a small
 * file cannot make castor allocate gigabytes; tensors of at most
 * ONNX_MAX_RANK dimensions.
 */
#ifndef CASTOR_FORMATS_ONNX_H
#define CASTOR_FORMATS_ONNX_H

#include "util/diag.h"
#include "util/util.h"

#define ONNX_MAX_FILE_BYTES ((int64_t)2 << 30)   /* protobuf's own limit: 2 GiB */
#define ONNX_MAX_DECODE_BYTES ((int64_t)4 << 30) /* protobuf-c's allocations, all together */
enum { ONNX_MAX_RANK = 16, ONNX_MAX_NESTING = 100, ONNX_MAX_NODES = 100000 };

/* TensorProto.DataType values (onnx.proto). */
typedef enum onnx_dtype {
  ONNX_UNDEFINED = 0,
  ONNX_FLOAT = 1,
  ONNX_UINT8 = 2,
  ONNX_INT8 = 3,
  ONNX_UINT16 = 4,
  ONNX_INT16 = 5,
  ONNX_INT32 = 6,
  ONNX_INT64 = 7,
  ONNX_STRING = 8,
  ONNX_BOOL = 9,
  ONNX_FLOAT16 = 10,
  ONNX_DOUBLE = 11,
  ONNX_UINT32 = 12,
  ONNX_UINT64 = 13,
  ONNX_COMPLEX64 = 14,
  ONNX_COMPLEX128 = 15,
  ONNX_BFLOAT16 = 16,
} onnx_dtype;

/* "float", "int64", ... as onnx.proto names them in lower case; "dtype 99"
 * for a value onnx.proto does not define (static storage). */
const char *onnx_dtype_name(int dtype);
/* Bytes per element; 0 for STRING, UNDEFINED and unknown values. */
size_t onnx_dtype_size(int dtype);

typedef struct onnx_tensor {
  const char *name; /* "" if none */
  int dtype;        /* onnx_dtype */
  int rank;
  int64_t dims[ONNX_MAX_RANK];
  int64_t numel;
  const void *data; /* numel elements, little-endian, in the arena; NULL if numel is 0 */
  size_t nbytes;
} onnx_tensor;

typedef enum onnx_attr_type {
  ONNX_ATTR_UNDEFINED = 0,
  ONNX_ATTR_FLOAT = 1,
  ONNX_ATTR_INT = 2,
  ONNX_ATTR_STRING = 3,
  ONNX_ATTR_TENSOR = 4,
  ONNX_ATTR_GRAPH = 5,
  ONNX_ATTR_FLOATS = 6,
  ONNX_ATTR_INTS = 7,
  ONNX_ATTR_STRINGS = 8,
  ONNX_ATTR_TENSORS = 9,
  ONNX_ATTR_GRAPHS = 10,
  ONNX_ATTR_SPARSE_TENSOR = 11,
  ONNX_ATTR_SPARSE_TENSORS = 12,
  ONNX_ATTR_TYPE_PROTO = 13,
  ONNX_ATTR_TYPE_PROTOS = 14,
} onnx_attr_type;

/* "float", "ints", ... (static storage). */
const char *onnx_attr_type_name(int type);

typedef struct onnx_attr {
  const char *name;
  int type;          /* onnx_attr_type */
  double f;          /* FLOAT */
  int64_t i;         /* INT */
  const char *s;     /* STRING: NUL-terminated copy (s_len bytes before the NUL) */
  size_t s_len;
  const int64_t *ints; /* INTS */
  const float *floats; /* FLOATS */
  int n;               /* INTS, FLOATS, STRINGS: element count */
  const onnx_tensor *t; /* TENSOR */
} onnx_attr;

typedef struct onnx_node {
  const char *name;    /* "" if none */
  const char *op_type;
  const char *domain;  /* "" for the default domain (ai.onnx) */
  const char **inputs; /* "" marks an omitted optional input */
  int n_inputs;
  const char **outputs;
  int n_outputs;
  onnx_attr *attrs;
  int n_attrs;
  int index; /* position in the graph's node list */
} onnx_node;

/* A graph input's or output's declared type. */
typedef struct onnx_value_info {
  const char *name;
  bool is_tensor;  /* a tensor type (sequences, maps and optionals are not) */
  int elem_type;   /* onnx_dtype; 0 if not declared */
  int rank;        /* -1: shape not declared */
  int64_t dims[ONNX_MAX_RANK]; /* -1 where the dimension is symbolic or unknown */
  const char *dim_params[ONNX_MAX_RANK]; /* the symbol's name, or NULL */
} onnx_value_info;

typedef struct onnx_opset {
  const char *domain; /* "" or "ai.onnx" for the default domain */
  int64_t version;
} onnx_opset;

typedef struct onnx_graph {
  const char *name;
  onnx_node *nodes;
  int n_nodes;
  onnx_tensor *initializers;
  int n_initializers;
  onnx_value_info *inputs, *outputs;
  int n_inputs, n_outputs;
} onnx_graph;

typedef struct onnx_model {
  arena *arena; /* owns everything below */
  int64_t ir_version;
  onnx_opset *opsets;
  int n_opsets;
  const char *producer; /* "pytorch 2.1.0", or "" */
  onnx_graph graph;
} onnx_model;

/* Decodes a ModelProto from bytes[0..len). `name` names the file in
 * diagnostics; `dir` is the directory external data is relative to (NULL:
 * external data is an error). Returns NULL with an error in d on failure. */
onnx_model *onnx_model_read(const char *name, const void *bytes, size_t len, const char *dir,
                            diag_sink *d);
void onnx_model_free(onnx_model *m); /* NULL is a no-op */

/* Decodes one TensorProto (the input_0.pb files of ONNX's test data) from
 * bytes[0..len) into *out, its data in `a`. */
bool onnx_tensor_read(const char *name, const void *bytes, size_t len, arena *a,
                      onnx_tensor *out, diag_sink *d);

#endif
