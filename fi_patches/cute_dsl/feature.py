"""Declaration of the ``pinned_cute_dsl`` feature: what it needs from FlashInfer."""

from packaging.specifiers import SpecifierSet

from fi_patches.compat.feature import Feature
from fi_patches.compat.probes import AnyOfProbe, CallableProbe, FactoryClassProbe
from fi_patches.pinning.feature import TUNER_PROBES
from fi_patches.pinning.targets import CUTE_DSL_CLASS, CUTE_DSL_FACTORY, GEMM_BASE

FEATURE = Feature(
    name="pinned_cute_dsl",
    summary="mm_mxfp8's cute-dsl runner runs (and tunes) a pinned tactic per shape and row range",
    verified=SpecifierSet(">=0.7.0,<=0.7.4"),
    # sm_107 runs another cute-dsl kernel with another tactic form from 0.7.2 on.
    devices=("sm_100", "sm_103"),
    probes=(
        CallableProbe(
            GEMM_BASE, CUTE_DSL_FACTORY, ("sm_major", "sm_minor", "enable_pdl", "out_dtype")
        ),
        FactoryClassProbe(
            GEMM_BASE, CUTE_DSL_FACTORY, CUTE_DSL_CLASS, ("get_valid_tactics", "forward")
        ),
        CallableProbe(
            GEMM_BASE, "mm_mxfp8", ("a", "b", "a_descale", "b_descale", "out", "out_dtype")
        ),
        AnyOfProbe(
            (
                CallableProbe(GEMM_BASE, "_get_stream_cache_buf", ("name",)),
                CallableProbe("flashinfer.utils", "_get_cache_buf", ("name",)),
            )
        ),
        CallableProbe(
            "flashinfer.gemm.kernels.dense_blockscaled_gemm_sm100_splitk",
            "Sm100BlockScaledSplitKGemmKernel.is_valid_tactic",
        ),
        CallableProbe(
            "flashinfer.gemm.kernels.dense_blockscaled_gemm_sm100_splitk",
            "Sm100BlockScaledSplitKGemmKernel.mma_tiler_mn_for_m",
        ),
        *TUNER_PROBES,
    ),
    self_check="fi_patches.cute_dsl.self_check:self_check",
)
