"""Every printed example of the execution-graphs guide, reproduced character for character.

Each test runs the guide's code as written (imported from ``aitune_core``) and compares
what it prints with the guide's output. The guide drops blank lines when it shows
output, so blank lines are left out of both sides. Every example starts from the
guide's first snippet, as a reader running the page top to bottom would.
"""

import contextlib
import io

import pytest


def run_and_capture(source: str) -> str:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        exec(compile(source, "<guide>", "exec"), {"__name__": "guide_example"})
    return "\n".join(line for line in buffer.getvalue().split("\n") if line.strip())


GUIDE_SIMPLE_TENSOR_CODE = r"""
from dataclasses import dataclass
import torch
from aitune_core import SampleMetadata, InfoLevel

# Create a simple tensor and capture its metadata
simple_tensor = torch.randn(2, 3, 4)
inputs = {"simple_tensor": simple_tensor}

metadata = SampleMetadata.from_inputs(inputs)
print(repr(metadata))
"""

GUIDE_SIMPLE_TENSOR_OUTPUT = """\
Tensors:
╒═══════════════╤═════════════════╤═══════════╤═════════════╤═════════════╤═══════════════╕
│ Access Path   │ Semantic Path   │ Shape     │ Min Shape   │ Max Shape   │ Dtype         │
╞═══════════════╪═════════════════╪═══════════╪═════════════╪═════════════╪═══════════════╡
│ simple_tensor │ simple_tensor   │ [2, 3, 4] │ [2, 3, 4]   │ [2, 3, 4]   │ torch.float32 │
╘═══════════════╧═════════════════╧═══════════╧═════════════╧═════════════╧═══════════════╛"""

GUIDE_MULTIPLE_PARAMETERS_CODE = r"""
from dataclasses import dataclass
import torch
from aitune_core import SampleMetadata, InfoLevel

# Create a simple tensor and capture its metadata
simple_tensor = torch.randn(2, 3, 4)
inputs = {"simple_tensor": simple_tensor}

metadata = SampleMetadata.from_inputs(inputs)
print(repr(metadata))

# Example 1: Multiple tensor parameters
inputs = {
    "first": torch.randn(2, 3),
    "second": torch.randn(4, 5),
}

meta1 = SampleMetadata.from_inputs(inputs)
print("Example 1 - Multiple parameters:")
print(repr(meta1))
"""

GUIDE_MULTIPLE_PARAMETERS_OUTPUT = """\
Tensors:
╒═══════════════╤═════════════════╤═══════════╤═════════════╤═════════════╤═══════════════╕
│ Access Path   │ Semantic Path   │ Shape     │ Min Shape   │ Max Shape   │ Dtype         │
╞═══════════════╪═════════════════╪═══════════╪═════════════╪═════════════╪═══════════════╡
│ simple_tensor │ simple_tensor   │ [2, 3, 4] │ [2, 3, 4]   │ [2, 3, 4]   │ torch.float32 │
╘═══════════════╧═════════════════╧═══════════╧═════════════╧═════════════╧═══════════════╛
Example 1 - Multiple parameters:
Tensors:
╒═══════════════╤═════════════════╤═════════╤═════════════╤═════════════╤═══════════════╕
│ Access Path   │ Semantic Path   │ Shape   │ Min Shape   │ Max Shape   │ Dtype         │
╞═══════════════╪═════════════════╪═════════╪═════════════╪═════════════╪═══════════════╡
│ first         │ first           │ [2, 3]  │ [2, 3]      │ [2, 3]      │ torch.float32 │
├───────────────┼─────────────────┼─────────┼─────────────┼─────────────┼───────────────┤
│ second        │ second          │ [4, 5]  │ [4, 5]      │ [4, 5]      │ torch.float32 │
╘═══════════════╧═════════════════╧═════════╧═════════════╧═════════════╧═══════════════╛"""

GUIDE_MIXED_TYPES_NON_STRICT_CODE = r"""
from dataclasses import dataclass
import torch
from aitune_core import SampleMetadata, InfoLevel

# Create a simple tensor and capture its metadata
simple_tensor = torch.randn(2, 3, 4)
inputs = {"simple_tensor": simple_tensor}

metadata = SampleMetadata.from_inputs(inputs)
print(repr(metadata))

# Example 2: Mixed primitives and tensors
inputs = {
    "label": "some_string",       # Primitive - ignored by default
    "tensor": torch.randn(2, 2),   # Tensor - tracked
    "steps": 42,                   # Primitive - ignored by default
    "data": torch.randn(3, 3),
    "learning_rate": 0.001,        # Primitive - ignored by default
}

meta2 = SampleMetadata.from_inputs(inputs)
print("Example 2 - Mixed types (strict=False):")
print(repr(meta2))
print("\nNotice that only tensors are tracked!")
"""

