"""FAULT INJECTION: write a small but real, importable ``flashinfer`` package into a temp dir.

The healthy fake has just the internals fi_patches relies on, shaped as FlashInfer 0.7.x has
them (a runner class built inside its factory, ``autotune_tactics``, the tuner's
``search_cache``), so every probe and the self-check pass on it. Each fault breaks one thing,
as a FlashInfer release might. Tests run fi_patches in a subprocess with the fake first on
``PYTHONPATH``, so the real FlashInfer of the test environment is never touched.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.forkserver import ForkServer

FAULTS = (
    "healthy",
    "module_missing",
    "autotune_tactics_renamed",
    "autotune_tactics_signature",
    "import_raises",
    "runner_class_moved",
    "runner_method_per_instance",
)

_TUNER = """
from abc import ABC, abstractmethod


class TunableRunner(ABC):
    @abstractmethod
    def get_valid_tactics(self, inputs, profile):
        return [-1]

    def get_cache_key_extras(self, inputs):
        return ()

    def __call__(self, inputs, **kwargs):
        return self.forward(inputs, **kwargs)

    @abstractmethod
    def forward(self, inputs, tactic=-1, do_preparation=False, **kwargs):
        raise NotImplementedError


class DynamicTensorSpec:
    def __init__(self, input_idx, dim_idx, gen_tuning_buckets, map_to_tuning_buckets):
        self.input_idx, self.dim_idx = input_idx, dim_idx
        self.gen_tuning_buckets = gen_tuning_buckets
        self.map_to_tuning_buckets = map_to_tuning_buckets


class TuningConfig:
    def __init__(self, dynamic_tensor_specs=(), constraint_specs=()):
        self.dynamic_tensor_specs = dynamic_tensor_specs
        self.constraint_specs = constraint_specs


class ProfilingCacheKey:
    def __init__(self, custom_op, runner_class_name, nearest_profile, extras):
        self.custom_op, self.runner_class_name = custom_op, runner_class_name
        self.nearest_profile, self.extras = nearest_profile, extras

    @property
    def file_key(self):
        return str((self.custom_op, self.runner_class_name, self.nearest_profile, self.extras))


class AutoTuner:
    _instance = None

    def __init__(self):
        self.is_tuning_mode = False
        self.profiling_cache = {}

    @classmethod
    def get(cls):
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance

    @classmethod
    def _find_nearest_profile(cls, shapes, tuning_config):
        profile = [list(s) for s in shapes]
        for spec in tuning_config.dynamic_tensor_specs:
            value = spec.map_to_tuning_buckets(profile[spec.input_idx[0]][spec.dim_idx[0]])
            for i, d in zip(spec.input_idx, spec.dim_idx):
                profile[i][d] = value
        return tuple(tuple(s) for s in profile)

    @classmethod
    def _get_cache_key(cls, custom_op, runner, input_shapes, tuning_config, extras=()):
        profile = cls._find_nearest_profile(input_shapes, tuning_config)
        return ProfilingCacheKey(custom_op, type(runner).__name__, profile, extras)

    def _get_input_sizes(self, inputs):
        return tuple(tuple(x.shape) if hasattr(x, "shape") else (0,) for x in inputs)

    def search_cache(self, custom_op, runners, input_shapes, tuning_config, inputs=None):
        return False, 0, -1, None

    def _profile_single_kernel(self, runner, inputs, tactic, tuning_config=None, **kwargs):
        raise RuntimeError("the fake FlashInfer has no kernels to time")

    def choose_one(self, custom_op, runners, tuning_config, inputs, **kwargs):
        hit, index, tactic, _ = self.search_cache(
            custom_op, runners, self._get_input_sizes(inputs), tuning_config, inputs
        )
        return runners[index], tactic
"""

_ENUMERATOR = """
TACTICS = [(128, 8, 1, 1), (128, 8, 1, 2), (256, 4, 1, 1)]


def {name}({params}):
    return list(TACTICS)


class LowLatencyBlockscaledGemmKernel:
    @staticmethod
    def can_implement(problem_sizes_mnkl, *args, **kwargs):
        return True
"""

_GEMM_BASE = """
from types import SimpleNamespace

from flashinfer.autotuner import TunableRunner


def _bucket(rows):
    return 1 << (rows - 1).bit_length()


_MM_MXFP8_CUTE_DSL_TUNING_CONFIG = SimpleNamespace(
    dynamic_tensor_specs=(SimpleNamespace(map_to_tuning_buckets=_bucket),)
)

{factory}
"""

_FACTORY_NESTED = """
def _cutedsl_low_latency_blockscaled_gemm_runner(sm_version, enable_pdl):
    from flashinfer.gemm.kernels.cute_dsl.low_latency_blockscaled_gemm import autotune_tactics

    class CutedslLowLatencyBlockscaledGemmRunner(TunableRunner):
        {init}
        def get_cache_key_extras(self, inputs):
            return (enable_pdl,)

        def get_valid_tactics(self, inputs, profile):
            a, b = inputs[0], inputs[1]
            return autotune_tactics((b.shape[1], a.shape[0], a.shape[1], 1), None, None, None, 32, None)

        def forward(self, inputs, tactic=-1, do_preparation=False, **kwargs):
            raise RuntimeError("the fake FlashInfer has no kernels")

    return CutedslLowLatencyBlockscaledGemmRunner()
