# SPDX-License-Identifier: Apache-2.0
"""castor: compile small neural-network models (.cast, .keras, .onnx) to
native code and run them on NumPy arrays. A thin module over libcastor's C
API (castor.h) through ctypes; docs/python.md is the guide.

    import numpy as np, castor
    m = castor.compile("samples/mnist_mlp.cast", policy="mixed_float16")
    y = m(np.random.rand(8, 784).astype(np.float32))   # (8, 10)
    print(m.dump(casts=True))
    report = m.check()                                 # castor check, as a dict
    h = castor.train("samples/fashion_cnn.cast", x, y, epochs=2,
                     callback=lambda epoch, logs: print(epoch, logs))
"""
from ._core import (LIBRARY_PATH, CodegenError, DeviceError, Error, InternalError, InvalidArgumentError, IOError,
                    Model, NoMemoryError, ParseError, TensorSpec, UnsupportedError, compile, empty, version)
from ._train import Training, train

__version__ = version().split()[0]  # the loaded library's CASTOR_VERSION_STRING

__all__ = ["compile", "train", "empty", "version", "Model", "Training", "TensorSpec", "Error",
           "InvalidArgumentError", "ParseError", "IOError", "UnsupportedError", "CodegenError", "DeviceError",
           "NoMemoryError", "InternalError", "LIBRARY_PATH", "__version__"]
