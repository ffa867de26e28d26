# The two commands a new user needs (see README): `make demo` and `make test`. Both install their
# Debian packages through scripts/install_deps.sh (fast when present) and build with CMake + Ninja.
# `make gpu-check` is the script run on a GPU machine (builds with CUDA for sm_90a, runs gpu tests;
# CUDA_ARCH=90 builds it without the Hopper-only wgmma kernels, as other GPUs run it).
# `make test` also compiles every GPU source as HIP for gfx1201 in build-hip and audits the ISA
# (scripts/hip_check.sh); `make hip-gpu-check` is the AMD machine's script (docs/amd.md).
# `make fuzz FUZZ_SECONDS=N` runs each libFuzzer target of fuzz/ for N seconds (docs/reliability.md).
BUILD ?= build
JOBS ?= $(shell nproc)
NVCC := $(firstword $(wildcard /usr/local/cuda/bin/nvcc) $(shell command -v nvcc 2>/dev/null))
CMAKE_FLAGS ?=
ifneq ($(NVCC),)
CUDA_FLAGS := -DTNN_CUDA=ON -DCMAKE_CUDA_COMPILER=$(NVCC)
else
CUDA_FLAGS := -DTNN_CUDA=OFF
endif

HIP_BUILD ?= build-hip
FUZZ_SECONDS ?= 60

.PHONY: demo test fuzz gpu-check hip-gpu-check clean

# The demo compiles the GPU backend only where a GPU is there to run it (nvcc alone is not enough): a
# machine without one builds the CPU library and the program in a build folder of their own.
HAVE_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1)
# There it compiles as a unity build (a few sources per translation unit: half the compile time) and
# trains 1000 steps (28 dB PSNR, about a minute on 2 cores; 2000 steps reach 30.3 dB).
ifneq ($(and $(NVCC),$(HAVE_GPU)),)
DEMO_BUILD ?= $(BUILD)
DEMO_FLAGS := $(CUDA_FLAGS)
DEMO_STEPS ?= 2000
else
DEMO_BUILD ?= $(BUILD)-demo-cpu
DEMO_FLAGS := -DTNN_CUDA=OFF -DCMAKE_UNITY_BUILD=ON
DEMO_STEPS ?= 1000
endif

# make test compiles every CUDA kernel where nvcc is found. Without a GPU to run them (their tests skip)
# that is a compile check: device code at -O0 (cicc and ptxas still parse, type-check and assemble every
# kernel, its inline PTX included) takes half the CPU time of the optimised build, for sm_90a only (the
# other architectures of the default list: scripts/cuda_arch_check.sh, run by .ci/run). With a GPU the
# build is for the GPUs present (cmake/cuda_architectures.cmake).
TEST_CUDA_FLAGS := $(CUDA_FLAGS)
ifneq ($(NVCC),)
ifeq ($(HAVE_GPU),)
TEST_CUDA_FLAGS += "-DCMAKE_CUDA_FLAGS=-Xcicc -O0 -Xptxas -O0" -DTNN_CUDA_ARCHITECTURES=90a
endif
endif

demo:
	@scripts/install_deps.sh build
	@cmake -S . -B $(DEMO_BUILD) -G Ninja $(DEMO_FLAGS) -DTNN_TESTS=OFF -DTNN_PYTHON=OFF $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(DEMO_BUILD) --target tnn_app -j $(JOBS)
	@mkdir -p out
	$(DEMO_BUILD)/tnn fit-image --steps $(DEMO_STEPS) --out out/demo.png --json out/demo.json

test:
	@scripts/install_deps.sh build test python hip
	@cmake -S . -B $(BUILD) -G Ninja $(TEST_CUDA_FLAGS) -DTNN_TESTS=ON -DTNN_PYTHON=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)
	@scripts/hip_check.sh $(HIP_BUILD) $(JOBS)
	@scripts/run_tests.sh $(BUILD) $(JOBS)

fuzz:
	@scripts/install_deps.sh build fuzz
	@scripts/fuzz.sh $(FUZZ_SECONDS) build-fuzz $(JOBS)

gpu-check:
	@bash scripts/gpu_check.sh

hip-gpu-check:
	@bash scripts/hip_gpu_check.sh

clean:
	rm -rf $(BUILD) $(BUILD)-demo-cpu $(HIP_BUILD) out