GUIDE_MIXED_TYPES_NON_STRICT_OUTPUT = """\
Tensors:
╒═══════════════╤═════════════════╤═══════════╤═════════════╤═════════════╤═══════════════╕
│ Access Path   │ Semantic Path   │ Shape     │ Min Shape   │ Max Shape   │ Dtype         │
╞═══════════════╪═════════════════╪═══════════╪═════════════╪═════════════╪═══════════════╡
│ simple_tensor │ simple_tensor   │ [2, 3, 4] │ [2, 3, 4]   │ [2, 3, 4]   │ torch.float32 │
╘═══════════════╧═════════════════╧═══════════╧═════════════╧═════════════╧═══════════════╛
Example 2 - Mixed types (strict=False):
Tensors:
╒═══════════════╤═════════════════╤═════════╤═════════════╤═════════════╤═══════════════╕
│ Access Path   │ Semantic Path   │ Shape   │ Min Shape   │ Max Shape   │ Dtype         │
╞═══════════════╪═════════════════╪═════════╪═════════════╪═════════════╪═══════════════╡
│ tensor        │ tensor          │ [2, 2]  │ [2, 2]      │ [2, 2]      │ torch.float32 │
├───────────────┼─────────────────┼─────────┼─────────────┼─────────────┼───────────────┤
│ data          │ data            │ [3, 3]  │ [3, 3]      │ [3, 3]      │ torch.float32 │
╘═══════════════╧═════════════════╧═════════╧═════════════╧═════════════╧═══════════════╛
Notice that only tensors are tracked!"""

GUIDE_STRICT_VS_NON_STRICT_CODE = r"""
from dataclasses import dataclass
import torch
from aitune_core import SampleMetadata, InfoLevel

# Create a simple tensor and capture its metadata
simple_tensor = torch.randn(2, 3, 4)
inputs = {"simple_tensor": simple_tensor}

metadata = SampleMetadata.from_inputs(inputs)
print(repr(metadata))

# Same inputs, different modes
inputs = {
    "values": (1, 2, 3, torch.randn(2, 2)),
    "t": torch.randn(2, 3),
    "other": "abc",
}

# Non-strict mode (default)
meta_non_strict = SampleMetadata.from_inputs(inputs, strict=False)
print("Non-Strict Mode (strict=False):")
print(repr(meta_non_strict))
print("\n" + "="*80 + "\n")

# Strict mode
meta_strict = SampleMetadata.from_inputs(inputs, strict=True)
print("Strict Mode (strict=True):")
print(repr(meta_strict))
"""

GUIDE_STRICT_VS_NON_STRICT_OUTPUT = """\
Tensors:
╒═══════════════╤═════════════════╤═══════════╤═════════════╤═════════════╤═══════════════╕
│ Access Path   │ Semantic Path   │ Shape     │ Min Shape   │ Max Shape   │ Dtype         │
╞═══════════════╪═════════════════╪═══════════╪═════════════╪═════════════╪═══════════════╡
│ simple_tensor │ simple_tensor   │ [2, 3, 4] │ [2, 3, 4]   │ [2, 3, 4]   │ torch.float32 │
╘═══════════════╧═════════════════╧═══════════╧═════════════╧═════════════╧═══════════════╛
Non-Strict Mode (strict=False):
Tensors:
╒═══════════════╤═════════════════╤═════════╤═════════════╤═════════════╤═══════════════╕
│ Access Path   │ Semantic Path   │ Shape   │ Min Shape   │ Max Shape   │ Dtype         │
╞═══════════════╪═════════════════╪═════════╪═════════════╪═════════════╪═══════════════╡
│ values[3]     │ ('values', 3)   │ [2, 2]  │ [2, 2]      │ [2, 2]      │ torch.float32 │
├───────────────┼─────────────────┼─────────┼─────────────┼─────────────┼───────────────┤
│ t             │ t               │ [2, 3]  │ [2, 3]      │ [2, 3]      │ torch.float32 │
╘═══════════════╧═════════════════╧═════════╧═════════════╧═════════════╧═══════════════╛
================================================================================
Strict Mode (strict=True):
Tensors:
╒═══════════════╤═════════════════╤═════════╤═════════════╤═════════════╤═══════════════╕
│ Access Path   │ Semantic Path   │ Shape   │ Min Shape   │ Max Shape   │ Dtype         │
╞═══════════════╪═════════════════╪═════════╪═════════════╪═════════════╪═══════════════╡
│ values[3]     │ ('values', 3)   │ [2, 2]  │ [2, 2]      │ [2, 2]      │ torch.float32 │
├───────────────┼─────────────────┼─────────┼─────────────┼─────────────┼───────────────┤
│ t             │ t               │ [2, 3]  │ [2, 3]      │ [2, 3]      │ torch.float32 │
╘═══════════════╧═════════════════╧═════════╧═════════════╧═════════════╧═══════════════╛
Other:
╒═══════════════╤═════════════════╤═════════╕
│ Access Path   │ Semantic Path   │ Value   │
╞═══════════════╪═════════════════╪═════════╡
│ values[0]     │ ('values', 0)   │ 1       │
├───────────────┼─────────────────┼─────────┤
│ values[1]     │ ('values', 1)   │ 2       │
├───────────────┼─────────────────┼─────────┤
│ values[2]     │ ('values', 2)   │ 3       │
├───────────────┼─────────────────┼─────────┤
│ other         │ other           │ abc     │
╘═══════════════╧═════════════════╧═════════╛"""

GUIDE_NESTED_STRUCTURES_CODE = r"""
from dataclasses import dataclass
import torch
from aitune_core import SampleMetadata, InfoLevel

# Create a simple tensor and capture its metadata
simple_tensor = torch.randn(2, 3, 4)
inputs = {"simple_tensor": simple_tensor}

metadata = SampleMetadata.from_inputs(inputs)
print(repr(metadata))

# Define a custom dataclass
@dataclass
class ModelInput:
    data: torch.Tensor
    metadata: str

# Create complex nested structure keyed by forward parameter name
inputs = {
    "values": [
        "first_arg",
        torch.randn(1),                                      # Simple tensor
        (torch.randn(2), torch.randn(3)),                    # Tuple of tensors
        {"t": torch.randn(4)},                              # Dict with tensor
        ModelInput(data=torch.randn(5), metadata="info"),   # Dataclass with tensor
    ],
    "t1": torch.randn(1, 1),
    "t2": [torch.randn(2, 2), torch.randn(3, 3)],        # List of tensors
    "t3": ModelInput(data=torch.randn(4, 4), metadata="xyz"),
    "last": "other",
}

nested_meta = SampleMetadata.from_inputs(inputs, strict=True)
print(repr(nested_meta))
"""

GUIDE_NESTED_STRUCTURES_OUTPUT = """\
Tensors:
╒═══════════════╤═════════════════╤═══════════╤═════════════╤═════════════╤═══════════════╕
│ Access Path   │ Semantic Path   │ Shape     │ Min Shape   │ Max Shape   │ Dtype         │
╞═══════════════╪═════════════════╪═══════════╪═════════════╪═════════════╪═══════════════╡
│ simple_tensor │ simple_tensor   │ [2, 3, 4] │ [2, 3, 4]   │ [2, 3, 4]   │ torch.float32 │
╘═══════════════╧═════════════════╧═══════════╧═════════════╧═════════════╧═══════════════╛
Tensors:
╒════════════════╤═══════════════════════╤═════════╤═════════════╤═════════════╤═══════════════╕
│ Access Path    │ Semantic Path         │ Shape   │ Min Shape   │ Max Shape   │ Dtype         │
╞════════════════╪═══════════════════════╪═════════╪═════════════╪═════════════╪═══════════════╡
│ values[1]      │ ('values', 1)         │ [1]     │ [1]         │ [1]         │ torch.float32 │
├────────────────┼───────────────────────┼─────────┼─────────────┼─────────────┼───────────────┤
│ values[2][0]   │ ('values', 2, 0)      │ [2]     │ [2]         │ [2]         │ torch.float32 │
├────────────────┼───────────────────────┼─────────┼─────────────┼─────────────┼───────────────┤
│ values[2][1]   │ ('values', 2, 1)      │ [3]     │ [3]         │ [3]         │ torch.float32 │
├────────────────┼───────────────────────┼─────────┼─────────────┼─────────────┼───────────────┤
│ values[3]["t"] │ ('values', 3, 't')    │ [4]     │ [4]         │ [4]         │ torch.float32 │
├────────────────┼───────────────────────┼─────────┼─────────────┼─────────────┼───────────────┤
│ values[4].data │ ('values', 4, 'data') │ [5]     │ [5]         │ [5]         │ torch.float32 │
├────────────────┼───────────────────────┼─────────┼─────────────┼─────────────┼───────────────┤
│ t1             │ t1                    │ [1, 1]  │ [1, 1]      │ [1, 1]      │ torch.float32 │
├────────────────┼───────────────────────┼─────────┼─────────────┼─────────────┼───────────────┤
│ t2[0]          │ ('t2', 0)             │ [2, 2]  │ [2, 2]      │ [2, 2]      │ torch.float32 │
├────────────────┼───────────────────────┼─────────┼─────────────┼─────────────┼───────────────┤
│ t2[1]          │ ('t2', 1)             │ [3, 3]  │ [3, 3]      │ [3, 3]      │ torch.float32 │
├────────────────┼───────────────────────┼─────────┼─────────────┼─────────────┼───────────────┤
│ t3.data        │ ('t3', 'data')        │ [4, 4]  │ [4, 4]      │ [4, 4]      │ torch.float32 │
╘════════════════╧═══════════════════════╧═════════╧═════════════╧═════════════╧═══════════════╛
Other:
╒════════════════════╤═══════════════════════════╤═══════════╕
│ Access Path        │ Semantic Path             │ Value     │
╞════════════════════╪═══════════════════════════╪═══════════╡
│ values[0]          │ ('values', 0)             │ first_arg │
├────────────────────┼───────────────────────────┼───────────┤
│ values[4].metadata │ ('values', 4, 'metadata') │ info      │
├────────────────────┼───────────────────────────┼───────────┤
│ t3.metadata        │ ('t3', 'metadata')        │ xyz       │
├────────────────────┼───────────────────────────┼───────────┤
│ last               │ last                      │ other     │
╘════════════════════╧═══════════════════════════╧═══════════╛"""

