# SPDX-License-Identifier: Apache-2.0
"""_lib.py: finds and loads libcastor (the shared library CMake builds) and
declares the castor.h functions the module calls, through ctypes.

Where the library comes from, in order:
  1. $CASTOR_LIB: the path of libcastor.so (or its directory);
  2. _config.py beside this file, which CMake writes into the build tree
     (build/python/castor) and into the installed package (cmake --install):
     the library's directory relative to the package, or absolute;
  3. from the source tree (python/castor), the default build directory's
     build/lib;
  4. the install prefix this package sits under (<prefix>/lib/python3.X/
     site-packages/castor -> <prefix>/lib, <prefix>/lib/<multiarch>);
  5. the system's loader (ldconfig: /usr/local/lib after `cmake --install`).
The structs below mirror castor.h field by field; castor.h is the contract.
"""
import ctypes
import ctypes.util
import os

# SOVERSION: the project's major version (CMakeLists.txt); _config.py, which
# CMake writes, names the one it built
SONAME = "libcastor.so.0"

c_int64_p = ctypes.POINTER(ctypes.c_int64)


class CompileOptions(ctypes.Structure):
    _fields_ = [
        ("target", ctypes.c_int),
        ("policy", ctypes.c_char_p),
        ("opt_level", ctypes.c_int),
        ("verify_each", ctypes.c_int),
        ("fp32_ops", ctypes.c_char_p),
        ("fp32_layers", ctypes.c_char_p),
        ("keep_16bit_outputs", ctypes.c_int),
        ("pad8", ctypes.c_int),
        ("device", ctypes.c_int),
        ("sm", ctypes.c_char_p),
        ("threads", ctypes.c_int),
        ("cpu", ctypes.c_char_p),
        ("batch", ctypes.c_int64),
    ]


class LoadOptions(ctypes.Structure):
    _fields_ = [
        ("seed", ctypes.c_uint64),
        ("weights_path", ctypes.c_char_p),
        ("bind_names", ctypes.POINTER(ctypes.c_char_p)),
        ("bind_tensors", ctypes.POINTER(ctypes.c_void_p)),
        ("n_binds", ctypes.c_int),
        ("bind_where_needed", ctypes.c_int),
        ("batch", ctypes.c_int64),
        ("dim_names", ctypes.POINTER(ctypes.c_char_p)),
        ("dim_values", c_int64_p),
        ("n_dims", ctypes.c_int),
    ]


class CheckOptions(ctypes.Structure):
    _fields_ = [
        ("compile", CompileOptions),
        ("tolerance", ctypes.c_double),
        ("batch", ctypes.c_int64),
        ("seed", ctypes.c_uint64),
        ("layers", ctypes.c_char_p),
        ("search", ctypes.c_int),
    ]


class TrainOptions(ctypes.Structure):
    _fields_ = [
        ("loss", ctypes.c_char_p),
        ("from_logits", ctypes.c_int),
        ("optimizer", ctypes.c_char_p),
        ("learning_rate", ctypes.c_double),
        ("momentum", ctypes.c_double),
        ("nesterov", ctypes.c_int),
        ("centered", ctypes.c_int),
        ("loss_scale", ctypes.c_char_p),
        ("loss_scale_min", ctypes.c_double),
        ("beta_1", ctypes.c_double),
        ("beta_2", ctypes.c_double),
        ("epsilon", ctypes.c_double),
        ("weight_decay", ctypes.c_double),
        ("loss_scale_initial", ctypes.c_double),
        ("loss_scale_growth_steps", ctypes.c_int64),
        ("clipnorm", ctypes.c_double),
        ("clipvalue", ctypes.c_double),
        ("global_clipnorm", ctypes.c_double),
        ("lr_schedule", ctypes.c_char_p),
        ("decay_steps", ctypes.c_int64),
        ("decay_rate", ctypes.c_double),
        ("staircase", ctypes.c_int),
        ("alpha", ctypes.c_double),
        ("warmup_target", ctypes.c_double),
        ("warmup_steps", ctypes.c_int64),
        ("boundaries", c_int64_p),
        ("n_boundaries", ctypes.c_int),
        ("values", ctypes.POINTER(ctypes.c_double)),
        ("n_values", ctypes.c_int),
    ]


class TensorInfo(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("dtype", ctypes.c_int),
        ("rank", ctypes.c_int),
        ("dims", c_int64_p),
    ]


