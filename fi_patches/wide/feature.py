"""Declaration of the ``wide_tile`` feature: what the wide low-latency kernel needs from
FlashInfer and the CuTe DSL."""

from packaging.specifiers import SpecifierSet

from fi_patches.compat.feature import Feature
from fi_patches.compat.probes import AttributeProbe, CallableProbe, ModuleProbe
from fi_patches.pinning.targets import AUTOTUNER, LOW_LATENCY_MODULE

FEATURE = Feature(
    name="wide_tile",
    summary="the low-latency MXFP8 GEMM with 16-128-row activation tiles, compiled by fi_patches",
    verified=SpecifierSet(">=0.7.0,<=0.7.4"),
    devices=("sm_100", "sm_103"),
    probes=(
        ModuleProbe(LOW_LATENCY_MODULE),
        CallableProbe(
            LOW_LATENCY_MODULE,
            "LowLatencyBlockscaledGemmKernel.__init__",
            (
                "acc_dtype",
                "mma_tiler_mnk",
                "num_ab_stage",
                "num_sfb_tmem_stage",
                "sf_vec_size",
                "use_pdl",
            ),
        ),
        CallableProbe(
            LOW_LATENCY_MODULE,
            "LowLatencyBlockscaledGemmKernel.__call__",
            (
                "a_ptr",
                "sfa_ptr",
                "b_ptr",
                "sfb_ptr",
                "c_ptr",
                "scale_ptr",
                "bias_ptr",
                "problem_mnkl",
            ),
        ),
        CallableProbe(LOW_LATENCY_MODULE, "LowLatencyBlockscaledGemmKernel.can_implement"),
        CallableProbe(LOW_LATENCY_MODULE, "reorder_scale_factors_per_cta"),
        CallableProbe("cutlass.cute", "compile"),
        AttributeProbe("cutlass.cute.runtime", "make_fake_stream"),
        CallableProbe(AUTOTUNER, "TunableRunner.get_valid_tactics", ("inputs", "profile")),
    ),
    self_check="fi_patches.wide.self_check:self_check",
)
