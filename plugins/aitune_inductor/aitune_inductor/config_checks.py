"""Validators shared by the backend configs: fail when the config is made, not mid-build.

Inductor options are a free-form mapping handed to ``torch.compile``, and some of
them run programs (``cpp.cxx``) or end up on a compiler's command line; a checkpoint
rebuilds its config from data, so only the options on :data:`INDUCTOR_OPTION_RULES`
are accepted there (see :mod:`aitune_core.backends.safe_options`).
"""

from __future__ import annotations

import functools
from typing import Any

import attrs

from aitune_core.plugin_api import AllowList, BoolRule, ChoiceRule, IntRule, OptionRule, allowed_options

_SCALARS = (str, int, float, bool)


def options_dict(value: Any) -> dict[str, Any] | None:
    """A private copy, so a caller changing their dict later does not change the config."""
    return None if value is None else dict(value)


def check_options(instance: Any, attribute: attrs.Attribute[Any], value: dict[str, Any] | None) -> None:
    """Inductor options must survive a checkpoint: string keys, JSON scalar values.

    Callables (such as ``guard_filter_fn``) cannot be written into a checkpoint, and a
    backend restored without them would silently compile differently.
    """
    if value is None:
        return
    for key, option in value.items():
        if not isinstance(key, str):
            raise TypeError(f"{attribute.name} keys must be Inductor option names (str), got {key!r}")
        if not isinstance(option, _SCALARS):
            raise TypeError(
                f"{attribute.name}[{key!r}] must be a str, int, float or bool so that it can be saved "
                f"with the checkpoint, got {type(option).__name__}"
            )


_REFUSALS: tuple[tuple[str, str], ...] = (
    ("cpp.cxx", "it names a program (the C++ compiler) that Inductor runs"),
    ("*flag*", "it goes into the compiler's command line"),
    ("cpp.march", "it goes into the compiler's command line"),
    ("*opt_level*", "it goes into the compiler's command line"),
    ("*path*", "it names a path"),
    ("*_dir", "it names a directory"),
    ("*_dirs", "it names directories"),
    ("*cmd*", "it is a command"),
    ("*command*", "it is a command"),
    ("*lib*", "it names a library to load"),
    ("*pass*", "it names a custom pass (a callable)"),
    ("*_fn", "it names a callable"),
    ("*hook*", "it names a callable"),
    ("*class*", "it names a class to instantiate"),
    ("*callback*", "it names a callable"),
)
"""Why the dangerous kinds of Inductor options are refused (for the error only: every
option off :data:`INDUCTOR_OPTIONS` is refused)."""

_ON = BoolRule()

INDUCTOR_OPTION_RULES: dict[str, OptionRule] = {
    # Autotuning: which kernels and configs are tried, never which programs run.
    "max_autotune": _ON,
    "max_autotune_gemm": _ON,
    "max_autotune_pointwise": _ON,
    "max_autotune_gemm_search_space": ChoiceRule(("DEFAULT", "EXHAUSTIVE")),
    "max_autotune_flex_search_space": ChoiceRule(("DEFAULT", "EXHAUSTIVE")),
    "coordinate_descent_tuning": _ON,
    "coordinate_descent_check_all_directions": _ON,
    "coordinate_descent_search_radius": IntRule(1, 16),
    "benchmark_fusion": _ON,
    "benchmark_epilogue_fusion": _ON,
    # Fusion, layout and memory planning.
    "epilogue_fusion": _ON,
    "epilogue_fusion_first": _ON,
    "aggressive_fusion": _ON,
    "group_fusion": _ON,
    "combo_kernels": _ON,
    "pattern_matcher": _ON,
    "split_reductions": _ON,
    "reorder_for_locality": _ON,
    "reorder_for_peak_memory": _ON,
    "unroll_reductions_threshold": IntRule(0, 1024),
    "shape_padding": _ON,
    "comprehensive_padding": _ON,
    "force_shape_pad": _ON,
    "freezing": _ON,
    "layout_optimization": _ON,
    "force_layout_optimization": _ON,
    "conv_1x1_as_mm": _ON,
    "size_asserts": _ON,
    "alignment_asserts": _ON,
    "fx_graph_cache": _ON,
    "autotune_local_cache": _ON,
    # CUDA graphs and Triton code generation.
    "triton.cudagraphs": _ON,
    "triton.cudagraph_trees": _ON,
    "triton.cudagraph_skip_dynamic_graphs": _ON,
    "triton.autotune_pointwise": _ON,
    "triton.autotune_cublasLt": _ON,
    "triton.persistent_reductions": _ON,
    "triton.cooperative_reductions": _ON,
    "triton.prefer_nd_tiling": _ON,
    "triton.use_block_ptr": _ON,
    "triton.multi_kernel": IntRule(0, 3),
    # C++ code generation for the CPU.
    "cpp.simdlen": IntRule(0, 1024),
    "cpp.threads": IntRule(-1, 4096),
    "cpp.dynamic_threads": _ON,
    "cpp.weight_prepack": _ON,
    "cpp.enable_loop_tail_vec": _ON,
    "cpp.enable_concat_linear": _ON,
    "cpp.enable_tiling_heuristics": _ON,
    "cpp.enable_grouped_gemm_template": _ON,
    "cpp.max_horizontal_fusion_size": IntRule(0, 1024),
    "cpp.min_chunk_size": IntRule(1, 1 << 20),
    # AOT Inductor packages (switches whose flags torch itself chooses).
    "aot_inductor.debug_compile": _ON,
    "aot_inductor.allow_stack_allocation": _ON,
    "aot_inductor.use_runtime_constant_folding": _ON,
}
"""Inductor options a checkpoint may set, with the rule of each value."""


@functools.cache
def installed_inductor_options() -> frozenset[str]:
    """The options the installed torch's Inductor has (imports ``torch._inductor``, so only when options are given)."""
    import torch._inductor

    return frozenset(torch._inductor.list_options())


INDUCTOR_OPTIONS = AllowList(
    what="Inductor option",
    rules=INDUCTOR_OPTION_RULES,
    refusals=_REFUSALS,
    known=installed_inductor_options,
    listed_at="aitune_inductor.config_checks.INDUCTOR_OPTION_RULES",
)
"""The allow-list of JIT ``options`` and AOT ``inductor_configs``."""

check_allowed_options = allowed_options(INDUCTOR_OPTIONS)
"""Attrs validator: every option is on :data:`INDUCTOR_OPTIONS` unless the config has ``unsafe_options=True``."""


@functools.cache
def compile_modes() -> tuple[str, ...]:
    """The modes the installed ``torch.compile`` takes (imports ``torch._inductor``)."""
    import torch._inductor

    return tuple(torch._inductor.list_mode_options())


def check_mode(_instance: Any, attribute: attrs.Attribute[Any], value: str | None) -> None:
    """A mode torch.compile does not know fails only when it compiles; fail when the config is made."""
    if value is None:
        return
    if not isinstance(value, str) or value not in compile_modes():
        raise ValueError(f"{attribute.name} must be None or one of {', '.join(compile_modes())}, got {value!r}")
