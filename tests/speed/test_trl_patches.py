"""rlft.speed.trl_patches: the process-wide TRL patches (its fused LM head on the CPU, its vocabulary tiles,
freed memory kept by the allocator) give what TRL gives."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def test_trls_fused_head_scores_the_same_when_it_projects_labelled_positions_only(tiny_dir, monkeypatch):
    """rlft.speed.trl_patches: on the CPU TRL's compact path (labelled positions only) gives the full path's log-probs
    and gradients, and rlft switches it on."""
    import trl.trainer.distillation_trainer as trl_distill
    import trl.trainer.utils as trl_utils
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    from rlft.speed.trl_patches import score_labelled_positions_only

    for module in (trl_utils, trl_distill):  # TRL's own choice (an earlier run in this process may have set rlft's)
        monkeypatch.setattr(module, "_use_triton", getattr(module._use_triton, "original", module._use_triton))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    add_fused_lm_head(model, temperature=0.7, outputs=("log_probs", "entropy"))
    ids = torch.randint(4, 60, (4, 20), generator=torch.Generator().manual_seed(1))
    labels = ids.clone()
    labels[:, :14] = -100  # prompts: only the last 6 tokens are scored

    def run():
        model.zero_grad()
        out = model(input_ids=ids, labels=labels, fused_lm_head=True)
        (out.log_probs.sum() + out.entropy.sum()).backward()
        return out.log_probs.detach(), out.entropy.detach(), model.lm_head.weight.grad is None, \
            torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])

    assert not trl_utils._use_triton(torch.device("cpu"))  # TRL projects every position on the CPU
    full = run()
    assert score_labelled_positions_only() >= 1
    assert trl_utils._use_triton(torch.device("cpu"))
    compact = run()
    for a, b in zip(full, compact):
        assert a == b if isinstance(a, bool) else torch.allclose(a, b, atol=1e-5, rtol=1e-4)


def test_narrow_cpu_tiles_give_the_same_log_probs_and_gradients(monkeypatch):
    """rlft.speed.trl_patches.narrow_cpu_tiles: TRL's fused LM head with 8,192-wide vocabulary tiles gives what its
    32,768-wide tiles give, on a vocabulary wide enough to take several tiles."""
    import trl.trainer.utils as trl_utils
    from trl.kernels import ChunkedLogProbFunction

    from rlft.speed.trl_patches import CPU_TILE, narrow_cpu_tiles

    monkeypatch.setattr(trl_utils, "_CHUNKED_LOGPROB_CHUNK_SIZE", 32768)
    assert narrow_cpu_tiles() and trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE == CPU_TILE
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(20000, 32, generator=g) * 0.3
    targets = torch.randint(0, 20000, (40,), generator=g)

    def run(width):
        hidden = (torch.randn(40, 32, generator=torch.Generator().manual_seed(1))).requires_grad_()
        logps, entropy, *_ = ChunkedLogProbFunction.apply(hidden, weight, None, targets, 0.7, width, None, 1.0,
                                                         ("log_probs", "entropy"))
        (logps.sum() + 0.3 * entropy.sum()).backward()
        return logps.detach(), entropy.detach(), hidden.grad

    for wide, narrow in zip(run(32768), run(CPU_TILE)):
        assert torch.allclose(wide, narrow, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_lean_cpu_tiles_give_trls_log_probs_and_gradients(monkeypatch, temperature):
    """rlft.speed.trl_patches.lean_cpu_tiles: TRL's fused LM head folded by rlft's in-place tiles gives TRL's own
    log-probabilities and hidden-state gradients bit for bit and its entropy to float rounding, over several
    tiles (the last one a narrower slice); an entropy gradient and soft-capping go to TRL's folds."""
    import trl.kernels.chunked_logprob as kernels
    from trl.kernels import ChunkedLogProbFunction

    from rlft.speed.trl_patches import lean_cpu_tiles

    # TRL's own folds, also where an earlier run in this process installed rlft's (it is process-wide)
    originals = tuple(getattr(f, "original", f) for f in (kernels._forward_tile, kernels._backward_tile))
    monkeypatch.setattr(kernels, "_forward_tile", originals[0])
    monkeypatch.setattr(kernels, "_backward_tile", originals[1])
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(20000, 32, generator=g) * 0.3
    targets = torch.randint(0, 20000, (40,), generator=g)
    targets[:3] = torch.tensor([0, 8191, 19999])  # a tile's first and last entries, the vocabulary's last
    weights = torch.randn(40, generator=g)

    def run(outputs=("entropy",), entropy_weight=0.0, softcap=None):
        hidden = (torch.randn(40, 32, generator=torch.Generator().manual_seed(1))).requires_grad_()
        logps, entropy, *_ = ChunkedLogProbFunction.apply(hidden, weight, None, targets, temperature, 8192,
                                                         softcap, 1.0, outputs)
        loss = (logps * weights).sum() + (entropy_weight * entropy.sum() if entropy_weight else 0)
        loss.backward()
        return logps.detach(), entropy.detach() if entropy is not None else None, hidden.grad

    cases = [{}, {"outputs": ()}, {"entropy_weight": 0.3}, {"softcap": 5.0}]
    trl = [run(**case) for case in cases]
    assert lean_cpu_tiles() and lean_cpu_tiles()  # twice: wrapped once
    assert kernels._forward_tile.original is originals[0] and kernels._backward_tile.original is originals[1]
    lean = [run(**case) for case in cases]
    for case, (a_logps, a_entropy, a_grad), (b_logps, b_entropy, b_grad) in zip(cases, trl, lean):
        assert torch.equal(a_logps, b_logps), case
        assert torch.equal(a_grad, b_grad) if "entropy_weight" not in case else torch.allclose(
            a_grad, b_grad, atol=1e-5, rtol=1e-4), case
        if a_entropy is not None:
            assert torch.allclose(a_entropy, b_entropy, atol=1e-5, rtol=1e-5), case
    assert lean[0][1] is not None and lean[1][1] is None


