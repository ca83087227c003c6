"""Tiny models for testing backends, each with the calls it is recorded with.

Each model stands for one thing a backend must handle: plain layers (:class:`TinyMLP`,
and :class:`SmallMLP`, wide enough for quantized kernels to matter), convolutions with
batch norm and pooling on images (:class:`TinyCNN`), a dynamic axis
beside the batch axis (:class:`Tagger`, :class:`KeywordsAndDynamicAxis`), nested
containers in and out with a non-tensor argument (:class:`Nested`), and an output whose
size depends on the data (:class:`Positive`), and a real transformer's weights
(:class:`TinyBertClassifier`, which needs transformers). A ``*_call(batch)`` function
gives one call's ``(args, kwargs)`` at a batch size, as
:func:`aitune_core.testing.recording.record` takes them. They are small enough that
exporting or compiling one takes about a second on a two-core CPU.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

Call = tuple[tuple[Any, ...], dict[str, Any]]
"""One call of a model: positional and keyword arguments."""


class TinyMLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(8, 16)
        self.down = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def mlp_call(batch: int) -> Call:
    return (torch.randn(batch, 8),), {}


class SmallMLP(torch.nn.Module):
    """Two Linear layers wide enough for per-row int8 kernels to matter."""

    def __init__(self, width: int = 32, hidden: int = 64) -> None:
        super().__init__()
        self.up = torch.nn.Linear(width, hidden)
        self.act = torch.nn.GELU()
        self.down = torch.nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.act(self.up(x)))


class TinyCNN(torch.nn.Module):
    """Two conv blocks (convolution, batch norm, ReLU, max pooling) and a linear head, on 16x16 RGB images.

    Its batch norm has running statistics that are not the identity, so a backend that
    folds it into the convolution, or drops it, shows in the outputs.
    """

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1),
            torch.nn.BatchNorm2d(8),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(8, 16, 3, padding=1),
            torch.nn.BatchNorm2d(16),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
        )
        self.head = torch.nn.Linear(16 * 4 * 4, classes)
        with torch.no_grad():
            for norm in self.features:
                if isinstance(norm, torch.nn.BatchNorm2d):
                    assert norm.running_mean is not None and norm.running_var is not None
                    norm.running_mean.uniform_(-0.5, 0.5)
                    norm.running_var.uniform_(0.5, 2.0)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(images).flatten(1))


def cnn_call(batch: int) -> Call:
    return (torch.randn(batch, 3, 16, 16),), {}


class Tagger(torch.nn.Module):
    """Token features with a dynamic sequence length next to the batch axis, and a mask."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.proj(tokens)) * mask.unsqueeze(-1)


def tagger_call(batch: int) -> Call:
    """Batch 2, 4 and 8 come with sequence lengths 3, 9 and 5, so the sequence axis is dynamic."""
    length = {2: 3, 4: 9, 8: 5}[batch]
    return (torch.randn(batch, length, 8), (torch.rand(batch, length) > 0.3).float()), {}


class Nested(torch.nn.Module):
    """Tuple and dict inputs, a flag baked in, and nested outputs; ``pairs`` holds two rows per sample."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 4)

    def forward(
        self, values: tuple[torch.Tensor, dict[str, torch.Tensor]], scale: float = 1.0, double: bool = False
    ) -> dict[str, Any]:
        x, extra = values
        hidden = torch.relu(self.proj(x)) * scale
        pairs = extra["pairs"].view(x.shape[0], 2, -1).sum(dim=1)
        if double:
            pairs = pairs * 2
        return {"hidden": hidden, "extra": (pairs, hidden.mean(dim=1)), "tag": "nested"}


def nested_call(batch: int) -> Call:
    return ((torch.randn(batch, 8), {"pairs": torch.randn(2 * batch, 3)}),), {"double": True}


class Positive(torch.nn.Module):
    """Data-dependent output size: the indices of the positive entries."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.nonzero(x > 0), x * 2


def positive_call(batch: int) -> Call:
    return (torch.randn(batch, 5),), {}


class KeywordsAndDynamicAxis(torch.nn.Module):
    """Called with keywords; ``tokens`` also has a dynamic (non-batch) axis."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(6, 6)

    def forward(self, tokens: torch.Tensor, scale: torch.Tensor) -> dict[str, torch.Tensor]:
        hidden = self.proj(tokens) * scale
        return {"hidden": hidden, "pooled": hidden.mean(dim=1)}


class KeywordsAndDynamicAxisCalls:
    """Mixed into a :class:`~aitune_core.testing.BackendConformance` subclass (first among
    its bases): the suite then runs on :class:`KeywordsAndDynamicAxis`, called with
    keywords, its sequence length growing with the batch."""

    batch_sizes: ClassVar[tuple[int, ...]] = (2, 3)

    def make_model(self) -> torch.nn.Module:
        return KeywordsAndDynamicAxis()

    def make_inputs(self, batch_size: int) -> dict[str, torch.Tensor]:
        return {"tokens": torch.randn(batch_size, 3 + batch_size, 6), "scale": torch.rand(batch_size, 1, 1)}


class TinyEncoder(torch.nn.Module):
    """A BERT-style encoder: token and position embeddings, one masked self-attention block.

    Positions go up to ``max_positions``, so sequence lengths far beyond the recorded
    ones are valid calls: what a declared range (``DynamicDim``) is for.
    """

    def __init__(self, vocab: int = 100, width: int = 16, max_positions: int = 1024) -> None:
        super().__init__()
        self.tokens = torch.nn.Embedding(vocab, width)
        self.positions = torch.nn.Embedding(max_positions, width)
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.out = torch.nn.Linear(width, width)
        self.norm = torch.nn.LayerNorm(width)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        hidden = self.tokens(input_ids) + self.positions(positions)
        query, key, value = self.qkv(hidden).chunk(3, dim=-1)
        scores = query @ key.transpose(1, 2) / key.shape[-1] ** 0.5
        scores = scores.masked_fill(attention_mask[:, None, :] == 0, -1e4)
        return self.norm(hidden + self.out(scores.softmax(-1) @ value))


def encoder_call(batch: int, length: int) -> Call:
    """Token ids and a mask whose last quarter is padding."""
    ids = torch.randint(0, 100, (batch, length))
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[:, length - length // 4 :] = 0
    return (), {"input_ids": ids, "attention_mask": mask}


class DecidesOnData(torch.nn.Module):
    """A block that decides in Python on its data (``.item()`` then ``if``): no exporter can take it."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        if y.sum().item() > 0:
            return torch.relu(y)
        return -y


class ThreeBlocks(torch.nn.Module):
    """Two plain blocks around one that decides on its data: what ``tune(..., partition=True)`` is for."""

    def __init__(self, width: int = 16, depth: int = 2) -> None:
        super().__init__()

        def plain() -> torch.nn.Module:
            layers: list[torch.nn.Module] = []
            for _ in range(depth):
                layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
            return torch.nn.Sequential(*layers)

        self.block1 = plain()
        self.block2 = DecidesOnData(width)
        self.block3 = plain()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block3(self.block2(self.block1(x)))


class TinyBertClassifier(torch.nn.Module):
    """A tiny BERT (random weights, nothing from a hub) with a classification head on its first token.

    What refit and adapter tests fine-tune: a real transformer's weights, small enough to
    export in seconds. transformers is imported when one is made, never with this module.
    """

    VOCAB: ClassVar[int] = 64

    def __init__(self) -> None:
        import transformers

        super().__init__()
        config = transformers.BertConfig(
            vocab_size=self.VOCAB,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=32,
        )
        self.bert = transformers.BertModel(config, add_pooling_layer=False)
        self.head = torch.nn.Linear(32, 2)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        hidden: torch.Tensor = self.bert(input_ids=input_ids).last_hidden_state
        return self.head(hidden[:, 0])