GUIDE_INFO_LEVELS_CODE = r"""
from dataclasses import dataclass
import torch
from aitune_core import SampleMetadata, InfoLevel

# Create a simple tensor and capture its metadata
simple_tensor = torch.randn(2, 3, 4)
inputs = {"simple_tensor": simple_tensor}

metadata = SampleMetadata.from_inputs(inputs)
print(repr(metadata))

# Create sample metadata
inputs = {
    "first": torch.randn(2, 3),
    "second": torch.randn(4, 5, 6),
    "mask": torch.randn(2, 1),
}
meta = SampleMetadata.from_inputs(inputs)

print("InfoLevel.SHORT:")
print(meta.describe(InfoLevel.SHORT))
print("\n" + "="*80 + "\n")

print("InfoLevel.MEDIUM:")
print(meta.describe(InfoLevel.MEDIUM))
print("\n" + "="*80 + "\n")

print("InfoLevel.FULL:")
print(meta.describe(InfoLevel.FULL))
"""

GUIDE_INFO_LEVELS_OUTPUT = """\
Tensors:
╒═══════════════╤═════════════════╤═══════════╤═════════════╤═════════════╤═══════════════╕
│ Access Path   │ Semantic Path   │ Shape     │ Min Shape   │ Max Shape   │ Dtype         │
╞═══════════════╪═════════════════╪═══════════╪═════════════╪═════════════╪═══════════════╡
│ simple_tensor │ simple_tensor   │ [2, 3, 4] │ [2, 3, 4]   │ [2, 3, 4]   │ torch.float32 │
╘═══════════════╧═════════════════╧═══════════╧═════════════╧═════════════╧═══════════════╛
InfoLevel.SHORT:
Tensors: first, second, mask
================================================================================
InfoLevel.MEDIUM:
Tensors:
Access Path    Semantic Path    Shape
-------------  ---------------  ---------
first          first            [2, 3]
second         second           [4, 5, 6]
mask           mask             [2, 1]
================================================================================
InfoLevel.FULL:
Tensors:
╒═══════════════╤═════════════════╤═══════════╤═════════════╤═════════════╤═══════════════╕
│ Access Path   │ Semantic Path   │ Shape     │ Min Shape   │ Max Shape   │ Dtype         │
╞═══════════════╪═════════════════╪═══════════╪═════════════╪═════════════╪═══════════════╡
│ first         │ first           │ [2, 3]    │ [2, 3]      │ [2, 3]      │ torch.float32 │
├───────────────┼─────────────────┼───────────┼─────────────┼─────────────┼───────────────┤
│ second        │ second          │ [4, 5, 6] │ [4, 5, 6]   │ [4, 5, 6]   │ torch.float32 │
├───────────────┼─────────────────┼───────────┼─────────────┼─────────────┼───────────────┤
│ mask          │ mask            │ [2, 1]    │ [2, 1]      │ [2, 1]      │ torch.float32 │
╘═══════════════╧═════════════════╧═══════════╧═════════════╧═════════════╧═══════════════╛"""

GUIDE_DYNAMIC_SHAPE_TRACKING_CODE = r"""
from dataclasses import dataclass
import torch
from aitune_core import SampleMetadata, InfoLevel

# Create a simple tensor and capture its metadata
simple_tensor = torch.randn(2, 3, 4)
inputs = {"simple_tensor": simple_tensor}

metadata = SampleMetadata.from_inputs(inputs)
print(repr(metadata))

# Create initial metadata with batch size 1
inputs_initial = {
    "first": torch.randn(1),
    "second": torch.randn(2),
    "third": torch.randn(5),
    "data": torch.randn(1, 10),  # First dim batch, second dynamic
}

meta_initial = SampleMetadata.from_inputs(inputs_initial, strict=False, batch_size=1)
print("Initial Metadata (batch_size=1):")
print(meta_initial.describe(InfoLevel.FULL))

# Create second metadata with different shapes and batch size 2
inputs_second = {
    "first": torch.randn(2),   # Doubled (batch axis)
    "second": torch.randn(5),  # Changed but not proportionally (dynamic)
    "third": torch.randn(15),  # Changed but not proportionally (dynamic)
    "data": torch.randn(2, 25),  # First dim doubled, second changed
}

meta_second = SampleMetadata.from_inputs(inputs_second, strict=False, batch_size=2)
print("Second Metadata (batch_size=2):")
print(meta_second.describe(InfoLevel.FULL))

# Update the initial metadata with information from the second sample
meta_initial.update_shapes_seen(meta_second)
print("Updated Metadata (after seeing both samples):")
print(meta_initial.describe(InfoLevel.FULL))
"""

