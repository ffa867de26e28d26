# Writes a whole-module pickle the way tcnn 2.0's PyTorch package does, without tcnn: stand-ins
# with tcnn's module paths (tinycudann.modules.<class>, tinycudann_bindings._<cc>_C.Precision) and
# the attributes tcnn's constructors set, in their order. Run in its own process (it owns the name
# `tinycudann` there):  python3 tcnn_pickle_writer.py SPECS.json   (a list of SPEC)
#
# SPEC: {"kind": "Encoding" | "Network" | "NetworkWithInputEncoding", "attrs": {...tcnn's configuration
# attributes...}, "dtype": "float16" | "float32", "precision": 0 | 1 (Encoding: tcnn's Precision value),
# "seed", "loss_scale", "params": path of a torch.save'd 1-D float32 tensor, "device": "cpu" | "cuda",
# "cc": compute capability in the extension's name, "format": "torch" (torch.save) | "pickle", "out": path}
import json
import pickle
import sys
import types

import torch


def fake_module(name):
    module = types.ModuleType(name)
    sys.modules[name] = module
    return module


def main(specs):
    package = fake_module("tinycudann")
    modules = fake_module("tinycudann.modules")
    package.modules = modules
    fake_module("tinycudann_bindings")
    extensions = {spec["cc"]: fake_module(f"tinycudann_bindings._{spec['cc']}_C") for spec in specs}

    # pybind11 enums pickle as: the class, an empty NEWOBJ, then BUILD with __getstate__'s integer.
    class Precision:
        def __init__(self, value):
            self.value = value

        def __getstate__(self):
            return self.value

    (cc,) = extensions  # one Precision class per process: one compute capability
    Precision.__module__, Precision.__qualname__ = extensions[cc].__name__, "Precision"
    extensions[cc].Precision = Precision

    class Module(torch.nn.Module):
        # tcnn 2.0's Module.__getstate__: its __dict__ without the native module.
        def __getstate__(self):
            state = self.__dict__.copy()
            del state["native_tcnn_module"]
            return state

    Module.__module__, Module.__qualname__ = "tinycudann.modules", "Module"
    modules.Module = Module
    for kind in {spec["kind"] for spec in specs}:
        setattr(modules, kind, type(kind, (Module,), {"__module__": "tinycudann.modules"}))
    for spec in specs:
        write(spec, getattr(modules, spec["kind"]), Precision)


def write(spec, cls, Precision):
    obj = cls.__new__(cls)
    # tcnn's subclass constructors set their configuration attributes before Module.__init__.
    for key, value in spec["attrs"].items():
        object.__setattr__(obj, key, value)
    if spec["kind"] == "Encoding":
        object.__setattr__(obj, "precision", Precision(spec["precision"]))
    torch.nn.Module.__init__(obj)
    obj.native_tcnn_module = object()
    obj.dtype = getattr(torch, spec["dtype"])
    obj.seed = spec["seed"]
    obj.params = torch.nn.Parameter(torch.load(spec["params"]).to(spec["device"]), requires_grad=True)
    obj.register_parameter(name="params", param=obj.params)
    obj.loss_scale = spec["loss_scale"]
    if spec["kind"] == "Encoding":
        obj.n_output_dims = spec["n_output_dims"]

    if spec["format"] == "torch":
        torch.save(obj, spec["out"])
    else:
        with open(spec["out"], "wb") as f:
            pickle.dump(obj, f, protocol=2)


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        main(json.load(f))
