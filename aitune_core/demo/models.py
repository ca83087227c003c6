"""Small models that ship with aitune, for the demo, the benchmarks and backend tests.

They are defined here (nothing is downloaded) and sized so that tuning them on a
two-core CPU takes seconds, while still showing what compilers gain.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


class DemoMLP(nn.Module):
    """512 -> 2048 -> 512 with GELU: matmul-bound, the classic inference block."""

    def __init__(self, width: int = 512, hidden: int = 2048) -> None:
        super().__init__()
        self.up = nn.Linear(width, hidden)
        self.act = nn.GELU()
        self.down = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.act(self.up(x)))


class DemoCNN(nn.Module):
    """A small image classifier: conv blocks with batch norm, ReLU and pooling, 32x32 RGB input."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()

        def block(inputs: int, outputs: int) -> nn.Sequential:
            return nn.Sequential(
                nn.Conv2d(inputs, outputs, 3, padding=1),
                nn.BatchNorm2d(outputs),
                nn.ReLU(),
                nn.Conv2d(outputs, outputs, 3, padding=1),
                nn.BatchNorm2d(outputs),
                nn.ReLU(),
                nn.MaxPool2d(2),
            )

        self.features = nn.Sequential(block(3, 16), block(16, 32), block(32, 64))
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(64 * 4 * 4, 128), nn.ReLU(), nn.Linear(128, classes))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(images))


class DemoTransformer(nn.Module):
    """A two-layer transformer encoder over token ids, with a dynamic sequence length."""

    def __init__(
        self, vocab: int = 1000, width: int = 128, heads: int = 4, layers: int = 2, max_length: int = 128
    ) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(max_length, width)
        layer = nn.TransformerEncoderLayer(width, heads, dim_feedforward=4 * width, batch_first=True, dropout=0.0)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
        hidden = self.tokens(input_ids) + self.positions(positions)
        return self.norm(self.encoder(hidden))


def mlp_samples(count: int = 8) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(512, generator=generator) for _ in range(count)]


def cnn_samples(count: int = 8) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(3, 32, 32, generator=generator) for _ in range(count)]


def transformer_samples(count: int = 8, length: int = 32) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randint(0, 1000, (length,), generator=generator) for _ in range(count)]


DEMO_MODELS: dict[str, tuple[Callable[[], nn.Module], Callable[[], list[torch.Tensor]]]] = {
    "mlp": (DemoMLP, mlp_samples),
    "cnn": (DemoCNN, cnn_samples),
    "transformer": (DemoTransformer, transformer_samples),
}


def build_demo(name: str) -> tuple[nn.Module, list[torch.Tensor]]:
    """A freshly initialised demo model in eval mode, and its unbatched samples."""
    if name not in DEMO_MODELS:
        raise ValueError(f"unknown demo model {name!r}; choose one of: {', '.join(DEMO_MODELS)}")
    torch.manual_seed(0)
    make_model, make_samples = DEMO_MODELS[name]
    return make_model().eval(), make_samples()