GUIDE_DYNAMIC_SHAPE_TRACKING_OUTPUT = """\
Tensors:
╒═══════════════╤═════════════════╤═══════════╤═════════════╤═════════════╤═══════════════╕
│ Access Path   │ Semantic Path   │ Shape     │ Min Shape   │ Max Shape   │ Dtype         │
╞═══════════════╪═════════════════╪═══════════╪═════════════╪═════════════╪═══════════════╡
│ simple_tensor │ simple_tensor   │ [2, 3, 4] │ [2, 3, 4]   │ [2, 3, 4]   │ torch.float32 │
╘═══════════════╧═════════════════╧═══════════╧═════════════╧═════════════╧═══════════════╛
Initial Metadata (batch_size=1):
Tensors:
╒═══════════════╤═════════════════╤═════════╤═════════════╤═════════════╤═══════════════╕
│ Access Path   │ Semantic Path   │ Shape   │ Min Shape   │ Max Shape   │ Dtype         │
╞═══════════════╪═════════════════╪═════════╪═════════════╪═════════════╪═══════════════╡
│ first         │ first           │ [1]     │ [1]         │ [1]         │ torch.float32 │
├───────────────┼─────────────────┼─────────┼─────────────┼─────────────┼───────────────┤
│ second        │ second          │ [2]     │ [2]         │ [2]         │ torch.float32 │
├───────────────┼─────────────────┼─────────┼─────────────┼─────────────┼───────────────┤
│ third         │ third           │ [5]     │ [5]         │ [5]         │ torch.float32 │
├───────────────┼─────────────────┼─────────┼─────────────┼─────────────┼───────────────┤
│ data          │ data            │ [1, 10] │ [1, 10]     │ [1, 10]     │ torch.float32 │
╘═══════════════╧═════════════════╧═════════╧═════════════╧═════════════╧═══════════════╛
Second Metadata (batch_size=2):
Tensors:
╒═══════════════╤═════════════════╤═════════╤═════════════╤═════════════╤═══════════════╕
│ Access Path   │ Semantic Path   │ Shape   │ Min Shape   │ Max Shape   │ Dtype         │
╞═══════════════╪═════════════════╪═════════╪═════════════╪═════════════╪═══════════════╡
│ first         │ first           │ [2]     │ [2]         │ [2]         │ torch.float32 │
├───────────────┼─────────────────┼─────────┼─────────────┼─────────────┼───────────────┤
│ second        │ second          │ [5]     │ [5]         │ [5]         │ torch.float32 │
├───────────────┼─────────────────┼─────────┼─────────────┼─────────────┼───────────────┤
│ third         │ third           │ [15]    │ [15]        │ [15]        │ torch.float32 │
├───────────────┼─────────────────┼─────────┼─────────────┼─────────────┼───────────────┤
│ data          │ data            │ [2, 25] │ [2, 25]     │ [2, 25]     │ torch.float32 │
╘═══════════════╧═════════════════╧═════════╧═════════════╧═════════════╧═══════════════╛
Updated Metadata (after seeing both samples):
Tensors:
╒═══════════════╤═════════════════╤════════════════════╤═════════════╤═════════════╤═══════════════╕
│ Access Path   │ Semantic Path   │ Shape              │ Min Shape   │ Max Shape   │ Dtype         │
╞═══════════════╪═════════════════╪════════════════════╪═════════════╪═════════════╪═══════════════╡
│ first         │ first           │ ['batch0']         │ [1]         │ [2]         │ torch.float32 │
├───────────────┼─────────────────┼────────────────────┼─────────────┼─────────────┼───────────────┤
│ second        │ second          │ ['dim0']           │ [2]         │ [5]         │ torch.float32 │
├───────────────┼─────────────────┼────────────────────┼─────────────┼─────────────┼───────────────┤
│ third         │ third           │ ['dim0']           │ [5]         │ [15]        │ torch.float32 │
├───────────────┼─────────────────┼────────────────────┼─────────────┼─────────────┼───────────────┤
│ data          │ data            │ ['batch0', 'dim1'] │ [1, 10]     │ [2, 25]     │ torch.float32 │
╘═══════════════╧═════════════════╧════════════════════╧═════════════╧═════════════╧═══════════════╛"""

GUIDE_MAKE_BATCH_CODE = r"""
from dataclasses import dataclass
import torch
from aitune_core import SampleMetadata, InfoLevel

# Create a simple tensor and capture its metadata
simple_tensor = torch.randn(2, 3, 4)
inputs = {"simple_tensor": simple_tensor}

metadata = SampleMetadata.from_inputs(inputs)
print(repr(metadata))

# First, create metadata and teach it about batch axes
inputs1 = {
    "features": torch.randn(1, 5),
    "stacked": torch.randn(2, 3),
    "mask": torch.randn(1, 10),
}

meta = SampleMetadata.from_inputs(inputs1, batch_size=1)

# Second sample with batch size 2
inputs2 = {
    "features": torch.randn(2, 5),
    "stacked": torch.randn(4, 3),
    "mask": torch.randn(2, 10),
}

meta2 = SampleMetadata.from_inputs(inputs2, batch_size=2)
meta.update_shapes_seen(meta2)

print("Learned Metadata:")
print(meta.describe(InfoLevel.FULL))

# Now use make_batch to scale to a larger batch size
original_inputs = {
    "features": torch.randn(1, 5),
    "stacked": torch.randn(2, 3),
    "mask": torch.randn(1, 10),
}

print("Original shapes:")
print(f"  features: {original_inputs['features'].shape}")
print(f"  stacked: {original_inputs['stacked'].shape}")
print(f"  mask: {original_inputs['mask'].shape}")
print()

# Scale to batch size 10
batched_inputs = meta.make_batch(original_inputs, batch_size=10)

print("After make_batch(batch_size=10):")
print(f"  features: {batched_inputs['features'].shape}")
print(f"  stacked: {batched_inputs['stacked'].shape}")
print(f"  mask: {batched_inputs['mask'].shape}")
"""

