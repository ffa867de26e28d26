# Builds tinycudann._C with the project's top-level CMake (TNN_PYTHON=ON, TNN_TESTS=OFF, CUDA when
# nvcc is found) and puts it into the package. Environment knobs: TNN_CUDA=0/1, TNN_HIP=1,
# TNN_CUDA_ARCHITECTURES, CMAKE_ARGS (extra -D flags), CMAKE_BUILD_PARALLEL_LEVEL (jobs); CC / CXX
# choose the compilers, and CXX (or CUDAHOSTCXX) is nvcc's host compiler too.
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def project_version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        m = re.search(r"project\(\s*\w+\s+VERSION\s+([0-9.]+)", f.read())
    return m.group(1) if m else "0.0.0"


def find_nvcc():
    for candidate in (os.environ.get("CUDACXX"), shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if candidate and os.path.exists(candidate):
            return candidate
    return None


def cuda_host_compiler():
    """The C++ compiler nvcc must use for host code: CUDAHOSTCXX, else the CXX the build was given.
    Without it nvcc picks its own default (the g++ on PATH), and an extension whose CUDA objects were
    compiled against another libstdc++ than its C++ objects can link that second libstdc++ and crash
    at import next to torch. None when neither is set: both then take the default compiler on PATH.
    A launcher in front of the compiler ("ccache g++") is dropped: nvcc takes the compiler itself."""
    for var in ("CUDAHOSTCXX", "CXX"):
        words = shlex.split(os.environ.get(var, ""))
        if words:
            path = shutil.which(words[-1])
            if path is None:
                raise RuntimeError(f"tinycudann: {var}={os.environ[var]} does not name an executable C++ compiler")
            return path
    return None


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        if shutil.which("cmake") is None:
            raise RuntimeError("tinycudann: building needs cmake (>= 3.24) on PATH")
        build_dir = os.path.join(os.path.abspath(self.build_temp), "cmake")
        os.makedirs(build_dir, exist_ok=True)
        args = ["-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release", "-DTNN_PYTHON=ON", "-DTNN_TESTS=OFF",
                f"-DPython_EXECUTABLE={sys.executable}"]
        if shutil.which("ninja") and not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            args += ["-G", "Ninja"]
        cuda = os.environ.get("TNN_CUDA")
        hip = os.environ.get("TNN_HIP", "0") not in ("0", "", "OFF", "off")
        nvcc = find_nvcc()
        if hip:
            args += ["-DTNN_HIP=ON", "-DTNN_CUDA=OFF"]
        elif cuda in ("0", "OFF", "off") or (cuda is None and nvcc is None):
            args += ["-DTNN_CUDA=OFF"]
        else:
            if nvcc is None:
                raise RuntimeError("tinycudann: TNN_CUDA=1 but nvcc was not found (set CUDACXX)")
            args += ["-DTNN_CUDA=ON", f"-DCMAKE_CUDA_COMPILER={nvcc}"]
            host = cuda_host_compiler()
            if host:
                args.append(f"-DCMAKE_CUDA_HOST_COMPILER={host}")
        if os.environ.get("TNN_CUDA_ARCHITECTURES"):
            args.append(f"-DTNN_CUDA_ARCHITECTURES={os.environ['TNN_CUDA_ARCHITECTURES']}")
        args += shlex.split(os.environ.get("CMAKE_ARGS", ""))
        print("tinycudann: cmake " + " ".join(args), flush=True)
        subprocess.check_call(["cmake"] + args)

        build = ["cmake", "--build", build_dir, "--target", "tinycudann_C"]
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        subprocess.check_call(build + ["--parallel", jobs])

        built = glob.glob(os.path.join(build_dir, "python", "tinycudann", "_C*" + os.path.splitext(
            self.get_ext_filename("x"))[1]))
        if len(built) != 1:
            raise RuntimeError(f"tinycudann: expected one built extension in {build_dir}/python/tinycudann, got {built}")
        # A shared module links with unresolved symbols allowed (libpython's), so a missing piece of
        # the C++ library only shows when the module loads: load it here, not on the user's first import.
        probe = ("import importlib.machinery, importlib.util, sys; "
                 "loader = importlib.machinery.ExtensionFileLoader('tinycudann._C', sys.argv[1]); "
                 "loader.exec_module(importlib.util.module_from_spec("
                 "importlib.util.spec_from_loader('tinycudann._C', loader)))")
        result = subprocess.run([sys.executable, "-c", probe, built[0]], capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"tinycudann: the built extension {built[0]} does not load:\n{result.stderr}")
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(built[0], dest)


setup(
    version=project_version(),
    ext_modules=[CMakeExtension("tinycudann._C")],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)
