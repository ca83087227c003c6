"""transformers' caches are containers: their tensors are seen, copied, resized and compared."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import aitune_core as ait
from aitune_core import MaxThroughputStrategy, TorchEagerBackend
from aitune_core.plugin_api import Locator, Tolerances, compare_outputs
from aitune_core.testing.engine import holds_state, owned_copy, walk
from aitune_core.testing.timing import FAST_PROFILE
from aitune_transformers import plugin
from aitune_transformers.phase import DECODE, PREFILL, phase

transformers = pytest.importorskip("transformers")


def prefill_cache(model: Any, batch: int = 2, length: int = 5) -> Any:
    with torch.no_grad():
        return model(input_ids=torch.randint(0, 97, (batch, length)), use_cache=True).past_key_values


def tensor_paths(value: Any) -> dict[str, list[int]]:
    walked = walk(value, Locator("cache"))
    return {loc.display_path: list(leaf.shape) for loc, leaf in walked if isinstance(leaf, torch.Tensor)}


def cache_of(arguments: dict[str, Any]) -> Any:
    """The cache a call was given: GPT-2's forward takes it through ``**kwargs``."""
    return arguments.get("past_key_values", arguments.get("kwargs", {}).get("past_key_values"))


@pytest.fixture(autouse=True)
def _registered() -> None:
    plugin.aitune_graph_key_parts({})  # transformers is imported: the plugin registers the caches


def test_a_dynamic_cache_shows_its_tensors_and_copies_are_independent(tiny_gpt2):
    model = tiny_gpt2()
    cache = prefill_cache(model)
    paths = tensor_paths(cache)
    assert paths == {f"cache.layers[{i}].{kind}": [2, 2, 5, 16] for i in range(2) for kind in ("keys", "values")}
    copied = owned_copy(cache)
    assert type(copied) is type(cache) and copied is not cache and copied.layers[0] is not cache.layers[0]
    assert torch.equal(copied.layers[0].keys, cache.layers[0].keys)
    with torch.no_grad():  # a decode step grows the original ...
        model(input_ids=torch.zeros(2, 1, dtype=torch.long), past_key_values=cache, use_cache=True)
    assert cache.get_seq_length() == 6 and copied.get_seq_length() == 5  # ... and not the copy
    assert holds_state({"past_key_values": cache})


def test_a_static_cache_written_in_place_leaves_its_copy_alone(tiny_gpt2):
    model = tiny_gpt2()
    cache = transformers.StaticCache(config=model.config, max_cache_len=16)
    with torch.no_grad():
        model(input_ids=torch.randint(0, 97, (1, 4)), past_key_values=cache, use_cache=True)
    copied = owned_copy(cache)
    before = copied.layers[0].keys.clone()
    with torch.no_grad():
        model(
            input_ids=torch.ones(1, 1, dtype=torch.long),
            past_key_values=cache,
            use_cache=True,
            cache_position=torch.tensor([4]),
        )
    assert not torch.equal(cache.layers[0].keys, before)  # the original was written in place
    assert torch.equal(copied.layers[0].keys, before)
    assert tensor_paths(cache)["cache.layers[0].keys"] == [1, 2, 16, 16]


def test_an_encoder_decoder_cache_walks_both_of_its_caches():
    self_attention = transformers.DynamicCache()
    cross_attention = transformers.DynamicCache()
    keys = torch.randn(1, 2, 3, 4)
    self_attention.update(keys, keys, 0)
    cross_attention.update(keys * 2, keys * 2, 0)
    cache = transformers.EncoderDecoderCache(self_attention, cross_attention)
    paths = tensor_paths(cache)
    assert "cache.self_attention_cache.layers[0].keys" in paths
    assert "cache.cross_attention_cache.layers[0].values" in paths
    copied = owned_copy(cache)
    copied.is_updated[5] = True  # per-layer flags are copied, not shared
    assert 5 not in cache.is_updated


def test_caches_compare_by_their_tensors(tiny_gpt2):
    cache = prefill_cache(tiny_gpt2())
    same = owned_copy(cache)
    assert compare_outputs(same, cache, Tolerances()).problem is None
    same.layers[1].values = same.layers[1].values + 1
    problem = compare_outputs(same, cache, Tolerances()).problem
    assert problem is not None and "layers[1].values" in problem


def test_the_phase_comes_from_the_cache_the_position_or_use_cache(tiny_gpt2):
    classes = plugin._registered[:1]
    empty = transformers.DynamicCache()
    filled = prefill_cache(tiny_gpt2())
    assert phase({"input_ids": torch.ones(1, 4), "past_key_values": empty}, classes) == PREFILL
    assert phase({"input_ids": torch.ones(1, 1), "past_key_values": filled}, classes) == DECODE
    assert phase({"input_ids": torch.ones(1, 1), "cache_position": torch.tensor([7])}, classes) == DECODE
    assert phase({"input_ids": torch.ones(1, 4), "cache_position": torch.arange(4)}, classes) == PREFILL
    assert phase({"input_ids": torch.ones(1, 4), "use_cache": True}, classes) == PREFILL
    assert phase({"x": torch.ones(1, 4)}, classes) is None


def test_prefill_and_decode_are_graphs_of_their_own_and_samples_keep_their_past(tiny_gpt2, greedy, unique_name):
    module = ait.Module(tiny_gpt2(), unique_name())
    prompts = [torch.randint(0, 97, (6,)) for _ in range(4)]
    strategy = MaxThroughputStrategy([TorchEagerBackend()], profile=FAST_PROFILE)  # what is recorded, not timed
    ait.tune(lambda batch: greedy(module, batch, 3), prompts, batch_sizes=[1, 2], strategy=strategy)
    by_phase = {}
    for record in module.graphs.values():
        phases = {phase(sample.arguments, plugin._registered[:1]) for sample in record.samples}
        assert len(phases) == 1
        by_phase[phases.pop()] = record
    assert set(by_phase) == {PREFILL, DECODE}
    # Decode calls were made at past lengths 6, 7 and 8; later steps must not have grown the stored caches.
    pasts = sorted({cache_of(sample.arguments).get_seq_length() for sample in by_phase[DECODE].samples})
    assert pasts == [6, 7, 8]
    decode = by_phase[DECODE].spec
    shapes = {loc.display_path: spec.shape for loc, spec in decode.input_spec.tensor_data}
    keys = next(shape for path, shape in shapes.items() if path.endswith("layers[0].keys"))
    assert keys[0] == "batch0" and isinstance(keys[2], str)  # the batch and the past length are dynamic


def test_the_decode_batch_resizes_the_cache_with_the_tokens(tiny_gpt2, greedy, unique_name):
    model = tiny_gpt2()
    module = ait.Module(model, unique_name())
    prompts = [torch.randint(0, 97, (6,)) for _ in range(4)]
    strategy = MaxThroughputStrategy([TorchEagerBackend()], profile=FAST_PROFILE)  # what is recorded, not timed
    ait.tune(lambda batch: greedy(module, batch, 2), prompts, batch_sizes=[1, 2], strategy=strategy)
    decode = next(r for r in module.graphs.values() if cache_of(r.samples[0].arguments) is not None)
    grown = decode.spec.input_spec.make_batch(decode.samples[0].arguments, 4)
    assert grown["input_ids"].shape[0] == 4 and cache_of(grown).layers[1].values.shape[0] == 4
    with torch.no_grad():
        out = model(input_ids=grown["input_ids"], past_key_values=cache_of(grown), use_cache=True)
    assert out.logits.shape[0] == 4
