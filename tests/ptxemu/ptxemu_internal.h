/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ptxemu_internal.h: the decoded form of a PTX module, shared by the
 * parser (ptxemu_parse.c) and the interpreter (ptxemu_exec.c).
 *
 * A kernel is an array of decoded instructions; labels are resolved to
 * instruction indices. Registers of all declared classes (%p, %rs, %r,
 * %f, %rd, %fd, ...) are numbered densely per kernel and hold raw bits in
 * 64 bits (a 16-bit or 32-bit value zero-extended); the instruction's type
 * says how to read them.
 */
#ifndef CASTOR_TESTS_PTXEMU_INTERNAL_H
#define CASTOR_TESTS_PTXEMU_INTERNAL_H

#include "ptxemu.h"

typedef enum pe_op {
  OP_MOV, OP_LD, OP_ST, OP_CVTA, OP_CVT, OP_ADD, OP_SUB, OP_MUL, OP_MAD, OP_FMA, OP_DIV, OP_REM,
  OP_NEG, OP_ABS, OP_MIN, OP_MAX, OP_AND, OP_OR, OP_XOR, OP_NOT, OP_SHL, OP_SHR, OP_BFE, OP_SELP,
  OP_SETP, OP_BRA, OP_RET, OP_BAR, OP_SHFL, OP_LDMATRIX, OP_MMA, OP_CP_ASYNC, OP_CP_COMMIT,
  OP_CP_WAIT, OP_RCP, OP_SQRT, OP_RSQRT, OP_EX2, OP_LG2, OP_SIN, OP_COS, OP_TANH
} pe_op;

typedef enum pe_ty {
  T_NONE, T_PRED, T_B8, T_B16, T_B32, T_B64, T_U8, T_U16, T_U32, T_U64, T_S8, T_S16, T_S32, T_S64,
  T_F16, T_BF16, T_F32, T_F64
} pe_ty;

typedef enum pe_rnd { R_NONE, R_RN, R_RZ, R_RM, R_RP, R_RNI, R_RZI, R_RMI, R_RPI } pe_rnd;
typedef enum pe_cmp {
  C_EQ, C_NE, C_LT, C_LE, C_GT, C_GE, C_LO, C_LS, C_HI, C_HS, C_EQU, C_NEU, C_LTU, C_LEU, C_GTU,
  C_GEU, C_NUM, C_NAN
} pe_cmp;
typedef enum pe_space { S_NONE, S_GLOBAL, S_SHARED, S_PARAM, S_LOCAL } pe_space;

typedef enum pe_mulmode { M_NONE, M_LO, M_HI, M_WIDE } pe_mulmode;
typedef enum pe_shfl { SH_BFLY, SH_UP, SH_DOWN, SH_IDX } pe_shfl;

typedef enum pe_okind { K_NONE, K_REG, K_IMM, K_SREG, K_MEM, K_VEC, K_LABEL, K_SYM } pe_okind;

/* special registers: id = base + component (x, y, z) */
enum { SR_TID = 0, SR_NTID = 3, SR_CTAID = 6, SR_NCTAID = 9, SR_LANEID = 12, SR_WARPID = 13 };

typedef struct pe_opnd {
  uint8_t kind;  /* pe_okind */
  uint8_t n;     /* K_VEC: registers; K_MEM: 1 if the address is a parameter */
  int32_t r[4];  /* K_REG, K_MEM base (-1: none), K_VEC */
  int64_t imm;   /* K_IMM bits, K_SREG id, K_MEM offset, K_LABEL index, K_SYM value */
} pe_opnd;

typedef struct pe_insn {
  uint8_t op;            /* pe_op */
  uint8_t ty, ty2;       /* the type (cvt: destination), cvt's source type; mma: A/B type */
  uint8_t rnd;           /* pe_rnd */
  uint8_t cmp;           /* setp */
  uint8_t space;         /* ld/st/cvta */
  uint8_t mul;           /* mul/mad mode */
  uint8_t vec;           /* ld/st vector width 1/2/4; ldmatrix count 1/2/4 */
  uint8_t shfl;          /* pe_shfl */
  bool ftz, sat, approx, trans;
  int8_t n_ops;
  int32_t guard;         /* predicate register or -1 */
  bool guard_neg;
  int32_t line;
  pe_opnd o[5];
  char *text;            /* the instruction as written, for messages */
} pe_insn;

typedef struct pe_kernel {
  char *name;
  int n_params, param_bytes;
  char **param_names;
  int *param_offset, *param_size;
  int n_regs;
  pe_insn *insns;
  int n_insns;
  int local_bytes; /* each thread's local memory: the kernel's .local arrays, laid out in order */
} pe_kernel;

struct pe_module {
  pe_kernel *kernels;
  int n_kernels;
  int sm;
};

int pe_ty_bytes(pe_ty t);

/* ---- raw register bits as values ---- */
#include <string.h>


static inline float f32_of(uint64_t b) {
  uint32_t u = (uint32_t)b;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline uint64_t bits_f32(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static inline double f64_of(uint64_t b) {
  double d;
  memcpy(&d, &b, 8);
  return d;
}
static inline uint64_t bits_f64(double d) {
  uint64_t u;
  memcpy(&u, &d, 8);
  return u;
}

static inline bool is_signed(pe_ty t) { return t >= T_S8 && t <= T_S64; }
static inline bool is_float(pe_ty t) { return t >= T_F16 && t <= T_F64; }

static inline uint64_t mask_of(int bytes) { return bytes >= 8 ? ~(uint64_t)0 : (((uint64_t)1 << (bytes * 8)) - 1); }

/* An integer of type t from raw bits, sign- or zero-extended to 64. */
static inline int64_t sext(uint64_t v, pe_ty t) {
  int b = pe_ty_bytes(t);
  if (b >= 8) return (int64_t)v;
  v &= mask_of(b);
  if (is_signed(t) && (v >> (b * 8 - 1)) & 1) v |= ~mask_of(b);
  return (int64_t)v;
}
static inline uint64_t zext(uint64_t v, pe_ty t) { return v & mask_of(pe_ty_bytes(t)); }

/* ---- scalar instructions (ptxemu_alu.c): NULL, or why they fail ---- */
void pe_alu_init(void); /* once per process, before any of these */
double pe_fval(uint64_t v, pe_ty t); /* a float of type t, exactly */
const char *pe_alu_int(const pe_insn *in, const uint64_t *x, uint64_t *out);
const char *pe_alu_float(const pe_insn *in, const uint64_t *x, uint64_t *out);
const char *pe_alu_cvt(const pe_insn *in, const uint64_t *x, uint64_t *out);
bool pe_alu_cmp(pe_cmp op, double a, double b, int64_t sa, int64_t sb, uint64_t ua, uint64_t ub, bool fl, bool sg);

#endif