def _candidates():
    global SONAME
    try:
        from . import _config  # written by CMake (build tree, cmake --install)
    except ImportError:
        _config = None
    SONAME = getattr(_config, "SONAME", SONAME)
    env = os.environ.get("CASTOR_LIB")
    if env:
        yield os.path.join(env, SONAME) if os.path.isdir(env) else env
        return  # an explicit choice: never fall back to another library
    here = os.path.dirname(os.path.abspath(__file__))
    if _config is not None:
        libdir = _config.LIBDIR
        yield os.path.join(libdir if os.path.isabs(libdir) else os.path.join(here, libdir), SONAME)
    # python/castor in a source tree built into build/ (the README's build)
    yield os.path.normpath(os.path.join(here, "..", "..", "build", "lib", SONAME))
    # <prefix>/lib/python3.X/site-packages/castor: the prefix is 4 levels up
    prefix = os.path.abspath(os.path.join(here, "..", "..", "..", ".."))
    for sub in ("lib", "lib64", os.path.join("lib", "x86_64-linux-gnu"), os.path.join("lib", "aarch64-linux-gnu")):
        yield os.path.join(prefix, sub, SONAME)
    found = ctypes.util.find_library("castor")
    if found:
        yield found


def load():
    tried = []
    for path in _candidates():
        if path in tried:
            continue
        tried.append(path)
        if os.path.sep in path and not os.path.exists(path):
            continue
        try:
            return _declare(ctypes.CDLL(path)), path
        except OSError as e:
            tried[-1] = "%s (%s)" % (path, e)
    raise ImportError("castor: cannot find libcastor (%s); build it with CMake and set CASTOR_LIB to "
                      "build/lib/%s, or install castor (cmake --install); tried: %s" %
                      (SONAME, SONAME, ", ".join(tried) or "nothing"))


def _declare(lib):
    P, I, S, D, Z = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_double, ctypes.c_size_t
    PP = ctypes.POINTER(ctypes.c_void_p)
    sigs = {
        "castor_version": (S, []),
        "castor_status_string": (S, [I]),
        "castor_context_create": (I, [PP]),
        "castor_context_destroy": (None, [P]),
        "castor_context_last_error": (S, [P]),
        "castor_context_last_warnings": (S, [P]),
        "castor_load_options_init": (None, [ctypes.POINTER(LoadOptions)]),
        "castor_model_load_file": (I, [P, S, ctypes.POINTER(LoadOptions), PP]),
        "castor_model_load_string": (I, [P, S, S, Z, ctypes.POINTER(LoadOptions), PP]),
        "castor_model_destroy": (None, [P]),
        "castor_compile_options_init": (None, [ctypes.POINTER(CompileOptions)]),
        "castor_compile": (I, [P, ctypes.POINTER(CompileOptions), PP]),
        "castor_program_destroy": (None, [P]),
        "castor_program_num_inputs": (I, [P]),
        "castor_program_num_outputs": (I, [P]),
        "castor_program_input_info": (I, [P, I, ctypes.POINTER(TensorInfo)]),
        "castor_program_output_info": (I, [P, I, ctypes.POINTER(TensorInfo)]),
        "castor_program_run": (I, [P, PP, I, PP, I]),
        "castor_model_dump_text": (I, [P, ctypes.POINTER(CompileOptions), I, ctypes.POINTER(S)]),
        "castor_tensor_create": (I, [P, I, I, c_int64_p, PP]),
        "castor_tensor_wrap": (I, [P, I, I, c_int64_p, P, PP]),
        "castor_tensor_destroy": (None, [P]),
        "castor_tensor_data": (P, [P]),
        "castor_tensor_dtype": (I, [P]),
        "castor_tensor_rank": (I, [P]),
        "castor_tensor_dims": (c_int64_p, [P]),
        "castor_tensor_nbytes": (Z, [P]),
        "castor_check_options_init": (None, [ctypes.POINTER(CheckOptions)]),
        "castor_check": (I, [P, ctypes.POINTER(CheckOptions), PP, I, PP]),
        "castor_check_report_destroy": (None, [P]),
        "castor_check_report_format": (S, [P, I]),
        "castor_train_options_init": (None, [ctypes.POINTER(TrainOptions)]),
        "castor_model_train_options": (None, [P, ctypes.POINTER(TrainOptions)]),
        "castor_compile_train": (I, [P, ctypes.POINTER(CompileOptions), ctypes.POINTER(TrainOptions), PP]),
        "castor_compile_eval": (I, [P, ctypes.POINTER(CompileOptions), ctypes.POINTER(TrainOptions), PP]),
        "castor_program_copy_weights": (I, [P, P]),
        "castor_program_get_state": (I, [P, S, PP]),
        "castor_program_save_weights": (I, [P, S]),
        "castor_program_save_keras": (I, [P, P, ctypes.POINTER(TrainOptions), S]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib
