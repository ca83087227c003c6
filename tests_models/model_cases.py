"""The real architectures of the models matrix: how each is built, tuned, probed and called.

Every model is built from a tiny config with random weights (never from a hub), so
the same seed gives the same weights in the test process and in the child process
that loads the checkpoint. A :class:`Case` says how ``tune`` gathers calls, which
calls are *probes* (shapes never recorded but inside the tuned ranges: they must be
routed to the tuned backend and match eager within tolerance) and which are
*fallbacks* (a graph or shape never recorded: they must run the original module and
give eager's exact output).

This module is imported by the tests and by ``child.py`` (the fresh process that
loads the checkpoint), so it holds no pytest code.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a config and random weights: nothing comes from a hub
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

Inputs = Any
Outputs = Any

TUNE_SEED = 0
"""Weights of the tuned model and of the eager reference (built twice from this seed)."""
CHILD_SEED = 1234
"""Weights the child builds before loading: the checkpoint's must replace them."""


def _ints(generator: torch.Generator, high: int, *shape: int) -> torch.Tensor:
    return torch.randint(1, high, shape, generator=generator)


def _padding_mask(generator: torch.Generator, batch: int, length: int) -> torch.Tensor:
    """1 for tokens, 0 for padding at the end of some rows (each row keeps at least half)."""
    keep = torch.randint(length // 2, length + 1, (batch,), generator=generator)
    return (torch.arange(length)[None, :] < keep[:, None]).to(torch.long)


# --------------------------------------------------------------------------- outputs
def leaves(value: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor in an output, with a path: tuples, dicts, ModelOutputs and KV caches."""
    yield from _leaves(value, "out")


def _leaves(value: Any, path: str) -> Iterator[tuple[str, torch.Tensor]]:
    if isinstance(value, torch.Tensor):
        yield path, value
    elif isinstance(value, dict):  # ModelOutput is an OrderedDict
        for key, item in value.items():
            yield from _leaves(item, f"{path}.{key}")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _leaves(item, f"{path}[{index}]")
    elif hasattr(value, "layers") and hasattr(value, "get_seq_length"):  # a transformers Cache
        for index, layer in enumerate(value.layers):
            yield from _leaves(getattr(layer, "keys", None), f"{path}.layers[{index}].keys")
            yield from _leaves(getattr(layer, "values", None), f"{path}.layers[{index}].values")
    elif value is not None and not isinstance(value, (int, float, str, bool)):
        raise TypeError(f"{path}: cannot compare a {type(value).__name__}")


def assert_same(got: Outputs, expected: Outputs, exact: bool, rtol: float, atol: float, what: str) -> None:
    """Every tensor of ``got`` equals ``expected``'s: bit for bit, or within the tolerances."""
    assert_same_leaves(list(leaves(got)), list(leaves(expected)), exact, rtol, atol, what)


def assert_same_leaves(
    got: list[tuple[str, torch.Tensor]],
    expected: list[tuple[str, torch.Tensor]],
    exact: bool,
    rtol: float,
    atol: float,
    what: str,
) -> None:
    """:func:`assert_same` on outputs already turned into :func:`leaves` (as the child receives eager's)."""
    assert [path for path, _ in got] == [path for path, _ in expected], f"{what}: the outputs differ in structure"
    assert expected, f"{what}: no tensor to compare"
    for (path, a), (_, b) in zip(got, expected, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype, (
            f"{what}: {path} is {a.dtype}{list(a.shape)}, eager {b.dtype}{list(b.shape)}"
        )
        if exact or not a.is_floating_point():
            difference = (a.double() - b.double()).abs().max() if a.numel() else 0
            assert torch.equal(a, b), f"{what}: {path} differs from eager (max abs diff {difference})"
        else:
            torch.testing.assert_close(a, b, rtol=rtol, atol=atol, msg=lambda m, p=path: f"{what}: {p}: {m}")


# --------------------------------------------------------------------------- routing
@dataclass
class Counts:
    """Calls of a tuned wrapper: all of them, those its routes served, those the original module ran."""

    calls: int = 0
    routed: int = 0
    eager: int = 0


@contextlib.contextmanager
def counting(wrapped: Any) -> Iterator[Counts]:
    """Count what ``wrapped`` (a tuned ``aitune_core.Module``) does with each call while the block runs.

    ``routed`` counts calls that reached a route's backend; ``eager`` counts calls the
    wrapper sent to the original module because their graph or shape was not tuned (or
    the module changed since). A call that a route gives to eager for its batch size
    counts in neither.
    """
    counts = Counts()

    def counted(function: Callable[..., Any], attribute: str) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            setattr(counts, attribute, getattr(counts, attribute) + 1)
            return function(*args, **kwargs)

        return run

    from aitune_core.module.router import RUN_EAGERLY

    routes = list(wrapped.routes.values())
    saved = [(route, route.call, route.lower_calls) for route in routes]
    own = wrapped.__dict__  # instance attributes come before the class's methods
    for route in routes:
        route.call = counted(route.call, "routed")
        route.lower_calls = tuple(
            (up_to, call if call is RUN_EAGERLY else counted(call, "routed")) for up_to, call in route.lower_calls
        )
    own["forward"] = counted(wrapped.forward, "calls")
    own["_fall_back"] = counted(wrapped._fall_back, "eager")
    own["_bypass"] = counted(wrapped._bypass, "eager")
    try:
        yield counts
    finally:
        for name in ("forward", "_fall_back", "_bypass"):
            own.pop(name, None)
        for route, call, lower_calls in saved:
            route.call, route.lower_calls = call, lower_calls


# --------------------------------------------------------------------------- cases
@dataclass
class Case:
    """One architecture: how it is built, gathered, probed and called.

    build(seed): the model in eval mode, random weights from ``seed``.
    dataset(): the unbatched samples ``tune`` batches into ``batch_sizes``.
    gather(module): the function ``tune`` calls with each batch.
    call(module, inputs): one probe or fallback call; its result is what is compared.
    probes(): inputs of shapes never recorded but inside the tuned ranges.
    fallbacks(): (why, inputs) of calls whose graph or shape was never recorded.
    graphs: how many graphs tuning must record (each served by the tuned backend).
    phases: the language-model phases (aitune-transformers' graph-key part) the graphs are keyed by.
    tokens: the call returns generated tokens first; they must equal eager's exactly.
    """

    name: str
    build: Callable[[int], torch.nn.Module]
    dataset: Callable[[], list[Any]]
    batch_sizes: list[int]
    gather: Callable[[Callable[..., Any]], Callable[..., Any]]
    call: Callable[[Callable[..., Any], Inputs], Outputs]
    probes: Callable[[], list[Inputs]]
    fallbacks: Callable[[], list[tuple[str, Inputs]]]
    graphs: int
    phases: tuple[str, ...] = ()
    rtol: float = 1e-3
    atol: float = 1e-4
    tokens: bool = False


def _positional(module: Callable[..., Any], inputs: Inputs) -> Outputs:
    return module(inputs)


def _keywords(module: Callable[..., Any], inputs: Inputs) -> Outputs:
    return module(**inputs)


def _direct(module: Callable[..., Any]) -> Callable[..., Any]:
    return module


# -- timm CNN ----------------------------------------------------------------
def build_resnet(seed: int) -> torch.nn.Module:
    import timm

    torch.manual_seed(seed)
    return timm.create_model("resnet18", pretrained=False, num_classes=10).eval()


def _images(seed: int, count: int, size: int = 32) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(3, size, size, generator=generator) for _ in range(count)]


def _image_batch(seed: int, batch: int, size: int = 32) -> torch.Tensor:
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(seed))


RESNET = Case(
    name="timm_resnet18",
    build=build_resnet,
    dataset=lambda: _images(1, 4),
    batch_sizes=[2, 4],
    gather=_direct,
    call=_positional,
    probes=lambda: [_image_batch(2, 3)],  # batch 3: between the tuned 2 and 4
    fallbacks=lambda: [
        ("batch 8, above the tuned batch range", _image_batch(3, 8)),
        ("48x48 images, a size never recorded", _image_batch(4, 2, size=48)),
    ],
    graphs=1,
)


# -- timm ViT ----------------------------------------------------------------
def build_vit(seed: int) -> torch.nn.Module:
    import timm

    torch.manual_seed(seed)
    # vit_tiny's width and heads, 32x32 images in 8x8 patches, and two blocks instead of twelve:
    # the architecture is the same, the compile a sixth of the work.
    model = timm.create_model(
        "vit_tiny_patch16_224", pretrained=False, num_classes=10, img_size=32, patch_size=8, depth=2
    )
    return model.eval()


VIT = Case(
    name="timm_vit_tiny",
    build=build_vit,
    dataset=lambda: _images(5, 4),
    batch_sizes=[2, 4],
    gather=_direct,
    call=_positional,
    probes=lambda: [_image_batch(6, 3)],
    fallbacks=lambda: [
        ("batch 8, above the tuned batch range", _image_batch(7, 8)),
        ("batch 1, below the tuned batch range", _image_batch(8, 1)),
    ],
    graphs=1,
)


# -- transformers encoders: BERT and T5 ----------------------------------------
TOKEN_LENGTHS = (16, 32, 64)
VOCAB = 100


def _token_samples(seed: int, count: int, length: int = max(TOKEN_LENGTHS)) -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    samples = []
    for _ in range(count):
        ids = _ints(generator, VOCAB, length)
        mask = _padding_mask(generator, 1, length)[0]
        samples.append({"input_ids": ids, "attention_mask": mask})
    return samples


def _at_lengths(module: Callable[..., Any]) -> Callable[..., Any]:
    """Each batch is called at every length of :data:`TOKEN_LENGTHS`, as keywords."""

    def gather(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> None:
        for length in TOKEN_LENGTHS:
            module(input_ids=input_ids[:, :length], attention_mask=attention_mask[:, :length])

    return gather


def _token_batch(seed: int, batch: int, length: int, **extra: Any) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    inputs = {
        "input_ids": _ints(generator, VOCAB, batch, length),
        "attention_mask": _padding_mask(generator, batch, length),
    }
    inputs.update(extra)
    return inputs


def build_bert(seed: int) -> torch.nn.Module:
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    return BertModel(config).eval()


BERT = Case(
    name="bert_tiny",
    build=build_bert,
    dataset=lambda: _token_samples(10, 4),
    batch_sizes=[1, 2, 4],
    gather=_at_lengths,
    call=_keywords,
    # Lengths 24 and 48 were never recorded (16, 32, 64 were), batch 3 neither.
    probes=lambda: [_token_batch(11, 3, 24), _token_batch(12, 2, 48)],
    fallbacks=lambda: [
        ("length 96, above the tuned length range", _token_batch(13, 2, 96)),
        (
            "a keyword never recorded (token_type_ids)",
            _token_batch(14, 2, 32, token_type_ids=torch.ones(2, 32, dtype=torch.long)),
        ),
    ],
    graphs=1,
)


def build_t5_encoder(seed: int) -> torch.nn.Module:
    from transformers import T5Config, T5EncoderModel

    torch.manual_seed(seed)
    config = T5Config(vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2)
    return T5EncoderModel(config).eval()


T5 = Case(
    name="t5_encoder_tiny",
    build=build_t5_encoder,
    dataset=lambda: _token_samples(20, 4),
    batch_sizes=[1, 2, 4],
    gather=_at_lengths,
    call=_keywords,
    probes=lambda: [_token_batch(21, 3, 24), _token_batch(22, 2, 48)],
    fallbacks=lambda: [
        ("length 96, above the tuned length range", _token_batch(23, 2, 96)),
        ("batch 8, above the tuned batch range", _token_batch(24, 8, 32)),
    ],
    graphs=1,
)


# -- GPT-2 ------------------------------------------------------------------
PROMPT_LENGTHS = (6, 10)
NEW_TOKENS = 5


def build_gpt2(seed: int) -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=128, bos_token_id=0, eos_token_id=0
    )
    return GPT2LMHeadModel(config).eval()


def cache_keyword() -> str:
    """``cache`` since transformers 5 renamed it; ``past_key_values`` before (5.x still takes it, deprecated)."""
    import inspect

    from transformers import GPT2LMHeadModel

    return "cache" if "cache" in inspect.signature(GPT2LMHeadModel.forward).parameters else "past_key_values"


def generate(module: Callable[..., Any], prompt: torch.Tensor, new_tokens: int = NEW_TOKENS, **extra: Any) -> Outputs:
    """Greedy decoding with the KV cache: one prefill call, then one decode call per new token.

    Returns the prompt with the generated tokens, and every step's last logits.
    """
    keyword = cache_keyword()
    out = module(input_ids=prompt, use_cache=True, **extra)
    tokens, logits = [prompt], [out.logits[:, -1]]
    for _ in range(new_tokens - 1):
        tokens.append(logits[-1].argmax(-1, keepdim=True))
        if "attention_mask" in extra:
            extra["attention_mask"] = torch.cat([extra["attention_mask"], torch.ones_like(tokens[-1])], dim=1)
        out = module(input_ids=tokens[-1], use_cache=True, **{keyword: out[keyword]}, **extra)
        logits.append(out.logits[:, -1])
    tokens.append(logits[-1].argmax(-1, keepdim=True))
    return torch.cat(tokens, dim=1), torch.stack(logits, dim=1)


def _generate_call(module: Callable[..., Any], inputs: Inputs) -> Outputs:
    prompt, extra = inputs
    return generate(module, prompt, **dict(extra))


def _prompts(seed: int, count: int, length: int = max(PROMPT_LENGTHS)) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [_ints(generator, VOCAB, length) for _ in range(count)]


def _generate_at_lengths(module: Callable[..., Any]) -> Callable[..., Any]:
    """Each batch of prompts is decoded from two prompt lengths: prefill and decode both get a range."""

    def gather(prompts: torch.Tensor) -> None:
        for length in PROMPT_LENGTHS:
            generate(module, prompts[:, :length])

    return gather


def _prompt(seed: int, batch: int, length: int, **extra: Any) -> tuple[torch.Tensor, dict[str, Any]]:
    return torch.randint(1, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed)), extra


