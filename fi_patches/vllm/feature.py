"""Declarations of the vLLM features, ``vllm_plugin`` and ``vllm_route``: what each needs from
vLLM (see :mod:`._upstream`), FlashInfer and the device."""

from packaging.specifiers import SpecifierSet

from fi_patches.compat.feature import Feature
from fi_patches.vllm import _upstream as upstream

PLUGIN = Feature(
    name="vllm_plugin",
    summary="vLLM's general plugin activates fi_patches (FI_PATCHES_PINS) in every vLLM process",
    verified=SpecifierSet(),  # unused: the plugin touches no FlashInfer internal
    devices=upstream.PLUGIN_DEVICES,
    probes=(),
    self_check="fi_patches.vllm.self_check:plugin_self_check",
    requires=(upstream.PLUGIN_REQUIREMENT,),
    uses_flashinfer=False,
)

ROUTE = Feature(
    name="vllm_route",
    summary="vLLM's cute-dsl MXFP8 linears send their GEMM through fi_patches.mxfp8.mm",
    # fi_patches.mxfp8.mm's own routes gate their FlashInfer internals; this is the range the
    # route's call of it is verified on.
    verified=SpecifierSet(">=0.7.0,<=0.7.4"),
    devices=upstream.ROUTE_DEVICES,
    probes=(),
    self_check="fi_patches.vllm.self_check:route_self_check",
    requires=(upstream.ROUTE_REQUIREMENT,),
)
