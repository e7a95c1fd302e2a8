/*
 * dataset.h: the training data of `castor train` and `castor evaluate`:
 * features X and labels Y loaded from files, checked against the model,
 * split, shuffled and cut into batches. docs/training-data.md is the user's
 * view of the same.
 *
 * Files: NumPy .npy or IDX (the MNIST format), either of them gzip-
 * compressed or not; the format is detected by the magic bytes, never by
 * the name. A file is read once, front to back, as a stream: a FIFO or a
 * pipe (`--x <(zcat x.gz)`) works like a file. Every gzip member's trailer
 * (CRC32 and length) is checked; concatenated members (pigz, bgzip) read as
 * one stream, as `gzip -d` reads them; bytes after the last member are an
 * error. The header is checked against the model (dtype, sample shape,
 * sample count, X's length for Y) before any data is read; a header that
 * declares more data than a regular file can hold is refused before
 * anything is allocated; buffers grow only as data arrives, and the raw
 * bytes pass through one 1 MiB chunk, so memory is what the converted data
 * needs. More than RT_DATASET_MAX_BYTES of data in one file, more than
 * RT_DATASET_MAX_SAMPLES samples, or samples holding no values are refused
 * after the header.
 *
 *   features X  float32, float64, float16 or uint8, shape [n, ...]; the
 *               data is stored flat, n_features floats per sample. Which
 *               sample shapes feed the model's input (options.sample_dims):
 *               a model input of rank 1 [k] takes any sample shape of k
 *               values, flattened in C order (an IDX image file [n, 28, 28]
 *               feeds [784]); a model input of rank >= 2 takes samples of
 *               exactly its shape, or of its shape without a trailing unit
 *               dimension ([n, 28, 28] feeds [28, 28, 1]: the channel axis
 *               Keras's MNIST examples add with np.expand_dims(x, -1), which
 *               changes no byte of the data). Any other shape is an error
 *               naming both shapes (with the reshape to apply when the counts
 *               match). uint8 is divided by 255
 *               in float32 (x.astype("float32") / 255, as the Keras guides
 *               do) and x_scaled says so.
 *   labels Y    SPARSE: class indices of any integer dtype (or floats that
 *               are whole numbers), shape [n] or [n, 1] -> int32.
 *               DENSE: float targets, shape [n] or [n, k] (one-hot rows for
 *               categorical cross-entropy, values for mean squared error);
 *               integer files are converted to float.
 *
 * Every problem is an error through the sink, located at the file at
 * fault, with a non-zero status (false): a file that cannot be read
 * (DIAG_KIND_IO), a malformed or unsupported file, or data that does not
 * fit the model (DIAG_KIND_INVALID_ARGUMENT: a label outside [0, classes)
 * with its index and value, a feature count other than the model's input,
 * X and Y of different lengths, NaN or Inf in X or dense Y with the count
 * and the first index, an empty dataset). Nothing is printed.
 */
#ifndef CASTOR_DATASET_H
#define CASTOR_DATASET_H

#include "runtime/runtime.h"

/* Largest data section of one file: 64 GiB. */
#define RT_DATASET_MAX_BYTES ((int64_t)1 << 36)
/* Most samples of a dataset: 2^32 - 1, the largest count an IDX header can
 * declare (a .npy header may declare more; it is refused). */
#define RT_DATASET_MAX_SAMPLES ((int64_t)UINT32_MAX)

typedef enum rt_labels_kind {
  RT_LABELS_AUTO,   /* options only: integer files SPARSE, float files DENSE */
  RT_LABELS_SPARSE, /* int32 class indices, one per sample */
  RT_LABELS_DENSE   /* float32 targets, y_width per sample */
} rt_labels_kind;

typedef struct rt_dataset_options {
  int64_t n_features;    /* floats per sample the model's input takes; 0: any */
  int64_t n_classes;     /* SPARSE: labels lie in [0, n_classes); DENSE: y_width must
                            equal it; 0: not checked (SPARSE labels still >= 0) */
  rt_labels_kind labels; /* what the loss needs; AUTO: decided by the file */
  const char *loss;      /* the loss's name, for a label-shape error that names it and
                            the fix; NULL: unnamed */
  /* The model input's shape without the batch dimension; rank 0 or 1:
   * only n_features is checked (any sample shape of that many values);
   * rank >= 2: the sample shape rule above, n_features ignored. */
  int sample_rank;
  int64_t sample_dims[RT_MAX_RANK];
} rt_dataset_options;

void rt_dataset_options_init(rt_dataset_options *o); /* 0, 0, AUTO */