GUIDE_MAKE_BATCH_OUTPUT = """\
Tensors:
╒═══════════════╤═════════════════╤═══════════╤═════════════╤═════════════╤═══════════════╕
│ Access Path   │ Semantic Path   │ Shape     │ Min Shape   │ Max Shape   │ Dtype         │
╞═══════════════╪═════════════════╪═══════════╪═════════════╪═════════════╪═══════════════╡
│ simple_tensor │ simple_tensor   │ [2, 3, 4] │ [2, 3, 4]   │ [2, 3, 4]   │ torch.float32 │
╘═══════════════╧═════════════════╧═══════════╧═════════════╧═════════════╧═══════════════╛
Learned Metadata:
Tensors:
╒═══════════════╤═════════════════╤════════════════╤═════════════╤═════════════╤═══════════════╕
│ Access Path   │ Semantic Path   │ Shape          │ Min Shape   │ Max Shape   │ Dtype         │
╞═══════════════╪═════════════════╪════════════════╪═════════════╪═════════════╪═══════════════╡
│ features      │ features        │ ['batch0', 5]  │ [1, 5]      │ [2, 5]      │ torch.float32 │
├───────────────┼─────────────────┼────────────────┼─────────────┼─────────────┼───────────────┤
│ stacked       │ stacked         │ ['batch0', 3]  │ [2, 3]      │ [4, 3]      │ torch.float32 │
├───────────────┼─────────────────┼────────────────┼─────────────┼─────────────┼───────────────┤
│ mask          │ mask            │ ['batch0', 10] │ [1, 10]     │ [2, 10]     │ torch.float32 │
╘═══════════════╧═════════════════╧════════════════╧═════════════╧═════════════╧═══════════════╛
Original shapes:
  features: torch.Size([1, 5])
  stacked: torch.Size([2, 3])
  mask: torch.Size([1, 10])
After make_batch(batch_size=10):
  features: torch.Size([10, 5])
  stacked: torch.Size([20, 3])
  mask: torch.Size([10, 10])"""

GUIDE_TENSOR_SPEC_OBJECTS_CODE = r"""
from dataclasses import dataclass
import torch
from aitune_core import SampleMetadata, InfoLevel

# Create a simple tensor and capture its metadata
simple_tensor = torch.randn(2, 3, 4)
inputs = {"simple_tensor": simple_tensor}

metadata = SampleMetadata.from_inputs(inputs)
print(repr(metadata))

# Create metadata with dynamic shapes
inputs1 = {"features": torch.randn(1, 5), "data": torch.randn(1, 10)}
meta = SampleMetadata.from_inputs(inputs1, batch_size=1)

inputs2 = {"features": torch.randn(2, 5), "data": torch.randn(2, 20)}
meta2 = SampleMetadata.from_inputs(inputs2, batch_size=2)
meta.update_shapes_seen(meta2)

# Access individual TensorSpec objects
print("Individual TensorSpec objects:\n")
for locator, tensor_spec in meta.tensor_data:
    print(f"Path: {locator.display_path}")
    print(f"  Shape: {tensor_spec.shape}")
    print(f"  Min Shape: {tensor_spec.min_shape}")
    print(f"  Max Shape: {tensor_spec.max_shape}")
    print(f"  Dtype: {tensor_spec.dtype}")
    print(f"  Has batch axis: {tensor_spec.has_batch_axis()}")
    print(f"  Has dynamic axis: {tensor_spec.has_dynamic_axis()}")
    print(f"  Batch multipliers: {tensor_spec.get_batch_axis_multipliers()}")
"""

GUIDE_TENSOR_SPEC_OBJECTS_OUTPUT = """\
Tensors:
╒═══════════════╤═════════════════╤═══════════╤═════════════╤═════════════╤═══════════════╕
│ Access Path   │ Semantic Path   │ Shape     │ Min Shape   │ Max Shape   │ Dtype         │
╞═══════════════╪═════════════════╪═══════════╪═════════════╪═════════════╪═══════════════╡
│ simple_tensor │ simple_tensor   │ [2, 3, 4] │ [2, 3, 4]   │ [2, 3, 4]   │ torch.float32 │
╘═══════════════╧═════════════════╧═══════════╧═════════════╧═════════════╧═══════════════╛
Individual TensorSpec objects:
Path: features
  Shape: ['batch0', 5]
  Min Shape: [1, 5]
  Max Shape: [2, 5]
  Dtype: torch.float32
  Has batch axis: True
  Has dynamic axis: False
  Batch multipliers: {0: 1}
Path: data
  Shape: ['batch0', 'batch1']
  Min Shape: [1, 10]
  Max Shape: [2, 20]
  Dtype: torch.float32
  Has batch axis: True
  Has dynamic axis: False
  Batch multipliers: {0: 1, 1: 10}"""

