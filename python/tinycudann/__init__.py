# tinycudann: tiny-rdna4-nn's drop-in for NVlabs' tiny-cuda-nn PyTorch package. Same names and
# behaviour (see docs/python.md), plus CPU tensors, any batch size and every tiny-rdna4-nn backend.
try:
    from . import _C
except ImportError as e:  # the extension is built by CMake (target tinycudann_C) or by pip install
    raise ImportError(
        "tinycudann: the compiled extension tinycudann._C is missing or does not load "
        f"({e}); install with `python3 -m pip install --no-build-isolation python/` or build the CMake target "
        "tinycudann_C and put <build>/python on PYTHONPATH (docs/python.md)"
    ) from e

from .modules import (
    Encoding,
    Module,
    NativeModule,
    Network,
    NetworkWithInputEncoding,
    TcnnError,
    TcnnTypeError,
    TcnnValueError,
    build_info,
    free_temporary_memory,
    input_checks,
    memory_stats,
    set_input_checks,
    supports_jit_fusion,
)
from .trainer import Trainer

__version__ = _C.version()

__all__ = [
    "Encoding",
    "Module",
    "NativeModule",
    "Network",
    "NetworkWithInputEncoding",
    "TcnnError",
    "TcnnTypeError",
    "TcnnValueError",
    "Trainer",
    "build_info",
    "free_temporary_memory",
    "input_checks",
    "memory_stats",
    "set_input_checks",
    "supports_jit_fusion",
]
