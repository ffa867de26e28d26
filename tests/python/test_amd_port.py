# The AMD RDNA4 port's network names through tinycudann (docs/amd.md): HipBLASLtMLP, HipBLASLtMLPFP16
# and RocWMMAWidth64MLP are refused with what to write instead on a build without their AMD backend
# (CUDA, CPU only, HIP without hipBLASLt or gfx12 code), whatever the device, and build the backend
# they mean on a build with it. Also: the GPU sources use no virtual-memory API (the port's arena found
# none on gfx1201; ours needs none), and the qualification smoke's CPU run (scripts/qualify.py --quick).
import json
import os
import re
import subprocess
import sys

import pytest
import torch

import tinycudann as tcnn
from tinycudann import _C
from tnn_test_utils import CPU, mlp_config

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# name -> (backend, dtype, what the CUDA build's refusal tells to write)
PORT_NAMES = {
    "HipBLASLtMLP": ("BlasLtMLP", torch.float32, '"otype": "BlasLtMLP"'),
    "HipBLASLtMLPFP16": ("BlasLtMLP", torch.float16, '"otype": "BlasLtMLP", "dtype": "float16"'),
    "RocWMMAWidth64MLP": ("FullyFusedMLP", torch.float16, '"otype": "FullyFusedMLP", "n_neurons": 64, "dtype": "float16"'),
}


def build_kind():
    return _C.gpu_backend_name()  # "CUDA", "HIP" or "none"


def port_network(name, device=CPU):
    return tcnn.Network(64, 64, {"otype": name, "n_hidden_layers": 2}, device=device)


@pytest.mark.parametrize("name", sorted(PORT_NAMES))
def test_port_names_are_registered(name):
    assert name.lower() in [n.lower() for n in _C.network_names()]


@pytest.mark.parametrize("name", sorted(PORT_NAMES))
def test_port_names_are_refused_with_what_to_write_where_the_build_lacks_their_backend(name):
    backend, dtype, on_cuda = PORT_NAMES[name]
    if build_kind() == "HIP":
        try:
            port_network(name)
        except ValueError as e:  # a HIP build refuses only what it lacks: hipBLASLt or gfx12 code
            assert "this HIP build has no" in str(e)
        return
    with pytest.raises(ValueError) as e:  # TcnnValueError: also tcnn's RuntimeError
        port_network(name)
    assert isinstance(e.value, RuntimeError)
    message = str(e.value)
    assert f"{name} is the AMD RDNA4 port's name for {backend}" in message
    if build_kind() == "CUDA":
        assert f"this build is CUDA: write {on_cuda}" in message
    else:
        assert "this build has no GPU backend" in message and "runs on the CPU" in message
    # The build decides, not the device of the tensors or the case of the name.
    with pytest.raises(ValueError, match="AMD RDNA4 port's name"):
        tcnn.NetworkWithInputEncoding(3, 2, {"otype": "HashGrid", "n_levels": 2, "log2_hashmap_size": 8},
                                      {"otype": name.lower()}, device=CPU)


@pytest.mark.parametrize("name", sorted(PORT_NAMES))
def test_port_names_build_their_backend_on_a_build_with_it(name):
    backend, dtype, _ = PORT_NAMES[name]
    try:
        net = port_network(name)
    except ValueError as e:
        pytest.skip(f"this build lacks the backend: {e}")
    assert net.native_tcnn_module.name() == backend
    assert net.params.dtype == torch.float32 and net(torch.rand(5, 64)).dtype == dtype
    with pytest.raises((ValueError, TypeError), match="the name fixes dtype"):
        tcnn.Network(3, 2, mlp_config(otype=name, dtype="bfloat16"))


def test_gpu_sources_use_no_virtual_memory_api():
    """The allocator takes plain device allocations (and stream-ordered ones during graph capture):
    no address reservation or mapping, which the RDNA4 port's arena found missing on gfx1201."""
    vmm = re.compile(r"\b(cu|hip)Mem(AddressReserve|AddressFree|Create|Map|MapArrayAsync|Unmap|SetAccess|Release|"
                     r"GetAllocationGranularity|ExportToShareableHandle|ImportFromShareableHandle)\b")
    hits = []
    for folder in ("src", "include"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, folder)):
            for f in files:
                path = os.path.join(dirpath, f)
                with open(path, encoding="utf-8", errors="replace") as fh:
                    for lineno, line in enumerate(fh, 1):
                        if vmm.search(line):
                            hits.append(f"{os.path.relpath(path, ROOT)}:{lineno}: {line.strip()}")
    assert not hits, "virtual-memory API in the library:\n" + "\n".join(hits)


def test_qualification_smoke_quick_cpu_run(tmp_path):
    """scripts/qualify.py on the package under test (no clone or install: that is qualify.sh's part),
    CPU tensors, the quick sizes: every check passes or says why it does not apply, and the evidence
    file has the documented shape."""
    evidence = tmp_path / "evidence"
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(tcnn.__file__)))
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=package_root)
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "qualify.py"), "--evidence-dir", str(evidence),
                           "--device", "cpu", "--quick", "--no-timing", "--expect-install", package_root],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    files = list(evidence.glob("qualify-*.json"))
    assert len(files) == 1, files
    report = json.loads(files[0].read_text())
    assert report["schema"] == "tiny-rdna4-nn-qualify/1"
    assert report["device"]["kind"] == "cpu" and report["summary"]["failed"] == 0
    names = {c["check"] for c in report["checks"]}
    for check in ("import", "train", "checkpoint_reload", "launches_64", "prefix_invariance", "param_hot_swap",
                  "two_streams", "refuse_unknown", "refuse_unsupported"):
        assert check in names, check
    assert all(c["status"] in ("pass", "skip") for c in report["checks"])
    assert next(c for c in report["checks"] if c["check"] == "import")["status"] == "pass"
    ran = {b["id"] for b in report["backends"] if b["available"]}
    if build_kind() != "HIP":  # a HIP build tries the port's names instead (scripts/qualify.py)
        assert {"PortableMLP-float32", "BlasLtMLP-float32", "BlasLtMLP-float16", "FullyFusedMLP-float16"} <= ran
    assert (evidence / "summary.txt").exists()