typedef struct rt_dataset {
  int64_t n;             /* samples */
  int64_t n_features;    /* floats per sample */
  float *x;              /* [n, n_features], row-major */
  rt_labels_kind labels; /* SPARSE or DENSE */
  int32_t *y;            /* SPARSE: [n]; NULL otherwise */
  float *y_dense;        /* DENSE: [n, y_width]; NULL otherwise */
  int64_t y_width;       /* DENSE: values per sample; SPARSE: 1 */
  bool x_scaled;         /* X was uint8 and was divided by 255 */
  /* Where the data came from, for rt_dataset_describe: the source dtypes
   * as NumPy names them ("uint8"), the format ("npy", "IDX") and whether
   * the file was gzip-compressed, and X's shape in the file. */
  char x_dtype[12], y_dtype[12], x_format[8], y_format[8];
  bool x_gzip, y_gzip;
  int x_rank;
  int64_t x_dims[RT_MAX_RANK];
  /* One sample's shape as the model takes it: options.sample_dims when its
   * rank is >= 2, else the file's (x_dims without the first). Its product
   * is n_features. */
  int x_sample_rank;
  int64_t x_sample_dims[RT_MAX_RANK];
} rt_dataset;

/* Loads X and Y and checks them against o (NULL: rt_dataset_options_init's
 * defaults). On failure *out is empty (safe to _fini). */
bool rt_dataset_load(const char *x_path, const char *y_path, const rt_dataset_options *o,
                     rt_dataset *out, diag_sink *d);
/* The same from bytes in memory (tests, fuzzing), named x_name and y_name
 * in messages. */
bool rt_dataset_load_mem(const void *x, size_t x_len, const char *x_name, const void *y,
                         size_t y_len, const char *y_name, const rt_dataset_options *o,
                         rt_dataset *out, diag_sink *d);
/* Frees the buffers; the struct may be reused. NULL is a no-op. */
void rt_dataset_fini(rt_dataset *ds);

/* Appends one line for the user, without a newline, e.g.
 *   "60000 samples: X (60000, 28, 28) uint8 IDX (gzip) -> 784 float32 features,
 *    scaled by 1/255; Y uint8 IDX (gzip) -> class indices"
 * so a caller can say that uint8 features were scaled. */
void rt_dataset_describe(const rt_dataset *ds, str_buf *out);

/* Keras's validation_split: the LAST floor-complement of the samples,
 * before any shuffling, becomes the validation set. With n samples the
 * training set keeps the first split_at = floor(n * (1 - fraction))
 * (computed in double, as keras/src/trainers/data_adapters/
 * array_slicing.py train_validation_split does) and out_val receives the
 * rest (a copy). fraction 0 leaves ds whole and out_val empty. A fraction
 * outside [0, 1), or one that leaves either side empty, is a
 * DIAG_KIND_INVALID_ARGUMENT error and changes nothing. */
bool rt_dataset_split(rt_dataset *ds, double fraction, rt_dataset *out_val, diag_sink *d);

/* The sample order of one epoch: a permutation of 0..n-1, the same on every
 * host for the same (seed, epoch), independent of earlier epochs.
 * PRNG: splitmix64 (state += 0x9E3779B97F4A7C15; z = state;
 * z = (z ^ z>>30) * 0xBF58476D1CE4E5B9; z = (z ^ z>>27) * 0x94D049BB133111EB;
 * out = z ^ z>>31) started at state = seed ^ mix((epoch + 1) *
 * 0x9E3779B97F4A7C15), mix being the same three steps. Fisher-Yates from
 * the identity: for i = n-1 down to 1, swap order[i] with order[j], j
 * uniform in [0, i] by rejection (draw r until r >= 2^64 mod (i+1), then
 * j = r mod (i+1)). docs/training-data.md has the same in Python. */
void rt_shuffle_order(uint64_t seed, int64_t epoch, int64_t n, int64_t *order);

/* Cuts a dataset into batches of contiguous buffers, Keras style: ceil(n /
 * batch_size) batches per epoch, the last one partial when batch_size does
 * not divide n. */
typedef struct rt_batcher {
  const rt_dataset *ds;
  int64_t batch_size, n_batches;
  bool shuffle;
  uint64_t seed;
  int64_t *order;  /* this epoch's sample order */
  /* Buffers of rows = min(batch_size, n) samples, 64-byte aligned: */
  float *x;        /* [rows, n_features] */
  int32_t *y;      /* SPARSE: [rows] */
  float *y_dense;  /* DENSE: [rows, y_width] */
} rt_batcher;

/* batch_size < 1, or a dataset outside what rt_dataset_load gives (no
 * samples, more than RT_DATASET_MAX_SAMPLES, samples or labels of no
 * values) is a DIAG_KIND_INVALID_ARGUMENT error, checked before anything is
 * allocated; running out of memory for the buffers an error too. Starts epoch 0. ds must outlive b. */
bool rt_batcher_init(rt_batcher *b, const rt_dataset *ds, int64_t batch_size, bool shuffle,
                     uint64_t seed, diag_sink *d);
/* Sets the order of `epoch` (0-based): rt_shuffle_order(seed, epoch) when
 * shuffling, else 0..n-1. */
void rt_batcher_start_epoch(rt_batcher *b, int64_t epoch);
/* Copies batch `index` (0 <= index < n_batches) of the current epoch into
 * b->x and b->y / b->y_dense; returns its number of rows. */
int64_t rt_batcher_fill(rt_batcher *b, int64_t index);
void rt_batcher_fini(rt_batcher *b); /* NULL is a no-op */

#endif