GPT2_CACHE = Case(
    name="gpt2_greedy_cache",
    build=build_gpt2,
    dataset=lambda: _prompts(30, 4),
    batch_sizes=[1, 2, 4],
    gather=_generate_at_lengths,
    call=_generate_call,
    # Prompt length 8 and batch 3 were never recorded; the decode steps' cache lengths
    # (8..11) lie inside the recorded 6..13.
    probes=lambda: [_prompt(31, 3, 8), _prompt(32, 1, 7)],
    fallbacks=lambda: [
        ("a 40-token prompt: prefill and every decode step above the tuned lengths", _prompt(33, 2, 40)),
        (
            "an attention_mask keyword, never recorded",
            _prompt(34, 2, 8, attention_mask=torch.ones(2, 8, dtype=torch.long)),
        ),
    ],
    graphs=2,
    phases=("prefill", "decode"),
    tokens=True,
)


def _logits_at_lengths(module: Callable[..., Any]) -> Callable[..., Any]:
    def gather(input_ids: torch.Tensor) -> None:
        for length in TOKEN_LENGTHS:
            module(input_ids=input_ids[:, :length], use_cache=False)

    return gather


def _no_cache_call(module: Callable[..., Any], inputs: Inputs) -> Outputs:
    return module(input_ids=inputs, use_cache=False)


def _ids(seed: int, batch: int, length: int) -> torch.Tensor:
    return torch.randint(1, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


GPT2_NO_CACHE = Case(
    name="gpt2_no_cache",
    build=build_gpt2,
    dataset=lambda: _prompts(40, 4, length=max(TOKEN_LENGTHS)),
    batch_sizes=[1, 2, 4],
    gather=_logits_at_lengths,
    call=_no_cache_call,
    probes=lambda: [_ids(41, 3, 24), _ids(42, 2, 40)],
    fallbacks=lambda: [
        ("length 100, above the tuned length range", _ids(43, 2, 100)),
        ("batch 8, above the tuned batch range", _ids(44, 8, 16)),
    ],
    graphs=1,
)

CASES: dict[str, Case] = {case.name: case for case in (RESNET, VIT, BERT, T5, GPT2_NO_CACHE, GPT2_CACHE)}