"""

_PER_INSTANCE_INIT = """def __init__(self):
            # Looked up on the instance, so a class-level patch cannot reach it.
            self.get_valid_tactics = lambda inputs, profile: [(128, 8, 1, 1), (128, 8, 1, 2)]
"""

_FACTORY_MODULE_CLASS = """
class LowLatencyRunner(TunableRunner):
    def get_valid_tactics(self, inputs, profile):
        return [(128, 8, 1, 1)]

    def forward(self, inputs, tactic=-1, do_preparation=False, **kwargs):
        raise RuntimeError("the fake FlashInfer has no kernels")


def _cutedsl_low_latency_blockscaled_gemm_runner(sm_version, enable_pdl):
    return LowLatencyRunner()
"""


DSL_RELEASE = "4.8.1"
"""The CuTe DSL release the fake is installed with by default (one the compat matrix ran)."""


def write_fake(
    root: Path, fault: str = "healthy", version: str = "0.7.4", dsl: str = DSL_RELEASE
) -> Path:
    """Write the fake package with ``fault`` under ``root``; returns the dir for PYTHONPATH.
    ``dsl`` is the nvidia-cutlass-dsl release the environment reports: its distribution
    metadata is written beside the fake, first on the path, so the installed DSL (or the
    stub below) is judged as that release."""
    if fault not in FAULTS:
        raise ValueError(f"unknown fault {fault!r}")
    pkg = root / "flashinfer"
    files: dict[str, str] = {
        "__init__.py": f'__version__ = "{version}"\n',
        "autotuner/__init__.py": _TUNER,
        "gemm/__init__.py": "",
        "gemm/kernels/__init__.py": "",
        "gemm/kernels/cute_dsl/__init__.py": "",
    }
    if fault == "import_raises":
        files["__init__.py"] += 'raise RuntimeError("CUDA driver library libcuda.so.1 not found")\n'
    name, params = (
        "autotune_tactics",
        ("problem_sizes_mnkl, a_dtype, b_dtype, sf_dtype, sf_vec_size, c_dtype"),
    )
    if fault == "autotune_tactics_renamed":
        name = "enumerate_tactics"
    if fault == "autotune_tactics_signature":
        params = "problem, dtypes"
    if fault != "module_missing":
        files["gemm/kernels/cute_dsl/low_latency_blockscaled_gemm.py"] = _ENUMERATOR.format(
            name=name, params=params
        )
    if fault == "runner_class_moved":
        factory = _FACTORY_MODULE_CLASS
    else:
        init = _PER_INSTANCE_INIT if fault == "runner_method_per_instance" else ""
        factory = _FACTORY_NESTED.format(init=init)
    files["gemm/gemm_base.py"] = _GEMM_BASE.format(factory=factory)
    for relative, text in files.items():
        path = pkg / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    dist = root / f"flashinfer_python-{version}.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: flashinfer-python\nVersion: {version}\n"
    )
    if importlib.util.find_spec("cutlass") is None:
        # Where the CuTe DSL is not installed (the lent GPU machine: its wheels are too large
        # to carry), the type names the probes hand FlashInfer's enumerator, which FlashInfer
        # itself would import from it. With the DSL installed, the real one is used.
        stub = root / "cutlass" / "__init__.py"
        stub.parent.mkdir(parents=True, exist_ok=True)
        stub.write_text(_CUTLASS_TYPES)
    dsl_dist = root / f"nvidia_cutlass_dsl-{dsl}.dist-info"
    dsl_dist.mkdir(parents=True, exist_ok=True)
    (dsl_dist / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: nvidia-cutlass-dsl\nVersion: {dsl}\n"
    )
    return root


_CUTLASS_TYPES = "".join(
    f"class {name}:\n    pass\n\n\n"
    for name in (
        "Float8E4M3FN",
        "Float8E5M2",
        "Float8E8M0FNU",
        "BFloat16",
        "Float16",
        "Float32",
        "Float4E2M1FN",
        "Int32",
    )
)


def run_fi_patches(
    args: list[str],
    pythonpath: Path | None = None,
    env: dict[str, str] | None = None,
    server: ForkServer | None = None,
) -> subprocess.CompletedProcess[str]:
    """``python -m fi_patches ARGS`` in a subprocess, with ``pythonpath`` first on the path."""
    return run_python(["-m", "fi_patches", *args], pythonpath, env, server)


def run_python(
    argv: list[str],
    pythonpath: Path | None = None,
    env: dict[str, str] | None = None,
    server: ForkServer | None = None,
) -> subprocess.CompletedProcess[str]:
    """``python ARGV`` in a subprocess without this process's ``FI_PATCHES_*`` variables (then
    ``env``), with ``pythonpath`` first on the path; a fork of ``server`` (torch imported, the
    fake not) when given, as the fake replaces FlashInfer, never torch."""
    child = {k: v for k, v in os.environ.items() if not k.startswith("FI_PATCHES_")}
    child.update(env or {})
    if pythonpath is not None:
        child["PYTHONPATH"] = os.pathsep.join([str(pythonpath), child.get("PYTHONPATH", "")])
    if server is not None:
        return server.run(argv, child, os.getcwd(), timeout=600)
    return subprocess.run(
        [sys.executable, *argv],
        capture_output=True,
        text=True,
        env=child,
        timeout=600,
        check=False,
    )
