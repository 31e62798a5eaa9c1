"""Builds kvq_torch's native part against the installed torch.

    pip install --no-build-isolation ./python/kvq_torch

With nvcc and a CUDA torch: CUDA and CPU kernels; otherwise (or KVQ_TORCH_CUDA=0) the CPU kernels
alone (kvq's host reference). Environment:
  KVQ_TORCH_CONFIGS        configurations to compile: a file of kvq_add_instances entries, or
                           entries separated by ';' (default: configs.txt beside this file)
  KVQ_TORCH_CONFIG_FILTER  a regular expression: keep the configurations whose name it matches
  KVQ_TORCH_CUDA           0: CPU only even where CUDA is available
  KVQ_ROOT                 kvq's source tree (default: two folders up)
  TORCH_CUDA_ARCH_LIST     as for any torch extension, e.g. "9.0a" (H100/H200 with the wgmma
                           prefill) or "8.0;9.0a"; MAX_JOBS bounds ninja's parallel compiles
The configurations' kernel files and kvq_instances.hpp are written by cmake/kvq_instances.cmake in
script mode: the generator kvq_add_instances uses, so what the package dispatches over is exactly
what was compiled.
"""
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import setup

here = Path(__file__).resolve().parent
root = Path(os.environ.get("KVQ_ROOT", here.parent.parent)).resolve()
if not (root / "include" / "kvq" / "kvq.hpp").is_file():
    sys.exit("kvq_torch: kvq's headers not found under %s (set KVQ_ROOT to kvq's source tree)" % root)

spec = importlib.util.spec_from_file_location("_kvq_configs", here / "kvq_torch" / "_configs.py")
_configs = importlib.util.module_from_spec(spec)
sys.modules["_kvq_configs"] = _configs
spec.loader.exec_module(_configs)
configs = _configs.build_configs()

import torch  # noqa: E402  (after the cheap checks)
from torch.utils import cpp_extension  # noqa: E402

want_cuda = os.environ.get("KVQ_TORCH_CUDA", "1") != "0"
with_cuda = want_cuda and torch.version.cuda is not None and cpp_extension.CUDA_HOME is not None

gen = here / "build" / "kvq_instances"
if gen.exists():
    shutil.rmtree(gen)
gen.mkdir(parents=True)
cmake = shutil.which("cmake")
if not cmake:
    sys.exit("kvq_torch: cmake is needed to write the configurations' files (cmake/kvq_instances.cmake)")
subprocess.run([cmake, "-DKVQ_INSTANCES_DIR=%s" % gen, "-DKVQ_INSTANCES_NAMESPACE=kvq_torch_instances",
                "-DKVQ_INSTANCES_CONFIGS=%s" % ";".join(c.entry for c in configs),
                "-P", str(root / "cmake" / "kvq_instances.cmake")], check=True)
generated = [Path(p) for p in (gen / "sources.txt").read_text().split() if p]

include_dirs = [str(root / "include"), str(gen / "include"), str(here / "csrc")]
# kvq is C++17; newer torch headers (ATen.h says so) need C++20 in the translation units that
# include them, and kvq's headers compile as C++20 too. nvcc's units include no torch header.
aten_h = Path(cpp_extension.include_paths()[0]) / "ATen" / "ATen.h"
cxx_std = "c++20" if aten_h.is_file() and "C++20 or later" in aten_h.read_text(errors="replace") else "c++17"
cxx_flags = ["-O3", "-std=" + cxx_std]
rel = lambda p: os.path.relpath(p, here)  # setuptools wants sources relative to setup.py
print("kvq_torch: %s build (host %s) of %d configurations: %s" % ("CUDA" if with_cuda else "CPU-only", cxx_std,
      len(configs), ", ".join(c.name for c in configs)))
os.chdir(here)
sources = [rel(here / "csrc" / "kvq_torch.cpp"), rel(here / "csrc" / "host_ops.cpp")]
if with_cuda:
    # torch adds -D__CUDA_NO_HALF_OPERATORS__ and friends for its own headers; kvq's .cu files
    # include no torch header and are compiled as kvq's CMake build compiles them.
    nvcc_flags = ["-O3", "-std=c++17", "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
                  "-U__CUDA_NO_BFLOAT16_CONVERSIONS__", "-U__CUDA_NO_HALF2_OPERATORS__", "-lineinfo"]
    sources += [rel(here / "csrc" / "device_ops.cu")] + [rel(p) for p in generated]
    ext = cpp_extension.CUDAExtension(
        "kvq_torch._C", sources, include_dirs=include_dirs,
        define_macros=[("KVQ_TORCH_CUDA", "1")],
        extra_compile_args={"cxx": cxx_flags, "nvcc": nvcc_flags})
else:
    ext = cpp_extension.CppExtension("kvq_torch._C", sources, include_dirs=include_dirs,
                                     extra_compile_args={"cxx": cxx_flags})

setup(ext_modules=[ext], cmdclass={"build_ext": cpp_extension.BuildExtension.with_options(use_ninja=True)})