_MALLINFO = """
import ctypes, sys
sys.path.insert(0, sys.argv[2])
from rlft.speed.trl_patches import keep_freed_memory, release_freed_memory
fields = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")
class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in fields]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype, libc.malloc.restype, libc.free.argtypes = Info, ctypes.c_void_p, [ctypes.c_void_p]
def rss():
    import os
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") >> 20
if sys.argv[1] in ("keep", "release"):
    assert keep_freed_memory()
block = libc.malloc(64 << 20)
ctypes.memset(block, 1, 64 << 20)
after = libc.malloc(1 << 20)  # a live block above it: the heap's top cannot shrink past it
alive = libc.mallinfo2()
libc.free(block)
if sys.argv[1] == "release":
    held = rss()
    assert release_freed_memory()
    print(held - rss())
else:
    print(alive.hblkhd >> 20, libc.mallinfo2().arena >> 20)
"""


def test_keep_freed_memory_serves_large_blocks_from_the_heap_and_keeps_them(tmp_path):
    """glibc: without it a 64 MB block is its own mapping, gone when freed; with it the block comes from the
    heap and its pages stay for the next step (rlft.speed.trl_patches)."""
    import ctypes
    import subprocess
    import sys
    from pathlib import Path

    if not hasattr(ctypes.CDLL(None), "mallinfo2"):
        pytest.skip("not glibc >= 2.33")
    root = str(Path(__file__).resolve().parents[2])
    script = tmp_path / "mallinfo.py"
    script.write_text(_MALLINFO)

    def run(mode):
        out = subprocess.run([sys.executable, str(script), mode, root], capture_output=True, text=True, check=True)
        return [int(x) for x in out.stdout.split()]

    mapped, kept = run("plain")
    assert mapped >= 64 and kept < 64
    mapped, kept = run("keep")
    assert mapped == 0 and kept >= 64
    [returned] = run("release")  # release_freed_memory gives the kept pages back, from the heap's middle too
    assert returned >= 60
