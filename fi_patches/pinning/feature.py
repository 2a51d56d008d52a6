"""Declaration of the ``pinned_tactics`` feature: what it needs from FlashInfer."""

from packaging.specifiers import SpecifierSet

from fi_patches.compat.feature import Feature
from fi_patches.compat.probes import AttributeProbe, CallableProbe, FactoryClassProbe, ModuleProbe
from fi_patches.pinning.targets import (
    AUTOTUNER,
    GEMM_BASE,
    LOW_LATENCY_CLASS,
    LOW_LATENCY_FACTORY,
    LOW_LATENCY_MODULE,
)

TUNER_PROBES = (
    AttributeProbe(GEMM_BASE, "_MM_MXFP8_CUTE_DSL_TUNING_CONFIG.dynamic_tensor_specs"),
    CallableProbe(AUTOTUNER, "TunableRunner.get_valid_tactics", ("inputs", "profile")),
    CallableProbe(
        AUTOTUNER,
        "AutoTuner.search_cache",
        ("custom_op", "runners", "input_shapes", "tuning_config", "inputs"),
    ),
)
"""What pinning any tuned runner needs: its bucket map, the runner contract and the cache
lookup the tuner-cache wrapper sits on."""

FEATURE = Feature(
    name="pinned_tactics",
    summary=(
        "FlashInfer's low-latency MXFP8 tuner is offered only the pinned tactic per shape and rows"
    ),
    verified=SpecifierSet(">=0.7.0,<=0.7.4"),
    devices=("sm_100", "sm_103", "sm_107"),
    probes=(
        ModuleProbe(LOW_LATENCY_MODULE),
        CallableProbe(
            LOW_LATENCY_MODULE,
            "autotune_tactics",
            ("problem_sizes_mnkl", "a_dtype", "b_dtype", "sf_dtype", "sf_vec_size", "c_dtype"),
        ),
        CallableProbe(GEMM_BASE, LOW_LATENCY_FACTORY, ("sm_version", "enable_pdl")),
        FactoryClassProbe(
            GEMM_BASE,
            LOW_LATENCY_FACTORY,
            LOW_LATENCY_CLASS,
            ("get_valid_tactics", "get_cache_key_extras", "forward"),
        ),
        *TUNER_PROBES,
    ),
    self_check="fi_patches.pinning.self_check:self_check",
)
