"""`meta_device()`: a model built for a checkpoint's weights skips its initialisers, nothing else."""

import subprocess
import sys

import torch

from hotloop.models.meta_init import meta_device


def test_meta_device_builds_the_same_shapes_and_keeps_non_init_operations():
    with meta_device():
        embed = torch.nn.Embedding(10, 4)
        linear = torch.nn.Linear(3, 5)
        frozen = torch.nn.Parameter(torch.empty(2, 3))
        torch.nn.init.trunc_normal_(frozen)
        frozen.requires_grad_(False)  # not an initialiser: still applied
        grown = torch.empty(2).unsqueeze_(0)  # shape-changing in-place ops are not skipped
    assert embed.weight.is_meta and tuple(embed.weight.shape) == (10, 4)
    assert linear.weight.is_meta and tuple(linear.weight.shape) == (5, 3) and tuple(linear.bias.shape) == (5,)
    assert frozen.is_meta and not frozen.requires_grad and tuple(grown.shape) == (1, 2)
    plain = torch.empty(3)  # outside: initialisers act again
    torch.nn.init.ones_(plain)
    assert plain.tolist() == [1.0, 1.0, 1.0]


def test_building_on_meta_does_not_import_torch_dynamo():
    # Meta `normal_` goes through torch._refs, whose first call imports torch._dynamo (seconds of every
    # evaluation worker's start); in a fresh interpreter, so that nothing else has imported it yet.
    code = (
        "import sys, torch\n"
        "from hotloop.models.meta_init import meta_device\n"
        "with meta_device():\n"
        "    torch.nn.Embedding(10, 4)\n"
        "assert 'torch._dynamo' not in sys.modules\n"
        "with torch.device('meta'):\n"
        "    torch.nn.Embedding(10, 4)\n"
        "assert 'torch._dynamo' in sys.modules  # the control: plain meta does import it\n"
    )
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr[-2000:]