GUIDE_VARIABLE_LENGTH_SEQUENCES_CODE = r"""
from dataclasses import dataclass
import torch
from aitune_core import SampleMetadata, InfoLevel

# Create a simple tensor and capture its metadata
simple_tensor = torch.randn(2, 3, 4)
inputs = {"simple_tensor": simple_tensor}

metadata = SampleMetadata.from_inputs(inputs)
print(repr(metadata))

# Simulate model profiling
@dataclass
class ModelInputs:
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor

# Sample 1: batch_size=1, seq_len=10
sample1_inputs = {
    "inputs": ModelInputs(
        input_ids=torch.randint(0, 1000, (1, 10)),
        attention_mask=torch.ones(1, 10),
        position_ids=torch.arange(10).unsqueeze(0),
    )
}

metadata = SampleMetadata.from_inputs(sample1_inputs, batch_size=1, strict=False)
print("After Sample 1 (batch=1, seq_len=10):")
print(metadata.describe(InfoLevel.FULL))

# Sample 2: batch_size=2, seq_len=15
sample2_inputs = {
    "inputs": ModelInputs(
        input_ids=torch.randint(0, 1000, (2, 15)),
        attention_mask=torch.ones(2, 15),
        position_ids=torch.arange(15).unsqueeze(0).repeat(2, 1),
    )
}

metadata2 = SampleMetadata.from_inputs(sample2_inputs, batch_size=2, strict=False)
metadata.update_shapes_seen(metadata2)

print("After Sample 2 (batch=2, seq_len=15):")
print(metadata.describe(InfoLevel.FULL))

# Sample 3: batch_size=4, seq_len=20
sample3_inputs = {
    "inputs": ModelInputs(
        input_ids=torch.randint(0, 1000, (4, 20)),
        attention_mask=torch.ones(4, 20),
        position_ids=torch.arange(20).unsqueeze(0).repeat(4, 1),
    )
}

metadata3 = SampleMetadata.from_inputs(sample3_inputs, batch_size=4, strict=False)
metadata.update_shapes_seen(metadata3)

print("After Sample 3 (batch=4, seq_len=20):")
print(metadata.describe(InfoLevel.FULL))

# Now we can create inputs for any batch size!
test_inputs = {
    "inputs": ModelInputs(
        input_ids=torch.randint(0, 1000, (2, 12)),
        attention_mask=torch.ones(2, 12),
        position_ids=torch.arange(12).unsqueeze(0).repeat(2, 1),
    )
}

print("Original test input shapes:")
print(f"  input_ids: {test_inputs['inputs'].input_ids.shape}")
print(f"  attention_mask: {test_inputs['inputs'].attention_mask.shape}")
print(f"  position_ids: {test_inputs['inputs'].position_ids.shape}")
print()

# Scale to batch size 8
scaled_inputs = metadata.make_batch(test_inputs, batch_size=8)

print("After scaling to batch_size=8:")
print(f"  input_ids: {scaled_inputs['inputs'].input_ids.shape}")
print(f"  attention_mask: {scaled_inputs['inputs'].attention_mask.shape}")
print(f"  position_ids: {scaled_inputs['inputs'].position_ids.shape}")
print("\nNote: Batch dimension scaled to 8, but sequence length (dim1) remained at 12")
"""

GUIDE_VARIABLE_LENGTH_SEQUENCES_OUTPUT = """\
Tensors:
╒═══════════════╤═════════════════╤═══════════╤═════════════╤═════════════╤═══════════════╕
│ Access Path   │ Semantic Path   │ Shape     │ Min Shape   │ Max Shape   │ Dtype         │
╞═══════════════╪═════════════════╪═══════════╪═════════════╪═════════════╪═══════════════╡
│ simple_tensor │ simple_tensor   │ [2, 3, 4] │ [2, 3, 4]   │ [2, 3, 4]   │ torch.float32 │
╘═══════════════╧═════════════════╧═══════════╧═════════════╧═════════════╧═══════════════╛
After Sample 1 (batch=1, seq_len=10):
Tensors:
╒═══════════════════════╤══════════════════════════════╤═════════╤═════════════╤═════════════╤═══════════════╕
│ Access Path           │ Semantic Path                │ Shape   │ Min Shape   │ Max Shape   │ Dtype         │
╞═══════════════════════╪══════════════════════════════╪═════════╪═════════════╪═════════════╪═══════════════╡
│ inputs.input_ids      │ ('inputs', 'input_ids')      │ [1, 10] │ [1, 10]     │ [1, 10]     │ torch.int64   │
├───────────────────────┼──────────────────────────────┼─────────┼─────────────┼─────────────┼───────────────┤
│ inputs.attention_mask │ ('inputs', 'attention_mask') │ [1, 10] │ [1, 10]     │ [1, 10]     │ torch.float32 │
├───────────────────────┼──────────────────────────────┼─────────┼─────────────┼─────────────┼───────────────┤
│ inputs.position_ids   │ ('inputs', 'position_ids')   │ [1, 10] │ [1, 10]     │ [1, 10]     │ torch.int64   │
╘═══════════════════════╧══════════════════════════════╧═════════╧═════════════╧═════════════╧═══════════════╛
After Sample 2 (batch=2, seq_len=15):
Tensors:
╒═══════════════════════╤══════════════════════════════╤════════════════════╤═════════════╤═════════════╤═══════════════╕
│ Access Path           │ Semantic Path                │ Shape              │ Min Shape   │ Max Shape   │ Dtype         │
╞═══════════════════════╪══════════════════════════════╪════════════════════╪═════════════╪═════════════╪═══════════════╡
│ inputs.input_ids      │ ('inputs', 'input_ids')      │ ['batch0', 'dim1'] │ [1, 10]     │ [2, 15]     │ torch.int64   │
├───────────────────────┼──────────────────────────────┼────────────────────┼─────────────┼─────────────┼───────────────┤
│ inputs.attention_mask │ ('inputs', 'attention_mask') │ ['batch0', 'dim1'] │ [1, 10]     │ [2, 15]     │ torch.float32 │
├───────────────────────┼──────────────────────────────┼────────────────────┼─────────────┼─────────────┼───────────────┤
│ inputs.position_ids   │ ('inputs', 'position_ids')   │ ['batch0', 'dim1'] │ [1, 10]     │ [2, 15]     │ torch.int64   │
╘═══════════════════════╧══════════════════════════════╧════════════════════╧═════════════╧═════════════╧═══════════════╛
After Sample 3 (batch=4, seq_len=20):
Tensors:
╒═══════════════════════╤══════════════════════════════╤════════════════════╤═════════════╤═════════════╤═══════════════╕
│ Access Path           │ Semantic Path                │ Shape              │ Min Shape   │ Max Shape   │ Dtype         │
╞═══════════════════════╪══════════════════════════════╪════════════════════╪═════════════╪═════════════╪═══════════════╡
│ inputs.input_ids      │ ('inputs', 'input_ids')      │ ['batch0', 'dim1'] │ [1, 10]     │ [4, 20]     │ torch.int64   │
├───────────────────────┼──────────────────────────────┼────────────────────┼─────────────┼─────────────┼───────────────┤
│ inputs.attention_mask │ ('inputs', 'attention_mask') │ ['batch0', 'dim1'] │ [1, 10]     │ [4, 20]     │ torch.float32 │
├───────────────────────┼──────────────────────────────┼────────────────────┼─────────────┼─────────────┼───────────────┤
│ inputs.position_ids   │ ('inputs', 'position_ids')   │ ['batch0', 'dim1'] │ [1, 10]     │ [4, 20]     │ torch.int64   │
╘═══════════════════════╧══════════════════════════════╧════════════════════╧═════════════╧═════════════╧═══════════════╛
Original test input shapes:
  input_ids: torch.Size([2, 12])
  attention_mask: torch.Size([2, 12])
  position_ids: torch.Size([2, 12])
After scaling to batch_size=8:
  input_ids: torch.Size([8, 12])
  attention_mask: torch.Size([8, 12])
  position_ids: torch.Size([8, 12])
Note: Batch dimension scaled to 8, but sequence length (dim1) remained at 12"""


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        pytest.param(GUIDE_SIMPLE_TENSOR_CODE, GUIDE_SIMPLE_TENSOR_OUTPUT, id="simple_tensor"),
        pytest.param(GUIDE_MULTIPLE_PARAMETERS_CODE, GUIDE_MULTIPLE_PARAMETERS_OUTPUT, id="multiple_parameters"),
        pytest.param(
            GUIDE_MIXED_TYPES_NON_STRICT_CODE, GUIDE_MIXED_TYPES_NON_STRICT_OUTPUT, id="mixed_types_non_strict"
        ),
        pytest.param(GUIDE_STRICT_VS_NON_STRICT_CODE, GUIDE_STRICT_VS_NON_STRICT_OUTPUT, id="strict_vs_non_strict"),
        pytest.param(GUIDE_NESTED_STRUCTURES_CODE, GUIDE_NESTED_STRUCTURES_OUTPUT, id="nested_structures"),
        pytest.param(GUIDE_INFO_LEVELS_CODE, GUIDE_INFO_LEVELS_OUTPUT, id="info_levels"),
        pytest.param(
            GUIDE_DYNAMIC_SHAPE_TRACKING_CODE, GUIDE_DYNAMIC_SHAPE_TRACKING_OUTPUT, id="dynamic_shape_tracking"
        ),
        pytest.param(GUIDE_MAKE_BATCH_CODE, GUIDE_MAKE_BATCH_OUTPUT, id="make_batch"),
        pytest.param(GUIDE_TENSOR_SPEC_OBJECTS_CODE, GUIDE_TENSOR_SPEC_OBJECTS_OUTPUT, id="tensor_spec_objects"),
        pytest.param(
            GUIDE_VARIABLE_LENGTH_SEQUENCES_CODE, GUIDE_VARIABLE_LENGTH_SEQUENCES_OUTPUT, id="variable_length_sequences"
        ),
    ],
)
def test_guide_example_prints_exactly(code: str, expected: str) -> None:
    assert run_and_capture(code) == expected
